// Internal to the GRU: one layer-direction pass over time, forward and backward, in the packed
// sequence layout of ops/recurrent_layer.h, and the GRU as a cell of the stack driver
// (GruLayerCell, for ops/recurrent_stack.h). Used by gru.cpp and the stream.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_team.h"
#include "ops/gru_cell.h"
#include "ops/recurrent_layer.h"
#include "ops/recurrent_stack.h"

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

// A GRU layer's tensors, in state-dict order (ops::WeightField).
template <>
struct StackWeights<GruConfig> {
  using Weights = GruLayerWeights;
  static std::vector<WeightField<Weights>> fields(const GruConfig& c, int64_t l) {
    const int64_t H = c.hidden_size, in = c.layer_input_size(l);
    const Shape b = c.bias ? Shape{3 * H} : Shape{};
    return {{"weight_ih", &GruLayerWeights::w_ih, {3 * H, in}},
            {"weight_hh", &GruLayerWeights::w_hh, {3 * H, H}},
            {"bias_ih", &GruLayerWeights::b_ih, b, "bias is false"},
            {"bias_hh", &GruLayerWeights::b_hh, b, "bias is false"}};
  }
};

// The GRU as a cell of the stack driver (the interface ops/recurrent_stack.h lists). Its
// buffers: g (the gates), aux (hn or r h_prev: training, and reset-before's second product)
// and gh (one step's recurrent product).
template <typename T>
struct GruLayerCell {
  using Weights = GruLayerWeights;
  using Packed = PackedLayer<T>;
  GruKernels<T> k = gru_kernels<T>();
  GruConfig c;

  int64_t width() const { return c.hidden_size; }
  int64_t cell_width() const { return 0; }
  std::vector<BufferSpec> buffers() const {
    const int64_t H = c.hidden_size;
    const BufRows aux = c.form == GruForm::reset_before ? BufRows::per_row : BufRows::none;
    return {{3 * H, BufRows::per_row, BufRows::per_row},
            {H, BufRows::per_row, aux},
            {3 * H, BufRows::per_seq, BufRows::per_seq}};
  }
  Packed pack(const Weights& w, bool backward, Precision p) const {
    return pack_layer<T>(w, c.form, backward, p);
  }
  // Where the recurrent weights fit in half of each core's L2, or all the layer's weights in
  // three L2s (each thread then reads all the weights every step, from L3 where they do not
  // fit its L2). Timed against the units' split on two threads with 1 MiB of L2 each: about
  // 10% less time up to 2.3 MB of weights a layer (W5, W3 in bf16 and int8), 6% at 3 MB,
  // none from 3 to 7.4 MB, up to 13% more at H 1024 (6-24 MB).
  bool split_batch(const Packed& P) const {
    const int64_t l2 = cpu::l2_cache_bytes(), hh = packed_bytes(P.hh) + packed_bytes(P.hn);
    return hh <= l2 / 2 || hh + packed_bytes(P.ih) <= 3 * l2;
  }
  // Inference projects the input a chunk of steps at a time (no aux), training keeps g.
  void forward(const Packed& P, const SeqLayout& lay, const T* xp, const T* h0s, T* /*cs*/,
               T* const* buf, T* hs, bool /*training*/, int max_threads,
               const DenseIo<T>* io) const {
    gru_layer_forward<T>(k, P, lay, xp, h0s, buf[0], buf[1], hs, buf[2], nullptr, max_threads, io);
  }
  Weights gradients(int64_t layer, DType dt) const { return empty_layer_weights(c, layer, dt); }
  void backward(const Packed& P, const SeqLayout& lay, const T* xp, const T* states,
                const T* /*cs*/, const T* const* buf, T* dy, T* /*dc*/, T* dx, Weights& dw,
                T* dh0s) const {
    gru_layer_backward<T>(k, P, lay, xp, states, buf[0], buf[1], dy, dx, dw, dh0s);
  }
};

}  // namespace grux::ops
