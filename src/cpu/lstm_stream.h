// The real-time LSTM kernel: one sequence (batch 1), f32, small hidden sizes, no projection
// (LstmStream's fast path). The GRU's real-time kernel (cpu/gru_stream.h) with the LSTM's cell:
// the same StreamLayer, tiles, plans, head and output rows (cpu/stream_tiles-inl.h); a unit
// group's gates are [i_j | f_j | g_j | o_j] (4 vectors of V lanes: 4 Hp floats a column), up to
// 12 / 4 = 3 groups a tile. The rows of i, f and o (W_ih's, W_hh's and their biases) are stored
// halved, exact in binary floating point (the sigmoid is taken of its halved argument, as the
// GRU's r and z).
//
// Arithmetic, fixed for a given H, I and SIMD target (the same bits for any split of the
// frames into calls, run to run):
//   gx = (W_ih x) + (b_ih + b_hh), in S interleaved partial sums as the GRU's;
//   a = gx + W_hh h, the recurrent product summed as the GRU's (S partial sums, the columns in
//       order, or alternating direction step by step where stream_alternates(H, 4));
//   i, f, o = sig(a_i, a_f, a_o), g = tanh(a_g), c' = f c + i g, h' = o tanh(c'),
//   with the rational StreamSigmoid and StreamTanh of cpu/gate_math-inl.h.
// Not bit-identical to the batched engine: within f32 rounding of it and of PyTorch.
#pragma once

#include <cstdint>
#include <optional>

#include "core/visibility.h"
#include "cpu/gru_stream.h"

namespace grux::cpu {

// Packs PyTorch-layout weights: w_ih (4H x I), w_hh (4H x H) row-major, gate order i, f, g, o;
// b_ih, b_hh (4H) or null for no bias. narrow_tiles: the GRU's choice for this H
// (stream_narrow_tiles) unless given (tests take both; the same bits either way); never for up
// to 2 unit groups.
GRUX_INTERNAL StreamLayer lstm_stream_pack(int64_t I, int64_t H, const float* w_ih,
                                           const float* w_hh, const float* b_ih, const float* b_hh,
                                           std::optional<bool> narrow_tiles = std::nullopt);

// Floats of scratch lstm_stream_forward needs for blocks of up to t frames.
GRUX_INTERNAL int64_t lstm_stream_scratch(const StreamLayer& layer, int64_t t);

// Runs t >= 1 steps, the first being step step0 since the state was set: x (t rows of I, row
// stride sx), state (3 Hp floats, 64-byte aligned: h padded with zeros to Hp in [0, Hp), read
// and updated; [Hp, 2Hp) scratch; c padded with zeros in [2Hp, 3Hp), read and updated), out
// (t rows, as StreamOut says; must not overlap x). scratch: lstm_stream_scratch floats,
// 64-byte aligned. Allocates nothing, takes no lock.
inline void lstm_stream_forward(const StreamLayer& layer, int64_t t, int64_t step0, const float* x,
                                int64_t sx, float* state, const StreamOut& out, float* scratch) {
  layer.forward(layer, t, step0, x, sx, state, out, scratch);
}

}  // namespace grux::cpu
