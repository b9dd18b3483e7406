// The GRU: configuration, weights (PyTorch nn.GRU layout), the layer stack forward and
// backward, the single cell (nn.GRUCell), and a streaming step API.
//
// Sizes: T time steps, N batch, I input size, H hidden size, L layers, D directions.
// Gate order in every weight is r, z, n (PyTorch, cuDNN, ONNX with reordering). Two forms:
//   linear_before_reset (default; PyTorch, cuDNN, ONNX linear_before_reset=1, Keras
//   reset_after=True):   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//   reset_before (ONNX default, Keras reset_after=False, TensorFlow GRUCell):
//                        n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)
// and in both r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise,
// h' = (1 - z) * n + z * h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/precision.h"
#include "grux/sequence.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

enum class GruForm { linear_before_reset, reset_before };
const char* gru_form_name(GruForm f);

// Options of a GRU stack, as nn.GRU's constructor arguments plus the candidate form.
struct GruConfig {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;  // between layers, applied by forward_train only
  bool bidirectional = false;
  GruForm form = GruForm::linear_before_reset;

  int64_t directions() const { return bidirectional ? 2 : 1; }
  // Input width of layer `layer`: I for layer 0, D*H above it.
  int64_t layer_input_size(int64_t layer) const;
  // Throws grux::Error if a size is < 1 or dropout is outside [0, 1).
  void validate() const;
};

// One GRU problem, what the operator, its benchmark, the CLI and the cost model all read: the
// operator's options (GruConfig: layers, directions, I, H, bias, form) and the data's shape
// (SequenceShape: T, N, dtype, lengths), one set of names. A GruProblem is a GruConfig: pass
// it to Gru's constructor as it is.
// Descriptor string: l{L}d{D}t{T}n{N}i{I}h{H}, e.g. "l2d2t200n32i128h256"; l and d may be
// omitted (default 1), the other four are required, in this order.
struct GruProblem : GruConfig, SequenceShape {
  // The products' precision (grux/precision.h) as the cost model prices it: weight bytes and
  // GEMM rates. bf16 and int8 take dtype f32.
  Precision precision = Precision::f32;
  // Throws grux::Error naming the descriptor and what was expected.
  static GruProblem parse(const std::string& descriptor);
  std::string descriptor() const;  // always with l and d: "l1d1t100n64i256h512"
  const GruConfig& config() const { return *this; }
  // GEMM flops of one forward pass: 2 * rows * 3H * (in + H) per layer and direction, with
  // in = I for layer 0 and D*H above (../shared/WORKLOADS.md). Training is 3x this.
  double gemm_flops() const;
};

// One GRUCell problem (one step of one layer, nn.GRUCell): what the cost model and the CLI
// read. Descriptor string: n{N}i{I}h{H}, e.g. "n1i256h256"; all three required.
struct GruCellProblem {
  int64_t N = 0, I = 0, H = 0;
  bool bias = true;
  GruForm form = GruForm::linear_before_reset;
  DType dtype = DType::f32;

  // Throws grux::Error naming the descriptor and what was expected.
  static GruCellProblem parse(const std::string& descriptor);
  std::string descriptor() const;
};

// Weights of one layer and direction. w_ih (3H, in), w_hh (3H, H), b_ih (3H), b_hh (3H);
// the biases are undefined tensors when bias is false.
struct GruLayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

// Key of a weight in PyTorch's state_dict: "weight_ih_l0", "bias_hh_l1_reverse", ...
// `what` is one of "weight_ih", "weight_hh", "bias_ih", "bias_hh".
std::string gru_key(const char* what, int64_t layer, int64_t direction);

// A batch that is streams [first, first + N) of a batch of `of` streams (of = 0: the batch
// is all of it). Gru::forward_train draws its dropout masks for those streams of the whole.
struct BatchShare {
  int64_t first = 0;
  int64_t of = 0;
};

// Activations saved by Gru::forward_train for Gru::backward. Opaque: only Gru reads it.
struct GruTapeData;
class GruTape {
 public:
  GruTape();
  ~GruTape();
  GruTape(GruTape&&) noexcept;
  GruTape& operator=(GruTape&&) noexcept;
  bool empty() const;

 private:
  friend class Gru;
  std::unique_ptr<GruTapeData> data_;
};

struct GruOutput {
  Tensor output;  // (T, N, D*H), (N, T, D*H) with batch_first, or (T, D*H) unbatched
  Tensor h_n;     // (L*D, N, H), or (L*D, H) unbatched
};

struct GruGrads {
  Tensor dinput;                          // same shape as input
  Tensor dh0;                             // same shape as h0 (zeros' shape if h0 was not given)
  std::vector<GruLayerWeights> dweights;  // index layer * D + direction
  // Gradients keyed like the weights' state_dict.
  std::map<std::string, Tensor> state_dict(const GruConfig& config) const;
};

