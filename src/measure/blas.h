// The machine's BLAS (OpenBLAS), kept as a peer to measure against: `grux bench gemm` and
// `grux calibrate` time its sgemm / dgemm beside grux's GEMM. No operator computes through it,
// so no result depends on which kernel OpenBLAS picks for the CPU (or on OPENBLAS_CORETYPE).
// Part of grux::tools, and optional: OpenBLAS is loaded at run time where it is installed
// (libopenblas.so.0); where it is not, blas_available() is false and blas_gemm throws
// grux::Error.
#pragma once

#include <cstdint>
#include <string>

#include "core/visibility.h"

namespace grux::measure {

// C (M x N) = alpha * op(A) * op(B) + beta * C through cblas, row-major; op(A) is M x K (A is
// K x M when trans_a), op(B) is K x N (B is N x K when trans_b). With beta == 0, C is not read.
template <typename T>
GRUX_INTERNAL void blas_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                             const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                             int64_t ldc);

// Whether OpenBLAS was found (loaded at the first call to any of these functions).
bool blas_available();

// Threads of the BLAS's own calls (grux's kernels follow OpenMP's setting).
void blas_set_threads(int n);

// The BLAS's name for the kernel it chose for this CPU ("Haswell", "SkylakeX", "Zen",
// "Prescott", ...), and whether that is one of the generic fallbacks OpenBLAS takes on CPUs it
// does not recognise although the CPU has AVX2 (its sgemm then runs several times slower).
std::string blas_core();
// Without the BLAS: "none" and false.
bool blas_core_is_fallback();

}  // namespace grux::measure
