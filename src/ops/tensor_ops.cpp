// Tensor-level element-wise ops, matmul and reductions: argument checks, broadcasting and
// layout decisions (which kernel, which strides); the loops live in src/cpu/.
#include "grux/tensor_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/reduce.h"

namespace grux {

namespace {

using cpu::BinaryOp;
using cpu::UnaryOp;

// Calls fn(T{}) with T the C++ type of `dtype`.
template <typename Fn>
void dispatch(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::i64:
      return fn(int64_t{});
  }
  GRUX_ASSERT(false);
}

void check_cpu(const char* op, const char* name, const Tensor& t) {
  if (t.device() != Device::cpu())
    throw Error(fmt::format("{}: {} is on {}, but this build has kernels for cpu only", op, name,
                            t.device().str()));
}

// Order matters for the messages: a device mismatch is reported as such even when the
// dtypes differ too, because moving the tensor is what the caller has to fix first.
void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, "a", a);
  check_defined(op, "b", b);
  check_same_device(op, "a", a, "b", b);
  check_cpu(op, "a", a);
  check_same_dtype(op, "a", a, "b", b);
}

int64_t op_dim(const char* op, int64_t d, int64_t rank) {
  const int64_t w = d < 0 ? d + rank : d;
  if (w < 0 || w >= rank)
    throw Error(fmt::format("{}: dimension {} out of range for a tensor of rank {}", op, d, rank));
  return w;
}

// The first dimension (counted from the end, -1 = last) where `a` and `b` do not broadcast.
std::optional<int64_t> broadcast_mismatch(const Shape& a, const Shape& b) {
  const int64_t na = static_cast<int64_t>(a.size()), nb = static_cast<int64_t>(b.size());
  for (int64_t k = 1; k <= std::min(na, nb); ++k) {
    const int64_t sa = a[na - k], sb = b[nb - k];
    if (sa != sb && sa != 1 && sb != 1) return -k;
  }
  return std::nullopt;
}

Shape broadcast_unchecked(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t k = 1; k <= n; ++k) {
    const int64_t sa = k <= a.size() ? a[a.size() - k] : 1;
    const int64_t sb = k <= b.size() ? b[b.size() - k] : 1;
    out[n - k] = sa == 1 ? sb : sa;
  }
  return out;
}

// t's strides as seen through a broadcast to `out` (t's shape right-aligned in out): size-1
// and missing dimensions get stride 0, so every output index maps to the element it reads.
Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out) {
  Shape st(out.size(), 0);
  const size_t lead = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) st[lead + d] = strides[d];
  return st;
}

// A shape and one stride vector per operand, with size-1 dimensions dropped and neighbours
// merged wherever every operand steps through them as one run. The kernels then loop over as
// few and as long dimensions as possible: a contiguous tensor plus a broadcast scalar becomes
// a single dimension. Never empty: a 0-d or all-ones shape becomes (1).
struct Layout {
  Shape shape;
  std::vector<Shape> strides;
};
Layout coalesce(const Shape& shape, const std::vector<Shape>& strides) {
  Layout out;
  out.strides.resize(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.shape.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k)
      merge = out.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out.shape.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) out.strides[k].back() = strides[k][d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) out.strides[k].push_back(strides[k][d]);
    }
  }
  if (out.shape.empty()) {
    out.shape.push_back(1);
    for (auto& s : out.strides) s.push_back(0);
  }
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = cpu::binary_op_name(op);
  check_pair(name, a, b);
  if (a.dtype() == DType::i64 && !cpu::binary_supports_i64(op))
    throw Error(fmt::format(
        "{}: dtype i64 is not supported (the result would need a float dtype; convert the "
        "arguments with to(DType::f64) first)",
        name));
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* dp = out.data<T>();
    if (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous())
      return cpu::binary_contiguous(op, out.numel(), ap, bp, dp);
    const Layout l = coalesce(out_shape, {broadcast_strides(a.shape(), a.strides(), out_shape),
                                          broadcast_strides(b.shape(), b.strides(), out_shape)});
    if (l.shape.size() == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1)
      return cpu::binary_contiguous(op, out.numel(), ap, bp, dp);
    cpu::binary_strided(op, static_cast<int64_t>(l.shape.size()), l.shape.data(), ap,
                        l.strides[0].data(), bp, l.strides[1].data(), dp);
  });
  return out;
}