class Gru {
 public:
  // Weights drawn like PyTorch's reset_parameters: uniform(-1/sqrt(H), 1/sqrt(H)), from a
  // seeded generator (the numbers differ from PyTorch's; the distribution is the same).
  Gru(const GruConfig& config, DType dtype = DType::f32, uint64_t seed = 0);
  // Uses the given weights (index layer * D + direction), checked as set_weights does. The
  // Gru shares the tensors' storage with the caller (explicitly: a trainer's optimizer updates
  // them in place and the Gru sees it), unless a tensor had to be made contiguous.
  Gru(const GruConfig& config, std::vector<GruLayerWeights> weights);
  // Copies deep-copy the weights: a copy never sees changes made through the original's
  // tensors, nor the original through the copy's. Moves keep them.
  Gru(const Gru& other);
  Gru& operator=(const Gru& other);
  Gru(Gru&&) noexcept = default;
  Gru& operator=(Gru&&) noexcept = default;

  // Builds a GRU from nn.GRU's state_dict keys. input_size, hidden_size, num_layers, bias
  // and bidirectional are inferred from the keys and shapes; batch_first, dropout and form
  // come from `options`. A missing, extra or misshapen key, or mixed dtypes, is an error
  // naming the key.
  static Gru from_state_dict(const std::map<std::string, Tensor>& state,
                             const GruConfig& options = {});
  std::map<std::string, Tensor> state_dict() const;

  const GruConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const std::vector<GruLayerWeights>& weights() const { return weights_; }
  // Replaces every weight (index layer * D + direction). Shapes, dtypes (f32 or f64, all the
  // same) and devices are checked (an error names the key); a strided or transposed tensor is
  // copied into the row-major layout the kernels read, so any layout of the right values gives
  // the same results. The dtype of the Gru becomes the weights'.
  void set_weights(std::vector<GruLayerWeights> weights);

  // Inference forward (no dropout).
  //   input: (T, N, I); (N, T, I) with batch_first; (T, I) unbatched. f32 or f64.
  //   h0: (L*D, N, H), or (L*D, H) unbatched; undefined means zeros.
  //   lengths: (N,) i64 with 1 <= lengths[n] <= T, any order; undefined means all T.
  //     Output rows at t >= lengths[n] are zero; h_n holds each sequence's state after its
  //     last valid step; the reverse direction runs over each sequence's valid part.
  //   threads: 0 lets grux choose (OpenMP's setting), k >= 1 uses at most k (docs/api.md).
  GruOutput forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& lengths = {},
                    int threads = 0) const;

  // Training forward: as forward(), with dropout between layers (config.dropout, mask drawn
  // from `dropout_seed`), and saves into `tape` what backward needs.
  // precision bf16 (an f32 GRU only; int8 is refused) trains in bf16: every product with the
  // weights, here and in backward, and the weight gradients' products take their operands
  // rounded to bf16 and sum in f32; the weights themselves (the master copy the optimizer
  // updates), the gates, states and gradients stay f32 (docs/precision.md).
  // `share`: when this batch is part of a larger one (data parallelism: each process runs
  // some of the streams), which part; the masks are then the ones the whole batch would draw
  // for these streams, so K processes drop what one process would.
  GruOutput forward_train(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                          GruTape& tape, uint64_t dropout_seed = 0,
                          Precision precision = Precision::f32, BatchShare share = {},
                          int threads = 0) const;

  // Gradients given d(loss)/d(output) and/or d(loss)/d(h_n) (either may be undefined, not
  // both), with the shapes forward_train returned, from the tape that forward_train filled.
  // The weights must not have changed in between.
  GruGrads backward(const GruTape& tape, const Tensor& doutput, const Tensor& dh_n,
                    int threads = 0) const;

 private:
  GruConfig config_;
  DType dtype_ = DType::f32;
  std::vector<GruLayerWeights> weights_;
};

// Whole-sequence inference with the weights packed once, for running one model on many inputs.
// Gru::forward packs the weights into the layout its kernels read on every call, a few percent of
// the call's time (more where the weights come from DRAM). Same arguments and results as
// gru.forward() (bit-identical). Keeps its own packed copy of the weights (about their size again)
// and of the configuration, not a reference to `gru`: later changes to the weights are not seen
// (make a new GruInference), and `gru` may go away. forward() may run on several threads at once.
//
// precision: f32 (the default) runs the GRU as Gru::forward does; bf16 or int8 (an f32 GRU
// only; grux/precision.h) packs W_ih and W_hh in that precision once, here, and runs their
// products in it: gates, state and outputs stay f32, results differ from f32 by the
// precision's error (docs/precision.md) and are still row-invariant (the same bits for a
// sequence alone or in any batch, on any thread count).
class GruInference {
 public:
  explicit GruInference(const Gru& gru, Precision precision = Precision::f32);
  ~GruInference();
  GruInference(GruInference&&) noexcept;
  GruInference& operator=(GruInference&&) noexcept;

