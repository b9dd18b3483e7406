// The BLAS peer through OpenBLAS's cblas interface. Degenerate sizes are handled here so the
// BLAS never sees a zero dimension.
#include "cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>

namespace grux::cpu {

namespace {
// C *= beta for the K == 0 case (BLAS implementations differ on it).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == T(0) ? T(0) : C[m * ldc + n] * beta;
}
}  // namespace

template <>
void blas_gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

template <>
void blas_gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                       const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                       double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
              static_cast<blasint>(ldc));
}

void blas_set_threads(int n) {
  openblas_set_num_threads(n);
}

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

bool blas_core_is_fallback() {
  // OpenBLAS's x86 kernels older than AVX2 (what it falls back to on a CPU it does not know).
  std::string core = blas_core();
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const char* const kOld[] = {"prescott", "core2", "penryn", "dunnington", "nehalem",
                                     "sandybridge", "atom", "katmai", "coppermine", "northwood",
                                     "banias", "opteron", "barcelona", "bobcat", "bulldozer",
                                     "piledriver", "steamroller", "excavator", "generic", "unknown"};
  const bool old = std::find(std::begin(kOld), std::end(kOld), core) != std::end(kOld);
#if defined(__x86_64__) || defined(__i386__)
  return old && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace grux::cpu
