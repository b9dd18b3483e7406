// Internal to the GRU driver: one layer-direction pass over time, forward and backward, in the
// packed sequence layout of ops/recurrent_layer.h. Shared by the stack driver (gru.cpp) and
// the stream.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_team.h"
#include "ops/gru_cell.h"
#include "ops/recurrent_layer.h"

namespace grux::ops {

// Forward over all steps of one layer-direction.
//   xp (rows x in): packed layer input. h0s (N x H): initial state in sorted order.
//   Outputs: g (rows x 3H) gate activations (interleaved), aux (rows x H) hn or rh,
//   hs (rows x H) states. gh (N x 3H): scratch.
// With `io` (a layout of one length only), xp and hs are not used: io says where the steps'
// rows are. The results are the same bits either way. Inference (aux null) projects the
// input a chunk of steps at a time, just before the chunk's steps run.
// `team`, when given and of layer_team_size(), runs the time loop instead of an OpenMP region
// (the stream's frames are too short for OpenMP's fork and join). `max_threads` > 0 caps the
// threads (1: the calling thread only, no OpenMP region at all).
// `step0`: the index of the first step since the state h0s was set (a stream's frames so
// far). The recurrent products read their weights in an order that depends on the step's
// index (cpu::gemm_packed's `step`; bf16's sums follow it), so a stream that passes its frame
// count gets the bits of one run over all its frames.
template <typename T>
void gru_layer_forward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                       const T* xp, const T* h0s, T* g, T* aux, T* hs, T* gh,
                       ThreadTeam* team = nullptr, int max_threads = 0,
                       const DenseIo<T>* io = nullptr, int64_t step0 = 0);

// Backward over all steps of one layer-direction, given the forward's g and aux, and its
// states: h0s (N rows, sorted order) followed by hs (rows), in one buffer.
//   dyp (rows x H): on entry dL/dh at each packed row from above (output gradient plus the
//     h_n gradient at each sequence's last step); used as scratch.
//   Outputs (overwritten): dxp (rows x in), dw (the layer's weight gradients in PyTorch's
//     layout; biases only when P has them), dh0s (N x H, sorted order).
template <typename T>
void gru_layer_backward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                        const T* xp, const T* states, const T* g, const T* aux, T* dyp, T* dxp,
                        GruLayerWeights& dw, T* dh0s);

}  // namespace grux::ops
