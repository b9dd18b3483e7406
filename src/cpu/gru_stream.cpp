// The real-time GRU kernel (batch 1, f32) with Highway SIMD, dynamic dispatch; contract and
// arithmetic in cpu/gru_stream.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gru_stream.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>
#include <unistd.h>  // sysconf: the L1 cache size

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/gate_math-inl.h"
#include "cpu/gemm_packed.h"  // l2_cache_bytes
#include "cpu/gru_stream.h"
#include "cpu/simd_row-inl.h"
#include "cpu/stream_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t StreamLanes() {
  return static_cast<int64_t>(hn::Lanes(DF()));
}

// h' of one unit group, linear-before-reset, from the step's sums for it (r and z halved, n's
// W_hn h + b_hn), its gx_n and h.
HWY_INLINE V LbrUnit(DF d, const V* sum, V gx_n, V hp, V one) {
  const V r = StreamSigmoidOfHalf(d, sum[0]);
  const V z = StreamSigmoidOfHalf(d, sum[1]);
  const V n = StreamTanh(d, hn::MulAdd(r, sum[2], gx_n));
  return hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp));
}

template <int kG, int S>
HWY_INLINE void RegSteps(const StreamLayer& L, int64_t t, const float* HWY_RESTRICT gx,
                         float* HWY_RESTRICT state, const StreamOut& out) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  const int64_t H = L.H, Hp = L.Hp;
  const V one = hn::Set(d, 1.0f);
  V h[kG];
#pragma GCC unroll 2
  for (int u = 0; u < kG; ++u) h[u] = hn::Load(d, state + u * kV);
  const auto hv = [&](int64_t u) { return h[u]; };
  if (!L.reset_before) {
    for (int64_t f = 0; f < t; ++f) {
      const float* g = gx + f * 3 * Hp;
      V init[3 * kG], sum[3 * kG];
#pragma GCC unroll 2
      for (int u = 0; u < kG; ++u) {
        init[3 * u] = hn::Load(d, g + 3 * u * kV);
        init[3 * u + 1] = hn::Load(d, g + (3 * u + 1) * kV);
        init[3 * u + 2] = hn::Load(d, L.bhn.get() + u * kV);
      }
      RegProduct<3, kG, S>(L.wh.get(), 3 * Hp, h, H, init, sum);
#pragma GCC unroll 2
      for (int u = 0; u < kG; ++u)
        h[u] = LbrUnit(d, sum + 3 * u, hn::Load(d, g + (3 * u + 2) * kV), h[u], one);
      EmitRow(out, H, kG, hv, f);
    }
  } else {
    const float* whn = L.wh.get() + H * 2 * Hp;
    for (int64_t f = 0; f < t; ++f) {
      const float* g = gx + f * 3 * Hp;
      V init[2 * kG], rz[2 * kG];
#pragma GCC unroll 2
      for (int u = 0; u < kG; ++u) {
        init[2 * u] = hn::Load(d, g + 3 * u * kV);
        init[2 * u + 1] = hn::Load(d, g + (3 * u + 1) * kV);
      }
      RegProduct<2, kG, S>(L.wh.get(), 2 * Hp, h, H, init, rz);
      V rh[kG], z[kG], init_n[kG], sn[kG];
#pragma GCC unroll 2
      for (int u = 0; u < kG; ++u) {
        rh[u] = hn::Mul(StreamSigmoidOfHalf(d, rz[2 * u]), h[u]);
        z[u] = StreamSigmoidOfHalf(d, rz[2 * u + 1]);
        init_n[u] = hn::Load(d, g + (3 * u + 2) * kV);
      }
      RegProduct<1, kG, S>(whn, Hp, rh, H, init_n, sn);
#pragma GCC unroll 2
      for (int u = 0; u < kG; ++u)
        h[u] = hn::MulAdd(hn::Sub(one, z[u]), StreamTanh(d, sn[u]), hn::Mul(z[u], h[u]));
      EmitRow(out, H, kG, hv, f);
    }
  }
#pragma GCC unroll 2
  for (int u = 0; u < kG; ++u) hn::Store(h[u], d, state + u * kV);
}

