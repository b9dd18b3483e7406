// GEMM through the optimized BLAS (OpenBLAS), row-major, f32 and f64.
// The single entry point every operator uses for matrix products.
#pragma once

#include <cstdint>

namespace grux::cpu {

// C (M x N) = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is M x K (A is K x M when trans_a); op(B) is K x N (B is N x K when trans_b).
// lda, ldb, ldc are row strides in elements. With beta == 0, C is not read.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace grux::cpu
