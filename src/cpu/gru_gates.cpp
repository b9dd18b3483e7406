// Fused pointwise GRU gate kernels with Highway SIMD (dynamic dispatch to the best target
// this CPU supports). Forward and backward side by side; contracts in cpu/gru_gates.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gru_gates.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "cpu/gru_gates.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads and stores of one chunk of a row: full vectors, or masked at the row's tail.
template <class D>
struct Chunk {
  using T = hn::TFromD<D>;
  using V = hn::Vec<D>;
  D d;
  bool full;
  hn::Mask<D> mask;
  Chunk(D d_, int64_t remaining)
      : d(d_),
        full(remaining >= static_cast<int64_t>(hn::Lanes(d_))),
        mask(hn::FirstN(d_, static_cast<size_t>(remaining))) {}
  V load(const T* p) const { return full ? hn::LoadU(d, p) : hn::MaskedLoad(mask, d, p); }
  V load_or_zero(const T* p) const { return p ? load(p) : hn::Zero(d); }
  void store(V v, T* p) const {
    if (full)
      hn::StoreU(v, d, p);
    else
      hn::BlendedStore(v, mask, d, p);
  }
};

// sigmoid(x) = 1 / (1 + exp(-x)); exp's argument is clamped below its overflow point so that
// saturated inputs give exactly 0 rather than relying on exp's behaviour beyond its range.
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  using T = hn::TFromD<D>;
  const T limit = sizeof(T) == 4 ? T(88) : T(700);
  const V one = hn::Set(d, T(1));
  return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, limit)))));
}

// Calls body(chunk, j) for each SIMD chunk of a row of length H.
template <class D, class Body>
HWY_INLINE void ForRow(D d, int64_t H, Body body) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < H; j += L) body(Chunk<D>(d, H - j), j);
}

template <typename T>
void LbrForward(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev, T* h,
                T* hn_out) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = gh + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto r = Sigmoid(d, hn::Add(hn::Add(c.load(gb + j), c.load(ghb + j)),
                                        c.load_or_zero(b_hh ? b_hh + j : nullptr)));
      const auto z = Sigmoid(d, hn::Add(hn::Add(c.load(gb + H + j), c.load(ghb + H + j)),
                                        c.load_or_zero(b_hh ? b_hh + H + j : nullptr)));
      const auto hn_v =
          hn::Add(c.load(ghb + 2 * H + j), c.load_or_zero(b_hh ? b_hh + 2 * H + j : nullptr));
      const auto n = hn::Tanh(d, hn::MulAdd(r, hn_v, c.load(gb + 2 * H + j)));
      const auto hp = c.load(h_prev + b * H + j);
      c.store(hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp)), h + b * H + j);
      c.store(hn_v, hn_out + b * H + j);
      c.store(r, gb + j);
      c.store(z, gb + H + j);
      c.store(n, gb + 2 * H + j);
    });
  }
}

template <typename T>
void LbrBackward(int64_t B, int64_t H, const T* g, const T* hn_in, const T* h_prev, const T* dh,
                 T* dg, T* dgh, T* dh_prev) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    T* dghb = dgh + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto r = c.load(gb + j), z = c.load(gb + H + j), n = c.load(gb + 2 * H + j);
      const auto dhv = c.load(dh + b * H + j);
      const auto dn = hn::Mul(hn::Mul(dhv, hn::Sub(one, z)), hn::NegMulAdd(n, n, one));
      const auto dz = hn::Mul(hn::Mul(dhv, hn::Sub(c.load(h_prev + b * H + j), n)),
                              hn::Mul(z, hn::Sub(one, z)));
      const auto dr = hn::Mul(hn::Mul(dn, c.load(hn_in + b * H + j)), hn::Mul(r, hn::Sub(one, r)));
      c.store(dr, dgb + j);
      c.store(dz, dgb + H + j);
      c.store(dn, dgb + 2 * H + j);
      c.store(dr, dghb + j);
      c.store(dz, dghb + H + j);
      c.store(hn::Mul(dn, r), dghb + 2 * H + j);
      c.store(hn::Mul(dhv, z), dh_prev + b * H + j);
    });
  }
}

