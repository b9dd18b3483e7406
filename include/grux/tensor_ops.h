// Tensor operations: broadcasting element-wise ops (NumPy's rules), matmul (torch.matmul's
// semantics, through the BLAS) and reductions (sum, mean, max, min, argmax, argmin).
#pragma once

#include <cstdint>
#include <vector>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Common contract of every op here:
// - inputs may be strided views; the result is a new contiguous tensor (never a view);
// - all tensor arguments must have the same dtype (no promotion) and the same device, else
//   grux::Error names the op, the argument and both dtypes / devices;
// - only CPU kernels exist in this build.

// Broadcast shape of `a` and `b` under NumPy's rules: shapes are aligned at their last
// dimension; each pair of sizes must be equal or one of them 1 (a missing dimension counts
// as 1); the result takes the larger (a 0 paired with 1 gives 0). `op` names the caller in
// the error: "add: shapes (2, 3) and (4,) do not broadcast: dimension -1 is 3 vs 4".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// Binary element-wise ops. a: A, b: B -> broadcast_shapes(A, B). f32 and f64; i64 for add,
// sub, mul, maximum, minimum (wrapping on overflow), not for div and pow (they would
// truncate or need a float result: convert first with to(DType::f64)).
// maximum / minimum return NaN where either input is NaN.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);

// The same with a scalar on one side (a 0-d tensor of the tensor's dtype): shape of the
// tensor argument. For i64 tensors the scalar must be a whole number in range.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor pow(const Tensor& a, double b);
Tensor add(double a, const Tensor& b);
Tensor sub(double a, const Tensor& b);
Tensor mul(double a, const Tensor& b);
Tensor div(double a, const Tensor& b);
Tensor pow(double a, const Tensor& b);

// Unary element-wise ops: shape in = shape out. f32 and f64; i64 for neg, abs, relu only.
// sigmoid(x) = 1 / (1 + exp(-x)); relu(x) = max(x, 0) (NaN stays NaN).
Tensor neg(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor relu(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor sqrt(const Tensor& t);

// Matrix product with torch.matmul's semantics. f32 and f64 (through the BLAS).
//   a (K),          b (K)          -> ()              dot product
//   a (M, K),       b (K, N)       -> (M, N)
//   a (K),          b (..., K, N)  -> (..., N)        a is treated as (1, K), that 1 removed
//   a (..., M, K),  b (K)          -> (..., M)        b is treated as (K, 1), that 1 removed
//   a (..A, M, K),  b (..B, K, N)  -> (broadcast_shapes(..A, ..B), M, N)
// The K of a and of b must agree; the error names both shapes and both dimensions.
// Transposed views (either of the last two strides 1) go to the BLAS without a copy.
Tensor matmul(const Tensor& a, const Tensor& b);

// Reductions over `dims` (each in [-rank, rank), no repeats). keepdim keeps each reduced
// dimension with size 1; otherwise they are removed. An empty `dims` reduces nothing
// (NumPy's axis=()). The overloads without dims reduce over all elements to a 0-d tensor.
// sum: f32, f64, i64 (same dtype out). f32 and f64 sums accumulate in double.
// mean: f32, f64 (i64 would need a float result). Empty reductions: sum 0, mean NaN.
// max / min: f32, f64, i64; NaN wins; reducing over a size-0 dimension is an error.
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor max(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor min(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor sum(const Tensor& t);
Tensor mean(const Tensor& t);
Tensor max(const Tensor& t);
Tensor min(const Tensor& t);

// Max / min over one dimension with the position of the first extremum along it
// (i64, same shape as values). NaN wins and its position is returned.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max_with_indices(const Tensor& t, int64_t dim, bool keepdim = false);
ValuesIndices min_with_indices(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim = false);

}  // namespace GRUX_API