// A 0-d tensor holding `value` in `like`'s dtype, for the scalar overloads.
Tensor scalar_like(const char* op, double value, const Tensor& like) {
  check_defined(op, "tensor", like);
  check_cpu(op, "tensor", like);
  if (like.dtype() == DType::i64) {
    // 2^63 is exactly representable; every double below it in magnitude converts safely.
    const double limit = 9223372036854775808.0;
    if (!(std::trunc(value) == value && value >= -limit && value < limit))
      throw Error(
          fmt::format("{}: scalar {} is not a whole number in the range of i64, but the "
                      "tensor has dtype i64",
                      op, value));
  }
  return Tensor::full({}, value, like.dtype());
}

Tensor binary(BinaryOp op, const Tensor& a, double b) {
  return binary(op, a, scalar_like(cpu::binary_op_name(op), b, a));
}
Tensor binary(BinaryOp op, double a, const Tensor& b) {
  return binary(op, scalar_like(cpu::binary_op_name(op), a, b), b);
}

Tensor unary(UnaryOp op, const Tensor& t) {
  const char* name = cpu::unary_op_name(op);
  check_defined(name, "t", t);
  check_cpu(name, "t", t);
  if (t.dtype() == DType::i64 && !cpu::unary_supports_i64(op))
    throw Error(
        fmt::format("{}: dtype i64 is not supported (convert with to(DType::f64) first)", name));
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  if (out.numel() == 0) return out;
  dispatch(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* sp = t.data<T>();
    T* dp = out.data<T>();
    if (t.is_contiguous()) return cpu::unary_contiguous(op, t.numel(), sp, dp);
    const Layout l = coalesce(t.shape(), {t.strides()});
    cpu::unary_strided(op, static_cast<int64_t>(l.shape.size()), l.shape.data(), sp,
                       l.strides[0].data(), dp);
  });
  return out;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (auto d = broadcast_mismatch(a, b)) {
    const int64_t sa = a[a.size() + *d], sb = b[b.size() + *d];
    throw Error(fmt::format("{}: shapes {} and {} do not broadcast: dimension {} is {} vs {}", op,
                            shape_str(a), shape_str(b), *d, sa, sb));
  }
  return broadcast_unchecked(a, b);
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::div, a, b);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::maximum, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::minimum, a, b);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::pow, a, b);
}

Tensor add(const Tensor& a, double b) {
  return binary(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, double b) {
  return binary(BinaryOp::sub, a, b);
}
Tensor mul(const Tensor& a, double b) {
  return binary(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, double b) {
  return binary(BinaryOp::div, a, b);
}
Tensor maximum(const Tensor& a, double b) {
  return binary(BinaryOp::maximum, a, b);
}
Tensor minimum(const Tensor& a, double b) {
  return binary(BinaryOp::minimum, a, b);
}
Tensor pow(const Tensor& a, double b) {
  return binary(BinaryOp::pow, a, b);
}
Tensor add(double a, const Tensor& b) {
  return binary(BinaryOp::add, a, b);
}
Tensor sub(double a, const Tensor& b) {
  return binary(BinaryOp::sub, a, b);
}
Tensor mul(double a, const Tensor& b) {
  return binary(BinaryOp::mul, a, b);
}
Tensor div(double a, const Tensor& b) {
  return binary(BinaryOp::div, a, b);
}
Tensor pow(double a, const Tensor& b) {
  return binary(BinaryOp::pow, a, b);
}

Tensor neg(const Tensor& t) {
  return unary(UnaryOp::neg, t);
}
Tensor exp(const Tensor& t) {
  return unary(UnaryOp::exp, t);
}
Tensor log(const Tensor& t) {
  return unary(UnaryOp::log, t);
}
Tensor sigmoid(const Tensor& t) {
  return unary(UnaryOp::sigmoid, t);
}
Tensor tanh(const Tensor& t) {
  return unary(UnaryOp::tanh, t);
}
Tensor relu(const Tensor& t) {
  return unary(UnaryOp::relu, t);
}
Tensor abs(const Tensor& t) {
  return unary(UnaryOp::abs, t);
}
Tensor sqrt(const Tensor& t) {
  return unary(UnaryOp::sqrt, t);
}

// ---------------------------------------------------------------------------------------------
// matmul

namespace {

// How the GEMM can read a rows x cols matrix whose element (i, j) is at i * rs + j * cs:
// as row-major with leading dimension ld (trans = false), or as the transpose of a row-major
// cols x rows matrix (trans = true; a transposed view). Neither when no stride is 1.
// The stride of a size-1 dimension never matters, so it does not disqualify a layout.
struct GemmLayout {
  bool usable = false;
  bool trans = false;
  int64_t ld = 0;
};
GemmLayout gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols)))
    return {true, false, rows == 1 ? std::max<int64_t>(1, cols) : rs};
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(1, rows)))
    return {true, true, cols == 1 ? std::max<int64_t>(1, rows) : cs};
  return {};
}

