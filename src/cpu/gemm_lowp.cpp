// Low-precision packed GEMMs: AVX-512 kernels (vdpbf16ps, vpdpbusd; compiled for those
// instructions with target attributes and chosen at run time) and portable C++ ones. The
// AVX-512 kernels take the rows of A a few at a time, convert (bf16) or quantize (int8) them
// once into a stack buffer, and run them against every panel of B, the accumulators in
// registers over the whole of K. Compiled with
// -ffp-contract=off: the int8 results are the same bits on both kernels (exact integer sums,
// then the same float operations, the one fused multiply-add written out).
#include "cpu/gemm_lowp.h"

#include <fmt/format.h>
#include <hwy/targets.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "grux/error.h"
#include "grux/tensor.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start reductions and masked loads from _mm512_undefined_*(), which
// -Wuninitialized reports at every use.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define GRUX_HAVE_X86 1
#endif

namespace grux::cpu {

namespace {

constexpr int kMaxMr = 10;
// int8: |sum over k of (qa - zero) qb| <= 255 * 127 * K must stay below 2^31.
constexpr int64_t kMaxInt8K = 66000;

// f(std::integral_constant<int, r>{}) for a run-time r in [1, Max]: the register blocks are
// templates on their row count. Nothing for r = 0.
template <int Max, class F>
void with_rows(int64_t r, F&& f) {
  if constexpr (Max >= 1) {
    if (r == Max) return f(std::integral_constant<int, Max>{});
    with_rows<Max - 1>(r, f);
  }
}

// ---- Portable kernels ---------------------------------------------------------------------

void Bf16Portable(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                  const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0, int64_t p1,
                  int64_t step) {
  const int64_t Kh = (B.K + 1) / 2, P = B.panel;
  const bool reverse = step % 2 != 0;  // the pairs in the AVX-512 kernel's order
  float acc[3 * 16];
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* panel = B.bf16 + p * Kh * P * 2;
    const int64_t n0 = p * P, cols = std::min(P, B.N - n0);
    for (int64_t m = 0; m < M; ++m) {
      const float* a = A + m * lda;
      std::fill(acc, acc + P, 0.0f);
      for (int64_t i = 0; i < Kh; ++i) {
        const int64_t h = reverse ? Kh - 1 - i : i;
        const float a0 = from_bf16(to_bf16(a[2 * h]));
        const float a1 = 2 * h + 1 < B.K ? from_bf16(to_bf16(a[2 * h + 1])) : 0.0f;
        const uint16_t* b = panel + h * P * 2;
        for (int64_t j = 0; j < P; ++j) {
          acc[j] += a0 * from_bf16(b[2 * j]);
          acc[j] += a1 * from_bf16(b[2 * j + 1]);
        }
      }
      float* c = C + m * ldc + n0;
      for (int64_t j = 0; j < cols; ++j) {
        float x = acc[j];
        if (bias) x += bias[n0 + j];
        if (accumulate) x += c[j];
        c[j] = x;
      }
    }
  }
}

void Int8Portable(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                  const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                  int64_t p1) {
  const int64_t Kq = (B.K + 3) / 4, P = B.panel;
  // Unsigned: the sums wrap modulo 2^32 like vpdpbusd's; the result is exact once the zero
  // point's term is taken off (|result| <= 255 * 127 * K < 2^31, pack_b_lowp checks K).
  uint32_t acc[3 * 16];
  for (int64_t m = 0; m < M; ++m) {
    const float* a = A + m * lda;
    const RowQuant rq = row_quant_of(a, B.K);
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* panel = B.i8 + p * Kq * P * 4;
      const int64_t n0 = p * P, cols = std::min(P, B.N - n0);
      std::fill(acc, acc + P, 0u);
      for (int64_t q = 0; q < Kq; ++q) {
        int32_t qa[4];
        for (int e = 0; e < 4; ++e) qa[e] = 4 * q + e < B.K ? quantize(a[4 * q + e], rq) : rq.zero;
        const int8_t* b = panel + q * P * 4;
        for (int64_t j = 0; j < P; ++j)
          acc[j] += static_cast<uint32_t>(qa[0] * b[4 * j] + qa[1] * b[4 * j + 1] +
                                          qa[2] * b[4 * j + 2] + qa[3] * b[4 * j + 3]);
      }
      float* c = C + m * ldc + n0;
      for (int64_t j = 0; j < cols; ++j) {
        const int32_t s = static_cast<int32_t>(
            acc[j] - static_cast<uint32_t>(rq.zero) * static_cast<uint32_t>(B.colsum[n0 + j]));
        const float sc = rq.scale * B.scale[n0 + j];
        float x = bias ? std::fma(float(s), sc, bias[n0 + j]) : float(s) * sc;
        if (accumulate) x += c[j];
        c[j] = x;
      }
    }
  }
}

