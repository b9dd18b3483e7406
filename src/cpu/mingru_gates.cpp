// Fused pointwise minGRU kernels with Highway SIMD (dynamic dispatch to the best target this
// CPU supports): scan coefficients forward, the chain to the projections backward.
// Contracts in cpu/mingru_gates.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/mingru_gates.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/mingru_gates.h"
#include "cpu/simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Row r of arrays whose row 0 is step t0: step t0 + r / N of sequence r % N.
inline bool is_padding(int64_t r, int64_t t0, int64_t N, const int64_t* len) {
  return len && t0 + r / N >= len[r % N];
}

// Calls body(lanes, j) for each SIMD chunk of a row of H units starting at unit j.
template <class D, class Body>
HWY_INLINE void ForUnits(D d, int64_t H, Body body) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < H; j += L) body(Chunk<D>(d, H - j), j);
}

// The gate of one chunk: z = sigmoid(kz) and a = 1 - z = sigmoid(-kz), both from one
// e = exp(-|kz|) (never overflows): sigmoid(|kz|) = 1 / (1 + e), sigmoid(-|kz|) = e / (1 + e).
template <class D, class V>
HWY_INLINE void Gate(D d, V kz, V& z, V& a) {
  const V one = hn::Set(d, hn::TFromD<D>(1));
  const V e = hn::Exp(d, hn::Neg(hn::Abs(kz)));
  const V big = hn::Div(one, hn::Add(one, e));
  const V small = hn::Mul(e, big);
  const auto pos = hn::Ge(kz, hn::Zero(d));
  z = hn::IfThenElse(pos, big, small);
  a = hn::IfThenElse(pos, small, big);
}

template <typename T>
void ForwardCoeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,
                   const T* k, const T* bias, T* a, T* b) {
  const hn::ScalableTag<T> d;
  for (int64_t r = r0; r < r1; ++r) {
    T* ar = a + r * H;
    T* br = b + r * H;
    if (is_padding(r, t0, N, len)) {
      std::fill(ar, ar + H, T(1));
      std::fill(br, br + H, T(0));
      continue;
    }
    const T* kr = k + r * 2 * H;
    ForUnits(d, H, [&](const auto& c, int64_t j) {
      const auto kz = hn::Add(c.load(kr + j), c.load_or_zero(bias ? bias + j : nullptr));
      const auto v = hn::Add(c.load(kr + H + j), c.load_or_zero(bias ? bias + H + j : nullptr));
      hn::Vec<hn::ScalableTag<T>> z, av;
      Gate(d, kz, z, av);
      c.store(av, ar + j);
      c.store(hn::Mul(z, v), br + j);
    });
  }
}

template <typename T>
void ForwardLogCoeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,
                      const T* k, const T* bias, T* la, T* lb) {
  const hn::ScalableTag<T> d;
  const auto zero = hn::Zero(d);
  const auto half = hn::Set(d, T(0.5));
  for (int64_t r = r0; r < r1; ++r) {
    T* ar = la + r * H;
    T* br = lb + r * H;
    if (is_padding(r, t0, N, len)) {
      std::fill(ar, ar + H, T(0));
      std::fill(br, br + H, -std::numeric_limits<T>::infinity());
      continue;
    }
    const T* kr = k + r * 2 * H;
    ForUnits(d, H, [&](const auto& c, int64_t j) {
      const auto kz = hn::Add(c.load(kr + j), c.load_or_zero(bias ? bias + j : nullptr));
      const auto v = hn::Add(c.load(kr + H + j), c.load_or_zero(bias ? bias + H + j : nullptr));
      // softplus(x) = max(x, 0) + log1p(exp(-|x|)); log(1 - z) = -softplus(kz) and
      // log z = -softplus(-kz) share the log1p term.
      const auto l1 = hn::Log1p(d, hn::Exp(d, hn::Neg(hn::Abs(kz))));
      const auto log_a = hn::Neg(hn::Add(hn::Max(kz, zero), l1));
      const auto log_z = hn::Neg(hn::Add(hn::Max(hn::Neg(kz), zero), l1));
      // log g(v): log(v + 0.5) for v >= 0, log sigmoid(v) = v - log1p(exp(v)) below.
      const auto log_g_pos = hn::Log(d, hn::Add(hn::Max(v, zero), half));
      const auto log_g_neg =
          hn::Sub(hn::Min(v, zero), hn::Log1p(d, hn::Exp(d, hn::Neg(hn::Abs(v)))));
      const auto log_g = hn::IfThenElse(hn::Ge(v, zero), log_g_pos, log_g_neg);
      c.store(log_a, ar + j);
      c.store(hn::Add(log_z, log_g), br + j);
    });
  }
}

