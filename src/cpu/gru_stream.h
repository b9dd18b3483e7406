// The real-time GRU kernel: one sequence (batch 1), f32, small hidden sizes (the audio and
// sensor models of GruStream and the C API's streams). A step is one fused pass per group of
// units: the recurrent product's sums stay in registers and go straight into the gates, with
// no GEMM machinery, packing or bookkeeping per call. The input projection of a block of
// frames is computed before its recurrence (off the dependency chain). Raw pointers, no Tensor.
//
// Layout ("gate-vector interleaved"): units are grouped in vectors of V lanes (V: the SIMD
// target's f32 lanes), Hp = H rounded up to V. Column k of a product holds, for each unit
// group j, [r_j | z_j | n_j] (V floats each): 3 Hp floats. Padding units have zero weights.
// The recurrent products are stored tile by tile: a step sums each tile of unit groups
// (up to 12/per of them, per = 3 vectors a group for [r|z|n], 2 for reset-before's [r|z], 1
// for its n, the groups split evenly (StreamTiling); one group in narrow tiles) over all
// columns before the next tile, so a tile's H columns
// are contiguous (per V g floats each, g its groups) and a step reads the weights as one
// sequential stream (see `alternate` below for its direction). With one tile (12/per groups or
// fewer, not narrow) this is the plain layout above. The rows of r and z (W_ih's, W_hh's and
// their biases) are stored halved, exact in binary floating point: the sigmoid of x is taken
// as (1 + tanh(x / 2)) / 2, and its argument then arrives halved.
//
// Arithmetic, fixed for a given H, I and SIMD target, so results are reproducible run to run
// and identical for any split of the frames into calls:
//   gx = (W_ih x) + bx, the product summed over k in S interleaved partial sums as below,
//        the first starting from bx; bx = b_ih + b_hh for r and z, b_in for n
//        (reset-before: b_in + b_hn)
//   the recurrent products summed over k in S interleaved partial sums (k mod S), the first
//        starting from the step's constant term, then (p0 + p1) + (p2 + p3); S (1, 2 or 4)
//        shortens the dependency chain where registers allow. Columns are taken in order
//        k = 0, 1, ..., except where the recurrent weights exceed kStreamAlternateBytes (and
//        more than two unit groups): there in that order at even steps since the stream
//        began and in reverse at odd ones, the tiles too (weights larger than the L1 cache
//        then find its last-used part there):
//   linear-before-reset: r = sig(gx_r + W_hr h), z = sig(gx_z + W_hz h),
//        n = tanh(gx_n + r (b_hn + W_hn h)), h' = (1 - z) n + z h
//   reset-before: r, z as above; n = tanh(gx_n + W_hn (r h)), h' as above;
//   sig and tanh: the rational StreamSigmoid and StreamTanh of cpu/gate_math-inl.h (within
//        3e-7 of the exact values).
// Not bit-identical to the batched engine (whose GEMM sums in another order): within f32
// rounding of it and of PyTorch.
#pragma once

#include <hwy/aligned_allocator.h>
#include <hwy/targets.h>

#include <cstdint>
#include <optional>

#include "core/visibility.h"

