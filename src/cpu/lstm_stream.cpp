// The real-time LSTM kernel (batch 1, f32) with Highway SIMD, dynamic dispatch; contract and
// arithmetic in cpu/lstm_stream.h, the shared machinery in cpu/stream_tiles-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/lstm_stream.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "cpu/gate_math-inl.h"
#include "cpu/lstm_stream.h"
#include "cpu/simd_row-inl.h"
#include "cpu/stream_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// h' of one unit group from the step's sums for it (i, f, o halved), and c' into c, with three
// divisions where the gates one by one take five (a zmm division occupies the divider for 10
// of its 18 cycles: 15 of them a step at H 40). With the rationals of cpu/gate_math-inl.h,
// sigma = N / D (N = Q + a P, D = 2 Q) and tanh = a P / Q:
//   c' = f c + (N_i a_g P_g) / (D_i Q_g),   h' = (N_o a_c P_c) / (D_o Q_c),   c' clamped for a_c.
// The chain is as long as the gates' one by one (the products beside the divisions they
// replace); every factor is at most 670 in magnitude, so nothing overflows.
HWY_INLINE V LstmUnit(DF d, const V* sum, V& c) {
  V ai, pi, qi, af, pf, qf, ag, pg, qg, ao, po, qo;
  StreamRationalPQ(d, sum[0], ai, pi, qi);
  StreamRationalPQ(d, sum[1], af, pf, qf);
  StreamRationalPQ(d, sum[2], ag, pg, qg);
  StreamRationalPQ(d, sum[3], ao, po, qo);
  const V f = hn::Div(hn::MulAdd(af, pf, qf), hn::Add(qf, qf));
  const V ig_num = hn::Mul(hn::MulAdd(ai, pi, qi), hn::Mul(ag, pg));
  const V ig_den = hn::Mul(hn::Add(qi, qi), qg);
  c = hn::MulAdd(f, c, hn::Div(ig_num, ig_den));
  V ac, pc, qc;
  StreamRationalPQ(d, c, ac, pc, qc);
  const V o_num = hn::MulAdd(ao, po, qo), o_den = hn::Add(qo, qo);
  return hn::Div(hn::Mul(o_num, hn::Mul(ac, pc)), hn::Mul(o_den, qc));
}

// Small states (G <= 2 unit groups): h and c in registers across the block's steps.
template <int kG, int S>
HWY_INLINE void LstmRegSteps(const StreamLayer& L, int64_t t, const float* HWY_RESTRICT gx,
                             float* HWY_RESTRICT state, const StreamOut& out) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  const int64_t H = L.H, Hp = L.Hp;
  V h[kG], c[kG];
#pragma GCC unroll 2
  for (int u = 0; u < kG; ++u) {
    h[u] = hn::Load(d, state + u * kV);
    c[u] = hn::Load(d, state + 2 * Hp + u * kV);
  }
  const auto hv = [&](int64_t u) { return h[u]; };
  for (int64_t f = 0; f < t; ++f) {
    const float* g = gx + f * 4 * Hp;
    V init[4 * kG], sum[4 * kG];
#pragma GCC unroll 8
    for (int r = 0; r < 4 * kG; ++r) init[r] = hn::Load(d, g + r * kV);
    RegProduct<4, kG, S>(L.wh.get(), 4 * Hp, h, H, init, sum);
#pragma GCC unroll 2
    for (int u = 0; u < kG; ++u) h[u] = LstmUnit(d, sum + 4 * u, c[u]);
    EmitRow(out, H, kG, hv, f);
  }
#pragma GCC unroll 2
  for (int u = 0; u < kG; ++u) {
    hn::Store(h[u], d, state + u * kV);
    hn::Store(c[u], d, state + 2 * Hp + u * kV);
  }
}

HWY_INLINE bool LstmRegStepsFor(const StreamLayer& L, int64_t G, int S, int64_t t, const float* gx,
                                float* state, const StreamOut& out) {
  constexpr int64_t kV = hn::MaxLanes(DF());
  if (kV % 4 != 0 || G > 2) return false;
  if (G == 1) {
    if (S == 4) LstmRegSteps<1, 4>(L, t, gx, state, out);
    if (S == 2) LstmRegSteps<1, 2>(L, t, gx, state, out);
    if (S == 1) LstmRegSteps<1, 1>(L, t, gx, state, out);
  } else {
    if (S == 4) LstmRegSteps<2, 4>(L, t, gx, state, out);
    if (S == 2) LstmRegSteps<2, 2>(L, t, gx, state, out);
    if (S == 1) LstmRegSteps<2, 1>(L, t, gx, state, out);
  }
  return true;
}