template <typename T>
void RbForwardRz(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev, T* rh) {
  const hn::ScalableTag<T> d;
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = gh + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto r = Sigmoid(d, hn::Add(hn::Add(c.load(gb + j), c.load(ghb + j)),
                                        c.load_or_zero(b_hh ? b_hh + j : nullptr)));
      const auto z = Sigmoid(d, hn::Add(hn::Add(c.load(gb + H + j), c.load(ghb + H + j)),
                                        c.load_or_zero(b_hh ? b_hh + H + j : nullptr)));
      c.store(r, gb + j);
      c.store(z, gb + H + j);
      c.store(hn::Mul(r, c.load(h_prev + b * H + j)), rh + b * H + j);
    });
  }
}

template <typename T>
void RbForwardN(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev, T* h) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = gh + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto n = hn::Tanh(d, hn::Add(hn::Add(c.load(gb + 2 * H + j), c.load(ghb + 2 * H + j)),
                                         c.load_or_zero(b_hh ? b_hh + 2 * H + j : nullptr)));
      const auto z = c.load(gb + H + j);
      const auto hp = c.load(h_prev + b * H + j);
      c.store(hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp)), h + b * H + j);
      c.store(n, gb + 2 * H + j);
    });
  }
}

template <typename T>
void RbBackwardZn(int64_t B, int64_t H, const T* g, const T* h_prev, const T* dh, T* dg,
                  T* dh_prev) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto z = c.load(gb + H + j), n = c.load(gb + 2 * H + j);
      const auto dhv = c.load(dh + b * H + j);
      const auto dz = hn::Mul(hn::Mul(dhv, hn::Sub(c.load(h_prev + b * H + j), n)),
                              hn::Mul(z, hn::Sub(one, z)));
      const auto dn = hn::Mul(hn::Mul(dhv, hn::Sub(one, z)), hn::NegMulAdd(n, n, one));
      c.store(dz, dgb + H + j);
      c.store(dn, dgb + 2 * H + j);
      c.store(hn::Mul(dhv, z), dh_prev + b * H + j);
    });
  }
}

template <typename T>
void RbBackwardR(int64_t B, int64_t H, const T* g, const T* h_prev, const T* drh, T* dg,
                 T* dh_prev) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    ForRow(d, H, [&](const auto& c, int64_t j) {
      const auto r = c.load(gb + j);
      const auto drhv = c.load(drh + b * H + j);
      c.store(hn::Mul(hn::Mul(drhv, c.load(h_prev + b * H + j)), hn::Mul(r, hn::Sub(one, r))),
              dgb + j);
      c.store(hn::MulAdd(drhv, r, c.load(dh_prev + b * H + j)), dh_prev + b * H + j);
    });
  }
}

// Non-template entry points, one per kernel and type, for HWY_EXPORT.
#define GRUX_GATE_ENTRIES(T, S)                                                                  \
  void LbrForward##S(int64_t B, int64_t H, T* g, const T* gh, const T* b, const T* hp, T* h,     \
                     T* hn) {                                                                    \
    LbrForward(B, H, g, gh, b, hp, h, hn);                                                       \
  }                                                                                              \
  void LbrBackward##S(int64_t B, int64_t H, const T* g, const T* hn, const T* hp, const T* dh,   \
                      T* dg, T* dgh, T* dhp) {                                                   \
    LbrBackward(B, H, g, hn, hp, dh, dg, dgh, dhp);                                              \
  }                                                                                              \
  void RbForwardRz##S(int64_t B, int64_t H, T* g, const T* gh, const T* b, const T* hp, T* rh) { \
    RbForwardRz(B, H, g, gh, b, hp, rh);                                                         \
  }                                                                                              \
  void RbForwardN##S(int64_t B, int64_t H, T* g, const T* gh, const T* b, const T* hp, T* h) {   \
    RbForwardN(B, H, g, gh, b, hp, h);                                                           \
  }                                                                                              \
  void RbBackwardZn##S(int64_t B, int64_t H, const T* g, const T* hp, const T* dh, T* dg,        \
                       T* dhp) {                                                                 \
    RbBackwardZn(B, H, g, hp, dh, dg, dhp);                                                      \
  }                                                                                              \
  void RbBackwardR##S(int64_t B, int64_t H, const T* g, const T* hp, const T* drh, T* dg,        \
                      T* dhp) {                                                                  \
    RbBackwardR(B, H, g, hp, drh, dg, dhp);                                                      \
  }
