// The general GEMM every operator's matrix products use (Linear, conv's column GEMMs, matmul,
// the matmul scans, minGRU): grux's own row-invariant kernel, f32 and f64, row-major.
#pragma once

#include <cstdint>

namespace grux::cpu {

// C (M x N) = op(A) op(B) (+ bias) (+ C when accumulate), all row-major.
// op(A) is M x K (A is K x M when trans_a); op(B) is K x N (B is N x K when trans_b); bias is
// N values or null. lda, ldb, ldc are row strides in elements. Without accumulate, C is not
// read. Each element is the sum over k = 0..K-1, in order, of fused multiply-adds from zero,
// then + bias, then + the old C (cpu/gemm_packed.h): the result of a row never depends on the
// other rows, M, the thread count or the machine's BLAS. op(B) is packed on every call (K x N
// copies) into a buffer the calling thread keeps (it grows to the largest packed op(B) up to
// 32 MiB; a larger one gets a buffer of its own for the call); callers that reuse B pack it
// once themselves (cpu::pack_b, cpu::gemm_packed).
// Threads: the OpenMP threads when called outside a parallel region and the product is large
// enough to share; inside one, the calling thread alone.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
          const T* B, int64_t ldb, const T* bias, bool accumulate, T* C, int64_t ldc);

// Columns per packed panel for an N-column op(B): the panel width (1, 2 or 3 SIMD units)
// that pads N the least, the widest on a tie.
template <typename T>
int64_t gemm_panel_width(int64_t N);

}  // namespace grux::cpu