namespace grux::cpu {

struct StreamOut;

// The largest hidden size the streams and cells run on the real-time kernels (GRU and LSTM);
// larger ones run the engine's layer kernels.
constexpr int64_t kStreamMaxHidden = 256;

// Accumulators of one tile of the kernel's products (a partial sum's worth: 12, within the 16
// registers of every SIMD target), and the unit groups a tile takes with `per` vectors each.
constexpr int64_t kStreamTileAccs = 12;
constexpr int64_t StreamTileGroups(int64_t per, bool narrow) {
  return narrow ? 1 : kStreamTileAccs / per;
}
// The tiles of a product over G unit groups: as few as StreamTileGroups allows, their sizes as
// even as possible, the larger first (G 4 at 3 a tile: 2 + 2, not 3 + 1). A tile of one group
// is a chain of K dependent multiply-adds on too few accumulators to keep the FMA units busy
// (the LSTM at H 32 on AVX2, the kernel called directly: 3 + 1 took about 10% longer a step
// than 2 + 2). Tile t covers
// groups [start(t), start(t) + size(t)). The tiling changes the speed only: each unit's sums
// are the same either way.
struct StreamTiling {
  int64_t n = 0, base = 0, extra = 0;  // n tiles: the first `extra` of base + 1 groups, then base
  // Built on every call of a stream's step: a narrow or a single tile costs no division (the
  // step of a small layer takes about 100 ns, a 64-bit division up to 15 of them).
  constexpr StreamTiling(int64_t G, int64_t per, bool narrow) {
    if (narrow) {
      n = G, base = 1;
      return;
    }
    const int64_t most = kStreamTileAccs / per;  // per is a constant where it is inlined
    n = (G + most - 1) / most;
    if (n <= 1) {
      base = G;
    } else {
      const auto g = static_cast<uint32_t>(G), k = static_cast<uint32_t>(n);
      base = g / k, extra = g % k;
    }
  }
  constexpr int64_t start(int64_t t) const { return t * base + (t < extra ? t : extra); }
  constexpr int64_t size(int64_t t) const { return base + (t < extra ? 1 : 0); }
  // The tile that holds group u.
  constexpr int64_t of(int64_t u) const {
    const int64_t big = extra * (base + 1);
    return u < big ? u / (base + 1) : extra + (u - big) / base;
  }
};
// Above this size of recurrent weights (per H^2 floats: per 3 for the GRU, 4 for the LSTM) a
// step reads them in the other direction than the step before (stream_alternates). A rule of H
// alone, not of the machine's cache, so results do not depend on the cache size: 32 KiB, the
// smallest L1 data cache of current x86 cores. In L1 the reversal costs a little time (the first
// columns a step reads are those whose state the step before wrote last: about 4% at H 48 in a 48
// KiB L1); beyond it, reading from the last-used end saves more (about a fifth of a step at H 64;
// the LSTM at H 48 in a 32 KiB L1, 37 KB of weights: 407 ns a step against 497 in order).
constexpr int64_t kStreamAlternateBytes = int64_t(32) << 10;
GRUX_INTERNAL bool stream_alternates(int64_t H, int64_t per = 3);
// Whether a layer of hidden size H (and form) takes narrow tiles (one unit group each) rather
// than wide ones. Never where its recurrent weights (3 H^2 floats) fit in the L1 data cache the
// OS reports. Beyond it a step streams them from L2, and which tiles do that faster depends on
// the core: narrow ones on some (a third less time a frame at H 128), wide ones by 3-8% on
// others. So where they fit in the L2 cache, the first call for an (H, form) on the SIMD
// target in use times both on a synthetic layer of that size (it packs the two and runs 9
// rounds of a block of each: about a millisecond at H 80, several at H 256, with a mutex
// held) and every later call returns that answer; beyond the L2, narrow. The tiles change the
// speed only: their results are the same bits.
GRUX_INTERNAL bool stream_narrow_tiles(int64_t H, bool reset_before);

// How many frames of a call the kernel projects before their steps (0: all of them): where the
// layer's weights (per Hp (I + H) floats) leave room in 3/4 of the L1 data cache for the
// projections (per Hp floats a frame) of at least 4 frames, as many as fit there, so that a
// block's projections do not push the recurrent weights out of L1 (which costs about 7% a
// frame at I 1, H 48 in a 48 KiB L1). Beyond that, all of them: where the weights are read
// from L2 anyway, projecting in smaller blocks is slower. Speed only: the
// projections and steps are the same arithmetic either way.
// `per`: gate vectors a unit group (3 for the GRU, 4 for the LSTM).
GRUX_INTERNAL int64_t stream_projection_frames(int64_t I, int64_t H, int64_t Hp, int64_t per = 3);

// One layer's weights in the kernel's layout for this process's SIMD target.
struct StreamLayer {
  int64_t I = 0, H = 0;
  int64_t V = 0;   // f32 lanes of the target it was packed for
  int64_t Hp = 0;  // H rounded up to V
  bool reset_before = false;
  bool lstm = false;              // an LSTM layer (cpu/lstm_stream.h): 4 gate vectors a group
  bool narrow_tiles = false;      // stream_narrow_tiles(H, reset_before) when packed
  bool alternate = false;         // stream_alternates(H), more than two unit groups
  int64_t projection_frames = 0;  // stream_projection_frames(I, H, Hp)
  // Columns of the recurrent product (the whole layer's hidden size) and the first of this
  // layer's units among them: H and 0, except in a part (gru_stream_pack_part).
  int64_t K = 0, u0 = 0;
  // wx: I columns of 3 Hp (W_ih). wh, tile by tile: linear-before-reset, H columns of 3 Hp
  // (W_hh); reset-before, H columns of 2 Hp ([r_j | z_j]) followed by H columns of Hp (W_hn).
  hwy::AlignedFreeUniquePtr<float[]> wx, wh;
  hwy::AlignedFreeUniquePtr<float[]> bx;   // 3 Hp
  hwy::AlignedFreeUniquePtr<float[]> bhn;  // Hp: b_hn (linear-before-reset), zeros otherwise
  // The kernel of the SIMD target it was packed for, resolved once (no dispatch per call).
  using Forward = void (*)(const StreamLayer&, int64_t, int64_t, const float*, int64_t, float*,
                           const StreamOut&, float*);
  Forward forward = nullptr;
  using PartStep = void (*)(const StreamLayer&, const float*, const float*, float*, float*);
  PartStep part_step = nullptr;
};

// A Linear head (O x H) on a layer's output, applied inside the kernel's step while h' is
// still in registers (the C API's model: GRU stack, head, residual).
struct StreamHead {
  int64_t O = 0, H = 0, Hp = 0;
  hwy::AlignedFreeUniquePtr<float[]> w;  // O rows of Hp floats, zeros past H
  hwy::AlignedFreeUniquePtr<float[]> b;  // O floats (zeros when the head has no bias)
};

// Where a step's output goes: rows of h' (H floats), or with a head y = W h' + b; with res,
// plus res's row (H or O floats a row). Without a head: h' + res, one add. With one, output k
// is the sum over the lanes (the SIMD target's fixed tree, over the lanes that can be
// nonzero) of c e_0 + sum_u w_k,u * h'_u, c = b_k + res_k (or b_k), the unit groups u taken
// in order: within f32 rounding of linear_forward.
struct StreamOut {
  float* p = nullptr;
  int64_t stride = 0;  // floats between rows of p
  const StreamHead* head = nullptr;
  const float* res = nullptr;  // rows of as many floats as a row of p, or null
  int64_t res_stride = 0;
};

// f32 lanes of the SIMD target the kernels run on (dynamic dispatch).
GRUX_INTERNAL int64_t gru_stream_lanes();

// The kernel a layer of hidden size H runs on: its index in a Highway dispatch table
// (HWY_DISPATCH_TABLE) and its f32 lanes. The chosen target's, except that a layer of at most
// 8 units, where the chosen target has 16 lanes and the 8-lane AVX2 target is compiled and
// supported, runs AVX2's: one unit group's step is a chain of dependent operations, and a
// 256-bit division takes 11 cycles against 18 for a 512-bit one on processors that split the
// latter (the GRU at H 8, one frame a call: 31 ns a frame against 38; the LSTM 37 against 45);
// where 512-bit division is as fast, the two kernels run alike. An inline function: the index
// depends on the targets compiled in the translation unit whose table it indexes.
struct StreamTarget {
  size_t index = 0;
  int64_t lanes = 0;
};
inline StreamTarget stream_target(int64_t H) {
  const int64_t lanes = gru_stream_lanes();  // also settles the chosen target
#if HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX2)
  if (H <= 8 && lanes > 8 && (hwy::SupportedTargets() & HWY_AVX2) != 0)
    return {hwy::Num0BitsBelowLS1Bit_Nonzero64(
                static_cast<uint64_t>(HWY_CHOSEN_TARGET_SHIFT(HWY_AVX2))),
            8};
#endif
  return {hwy::GetChosenTarget().GetIndex(), lanes};
}

// Packs PyTorch-layout weights: w_ih (3H x I), w_hh (3H x H) row-major, gate order r, z, n;
// b_ih, b_hh (3H) or null for no bias. narrow_tiles: stream_narrow_tiles(H, reset_before) unless
// given (tests take both; the results are the same bits either way); never for up to 2 unit groups.
GRUX_INTERNAL StreamLayer gru_stream_pack(int64_t I, int64_t H, bool reset_before,
                                          const float* w_ih, const float* w_hh, const float* b_ih,
                                          const float* b_hh,
                                          std::optional<bool> narrow_tiles = std::nullopt);

// Packs units [u0, u0 + units) of a linear-before-reset layer of hidden size H (weights as
// gru_stream_pack's) for gru_stream_part_step: a step of a layer shared among threads, each
// thread one part, reading its part of the weights (from its own cache). u0 a multiple of
// gru_stream_lanes(). Where the part has 4 or more unit groups (gru_stream_lanes() units each)
// and the whole layer too, its units' results are the same bits as the whole layer's kernel
// gives in the first step since its state was set (the same tiles' sums: S partial sums,
// columns in order).
GRUX_INTERNAL StreamLayer gru_stream_pack_part(int64_t I, int64_t H, int64_t u0, int64_t units,
                                               const float* w_ih, const float* w_hh,
                                               const float* b_ih, const float* b_hh);

// One step of a part: x (I floats), h (the whole layer's state: H floats, then zeros up to H
// rounded up to gru_stream_lanes()), h_out (the part's Hp floats, aligned as scratch: its
// units' new state, then padding). scratch: gru_stream_scratch(part, 1) floats, 64-byte
// aligned. Allocates nothing, takes no lock; parts may run at once on other threads (each
// only reads h and the part, and writes its h_out and scratch).
inline void gru_stream_part_step(const StreamLayer& part, const float* x, const float* h,
                                 float* h_out, float* scratch) {
  part.part_step(part, x, h, h_out, scratch);
}

// Packs a head: w (O x H) row-major, b (O) or null, for a layer of hidden size H packed for
// `lanes` f32 lanes (its StreamLayer's V).
GRUX_INTERNAL StreamHead gru_stream_pack_head(int64_t O, int64_t H, const float* w, const float* b,
                                              int64_t lanes);

// Floats of scratch gru_stream_forward needs for blocks of up to t frames.
GRUX_INTERNAL int64_t gru_stream_scratch(const StreamLayer& layer, int64_t t);

// Runs t >= 1 steps, the first being step step0 since the state was set: x (t rows of I, row
// stride sx), state (2 Hp floats, 64-byte aligned: the state h padded with zeros to Hp in
// [0, Hp), read and updated; [Hp, 2Hp) is scratch), out (t rows, as StreamOut says; must not
// overlap x). scratch: gru_stream_scratch floats, 64-byte aligned. Allocates nothing, takes no
// lock.
inline void gru_stream_forward(const StreamLayer& layer, int64_t t, int64_t step0, const float* x,
                               int64_t sx, float* state, const StreamOut& out, float* scratch) {
  layer.forward(layer, t, step0, x, sx, state, out, scratch);
}

// A Linear head on one sequence: y (t rows of O, stride sy) = x (t rows of K, stride sx) W^T
// + b (+ y's previous contents when accumulate). W (O x K) row-major; b (O) or null. Each
// output is one dot product summed in a fixed order.
GRUX_INTERNAL void dense_rows(int64_t t, int64_t K, int64_t O, const float* x, int64_t sx,
                              const float* w, const float* b, float* y, int64_t sy,
                              bool accumulate);

// The kernel's gate functions (cpu/gate_math-inl.h's StreamSigmoid, StreamTanh) applied to n
// values: for tests of their accuracy.
GRUX_INTERNAL void stream_gates(int64_t n, const float* x, float* sigmoid, float* tanh);

// Latencies (ns) of the operations on a step's dependency chain, measured here with the
// kernel's own instructions: one FMA, one sigmoid and one tanh of a vector, each timed as a
// chain of dependent calls.
struct StreamLatencies {
  double fma_ns = 0, sigmoid_ns = 0, tanh_ns = 0;
};
GRUX_INTERNAL StreamLatencies measure_stream_latencies();

}  // namespace grux::cpu