// ---- AVX-512 kernels ----------------------------------------------------------------------

#if GRUX_HAVE_X86
#define GRUX_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define GRUX_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

// Vectors (16 columns each) per panel group: one panel (3 vectors, with 5 rows a block), or
// two for a single row (bf16; int8 takes single rows panel by panel, Int8Row), whose chains
// are its columns only. Each panel of a group is a stream read from L2 beside the others, and
// more streams read slower: at K 256, N 768 (B in L2) two panels a group are the fastest for
// one bf16 row (a quarter faster than one), one panel for two rows and for int8.
int group_vectors(int64_t M) {
  return M == 1 ? 6 : 3;
}

// The first n of 16 lanes (none when n <= 0).
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// n floats of src as n / 2 rounded up bf16 pairs into dst (which has room for n rounded up
// to 32 floats); a missing last element of a pair is zero.
GRUX_AVX512_BF16 inline void ConvertRow(const float* src, int64_t n, uint32_t* dst) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(n - i), src + i);
    const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(n - i - 16), src + i + 16);
    _mm512_storeu_si512(dst + i / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// n floats of src quantized with q into dst bytes (room for n rounded up to 16); bytes past n
// hold the zero point (the packed B is zero there).
GRUX_AVX512_VNNI inline void QuantizeRow(const float* src, int64_t n, const RowQuant& q,
                                         uint8_t* dst) {
  const __m512 inv = _mm512_set1_ps(q.inv);
  const __m512i zero = _mm512_set1_epi32(q.zero), lo = _mm512_setzero_si512(),
                hi = _mm512_set1_epi32(255);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 x = _mm512_maskz_loadu_ps(tail_mask(n - i), src + i);
    // cvtps rounds to nearest even, as nearbyint does under the default rounding mode.
    __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), zero);
    v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(v));
  }
}

// Four chains of min and max (exact: any order gives the same lo and hi): a batch-1 step's
// product waits for this row's quantization, whose one chain would take 3 cycles a vector.
GRUX_AVX512_VNNI inline RowQuant RowQuantAvx(const float* row, int64_t K) {
  __m512 lo[4], hi[4];
  for (int c = 0; c < 4; ++c) lo[c] = hi[c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= K; i += 64)
    for (int c = 0; c < 4; ++c) {
      const __m512 x = _mm512_loadu_ps(row + i + 16 * c);
      lo[c] = _mm512_min_ps(lo[c], x);
      hi[c] = _mm512_max_ps(hi[c], x);
    }
  for (; i < K; i += 16) {
    const __m512 x = _mm512_maskz_loadu_ps(tail_mask(K - i), row + i);
    lo[0] = _mm512_min_ps(lo[0], x);
    hi[0] = _mm512_max_ps(hi[0], x);
  }
  const __m512 l = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]));
  const __m512 h = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]));
  return row_quant(_mm512_reduce_min_ps(l), _mm512_reduce_max_ps(h));
}

// M rows of A (row stride lda) into dst (row stride `stride` words), as ConvertRow /
// QuantizeRow write them (with each row's quantization in rq).
GRUX_AVX512_BF16 void ConvertRows(int64_t M, int64_t K, const float* A, int64_t lda, uint32_t* dst,
                                  int64_t stride) {
  for (int64_t r = 0; r < M; ++r) ConvertRow(A + r * lda, K, dst + r * stride);
}
GRUX_AVX512_VNNI void QuantizeRows(int64_t M, int64_t K, const float* A, int64_t lda, uint32_t* dst,
                                   int64_t stride, RowQuant* rq) {
  for (int64_t r = 0; r < M; ++r) {
    rq[r] = RowQuantAvx(A + r * lda, K);
    QuantizeRow(A + r * lda, K, rq[r], reinterpret_cast<uint8_t*>(dst + r * stride));
  }
}

