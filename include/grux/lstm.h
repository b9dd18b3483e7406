// The LSTM: configuration, weights (PyTorch nn.LSTM layout), the layer stack forward and
// backward, and the single cell (nn.LSTMCell).
//
// Sizes: T time steps, N batch, I input size, H hidden size, P projection size (proj_size;
// 0: none), H_out = P or H, L layers, D directions.
// Gate order in every weight is i, f, g, o (PyTorch, ONNX's i, o, f, c reordered):
//   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi), f and o likewise, g = tanh(W_ig x + ... ),
//   c' = f * c + i * g,   h' = o * tanh(c'),   and with proj_size > 0  h' = W_hr (o * tanh(c')).
// The state is h (H_out wide) and c (H wide).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grux/export.h"
#include "grux/gru.h"
#include "grux/precision.h"
#include "grux/sequence.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Options of an LSTM stack, as nn.LSTM's constructor arguments.
struct LstmConfig {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;  // between layers, applied by forward_train only
  bool bidirectional = false;
  int64_t proj_size = 0;  // 0: no projection; else 1 <= proj_size < hidden_size

  int64_t directions() const { return bidirectional ? 2 : 1; }
  // Width of h (and of each direction's output): proj_size, or hidden_size without one.
  int64_t output_size() const { return proj_size > 0 ? proj_size : hidden_size; }
  // Input width of layer `layer`: I for layer 0, D * H_out above it.
  int64_t layer_input_size(int64_t layer) const;
  // Throws grux::Error if a size is < 1, proj_size is outside [0, hidden_size) or dropout is
  // outside [0, 1).
  void validate() const;
};

// One LSTM problem, what the operator, its benchmark and the CLI read: the operator's options
// (LstmConfig) and the data's shape (SequenceShape). Descriptor string:
// l{L}d{D}t{T}n{N}i{I}h{H}[p{P}], e.g. "l2d2t200n32i128h256" or "l1d1t100n64i256h512p128";
// l and d may be omitted (default 1), p (proj_size) too (default 0: none).
struct LstmProblem : LstmConfig, SequenceShape {
  // Throws grux::Error naming the descriptor and what was expected.
  static LstmProblem parse(const std::string& descriptor);
  std::string descriptor() const;  // always with l and d, p only when proj_size > 0
  const LstmConfig& config() const { return *this; }
  // GEMM flops of one forward pass: 2 * rows * 4H * (in + H_out) per layer and direction, plus
  // 2 * rows * H * P for a projection; in = I for layer 0, D * H_out above. Training is 3x.
  double gemm_flops() const;
};

// One LSTMCell problem (one step of one layer, nn.LSTMCell), as the cost model reads it.
// Descriptor string: n{N}i{I}h{H}, e.g. "n1i256h256"; all three required.
struct LstmCellProblem {
  int64_t N = 0, I = 0, H = 0;
  bool bias = true;
  DType dtype = DType::f32;

  // Throws grux::Error naming the descriptor and what was expected.
  static LstmCellProblem parse(const std::string& descriptor);
  std::string descriptor() const;
};

// Weights of one layer and direction: w_ih (4H, in), w_hh (4H, H_out), b_ih (4H), b_hh (4H),
// w_hr (P, H). The biases are undefined tensors when bias is false, w_hr without a projection.
struct LstmLayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
};

// Key of a weight in PyTorch's state_dict: "weight_ih_l0", "weight_hr_l1_reverse", ...
// `what` is one of "weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr".
std::string lstm_key(const char* what, int64_t layer, int64_t direction);

// Activations saved by Lstm::forward_train for Lstm::backward. Opaque: only Lstm reads it.
struct LstmTapeData;
class LstmTape {
 public:
  LstmTape();
  ~LstmTape();
  LstmTape(LstmTape&&) noexcept;
  LstmTape& operator=(LstmTape&&) noexcept;
  bool empty() const;

 private:
  friend class Lstm;
  std::unique_ptr<LstmTapeData> data_;
};

struct LstmOutput {
  Tensor output;  // (T, N, D*H_out), (N, T, D*H_out) with batch_first, or (T, D*H_out) unbatched
  Tensor h_n;     // (L*D, N, H_out), or (L*D, H_out) unbatched
  Tensor c_n;     // (L*D, N, H), or (L*D, H) unbatched
};

struct LstmGrads {
  Tensor dinput;                           // same shape as input
  Tensor dh0;                              // shape of h0 (of h_n if h0 was not given)
  Tensor dc0;                              // shape of c0 (of c_n if c0 was not given)
  std::vector<LstmLayerWeights> dweights;  // index layer * D + direction
  // Gradients keyed like the weights' state_dict.
  std::map<std::string, Tensor> state_dict(const LstmConfig& config) const;
};

