// Fused pointwise GRU gate kernels with Highway SIMD (dynamic dispatch to the best target
// this CPU supports). Forward and backward side by side; contracts in cpu/gru_gates.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gru_gates.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/gate_math-inl.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_gates.h"
#include "cpu/simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls body(chunk, j, c3, c2) for each SIMD chunk of the unit blocks [b0, b1) of a row:
// j the first unit, c3 / c2 the block's first column in the 3H / 2H layouts, u its units.
template <class D, class Body>
HWY_INLINE void ForBlocks(D d, int64_t H, int64_t b0, int64_t b1, Body body) {
  using T = hn::TFromD<D>;
  constexpr int64_t U = kUnit<T>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t bb = b0; bb < b1; ++bb) {
    const int64_t j0 = bb * U, u = std::min(U, H - j0);
    for (int64_t x = 0; x < u; x += L) body(Chunk<D>(d, u - x), j0 + x, 3 * j0 + x, 2 * j0 + x, u);
  }
}

// In two passes over groups of up to kGroup blocks: every r and z first, then every n and h.
// One pass per block would give the out-of-order window each block's whole chain (a sigmoid,
// then the tanh that needs it, about 150 cycles), of which it holds about four blocks'
// operations: with one row in L1, two passes take 13-16% less time over 8 blocks (a W2
// thread's share) or 16. The same operations on the same values: the same bits.
template <typename T>
void LbrForward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* gh, const T* b_hh,
                const T* h_prev, T* h, T* hn_out, int64_t ldh) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  constexpr int64_t U = kUnit<T>, kGroup = 8;
  HWY_ALIGN T rz[2 * kGroup * U];  // the group's r, then its z
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = gh + b * 3 * H;
    for (int64_t q0 = b0; q0 < b1; q0 += kGroup) {
      const int64_t q1 = std::min(b1, q0 + kGroup), i0 = q0 * U;
      ForBlocks(d, H, q0, q1, [&](const auto& c, int64_t j, int64_t c3, int64_t, int64_t u) {
        const int64_t cr = c3, cz = c3 + u;
        c.store(Sigmoid(d, hn::Add(hn::Add(c.load(gb + cr), c.load(ghb + cr)),
                                   c.load_or_zero(b_hh ? b_hh + cr : nullptr))),
                rz + (j - i0));
        c.store(Sigmoid(d, hn::Add(hn::Add(c.load(gb + cz), c.load(ghb + cz)),
                                   c.load_or_zero(b_hh ? b_hh + cz : nullptr))),
                rz + kGroup * U + (j - i0));
      });
      ForBlocks(d, H, q0, q1, [&](const auto& c, int64_t j, int64_t c3, int64_t, int64_t u) {
        const int64_t cr = c3, cz = c3 + u, cn = c3 + 2 * u;
        const auto r = c.load(rz + (j - i0)), z = c.load(rz + kGroup * U + (j - i0));
        const auto hn_v = hn::Add(c.load(ghb + cn), c.load_or_zero(b_hh ? b_hh + cn : nullptr));
        const auto n = GateTanh(d, hn::MulAdd(r, hn_v, c.load(gb + cn)));
        const auto hp = c.load(h_prev + b * ldh + j);
        c.store(hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp)), h + b * ldh + j);
        if (!hn_out) return;  // inference: g's lines stay clean (no write-back of 3H a row)
        c.store(hn_v, hn_out + b * H + j);
        c.store(r, gb + cr);
        c.store(z, gb + cz);
        c.store(n, gb + cn);
      });
    }
  }
}

