// Row-invariant packed GEMM with Highway SIMD: register-blocked micro-kernels of MR rows x
// NP panels of S units, K split into L1-sized chunks without changing any element's FMA chain
// (the kernels: gemm_packed-inl.h). This file: the f32 kernels, packing and the drivers; the
// f64 kernels are compiled in gemm_packed_f64.cpp.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm_packed.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include "cpu/gemm_packed-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void GemmBRowsF32(int64_t M, int64_t K, int64_t N, const float* A, int64_t lda, const float* base,
                  const int64_t* offsets, float* C, int64_t ldc) {
  GemmBRows(M, K, N, A, lda, base, offsets, C, ldc);
}
void GemmARowsF32(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const float* base,
                  const int64_t* offsets, const float* packed, bool accumulate, float* C,
                  int64_t ldc) {
  GemmARows(M, K, N, panel, sub, base, offsets, packed, accumulate, C, ldc);
}

void GemmPackedF32(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const float* A,
                   int64_t lda, bool ta, const float* packed, const float* bias, bool acc, float* C,
                   int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, sub, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}

// One panel of pack_b when each source column is contiguous along k (col[j]: where column j
// of the panel starts, -1 past N): 128-bit tiles of 4 k x 4 columns (2 x 2 in f64) are
// transposed in registers, instead of one scalar store per element.
template <typename T>
void PackPanelTransposed(int64_t K, int64_t panel, const int64_t* col, const T* src, T* out) {
#if HWY_TARGET == HWY_SCALAR
  constexpr int64_t V = 1;
#else
  const hn::FixedTag<T, 16 / sizeof(T)> d;
  constexpr int64_t V = 16 / sizeof(T);  // tile side
#endif
  int64_t k = 0;
  for (; V > 1 && k + V <= K; k += V) {
#if HWY_TARGET != HWY_SCALAR
    for (int64_t j = 0; j < panel; j += V) {
      T* o = out + k * panel + j;
      if (col[j + V - 1] < 0) {  // columns past N (at the end of the last panel)
        for (int64_t t = 0; t < V; ++t)
          for (int64_t u = 0; u < V; ++u)
            o[t * panel + u] = col[j + u] < 0 ? T(0) : src[col[j + u] + k + t];
        continue;
      }
      if constexpr (V == 4) {
        const auto r0 = hn::LoadU(d, src + col[j] + k), r1 = hn::LoadU(d, src + col[j + 1] + k);
        const auto r2 = hn::LoadU(d, src + col[j + 2] + k), r3 = hn::LoadU(d, src + col[j + 3] + k);
        const hn::Repartition<uint64_t, decltype(d)> d64;
        const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d, r0, r1));  // k0: c0 c1, k1: c0 c1
        const auto t1 = hn::BitCast(d64, hn::InterleaveLower(d, r2, r3));  // k0: c2 c3, k1: c2 c3
        const auto t2 = hn::BitCast(d64, hn::InterleaveUpper(d, r0, r1));  // k2, k3: c0 c1
        const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d, r2, r3));
        hn::Store(hn::BitCast(d, hn::InterleaveLower(d64, t0, t1)), d, o);
        hn::Store(hn::BitCast(d, hn::InterleaveUpper(d64, t0, t1)), d, o + panel);
        hn::Store(hn::BitCast(d, hn::InterleaveLower(d64, t2, t3)), d, o + 2 * panel);
        hn::Store(hn::BitCast(d, hn::InterleaveUpper(d64, t2, t3)), d, o + 3 * panel);
      } else {
        const auto r0 = hn::LoadU(d, src + col[j] + k), r1 = hn::LoadU(d, src + col[j + 1] + k);
        hn::Store(hn::InterleaveLower(d, r0, r1), d, o);
        hn::Store(hn::InterleaveUpper(d, r0, r1), d, o + panel);
      }
    }