// The register-resident steps for G unit groups at S partial sums (true), or false where they
// do not apply (more groups; the scalar target, whose one lane is not a multiple of S).
HWY_INLINE bool RegStepsFor(const StreamLayer& L, int64_t G, int S, int64_t t, const float* gx,
                            float* state, const StreamOut& out) {
  constexpr int64_t kV = hn::MaxLanes(DF());
  if (kV % 4 != 0 || G > 2) return false;
  if (G == 1) {
    if (S == 4) RegSteps<1, 4>(L, t, gx, state, out);
    if (S == 2) RegSteps<1, 2>(L, t, gx, state, out);
    if (S == 1) RegSteps<1, 1>(L, t, gx, state, out);
  } else {
    if (S == 4) RegSteps<2, 4>(L, t, gx, state, out);
    if (S == 2) RegSteps<2, 2>(L, t, gx, state, out);
    if (S == 1) RegSteps<2, 1>(L, t, gx, state, out);
  }
  return true;
}

// t frames (at most L.projection_frames when set): their input projections, then their steps.
// kOne: the copy for one frame (StreamFrames, cpu/stream_tiles-inl.h).
template <bool kOne>
HWY_INLINE void StreamBlock(const StreamLayer& L, int64_t t_, int64_t step0, const float* x,
                            int64_t sx, float* state, const StreamOut& out, float* scratch) {
  const int64_t t = kOne ? 1 : t_;
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  const int64_t H = L.H, Hp = L.Hp, G = Hp / kV;
  float* gx = scratch;          // t x 3Hp
  float* zs = gx + t * 3 * Hp;  // Hp: z (reset-before)
  float* rh = zs + Hp;          // Hp: r * h (reset-before)

  // The input projection of the block, before the recurrence.
  const Plan px = PlanFor(3, G, L.I);
  for (int64_t f = 0; f < t; ++f) InputProjection<3>(L, px, x + f * sx, gx + f * 3 * Hp);
  // Small states: in registers; S from the tiles' plan, at most 2 partial sums for two groups
  // (their accumulators then leave registers for the gates' constants).
  if (G <= 2) {
    const int S = std::min(PlanFor(L.reset_before ? 2 : 3, G, H).S, G == 1 ? 4 : 2);
    if (RegStepsFor(L, G, S, t, gx, state, out)) return;
  }

  const V one = hn::Set(d, 1.0f);
  // The state ping-pongs between state[0, Hp) and state[Hp, 2Hp) when a step takes several
  // tiles (each tile reads all of h); in place when one tile covers every unit.
  float* hc = state;
  float* hn_buf = state + Hp;
  if (!L.reset_before) {
    const Plan p = PlanFor(3, G, H, L.narrow_tiles);
    const bool in_place = p.tiles.n == 1;
    const float* bhn = L.bhn.get();
    for (int64_t f = 0; f < t; ++f) {
      const float* gr = gx + f * 3 * Hp;
      const bool rev = L.alternate && ((step0 + f) & 1);
      float* dst = in_place ? hc : hn_buf;
      for (int64_t i = 0; i < p.tiles.n; ++i) {
        const int64_t ti = rev ? p.tiles.n - 1 - i : i;  // tiles in reverse at odd steps
        const int64_t j = p.tiles.start(ti), g = p.tiles.size(ti);
        const float* gj = gr + j * 3 * kV;
        TileG<3>(
            g, p.S, L.wh.get() + j * 3 * kV * H, 3 * kV * g, hc, H, rev,
            [&](int r) {  // r, z start from gx; n from b_hn
              const int q = r % 3, u = r / 3;
              return q < 2 ? hn::Load(d, gj + r * kV) : hn::Load(d, bhn + (j + u) * kV);
            },
            [&](const V* sum) {
              for (int64_t u = 0; u < g; ++u)
                hn::Store(LbrUnit(d, sum + 3 * u, hn::Load(d, gj + (3 * u + 2) * kV),
                                  hn::Load(d, hc + (j + u) * kV), one),
                          d, dst + (j + u) * kV);
            });
      }
      if (!in_place) std::swap(hc, hn_buf);
      EmitRow(
          out, H, G, [&](int64_t u) { return hn::Load(d, hc + u * kV); }, f);
    }
  } else {
    const Plan prz = PlanFor(2, G, H, L.narrow_tiles), pn = PlanFor(1, G, H, L.narrow_tiles);
    const float* whn = L.wh.get() + H * 2 * Hp;
    for (int64_t f = 0; f < t; ++f) {
      const float* gr = gx + f * 3 * Hp;
      const bool rev = L.alternate && ((step0 + f) & 1);
      for (int64_t i = 0; i < prz.tiles.n; ++i) {  // r, z, r * h
        const int64_t ti = rev ? prz.tiles.n - 1 - i : i;
        const int64_t j = prz.tiles.start(ti), g = prz.tiles.size(ti);
        TileG<2>(
            g, prz.S, L.wh.get() + j * 2 * kV * H, 2 * kV * g, hc, H, rev,
            [&](int r) { return hn::Load(d, gr + (j + r / 2) * 3 * kV + (r % 2) * kV); },
            [&](const V* sum) {
              for (int64_t u = 0; u < g; ++u) {
                const V r = StreamSigmoidOfHalf(d, sum[2 * u]);
                hn::Store(hn::Mul(r, hn::Load(d, hc + (j + u) * kV)), d, rh + (j + u) * kV);
                hn::Store(StreamSigmoidOfHalf(d, sum[2 * u + 1]), d, zs + (j + u) * kV);
              }
            });
      }
      for (int64_t i = 0; i < pn.tiles.n; ++i) {  // n from W_hn (r h), then h'
        const int64_t ti = rev ? pn.tiles.n - 1 - i : i;
        const int64_t j = pn.tiles.start(ti), g = pn.tiles.size(ti);
        TileG<1>(
            g, pn.S, whn + j * kV * H, kV * g, rh, H, rev,
            [&](int r) { return hn::Load(d, gr + (j + r) * 3 * kV + 2 * kV); },
            [&](const V* sum) {
              for (int64_t u = 0; u < g; ++u) {
                const V n = StreamTanh(d, sum[u]);
                const V z = hn::Load(d, zs + (j + u) * kV);
                const V hp = hn::Load(d, hc + (j + u) * kV);
                hn::Store(hn::MulAdd(hn::Sub(one, z), n, hn::Mul(z, hp)), d, hc + (j + u) * kV);
              }
            });
      }
      EmitRow(
          out, H, G, [&](int64_t u) { return hn::Load(d, hc + u * kV); }, f);
    }
  }
  if (hc != state)
    for (int64_t c = 0; c < Hp; c += kV) hn::Store(hn::Load(d, hc + c), d, state + c);
}