  GruOutput forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& lengths = {},
                    int threads = 0) const;
  Precision precision() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// nn.GRUCell: one step of one layer. Keys weight_ih, weight_hh, bias_ih, bias_hh. The weights are
// packed once, when the cell is made: a loop of forward() calls (one per frame) repacks nothing. At
// batch 1 (or unbatched) in f32 forward() runs the real-time kernel of GruStream on the calling
// thread (equal to the batched engine within f32 rounding; up to hidden size 256 the same bits as a
// one-thread stream's first step from h), reading contiguous arguments in place and making no
// Tensor but the result (a heap block: a loop of calls costs an allocation a call more than a
// stream's step, which writes into the caller's memory), its state on the calling thread's stack
// (16 KB). Where the weights (3H (I + H) floats) take more than a quarter of the L2 cache and
// `threads` (0: all cores) allows more than one, a linear-before-reset cell shares the step's units
// among the threads, each reading its part of the weights from its own L2: the real-time kernel's
// step in parts of 4 or more whole unit groups of the SIMD width, one part a thread, the same bits
// as on one thread (at I 64, from H 128 on, two threads take roughly half the time of one). The
// threads are the cell's own, started at its first shared step and kept while it (or a copy) lives:
// after a step they spin for 20 us, yield until 200 us, then sleep. One caller at a time uses them;
// another caller at the same moment, or one inside an OpenMP region, takes an OpenMP region instead
// (slower: the region starts and ends in every step). A child process forked after they started
// starts threads of its own (the parent's do not exist there); if none can be started, forward()
// throws grux::Error. Where the weights take more than 3/4 of the L2 and there are no such parts (a
// reset-before cell, whose n product needs every unit's r first, or too few units), the engine's
// team shares the step instead, bit-identical to Gru::forward. Every other call runs the engine's
// kernels.
struct GruCellPlan;
// GruCell::backward's gradients.
struct GruCellGrads {
  Tensor dinput;  // same shape as input
  Tensor dh;      // same shape as h (zeros' shape if h was not given)
  GruLayerWeights dweights;
};

class GruCell {
 public:
  GruCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          GruForm form = GruForm::linear_before_reset, DType dtype = DType::f32, uint64_t seed = 0);
  static GruCell from_state_dict(const std::map<std::string, Tensor>& state,
                                 GruForm form = GruForm::linear_before_reset);
  std::map<std::string, Tensor> state_dict() const;

  // input: (N, I) or unbatched (I); h: (N, H) or (H), undefined means zeros. Returns h'.
  Tensor forward(const Tensor& input, const Tensor& h = {}, int threads = 0) const;
  // One sequence's step from raw memory (f32 cells): input (I floats), h (H floats, or null:
  // zeros) into h_new (H floats; may be h itself). The same bits as forward() of the same
  // values, without its checks and Tensors: where the real-time kernel runs on the calling
  // thread alone (see above) it allocates nothing; a step shared among threads (the cell's
  // threads or an OpenMP region) promises no such thing. An f64 cell or a null input or h_new
  // is an error.
  void forward(const float* input, const float* h, float* h_new, int threads = 0) const;

  // Gradients of one step given dh_new = d(loss)/d(h'); recomputes the forward.
  GruCellGrads backward(const Tensor& input, const Tensor& h, const Tensor& dh_new,
                        int threads = 0) const;

  // Copies deep-copy the weights (as Gru's); moves keep them.
  GruCell(const GruCell& other);
  GruCell& operator=(const GruCell& other);
  GruCell(GruCell&&) noexcept;
  GruCell& operator=(GruCell&&) noexcept;
  ~GruCell();

  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  GruForm form() const { return form_; }
  // The weights, to read: the cell packed them when made (or set), so writing through these
  // handles changes nothing it computes; set_weights() replaces them.
  const GruLayerWeights& weights() const { return w_; }
  // New weights of the same shapes, dtype and bias presence (checked); packed here.
  void set_weights(GruLayerWeights weights);

 private:
  GruCell(int64_t input_size, int64_t hidden_size, GruForm form, GruLayerWeights w);
  int64_t input_size_, hidden_size_;
  GruForm form_;
  GruLayerWeights w_;
  std::shared_ptr<const GruCellPlan> plan_;  // packed from w_; never changed after
};

