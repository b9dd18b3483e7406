// Fused pointwise LSTM gate kernels with Highway SIMD (dynamic dispatch to the best target
// this CPU supports). Forward and backward side by side; contracts in cpu/lstm_gates.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/lstm_gates.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "cpu/gate_math-inl.h"
#include "cpu/gemm_packed.h"
#include "cpu/lstm_gates.h"
#include "cpu/simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls body(chunk, j, c4, u) for each SIMD chunk of the unit blocks [b0, b1) of a row: j the
// chunk's first unit, c4 its column of gate i in the 4H layout (gate q at c4 + q u), u the
// block's units.
template <class D, class Body>
HWY_INLINE void ForBlocks4(D d, int64_t H, int64_t b0, int64_t b1, Body body) {
  using T = hn::TFromD<D>;
  constexpr int64_t U = kUnit<T>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t bb = b0; bb < b1; ++bb) {
    const int64_t j0 = bb * U, u = std::min(U, H - j0);
    for (int64_t x = 0; x < u; x += L) body(Chunk<D>(d, u - x), j0 + x, 4 * j0 + x, u);
  }
}

template <typename T>
void Forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* a, const T* c_prev, T* c, T* m,
             int64_t ldm, bool save) {
  const hn::ScalableTag<T> d;
  for (int64_t b = 0; b < B; ++b) {
    T* ab = a + b * 4 * H;
    ForBlocks4(d, H, b0, b1, [&](const auto& k, int64_t j, int64_t c4, int64_t u) {
      const auto i = Sigmoid(d, k.load(ab + c4));
      const auto f = Sigmoid(d, k.load(ab + c4 + u));
      const auto g = GateTanh(d, k.load(ab + c4 + 2 * u));
      const auto o = Sigmoid(d, k.load(ab + c4 + 3 * u));
      const auto cn = hn::MulAdd(f, k.load(c_prev + b * H + j), hn::Mul(i, g));
      k.store(cn, c + b * H + j);
      k.store(hn::Mul(o, GateTanh(d, cn)), m + b * ldm + j);
      if (!save) return;
      k.store(i, ab + c4);
      k.store(f, ab + c4 + u);
      k.store(g, ab + c4 + 2 * u);
      k.store(o, ab + c4 + 3 * u);
    });
  }
}

template <typename T>
void Backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act, const T* c,
              const T* c_prev, const T* dm, const T* dm_next, int64_t next_rows, T* dc, T* da,
              T* da_sum) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* ab = act + b * 4 * H;
    T* dab = da + b * 4 * H;
    const T* carry = dm_next && b < next_rows ? dm_next + b * H : nullptr;
    ForBlocks4(d, H, b0, b1, [&](const auto& k, int64_t j, int64_t c4, int64_t u) {
      const int64_t e = b * H + j;
      const auto i = k.load(ab + c4), f = k.load(ab + c4 + u), g = k.load(ab + c4 + 2 * u),
                 o = k.load(ab + c4 + 3 * u);
      const auto dmv = carry ? hn::Add(k.load(dm + e), k.load(carry + j)) : k.load(dm + e);
      const auto tc = GateTanh(d, k.load(c + e));
      const auto dcv = hn::MulAdd(hn::Mul(dmv, o), hn::NegMulAdd(tc, tc, one), k.load(dc + e));
      const auto di = hn::Mul(hn::Mul(dcv, g), hn::Mul(i, hn::Sub(one, i)));
      const auto df = hn::Mul(hn::Mul(dcv, k.load(c_prev + e)), hn::Mul(f, hn::Sub(one, f)));
      const auto dg = hn::Mul(hn::Mul(dcv, i), hn::NegMulAdd(g, g, one));
      const auto dov = hn::Mul(hn::Mul(dmv, tc), hn::Mul(o, hn::Sub(one, o)));
      k.store(hn::Mul(dcv, f), dc + e);
      k.store(di, dab + c4);
      k.store(df, dab + c4 + u);
      k.store(dg, dab + c4 + 2 * u);
      k.store(dov, dab + c4 + 3 * u);
      if (da_sum) {
        k.store(hn::Add(k.load(da_sum + c4), di), da_sum + c4);
        k.store(hn::Add(k.load(da_sum + c4 + u), df), da_sum + c4 + u);
        k.store(hn::Add(k.load(da_sum + c4 + 2 * u), dg), da_sum + c4 + 2 * u);
        k.store(hn::Add(k.load(da_sum + c4 + 3 * u), dov), da_sum + c4 + 3 * u);
      }
    });
  }
}

// Non-template entry points, one per kernel and type, for HWY_EXPORT.
#define GRUX_LSTM_ENTRIES(T, S)                                                                    \
  void LstmForward##S(int64_t B, int64_t H, int64_t b0, int64_t b1, T* a, const T* cp, T* c, T* m, \
                      int64_t ldm, bool save) {                                                    \
    Forward(B, H, b0, b1, a, cp, c, m, ldm, save);                                                 \
  }                                                                                                \
  void LstmBackward##S(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act, const T* c,     \
                       const T* cp, const T* dm, const T* dmn, int64_t nr, T* dc, T* da, T* ds) {  \
    Backward(B, H, b0, b1, act, c, cp, dm, dmn, nr, dc, da, ds);                                   \
  }
GRUX_LSTM_ENTRIES(float, F32)
GRUX_LSTM_ENTRIES(double, F64)
#undef GRUX_LSTM_ENTRIES

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

template <typename T>
int64_t gate_col4(int64_t H, int64_t q, int64_t j) {
  const int64_t j0 = j / kUnit<T> * kUnit<T>, u = std::min(kUnit<T>, H - j0);
  return 4 * j0 + q * u + (j - j0);
}
template int64_t gate_col4<float>(int64_t, int64_t, int64_t);
template int64_t gate_col4<double>(int64_t, int64_t, int64_t);

#define GRUX_LSTM_DISPATCH(T, S)                                                               \
  HWY_EXPORT(LstmForward##S);                                                                  \
  HWY_EXPORT(LstmBackward##S);                                                                 \
  template <>                                                                                  \
  void lstm_gates_forward<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, T * a, const T* cp, \
                             T* c, T* m, int64_t ldm, bool save) {                             \
    HWY_DYNAMIC_DISPATCH(LstmForward##S)(B, H, b0, b1, a, cp, c, m, ldm, save);                \
  }                                                                                            \
  template <>                                                                                  \
  void lstm_gates_backward<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act,      \
                              const T* c, const T* cp, const T* dm, const T* dmn, int64_t nr,  \
                              T* dc, T* da, T* ds) {                                           \
    HWY_DYNAMIC_DISPATCH(LstmBackward##S)(B, H, b0, b1, act, c, cp, dm, dmn, nr, dc, da, ds);  \
  }
GRUX_LSTM_DISPATCH(float, F32)
GRUX_LSTM_DISPATCH(double, F64)
#undef GRUX_LSTM_DISPATCH

}  // namespace grux::cpu
#endif  // HWY_ONCE
