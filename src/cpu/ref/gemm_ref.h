// Reference GEMMs: the triple loop, accumulating in double. The oracles for the general GEMM
// (cpu::gemm) and for the packed GEMM (cpu::gemm_packed), with the same contracts.
#pragma once

#include <cstdint>

#include "cpu/gemm_packed.h"

namespace grux::cpu::ref {

// Same contract as cpu::gemm.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
          const T* B, int64_t ldb, const T* bias, bool accumulate, T* C, int64_t ldc);

// Same contract as cpu::gemm_packed: reads B's elements from its packed storage. Its sums are
// in double, where the order of a low-precision B's terms (`step`) is not seen: it is ignored.
template <typename T>
void gemm_packed(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                 const T* bias, bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1,
                 int64_t step = 0);

// Same contract as cpu::gemm_at_b_bf16 (sums in double).
void gemm_at_b_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, const int64_t* b_rows, bool accumulate, float* C, int64_t ldc);

}  // namespace grux::cpu::ref
