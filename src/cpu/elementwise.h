// Element-wise kernels (binary and unary, f32 / f64 / i64) on raw pointers: a contiguous
// path the compiler vectorises and a strided path that walks a broadcast index odometer.
#pragma once

#include <cstdint>

namespace grux::cpu {

enum class BinaryOp { add, sub, mul, div, maximum, minimum, pow };
enum class UnaryOp { neg, exp, log, sigmoid, tanh, relu, abs, sqrt };

// Integer tensors support only the ops that stay exact in i64; the Tensor layer checks this
// before calling (div and pow would truncate or need negative exponents, the rest are
// transcendental). i64 arithmetic wraps around on overflow, as in NumPy and PyTorch.
bool binary_supports_i64(BinaryOp op);
bool unary_supports_i64(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);

// dst[i] = op(a[i], b[i]) for i in [0, n). dst may alias a or b exactly.
template <typename T>
void binary_contiguous(BinaryOp op, int64_t n, const T* a, const T* b, T* dst);

// dst (contiguous, shape[0] x ... x shape[rank-1], row-major) = op(a, b) where a's element at
// index (i0, ..., ik) is a[sum i_d * a_strides[d]] (likewise b). A stride of 0 broadcasts.
// rank >= 1; every shape[d] >= 1 (the caller returns early on empty outputs).
template <typename T>
void binary_strided(BinaryOp op, int64_t rank, const int64_t* shape, const T* a,
                    const int64_t* a_strides, const T* b, const int64_t* b_strides, T* dst);

// dst[i] = op(src[i]) for i in [0, n).
template <typename T>
void unary_contiguous(UnaryOp op, int64_t n, const T* src, T* dst);

// dst (contiguous, row-major over shape) = op(src) with src read through src_strides.
template <typename T>
void unary_strided(UnaryOp op, int64_t rank, const int64_t* shape, const T* src,
                   const int64_t* src_strides, T* dst);

}  // namespace grux::cpu
