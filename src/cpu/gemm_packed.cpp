// Row-invariant packed GEMM with Highway SIMD: register-blocked micro-kernels of MR rows x
// NP panels of S units, K split into L1-sized chunks without changing any element's FMA chain.
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

// K is processed in equal chunks of at most kKc so that a panel's chunk stays in L1. The
// chunk boundaries depend on K only, and partial sums pass between chunks through C exactly
// (they are already rounded to T), so chunking does not change results.
constexpr int64_t kKc = 256;
inline int64_t ChunkLength(int64_t K) {
  const int64_t chunks = (K + kKc - 1) / kKc;
  return chunks <= 1 ? K : (K + chunks - 1) / chunks;
}

// Rows MR x panels NP, each panel S units wide. acc starts at zero (first chunk) or at the
// partial sums in C; after the last chunk, bias and the saved old C are added.
template <int MR, int NP, int S, bool TA, typename T>
HWY_INLINE void MicroKernel(int64_t k0, int64_t k1, bool first, bool last, const T* A,
                            int64_t lda, const T* panel0, int64_t panel_stride, int64_t n_cols,
                            const T* bias, const T* c_old, int64_t ld_old, T* C, int64_t ldc) {
  const hn::ScalableTag<T> d;
  constexpr int64_t L = HWY_LANES(T);
  constexpr int64_t P = S * kUnit<T>;          // columns per panel
  constexpr int64_t NV = P / L > 0 ? P / L : 1;  // vectors per panel row
  using Vec = hn::Vec<decltype(d)>;
  Vec acc[MR][NP * NV];
  // A full group of panels is loaded and stored as vectors straight from / to C; only a
  // partial last panel goes through tmp (its columns past N must not be touched).
  const int64_t cols = std::min<int64_t>(n_cols, NP * P);
  const bool full = cols == NP * P;
  HWY_ALIGN T tmp[NP * P];
  for (int r = 0; r < MR; ++r) {
    if (first) {
      for (int64_t v = 0; v < NP * NV; ++v) acc[r][v] = hn::Zero(d);
    } else if (full) {  // continue the chain from the partial sums stored in C
      for (int64_t v = 0; v < NP * NV; ++v) acc[r][v] = hn::LoadU(d, C + r * ldc + v * L);
    } else {
      std::memcpy(tmp, C + r * ldc, cols * sizeof(T));
      for (int64_t v = 0; v < NP * NV; ++v) acc[r][v] = hn::Load(d, tmp + v * L);
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    Vec b[NP * NV];
    for (int p = 0; p < NP; ++p)
      for (int64_t v = 0; v < NV; ++v) b[p * NV + v] = hn::Load(d, panel0 + p * panel_stride + k * P + v * L);
    for (int r = 0; r < MR; ++r) {
      const Vec a = hn::Set(d, TA ? A[k * lda + r] : A[r * lda + k]);
      for (int64_t v = 0; v < NP * NV; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  // Bias, then the old C: the same two additions, in the same order, vector or scalar.
  for (int r = 0; r < MR; ++r) {
    T* c = C + r * ldc;
    if (full) {
      for (int64_t v = 0; v < NP * NV; ++v) {
        Vec x = acc[r][v];
        if (last && bias) x = hn::Add(x, hn::LoadU(d, bias + v * L));
        if (last && c_old) x = hn::Add(x, hn::LoadU(d, c_old + r * ld_old + v * L));
        hn::StoreU(x, d, c + v * L);
      }
      continue;
    }
    for (int64_t v = 0; v < NP * NV; ++v) hn::Store(acc[r][v], d, tmp + v * L);
    if (!last) {
      std::memcpy(c, tmp, cols * sizeof(T));
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      T x = tmp[j];
      if (bias) x += bias[j];
      if (c_old) x += c_old[r * ld_old + j];
      c[j] = x;
    }
  }
}

// Rows per micro-kernel, at most. 8 rather than 6: conv2d's 32-filter GEMMs run as 4 x 8 rows
// instead of 5 x 6 + 2 (forward 5% faster, n8c16h64w64d32k3); GRU-shaped products measured
// the same within noise.
constexpr int kMaxMr = 8;

// Rows [0, M) against NP consecutive panels (or one), for the K chunks that start in
// [kb, ke) (all of them by default).
template <int NP, int S, bool TA, typename T>
void RowsTimesPanels(int64_t M, int64_t K, const T* A, int64_t lda, const T* panel0,
                     int64_t n_cols, const T* bias, bool accumulate, T* C, int64_t ldc,
                     int64_t kb, int64_t ke) {
  constexpr int64_t P = S * kUnit<T>;
  constexpr int64_t L = HWY_LANES(T);
  constexpr int64_t NV = P / L > 0 ? P / L : 1;
  // Registers: MR * NP * NV accumulators + NP * NV operands + 1 broadcast.
  constexpr int kRegs = HWY_MAX_BYTES >= 64 ? 32 : 16;
  constexpr int kMr = std::clamp<int>((kRegs - NP * NV - 1) / (NP * NV), 1, kMaxMr);
  const int64_t panel_stride = K * P;
  // Accumulating into C across K chunks needs the old C kept aside: rows of up to kMr
  // are saved in a small buffer (C's old values are added after the last chunk).
  const int64_t kc = ChunkLength(K);
  const bool chunked = kc < K;
  HWY_ALIGN T saved[kMr * NP * P];
  const int64_t cols = std::min<int64_t>(n_cols, NP * P);
  auto rows = [&](auto mr_tag, int64_t m) {
    constexpr int MR = decltype(mr_tag)::value;
    const T* a = TA ? A + m : A + m * lda;
    T* c = C + m * ldc;
    const T* old = nullptr;
    int64_t ld_old = ldc;
    if (accumulate) {
      if (chunked) {
        for (int r = 0; r < MR; ++r) std::memcpy(saved + r * cols, c + r * ldc, cols * sizeof(T));
        old = saved;
        ld_old = cols;
      } else {
        old = c;
      }
    }
    for (int64_t k0 = kb; k0 < ke || k0 == 0; k0 += kc) {
      const int64_t k1 = std::min(K, k0 + kc);
      MicroKernel<MR, NP, S, TA>(k0, k1, k0 == 0, k1 == K, a, lda, panel0, panel_stride, cols,
                                 bias, old, ld_old, c, ldc);
      if (K == 0) break;
    }
  };
  int64_t m = 0;
  for (; m + kMr <= M; m += kMr) rows(std::integral_constant<int, kMr>{}, m);
  switch (M - m) {
    case 7: if constexpr (kMr > 7) rows(std::integral_constant<int, 7>{}, m); break;
    case 6: if constexpr (kMr > 6) rows(std::integral_constant<int, 6>{}, m); break;
    case 5: if constexpr (kMr > 5) rows(std::integral_constant<int, 5>{}, m); break;
    case 4: if constexpr (kMr > 4) rows(std::integral_constant<int, 4>{}, m); break;
    case 3: if constexpr (kMr > 3) rows(std::integral_constant<int, 3>{}, m); break;
    case 2: if constexpr (kMr > 2) rows(std::integral_constant<int, 2>{}, m); break;
    case 1: if constexpr (kMr > 1) rows(std::integral_constant<int, 1>{}, m); break;
    default: break;
  }
}

template <int S, bool TA, typename T>
void GemmPanels(int64_t M, int64_t K, int64_t N, const T* A, int64_t lda, const T* packed,
                const T* bias, bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1,
                int64_t kb, int64_t ke) {
  constexpr int64_t P = S * kUnit<T>;
  int64_t p = p0;
  // Few rows, or narrow panels: several panels at once give the FMA pipes enough independent
  // chains (a panel's element chains are the same whichever panels it is grouped with).
  if (M <= 2) {
    for (; p + 4 <= p1; p += 4)
      RowsTimesPanels<4, S, TA>(M, K, A, lda, packed + p * K * P, N - p * P,
                                bias ? bias + p * P : nullptr, accumulate, C + p * P, ldc, kb, ke);
  } else if constexpr (S < 3) {
    constexpr int G = S == 1 ? 3 : 2;
    for (; p + G <= p1; p += G)
      RowsTimesPanels<G, S, TA>(M, K, A, lda, packed + p * K * P, N - p * P,
                                bias ? bias + p * P : nullptr, accumulate, C + p * P, ldc, kb, ke);
  }
  for (; p < p1; ++p)
    RowsTimesPanels<1, S, TA>(M, K, A, lda, packed + p * K * P, N - p * P,
                              bias ? bias + p * P : nullptr, accumulate, C + p * P, ldc, kb, ke);
}

// Many rows and a long K without accumulation (the weight-gradient products): K chunks
// outermost, so one chunk of A's rows stays in L2 across all panels. Same FMA chains.
template <int S, bool TA, typename T>
void GemmPanelsChunked(int64_t M, int64_t K, int64_t N, const T* A, int64_t lda,
                       const T* packed, const T* bias, bool accumulate, T* C, int64_t ldc,
                       int64_t p0, int64_t p1) {
  const int64_t kc = ChunkLength(K);
  if (accumulate || kc == K || M < 12) return GemmPanels<S, TA>(M, K, N, A, lda, packed, bias, accumulate, C, ldc, p0, p1, 0, K);
  for (int64_t k0 = 0; k0 < K; k0 += kc)
    GemmPanels<S, TA>(M, K, N, A, lda, packed, bias, false, C, ldc, p0, p1, k0, k0 + 1);
}

template <typename T>
void GemmPacked(int64_t M, int64_t K, int64_t N, int64_t panel, const T* A, int64_t lda,
                bool trans_a, const T* packed, const T* bias, bool accumulate, T* C, int64_t ldc,
                int64_t p0, int64_t p1) {
  const int S = static_cast<int>(panel / kUnit<T>);
#define GRUX_GEMM_CASE(s)                                                                   \
  if (S == s) {                                                                             \
    if (trans_a) GemmPanelsChunked<s, true>(M, K, N, A, lda, packed, bias, accumulate, C, ldc, p0, p1); \
    else GemmPanelsChunked<s, false>(M, K, N, A, lda, packed, bias, accumulate, C, ldc, p0, p1);   \
    return;                                                                                 \
  }
  GRUX_GEMM_CASE(1)
  GRUX_GEMM_CASE(2)
  GRUX_GEMM_CASE(3)
#undef GRUX_GEMM_CASE
}

void GemmPackedF32(int64_t M, int64_t K, int64_t N, int64_t panel, const float* A, int64_t lda,
                   bool ta, const float* packed, const float* bias, bool acc, float* C,
                   int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}
void GemmPackedF64(int64_t M, int64_t K, int64_t N, int64_t panel, const double* A, int64_t lda,
                   bool ta, const double* packed, const double* bias, bool acc, double* C,
                   int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include "grux/error.h"

namespace grux::cpu {

HWY_EXPORT(GemmPackedF32);
HWY_EXPORT(GemmPackedF64);

template <typename T>
void pack_b(int64_t K, int64_t N, int64_t panel, const T* src, int64_t stride_k, int64_t stride_n,
            const int64_t* k_map, const int64_t* n_map, T* dst) {
  GRUX_ASSERT(panel > 0 && panel % kUnit<T> == 0 && panel <= 3 * kUnit<T>);
  const int64_t panels = (N + panel - 1) / panel;
  // Training packs the weights (and their transposes) every step: this is on the hot path.
#pragma omp parallel for schedule(static) if (K * N > (1 << 16))
  for (int64_t p = 0; p < panels; ++p) {
    // Source offset of each column of the panel (-1 past N), once per panel.
    int64_t col[3 * kUnit<T>];
    for (int64_t j = 0; j < panel; ++j) {
      const int64_t n = p * panel + j;
      col[j] = n < N ? (n_map ? n_map[n] : n) * stride_n : -1;
    }
    T* out = dst + p * K * panel;
    if (stride_k == 1 && !k_map) {
      // Each source column is contiguous along k (a weight matrix read transposed): walk it
      // in blocks of k whose destination (kBlock x panel) stays in L1.
      constexpr int64_t kBlock = 64;
      for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
        const int64_t kn = std::min(kBlock, K - k0);
        T* o = out + k0 * panel;
        for (int64_t j = 0; j < panel; ++j) {
          if (col[j] < 0) {
            for (int64_t k = 0; k < kn; ++k) o[k * panel + j] = T(0);
          } else {
            const T* s = src + col[j] + k0;
            for (int64_t k = 0; k < kn; ++k) o[k * panel + j] = s[k];
          }
        }
      }
    } else {
      // Rows of the source; within each unit of the panel the columns are usually consecutive
      // (gate-interleaved weights keep units whole; activations are not permuted): copy those
      // units whole.
      constexpr int64_t U = kUnit<T>;
      bool whole_units = true;
      for (int64_t j = 0; j < panel && whole_units; ++j)
        whole_units = col[j] >= 0 && col[j] == col[j - j % U] + j % U;
      for (int64_t k = 0; k < K; ++k) {
        const T* row = src + (k_map ? k_map[k] : k) * stride_k;
        T* o = out + k * panel;
        if (whole_units) {
          for (int64_t u = 0; u < panel; u += U) std::memcpy(o + u, row + col[u], U * sizeof(T));
        } else {
          for (int64_t j = 0; j < panel; ++j) o[j] = col[j] < 0 ? T(0) : row[col[j]];
        }
      }
    }
  }
}
template void pack_b<float>(int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                            const int64_t*, const int64_t*, float*);
template void pack_b<double>(int64_t, int64_t, int64_t, const double*, int64_t, int64_t,
                             const int64_t*, const int64_t*, double*);

template <>
void gemm_packed<float>(int64_t M, const float* A, int64_t lda, bool trans_a,
                        const PackedB<float>& B, const float* bias, bool accumulate, float* C,
                        int64_t ldc, int64_t p0, int64_t p1) {
  if (M <= 0 || p0 >= p1) return;
  HWY_DYNAMIC_DISPATCH(GemmPackedF32)(M, B.K, B.N, B.panel, A, lda, trans_a, B.data, bias,
                                      accumulate, C, ldc, p0, p1);
}
template <>
void gemm_packed<double>(int64_t M, const double* A, int64_t lda, bool trans_a,
                         const PackedB<double>& B, const double* bias, bool accumulate, double* C,
                         int64_t ldc, int64_t p0, int64_t p1) {
  if (M <= 0 || p0 >= p1) return;
  HWY_DYNAMIC_DISPATCH(GemmPackedF64)(M, B.K, B.N, B.panel, A, lda, trans_a, B.data, bias,
                                      accumulate, C, ldc, p0, p1);
}

template <typename T>
void gemm_packed_parallel(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                          const T* bias, bool accumulate, T* C, int64_t ldc) {
  // Tiles of kRowBlock rows x all panels: the tile's rows of A stay in L2 while the panels
  // stream by. With fewer row blocks than threads, threads split the panels instead.
  constexpr int64_t kRowBlock = 96;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock, panels = B.panels();
  const int threads = double(M) * B.N * B.K > 4e6 ? omp_get_max_threads() : 1;
  const bool by_rows = row_blocks >= threads;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (by_rows) {
      for (int64_t rb = t * row_blocks / nt; rb < (t + 1) * row_blocks / nt; ++rb) {
        const int64_t m0 = rb * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
        gemm_packed<T>(m1 - m0, trans_a ? A + m0 : A + m0 * lda, lda, trans_a, B, bias,
                       accumulate, C + m0 * ldc, ldc, 0, panels);
      }
    } else {
      gemm_packed<T>(M, A, lda, trans_a, B, bias, accumulate, C, ldc, t * panels / nt,
                     (t + 1) * panels / nt);
    }
  }
}
template void gemm_packed_parallel<float>(int64_t, const float*, int64_t, bool,
                                          const PackedB<float>&, const float*, bool, float*,
                                          int64_t);
template void gemm_packed_parallel<double>(int64_t, const double*, int64_t, bool,
                                           const PackedB<double>&, const double*, bool, double*,
                                           int64_t);

}  // namespace grux::cpu
#endif  // HWY_ONCE