// t frames (at most L.projection_frames when set): their input projections, then their steps.
// kOne: the copy for one frame (StreamFrames, cpu/stream_tiles-inl.h).
template <bool kOne>
HWY_INLINE void LstmBlock(const StreamLayer& L, int64_t t_, int64_t step0, const float* x,
                          int64_t sx, float* state, const StreamOut& out, float* scratch) {
  const int64_t t = kOne ? 1 : t_;
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  const int64_t H = L.H, Hp = L.Hp, G = Hp / kV;
  float* gx = scratch;  // t x 4Hp
  const Plan px = PlanFor(4, G, L.I);
  for (int64_t f = 0; f < t; ++f) InputProjection<4>(L, px, x + f * sx, gx + f * 4 * Hp);
  if (G <= 2) {
    const int S = std::min(PlanFor(4, G, H).S, G == 1 ? 4 : 2);
    if (LstmRegStepsFor(L, G, S, t, gx, state, out)) return;
  }
  // h ping-pongs between state[0, Hp) and state[Hp, 2Hp) when a step takes several tiles
  // (each reads all of h); c is updated in place (a tile touches only its own units' c).
  float* hc = state;
  float* hn_buf = state + Hp;
  float* c = state + 2 * Hp;
  const Plan p = PlanFor(4, G, H, L.narrow_tiles);
  const bool in_place = p.tiles.n == 1;
  for (int64_t f = 0; f < t; ++f) {
    const float* gr = gx + f * 4 * Hp;
    const bool rev = L.alternate && ((step0 + f) & 1);
    float* dst = in_place ? hc : hn_buf;
    for (int64_t i = 0; i < p.tiles.n; ++i) {
      const int64_t ti = rev ? p.tiles.n - 1 - i : i;  // tiles in reverse at odd steps
      const int64_t j = p.tiles.start(ti), g = p.tiles.size(ti);
      const float* gj = gr + j * 4 * kV;
      TileG<4>(
          g, p.S, L.wh.get() + j * 4 * kV * H, 4 * kV * g, hc, H, rev,
          [&](int r) { return hn::Load(d, gj + r * kV); },
          [&](const V* sum) {
            for (int64_t u = 0; u < g; ++u) {
              V cu = hn::Load(d, c + (j + u) * kV);
              hn::Store(LstmUnit(d, sum + 4 * u, cu), d, dst + (j + u) * kV);
              hn::Store(cu, d, c + (j + u) * kV);
            }
          });
    }
    if (!in_place) std::swap(hc, hn_buf);
    EmitRow(
        out, H, G, [&](int64_t u) { return hn::Load(d, hc + u * kV); }, f);
  }
  if (hc != state)
    for (int64_t k = 0; k < Hp; k += kV) hn::Store(hn::Load(d, hc + k), d, state + k);
}

struct LstmCellKernel {
  static constexpr const char* kName = "lstm stream kernel";
  template <bool kOne>
  static HWY_INLINE void Block(const StreamLayer& L, int64_t t, int64_t step0, const float* x,
                               int64_t sx, float* state, const StreamOut& out, float* scratch) {
    LstmBlock<kOne>(L, t, step0, x, sx, state, out, scratch);
  }
};
void LstmStreamForward(const StreamLayer& L, int64_t t, int64_t step0, const float* x, int64_t sx,
                       float* state, const StreamOut& out, float* scratch) {
  StreamFrames<LstmCellKernel>(L, t, step0, x, sx, state, out, scratch);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(LstmStreamForward);

namespace {
hwy::AlignedFreeUniquePtr<float[]> zeros(int64_t n) {
  auto p = hwy::AllocateAligned<float>(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (!p) throw std::bad_alloc();
  std::memset(p.get(), 0, std::max<int64_t>(n, 1) * sizeof(float));
  return p;
}
}  // namespace

StreamLayer lstm_stream_pack(int64_t I, int64_t H, const float* w_ih, const float* w_hh,
                             const float* b_ih, const float* b_hh,
                             std::optional<bool> narrow_tiles) {
  StreamLayer L;
  L.I = I, L.H = H, L.K = H, L.u0 = 0, L.lstm = true;
  const StreamTarget target = stream_target(H);
  L.V = target.lanes;
  L.forward = HWY_DISPATCH_TABLE(LstmStreamForward)[target.index];
  L.Hp = (H + L.V - 1) / L.V * L.V;
  const int64_t V = L.V, Hp = L.Hp, G = Hp / V;
  // Wide or narrow tiles: the GRU's choice for this H (speed only: the same bits either way).
  L.narrow_tiles = G > 2 && (narrow_tiles ? *narrow_tiles : stream_narrow_tiles(H, false));
  L.alternate = G > 2 && stream_alternates(H, 4);  // its own weights: 4 H^2 floats
  L.projection_frames = stream_projection_frames(I, H, Hp, 4);
  const auto scale = [](int64_t q) { return q == 2 ? 1.0f : 0.5f; };  // i, f, o halved
  const auto at = [&](int64_t u, int64_t q) { return (u / V) * 4 * V + q * V + u % V; };
  L.wx = zeros(I * 4 * Hp);
  for (int64_t k = 0; k < I; ++k)
    for (int64_t q = 0; q < 4; ++q)
      for (int64_t u = 0; u < H; ++u)
        L.wx[k * 4 * Hp + at(u, q)] = w_ih[(q * H + u) * I + k] * scale(q);
  const StreamTiling tiles(G, 4, L.narrow_tiles);
  const auto tiled = [&](int64_t k, int64_t u, int64_t q) {
    const int64_t ti = tiles.of(u / V), j = tiles.start(ti), g = tiles.size(ti);
    return j * 4 * V * H + k * 4 * V * g + (u / V - j) * 4 * V + q * V + u % V;
  };
  L.wh = zeros(H * 4 * Hp);
  for (int64_t k = 0; k < H; ++k)
    for (int64_t q = 0; q < 4; ++q)
      for (int64_t u = 0; u < H; ++u) L.wh[tiled(k, u, q)] = w_hh[(q * H + u) * H + k] * scale(q);
  L.bx = zeros(4 * Hp);
  L.bhn = zeros(Hp);
  for (int64_t q = 0; q < 4; ++q)
    for (int64_t u = 0; u < H; ++u)
      L.bx[at(u, q)] =
          ((b_ih ? b_ih[q * H + u] : 0.0f) + (b_hh ? b_hh[q * H + u] : 0.0f)) * scale(q);
  return L;
}

int64_t lstm_stream_scratch(const StreamLayer& L, int64_t t) {
  return t * 4 * L.Hp;
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