// The operand itself when its last two dimensions suit the GEMM, else a contiguous copy
// (which always does).
Tensor gemm_ready(const Tensor& t, GemmLayout& layout) {
  const int64_t r = t.dim();
  layout = gemm_layout(t.shape()[r - 2], t.shape()[r - 1], t.strides()[r - 2], t.strides()[r - 1]);
  if (layout.usable) return t;
  Tensor c = t.contiguous();
  layout = gemm_layout(c.shape()[r - 2], c.shape()[r - 1], c.strides()[r - 2], c.strides()[r - 1]);
  GRUX_ASSERT(layout.usable);
  return c;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const char* op = "matmul";
  check_pair(op, a_in, b_in);
  if (a_in.dtype() == DType::i64)
    throw Error("matmul: dtype i64 is not supported (expected f32 or f64)");
  if (a_in.dim() == 0 || b_in.dim() == 0)
    throw Error(fmt::format(
        "matmul: both arguments need at least 1 dimension, got a {} and b {} (use mul for "
        "scalars)",
        shape_str(a_in.shape()), shape_str(b_in.shape())));
  // A 1-D argument is a row (a) or a column (b) vector whose extra dimension is removed from
  // the result afterwards.
  const Tensor a0 = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  const Tensor b0 = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  const int64_t M = a0.size(-2), K = a0.size(-1), N = b0.size(-1);
  if (b0.size(-2) != K)
    throw Error(fmt::format(
        "matmul: inner dimensions differ: a {} has {} in dimension -1 but b {} has {} in "
        "dimension {}",
        shape_str(a_in.shape()), K, shape_str(b_in.shape()), b0.size(-2),
        b_in.dim() == 1 ? -1 : -2));

  const Shape a_batch(a0.shape().begin(), a0.shape().end() - 2);
  const Shape b_batch(b0.shape().begin(), b0.shape().end() - 2);
  if (auto d = broadcast_mismatch(a_batch, b_batch))
    throw Error(fmt::format(
        "matmul: batch dimensions {} of a {} and {} of b {} do not broadcast: dimension {} of "
        "the batch is {} vs {}",
        shape_str(a_batch), shape_str(a_in.shape()), shape_str(b_batch), shape_str(b_in.shape()),
        *d, a_batch[a_batch.size() + *d], b_batch[b_batch.size() + *d]));
  const Shape batch = broadcast_unchecked(a_batch, b_batch);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::zeros(out_shape, a_in.dtype());

  // With K == 0 the product is all zeros and the operands hold no elements (their strides
  // need not describe any layout), so the GEMM is called only when there is something to read.
  if (out.numel() > 0 && K > 0) {
    GemmLayout la, lb;
    const Tensor a = gemm_ready(a0, la);
    const Tensor b = gemm_ready(b0, lb);
    const Shape a_bst =
        broadcast_strides(a_batch, Shape(a.strides().begin(), a.strides().end() - 2), batch);
    const Shape b_bst =
        broadcast_strides(b_batch, Shape(b.strides().begin(), b.strides().end() - 2), batch);
    dispatch(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_integral_v<T>) {
        const T* ap = a.data<T>();
        const T* bp = b.data<T>();
        T* cp = out.data<T>();
        // When b is shared by the whole batch and a's rows over (batch, M) are evenly spaced
        // (a linear layer on a (B, T, K) input), the batch folds into M: one larger GEMM.
        if (!la.trans &&
            std::all_of(b_bst.begin(), b_bst.end(), [](int64_t s) { return s == 0; })) {
          Shape rows_shape = batch, rows_strides = a_bst;
          rows_shape.push_back(M);
          rows_strides.push_back(la.ld);
          const Layout rows = coalesce(rows_shape, {rows_strides});
          if (rows.shape.size() == 1) {
            const int64_t ld = std::max(rows.strides[0][0], std::max<int64_t>(1, K));
            cpu::gemm<T>(false, lb.trans, rows.shape[0], N, K, ap, ld, bp, lb.ld, nullptr, false,
                         cp, N);
            return;
          }
        }
        const int64_t nb = static_cast<int64_t>(batch.size());
        std::vector<int64_t> index(nb, 0);
        int64_t a_off = 0, b_off = 0;
        const int64_t batch_count = out.numel() / (M * N);
        for (int64_t i = 0; i < batch_count; ++i) {
          cpu::gemm<T>(la.trans, lb.trans, M, N, K, ap + a_off, la.ld, bp + b_off, lb.ld, nullptr,
                       false, cp + i * M * N, N);
          for (int64_t d = nb - 1; d >= 0; --d) {
            if (++index[d] < batch[d]) {
              a_off += a_bst[d];
              b_off += b_bst[d];
              break;
            }
            index[d] = 0;
            a_off -= a_bst[d] * (batch[d] - 1);
            b_off -= b_bst[d] * (batch[d] - 1);
          }
        }
      }
    });
  }

  Shape final_shape = batch;
  if (a_in.dim() > 1) final_shape.push_back(M);
  if (b_in.dim() > 1) final_shape.push_back(N);
  return out.view(final_shape);
}

