// Reference GEMM: the triple loop, accumulating in double. The oracle for cpu::gemm.
// Same contract as cpu::gemm (row-major, op(A) M x K, op(B) K x N).
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace grux::cpu::ref