struct GruCellKernel {
  static constexpr const char* kName = "gru stream kernel";
  template <bool kOne>
  static HWY_INLINE void Block(const StreamLayer& L, int64_t t, int64_t step0, const float* x,
                               int64_t sx, float* state, const StreamOut& out, float* scratch) {
    StreamBlock<kOne>(L, t, step0, x, sx, state, out, scratch);
  }
};
void GruStreamForward(const StreamLayer& L, int64_t t, int64_t step0, const float* x, int64_t sx,
                      float* state, const StreamOut& out, float* scratch) {
  StreamFrames<GruCellKernel>(L, t, step0, x, sx, state, out, scratch);
}

// One step of a part of a layer (gru_stream_pack_part: units [u0, u0 + H) of a layer of K,
// linear-before-reset): the tiles of StreamBlock over all K columns of the whole layer's
// state h, the part's new state into h_out.
void GruStreamPartStep(const StreamLayer& L, const float* x, const float* h, float* h_out,
                       float* scratch) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  if (L.V != kV) throw std::logic_error("gru stream kernel: packed for another SIMD target");
  const int64_t G = L.Hp / kV;
  const V one = hn::Set(d, 1.0f);
  float* gx = scratch;  // 3 Hp
  InputProjection<3>(L, PlanFor(3, G, L.I), x, gx);
  const Plan p = PlanFor(3, G, L.K, L.narrow_tiles);
  const float* bhn = L.bhn.get();
  const float* hp0 = h + L.u0;
  for (int64_t ti = 0; ti < p.tiles.n; ++ti) {
    const int64_t j = p.tiles.start(ti), g = p.tiles.size(ti);
    const float* gj = gx + j * 3 * kV;
    TileG<3>(
        g, p.S, L.wh.get() + j * 3 * kV * L.K, 3 * kV * g, h, L.K, false,
        [&](int r) {
          const int q = r % 3, u = r / 3;
          return q < 2 ? hn::Load(d, gj + r * kV) : hn::Load(d, bhn + (j + u) * kV);
        },
        [&](const V* sum) {
          for (int64_t u = 0; u < g; ++u)
            hn::Store(LbrUnit(d, sum + 3 * u, hn::Load(d, gj + (3 * u + 2) * kV),
                              hn::LoadU(d, hp0 + (j + u) * kV), one),
                      d, h_out + (j + u) * kV);
        });
  }
}