template <typename T>
void LbrBackward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hn_in,
                 const T* h_prev, const T* dh, const T* dh_next, int64_t next_rows, T* dg, T* dgh,
                 T* dgh_all, T* dh_prev, T* dg_sum, T* dgh_sum) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    T* dghb = dgh + b * 3 * H;
    T* dgh_allb = dgh_all ? dgh_all + b * 3 * H : nullptr;
    const T* carry = dh_next && b < next_rows ? dh_next + b * H : nullptr;
    ForBlocks(d, H, b0, b1, [&](const auto& c, int64_t j, int64_t c3, int64_t, int64_t u) {
      const int64_t cr = c3, cz = c3 + u, cn = c3 + 2 * u;
      const auto r = c.load(gb + cr), z = c.load(gb + cz), n = c.load(gb + cn);
      const auto dhv =
          carry ? hn::Add(c.load(dh + b * H + j), c.load(carry + j)) : c.load(dh + b * H + j);
      const auto dn = hn::Mul(hn::Mul(dhv, hn::Sub(one, z)), hn::NegMulAdd(n, n, one));
      const auto dz = hn::Mul(hn::Mul(dhv, hn::Sub(c.load(h_prev + b * H + j), n)),
                              hn::Mul(z, hn::Sub(one, z)));
      const auto dr = hn::Mul(hn::Mul(dn, c.load(hn_in + b * H + j)), hn::Mul(r, hn::Sub(one, r)));
      // dg and dgh_all are read again only after the time loop (by the weight-gradient and
      // dL/dx products): streamed to memory, their lines are not fetched first (W4 training:
      // 1.5% for dg). dgh is read at once, by this step's dL/dh_prev product: stored through
      // the cache, into lines the previous step left there.
      const auto put = [&](auto v, T* q) {
        if (c.full && reinterpret_cast<uintptr_t>(q) % (hn::Lanes(d) * sizeof(T)) == 0)
          hn::Stream(v, d, q);
        else
          c.store(v, q);
      };
      put(dr, dgb + cr);
      put(dz, dgb + cz);
      put(dn, dgb + cn);
      const auto dn_r = hn::Mul(dn, r);
      c.store(dr, dghb + cr);
      c.store(dz, dghb + cz);
      c.store(dn_r, dghb + cn);
      if (dgh_allb) {
        put(dr, dgh_allb + cr);
        put(dz, dgh_allb + cz);
        put(dn_r, dgh_allb + cn);
      }
      c.store(hn::Mul(dhv, z), dh_prev + b * H + j);
      if (dg_sum) {
        c.store(hn::Add(c.load(dg_sum + cr), dr), dg_sum + cr);
        c.store(hn::Add(c.load(dg_sum + cz), dz), dg_sum + cz);
        c.store(hn::Add(c.load(dg_sum + cn), dn), dg_sum + cn);
        c.store(hn::Add(c.load(dgh_sum + cr), dr), dgh_sum + cr);
        c.store(hn::Add(c.load(dgh_sum + cz), dz), dgh_sum + cz);
        c.store(hn::Add(c.load(dgh_sum + cn), dn_r), dgh_sum + cn);
      }
    });
  }
  hwy::FlushStream();  // the streamed stores are visible to the other threads after the barrier
}

template <typename T>
void RbForwardRz(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghrz, const T* b_hh,
                 const T* h_prev, T* rh, int64_t ldh) {
  const hn::ScalableTag<T> d;
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = ghrz + b * 2 * H;
    ForBlocks(d, H, b0, b1, [&](const auto& c, int64_t j, int64_t c3, int64_t c2, int64_t u) {
      const auto r = Sigmoid(d, hn::Add(hn::Add(c.load(gb + c3), c.load(ghb + c2)),
                                        c.load_or_zero(b_hh ? b_hh + c3 : nullptr)));
      const auto z = Sigmoid(d, hn::Add(hn::Add(c.load(gb + c3 + u), c.load(ghb + c2 + u)),
                                        c.load_or_zero(b_hh ? b_hh + c3 + u : nullptr)));
      c.store(r, gb + c3);
      c.store(z, gb + c3 + u);
      c.store(hn::Mul(r, c.load(h_prev + b * ldh + j)), rh + b * H + j);
    });
  }
}

template <typename T>
void RbForwardN(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghn, const T* b_hh,
                const T* h_prev, T* h, int64_t ldh) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    ForBlocks(d, H, b0, b1, [&](const auto& c, int64_t j, int64_t c3, int64_t, int64_t u) {
      const int64_t cn = c3 + 2 * u;
      const auto n = GateTanh(d, hn::Add(hn::Add(c.load(gb + cn), c.load(ghn + b * H + j)),
                                         c.load_or_zero(b_hh ? b_hh + cn : nullptr)));
      const auto z = c.load(gb + c3 + u);
      const auto hp = c.load(h_prev + b * ldh + j);
      c.store(hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp)), h + b * ldh + j);
      c.store(n, gb + cn);
    });
  }
}