// Rows [0, MR) x NV vectors of 16 columns over `groups` k groups (pairs or quads). Row r's
// converted words are a[r * as + g * gs]; vector v reads packed group g at b[v] + g * P (uint32
// units), its columns are C's [16 v, 16 v + 16) from this block's first column; `cols` of
// them are real. One loop between the zeroed accumulators and the epilogue, every index
// into acc a constant: the compiler keeps them in registers. `reverse`: the groups from the
// last to the first (sums in that order).
template <int MR, int NV>
GRUX_AVX512_BF16 void Bf16Block(int64_t groups, const uint32_t* a, int64_t as, int64_t gs,
                                const uint32_t* const* b, int64_t P, int64_t cols,
                                const float* bias, bool accumulate, float* C, int64_t ldc,
                                bool reverse = false) {
  __m512 acc[MR][NV];
  _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r)
      _Pragma("GCC unroll 16") for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t dg = reverse ? -1 : 1;
  for (int64_t i = 0, g = reverse ? groups - 1 : 0; i < groups; ++i, g += dg) {
    __m512bh bv[NV];
    _Pragma("GCC unroll 16") for (int v = 0; v < NV; ++v) bv[v] =
        (__m512bh)_mm512_loadu_si512(b[v] + g * P);
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * as + g * gs]));
      _Pragma("GCC unroll 16") for (int v = 0; v < NV; ++v) acc[r][v] =
          _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
    }
  }
  // The bias loaded once for the block's rows (C's stores may alias it).
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    const __mmask16 mk = tail_mask(cols - 16 * v);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(mk, bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* c = C + r * ldc + 16 * v;
      __m512 x = acc[r][v];
      if (bias) x = _mm512_add_ps(x, bv);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, c));
      _mm512_mask_storeu_ps(c, mk, x);
    }
  }
}

// acc += the dot products of u8's unsigned byte quads with s8's signed ones (vpdpbusd).
// Written out: GCC 12 copies every accumulator of Int8Block twice per k group around
// _mm512_dpbusd_epi32 (30 register moves per 15 products), which halves the kernel's rate.
GRUX_AVX512_VNNI inline void Dpbusd(__m512i& acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
}

// One vector of 16 results from its integer sums (`cols` of them real, none when <= 0): C =
// scale_x * scale_w * (sum - zero * column sum) + bias (+ C).
GRUX_AVX512_VNNI inline void Int8Store(__m512i acc, const RowQuant& rq, int64_t cols,
                                       const float* scale, const int32_t* colsum, const float* bias,
                                       bool accumulate, float* c) {
  const __mmask16 mk = tail_mask(cols);
  const __m512i s = _mm512_sub_epi32(
      acc, _mm512_mullo_epi32(_mm512_set1_epi32(rq.zero), _mm512_maskz_loadu_epi32(mk, colsum)));
  const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(rq.scale), _mm512_maskz_loadu_ps(mk, scale));
  __m512 x = bias ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, _mm512_maskz_loadu_ps(mk, bias))
                  : _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
  if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, c));
  _mm512_mask_storeu_ps(c, mk, x);
}

template <int MR, int NV>
GRUX_AVX512_VNNI void Int8Block(int64_t groups, const uint32_t* a, int64_t as, const RowQuant* rq,
                                const uint32_t* const* b, int64_t P, int64_t cols,
                                const float* scale, const int32_t* colsum, const float* bias,
                                bool accumulate, float* C, int64_t ldc) {
  __m512i acc[MR][NV];
  _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r)
      _Pragma("GCC unroll 16") for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i bv[NV];
    _Pragma("GCC unroll 16") for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b[v] + g * P);
    _Pragma("GCC unroll 16") for (int r = 0; r < MR; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(a[r * as + g]));
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) Dpbusd(acc[r][v], x, bv[v]);
    }
  }
  // Each vector's column terms loaded once for the block's rows (C's stores may alias them,
  // so the compiler reloaded them for every row).
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    const __mmask16 mk = tail_mask(cols - 16 * v);
    const __m512i cs = _mm512_maskz_loadu_epi32(mk, colsum + 16 * v);
    const __m512 sw = _mm512_maskz_loadu_ps(mk, scale + 16 * v);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(mk, bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      float* c = C + r * ldc + 16 * v;
      const __m512i s =
          _mm512_sub_epi32(acc[r][v], _mm512_mullo_epi32(_mm512_set1_epi32(rq[r].zero), cs));
      const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(rq[r].scale), sw);
      __m512 x = bias ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, bv)
                      : _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, c));
      _mm512_mask_storeu_ps(c, mk, x);
    }
  }
}

// One row of A against one panel of S vectors (S <= 3), the groups split four ways (12
// accumulators at S = 3, summed at the end: the sums are exact integers, so the order
// changes no bit). A single row reads each weight once: this reads the panel as one
// sequential stream, where Int8Block<1, 12> would read four panels side by side (M 1, K 256,
// N 768 from L2: 40% less time).
template <int S>
GRUX_AVX512_VNNI void Int8Row(int64_t groups, const uint32_t* a, const RowQuant& rq,
                              const uint32_t* b, int64_t P, int64_t cols, const float* scale,
                              const int32_t* colsum, const float* bias, bool accumulate, float* C) {
  constexpr int kSplit = 4;
  __m512i acc[kSplit][S];
#pragma GCC unroll 16
  for (int k = 0; k < kSplit; ++k)
#pragma GCC unroll 16
    for (int v = 0; v < S; ++v) acc[k][v] = _mm512_setzero_si512();
  int64_t g = 0;
  for (; g + kSplit <= groups; g += kSplit)
#pragma GCC unroll 16
    for (int k = 0; k < kSplit; ++k) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(a[g + k]));
