// The low-precision packed GEMMs (cpu/gemm_lowp.h) on CPUs without the AVX-512 instructions
// (AVX2, SSE4, ...): Highway kernels over the same packed bf16 / int8 B, with the bits of the
// plain C++ kernels of gemm_lowp.cpp (bf16: the same operations; int8: exact integer sums).
// - bf16: each word of B (a k pair of one column) widened to two f32 vectors (a shift, a
//   mask); every product of two bf16 values is exact in f32, so an FMA rounds once, as the
//   plain kernel's separate multiply and add do; the pairs in the same order.
// - int8 on x86 (SSSE3 and up): A's quantized bytes q taken as s = q - 128 (signed), each
//   quad of B against s's quad: |s| (unsigned) times b with s's sign (vpsignb) summed in
//   pairs (vpmaddubsw: |pair| <= 2 * 128 * 127 < 2^15, never saturated) and the pairs to
//   int32 (vpmaddwd by 1); sum q b = sum s b + 128 colsum. Four instructions a vector of
//   quads and row; the i16 route below takes four and, in blocks of 4 rows, a quarter of
//   B's 3 shifts. Blocks of 4 rows on an AVX2 core, B in L1: the i16 route 1.2-1.3x the f32
//   kernel's rate, this one 1.25-1.6x; the whole product at M 48, K 640, N 1920 in one
//   process: the i16 route 1.4-1.5x f32's, this one 1.6-1.8x.
// - int8 elsewhere: each quad of B split into two i16 pairs, (b0, b2) and (b1, b3), against A's
//   quantized bytes likewise paired (vpmaddwd on x86): exact int32 sums, as vpdpbusd's.
// Register blocks of 5 (bf16) or 4 (int8) rows x 2 vectors (16 columns on AVX2), the panel's
// vectors in windows of 2 (and 1 left over); a window of B (K x 16 columns) stays in L1
// across the row blocks. One or two rows (but int8's i16 route): windows of 6 or 3 vectors
// (LowpWindow).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm_lowp_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/gemm_lowp.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Words of A prepared on the stack (a slab of rows), as the AVX-512 kernels keep them.
constexpr int64_t kSimdPrepared = 8192;
// Rows a register block. bf16 5: 10 accumulators on AVX2, 2 widened vectors of B, a broadcast
// and the mask (with 6 rows, as the f32 kernel's 6 x 16, GCC kept 4 accumulators on the
// stack). int8 4: 8 accumulators and both halves of each quad of B in registers (with 6 rows
// GCC kept 12 products for the second half's additions, and spilled them).
template <bool kInt8>
constexpr int kSimdMr = kInt8 ? 4 : 5;

// Hides from the compiler (GCC and Clang) that p still points where it pointed, so that a load
// through it is done again rather than kept in a register.
#if defined(__GNUC__)
#define GRUX_OPAQUE(p) asm("" : "+r"(p))
#else
#define GRUX_OPAQUE(p) (void)0
#endif

