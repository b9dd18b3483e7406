// The gate nonlinearities the fused GRU kernels share (gru_gates.cpp, gru_stream.cpp): e^x,
// tanh and sigmoid on SIMD vectors, f32 by grux's own polynomials, f64 by Highway's.
// A Highway "-inl" header, included once per SIMD target (see simd_row-inl.h).
#if defined(GRUX_CPU_GATE_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GRUX_CPU_GATE_MATH_INL_H_
#undef GRUX_CPU_GATE_MATH_INL_H_
#else
#define GRUX_CPU_GATE_MATH_INL_H_
#endif

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "cpu/simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^x in f32 for x in [-87, 88] (the caller clamps): 2^n p(r) with n = round(x / ln 2),
// r = x - n ln 2 in two parts (|r| <= ln 2 / 2), p the degree-7 Taylor polynomial, 2^n put
// in the exponent bits. Against std::exp in f64 at 12.8 million points of [-87, 88]: at most
// 0.93 ulp (Highway's Exp: 1.02), in about 27% fewer cycles. Its ~13 operations replace
// Highway's ~25, which also handle arguments this caller never passes.
// kShort (the real-time kernel, whose steps wait on each gate): p by Estrin's scheme, 3 FMAs
// deep after r^2 and r^4 instead of Horner's 7, for about 12 fewer cycles of latency; the
// same polynomial, rounded differently (within the same ulp bounds in tests).
template <bool kShort = false, class D, class V>
HWY_INLINE V ExpF32(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), x);
  r = hn::NegMulAdd(n, hn::Set(d, 1.428606765330187045e-6f), r);
  const auto scale = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  if constexpr (kShort) {
    const V one = hn::Set(d, 1.0f);
    const V r2 = hn::Mul(r, r), r4 = hn::Mul(r2, r2);
    const V p01 = hn::Add(r, one);
    const V p23 = hn::MulAdd(r, hn::Set(d, 1.0f / 6), hn::Set(d, 0.5f));
    const V p45 = hn::MulAdd(r, hn::Set(d, 1.0f / 120), hn::Set(d, 1.0f / 24));
    const V p67 = hn::MulAdd(r, hn::Set(d, 1.0f / 5040), hn::Set(d, 1.0f / 720));
    const V p = hn::MulAdd(hn::MulAdd(p67, r2, p45), r4, hn::MulAdd(p23, r2, p01));
    return hn::Mul(p, hn::BitCast(d, scale));
  }
  V p = hn::Set(d, 1.0f / 5040);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  return hn::Mul(p, hn::BitCast(d, scale));
}

// tanh in f32: for |x| < 0.625 x p(x^2), p a degree-5 polynomial fitted to tanh(x) / x by
// tests/reference/fit_gate_tanh.py (coefficients rounded to f32), at most 1.22 ulp there;
// above, 1 - 2 / (exp(2|x|) + 1), at most 1.7 ulp with a 1-ulp exp; the sign put back.
template <bool kShort = false, class D, class V>
HWY_INLINE V TanhF32(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  const V sign = hn::And(hn::SignBit(d), x);
  const V a = hn::Xor(x, sign);
  const V u = hn::Mul(a, a);
  V p = hn::Set(d, -0.005659992806613445f);
  p = hn::MulAdd(p, u, hn::Set(d, 0.020590992644429207f));
  p = hn::MulAdd(p, u, hn::Set(d, -0.053721070289611816f));
  p = hn::MulAdd(p, u, hn::Set(d, 0.13331127166748047f));
  p = hn::MulAdd(p, u, hn::Set(d, -0.3333325982093811f));
  p = hn::MulAdd(p, u, one);
  const V e = ExpF32<kShort>(d, MinOrNaN(hn::Set(d, 88.0f), hn::Add(a, a)));
  const V large = hn::Sub(one, hn::Div(hn::Set(d, 2.0f), hn::Add(e, one)));
  return hn::Xor(hn::IfThenElse(hn::Lt(a, hn::Set(d, 0.625f)), hn::Mul(a, p), large), sign);
}

// tanh: the f32 one above, Highway's in f64.
template <bool kShort = false, class D, class V>
HWY_INLINE V GateTanh(D d, V x) {
  if constexpr (sizeof(hn::TFromD<D>) == 4)
    return TanhF32<kShort>(d, x);
  else
    return hn::Tanh(d, x);
}

// sigmoid(x) = 1 / (1 + exp(-x)); exp's argument is clamped below its overflow point so that
// saturated inputs give exactly 0 rather than relying on exp's behaviour beyond its range
// (and, in f32, above -87, where 1 + exp(-x) is 1 already).
template <bool kShort = false, class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  using T = hn::TFromD<D>;
  const V one = hn::Set(d, T(1));
  if constexpr (sizeof(T) == 4) {
    const V arg = MaxOrNaN(hn::Set(d, T(-87)), MinOrNaN(hn::Set(d, T(88)), hn::Neg(x)));
    return hn::Div(one, hn::Add(one, ExpF32<kShort>(d, arg)));
  } else {
    return hn::Div(one, hn::Add(one, hn::Exp(d, MinOrNaN(hn::Set(d, T(700)), hn::Neg(x)))));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#endif  // GRUX_CPU_GATE_MATH_INL_H_