#pragma GCC unroll 16
      for (int v = 0; v < S; ++v)
        Dpbusd(acc[k][v], x, _mm512_loadu_si512(b + (g + k) * P + 16 * v));
    }
  for (; g < groups; ++g) {
    const __m512i x = _mm512_set1_epi32(static_cast<int>(a[g]));
#pragma GCC unroll 16
    for (int v = 0; v < S; ++v) Dpbusd(acc[0][v], x, _mm512_loadu_si512(b + g * P + 16 * v));
  }
#pragma GCC unroll 16
  for (int v = 0; v < S; ++v) {
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(acc[0][v], acc[1][v]),
                                         _mm512_add_epi32(acc[2][v], acc[3][v]));
    Int8Store(sum, rq, cols - 16 * v, scale + 16 * v, colsum + 16 * v,
              bias ? bias + 16 * v : nullptr, accumulate, C + 16 * v);
  }
}

// The words of the stack buffer that holds the rows of A being multiplied, converted or
// quantized once for every panel they meet (32 KB); rows longer than the whole buffer
// (K > 16384 bf16, 32768 int8) run on the portable kernel.
constexpr int64_t kPreparedWords = 8192;
// The most rows prepared at a time.
constexpr int kSlabRows = 32;

// Words per prepared row (the converters write whole vectors: up to 64 bytes past the row).
int64_t prepared_stride(bool int8, int64_t K) {
  return ((int8 ? (K + 3) / 4 : (K + 1) / 2) + 15) / 16 * 16;
}

// Rows prepared at a time, for prepared rows of `as` words: as many as the buffer holds, at
// most kSlabRows. Every panel of B is read from L2 (or, where the panels do not fit the L2,
// from L3) once per slab; only the block of rows being multiplied needs to stay in L1. With 10
// rows a slab those reads would be the int8 kernel's limit (5-10% slower than 16 to 60 rows,
// 48 KiB of L1); a slab of a quarter of the L1 (12 rows at K 512 in bf16) would read the 1.5
// MB of W3's bf16 W_hh from L3 three times a step where the threads split the batch (3-5%
// slower than 32 rows).
int64_t slab_rows(int64_t as) {
  return std::min<int64_t>(kSlabRows, kPreparedWords / as);
}

// A one-row product reads each of its n panels (of `panel_bytes`) once per step. Its steps
// read them in rotations, every panel forwards: step s begins with the last `kept` panels
// step s - 1 read, the whole panels that stay in 3/4 of the L1 under least-recently-used
// replacement (W2 at batch 1: 3 of a thread's 8 int8 panels of 12 KB, with 48 KiB of L1).
// Returns the first panel of step `step`'s rotation (0 where nothing or everything stays).
int64_t rotation_start(int64_t n, int64_t panel_bytes, int64_t step) {
  const int64_t kept = l1d_cache_bytes() * 3 / 4 / panel_bytes;
  if (kept < 1 || kept >= n) return 0;
  return (n - (step % n) * kept % n) % n;
}

