// Parallel scans over tensor sequences: prefix and reduce scans with any associative combine
// (a C++ callable) or a built-in one with its own kernel (sum, prod, max, min, logaddexp,
// matmul), and linear recurrences h_t = a_t h_{t-1} + b_t (diagonal or matrix a_t, linear or
// log space) with their gradients.
//
// Order: a scan along `dim` of length T walks t = 0 .. T-1 and gives
//   y_t = x_0 . x_1 . ... . x_t              (inclusive, the default)
//   y_t = e . x_0 . ... . x_{t-1}           (exclusive; e = the identity, y_0 = e)
// where a . b = op(a, b) keeps the sequence order, so non-commutative combines (matmul) work.
// With reverse it walks from the end and keeps the order of the operands:
//   y_t = x_t . x_{t+1} . ... . x_{T-1}     (exclusive: x_{t+1} . ... . x_{T-1} . e)
// Work is O(T) combines (no padding to a power of two, no log-depth redundancy); the threads
// take independent sequences first and otherwise split time into chunks (docs/scan.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// A combine: op(earlier, later). The operands are slices of x along dim (x.select(dim, t)
// shaped); the result must have the slice shape and dtype (broadcasting inside is fine).
// With threads > 1 it is called from several threads at once, so it must be thread-safe
// (grux's tensor ops are); pass threads = 1 otherwise.
using ScanFn = std::function<Tensor(const Tensor& earlier, const Tensor& later)>;

enum class ScanOp { sum, prod, max, min, logaddexp, matmul };
const char* scan_op_name(ScanOp op);
// "sum", "prod", "max", "min", "logaddexp", "matmul"; anything else is an error listing them.
ScanOp parse_scan_op(const std::string& name);

struct ScanOptions {
  bool exclusive = false;
  bool reverse = false;
  // Exclusive scans with a callable need the identity (slice shape and dtype of x); the
  // built-ins know theirs (0, 1, -inf, +inf, -inf; matmul has no exclusive form).
  Tensor identity;
  int threads = 0;  // 0: grux chooses (OpenMP's setting); k >= 1: at most k (docs/api.md)
};

// y (x's shape) = the scan of x along dim (negative counts from the end) with op.
Tensor prefix_scan(const Tensor& x, int64_t dim, const ScanFn& op, const ScanOptions& opt = {});
// The built-ins, each with a dedicated kernel. sum/prod/max/min/logaddexp combine element-wise
// (the same as torch.cumsum / cumprod / cummax values / cummin values / logcumsumexp);
// matmul needs x (..., d, d) with dim not one of the last two, and gives cumulative matrix
// products (y_t = x_0 @ x_1 @ ... @ x_t). f32 and f64.
Tensor prefix_scan(const Tensor& x, int64_t dim, ScanOp op, const ScanOptions& opt = {});

// The combine of all of x along dim: x_0 . x_1 . ... . x_{T-1}, shaped like one slice.
// T must be >= 1. Only opt.threads is used.
Tensor reduce_scan(const Tensor& x, int64_t dim, const ScanFn& op, const ScanOptions& opt = {});
Tensor reduce_scan(const Tensor& x, int64_t dim, ScanOp op, const ScanOptions& opt = {});

struct AffineScanOptions {
  // Walk from the end: h_t = a_t h_{t+1} + b_t, with h_T = h0.
  bool reverse = false;
  // Diagonal only, all of a, b (and h0) > 0: computed as log h_t = logaddexp(log a_t +
  // log h_{t-1}, log b_t), i.e. a cumulative sum of log a followed by a cumulative
  // logsumexp, so long products of a that underflow in linear space do not.
  bool log_space = false;
  int threads = 0;
};

// The linear recurrence h_t = a_t h_{t-1} + b_t along dim, h_{-1} = h0 (zeros if undefined).
//   diagonal: a and b have the same shape S; h0 is S without dim; h has shape S.
//   matrix:   b has shape S ending in d, a has shape S + (d,) (a_t is d x d, applied to the
//             last dimension: h_t[i] = sum_j a_t[i, j] h_{t-1}[j] + b_t[i]); dim is not the
//             last dimension of b; h0 is S without dim.
// Maps compose as (a2 a1, a2 b1 + b2) without building (d+1) x (d+1) matrices.
Tensor affine_scan(const Tensor& a, const Tensor& b, int64_t dim, const Tensor& h0 = {},
                   const AffineScanOptions& opt = {});

// The diagonal recurrence entirely in log space: given log a, log b (same shape, any sign)
// and optionally log h0, returns log h. Exact where exp would underflow or overflow.
Tensor log_affine_scan(const Tensor& log_a, const Tensor& log_b, int64_t dim,
                       const Tensor& log_h0 = {}, const AffineScanOptions& opt = {});

struct AffineScanGrads {
  Tensor da, db, dh0;  // dh0 is undefined when h0 was undefined
};
// Gradients of affine_scan given its a and h0 (undefined if the forward had none), its result
// h and dh = d(loss)/dh (docs/api.md: the forward's tensors, its result, the upstream
// gradient, then dim and options), by a reverse scan: g_t = dh_t + a_{t+1}^T g_{t+1};
// db_t = g_t; da_t = g_t h_{t-1} (outer product in the matrix form); dh0 = a_0^T g_0 (with
// reverse, "next" and "previous" swap). Same options as the forward (log_space changes
// nothing: the function is the same).
AffineScanGrads affine_scan_backward(const Tensor& a, const Tensor& h0, const Tensor& h,
                                     const Tensor& dh, int64_t dim,
                                     const AffineScanOptions& opt = {});

// A scan benchmark problem, shared by `grux bench scan`, its tests and the cost model.
// Descriptor: [n{N}]t{T}[c{C}][d{D}], e.g. "t16777216" (one sequence of 2^24 scalars),
// "n8t4096c1536" (8 sequences of 1536 channels), "t8192d64" (8192 matrices 64 x 64).
// N sequences (default 1) of T steps, C channels per step (default 1); d > 0 makes each step a
// d x d matrix (matmul scans) or, for affine, a d x d map applied to a d-vector.
struct ScanProblem {
  int64_t N = 1, T = 0, C = 1, d = 0;
  DType dtype = DType::f32;
  static ScanProblem parse(const std::string& descriptor);  // errors name the descriptor
  std::string descriptor() const;
};

}  // namespace GRUX_API
