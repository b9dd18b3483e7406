// Internal to the GRU driver: the packed sequence layout and one layer-direction pass over
// time, forward and backward. Shared by the stack driver (gru.cpp) and the stream.
//
// Packed layout: sequences are sorted by length, longest first (stable), so that at step s
// the active sequences are a prefix of the sorted order: bs[s] rows starting at packed row
// off[s]. Row (s, j) holds sequence perm[j] at time s (forward direction) or at time
// len - 1 - s (reverse direction: each sequence's valid part, reversed). Work follows the
// sum of lengths, not N * T.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_team.h"
#include "ops/gru_cell.h"

namespace grux::ops {

struct SeqLayout {
  int64_t T = 0, N = 0, S = 0;  // padded length, batch, longest valid length
  std::vector<int64_t> len;     // per original batch index
  std::vector<int64_t> perm;    // sorted position j -> original batch index
  std::vector<int64_t> bs;      // active rows at step s (S entries; bs[0] == N)
  std::vector<int64_t> off;     // first packed row of step s (S + 1 entries)
  int64_t rows() const { return off[S]; }
  // Every sequence of length T and none reordered: packed row s * N + n is (time s, batch n),
  // the time-major row of the caller's (T, N, .) arrays.
  bool time_major() const {
    if (rows() != T * N) return false;
    for (int64_t j = 0; j < N; ++j)
      if (perm[j] != j) return false;
    return true;
  }
  // Time index of packed row (s, j) in direction dir (0 forward, 1 reverse).
  int64_t time(int64_t s, int64_t j, int dir) const { return dir == 0 ? s : len[perm[j]] - 1 - s; }
  // Its inverse: the step of time t of original sequence n (valid when t < len[n]).
  int64_t step(int64_t t, int64_t n, int dir) const { return dir == 0 ? t : len[n] - 1 - t; }
};

// Layout for N sequences of padded length T; `lengths` null means all T. Lengths must
// already be validated (1 <= len <= T).
SeqLayout make_seq_layout(int64_t T, int64_t N, const int64_t* lengths);

// Threads for one layer-direction's time loop: all of OpenMP's, fewer when H has too few
// unit blocks to share.
int gru_team_size(int64_t H, int64_t unit);

// Where a layout whose sequences all have length T (nothing sorted: packed row s * N + n is
// sequence n at step s) reads its input and writes its states in place of xp and hs, with no
// copy before or after: step s, at time t = s (or T - 1 - s with `reverse`), reads its N
// input rows at x + t * N * ldx, ldx apart, and writes its N states at h + t * N * ldh, ldh
// apart (a direction's columns of a bidirectional layer's output). h0s's rows are then ldh
// apart too.
// x_step / h_step: the distance between two times' first rows (0: N rows, N * ldx / N * ldh;
// more for a part of a batch).
template <typename T>
struct DenseIo {
  const T* x;
  int64_t ldx;
  T* h;
  int64_t ldh;
  bool reverse;
  int64_t x_step = 0, h_step = 0;
};

// Forward over all steps of one layer-direction.
//   xp (rows x in): packed layer input. h0s (N x H): initial state in sorted order.
//   Outputs: g (rows x 3H) gate activations (interleaved), aux (rows x H) hn or rh,
//   hs (rows x H) states. gh (N x 3H): scratch.
// With `io` (a layout of one length only), xp and hs are not used: io says where the steps'
// rows are. The results are the same bits either way. Inference (aux null) projects the
// input a chunk of steps at a time, just before the chunk's steps run.
// `team`, when given and of gru_team_size(), runs the time loop instead of an OpenMP region
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