void DenseRows(int64_t t, int64_t K, int64_t O, const float* x, int64_t sx, const float* w,
               const float* b, float* y, int64_t sy, bool accumulate) {
  const DF d;
  const int64_t kV = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t f = 0; f < t; ++f) {
    const float* xr = x + f * sx;
    float* yr = y + f * sy;
    for (int64_t o = 0; o < O; ++o) {
      const float* wr = w + o * K;
      auto acc = hn::Zero(d);
      for (int64_t k = 0; k < K; k += kV) {
        const Chunk<DF> c(d, K - k);
        acc = hn::MulAdd(c.load(wr + k), c.load(xr + k), acc);
      }
      float v = hn::GetLane(hn::SumOfLanes(d, acc));
      if (b) v += b[o];
      yr[o] = accumulate ? yr[o] + v : v;
    }
  }
}

void StreamGates(int64_t n, const float* x, float* sigmoid, float* tanh) {
  const DF d;
  const int64_t kV = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += kV) {
    const Chunk<DF> c(d, n - i);
    const V v = c.load(x + i);
    c.store(StreamSigmoid(d, v), sigmoid + i);
    c.store(StreamTanh(d, v), tanh + i);
  }
}

// ns per call of op in a chain of n dependent calls (the best of 5 rounds).
template <class Op>
double ChainNs(Op op, int64_t n) {
  const DF d;
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    auto v = hn::Set(d, 0.25f);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) v = op(v);
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    volatile float sink = hn::GetLane(v);
    (void)sink;
    best = std::min(best, ns / static_cast<double>(n));
  }
  return best;
}