class Lstm {
 public:
  // Weights drawn like PyTorch's reset_parameters: uniform(-1/sqrt(H), 1/sqrt(H)), from a
  // seeded generator (the numbers differ from PyTorch's; the distribution is the same).
  Lstm(const LstmConfig& config, DType dtype = DType::f32, uint64_t seed = 0);
  // Uses the given weights (index layer * D + direction), checked as set_weights does; shares
  // their storage with the caller unless a tensor had to be made contiguous (as Gru's).
  Lstm(const LstmConfig& config, std::vector<LstmLayerWeights> weights);
  // Copies deep-copy the weights; moves keep them.
  Lstm(const Lstm& other);
  Lstm& operator=(const Lstm& other);
  Lstm(Lstm&&) noexcept = default;
  Lstm& operator=(Lstm&&) noexcept = default;

  // Builds an LSTM from nn.LSTM's state_dict keys. input_size, hidden_size, num_layers, bias,
  // bidirectional and proj_size are inferred from the keys and shapes; batch_first and
  // dropout come from `options`. A missing, extra or misshapen key (a GRU's state dict has
  // 3H rows, not 4H), or mixed dtypes, is an error naming the key.
  static Lstm from_state_dict(const std::map<std::string, Tensor>& state,
                              const LstmConfig& options = {});
  std::map<std::string, Tensor> state_dict() const;

  const LstmConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const std::vector<LstmLayerWeights>& weights() const { return weights_; }
  // Replaces every weight (index layer * D + direction); checked and made contiguous as
  // Gru::set_weights does. The dtype of the Lstm becomes the weights' (f32 or f64).
  void set_weights(std::vector<LstmLayerWeights> weights);

  // Inference forward (no dropout).
  //   input: (T, N, I); (N, T, I) with batch_first; (T, I) unbatched. f32 or f64.
  //   h0: (L*D, N, H_out) and c0: (L*D, N, H), or without N unbatched; either or both may be
  //     undefined (zeros).
  //   lengths: (N,) i64 with 1 <= lengths[n] <= T, any order; undefined means all T.
  //     Output rows at t >= lengths[n] are zero; h_n and c_n hold each sequence's state after
  //     its last valid step; the reverse direction runs over each sequence's valid part.
  //   threads: 0 lets grux choose (OpenMP's setting), k >= 1 uses at most k (docs/api.md).
  LstmOutput forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& c0 = {},
                     const Tensor& lengths = {}, int threads = 0) const;

  // Training forward: as forward(), with dropout between layers (config.dropout, masks drawn
  // from `dropout_seed`, for the streams `share` says, as Gru::forward_train), saving into
  // `tape` what backward needs. precision bf16 (an f32 LSTM only; int8 is refused) trains in
  // bf16 as the GRU does: every product (W_ih, W_hh and W_hr, forward and backward, and the
  // weight gradients' sums) takes bf16 operands and sums in f32; gates, states and gradients
  // stay f32 (docs/precision.md).
  LstmOutput forward_train(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           const Tensor& lengths, LstmTape& tape, uint64_t dropout_seed = 0,
                           Precision precision = Precision::f32, BatchShare share = {},
                           int threads = 0) const;

  // Gradients given d(loss)/d(output), d(loss)/d(h_n) and d(loss)/d(c_n) (any may be
  // undefined, not all), with the shapes forward_train returned, from its tape. The weights
  // must not have changed in between.
  LstmGrads backward(const LstmTape& tape, const Tensor& doutput, const Tensor& dh_n,
                     const Tensor& dc_n, int threads = 0) const;

 private:
  LstmConfig config_;
  DType dtype_ = DType::f32;
  std::vector<LstmLayerWeights> weights_;
};

// LstmCell::backward's gradients.
struct LstmCellGrads {
  Tensor dinput;  // same shape as input
  Tensor dh;      // same shape as h (h_new's if h was not given)
  Tensor dc;      // same shape as c (c_new's if c was not given)
  LstmLayerWeights dweights;
};

// An LSTM's inference with the weights packed once (for many calls), the products in f32,
// bf16 or int8 (grux/precision.h; bf16 and int8 take an f32 LSTM, the weight matrices W_ih,
// W_hh and W_hr converted here, the biases, gates and states kept in f32). Results as
// Lstm::forward's; in bf16 and int8 within the GRU's bounds of f32's (docs/precision.md),
// the same bits on any thread count and whether a sequence runs alone or in a batch.
class LstmInference {
 public:
  explicit LstmInference(const Lstm& lstm, Precision precision = Precision::f32);
  ~LstmInference();
  LstmInference(LstmInference&&) noexcept;
  LstmInference& operator=(LstmInference&&) noexcept;

  LstmOutput forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& c0 = {},
                     const Tensor& lengths = {}, int threads = 0) const;
  Precision precision() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// nn.LSTMCell: one step of one layer. Keys weight_ih, weight_hh, bias_ih, bias_hh. It runs the
// stack's engine for one step of one layer: the same results as an Lstm of one layer.
struct LstmCellPlan;

class LstmCell {
 public:
  LstmCell(int64_t input_size, int64_t hidden_size, bool bias = true, DType dtype = DType::f32,
           uint64_t seed = 0);
  static LstmCell from_state_dict(const std::map<std::string, Tensor>& state);
  std::map<std::string, Tensor> state_dict() const;

