// A GEMM cut into fixed tiles, each computed by a single-threaded BLAS call: the same bits on
// any thread count (a threaded BLAS call may round differently when its split changes).
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/gemm.h"

namespace grux::cpu {

// Tile of C computed by one BLAS call. Large enough that the per-call packing is noise.
constexpr int64_t kTileRows = 256, kTileCols = 1024;

// C (M x N) = alpha * op(A) op(B) + beta * C as gemm() (row-major), tile by tile. `parallel`:
// the tiles are spread over OpenMP threads (call from outside a parallel region); otherwise
// they run in order on the calling thread, which must be inside a parallel region or have
// one OpenMP thread. Either way each element gets the same operations: the BLAS sees an
// active parallel region (or a single thread) and never threads a call itself.
template <typename T>
void gemm_tiled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, bool parallel) {
  const int64_t mt = (M + kTileRows - 1) / kTileRows, nt = (N + kTileCols - 1) / kTileCols;
  // Always a parallel region when asked, even for one tile: that is what keeps OpenBLAS's
  // own threading (whose rounding depends on its split) out.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < mt * nt; ++t) {
    const int64_t i0 = (t / nt) * kTileRows, j0 = (t % nt) * kTileCols;
    const int64_t m = std::min(kTileRows, M - i0), n = std::min(kTileCols, N - j0);
    const T* a = trans_a ? A + i0 : A + i0 * lda;  // rows i0.. of op(A)
    const T* b = trans_b ? B + j0 * ldb : B + j0;  // columns j0.. of op(B)
    gemm<T>(trans_a, trans_b, m, n, K, alpha, a, lda, b, ldb, beta, C + i0 * ldc + j0, ldc);
  }
}

}  // namespace grux::cpu