// Rows in groups that fit the buffer, each group prepared once; within a group, panel groups
// of NP panels (NP * S vectors, S the units per panel, sized by group_vectors) and the panels
// left over one at a time, each against the group's rows in blocks of kMr; a group of one
// row in int8 panel by panel (Int8Row). Successive steps (`step`) read B in orders that
// begin on what the last step left in L1: one row in int8 a rotation of the panels; bf16,
// on odd steps, every panel's groups backwards (and one row's panels from the last).
template <bool kInt8>
void LowpAvx512(int64_t M, const float* A, int64_t lda, const PackedB<float>& B, const float* bias,
                bool accumulate, float* C, int64_t ldc, int64_t p0, int64_t p1, int64_t step) {
  const bool reverse = !kInt8 && step % 2 != 0;
  const int64_t P = B.panel, S = P / 16, groups = kInt8 ? (B.K + 3) / 4 : (B.K + 1) / 2;
  const uint32_t* base =
      kInt8 ? reinterpret_cast<const uint32_t*>(B.i8) : reinterpret_cast<const uint32_t*>(B.bf16);
  const int64_t np_full = std::max<int64_t>(1, group_vectors(M) / S);
  const int64_t as = prepared_stride(kInt8, B.K);
  const int64_t slab = slab_rows(as);
  alignas(64) uint32_t prepared[kPreparedWords];
  RowQuant rq[kSlabRows];
  for (int64_t m0 = 0; m0 < M; m0 += slab) {
    const int64_t rows = std::min(slab, M - m0);
    const float* a = A + m0 * lda;
    float* c = C + m0 * ldc;
    if constexpr (kInt8)
      QuantizeRows(rows, B.K, a, lda, prepared, as, rq);
    else
      ConvertRows(rows, B.K, a, lda, prepared, as);
    auto block = [&](auto mr_tag, auto nv_tag, int64_t m, int64_t p, const uint32_t* const* b) {
      constexpr int MR = decltype(mr_tag)::value, NV = decltype(nv_tag)::value;
      const int64_t n0 = p * P, cols = std::min<int64_t>(NV * 16, B.N - n0);
      const float* bb = bias ? bias + n0 : nullptr;
      if constexpr (kInt8)
        Int8Block<MR, NV>(groups, prepared + m * as, as, rq + m, b, P, cols, B.scale + n0,
                          B.colsum + n0, bb, accumulate, c + m * ldc + n0, ldc);
      else
        Bf16Block<MR, NV>(groups, prepared + m * as, as, 1, b, P, cols, bb, accumulate,
                          c + m * ldc + n0, ldc, reverse);
    };
    // The group's rows against NV vectors starting at panel p.
    auto rows_times = [&](auto nv_tag, int64_t p) {
      constexpr int NV = decltype(nv_tag)::value;
      const uint32_t* b[NV];
      for (int v = 0; v < NV; ++v) b[v] = base + (p + v / S) * groups * P + (v % S) * 16;
      // Rows per block: 5 against 3 vectors (15 accumulators) run fastest for both precisions
      // (6 rows about 15% slower at M 64, H 512; 8 rows spill registers).
      constexpr int kMr = NV >= 12 ? 1 : NV >= 6 ? 2 : NV >= 3 ? 5 : kMaxMr;
      int64_t m = 0;
      // One block of r rows at row m (r below kMr, or up to 6 when kMr is 5).
      constexpr int kMaxBlock = kMr == 5 ? 6 : kMr - 1;
      const auto rows_block = [&](int64_t r) {
        GRUX_ASSERT(r <= kMaxBlock);
        with_rows<kMaxBlock>(r, [&](auto mr) { block(mr, nv_tag, m, p, b); });
      };
      if constexpr (kMr == 5) {
        // Blocks of 3 to 6 rows rather than 5s and a short tail (6 rows: one block, not
        // 5 + 1; 8: 4 + 4, not 5 + 3): a block of one row is a third as fast.
        const int64_t nb = (rows + 5) / 6;
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t r = rows / nb + (i < rows % nb ? 1 : 0);
          rows_block(r);
          m += r;
        }
      } else {
        for (; m + kMr <= rows; m += kMr)
          block(std::integral_constant<int, kMr>{}, nv_tag, m, p, b);
        rows_block(rows - m);
      }
    };
    auto run = [&](int64_t nv, int64_t p) {
      switch (nv) {
        case 12:
          return rows_times(std::integral_constant<int, 12>{}, p);
        case 6:
          return rows_times(std::integral_constant<int, 6>{}, p);
        case 3:
          return rows_times(std::integral_constant<int, 3>{}, p);
        case 2:
          return rows_times(std::integral_constant<int, 2>{}, p);
        default:
          return rows_times(std::integral_constant<int, 1>{}, p);
      }
    };
    if constexpr (kInt8) {
      if (rows == 1) {
        const int64_t n = p1 - p0, start = rotation_start(n, groups * P * 4, step);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t p = p0 + (start + i < n ? start + i : start + i - n);
          const int64_t n0 = p * P, cols = std::min(P, B.N - n0);
          const uint32_t* b = base + p * groups * P;
          const float* bb = bias ? bias + n0 : nullptr;
          const auto row = [&](auto s_tag) {
            Int8Row<decltype(s_tag)::value>(groups, prepared, rq[0], b, P, cols, B.scale + n0,
                                            B.colsum + n0, bb, accumulate, c + n0);
          };
          if (S == 3)
            row(std::integral_constant<int, 3>{});
          else if (S == 2)
            row(std::integral_constant<int, 2>{});
          else
            row(std::integral_constant<int, 1>{});
        }
        continue;
      }
    }
    // Groups of np_full panels, then single ones. bf16 on odd steps: one row's panels from the
    // last, and every row's pairs backwards (in Bf16Block), for a row alone or in a batch.
    const int64_t whole = np_full > 1 ? (p1 - p0) / np_full : 0, singles = p0 + whole * np_full;
    if (reverse && rows == 1) {
      for (int64_t p = p1 - 1; p >= singles; --p) run(S, p);
      for (int64_t i = whole - 1; i >= 0; --i) run(np_full * S, p0 + i * np_full);
    } else {
      for (int64_t i = 0; i < whole; ++i) run(np_full * S, p0 + i * np_full);
      for (int64_t p = singles; p < p1; ++p) run(S, p);
    }
  }
}