#endif
  }
  for (; k < K; ++k)
    for (int64_t j = 0; j < panel; ++j) out[k * panel + j] = col[j] < 0 ? T(0) : src[col[j] + k];
}
void PackPanelTransposedF32(int64_t K, int64_t panel, const int64_t* col, const float* src,
                            float* out) {
  PackPanelTransposed(K, panel, col, src, out);
}
void PackPanelTransposedF64(int64_t K, int64_t panel, const int64_t* col, const double* src,
                            double* out) {
  PackPanelTransposed(K, panel, col, src, out);
}

// This copy's target (an HWY_* bit): dispatched, it says which target the kernels run on.
int64_t TargetBit() {
  return HWY_TARGET;
}

// Whether this copy's micro-kernels take a panel of more than one unit in windows (fewer
// registers than a panel's vectors need; WindowVectors): gemm_sub_panel.
bool WindowsPanels() {
  return kWindowed;
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>
#include <unistd.h>

#include <type_traits>

#include "cpu/gemm_lowp.h"
#include "grux/error.h"

namespace grux::cpu {

HWY_EXPORT(GemmPackedF32);
HWY_EXPORT(PackPanelTransposedF32);
HWY_EXPORT(PackPanelTransposedF64);
HWY_EXPORT(GemmBRowsF32);
HWY_EXPORT(GemmARowsF32);
HWY_EXPORT(TargetBit);
HWY_EXPORT(WindowsPanels);

int64_t simd_target_bit() {
  return HWY_DYNAMIC_DISPATCH(TargetBit)();
}

template <typename T>
int64_t gemm_sub_panel() {
  return HWY_DYNAMIC_DISPATCH(WindowsPanels)() ? kUnit<T> : 0;
}
template int64_t gemm_sub_panel<float>();
template int64_t gemm_sub_panel<double>();

template <>
void gemm_b_rows<float>(int64_t M, const float* A, int64_t lda, int64_t K, int64_t N,
                        const float* b_base, const int64_t* b_offsets, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmBRowsF32)(M, K, N, A, lda, b_base, b_offsets, C, ldc);
}
template <>
void gemm_a_rows<float>(int64_t M, const float* a_base, const int64_t* a_offsets,
                        const PackedB<float>& B, bool accumulate, float* C, int64_t ldc) {
  if (M <= 0 || B.N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmARowsF32)
  (M, B.K, B.N, B.panel, B.sub, a_base, a_offsets, B.data, accumulate, C, ldc);
}

template <typename T>
void pack_b(int64_t K, int64_t N, int64_t panel, const T* src, int64_t stride_k, int64_t stride_n,
            const int64_t* k_map, const int64_t* n_map, T* dst, int64_t sub) {
  GRUX_ASSERT(panel > 0 && panel % kUnit<T> == 0 && panel <= 3 * kUnit<T>);
  GRUX_ASSERT(sub >= 0 && sub % kUnit<T> == 0 && (sub == 0 || panel % sub == 0));
  const int64_t panels = (N + panel - 1) / panel;
  const int64_t w = sub > 0 ? sub : panel;  // columns per block
  auto pack_panel = [&](int64_t p) {
    // Source offset of each column of the panel (-1 past N), once per panel.
    int64_t col[3 * kUnit<T>];
    for (int64_t j = 0; j < panel; ++j) {
      const int64_t n = p * panel + j;
      col[j] = n < N ? (n_map ? n_map[n] : n) * stride_n : -1;
    }
    T* out = dst + p * K * panel;  // block b: K x w row-major at out + b K w
    if (stride_k == 1 && !k_map) {
      // Each source column is contiguous along k (a weight matrix read transposed).
      for (int64_t b = 0; b < panel / w; ++b) {
        if constexpr (std::is_same_v<T, float>)
          HWY_DYNAMIC_DISPATCH(PackPanelTransposedF32)(K, w, col + b * w, src, out + b * K * w);
        else
          HWY_DYNAMIC_DISPATCH(PackPanelTransposedF64)(K, w, col + b * w, src, out + b * K * w);
      }
      return;
    }
    // Rows of the source, each read once for all the panel's blocks (block by block, each row's
    // lines would be fetched again for every block). Within a unit the columns are usually
    // consecutive (gate-interleaved weights keep units whole; activations are not permuted):
    // those units are copied whole.
    constexpr int64_t U = kUnit<T>;
    bool whole[3] = {true, true, true};
    for (int64_t j = 0; j < panel; ++j)
      whole[j / U] = whole[j / U] && col[j] >= 0 && col[j] == col[j - j % U] + j % U;
    for (int64_t k = 0; k < K; ++k) {
      const T* row = src + (k_map ? k_map[k] : k) * stride_k;
      for (int64_t j = 0; j < panel; j += U) {
        T* o = out + j / w * (K * w) + k * w + j % w;
        if (whole[j / U]) {
          std::memcpy(o, row + col[j], U * sizeof(T));
        } else {
          for (int64_t i = 0; i < U; ++i) o[i] = col[j + i] < 0 ? T(0) : row[col[j + i]];
        }
      }
    }
  };
  // Training packs the weights (and their transposes) every step: this is on the hot path.
  // Small operands (the matmul scans' d x d products) stay out of OpenMP: even a region of
  // one thread costs more than packing them; so does any operand where the region would have
  // one thread (and its start allocates).
  if (K * N > (1 << 16) && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; ++p) pack_panel(p);
  } else {
    for (int64_t p = 0; p < panels; ++p) pack_panel(p);
  }
}
template void pack_b<float>(int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                            const int64_t*, const int64_t*, float*, int64_t);
template void pack_b<double>(int64_t, int64_t, int64_t, const double*, int64_t, int64_t,
                             const int64_t*, const int64_t*, double*, int64_t);

