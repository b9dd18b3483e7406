// The real-time kernels' machinery (gru_stream.cpp, lstm_stream.cpp): one tile of a product
// summed in registers (S interleaved partial sums) and handed to a cell's epilogue, its plan,
// the register-resident product of small states, and the output row (h' or a head's outputs).
// A Highway "-inl" header: included once per SIMD target (see simd_row-inl.h). Layouts and
// arithmetic in cpu/gru_stream.h.
#if defined(GRUX_CPU_STREAM_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GRUX_CPU_STREAM_TILES_INL_H_
#undef GRUX_CPU_STREAM_TILES_INL_H_
#else
#define GRUX_CPU_STREAM_TILES_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/sanitizer.h"
#include "cpu/gru_stream.h"
#include "cpu/simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Registers the accumulators of one tile may take: 24 of AVX-512's 32 vector registers, 12 of
// the 16 elsewhere (the rest hold the broadcast values, weights in flight and constants).
constexpr int kAccRegs = HWY_TARGET <= HWY_AVX3 ? 24 : 12;
using V = hn::Vec<DF>;

// One tile of a product: kG unit groups of kPer vectors each (R = kPer kG accumulators per
// partial sum), columns of cs floats from w, summed over k < K against v[k] in S
// interleaved partial sums, the i-th column taken going to partial i mod S (the last K mod S
// to partials 0, 1, ...). Columns are taken in order k = 0, 1, ... or, with `rev`, K - 1,
// K - 2, ... Partial 0 starts from init(r), the others from zero; they are combined as
// (p0 + p1) + (p2 + p3) and handed to epi(sums) in registers.
template <int kPer, int kG, int S, class Init, class Epi>
HWY_INLINE void Tile(const float* HWY_RESTRICT w, int64_t cs, const float* HWY_RESTRICT v,
                     int64_t K, bool rev, const Init& init, const Epi& epi) {
  const DF d;
  constexpr int R = kPer * kG;
  constexpr int64_t kV = hn::MaxLanes(d);
  const int64_t dk = rev ? -1 : 1;
  const float* col = rev ? w + (K - 1) * cs : w;
  const float* vk = rev ? v + K - 1 : v;
  const int64_t dcol = dk * cs;
  V acc[S][R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[0][r] = init(r);
#pragma GCC unroll 16
  for (int s = 1; s < S; ++s)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[s][r] = hn::Zero(d);
  int64_t i = 0;
  for (; i + S <= K; i += S) {
#pragma GCC unroll 16
    for (int s = 0; s < S; ++s) {
      const V b = hn::Set(d, *vk);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[s][r] = hn::MulAdd(hn::Load(d, col + r * kV), b, acc[s][r]);
      col += dcol, vk += dk;
    }
  }
  // The last K mod S columns (s a constant in each copy: acc stays in registers).
#pragma GCC unroll 4
  for (int s = 0; s + 1 < S; ++s) {
    if (i + s >= K) break;
    const V b = hn::Set(d, *vk);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[s][r] = hn::MulAdd(hn::Load(d, col + r * kV), b, acc[s][r]);
    col += dcol, vk += dk;
  }
  V sum[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    sum[r] = acc[0][r];
    if constexpr (S == 2) sum[r] = hn::Add(acc[0][r], acc[1][r]);
    if constexpr (S == 4)
      sum[r] = hn::Add(hn::Add(acc[0][r], acc[1][r]), hn::Add(acc[2][r], acc[3][r]));
  }
  epi(sum);
}

// Tile<kPer, g, S> for run-time g in [1, 12 / kPer] and S in {1, 2, 4}.
template <int kPer, int kG, class Init, class Epi>
HWY_INLINE void TileS(int S, const float* w, int64_t cs, const float* v, int64_t K, bool rev,
                      const Init& init, const Epi& epi) {
  if (S == 4) return Tile<kPer, kG, 4>(w, cs, v, K, rev, init, epi);
  if (S == 2) return Tile<kPer, kG, 2>(w, cs, v, K, rev, init, epi);
  return Tile<kPer, kG, 1>(w, cs, v, K, rev, init, epi);
}
template <int kPer, class Init, class Epi>
HWY_INLINE void TileG(int64_t g, int S, const float* w, int64_t cs, const float* v, int64_t K,
                      bool rev, const Init& init, const Epi& epi) {
  // A macro per case, which clang-format cannot lay out stably.
  // clang-format off
  switch (g) {
#define GRUX_TILE_CASE(n)                                                                \
  case n:                                                                                \
    if constexpr (kPer * n <= 12) return TileS<kPer, n>(S, w, cs, v, K, rev, init, epi); \
    break;
    GRUX_TILE_CASE(1) GRUX_TILE_CASE(2) GRUX_TILE_CASE(3) GRUX_TILE_CASE(4)
    GRUX_TILE_CASE(5) GRUX_TILE_CASE(6) GRUX_TILE_CASE(7) GRUX_TILE_CASE(8)
    GRUX_TILE_CASE(9) GRUX_TILE_CASE(10) GRUX_TILE_CASE(11) GRUX_TILE_CASE(12)
#undef GRUX_TILE_CASE
    default:
      break;
  }
  // clang-format on
}

// How a product of `per` vectors per unit group, G groups, K columns is tiled: its tiles
// (StreamTiling: up to 12 / per groups each, or one group for narrow tiles) and S partial
// sums, within kAccRegs.
struct Plan {
  StreamTiling tiles;
  int S;
};
inline Plan PlanFor(int64_t per, int64_t G, int64_t K, bool narrow = false) {
  static_assert(kAccRegs >= kStreamTileAccs, "a tile's accumulators must fit in registers");
  const int64_t g = std::max<int64_t>(1, std::min<int64_t>(G, StreamTileGroups(per, false)));
  int S = 1;
  while (S < 4 && 2 * S * g * per <= kAccRegs && 2 * S <= K) S *= 2;
  // S from the widest tile either way: the sums' order (the results) does not depend on the
  // tiling or the cache size. Narrow tiles keep it (AVX-512 above 4 groups: 2, which runs
  // faster than 1 or 4 there).
  return {StreamTiling(G, per, narrow), S};
}

// gx (kPer Hp) = W_ih x + bx for one frame, in S partial sums as the recurrent product (a
// frame's projection is on the chain of a call of one frame).
template <int kPer>
HWY_INLINE void InputProjection(const StreamLayer& L, const Plan& p, const float* x, float* gx) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  for (int64_t t = 0; t < p.tiles.n; ++t) {
    const int64_t j = p.tiles.start(t), g = p.tiles.size(t);
    const float* b = L.bx.get() + j * kPer * kV;
    float* o = gx + j * kPer * kV;
    TileG<kPer>(
        g, p.S, L.wx.get() + j * kPer * kV, kPer * L.Hp, x, L.I, false,
        [&](int r) { return hn::Load(d, b + r * kV); },
        [&](const V* sum) {
          for (int64_t r = 0; r < kPer * g; ++r) hn::Store(sum[r], d, o + r * kV);
        });
  }
}