// ---- A^T B in bf16 (weight gradients) -----------------------------------------------------

// Rows k and k + 1 (r1 null: zeros), columns [0, n) of width `width` (a multiple of 16), as
// bf16 pairs: word j holds (r0[j], r1[j]) rounded, r0's in the low half (the order
// vdpbf16ps pairs them in); columns past n are zero.
GRUX_AVX512_BF16 inline void InterleaveRows(const float* r0, const float* r1, int64_t n,
                                            int64_t width, uint32_t* dst) {
  // cvtne2ps_pbh(r1, r0) holds r0's 16 values then r1's; this interleaves them.
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t i = 0; i < width; i += 16) {
    const __mmask16 mk = tail_mask(n - i);
    const __m512 lo = _mm512_maskz_loadu_ps(mk, r0 + i);
    const __m512 hi = r1 ? _mm512_maskz_loadu_ps(mk, r1 + i) : _mm512_setzero_ps();
    const __m512i t = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(dst + i, _mm512_permutexvar_epi16(idx, t));
  }
}

// pack_b_lowp's bf16 form where one of B's dimensions is contiguous (the GRU's weights, W and
// W^T, every training step): rows of B in pairs (stride_n 1, no column map) interleaved a
// vector at a time, or columns of B (stride_k 1, no row map) converted a vector at a time
// and stored word by word. False when neither applies.
GRUX_AVX512_BF16 bool PackBf16Avx512(int64_t K, int64_t N, int64_t panel, const float* src,
                                     int64_t stride_k, int64_t stride_n, const int64_t* k_map,
                                     const int64_t* n_map, uint32_t* dst) {
  const int64_t rows = (K + 1) / 2, panels = (N + panel - 1) / panel;
  if (stride_n == 1 && !n_map) {
    for (int64_t g = 0; g < rows; ++g) {
      const float* r0 = src + (k_map ? k_map[2 * g] : 2 * g) * stride_k;
      const float* r1 =
          2 * g + 1 < K ? src + (k_map ? k_map[2 * g + 1] : 2 * g + 1) * stride_k : nullptr;
      for (int64_t p = 0; p < panels; ++p)
        InterleaveRows(r0 + p * panel, r1 ? r1 + p * panel : nullptr,
                       std::min(panel, N - p * panel), panel, dst + (p * rows + g) * panel);
    }
    return true;
  }
  if (stride_k == 1 && !k_map) {
    std::vector<uint32_t> col((rows + 15) / 16 * 16);
    std::fill(dst, dst + panels * rows * panel, 0u);  // the padding columns
    for (int64_t n = 0; n < N; ++n) {
      ConvertRow(src + (n_map ? n_map[n] : n) * stride_n, K, col.data());
      uint32_t* d = dst + (n / panel) * rows * panel + n % panel;
      for (int64_t g = 0; g < rows; ++g) d[g * panel] = col[g];
    }
    return true;
  }
  return false;
}

// Columns of C per panel of the packed B, rows of A per packed tile (one vector of pairs),
// and rows per register block (4 x 3 vectors: 12 accumulators; a tile is 4 blocks).
constexpr int64_t kAtPanel = 48, kAtTile = 16, kAtMr = 8;

