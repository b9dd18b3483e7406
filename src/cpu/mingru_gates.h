// Fused pointwise minGRU kernels (Feng et al. 2024): the scan coefficients from the
// projections, and the chain from the scan's gradient back to the projections.
//
// Sizes: N sequences, H hidden units. Rows are (t, n) pairs in time-major order: every
// kernel handles rows [r0, r1) of arrays whose row 0 is step t0 (so the driver can pass a
// chunk of time), row r holding step t0 + r / N of sequence r % N.
//   k    (rows x 2H): the projection x W^T, no bias: columns [0, H) the gate's k_z, [H, 2H)
//                     the candidate's v. bias (2H) is added on the fly (null: none).
//   len  (N): valid lengths; rows with t >= len[n] are padding. Null: no padding.
//   a, b (rows x H):  coefficients of h_t = a_t h_{t-1} + b_t (or their logarithms).
// With z = sigmoid(k_z) and h~ = v (linear) or g(v) (log space; g(v) = v + 0.5 for v >= 0,
// sigmoid(v) below), a = 1 - z (computed as sigmoid(-k_z), exact where 1 - z would cancel).
#pragma once

#include <cstdint>

#include "core/visibility.h"

namespace grux::cpu {

// Linear variant: a = 1 - z, b = z * v; padding rows a = 1, b = 0 (the state is held).
template <typename T>
GRUX_INTERNAL void mingru_forward_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                                         const int64_t* len, const T* k, const T* bias, T* a, T* b);

// Log-space variant: la = log(1 - z) = -softplus(k_z), lb = log z + log g(v) =
// -softplus(-k_z) + log g(v); padding rows la = 0, lb = -inf.
template <typename T>
GRUX_INTERNAL void mingru_forward_log_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N,
                                             int64_t H, const int64_t* len, const T* k,
                                             const T* bias, T* la, T* lb);

// Decay of the next step, for the reverse scan of the backward: a_next[r] = a[r + N] (a as
// in mingru_forward_coeffs, 1 on padding), and 0 on the last step's rows (r + N >= rows).
// `rows` is the total row count (T * N).
template <typename T>
GRUX_INTERNAL void mingru_backward_decay(int64_t r0, int64_t r1, int64_t rows, int64_t t0,
                                         int64_t N, int64_t H, const int64_t* len, const T* k,
                                         const T* bias, T* a_next);

// Chain rule from G (rows x H) = dL/dh_t (all paths) to dk (rows x 2H):
//   dk_z = G (h~ - h_{t-1}) z (1 - z),  dk_v = G z g'(v) (g' = 1 in the linear variant);
// padding rows get 0. h (rows x H) holds the states, h0 (N x H) the state before the arrays'
// first step (in linear space; null: zeros). dh0 (N x H, null: not wanted) gets G (1 - z)
// for the first step's rows (which must be valid steps, as t = 0 always is).
template <typename T>
GRUX_INTERNAL void mingru_backward(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                                   const int64_t* len, bool log_space, const T* k, const T* bias,
                                   const T* h0, const T* h, const T* G, T* dk, T* dh0);

}  // namespace grux::cpu