template <typename T>
void RbBackwardZn(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* h_prev,
                  const T* dh, T* dg, T* dn_out, T* dh_prev) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    ForBlocks(d, H, b0, b1, [&](const auto& c, int64_t j, int64_t c3, int64_t, int64_t u) {
      const auto z = c.load(gb + c3 + u), n = c.load(gb + c3 + 2 * u);
      const auto dhv = c.load(dh + b * H + j);
      const auto dz = hn::Mul(hn::Mul(dhv, hn::Sub(c.load(h_prev + b * H + j), n)),
                              hn::Mul(z, hn::Sub(one, z)));
      const auto dn = hn::Mul(hn::Mul(dhv, hn::Sub(one, z)), hn::NegMulAdd(n, n, one));
      c.store(dz, dgb + c3 + u);
      c.store(dn, dgb + c3 + 2 * u);
      c.store(dn, dn_out + b * H + j);
      c.store(hn::Mul(dhv, z), dh_prev + b * H + j);
    });
  }
}

template <typename T>
void RbBackwardR(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* h_prev,
                 const T* drh, T* dg, T* drz, T* dh_prev) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  for (int64_t b = 0; b < B; ++b) {
    const T* gb = g + b * 3 * H;
    T* dgb = dg + b * 3 * H;
    T* drzb = drz + b * 2 * H;
    ForBlocks(d, H, b0, b1, [&](const auto& c, int64_t j, int64_t c3, int64_t c2, int64_t u) {
      const auto r = c.load(gb + c3);
      const auto drhv = c.load(drh + b * H + j);
      const auto dr =
          hn::Mul(hn::Mul(drhv, c.load(h_prev + b * H + j)), hn::Mul(r, hn::Sub(one, r)));
      c.store(dr, dgb + c3);
      c.store(dr, drzb + c2);
      c.store(c.load(dgb + c3 + u), drzb + c2 + u);
      c.store(hn::MulAdd(drhv, r, c.load(dh_prev + b * H + j)), dh_prev + b * H + j);
    });
  }
}

