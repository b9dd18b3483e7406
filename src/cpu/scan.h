// Scan kernels over sequences stored as (O, T, C): O independent sequences, T steps scanned,
// C channels per step; element (o, t, c) at [(o * T + t) * C + c], contiguous.
#pragma once

#include <cstdint>

#include "core/visibility.h"

namespace grux::cpu {

// The element-wise combines with dedicated kernels. Each has an identity e with
// combine(e, x) == x exactly: -0.0 for sum, 1 for prod, -inf for max and logaddexp, +inf
// for min. max and min propagate NaN, like torch.cummax / cummin.
enum class ScanKind { sum, prod, max, min, logaddexp };

// How a scan walks time: backwards when reverse (y_t combines x_t .. x_{T-1}, in that
// order starting from the end); exclusive writes the state before step t, starting at the
// identity. `threads` is the team size (>= 1).
// Whether time is split into chunks over the threads: by default (auto) only when there are
// fewer independent sequences than threads or few channels; tests force both ways.
enum class TimeSplit { automatic, never, always };

struct ScanWalk {
  bool exclusive = false;
  bool reverse = false;
  int threads = 1;
  TimeSplit split = TimeSplit::automatic;
};

// y (O, T, C) = the scan of x (O, T, C) along T with `kind`.
template <typename T>
void scan_elementwise(ScanKind kind, const T* x, T* y, int64_t O, int64_t Tn, int64_t C,
                      const ScanWalk& walk);

// The cumulative sum of one contiguous sequence x (n) into y (n) with `threads` threads, time
// cut into super-blocks of share_bytes per thread (used by scan_elementwise for one channel,
// forward, inclusive; exposed for its tests).
template <typename T>
GRUX_INTERNAL void sum_scan_contiguous(const T* x, T* y, int64_t n, int threads,
                                       int64_t share_bytes);

// Diagonal affine recurrence h_t = a_t * h_{t-1} + b_t along T (h_{-1} = h0, or 0 when h0 is
// null). a, b, h are (O, T, C); h0 is (O, C).
template <typename T>
void affine_scan_diag(const T* a, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t C,
                      const ScanWalk& walk);

// The same recurrence in log space for positive terms: lh_t = log(exp(la_t + lh_{t-1}) +
// exp(lb_t)), i.e. log h for h_t = a_t h_{t-1} + b_t with la = log a, lb = log b; lh0 is
// log h0 (null: h0 = 0, lh0 = -inf). Products of a that underflow in linear space stay
// finite here.
template <typename T>
void log_affine_scan_diag(const T* la, const T* lb, const T* lh0, T* lh, int64_t O, int64_t Tn,
                          int64_t C, const ScanWalk& walk);

// Matrix affine recurrence h_t = A_t h_{t-1} + b_t along T: A (O, T, d, d) row-major, b and
// h (O, T, d), h0 (O, d) or null (zeros). Time is split into chunks over threads when O is
// smaller than the team; chunk maps compose as (A2 A1, A2 b1 + b2).
template <typename T>
void affine_scan_matrix(const T* A, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t d,
                        const ScanWalk& walk);

// Cumulative matrix products along T: y_t = x_0 x_1 ... x_t (each d x d, row-major), or with
// reverse y_t = x_t x_{t+1} ... x_{T-1}. x and y are (O, T, d, d). Not exclusive.
template <typename T>
void matmul_scan(const T* x, T* y, int64_t O, int64_t Tn, int64_t d, const ScanWalk& walk);

}  // namespace grux::cpu