// A product of one or two rows reads each row of A a value at a time between the FMAs of a
// whole group of panels, and the out-of-order window holds about one 64-byte line of the row
// ahead. Where the row was just written by another core (the states of a batch-1 step at
// two threads), each line is a transfer between the cores, and they would come one after
// another. Asked for at once, before the first FMA, they come together: W2 (I 128, H 256,
// batch 1) on two threads with the cores about 500 ns apart (round trip) about 10% faster in
// f32, 3% in int8; with the cores close, no change beyond the noise.
template <typename T>
void prefetch_a_rows(int64_t M, const T* A, int64_t lda, bool trans_a, int64_t K) {
  constexpr int64_t kLine = 64 / sizeof(T), kMaxLines = 128;
  if (trans_a || M > 2) return;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < std::min(K, kLine * kMaxLines); k += kLine)
      __builtin_prefetch(A + m * lda + k, 0, 3);
}
template void prefetch_a_rows<float>(int64_t, const float*, int64_t, bool, int64_t);
template void prefetch_a_rows<double>(int64_t, const double*, int64_t, bool, int64_t);

template <>
void gemm_packed<float>(int64_t M, const float* A, int64_t lda, bool trans_a,
                        const PackedB<float>& B, const float* bias, bool accumulate, float* C,
                        int64_t ldc, int64_t p0, int64_t p1, int64_t step) {
  if (M <= 0 || p0 >= p1) return;
  prefetch_a_rows(M, A, lda, trans_a, B.K);
  if (B.low_precision()) {
    GRUX_ASSERT(!trans_a);
    return gemm_packed_lowp(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
  }
  HWY_DYNAMIC_DISPATCH(GemmPackedF32)
  (M, B.K, B.N, B.panel, B.sub, A, lda, trans_a, B.data, bias, accumulate, C, ldc, p0, p1);
}

int64_t l1d_cache_bytes() {
  static const int64_t bytes = [] {
    const long s = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return s > 0 ? int64_t(s) : int64_t(32) << 10;
  }();
  return bytes;
}

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    const long s = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return s > 0 ? int64_t(s) : int64_t(512) << 10;
  }();
  return bytes;
}