StreamLatencies MeasureStreamLatencies() {
  const DF d;
  const auto a = hn::Set(d, 0.999f), b = hn::Set(d, 1e-4f), half = hn::Set(d, 0.5f);
  StreamLatencies r;
  r.fma_ns = ChainNs([&](auto v) { return hn::MulAdd(v, a, b); }, 400000);
  // Arguments kept in (-1, 1), where the sums of a real step are; the clamps are counted.
  r.sigmoid_ns =
      ChainNs([&](auto v) { return hn::Sub(StreamSigmoidOfHalf(d, v), half); }, 100000) - r.fma_ns;
  r.tanh_ns =
      ChainNs([&](auto v) { return StreamTanh(d, hn::MulAdd(v, a, half)); }, 100000) - r.fma_ns;
  return r;
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(StreamLanes);
HWY_EXPORT(GruStreamForward);
HWY_EXPORT(GruStreamPartStep);
HWY_EXPORT(DenseRows);
HWY_EXPORT(MeasureStreamLatencies);
HWY_EXPORT(StreamGates);

void stream_gates(int64_t n, const float* x, float* sigmoid, float* tanh) {
  HWY_DYNAMIC_DISPATCH(StreamGates)(n, x, sigmoid, tanh);
}

StreamLatencies measure_stream_latencies() {
  return HWY_DYNAMIC_DISPATCH(MeasureStreamLatencies)();
}

int64_t gru_stream_lanes() {
  return HWY_DYNAMIC_DISPATCH(StreamLanes)();
}

namespace {
// How much longer narrow tiles take than wide ones on a synthetic layer (I 1) of hidden size H:
// the median, over `rounds` rounds, of the ratio of their times for a block of `frames`
// frames, the two run back to back in each round (in alternating order), so that the ratio
// sees the machine in the same state.
double narrow_over_wide(int64_t H, bool reset_before, int64_t frames, int rounds) {
  // Weights in (-1, 1) / sqrt(H) from a multiplicative hash (the speed does not depend on them).
  const float a = 2.0f / std::sqrt(static_cast<float>(H)) / 256.0f;
  std::vector<float> wih(3 * H), whh(3 * H * H), b(3 * H), x(frames, 0.5f), out(frames * H);
  uint32_t i = 0;
  for (auto* v : {&wih, &whh, &b})
    for (float& w : *v) w = a * (static_cast<float>(((++i) * 2654435761u) >> 24) - 127.5f);
  StreamLayer layers[2];
  for (int n = 0; n < 2; ++n)
    layers[n] =
        gru_stream_pack(1, H, reset_before, wih.data(), whh.data(), b.data(), b.data(), n == 1);
  auto scratch =
      hwy::AllocateAligned<float>(static_cast<size_t>(gru_stream_scratch(layers[0], frames)));
  auto state = hwy::AllocateAligned<float>(static_cast<size_t>(2 * layers[0].Hp));
  if (!scratch || !state) throw std::bad_alloc();
  const auto block_ns = [&](const StreamLayer& L) {
    std::fill(state.get(), state.get() + 2 * L.Hp, 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    gru_stream_forward(L, frames, 0, x.data(), 1, state.get(), {out.data(), H}, scratch.get());
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  };
  block_ns(layers[0]), block_ns(layers[1]);  // warm the caches
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const bool narrow_first = r & 1;
    const double first = block_ns(layers[narrow_first]), second = block_ns(layers[!narrow_first]);
    ratios.push_back(narrow_first ? first / second : second / first);
  }
  std::nth_element(ratios.begin(), ratios.begin() + rounds / 2, ratios.end());
  return ratios[rounds / 2];
}

// The L1 data cache the OS reports (32 KiB where it reports none).
int64_t l1_data_bytes() {
  static const int64_t l1 = [] {
    const long s = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return s > 0 ? int64_t(s) : int64_t(32) << 10;
  }();
  return l1;
}
}  // namespace

bool stream_narrow_tiles(int64_t H, bool reset_before) {
  const int64_t bytes = 3 * H * H * 4;
  if (bytes <= l1_data_bytes()) return false;
  if (bytes > l2_cache_bytes())
    return true;  // not timed: a step would read them from beyond the L2
  static std::mutex mu;
  static std::map<std::tuple<int64_t, bool, int64_t>, bool> chosen;  // (H, form, SIMD target)
  const std::lock_guard<std::mutex> lock(mu);
  gru_stream_lanes();  // settles the dispatch target read below
  const auto key = std::make_tuple(H, reset_before, int64_t(hwy::GetChosenTarget().GetIndex()));
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  // Blocks that stream about 1 MiB of weights (4 to 32 frames), 9 rounds.
  const int64_t frames = std::clamp<int64_t>((int64_t(1) << 20) / bytes, 4, 32);
  return chosen[key] = narrow_over_wide(H, reset_before, frames, 9) < 1.0;
}

bool stream_alternates(int64_t H, int64_t per) {
  return per * H * H * 4 > kStreamAlternateBytes;
}

int64_t stream_projection_frames(int64_t I, int64_t H, int64_t Hp, int64_t per) {
  const int64_t room = l1_data_bytes() / 4 * 3 - per * Hp * (I + H) * 4;  // beside the weights
  const int64_t frames = room / (per * Hp * 4);
  return frames >= 4 ? frames : 0;
}

namespace {
hwy::AlignedFreeUniquePtr<float[]> zeros(int64_t n) {
  auto p = hwy::AllocateAligned<float>(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (!p) throw std::bad_alloc();
  std::memset(p.get(), 0, std::max<int64_t>(n, 1) * sizeof(float));
  return p;
}
}  // namespace

namespace {
// Units [u0, u0 + H) of a layer of K units (the whole layer: u0 0, H = K).
StreamLayer pack_units(int64_t I, int64_t K, int64_t u0, int64_t H, bool reset_before,
                       const float* w_ih, const float* w_hh, const float* b_ih, const float* b_hh,
                       std::optional<bool> narrow_tiles) {
  StreamLayer L;
  L.I = I, L.H = H, L.K = K, L.u0 = u0, L.reset_before = reset_before;
  const StreamTarget target = stream_target(K);  // the whole layer's: parts run as it does
  L.V = target.lanes;
  L.forward = HWY_DISPATCH_TABLE(GruStreamForward)[target.index];
  L.part_step = HWY_DISPATCH_TABLE(GruStreamPartStep)[target.index];
  L.Hp = (H + L.V - 1) / L.V * L.V;
  const int64_t V = L.V, Hp = L.Hp;
  // Row of gate q, unit u in PyTorch's layout -> offset in a column of `per` vectors per
  // group, the gate's vector being `slot` of them.
  auto at = [&](int64_t u, int64_t per, int64_t slot) {
    return (u / V) * per * V + slot * V + u % V;
  };
  L.wx = zeros(I * 3 * Hp);
  for (int64_t k = 0; k < I; ++k)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t u = 0; u < H; ++u)
        L.wx[k * 3 * Hp + at(u, 3, q)] = w_ih[(q * K + u0 + u) * I + k] * (q < 2 ? 0.5f : 1.0f);
  // Recurrent products, tile by tile (see gru_stream.h): the offset of column k's gate vector
  // `slot` of unit u in a product of `per` vectors per group.
  const int64_t G = Hp / V;
  // Up to two groups keep the state in registers (no tiles).
  L.narrow_tiles = G > 2 && (narrow_tiles ? *narrow_tiles : stream_narrow_tiles(K, reset_before));
  L.alternate = G > 2 && stream_alternates(H) && K == H;  // a part takes one step at a time
  L.projection_frames = stream_projection_frames(I, H, L.Hp);
  const StreamTiling tiling[4] = {{0, 1, false},
                                  StreamTiling(G, 1, L.narrow_tiles),
                                  StreamTiling(G, 2, L.narrow_tiles),
                                  StreamTiling(G, 3, L.narrow_tiles)};
  auto tiled = [&](int64_t k, int64_t u, int64_t per, int64_t slot) {
    const StreamTiling& tiles = tiling[per];
    const int64_t ti = tiles.of(u / V), j = tiles.start(ti), g = tiles.size(ti);
    return j * per * V * K + k * per * V * g + (u / V - j) * per * V + slot * V + u % V;
  };
  L.wh = zeros(K * 3 * Hp);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t q = 0; q < 3; ++q)
      for (int64_t u = 0; u < H; ++u) {
        const float v = w_hh[(q * K + u0 + u) * K + k] * (q < 2 ? 0.5f : 1.0f);
        if (!reset_before)
          L.wh[tiled(k, u, 3, q)] = v;
        else if (q < 2)
          L.wh[tiled(k, u, 2, q)] = v;
        else
          L.wh[K * 2 * Hp + tiled(k, u, 1, 0)] = v;
      }
  L.bx = zeros(3 * Hp);
  L.bhn = zeros(Hp);
  for (int64_t q = 0; q < 3; ++q)
    for (int64_t u = 0; u < H; ++u) {
      const float bi = b_ih ? b_ih[q * K + u0 + u] : 0.0f, bh = b_hh ? b_hh[q * K + u0 + u] : 0.0f;
      if (q < 2)
        L.bx[at(u, 3, q)] = (bi + bh) * 0.5f;
      else if (reset_before)
        L.bx[at(u, 3, q)] = bi + bh;
      else
        L.bx[at(u, 3, q)] = bi, L.bhn[u] = bh;
    }
  return L;
}
}  // namespace