// Rows [0, MR) x W vectors (L columns each) of one panel window: acc = the sum over the
// groups (last to first when reverse) of row r's prepared words against the window's words of
// B (b: its first group, P words a group), into out (MR rows of W L floats). Each group's even
// k for every row, then its odd k: each accumulator still adds its even product, then its odd
// one, group by group (the plain kernel's order), and only one half of the window's B is in
// registers at a time. The words are loaded again for the odd half (GRUX_OPAQUE): kept from
// the first load, they would take 2 more registers, and GCC moves accumulators to the stack.
template <int MR, int W>
HWY_INLINE void Bf16Block(int64_t groups, const float* a, int64_t as, const uint32_t* b, int64_t P,
                          bool reverse, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const int64_t L = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  V acc[MR][W];
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = hn::Zero(df);
  const auto hi_mask = hn::Set(du, 0xFFFF0000u);
  const int64_t first = reverse ? groups - 1 : 0, dg = reverse ? -1 : 1;
  const uint32_t* bg = b + first * P;
  const float* ag = a + 2 * first;
  for (int64_t i = 0; i < groups; ++i, bg += dg * P, ag += 2 * dg) {
    V half[W];
    for (int w = 0; w < W; ++w)
      half[w] = hn::BitCast(df, hn::ShiftLeft<16>(hn::LoadU(du, bg + w * L)));
    for (int r = 0; r < MR; ++r) {
      const V a0 = hn::Set(df, ag[r * as]);
      for (int w = 0; w < W; ++w) acc[r][w] = hn::MulAdd(a0, half[w], acc[r][w]);
    }
    const uint32_t* bo = bg;
    GRUX_OPAQUE(bo);
    for (int w = 0; w < W; ++w)
      half[w] = hn::BitCast(df, hn::And(hn::LoadU(du, bo + w * L), hi_mask));
    for (int r = 0; r < MR; ++r) {
      const V a1 = hn::Set(df, ag[r * as + 1]);
      for (int w = 0; w < W; ++w) acc[r][w] = hn::MulAdd(a1, half[w], acc[r][w]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w) hn::StoreU(acc[r][w], df, out + (r * W + w) * L);
}

// int8 with signed quads of A (the header's first int8 route).
#define GRUX_INT8_SIGNED_QUADS \
  (HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128)
constexpr bool kSignedQuads = GRUX_INT8_SIGNED_QUADS;

#if HWY_TARGET != HWY_SCALAR  // one-lane vectors hold no i16 pairs
#if GRUX_INT8_SIGNED_QUADS
// Lane j of the result: the sum over the 4 bytes e of lane j of s[e] * b[e] (signed bytes),
// exact. u holds |s| (as unsigned bytes: 128 for -128).
template <class V>
HWY_INLINE V QuadDots(V s, V u, V b) {
#if HWY_TARGET <= HWY_AVX3
  const __m512i sb =
      _mm512_mask_sub_epi8(b.raw, _mm512_movepi8_mask(s.raw), _mm512_setzero_si512(), b.raw);
  return V{_mm512_madd_epi16(_mm512_maddubs_epi16(u.raw, sb), _mm512_set1_epi16(1))};
#elif HWY_TARGET == HWY_AVX2
  return V{_mm256_madd_epi16(_mm256_maddubs_epi16(u.raw, _mm256_sign_epi8(b.raw, s.raw)),
                             _mm256_set1_epi16(1))};
#else  // SSSE3, SSE4
  return V{
      _mm_madd_epi16(_mm_maddubs_epi16(u.raw, _mm_sign_epi8(b.raw, s.raw)), _mm_set1_epi16(1))};
#endif
}
#endif

// The same for int8. Signed quads: row r's quad q as the words s (q - 128 a byte) and |s| at
// a[r * as + 2 q] and a[r * as + 2 q + 1]. Otherwise the quad as two words, (qa0, qa2) and
// (qa1, qa3) in i16 halves, at the same places. B's words hold a column's quad of bytes.
template <int MR, int W>
HWY_INLINE void Int8Block(int64_t groups, const uint32_t* a, int64_t as, const uint32_t* b,
                          int64_t P, int32_t* out) {
#if GRUX_INT8_SIGNED_QUADS
  const hn::ScalableTag<int32_t> d32;
  const int64_t L = hn::Lanes(d32);
  using V = hn::Vec<decltype(d32)>;
  V acc[MR][W];
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = hn::Zero(d32);
  const int32_t* bq = reinterpret_cast<const int32_t*>(b);
  for (int64_t g = 0; g < groups; ++g, bq += P) {
    V bv[W];
    for (int w = 0; w < W; ++w) bv[w] = hn::LoadU(d32, bq + w * L);
    for (int r = 0; r < MR; ++r) {
      const V s = hn::Set(d32, static_cast<int32_t>(a[r * as + 2 * g]));
      const V u = hn::Set(d32, static_cast<int32_t>(a[r * as + 2 * g + 1]));
      for (int w = 0; w < W; ++w) acc[r][w] = hn::Add(acc[r][w], QuadDots(s, u, bv[w]));
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w) hn::StoreU(acc[r][w], d32, out + (r * W + w) * L);
#else
  const hn::ScalableTag<int32_t> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  const int64_t L = hn::Lanes(d32);
  using V = hn::Vec<decltype(d32)>;
  using V16 = hn::Vec<decltype(d16)>;
  V acc[MR][W], acc1[MR][W];
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = acc1[r][w] = hn::Zero(d32);
  for (int64_t g = 0; g < groups; ++g) {
    V16 b02[W], b13[W];
    for (int w = 0; w < W; ++w) {
      const V16 x =
          hn::BitCast(d16, hn::LoadU(d32, reinterpret_cast<const int32_t*>(b) + g * P + w * L));
      b02[w] = hn::ShiftRight<8>(hn::ShiftLeft<8>(x));  // bytes 0 and 2, sign-extended
      b13[w] = hn::ShiftRight<8>(x);                    // bytes 1 and 3
    }
    for (int r = 0; r < MR; ++r) {
      const V16 a02 = hn::BitCast(d16, hn::Set(d32, static_cast<int32_t>(a[r * as + 2 * g])));
      const V16 a13 = hn::BitCast(d16, hn::Set(d32, static_cast<int32_t>(a[r * as + 2 * g + 1])));
      for (int w = 0; w < W; ++w) {
        acc[r][w] = hn::ReorderWidenMulAccumulate(d32, a02, b02[w], acc[r][w], acc1[r][w]);
        acc[r][w] = hn::ReorderWidenMulAccumulate(d32, a13, b13[w], acc[r][w], acc1[r][w]);
      }
    }
  }
  // Exact integers (|sum| < 2^31, pack_b_lowp bounds K). Where each product lands is the
  // target's choice (x86: a lane's own pair summed into acc; NEON: the lower half's i16 lanes'
  // products into acc, the upper half's into acc1): RearrangeToOddPlusEven gives every i32
  // lane its own pair's sum either way.
  for (int r = 0; r < MR; ++r)
    for (int w = 0; w < W; ++w)
      hn::StoreU(hn::RearrangeToOddPlusEven(acc[r][w], acc1[r][w]), d32, out + (r * W + w) * L);
#endif
}

#endif

// f(std::integral_constant<int, n>{}) for n in [1, Max].
template <int Max, class F>
HWY_INLINE void WithConstant(int64_t n, F&& f) {
  if constexpr (Max > 1) {
    if (n >= Max) return f(std::integral_constant<int, Max>{});
    return WithConstant<Max - 1>(n, f);
  } else {
    return f(std::integral_constant<int, 1>{});
  }
}

// Vectors a window for a slab of `rows`: 6 for one row, 3 for two, 2 otherwise; int8's i16
// route 2 (its shifts of B take the registers). With one row and 2 vectors a window, a group's
// B loads, A broadcasts and loop take as long as its products (int8 signed quads at batch 1,
// K 640, N 1920, B in L2: 73 GFLOP/s with windows of 6, 45 with 2).
template <bool kInt8>
constexpr int LowpWindow(int64_t rows) {
  return (kInt8 && !kSignedQuads) ? 2 : rows == 1 ? 6 : rows == 2 ? 3 : 2;
}

#if HWY_TARGET != HWY_SCALAR
// Rows of A in slabs that fit the prepared buffer; per panel, its vectors in windows (of 2, and
// a last one of 1), each against the slab's rows in blocks of up to kSimdMr, whose results
// (rows x window columns) then go to C as the plain kernels write them. A slab of one or two
// rows (batch 1 and 2's recurrent products, a stream's frames) takes windows of 6 or 3
// vectors: with 2, one row's bf16 sums would be 2 chains of dependent FMAs (slower than f32),
// and int8's loads and broadcasts as many instructions as its products.
// False when one row does not fit the buffer.
template <bool kInt8>
bool LowpSimd(int64_t M, const float* A, int64_t lda, const PackedB<float>& B, const float* bias,
              bool accumulate, float* C, int64_t ldc, int64_t p0, int64_t p1, int64_t step) {
  const hn::ScalableTag<float> df;
  const int64_t L = hn::Lanes(df), P = B.panel, NV = P / L;
  const int64_t groups = kInt8 ? (B.K + 3) / 4 : (B.K + 1) / 2;
  const int64_t as = 2 * groups;  // words (or floats) of a prepared row
  if (as > kSimdPrepared || P % L != 0) return false;
  // Whole blocks of kSimdMr rows where the buffer holds them: otherwise a slab of 5 rows (int8
  // with 4, K 1536) runs as 4 + 1, and a lone row reads and widens B for one row's
  // multiply-adds (bf16 at K 1536 then at less than half int8's rate).
  const int64_t fit = std::min<int64_t>(kSimdPrepared / as, 64);
  constexpr int MRmax = kSimdMr<kInt8>;
  const int64_t slab = fit >= MRmax ? fit / MRmax * MRmax : fit;
  const bool reverse = !kInt8 && step % 2 != 0;
  const uint32_t* base =
      kInt8 ? reinterpret_cast<const uint32_t*>(B.i8) : reinterpret_cast<const uint32_t*>(B.bf16);
  HWY_ALIGN uint32_t prepared[kSimdPrepared];
  float* pf = reinterpret_cast<float*>(prepared);
  RowQuant rq[64];
  HWY_ALIGN float out[MRmax * 2 * 64];  // a block's results (up to 64 lanes a vector)
  int32_t* out_i = reinterpret_cast<int32_t*>(out);
  for (int64_t m0 = 0; m0 < M; m0 += slab) {
    const int64_t rows = std::min(slab, M - m0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = A + (m0 + r) * lda;
      if constexpr (kInt8) {
        rq[r] = row_quant_of(a, B.K);
        for (int64_t q = 0; q < groups; ++q) {
          uint32_t qa[4];
          for (int e = 0; e < 4; ++e)
            qa[e] = 4 * q + e < B.K ? quantize(a[4 * q + e], rq[r]) : uint32_t(rq[r].zero);
          if constexpr (kSignedQuads) {
            uint32_t sw = 0, uw = 0;
            for (int e = 0; e < 4; ++e) {
              const int32_t sv = static_cast<int32_t>(qa[e]) - 128;
              sw |= (static_cast<uint32_t>(sv) & 0xFFu) << (8 * e);
              uw |= static_cast<uint32_t>(sv < 0 ? -sv : sv) << (8 * e);
            }
            prepared[r * as + 2 * q] = sw;
            prepared[r * as + 2 * q + 1] = uw;
          } else {
            prepared[r * as + 2 * q] = qa[0] | qa[2] << 16;
            prepared[r * as + 2 * q + 1] = qa[1] | qa[3] << 16;
          }
        }
      } else {
        for (int64_t k = 0; k < as; ++k) pf[r * as + k] = k < B.K ? from_bf16(to_bf16(a[k])) : 0.0f;
      }
    }
    const int64_t wide = LowpWindow<kInt8>(rows);
    for (int64_t p = p0; p < p1; ++p) {
      const uint32_t* panel = base + p * groups * P;
      const int64_t n0 = p * P, cols = std::min(P, B.N - n0);
      for (int64_t v0 = 0; v0 < NV && v0 * L < cols; v0 += wide) {
        const int64_t W = std::min(wide, NV - v0);
        const int64_t c0 = v0 * L, wc = std::min<int64_t>(W * L, cols - c0);
        for (int64_t m = 0; m < rows; m += MRmax) {
          const int64_t mr = std::min<int64_t>(MRmax, rows - m);
          WithConstant<MRmax>(mr, [&](auto mr_tag) {
            constexpr int MR = decltype(mr_tag)::value;
            constexpr int kWmax = LowpWindow<kInt8>(MR);
            WithConstant<kWmax>(W, [&](auto w_tag) {
              constexpr int kW = decltype(w_tag)::value;
              if constexpr (kInt8)
                Int8Block<MR, kW>(groups, prepared + m * as, as, panel + c0, P, out_i);
              else
                Bf16Block<MR, kW>(groups, pf + m * as, as, panel + c0, P, reverse, out);
            });
          });
          // The plain kernels' epilogue: bf16's by whole vectors (the same additions), then
          // element by element (int8's, whose fused multiply-add is std::fma on every target).
          for (int64_t r = 0; r < mr; ++r) {
            float* c = C + (m0 + m + r) * ldc + n0 + c0;
            int64_t j0 = 0;
            if constexpr (!kInt8) {
              for (; j0 + L <= wc; j0 += L) {
                auto x = hn::Load(df, out + r * W * L + j0);
                if (bias) x = hn::Add(x, hn::LoadU(df, bias + n0 + c0 + j0));
                if (accumulate) x = hn::Add(x, hn::LoadU(df, c + j0));
                hn::StoreU(x, df, c + j0);
              }
            }
            for (int64_t j = j0; j < wc; ++j) {
              const int64_t n = n0 + c0 + j;
              float x;
              if constexpr (kInt8) {
                // sum (q - zero) b: the kernel's sum (of q b; signed quads: of (q - 128) b)
                // plus off times the column's sum of b, in wrapping (exact) int32.
                const RowQuant& q = rq[m + r];
                const int32_t off = kSignedQuads ? 128 - q.zero : -q.zero;
                const int32_t s = static_cast<int32_t>(static_cast<uint32_t>(out_i[r * W * L + j]) +
                                                       static_cast<uint32_t>(off) *
                                                           static_cast<uint32_t>(B.colsum[n]));
                const float sc = q.scale * B.scale[n];
                x = bias ? std::fma(float(s), sc, bias[n]) : float(s) * sc;
              } else {
                x = out[r * W * L + j];
                if (bias) x += bias[n];
              }
              if (accumulate) x += c[j];
              c[j] = x;
            }
          }
        }
      }
    }
  }
  return true;
}
#endif

#if HWY_TARGET == HWY_SCALAR
// Scalar: the plain C++ kernels.
bool Bf16SimdKernel(int64_t, const float*, int64_t, const PackedB<float>&, const float*, bool,
                    float*, int64_t, int64_t, int64_t, int64_t) {
  return false;
}
bool Int8SimdKernel(int64_t, const float*, int64_t, const PackedB<float>&, const float*, bool,
                    float*, int64_t, int64_t, int64_t, int64_t) {
  return false;
}
#else
bool Bf16SimdKernel(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                    const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                    int64_t p1, int64_t step) {
  return LowpSimd<false>(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
}
bool Int8SimdKernel(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                    const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                    int64_t p1, int64_t step) {
  return LowpSimd<true>(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(Bf16SimdKernel);
HWY_EXPORT(Int8SimdKernel);

bool gemm_packed_lowp_simd(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                           const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                           int64_t p1, int64_t step) {
  if (B.bf16)
    return HWY_DYNAMIC_DISPATCH(Bf16SimdKernel)(M, A, lda, B, bias, accumulate, C, ldc, p0, p1,
                                                step);
  return HWY_DYNAMIC_DISPATCH(Int8SimdKernel)(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
