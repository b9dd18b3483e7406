// Fused pointwise GRU gate kernels (the GRUUnit / GRUUnitGradient pair), SIMD via Highway,
// forward and backward side by side. Raw pointers, no Tensor.
//
// Gate layout ("interleaved"): hidden units are grouped in blocks of U = kUnit<T> (64 bytes:
// 16 f32, 8 f64); block b holds units [bU, bU + u_b), u_b = min(U, H - bU). A row of 3H gate
// values stores block b at columns [3bU, 3bU + 3u_b) as [r(u_b) | z(u_b) | n(u_b)]. A row of
// 2H (reset-before's r, z) stores block b at [2bU, 2bU + 2u_b) as [r | z]. Rows of H values
// (h, hn, rh, dh, dn, drh) are in plain unit order. So a block's gates are contiguous, and
// each kernel processes the unit blocks [b0, b1) of B rows: a thread owning those blocks
// needs no other thread's results between its GEMM and its gates.
//
//   g   (B x 3H): on entry to forward, the input projection x W_ih^T + b_ih; on return the
//                 activations r, z, n (kept for backward).
//   gh  (B x 3H): recurrent projection h_prev W_hh^T, no bias. b_hh: 3H (interleaved) or null.
//   dg, dgh (B x 3H): gradients of the gate pre-activations, input side and recurrent side.
// The forward kernels read h_prev and write h' with a row stride ldh >= H (H where they are
// packed rows; more where the states are columns of a wider output, as a bidirectional
// layer's); every other B x H array is H apart.
#pragma once

#include <cstdint>

#include "core/visibility.h"

namespace grux::cpu {

// Linear-before-reset: n = tanh(g_n + r * (gh_n + b_hh_n)). Writes r, z, n into g,
// h' = (1 - z) n + z h_prev into h, and hn = gh_n + b_hh_n (B x H). hn null (inference):
// writes h' only (g is left as it was).
template <typename T>
GRUX_INTERNAL void gru_gates_lbr_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g,
                                         const T* gh, const T* b_hh, const T* h_prev, T* h, T* hn,
                                         int64_t ldh);
// Its backward given dL/dh' = dh + dh_next (dh_next's first next_rows rows only; dh_next
// may be null: dh alone): dg = [dr, dz, dn] (pre-activation gradients), dgh = [dr, dz,
// dn * r], dh_prev = dL/dh' * z (the direct path only; the caller adds dgh W_hh).
// dgh_all (or null) receives a second copy of dgh, streamed to memory: dgh is then a
// buffer the step's dL/dh_prev product reads at once (kept in cache, reused from step to
// step), dgh_all every step's rows for the weight gradient after the time loop.
// dg_sum, dgh_sum (3H, the columns of dg; both null or both set): each row of dg and dgh is
// added to them, rows in order (the bias gradients, summed while the rows are in registers).
template <typename T>
GRUX_INTERNAL void gru_gates_lbr_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                                          const T* hn, const T* h_prev, const T* dh,
                                          const T* dh_next, int64_t next_rows, T* dg, T* dgh,
                                          T* dgh_all, T* dh_prev, T* dg_sum = nullptr,
                                          T* dgh_sum = nullptr);

// Reset-before, in two phases around the second recurrent GEMM:
//   rz: ghrz (B x 2H, [r | z] blocks) = h_prev W_h{r,z}^T. Writes r, z into g and
//       rh = r * h_prev (B x H).
//   n:  ghn (B x H) = rh W_hn^T. n = tanh(g_n + ghn + b_hn); writes n into g and h'.
template <typename T>
GRUX_INTERNAL void gru_gates_rb_forward_rz(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g,
                                           const T* ghrz, const T* b_hh, const T* h_prev, T* rh,
                                           int64_t ldh);
template <typename T>
GRUX_INTERNAL void gru_gates_rb_forward_n(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g,
                                          const T* ghn, const T* b_hh, const T* h_prev, T* h,
                                          int64_t ldh);
// Backward, two phases around the GEMM drh = dn W_hn:
//   zn: writes dg's z and n, dn (B x H, the n gradient in unit order) and dh_prev = dh * z.
//   r:  given drh = dL/d(r * h_prev), writes dg's r, drz (B x 2H, [dr | dz] blocks) and adds
//       drh * r to dh_prev. The caller then adds drz W_h{r,z}. (Recurrent side == dg here.)
template <typename T>
GRUX_INTERNAL void gru_gates_rb_backward_zn(int64_t B, int64_t H, int64_t b0, int64_t b1,
                                            const T* g, const T* h_prev, const T* dh, T* dg, T* dn,
                                            T* dh_prev);
template <typename T>
GRUX_INTERNAL void gru_gates_rb_backward_r(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                                           const T* h_prev, const T* drh, T* dg, T* drz,
                                           T* dh_prev);

// Column of gate q (0 r, 1 z, 2 n) of unit j in the interleaved 3H layout, and of gate q
// (0 r, 1 z) in the 2H layout.
template <typename T>
int64_t gate_col3(int64_t H, int64_t q, int64_t j);
template <typename T>
int64_t gate_col2(int64_t H, int64_t q, int64_t j);

}  // namespace grux::cpu
