// Shared API-boundary checks and operand normalization for the nn drivers (linear,
// embedding, cross_entropy) and the optimizers: one-line grux::Error messages.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "grux/tensor.h"

namespace grux::ops {

// `t` must be defined, f32 or f64, on the CPU.
inline void check_float_cpu(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(
        fmt::format("{}: {} has dtype {}, expected f32 or f64", op, name, dtype_name(t.dtype())));
  if (t.device() != Device::cpu())
    throw Error(fmt::format("{}: {} is on {}, expected cpu (the only device of this build)", op,
                            name, t.device().str()));
}

// `t` must have `dims` dimensions; `expected` names them, e.g. "(M, I)".
inline void check_dim(const char* op, const char* name, const Tensor& t, int64_t dims,
                      const char* expected) {
  if (t.dim() != dims)
    throw Error(
        fmt::format("{}: {} has shape {}, expected {}", op, name, shape_str(t.shape()), expected));
}

// Index of flat position p in `shape`, printed "[i, j, k]".
inline std::string index_str(const Shape& shape, int64_t p) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = p % shape[d];
    p /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// A 2-D tensor as a BLAS operand: row-major with row stride ld, or column-major (`trans`) with
// column stride ld; other layouts are copied to a contiguous tensor held in `hold`.
template <typename T>
struct MatOperand {
  Tensor hold;
  const T* data = nullptr;
  int64_t ld = 1;
  bool trans = false;
};
template <typename T>
MatOperand<T> mat_operand(const Tensor& t) {
  const int64_t R = t.size(0), C = t.size(1), s0 = t.stride(0), s1 = t.stride(1);
  // BLAS wants ld >= max(1, columns of the stored layout), even for a single row.
  const int64_t row_ld = std::max<int64_t>(1, C), col_ld = std::max<int64_t>(1, R);
  if ((C <= 1 || s1 == 1) && (R <= 1 || s0 >= row_ld))
    return {t, t.data<T>(), R <= 1 ? row_ld : s0, false};
  if ((R <= 1 || s0 == 1) && (C <= 1 || s1 >= col_ld))
    return {t, t.data<T>(), C <= 1 ? col_ld : s1, true};
  Tensor c = t.contiguous();
  return {c, c.data<T>(), row_ld, false};
}
// Row-major only (kernels that walk rows): copies column-major layouts too.
template <typename T>
MatOperand<T> row_major_operand(const Tensor& t) {
  MatOperand<T> m = mat_operand<T>(t);
  if (!m.trans) return m;
  Tensor c = t.contiguous();
  return {c, c.data<T>(), std::max<int64_t>(1, t.size(1)), false};
}

}  // namespace grux::ops
