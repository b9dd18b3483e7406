// Row-invariant packed GEMM (C = A W^T + bias) with Highway SIMD: a register-blocked
// micro-kernel of MR rows x one 128-byte panel, the same FMA chain for every row count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm_packed.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "cpu/gemm_packed.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// MR rows of A times one packed panel (K x P): acc = sum_k A[r][k] * panel[k][:], then
// C[r][0:cols] = acc + bias. P / lanes vectors per row are held in registers.
template <int MR, typename T>
HWY_INLINE void MicroKernel(int64_t K, const T* A, int64_t lda, const T* panel, const T* bias,
                            int64_t cols, T* C, int64_t ldc) {
  const hn::ScalableTag<T> d;
  constexpr int64_t P = kPanelCols<T>;
  constexpr int64_t L = HWY_LANES(T);
  constexpr int64_t V = P / L > 0 ? P / L : 1;
  using Vec = hn::Vec<decltype(d)>;
  Vec acc[MR][V];
  for (int r = 0; r < MR; ++r)
    for (int64_t v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  for (int64_t k = 0; k < K; ++k) {
    Vec b[V];
    for (int64_t v = 0; v < V; ++v) b[v] = hn::Load(d, panel + k * P + v * L);
    for (int r = 0; r < MR; ++r) {
      const Vec a = hn::Set(d, A[r * lda + k]);
      for (int64_t v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  HWY_ALIGN T tmp[P];
  for (int r = 0; r < MR; ++r) {
    for (int64_t v = 0; v < V; ++v) hn::Store(acc[r][v], d, tmp + v * L);
    T* c = C + r * ldc;
    if (bias)
      for (int64_t j = 0; j < cols; ++j) c[j] = tmp[j] + bias[j];
    else
      std::memcpy(c, tmp, cols * sizeof(T));
  }
}

template <typename T>
void GemmNtPacked(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* packed,
                  const T* bias, T* C, int64_t ldc) {
  constexpr int64_t P = kPanelCols<T>;
  constexpr int MR = 6;
  constexpr int64_t MB = 96;  // rows per block: A block stays in L2 while panels stream by
  const int64_t panels = (N + P - 1) / P;
  const int64_t blocks = (M + MB - 1) / MB;
  // Row blocks are independent; splitting them across threads does not change any result.
#pragma omp parallel for schedule(static) if (blocks > 1 && M * N * K > (int64_t(1) << 22))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t m0 = blk * MB, m1 = std::min(M, m0 + MB);
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t n0 = p * P, cols = std::min(P, N - n0);
      const T* panel = packed + p * P * K;
      const T* b = bias ? bias + n0 : nullptr;
      int64_t m = m0;
      for (; m + MR <= m1; m += MR)
        MicroKernel<MR>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
      switch (m1 - m) {
        case 5:
          MicroKernel<5>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
          break;
        case 4:
          MicroKernel<4>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
          break;
        case 3:
          MicroKernel<3>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
          break;
        case 2:
          MicroKernel<2>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
          break;
        case 1:
          MicroKernel<1>(K, A + m * lda, lda, panel, b, cols, C + m * ldc + n0, ldc);
          break;
        default:
          break;
      }
    }
  }
}

void GemmNtPackedF32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                     const float* packed, const float* bias, float* C, int64_t ldc) {
  GemmNtPacked(M, N, K, A, lda, packed, bias, C, ldc);
}
void GemmNtPackedF64(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                     const double* packed, const double* bias, double* C, int64_t ldc) {
  GemmNtPacked(M, N, K, A, lda, packed, bias, C, ldc);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(GemmNtPackedF32);
HWY_EXPORT(GemmNtPackedF64);

template <typename T>
void pack_weights_nt(int64_t N, int64_t K, const T* W, T* packed) {
  constexpr int64_t P = kPanelCols<T>;
  const int64_t panels = (N + P - 1) / P;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < P; ++j) {
        const int64_t n = p * P + j;
        packed[(p * K + k) * P + j] = n < N ? W[n * K + k] : T(0);
      }
}
template void pack_weights_nt<float>(int64_t, int64_t, const float*, float*);
template void pack_weights_nt<double>(int64_t, int64_t, const double*, double*);

template <>
void gemm_nt_packed<float>(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                           const float* packed, const float* bias, float* C, int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmNtPackedF32)(M, N, K, A, lda, packed, bias, C, ldc);
}
template <>
void gemm_nt_packed<double>(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
                            const double* packed, const double* bias, double* C, int64_t ldc) {
  HWY_DYNAMIC_DISPATCH(GemmNtPackedF64)(M, N, K, A, lda, packed, bias, C, ldc);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