GRUX_GATE_ENTRIES(float, F32)
GRUX_GATE_ENTRIES(double, F64)
#undef GRUX_GATE_ENTRIES

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

#define GRUX_GATE_DISPATCH(T, S)                                                                   \
  HWY_EXPORT(LbrForward##S);                                                                       \
  HWY_EXPORT(LbrBackward##S);                                                                      \
  HWY_EXPORT(RbForwardRz##S);                                                                      \
  HWY_EXPORT(RbForwardN##S);                                                                       \
  HWY_EXPORT(RbBackwardZn##S);                                                                     \
  HWY_EXPORT(RbBackwardR##S);                                                                      \
  template <>                                                                                      \
  void gru_gates_lbr_forward<T>(int64_t B, int64_t H, T * g, const T* gh, const T* b, const T* hp, \
                                T* h, T* hn) {                                                     \
    HWY_DYNAMIC_DISPATCH(LbrForward##S)(B, H, g, gh, b, hp, h, hn);                                \
  }                                                                                                \
  template <>                                                                                      \
  void gru_gates_lbr_backward<T>(int64_t B, int64_t H, const T* g, const T* hn, const T* hp,       \
                                 const T* dh, T* dg, T* dgh, T* dhp) {                             \
    HWY_DYNAMIC_DISPATCH(LbrBackward##S)(B, H, g, hn, hp, dh, dg, dgh, dhp);                       \
  }                                                                                                \
  template <>                                                                                      \
  void gru_gates_rb_forward_rz<T>(int64_t B, int64_t H, T * g, const T* gh, const T* b,            \
                                  const T* hp, T* rh) {                                            \
    HWY_DYNAMIC_DISPATCH(RbForwardRz##S)(B, H, g, gh, b, hp, rh);                                  \
  }                                                                                                \
  template <>                                                                                      \
  void gru_gates_rb_forward_n<T>(int64_t B, int64_t H, T * g, const T* gh, const T* b,             \
                                 const T* hp, T* h) {                                              \
    HWY_DYNAMIC_DISPATCH(RbForwardN##S)(B, H, g, gh, b, hp, h);                                    \
  }                                                                                                \
  template <>                                                                                      \
  void gru_gates_rb_backward_zn<T>(int64_t B, int64_t H, const T* g, const T* hp, const T* dh,     \
                                   T* dg, T* dhp) {                                                \
    HWY_DYNAMIC_DISPATCH(RbBackwardZn##S)(B, H, g, hp, dh, dg, dhp);                               \
  }                                                                                                \
  template <>                                                                                      \
  void gru_gates_rb_backward_r<T>(int64_t B, int64_t H, const T* g, const T* hp, const T* drh,     \
                                  T* dg, T* dhp) {                                                 \
    HWY_DYNAMIC_DISPATCH(RbBackwardR##S)(B, H, g, hp, drh, dg, dhp);                               \
  }
GRUX_GATE_DISPATCH(float, F32)
GRUX_GATE_DISPATCH(double, F64)
#undef GRUX_GATE_DISPATCH

}  // namespace grux::cpu
#endif  // HWY_ONCE