// Stateful streaming over a unidirectional GRU: feed one frame or a chunk at a time, keep
// the state between calls. The stream packs its own copy of the weights and configuration and
// sizes all its workspace when constructed: `gru` may move or go away afterwards (later
// changes to its weights are not seen).
//
// Real time: after construction, step_into() and process() allocate nothing, take no lock,
// start no thread and make no system call, whatever the number of frames (a call longer than
// the workspace runs in blocks of it); reset() without h0 likewise, and reset(h0) with an h0
// of the state's own shape, dtype and layout (contiguous (L, N, H)), which it copies in place.
// step() and state() allocate their results. A single-threaded stream never waits on another
// thread. With threads > 1 the stream starts its worker threads in the constructor; between frames
// they spin (x86 `pause`) on an atomic counter for the stream's whole life, never sleeping, and the
// caller spins until they finish each step: give them their own cores and the caller's real-time
// priority, or the caller waits whenever the OS preempts one. The destructor joins them (it locks a
// mutex and makes system calls: not on the audio thread). The constructor throws grux::Error if
// they cannot be started. In a child process forked after the stream was made, the workers do not
// exist: there the caller runs every frame alone (same bits).
//
// Kernels and results. One sequence (batch 1 or unbatched) in f32 on one thread runs the
// real-time kernel (hidden sizes up to 256): a fused step per group of units, its results
// equal to Gru::forward within f32 rounding (the engine's tolerance against PyTorch) and
// exactly reproducible: the same bits run to run, on any split of the frames into calls
// (frame by frame, blocks, one call), though not across CPUs with other SIMD widths. Every
// other stream runs the engine's layer kernels and is bit-identical to Gru::forward on the
// whole sequence.
// An output layer on a stream's top layer, as sequential models put one after the GRU (an amp
// or effect model's GRU -> Linear, often with the input added back): out = weight h + bias,
// plus the frame's input with residual. GruStream::set_head takes it; f32 streams only.
struct GruStreamHead {
  Tensor weight;          // (O, H) f32, nn.Linear's weight; undefined: no layer (out = h)
  Tensor bias;            // (O,) f32, or undefined: none
  bool residual = false;  // out += the frame's input (then O, or H without a layer, must be I)
};

class GruStream {
 public:
  // batch N >= 1, or 0 for unbatched frames. h0 as in Gru::forward (undefined: zeros).
  // threads: 0 or 1 runs every step on the calling thread only (the default); k > 1 starts a
  // team of up to k threads (the caller and k - 1 workers; fewer when the hidden size has
  // fewer 64-byte unit blocks, or the machine fewer cores) that share each step's units.
  // precision: as GruInference's; a bf16 or int8 stream runs the engine's layer kernels
  // with the products in that precision (same bits as GruInference of that precision over
  // the frames since reset(): a bf16 step's bits depend on the parity of its index since the
  // state was set, docs/precision.md).
  GruStream(const Gru& gru, int64_t batch, const Tensor& h0 = {},
            Precision precision = Precision::f32, int threads = 0);
  ~GruStream();
  GruStream(GruStream&&) noexcept;
  GruStream& operator=(GruStream&&) noexcept;

  // frames: one frame (N, I) — or (I) unbatched — or a chunk (t, N, I) — (N, t, I) with
  // batch_first, (t, I) unbatched. Returns the top layer's outputs (or the head's, see
  // set_head) in the same layout with H (output_size()) in place of I.
  Tensor step(const Tensor& frames);
  // As step(), writing into `out` (must have the returned shape and dtype).
  void step_into(const Tensor& frames, Tensor& out);
  // Raw frames, time-major and contiguous: in (frames, N, I), out (frames, N, output_size()),
  // T the weights' dtype (float or double); frames >= 0. Bit-identical to step() on the same
  // frames.
  template <typename T>
  void process(const T* in, T* out, int64_t frames);
  // Current state (L, N, H), or (L, H) unbatched; a copy.
  Tensor state() const;
  void reset(const Tensor& h0 = {});

  // Puts `head` after the top layer (checked; an f32 stream only). From then on step(),
  // step_into() and process() give output_size() features a frame in place of H, with the same
  // bits however the frames are split into calls. set_head packs the head and sizes its
  // workspace, so it allocates: call it before real-time use, after which those calls
  // allocate nothing, as without a head. On the real-time kernel's path (one f32 sequence on
  // the calling thread) the layer runs inside each step, on h' while it is in registers; on
  // the others, after each block of frames, on the calling thread: for one sequence dot
  // products of its rows, for a batch linear_forward's packed product.
  void set_head(const GruStreamHead& head);
  // Features of a frame's output: the head's O, else H.
  int64_t output_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace GRUX_API