// The sum of v's lanes, of which only the first n can be nonzero: zero upper halves are left
// out of the reduction (fewer levels, the same sum: adding zeros changes nothing).
HWY_INLINE float SumLanes(V v, int64_t n) {
  const DF d;
#if HWY_TARGET != HWY_SCALAR
  constexpr int64_t kV = hn::MaxLanes(d);
  if constexpr (kV >= 4) {
    const hn::Half<DF> d2;
    const hn::Half<decltype(d2)> d4;
    if (4 * n <= kV)
      return hn::GetLane(hn::SumOfLanes(d4, hn::LowerHalf(d4, hn::LowerHalf(d2, v))));
    if (2 * n <= kV) return hn::GetLane(hn::SumOfLanes(d2, hn::LowerHalf(d2, v)));
  }
#endif
  return hn::GetLane(hn::SumOfLanes(d, v));
}

// Row f of the output (StreamOut) from h' (G unit groups, hv(u) its vector u): h' itself or
// the head's outputs, plus res's row. The head's dot products read h' from registers: off the
// step's dependency chain, nothing stored and reloaded.
template <class HV>
HWY_INLINE void EmitRow(const StreamOut& o, int64_t H, int64_t G, const HV& hv, int64_t f) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  float* row = o.p + f * o.stride;
  const float* res = o.res ? o.res + f * o.res_stride : nullptr;
  if (!o.head) {
    for (int64_t u = 0; u < G; ++u) {
      const Chunk<DF> c(d, H - u * kV);
      c.store(res ? hn::Add(hv(u), c.load(res + u * kV)) : hv(u), row + u * kV);
    }
    return;
  }
  const StreamHead& hd = *o.head;
  const auto lane0 = hn::FirstN(d, 1);
  for (int64_t k = 0; k < hd.O; ++k) {
    const float* w = hd.w.get() + k * hd.Hp;
    // b + res (known before h') in lane 0: one reduction, nothing added after it.
    V acc = hn::IfThenElseZero(lane0, hn::Set(d, res ? hd.b[k] + res[k] : hd.b[k]));
    for (int64_t u = 0; u < G; ++u) acc = hn::MulAdd(hn::Load(d, w + u * kV), hv(u), acc);
    row[k] = SumLanes(acc, G == 1 ? H : kV);
  }
}

// Small states (G <= 2 unit groups: H <= 32 on AVX-512, 16 on AVX2, 8 on SSE4): the state
// stays in registers across the block's steps and each column's h_k is broadcast from them by
// a lane permutation, with no store and reload on the chain. Same arithmetic as the tiles (S
// interleaved partial sums, combined as (p0 + p1) + (p2 + p3); columns in order, which at
// these sizes all stay in L1); out rows written masked.