// ---------------------------------------------------------------------------------------------
// Reductions

namespace {

struct ReducePlan {
  std::vector<bool> reduced;  // per input dimension
  Shape keep_shape;           // output shape with reduced dimensions as size 1
  Shape out_strides;          // strides into the output per input dimension, 0 where reduced
  int64_t count = 1;          // elements folded into each output slot
};

ReducePlan plan_reduction(const char* op, const Tensor& t, const std::vector<int64_t>& dims) {
  ReducePlan p;
  p.reduced.assign(t.dim(), false);
  for (int64_t d : dims) {
    const int64_t w = op_dim(op, d, t.dim());
    if (p.reduced[w]) throw Error(fmt::format("{}: dimension {} is listed twice in dims", op, w));
    p.reduced[w] = true;
  }
  p.keep_shape = t.shape();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (p.reduced[d]) p.count *= t.shape()[d], p.keep_shape[d] = 1;
  p.out_strides = contiguous_strides(p.keep_shape);
  for (int64_t d = 0; d < t.dim(); ++d)
    if (p.reduced[d]) p.out_strides[d] = 0;
  return p;
}

Shape result_shape(const ReducePlan& p, bool keepdim) {
  if (keepdim) return p.keep_shape;
  Shape s;
  for (size_t d = 0; d < p.reduced.size(); ++d)
    if (!p.reduced[d]) s.push_back(p.keep_shape[d]);
  return s;
}

std::vector<int64_t> all_dims(const Tensor& t) {
  std::vector<int64_t> d(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) d[i] = i;
  return d;
}

Tensor sum_or_mean(const char* op, bool is_mean, const Tensor& t, const std::vector<int64_t>& dims,
                   bool keepdim) {
  check_defined(op, "t", t);
  check_cpu(op, "t", t);
  if (is_mean && t.dtype() == DType::i64)
    throw Error(
        "mean: dtype i64 is not supported (the mean needs a float dtype; convert with "
        "to(DType::f64) first)");
  const ReducePlan p = plan_reduction(op, t, dims);
  Tensor out = Tensor::empty(p.keep_shape, t.dtype());
  const int64_t n_out = out.numel();
  dispatch(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // f32 sums accumulate in double: a float accumulator loses the low bits of every addend
    // once the running sum is large (error grows like n * 2^-24, so summing 10^7 ones in
    // float stops at 16777216), while a double accumulator keeps the error near 2^-24 for any
    // length a tensor can have, and costs nothing next to the memory traffic.
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
    std::vector<Acc> acc(n_out, Acc(0));
    if (t.numel() > 0) {
      const Layout l = coalesce(t.shape(), {t.strides(), p.out_strides});
      cpu::reduce_sum<T, Acc>(static_cast<int64_t>(l.shape.size()), l.shape.data(), t.data<T>(),
                              l.strides[0].data(), acc.data(), l.strides[1].data());
    }
    T* dp = out.data<T>();
    for (int64_t i = 0; i < n_out; ++i)
      dp[i] = is_mean ? static_cast<T>(acc[i] / static_cast<Acc>(p.count)) : static_cast<T>(acc[i]);
  });
  return out.view(result_shape(p, keepdim));
}