template <typename T>
void BackwardDecay(int64_t r0, int64_t r1, int64_t rows, int64_t t0, int64_t N, int64_t H,
                   const int64_t* len, const T* k, const T* bias, T* a_next) {
  const hn::ScalableTag<T> d;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t rn = r + N;
    T* ar = a_next + r * H;
    if (rn >= rows || is_padding(rn, t0, N, len)) {
      std::fill(ar, ar + H, rn >= rows ? T(0) : T(1));
      continue;
    }
    const T* kr = k + rn * 2 * H;
    ForUnits(d, H, [&](const auto& c, int64_t j) {
      const auto kz = hn::Add(c.load(kr + j), c.load_or_zero(bias ? bias + j : nullptr));
      hn::Vec<hn::ScalableTag<T>> z, av;
      Gate(d, kz, z, av);
      c.store(av, ar + j);
    });
  }
}

template <typename T>
void Backward(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,
              bool log_space, const T* k, const T* bias, const T* h0, const T* h, const T* G, T* dk,
              T* dh0) {
  const hn::ScalableTag<T> d;
  const auto zero = hn::Zero(d);
  const auto one = hn::Set(d, T(1));
  const auto half = hn::Set(d, T(0.5));
  for (int64_t r = r0; r < r1; ++r) {
    T* dkr = dk + r * 2 * H;
    if (is_padding(r, t0, N, len)) {
      std::fill(dkr, dkr + 2 * H, T(0));
      continue;
    }
    const T* kr = k + r * 2 * H;
    const T* hp = r < N ? (h0 ? h0 + r * H : nullptr) : h + (r - N) * H;
    const T* Gr = G + r * H;
    T* dh0r = r < N && dh0 ? dh0 + r * H : nullptr;
    ForUnits(d, H, [&](const auto& c, int64_t j) {
      const auto kz = hn::Add(c.load(kr + j), c.load_or_zero(bias ? bias + j : nullptr));
      const auto v = hn::Add(c.load(kr + H + j), c.load_or_zero(bias ? bias + H + j : nullptr));
      hn::Vec<hn::ScalableTag<T>> z, av;
      Gate(d, kz, z, av);
      auto cand = v, dcand = one;
      if (log_space) {
        // g(v) and g'(v): v + 0.5 and 1 for v >= 0; sigmoid(v) and sigmoid(v)(1 - sigmoid(v))
        // below, with sigmoid(v) = e / (1 + e), e = exp(-|v|) = exp(v) there.
        const auto e = hn::Exp(d, hn::Neg(hn::Abs(v)));
        const auto q = hn::Div(one, hn::Add(one, e));
        const auto s = hn::Mul(e, q);
        const auto pos = hn::Ge(v, zero);
        cand = hn::IfThenElse(pos, hn::Add(v, half), s);
        dcand = hn::IfThenElse(pos, one, hn::Mul(s, q));
      }
      const auto g = c.load(Gr + j);
      const auto dkz =
          hn::Mul(hn::Mul(g, hn::Sub(cand, c.load_or_zero(hp ? hp + j : nullptr))), hn::Mul(z, av));
      c.store(dkz, dkr + j);
      c.store(hn::Mul(hn::Mul(g, z), dcand), dkr + H + j);
      if (dh0r) c.store(hn::Mul(g, av), dh0r + j);
    });
  }
}