GRUX_AVX512_BF16 void AtBAvx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                const float* B, int64_t ldb, const int64_t* b_rows, bool accumulate,
                                float* C, int64_t ldc) {
  const int64_t Kp = (K + 1) / 2, tiles = (M + kAtTile - 1) / kAtTile;
  const int64_t panels = (N + kAtPanel - 1) / kAtPanel;
  // A as tiles of 16 rows: tile t, pair g at a[(t * Kp + g) * 16]; B as panels of 48
  // columns: panel p, pair g at b[(p * Kp + g) * 48]. Rows and columns past M, N are zero.
  // Every word is written below: no zeroing (it would cost a tenth of the product).
  std::unique_ptr<uint32_t[]> a(new uint32_t[tiles * Kp * kAtTile]),
      b(new uint32_t[panels * Kp * kAtPanel]);
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < Kp; ++g) {
    const bool pair = 2 * g + 1 < K;
    const float* a0 = A + 2 * g * lda;
    for (int64_t t = 0; t < tiles; ++t)
      InterleaveRows(a0 + t * kAtTile, pair ? a0 + lda + t * kAtTile : nullptr,
                     std::min(kAtTile, M - t * kAtTile), kAtTile, a.get() + (t * Kp + g) * kAtTile);
    const float* b0 = B + (b_rows ? b_rows[2 * g] : 2 * g) * ldb;
    const float* b1 = pair ? B + (b_rows ? b_rows[2 * g + 1] : 2 * g + 1) * ldb : nullptr;
    for (int64_t p = 0; p < panels; ++p)
      InterleaveRows(b0 + p * kAtPanel, b1 ? b1 + p * kAtPanel : nullptr,
                     std::min(kAtPanel, N - p * kAtPanel), kAtPanel,
                     b.get() + (p * Kp + g) * kAtPanel);
  }
  // Blocks of K whose tile of A (kc pairs x 16 rows) takes a quarter of the L2: it stays
  // there while every panel of B streams past it (M 1536, K 6400, N 256 and 512 with a 1 MiB
  // L2: about 40% faster than holding B's panel instead).
  const int64_t kc = std::clamp<int64_t>(l2_cache_bytes() / 4 / (kAtTile * 4), 64, Kp);
  // Threads split the tiles of A (rows of C).
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t t0 = t * tiles / nt, t1 = (t + 1) * tiles / nt;
    for (int64_t g0 = 0; g0 < Kp; g0 += kc) {
      const int64_t gn = std::min(kc, Kp - g0);
      const bool acc = accumulate || g0 > 0;
      for (int64_t tile = t0; tile < t1; ++tile) {
        const uint32_t* at = a.get() + (tile * Kp + g0) * kAtTile;
        for (int64_t p = 0; p < panels; ++p) {
          const uint32_t* bp[3];
          for (int v = 0; v < 3; ++v) bp[v] = b.get() + (p * Kp + g0) * kAtPanel + 16 * v;
          const int64_t n0 = p * kAtPanel, cols = std::min(kAtPanel, N - n0);
          for (int64_t r = 0; r < kAtTile; r += kAtMr) {
            const int64_t m = tile * kAtTile + r, rows = std::min(kAtMr, M - m);
            float* c = C + m * ldc + n0;
            with_rows<kAtMr>(rows, [&](auto mr) {
              Bf16Block<decltype(mr)::value, 3>(gn, at + r, 1, kAtTile, bp, kAtPanel, cols, nullptr,
                                                acc, c, ldc);
            });
          }
        }
      }
    }
  }
}
#endif  // GRUX_HAVE_X86

// The AVX-512 kernels run when the CPU has the instructions and the Highway target in use is
// an AVX-512 one (set_simd_target restricts both alike; tests run the portable kernels so).
bool use_avx512(Precision p) {
#if GRUX_HAVE_X86
  static const bool bf16 = __builtin_cpu_supports("avx512bf16") != 0;
  static const bool vnni = __builtin_cpu_supports("avx512vnni") != 0;
  if (!(p == Precision::bf16 ? bf16 : vnni)) return false;
  return (simd_target_bit() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
#else
  (void)p;
  return false;
#endif
}

}  // namespace

const char* lowp_kernel(Precision p) {
  if (p == Precision::f32) return "f32";
  if (!use_avx512(p)) return "portable";
  return p == Precision::bf16 ? "avx512_bf16" : "avx512_vnni";
}

int64_t packed_lowp_bytes(Precision p, int64_t K, int64_t N, int64_t panel) {
  const int64_t g = lowp_group(p), cols = (N + panel - 1) / panel * panel;
  const auto align = [](int64_t b) { return (b + 63) / 64 * 64; };
  const int64_t data = align((K + g - 1) / g * g * cols * (p == Precision::bf16 ? 2 : 1));
  return p == Precision::bf16 ? data : data + 2 * align(cols * 4);
}

