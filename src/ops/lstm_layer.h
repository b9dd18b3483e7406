// Internal to the LSTM driver: one layer-direction's weights packed for the kernels, its
// step (the cell level: the recurrent GEMM, the fused gate kernel and the projection), and
// the pass over time forward and backward, in the packed sequence layout of
// ops/recurrent_layer.h.
//
// B active rows, H hidden size, P = H_out the state's width (a projection's size, or H).
// Gate rows are 4H wide in the interleaved layout of cpu/lstm_gates.h: a thread owning unit
// blocks [b0, b1) owns their gates, the panels [2 b0, 2 b1) (two units wide) of the input and
// recurrent products, and the same units of c.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/lstm_gates.h"
#include "cpu/ref/lstm_gates_ref.h"
#include "grux/lstm.h"
#include "ops/recurrent_layer.h"
#include "ops/recurrent_stack.h"

namespace grux::ops {

template <typename T>
struct LstmKernels : GemmKernels<T> {
  decltype(&cpu::lstm_gates_forward<T>) forward;
  decltype(&cpu::lstm_gates_backward<T>) backward;
};

template <typename T>
LstmKernels<T> lstm_kernels() {
  if (reference_kernels())
    return {gemm_kernels<T>(), &cpu::ref::lstm_gates_forward<T>, &cpu::ref::lstm_gates_backward<T>};
  return {gemm_kernels<T>(), &cpu::lstm_gates_forward<T>, &cpu::lstm_gates_backward<T>};
}

template <typename T>
struct LstmPackedLayer {
  int64_t H = 0, P = 0, in = 0;
  bool proj = false;
  cpu::PackedB<T> ih;         // (in x 4H), gate columns interleaved, panels of 2 units
  cpu::PackedB<T> hh;         // (P x 4H) likewise
  cpu::PackedB<T> hr;         // projection (H x P), one-unit panels; empty without one
  cpu::PackedB<T> ih_t;       // backward: (4H x in), dx = da ih_t
  cpu::PackedB<T> hh_t;       // backward: (4H x P), dh_prev = da hh_t, one-unit panels
  cpu::PackedB<T> hr_t;       // backward, projection: (P x H), dm = dh hr_t, one-unit panels
  std::vector<T> b_ih, b_hh;  // interleaved (4H); empty without bias
  std::vector<int64_t> map4;  // interleaved column -> PyTorch weight row
  Tensor storage;             // owns the packed data
};

// `precision` bf16 or int8 (T = float, inference only): the products' weights in that
// precision (cpu/gemm_lowp.h), as the GRU's pack_layer does.
template <typename T>
LstmPackedLayer<T> pack_lstm_layer(const LstmLayerWeights& w, bool backward,
                                   Precision precision = Precision::f32);

// Forward over all steps of one layer-direction.
//   xp (rows x in): packed layer input. h0s (N x P) and c0s (N x H): initial states in
//   sorted order. a (rows x 4H): the gates (training: on return every step's activations).
//   hs (rows x P): every step's h.
//   cs: training ((N + rows) x H): c0s's copy followed by every step's c; inference (N x H):
//   holds c0s on entry, each sequence's c after its last step on return (c0s may be cs).
//   m (projection only; else null): o tanh(c) of every row (training, rows x H) or of a
//   step's (inference, N x H).
// With `io` (a layout of one length only), xp and hs are not used (ops::DenseIo). step0: the
// index of the first step (a stream's steps so far): bf16's sums follow it, as the GRU's.
template <typename T>
void lstm_layer_forward(const LstmKernels<T>& k, const LstmPackedLayer<T>& P, const SeqLayout& lay,
                        const T* xp, const T* h0s, T* a, T* hs, T* cs, T* m, bool training,
                        ThreadTeam* team = nullptr, int max_threads = 0,
                        const DenseIo<T>* io = nullptr, int64_t step0 = 0);

// Backward over all steps, given the forward's activations a, its states h0s followed by hs
// (states, (N + rows) x P), cs ((N + rows) x H) and m (rows x H, projection only).
//   dyp (rows x P): on entry dL/dh at each packed row from above (output gradient plus the
//     h_n gradient at each sequence's last step); used as scratch.
//   dc (N x H, sorted order): on entry dL/dc_n (or zeros), on return dL/dc0.
//   Outputs (overwritten): dxp (rows x in), dw (PyTorch's layout; biases only when P has
//   them), dh0s (N x P, sorted order).
template <typename T>
void lstm_layer_backward(const LstmKernels<T>& k, const LstmPackedLayer<T>& P, const SeqLayout& lay,
                         const T* xp, const T* states, const T* a, const T* cs, const T* m, T* dyp,
                         T* dc, T* dxp, LstmLayerWeights& dw, T* dh0s);

// An LSTM layer's tensors, in state-dict order (ops::WeightField).
template <>
struct StackWeights<LstmConfig> {
  using Weights = LstmLayerWeights;
  static std::vector<WeightField<Weights>> fields(const LstmConfig& c, int64_t l) {
    const int64_t H = c.hidden_size, P = c.output_size(), in = c.layer_input_size(l);
    const Shape b = c.bias ? Shape{4 * H} : Shape{};
    return {{"weight_ih", &LstmLayerWeights::w_ih, {4 * H, in}},
            {"weight_hh", &LstmLayerWeights::w_hh, {4 * H, P}},
            {"bias_ih", &LstmLayerWeights::b_ih, b, "bias is false"},
            {"bias_hh", &LstmLayerWeights::b_hh, b, "bias is false"},
            {"weight_hr", &LstmLayerWeights::w_hr, c.proj_size > 0 ? Shape{P, H} : Shape{},
             "proj_size is 0"}};
  }
};

// The LSTM as a cell of the stack driver (the interface ops/recurrent_stack.h lists): a cell
// state c of H columns, states h of P. Its buffers: a (the gates) and m (o tanh(c), with a
// projection only).
template <typename T>
struct LstmLayerCell {
  using Weights = LstmLayerWeights;
  using Packed = LstmPackedLayer<T>;
  LstmKernels<T> k = lstm_kernels<T>();
  LstmConfig c;