// Non-template entry points, one per kernel and type, for HWY_EXPORT.
#define GRUX_MINGRU_ENTRIES(T, S)                                                                  \
  void ForwardCoeffs##S(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,                  \
                        const int64_t* len, const T* k, const T* bias, T* a, T* b) {               \
    ForwardCoeffs(r0, r1, t0, N, H, len, k, bias, a, b);                                           \
  }                                                                                                \
  void ForwardLogCoeffs##S(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,               \
                           const int64_t* len, const T* k, const T* bias, T* la, T* lb) {          \
    ForwardLogCoeffs(r0, r1, t0, N, H, len, k, bias, la, lb);                                      \
  }                                                                                                \
  void BackwardDecay##S(int64_t r0, int64_t r1, int64_t rows, int64_t t0, int64_t N, int64_t H,    \
                        const int64_t* len, const T* k, const T* bias, T* a_next) {                \
    BackwardDecay(r0, r1, rows, t0, N, H, len, k, bias, a_next);                                   \
  }                                                                                                \
  void Backward##S(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,   \
                   bool log_space, const T* k, const T* bias, const T* h0, const T* h, const T* G, \
                   T* dk, T* dh0) {                                                                \
    Backward(r0, r1, t0, N, H, len, log_space, k, bias, h0, h, G, dk, dh0);                        \
  }
GRUX_MINGRU_ENTRIES(float, F32)
GRUX_MINGRU_ENTRIES(double, F64)
#undef GRUX_MINGRU_ENTRIES

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

#define GRUX_MINGRU_DISPATCH(T, S)                                                                 \
  HWY_EXPORT(ForwardCoeffs##S);                                                                    \
  HWY_EXPORT(ForwardLogCoeffs##S);                                                                 \
  HWY_EXPORT(BackwardDecay##S);                                                                    \
  HWY_EXPORT(Backward##S);                                                                         \
  template <>                                                                                      \
  void mingru_forward_coeffs<T>(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,          \
                                const int64_t* len, const T* k, const T* bias, T* a, T* b) {       \
    HWY_DYNAMIC_DISPATCH(ForwardCoeffs##S)(r0, r1, t0, N, H, len, k, bias, a, b);                  \
  }                                                                                                \
  template <>                                                                                      \
  void mingru_forward_log_coeffs<T>(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,      \
                                    const int64_t* len, const T* k, const T* bias, T* la, T* lb) { \
    HWY_DYNAMIC_DISPATCH(ForwardLogCoeffs##S)(r0, r1, t0, N, H, len, k, bias, la, lb);             \
  }                                                                                                \
  template <>                                                                                      \
  void mingru_backward_decay<T>(int64_t r0, int64_t r1, int64_t rows, int64_t t0, int64_t N,       \
                                int64_t H, const int64_t* len, const T* k, const T* bias,          \
                                T* a_next) {                                                       \
    HWY_DYNAMIC_DISPATCH(BackwardDecay##S)(r0, r1, rows, t0, N, H, len, k, bias, a_next);          \
  }                                                                                                \
  template <>                                                                                      \
  void mingru_backward<T>(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,                \
                          const int64_t* len, bool log_space, const T* k, const T* bias,           \
                          const T* h0, const T* h, const T* G, T* dk, T* dh0) {                    \
    HWY_DYNAMIC_DISPATCH(Backward##S)                                                              \
    (r0, r1, t0, N, H, len, log_space, k, bias, h0, h, G, dk, dh0);                                \
  }
GRUX_MINGRU_DISPATCH(float, F32)
GRUX_MINGRU_DISPATCH(double, F64)
#undef GRUX_MINGRU_DISPATCH

}  // namespace grux::cpu
#endif  // HWY_ONCE
