// The gate nonlinearities the fused GRU kernels share (gru_gates.cpp, gru_stream.cpp): e^x,
// tanh and sigmoid on SIMD vectors, f32 by grux's own polynomials, f64 by Highway's; the
// real-time kernel's shorter-latency rational f32 tanh and sigmoid.
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
template <class D, class V>
HWY_INLINE V ExpF32(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), x);
  r = hn::NegMulAdd(n, hn::Set(d, 1.428606765330187045e-6f), r);
  const auto scale = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
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
template <class D, class V>
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
  const V e = ExpF32(d, MinOrNaN(hn::Set(d, 88.0f), hn::Add(a, a)));
  const V large = hn::Sub(one, hn::Div(hn::Set(d, 2.0f), hn::Add(e, one)));
  return hn::Xor(hn::IfThenElse(hn::Lt(a, hn::Set(d, 0.625f)), hn::Mul(a, p), large), sign);
}

// tanh: the f32 one above, Highway's in f64.
template <class D, class V>
HWY_INLINE V GateTanh(D d, V x) {
  if constexpr (sizeof(hn::TFromD<D>) == 4)
    return TanhF32(d, x);
  else
    return hn::Tanh(d, x);
}

// sigmoid(x) = 1 / (1 + exp(-x)); exp's argument is clamped below its overflow point so that
// saturated inputs give exactly 0 rather than relying on exp's behaviour beyond its range
// (and, in f32, above -87, where 1 + exp(-x) is 1 already).
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  using T = hn::TFromD<D>;
  const V one = hn::Set(d, T(1));
  if constexpr (sizeof(T) == 4) {
    const V arg = MaxOrNaN(hn::Set(d, T(-87)), MinOrNaN(hn::Set(d, T(88)), hn::Neg(x)));
    return hn::Div(one, hn::Add(one, ExpF32(d, arg)));
  } else {
    return hn::Div(one, hn::Add(one, hn::Exp(d, MinOrNaN(hn::Set(d, T(700)), hn::Neg(x)))));
  }
}

// The real-time kernel's gates (cpu/gru_stream.cpp), whose every step waits on them: a
// rational tanh, tanh(x) ~ x P(x^2) / Q(x^2) with P of degree 6 and Q of degree 3 fitted by
// tests/reference/fit_stream_tanh.py on |x| <= 9 (the argument is clamped there; NaN passes),
// P by Estrin's scheme. sigmoid(x) = (1 + tanh(x / 2)) / 2 from the same constants (the
// kernel keeps one set of them in registers): (Q + a P) / (2 Q) with a = x / 2 clamped. The
// kernel stores the rows that feed a sigmoid halved (exact: a power of two) and calls
// StreamSigmoidOfHalf, so no multiply by 1/2 waits on the chain; the square is taken from
// the unclamped argument and clamped at 81 (the same value as squaring the clamped one, one
// operation shorter), the clamped argument itself formed beside it. Chain: a multiply, a
// minimum, 4 multiply-adds deep, a multiply-add and one division (about 8 ns, against 13 for
// the sigmoid above and 20 for its tanh, measure_stream_latencies). Measured
// against f64 (tests/test_gru_stream.cpp): at most 3.0e-7 absolute for tanh, 2.2e-7 for
// sigmoid (about 5 ulp of 1, against 1.7), 3.5 ulp relative for tanh near 0: inside the
// engine's f32 tolerance. f32 only.
constexpr float kStreamTanhP[7] = {1.0f,
                                   0.130857617f,
                                   0.0031058751f,
                                   1.11733743e-05f,
                                   -2.02966426e-08f,
                                   5.30921834e-11f,
                                   -8.56143159e-14f};
constexpr float kStreamTanhQ[4] = {1.0f, 0.4641909f, 0.0245029218f, 0.000254888f};

// P(u) and Q(u) for u = min(x^2, 81), and a = x clamped to [-9, 9].
template <class D, class V>
HWY_INLINE void StreamRationalPQ(D d, V x, V& a, V& p, V& q) {
  const auto cp = [&](int i) { return hn::Set(d, kStreamTanhP[i]); };
  const auto cq = [&](int i) { return hn::Set(d, kStreamTanhQ[i]); };
  const V u = MinOrNaN(hn::Set(d, 81.0f), hn::Mul(x, x));
  a = MaxOrNaN(hn::Set(d, -9.0f), MinOrNaN(hn::Set(d, 9.0f), x));
  const V u2 = hn::Mul(u, u), u4 = hn::Mul(u2, u2);
  const V lo = hn::MulAdd(hn::MulAdd(cp(3), u, cp(2)), u2, hn::MulAdd(cp(1), u, cp(0)));
  const V hi = hn::MulAdd(cp(6), u2, hn::MulAdd(cp(5), u, cp(4)));
  p = hn::MulAdd(hi, u4, lo);
  q = hn::MulAdd(hn::MulAdd(cq(3), u, cq(2)), u2, hn::MulAdd(cq(1), u, cq(0)));
}

template <class D, class V>
HWY_INLINE V StreamTanh(D d, V x) {
  V a, p, q;
  StreamRationalPQ(d, x, a, p, q);
  return hn::Div(hn::Mul(a, p), q);
}

// sigmoid(2 y).
template <class D, class V>
HWY_INLINE V StreamSigmoidOfHalf(D d, V y) {
  V a, p, q;
  StreamRationalPQ(d, y, a, p, q);
  return hn::Div(hn::MulAdd(a, p, q), hn::Add(q, q));
}

template <class D, class V>
HWY_INLINE V StreamSigmoid(D d, V x) {
  return StreamSigmoidOfHalf(d, hn::Mul(x, hn::Set(d, 0.5f)));
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#endif  // GRUX_CPU_GATE_MATH_INL_H_