// Lane k of v in every lane.
HWY_INLINE V LaneOf(V v, int64_t k) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  return hn::TableLookupLanes(v, hn::IndicesFromVec(d, hn::Set(di, static_cast<int32_t>(k))));
}

// sum[r] = init[r] (partial 0) + sum_k w[k * cs + r * V] src_k over k < H, src_k = lane k % V
// of src[k / V], for r < kPer * kG, in S interleaved partial sums (column k to partial k mod
// S; V is a multiple of S).
template <int kPer, int kG, int S>
HWY_INLINE void RegProduct(const float* HWY_RESTRICT w, int64_t cs, const V* src, int64_t H,
                           const V* init, V* sum) {
  const DF d;
  constexpr int64_t kV = hn::MaxLanes(d);
  constexpr int R = kPer * kG;
  V acc[S][R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[0][r] = init[r];
#pragma GCC unroll 4
  for (int s = 1; s < S; ++s)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[s][r] = hn::Zero(d);
  const float* col = w;
#pragma GCC unroll 2
  for (int gi = 0; gi < kG; ++gi) {
    const V v = src[gi];
    const int64_t kn = std::min<int64_t>(kV, H - gi * kV);
    int64_t k = 0;
    for (; k + S <= kn; k += S) {
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        const V b = LaneOf(v, k + s);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[s][r] = hn::MulAdd(hn::Load(d, col + r * kV), b, acc[s][r]);
        col += cs;
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s + 1 < S; ++s) {
      if (k + s >= kn) break;
      const V b = LaneOf(v, k + s);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[s][r] = hn::MulAdd(hn::Load(d, col + r * kV), b, acc[s][r]);
      col += cs;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    sum[r] = acc[0][r];
    if constexpr (S == 2) sum[r] = hn::Add(acc[0][r], acc[1][r]);
    if constexpr (S == 4)
      sum[r] = hn::Add(hn::Add(acc[0][r], acc[1][r]), hn::Add(acc[2][r], acc[3][r]));
  }
}

// A call's frames through a cell's block kernel, Cell::Block<kOne>(L, t, step0, x, sx, state,
// out, scratch) (t frames: their input projections, then their steps). One frame, the
// real-time caller's call, runs a copy compiled for t = 1 (kOne: no loop or plan left to run):
// a call's instructions up to the recurrence's product wait behind the previous call's last
// gates in the core's reorder window, so each of them delays the step (the LSTM at H 8 on AVX2,
// the kernel called directly: 47 ns a call against 52 without the copy, 44 a frame in blocks).
// More frames run in blocks of L.projection_frames (all of them when 0): a block's input
// projections are computed before its steps, a block small enough that they stay in L1
// beside the weights. Each copy is flattened (every call inlined) in a function of its own:
// in one function the two copies' code is slower than either alone; and the dispatch between
// them is a function too small to need a stack frame. Not flattened under AddressSanitizer,
// where flattening the instrumented tiles nearly doubles the compile time.
#if GRUX_ASAN
#define GRUX_STREAM_FLATTEN
#else
#define GRUX_STREAM_FLATTEN HWY_FLATTEN
#endif
template <class Cell>
HWY_NOINLINE GRUX_STREAM_FLATTEN void StreamOneFrame(const StreamLayer& L, int64_t step0,
                                                     const float* x, int64_t sx, float* state,
                                                     const StreamOut& out, float* scratch) {
  Cell::template Block<true>(L, 1, step0, x, sx, state, out, scratch);
}
template <class Cell>
HWY_NOINLINE GRUX_STREAM_FLATTEN void StreamBlocks(const StreamLayer& L, int64_t t, int64_t step0,
                                                   const float* x, int64_t sx, float* state,
                                                   const StreamOut& out, float* scratch) {
  const int64_t c = L.projection_frames > 0 ? L.projection_frames : t;
  for (int64_t f0 = 0; f0 < t; f0 += c) {
    StreamOut o = out;
    o.p += f0 * out.stride;
    if (o.res) o.res += f0 * out.res_stride;
    Cell::template Block<false>(L, std::min(c, t - f0), step0 + f0, x + f0 * sx, sx, state, o,
                                scratch);
  }
}
[[noreturn]] HWY_NOINLINE inline void StreamPackedForAnotherTarget(const char* kernel) {
  throw std::logic_error(std::string(kernel) + ": packed for another SIMD target");
}
template <class Cell>
HWY_INLINE void StreamFrames(const StreamLayer& L, int64_t t, int64_t step0, const float* x,
                             int64_t sx, float* state, const StreamOut& out, float* scratch) {
  if (L.V != static_cast<int64_t>(hn::MaxLanes(DF()))) StreamPackedForAnotherTarget(Cell::kName);
  if (t == 1) return StreamOneFrame<Cell>(L, step0, x, sx, state, out, scratch);
  StreamBlocks<Cell>(L, t, step0, x, sx, state, out, scratch);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#endif  // GRUX_CPU_STREAM_TILES_INL_H_
