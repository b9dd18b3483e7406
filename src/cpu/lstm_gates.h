// Fused pointwise LSTM gate kernels, SIMD via Highway, forward and backward side by side. Raw
// pointers, no Tensor. The GRU's kernels are the same level for the other cell (gru_gates.h).
//
// Equations (PyTorch nn.LSTM): with a = x W_ih^T + b_ih + h W_hh^T + b_hh split into the gates
// i, f, g, o,  i = s(a_i), f = s(a_f), g = tanh(a_g), o = s(a_o),
//   c' = f * c + i * g,   m = o * tanh(c'),   h' = m (or h' = m W_hr^T with a projection).
//
// Gate layout ("interleaved", as the GRU's): hidden units in blocks of U = kUnit<T> (64 bytes);
// block b holds units [bU, bU + u_b), u_b = min(U, H - bU), and a row of 4H gate values stores
// it at columns [4bU, 4bU + 4u_b) as [i(u_b) | f(u_b) | g(u_b) | o(u_b)]. Rows of H values (c,
// m, dm, dc) are in plain unit order, H apart; h' and m are written ldh apart (ldh >= H: the
// columns of a wider output). Each kernel processes the unit blocks [b0, b1) of B rows.
#pragma once

#include <cstdint>

#include "core/visibility.h"

namespace grux::cpu {

// Forward: a (B x 4H) holds every gate's pre-activation (both biases added). Writes
// c' = f c_prev + i g into c (B x H; may be c_prev itself: each element is read before it is
// written) and m = o tanh(c') into m (B rows, ldm apart). With `save` the activations i, f, g,
// o replace the pre-activations in a (the backward pass reads them); without, a is read only.
template <typename T>
GRUX_INTERNAL void lstm_gates_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* a,
                                      const T* c_prev, T* c, T* m, int64_t ldm, bool save);

// Backward of one step, given the forward's activations (act, B x 4H), c' (c, B x H) and
// c_prev (B x H), and dm = dL/dm (B x H) plus dm_next (its first next_rows rows, or null: the
// next step's recurrent gradient, added here). dc (B x H) holds dL/dc' from the next step (or
// from c_n) on entry and dL/dc_prev on return. Writes the gates' pre-activation gradients
// da (B x 4H, interleaved). da_sum (4H, or null): each row of da is added to it, rows in
// order (the bias gradient, summed while the row is in registers).
template <typename T>
GRUX_INTERNAL void lstm_gates_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act,
                                       const T* c, const T* c_prev, const T* dm, const T* dm_next,
                                       int64_t next_rows, T* dc, T* da, T* da_sum);

// Column of gate q (0 i, 1 f, 2 g, 3 o) of unit j in the interleaved 4H layout.
template <typename T>
int64_t gate_col4(int64_t H, int64_t q, int64_t j);

}  // namespace grux::cpu