// Non-template entry points, one per kernel and type, for HWY_EXPORT.
#define GRUX_GATE_ENTRIES(T, S)                                                                    \
  void LbrForward##S(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* gh, const T* bh, \
                     const T* hp, T* h, T* hn, int64_t ldh) {                                      \
    LbrForward(B, H, b0, b1, g, gh, bh, hp, h, hn, ldh);                                           \
  }                                                                                                \
  void LbrBackward##S(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hn,       \
                      const T* hp, const T* dh, const T* dhn, int64_t nr, T* dg, T* dgh, T* dgha,  \
                      T* dhp, T* sg, T* sgh) {                                                     \
    LbrBackward(B, H, b0, b1, g, hn, hp, dh, dhn, nr, dg, dgh, dgha, dhp, sg, sgh);                \
  }                                                                                                \
  void RbForwardRz##S(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghrz,           \
                      const T* bh, const T* hp, T* rh, int64_t ldh) {                              \
    RbForwardRz(B, H, b0, b1, g, ghrz, bh, hp, rh, ldh);                                           \
  }                                                                                                \
  void RbForwardN##S(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghn,             \
                     const T* bh, const T* hp, T* h, int64_t ldh) {                                \
    RbForwardN(B, H, b0, b1, g, ghn, bh, hp, h, ldh);                                              \
  }                                                                                                \
  void RbBackwardZn##S(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hp,      \
                       const T* dh, T* dg, T* dn, T* dhp) {                                        \
    RbBackwardZn(B, H, b0, b1, g, hp, dh, dg, dn, dhp);                                            \
  }                                                                                                \
  void RbBackwardR##S(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hp,       \
                      const T* drh, T* dg, T* drz, T* dhp) {                                       \
    RbBackwardR(B, H, b0, b1, g, hp, drh, dg, drz, dhp);                                           \
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

template <typename T>
int64_t gate_col3(int64_t H, int64_t q, int64_t j) {
  const int64_t j0 = j / kUnit<T> * kUnit<T>, u = std::min(kUnit<T>, H - j0);
  return 3 * j0 + q * u + (j - j0);
}
template <typename T>
int64_t gate_col2(int64_t H, int64_t q, int64_t j) {
  const int64_t j0 = j / kUnit<T> * kUnit<T>, u = std::min(kUnit<T>, H - j0);
  return 2 * j0 + q * u + (j - j0);
}
template int64_t gate_col3<float>(int64_t, int64_t, int64_t);
template int64_t gate_col3<double>(int64_t, int64_t, int64_t);
template int64_t gate_col2<float>(int64_t, int64_t, int64_t);
template int64_t gate_col2<double>(int64_t, int64_t, int64_t);

#define GRUX_GATE_DISPATCH(T, S)                                                                  \
  HWY_EXPORT(LbrForward##S);                                                                      \
  HWY_EXPORT(LbrBackward##S);                                                                     \
  HWY_EXPORT(RbForwardRz##S);                                                                     \
  HWY_EXPORT(RbForwardN##S);                                                                      \
  HWY_EXPORT(RbBackwardZn##S);                                                                    \
  HWY_EXPORT(RbBackwardR##S);                                                                     \
  template <>                                                                                     \
  void gru_gates_lbr_forward<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, T * g, const T* gh, \
                                const T* bh, const T* hp, T* h, T* hn, int64_t ldh) {             \
    HWY_DYNAMIC_DISPATCH(LbrForward##S)(B, H, b0, b1, g, gh, bh, hp, h, hn, ldh);                 \
  }                                                                                               \
  template <>                                                                                     \
  void gru_gates_lbr_backward<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,        \
                                 const T* hn, const T* hp, const T* dh, const T* dhn, int64_t nr, \
                                 T* dg, T* dgh, T* dgha, T* dhp, T* sg, T* sgh) {                 \
    HWY_DYNAMIC_DISPATCH(LbrBackward##S)                                                          \
    (B, H, b0, b1, g, hn, hp, dh, dhn, nr, dg, dgh, dgha, dhp, sg, sgh);                          \
  }                                                                                               \
  template <>                                                                                     \
  void gru_gates_rb_forward_rz<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, T * g,            \
                                  const T* ghrz, const T* bh, const T* hp, T* rh, int64_t ldh) {  \
    HWY_DYNAMIC_DISPATCH(RbForwardRz##S)(B, H, b0, b1, g, ghrz, bh, hp, rh, ldh);                 \
  }                                                                                               \
  template <>                                                                                     \
  void gru_gates_rb_forward_n<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, T * g,             \
                                 const T* ghn, const T* bh, const T* hp, T* h, int64_t ldh) {     \
    HWY_DYNAMIC_DISPATCH(RbForwardN##S)(B, H, b0, b1, g, ghn, bh, hp, h, ldh);                    \
  }                                                                                               \
  template <>                                                                                     \
  void gru_gates_rb_backward_zn<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,      \
                                   const T* hp, const T* dh, T* dg, T* dn, T* dhp) {              \
    HWY_DYNAMIC_DISPATCH(RbBackwardZn##S)(B, H, b0, b1, g, hp, dh, dg, dn, dhp);                  \
  }                                                                                               \
  template <>                                                                                     \
  void gru_gates_rb_backward_r<T>(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,       \
                                  const T* hp, const T* drh, T* dg, T* drz, T* dhp) {             \
    HWY_DYNAMIC_DISPATCH(RbBackwardR##S)(B, H, b0, b1, g, hp, drh, dg, drz, dhp);                 \
  }
GRUX_GATE_DISPATCH(float, F32)
GRUX_GATE_DISPATCH(double, F64)
#undef GRUX_GATE_DISPATCH

}  // namespace grux::cpu
#endif  // HWY_ONCE
