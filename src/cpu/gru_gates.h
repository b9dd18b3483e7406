// Fused pointwise GRU gate kernels (the GRUUnit / GRUUnitGradient pair), SIMD via Highway,
// forward and backward side by side. Raw pointers, contiguous rows, no Tensor.
//
// B rows (active batch), H hidden size. Row layouts:
//   g   (B x 3H): on entry to a forward kernel, the input projection x W_ih^T + b_ih in
//                 gate blocks [r | z | n]; on return the activations r, z, n (kept for
//                 backward).
//   gh  (B x 3H): the recurrent projection h_prev W_hh^T, no bias (b_hh passed separately,
//                 3H or nullptr when the GRU has no bias).
//   h_prev, h, hn, rh, dh, dh_prev, drh: B x H.
//   dg, dgh (B x 3H): gradients of the gate pre-activations [r | z | n] on the input side
//                 (dg) and on the recurrent side (dgh).
#pragma once

#include <cstdint>

namespace grux::cpu {

// Linear-before-reset form: n = tanh(g_n + r * (gh_n + b_hn)).
// Writes r, z, n into g, h' = (1 - z) * n + z * h_prev into h, and hn = gh_n + b_hn.
template <typename T>
void gru_gates_lbr_forward(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                           T* h, T* hn);
// Backward of the above given dh = dL/dh'. Writes dg = [dr, dz, dn] pre-activation
// gradients, dgh = [dr, dz, dn * r], and dh_prev = dh * z (the direct path only; the
// caller adds dgh W_hh).
template <typename T>
void gru_gates_lbr_backward(int64_t B, int64_t H, const T* g, const T* hn, const T* h_prev,
                            const T* dh, T* dg, T* dgh, T* dh_prev);

// Reset-before form, in two phases around the second recurrent GEMM:
//   rz: r, z from g and gh[:, 0:2H] (+ b_hh); writes r, z into g and rh = r * h_prev.
//   n:  n = tanh(g_n + gh_n + b_hn) where gh_n = rh W_hn^T; writes n into g and h'.
template <typename T>
void gru_gates_rb_forward_rz(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh,
                             const T* h_prev, T* rh);
template <typename T>
void gru_gates_rb_forward_n(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                            T* h);
// Backward, two phases around the GEMM drh = dg_n W_hn:
//   zn: writes dg's z and n blocks and dh_prev = dh * z.
//   r:  given drh = dL/d(r * h_prev), writes dg's r block and adds drh * r to dh_prev.
// In this form the recurrent-side gradient equals dg (dgh == dg).
template <typename T>
void gru_gates_rb_backward_zn(int64_t B, int64_t H, const T* g, const T* h_prev, const T* dh, T* dg,
                              T* dh_prev);
template <typename T>
void gru_gates_rb_backward_r(int64_t B, int64_t H, const T* g, const T* h_prev, const T* drh, T* dg,
                             T* dh_prev);

}  // namespace grux::cpu