  int64_t width() const { return c.output_size(); }
  int64_t cell_width() const { return c.hidden_size; }
  std::vector<BufferSpec> buffers() const {
    const int64_t H = c.hidden_size;
    const bool proj = c.proj_size > 0;
    return {{4 * H, BufRows::per_row, BufRows::per_row},
            {H, proj ? BufRows::per_row : BufRows::none, proj ? BufRows::per_seq : BufRows::none}};
  }
  Packed pack(const Weights& w, bool backward, Precision p) const {
    return pack_lstm_layer<T>(w, backward, p);
  }
  // Never: on two threads with 2 MiB of L2 each the batch split was no faster than the
  // units' at 1 MB of recurrent weights (L5, 108 ms either way) and 12% slower at 6.3 MB (L3).
  bool split_batch(const Packed&) const { return false; }
  void forward(const Packed& W, const SeqLayout& lay, const T* xp, const T* h0s, T* cs,
               T* const* buf, T* hs, bool training, int max_threads, const DenseIo<T>* io) const {
    lstm_layer_forward<T>(k, W, lay, xp, h0s, buf[0], hs, cs, buf[1], training, nullptr,
                          max_threads, io);
  }
  Weights gradients(int64_t layer, DType dt) const { return empty_layer_weights(c, layer, dt); }
  void backward(const Packed& W, const SeqLayout& lay, const T* xp, const T* states, const T* cs,
                const T* const* buf, T* dy, T* dc, T* dx, Weights& dw, T* dh0s) const {
    lstm_layer_backward<T>(k, W, lay, xp, states, buf[0], cs, buf[1], dy, dc, dx, dw, dh0s);
  }
};

}  // namespace grux::ops
