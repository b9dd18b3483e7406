// The BLAS peer: OpenBLAS's cblas_sgemm / cblas_dgemm, loaded at run time (dlopen of
// libopenblas.so.0), so that no grux library or program links a BLAS; without it every call
// but blas_available() says so. Degenerate sizes are handled here so the BLAS never sees a
// zero dimension.
#include "measure/blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>

#include "grux/error.h"

namespace grux::measure {

namespace {

// cblas's row-major and transpose codes (cblas.h: CblasRowMajor, CblasNoTrans, CblasTrans) and
// its integer: Debian's libopenblas0 is the LP64 build (32-bit blasint).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using blasint = int;
template <typename T>
using GemmFn = void (*)(int, int, int, blasint, blasint, blasint, T, const T*, blasint, const T*,
                        blasint, T, T*, blasint);

struct Blas {
  GemmFn<float> sgemm = nullptr;
  GemmFn<double> dgemm = nullptr;
  void (*set_threads)(int) = nullptr;
  char* (*corename)() = nullptr;
  bool loaded() const { return sgemm && dgemm && set_threads && corename; }
};

Blas load_blas() {
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) continue;
    Blas b;
    b.sgemm = reinterpret_cast<GemmFn<float>>(dlsym(handle, "cblas_sgemm"));
    b.dgemm = reinterpret_cast<GemmFn<double>>(dlsym(handle, "cblas_dgemm"));
    b.set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
    b.corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
    if (b.loaded()) return b;  // kept loaded for the process's life
    dlclose(handle);
  }
  return {};
}

const Blas& blas() {
  static const Blas b = load_blas();
  return b;
}

const Blas& need_blas() {
  const Blas& b = blas();
  if (!b.loaded())
    throw Error(
        "OpenBLAS (libopenblas.so.0, the peer of grux bench gemm and grux calibrate) "
        "was not found: install libopenblas0-openmp to measure it");
  return b;
}

// C *= beta for the K == 0 case (BLAS implementations differ on it).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == T(0) ? T(0) : C[m * ldc + n] * beta;
}

template <typename T>
void gemm(GemmFn<T> fn, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  fn(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, static_cast<blasint>(M),
     static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
     static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

}  // namespace

bool blas_available() {
  return blas().loaded();
}

template <>
void blas_gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  gemm(need_blas().sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void blas_gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                       const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                       double* C, int64_t ldc) {
  gemm(need_blas().dgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_set_threads(int n) {
  if (blas().loaded()) blas().set_threads(n);
}

std::string blas_core() {
  if (!blas().loaded()) return "none";
  const char* name = blas().corename();
  return name ? name : "unknown";
}

bool blas_core_is_fallback() {
#if defined(__x86_64__) || defined(__i386__)
  if (!blas().loaded()) return false;
  // OpenBLAS's x86 kernels older than AVX2 (what it falls back to on a CPU it does not know).
  std::string core = blas_core();
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const char* const kOld[] = {
      "prescott",  "core2",      "penryn",      "dunnington", "nehalem", "sandybridge", "atom",
      "katmai",    "coppermine", "northwood",   "banias",     "opteron", "barcelona",   "bobcat",
      "bulldozer", "piledriver", "steamroller", "excavator",  "generic", "unknown"};
  const bool old = std::find(std::begin(kOld), std::end(kOld), core) != std::end(kOld);
  return old && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;  // the fallback is a choice among x86 kernels only
#endif
}

}  // namespace grux::measure