  // input: (N, I) or unbatched (I); h, c: (N, H) or (H), either undefined means zeros.
  // Returns (h', c'). One sequence (N = 1 or unbatched) of an f32 cell with H <= 256 runs
  // the real-time kernel (cpu/lstm_stream.h) on the calling thread: equal to a one-step
  // Lstm::forward within f32 rounding, as LstmStream; anything else runs the engine.
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& h = {}, const Tensor& c = {},
                                    int threads = 0) const;
  // One sequence's step from raw memory (f32 cells): input (I floats), h and c (H floats each,
  // or null: zeros) into h_new and c_new (H floats each; may be h and c themselves). The same
  // bits as forward() of the same values, without its checks and Tensors: where the real-time
  // kernel runs (H <= 256) it allocates nothing. An f64 cell, a null input, h_new or c_new, or
  // threads < 0 is an error.
  void forward(const float* input, const float* h, const float* c, float* h_new, float* c_new,
               int threads = 0) const;
  // Gradients of one step given dh_new and/or dc_new (either may be undefined, not both);
  // recomputes the forward.
  LstmCellGrads backward(const Tensor& input, const Tensor& h, const Tensor& c,
                         const Tensor& dh_new, const Tensor& dc_new, int threads = 0) const;

  int64_t input_size() const { return lstm_.config().input_size; }
  int64_t hidden_size() const { return lstm_.config().hidden_size; }
  const LstmLayerWeights& weights() const { return lstm_.weights()[0]; }
  // New weights of the same shapes, dtype and bias presence (checked).
  void set_weights(LstmLayerWeights weights);

 private:
  explicit LstmCell(Lstm lstm);
  Lstm lstm_;
  // The weights packed for the real-time kernel (lstm.cpp); immutable, shared by copies.
  std::shared_ptr<const LstmCellPlan> plan_;
};

// Stateful streaming over a unidirectional LSTM: feed one frame or a chunk at a time, keep the
// state (h, c) between calls. GruStream's machinery with the LSTM's cell: the same guarantees.
// The stream packs its own copy of the weights and sizes all its workspace when constructed
// (`lstm` may go away afterwards). After construction, step_into() and process() allocate
// nothing, take no lock, start no thread and make no system call, whatever the number of
// frames; reset() without arguments likewise, and reset(h0, c0) with states of the stream's own
// shapes, dtype and layout (contiguous), copied in place. step(), state() and cell_state() allocate
// their results. With threads > 1 the stream's own team (started here, spinning between frames, as
// GruStream's) shares each step's units; 0 or 1: every step runs on the calling thread.
//
// Kernels and results. One sequence (batch 1 or unbatched) in f32 without a projection (hidden
// sizes up to 256) runs the real-time kernel (cpu/lstm_stream.h): equal to Lstm::forward within
// f32 rounding and exactly reproducible: the same bits on any split of the frames into calls.
// Every other stream (a batch, f64, proj_size > 0, threads > 1, bf16 or int8) runs the engine's
// layer kernels and is bit-identical to Lstm::forward (LstmInference for bf16 and int8) on the
// whole sequence.
class LstmStream {
 public:
  // batch N >= 1, or 0 for unbatched frames. h0 (L, N, H_out) and c0 (L, N, H) as in
  // Lstm::forward (either undefined: zeros). threads: 0 or 1 (the calling thread), or k > 1
  // (a team of up to k). precision bf16 or int8 (an f32 LSTM): the weights converted once,
  // here; frames then give LstmInference(lstm, precision)'s results bit for bit.
  LstmStream(const Lstm& lstm, int64_t batch, const Tensor& h0 = {}, const Tensor& c0 = {},
             int threads = 0);
  LstmStream(const Lstm& lstm, int64_t batch, const Tensor& h0, const Tensor& c0,
             Precision precision, int threads = 0);
  ~LstmStream();
  LstmStream(LstmStream&&) noexcept;
  LstmStream& operator=(LstmStream&&) noexcept;

  // As GruStream's: frames (N, I) / (I) or a chunk (t, N, I) / (N, t, I) with batch_first /
  // (t, I); returns the top layer's h (or the head's outputs) in the same layout.
  Tensor step(const Tensor& frames);
  void step_into(const Tensor& frames, Tensor& out);
  // Raw frames, time-major and contiguous: in (frames, N, I), out (frames, N, output_size()).
  template <typename T>
  void process(const T* in, T* out, int64_t frames);
  Tensor state() const;       // h: (L, N, H_out), or (L, H_out) unbatched; a copy
  Tensor cell_state() const;  // c: (L, N, H), or (L, H) unbatched; a copy
  void reset(const Tensor& h0 = {}, const Tensor& c0 = {});
  // A Linear head (and/or residual) after the top layer, as GruStream::set_head (f32 only).
  void set_head(const GruStreamHead& head);
  int64_t output_size() const;  // the head's O, else H_out

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace GRUX_API