PackedB<float> pack_b_lowp(Precision p, int64_t K, int64_t N, int64_t panel, const float* src,
                           int64_t stride_k, int64_t stride_n, const int64_t* k_map,
                           const int64_t* n_map, void* dst) {
  GRUX_ASSERT(p != Precision::f32 && panel % 16 == 0 && panel <= 48);
  if (p == Precision::int8 && K > kMaxInt8K)
    throw Error(
        fmt::format("int8 precision: a product over {} inputs is longer than the {} "
                    "its int32 sums hold; use bf16 or f32",
                    K, kMaxInt8K));
  const int64_t g = lowp_group(p), rows = (K + g - 1) / g, panels = (N + panel - 1) / panel;
  const int64_t cols = panels * panel;
  auto at = [&](int64_t k, int64_t n) {
    return src[(k_map ? k_map[k] : k) * stride_k + (n_map ? n_map[n] : n) * stride_n];
  };
  // Where element (k, n) of the packed form goes.
  auto slot = [&](int64_t k, int64_t n) {
    const int64_t pp = n / panel, j = n % panel;
    return ((pp * rows + k / g) * panel + j) * g + k % g;
  };
  PackedB<float> B{K, N, panel, nullptr};
#if GRUX_HAVE_X86
  if (p == Precision::bf16 && use_avx512(p) &&
      PackBf16Avx512(K, N, panel, src, stride_k, stride_n, k_map, n_map,
                     static_cast<uint32_t*>(dst))) {
    B.bf16 = static_cast<uint16_t*>(dst);
    return B;
  }
#endif
  if (p == Precision::bf16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    std::fill(d, d + rows * g * cols, uint16_t(0));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) d[slot(k, n)] = to_bf16(at(k, n));
    B.bf16 = d;
    return B;
  }
  int8_t* d = static_cast<int8_t*>(dst);
  const int64_t data = (rows * g * cols + 63) / 64 * 64;
  float* scale = reinterpret_cast<float*>(static_cast<char*>(dst) + data);
  int32_t* colsum =
      reinterpret_cast<int32_t*>(static_cast<char*>(dst) + data + (cols * 4 + 63) / 64 * 64);
  std::fill(d, d + rows * g * cols, int8_t(0));
  std::fill(scale, scale + cols, 0.0f);
  std::fill(colsum, colsum + cols, 0);
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(at(k, n)));
    if (!(amax > 0)) continue;  // zeros (or NaN: left as zeros, scale 0)
    scale[n] = amax / 127.0f;
    const float inv = 127.0f / amax;
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const float q = std::clamp(std::nearbyint(at(k, n) * inv), -127.0f, 127.0f);
      d[slot(k, n)] = static_cast<int8_t>(q);
      sum += static_cast<int32_t>(q);
    }
    colsum[n] = sum;
  }
  B.i8 = d;
  B.scale = scale;
  B.colsum = colsum;
  return B;
}

void gemm_packed_lowp(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                      const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                      int64_t p1, int64_t step) {
  p1 = std::min(p1, B.panels());
  if (M <= 0 || p0 >= p1) return;
  const Precision p = B.bf16 ? Precision::bf16 : Precision::int8;
#if GRUX_HAVE_X86
  if (use_avx512(p) && prepared_stride(p == Precision::int8, B.K) <= kPreparedWords) {
    if (p == Precision::bf16)
      return LowpAvx512<false>(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
    return LowpAvx512<true>(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
  }
#endif
  // Highway kernels on the SIMD target in use; plain C++ for a row longer than their buffer.
  if (gemm_packed_lowp_simd(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step)) return;
  if (p == Precision::bf16)
    return Bf16Portable(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
  Int8Portable(M, A, lda, B, bias, accumulate, C, ldc, p0, p1);
}

void gemm_at_b_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, const int64_t* b_rows, bool accumulate, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
    return;
  }
#if GRUX_HAVE_X86
  if (use_avx512(Precision::bf16))
    return AtBAvx512(M, N, K, A, lda, B, ldb, b_rows, accumulate, C, ldc);
#endif
  // Portable: the operands rounded to bf16 but held in f32 (their products are exact in f32
  // either way), through the f32 packed GEMM.
  std::vector<float> ar(K * M);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t m = 0; m < M; ++m) ar[k * M + m] = from_bf16(to_bf16(A[k * lda + m]));
  std::vector<float> br(K * N);
  for (int64_t k = 0; k < K; ++k) {
    const float* row = B + (b_rows ? b_rows[k] : k) * ldb;
    for (int64_t n = 0; n < N; ++n) br[k * N + n] = from_bf16(to_bf16(row[n]));
  }
  constexpr int64_t panel = 3 * kUnit<float>;
  Tensor packed = Tensor::empty({packed_size<float>(K, N, panel)}, DType::f32);  // aligned
  gemm_packed_parallel<float>(M, ar.data(), M, true,
                              pack_b_for_target<float>(K, N, panel, br.data(), N, 1, nullptr,
                                                       nullptr, packed.data<float>()),
                              nullptr, accumulate, C, ldc);
}

}  // namespace grux::cpu