StreamLayer gru_stream_pack(int64_t I, int64_t H, bool reset_before, const float* w_ih,
                            const float* w_hh, const float* b_ih, const float* b_hh,
                            std::optional<bool> narrow_tiles) {
  return pack_units(I, H, 0, H, reset_before, w_ih, w_hh, b_ih, b_hh, narrow_tiles);
}

StreamLayer gru_stream_pack_part(int64_t I, int64_t H, int64_t u0, int64_t units, const float* w_ih,
                                 const float* w_hh, const float* b_ih, const float* b_hh) {
  const int64_t V = gru_stream_lanes();
  if (u0 < 0 || u0 % V != 0 || units < 1 || u0 + units > H)
    throw std::invalid_argument(
        "gru stream part: units [u0, u0 + units) must lie in [0, H), u0 a multiple of the SIMD "
        "lanes");
  return pack_units(I, H, u0, units, false, w_ih, w_hh, b_ih, b_hh, std::nullopt);
}

StreamHead gru_stream_pack_head(int64_t O, int64_t H, const float* w, const float* b,
                                int64_t lanes) {
  StreamHead hd;
  const int64_t V = lanes;
  hd.O = O, hd.H = H, hd.Hp = (H + V - 1) / V * V;
  hd.w = zeros(O * hd.Hp);
  hd.b = zeros(O);
  for (int64_t k = 0; k < O; ++k) {
    for (int64_t u = 0; u < H; ++u) hd.w[k * hd.Hp + u] = w[k * H + u];
    if (b) hd.b[k] = b[k];
  }
  return hd;
}

int64_t gru_stream_scratch(const StreamLayer& L, int64_t t) {
  return t * 3 * L.Hp + 2 * L.Hp;
}

void dense_rows(int64_t t, int64_t K, int64_t O, const float* x, int64_t sx, const float* w,
                const float* b, float* y, int64_t sy, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DenseRows)(t, K, O, x, sx, w, b, y, sy, accumulate);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