// Max or min over `dims`; with `index_dim` >= 0 (then dims == {index_dim}) also the position
// along it.
ValuesIndices extremum(const char* op, bool is_max, const Tensor& t,
                       const std::vector<int64_t>& dims, bool keepdim, int64_t index_dim) {
  check_defined(op, "t", t);
  check_cpu(op, "t", t);
  const ReducePlan p = plan_reduction(op, t, dims);
  for (int64_t d = 0; d < t.dim(); ++d)
    if (p.reduced[d] && t.shape()[d] == 0)
      throw Error(
          fmt::format("{}: cannot reduce over dimension {} of size 0 in shape {} (the {} "
                      "of nothing is undefined)",
                      op, d, shape_str(t.shape()), is_max ? "max" : "min"));
  ValuesIndices r;
  r.values = Tensor::empty(p.keep_shape, t.dtype());
  if (index_dim >= 0) r.indices = Tensor::zeros(p.keep_shape, DType::i64);
  dispatch(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T identity =
        std::numeric_limits<T>::has_infinity
            ? (is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity())
            : (is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    T* best = r.values.data<T>();
    std::fill(best, best + r.values.numel(), identity);
    if (t.numel() == 0) return;
    Shape index_strides(t.dim(), 0);
    if (index_dim >= 0) index_strides[index_dim] = 1;
    const Layout l = coalesce(t.shape(), {t.strides(), p.out_strides, index_strides});
    cpu::reduce_extremum<T>(is_max, static_cast<int64_t>(l.shape.size()), l.shape.data(),
                            t.data<T>(), l.strides[0].data(), best,
                            index_dim >= 0 ? r.indices.data<int64_t>() : nullptr,
                            l.strides[1].data(), l.strides[2].data());
  });
  const Shape rs = result_shape(p, keepdim);
  r.values = r.values.view(rs);
  if (r.indices.defined()) r.indices = r.indices.view(rs);
  return r;
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_or_mean("sum", false, t, dims, keepdim);
}
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_or_mean("mean", true, t, dims, keepdim);
}
Tensor max(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("max", true, t, dims, keepdim, -1).values;
}
Tensor min(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("min", false, t, dims, keepdim, -1).values;
}
Tensor sum(const Tensor& t) {
  check_defined("sum", "t", t);
  return sum(t, all_dims(t));
}
Tensor mean(const Tensor& t) {
  check_defined("mean", "t", t);
  return mean(t, all_dims(t));
}
Tensor max(const Tensor& t) {
  check_defined("max", "t", t);
  return max(t, all_dims(t));
}
Tensor min(const Tensor& t) {
  check_defined("min", "t", t);
  return min(t, all_dims(t));
}

ValuesIndices max_with_indices(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined("max_with_indices", "t", t);
  const int64_t d = op_dim("max_with_indices", dim, t.dim());
  return extremum("max_with_indices", true, t, {d}, keepdim, d);
}
ValuesIndices min_with_indices(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined("min_with_indices", "t", t);
  const int64_t d = op_dim("min_with_indices", dim, t.dim());
  return extremum("min_with_indices", false, t, {d}, keepdim, d);
}
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined("argmax", "t", t);
  const int64_t d = op_dim("argmax", dim, t.dim());
  return extremum("argmax", true, t, {d}, keepdim, d).indices;
}
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined("argmin", "t", t);
  const int64_t d = op_dim("argmin", dim, t.dim());
  return extremum("argmin", false, t, {d}, keepdim, d).indices;
}

}  // namespace grux
