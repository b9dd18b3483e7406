// Linear-layer kernels (y = x W^T + b and its gradients) on raw pointers: the products go to
// grux's GEMM (cpu/gemm.h), the bias gradient is a column sum over fixed row blocks (thread-count
// free).
#pragma once

#include <cstdint>

namespace grux::cpu {

// Sizes: M rows, I input features, O output features.
// Strided operands: a logical R x C matrix A is stored row-major with row stride ld
// (A(r, c) = p[r * ld + c]) or, when `trans`, column-major (A(r, c) = p[c * ld + r]); ld is
// at least max(1, C) (resp. max(1, R)).

// y (M x O, contiguous) = x W^T + b.
//   x: M x I (ldx, trans_x); w: O x I (ldw, trans_w); b: O or null.
template <typename T>
void linear_forward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                    const T* w, int64_t ldw, bool trans_w, const T* b, T* y);

// Gradients of linear_forward given dy (M x O, row-major, row stride lddy):
//   dx (M x I, contiguous) = dy W;  dw (O x I, contiguous) = dy^T x;  db (O) = sum_m dy(m, :).
// Each output may be null (not wanted). All outputs are overwritten, not accumulated.
template <typename T>
void linear_backward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                     const T* w, int64_t ldw, bool trans_w, const T* dy, int64_t lddy, T* dx, T* dw,
                     T* db);

// db (O) = column sums of dy (M x O, row stride lddy), accumulated in double over blocks of
// kColumnSumBlock rows whose partial sums are then added in block order: the result does not
// depend on the number of threads.
constexpr int64_t kColumnSumBlock = 256;
template <typename T>
void column_sums(int64_t M, int64_t O, const T* dy, int64_t lddy, T* db);

}  // namespace grux::cpu