// Rows a tile takes: as many (in steps of 8, at most 96) as fit their rows of A and C in 7/8 of the
// L2 beside the panels of B (96 where not even 8 fit). With a 2 MiB L2, the input projection of W3
// (6400 rows, K 256, 32 panels: 1.5 MiB of B) runs about 12% faster at 48 or 24 rows a block than
// at 96.
template <typename T>
int64_t gemm_row_block(const PackedB<T>& B, int64_t p0, int64_t p1, int64_t a_cols,
                       int64_t a_bytes) {
  constexpr int64_t kMaxRows = 96, kStep = 8;
  const int64_t b_elem = B.bf16 ? 2 : B.i8 ? 1 : int64_t(sizeof(T));
  const int64_t cols = std::min(B.N, p1 * B.panel) - p0 * B.panel;
  const int64_t b_bytes = (p1 - p0) * B.panel * B.K * b_elem;
  const int64_t room = l2_cache_bytes() / 8 * 7 - b_bytes;
  const int64_t per_row = std::max<int64_t>(1, a_cols * a_bytes + cols * int64_t(sizeof(T)));
  if (room < kStep * per_row) return kMaxRows;
  return std::min(kMaxRows, room / per_row / kStep * kStep);
}
template int64_t gemm_row_block<float>(const PackedB<float>&, int64_t, int64_t, int64_t, int64_t);
template int64_t gemm_row_block<double>(const PackedB<double>&, int64_t, int64_t, int64_t, int64_t);

template <typename T>
void gemm_packed_parallel(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                          const T* bias, bool accumulate, T* C, int64_t ldc) {
  // Tiles of kRowBlock rows x all panels (gemm_row_block: the panels stay in L2 from one
  // tile to the next). With fewer row blocks than threads, threads split the panels instead.
  const int64_t panels = B.panels();
  const int64_t kRowBlock = gemm_row_block(B, 0, panels, B.K, int64_t(sizeof(T)));
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  const int threads = double(M) * B.N * B.K > 4e6 ? omp_get_max_threads() : 1;
  const bool by_rows = row_blocks >= threads;
  // Row blocks [rb0, rb1). Where the kernels take panels in windows, in one call: their own
  // groups of rows keep A's rows in L2 (gemm_packed-inl.h's GemmPanels), where blocks of
  // kRowBlock rows would each read all of B again (the transposed A of M 256, K 6400, N 768:
  // 20 MB of B for every 96 rows; in one call, on an AVX2 core with a 512 KiB L2 and B packed
  // once, 0.93-0.97x OpenBLAS's rate at one thread).
  const bool windowed = gemm_sub_panel<T>() != 0;
  const auto blocks = [&](int64_t rb0, int64_t rb1) {
    if (windowed) {
      const int64_t m0 = rb0 * kRowBlock, m1 = std::min(M, rb1 * kRowBlock);
      if (m0 < m1)
        gemm_packed<T>(m1 - m0, trans_a ? A + m0 : A + m0 * lda, lda, trans_a, B, bias, accumulate,
                       C + m0 * ldc, ldc, 0, panels);
      return;
    }
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      const int64_t m0 = rb * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
      gemm_packed<T>(m1 - m0, trans_a ? A + m0 : A + m0 * lda, lda, trans_a, B, bias, accumulate,
                     C + m0 * ldc, ldc, 0, panels);
    }
  };
  if (threads == 1) {  // no OpenMP region at all: it would cost more than a small product
    if (M * B.K * int64_t(sizeof(T)) <= l2_cache_bytes() / 2)
      return gemm_packed<T>(M, A, lda, trans_a, B, bias, accumulate, C, ldc, 0, panels);
    // An op(A) larger than half the L2 in the row blocks threads take (one thread, A^T B of
    // W4's dW_hh: a quarter faster than all 1536 rows at once, whose transposed chunks do not
    // fit in L2).
    return blocks(0, row_blocks);
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (by_rows) {
      blocks(t * row_blocks / nt, (t + 1) * row_blocks / nt);
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
