// Reference GEMM: C = alpha op(A) op(B) + beta C by the definition, one dot product per
// element, accumulated in double. Never optimized; used by tests and the reference switch.
#include "cpu/ref/gemm_ref.h"

namespace grux::cpu::ref {

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + m] : A[m * lda + k];
        const double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        acc += a * b;
      }
      T& c = C[m * ldc + n];
      c = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : double(beta) * c));
    }
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

}  // namespace grux::cpu::ref
