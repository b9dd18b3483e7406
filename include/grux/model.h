// Sequential real-time models, as people keep them: RTNeural's JSON (what AIDA-X ships and
// RTNeural's parseJson reads), the PyTorch state-dict JSON of GuitarML and
// Automated-GuitarAmpModelling, a bare state-dict JSON (RTNeural's torch_helpers), the Neural
// Amp Modeler's .nam (architecture "LSTM") and a safetensors nn.GRU / nn.LSTM state dict. One
// description (ModelSpec) for all of them, read by one call (read_model: the format is told
// from the content, not the file name), run by one engine (Model, ModelStream) on the GRU's and
// the LSTM's stream kernels. docs/formats.md gives each format's mapping.
//
// A model is an input of I features a frame, then layers in order, each taking the previous
// one's features: recurrent layers (GRU in either form, LSTM), dense layers (y = W x + b),
// activations, PReLU and inference batch norm; then, where the file says so, the first `skip`
// input features added to the output (GuitarML's skip connection).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/gru.h"
#include "grux/precision.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

enum class ModelFormat { safetensors, rtneural_json, guitarml_json, state_dict_json, nam, onnx };
// "safetensors", "rtneural-json", "guitarml-json", "state-dict-json", "nam", "onnx".
const char* model_format_name(ModelFormat format);

// One layer. Every tensor is f32 and contiguous; sizes: in_size features in, out_size out.
struct ModelLayer {
  enum class Kind { gru, lstm, dense, activation, prelu, batchnorm };
  // Elementwise activations (softmax: over a frame's features; elu with alpha 1).
  enum class Activation { tanh, relu, sigmoid, softmax, elu };
  Kind kind = Kind::dense;
  int64_t in_size = 0, out_size = 0;
  // gru, lstm: one layer in nn.GRU's / nn.LSTM's layout and gate order (r, z, n; i, f, g, o):
  //   w_ih (G H, in_size), w_hh (G H, H), b_ih and b_hh (G H) or undefined; H = out_size,
  //   G = 3 (GRU) or 4 (LSTM); `form`: the GRU's candidate form. h0 (and c0, an LSTM's) (H):
  //   the initial state the file stores; undefined: zeros.
  Tensor w_ih, w_hh, b_ih, b_hh, h0, c0;
  GruForm form = GruForm::linear_before_reset;
  // gru, lstm: what ONNX's GRU and LSTM nodes have beyond nn.GRU and nn.LSTM. A layer with any
  // of it runs on the whole sequence (Model::process, run_graph); a stream refuses it.
  //   directions 2: bidirectional. Every recurrent tensor above and below takes a leading
  //     axis of 2 (forward, reverse): w_ih (2, G H, in_size), ...; H = out_size / 2, and each
  //     frame's out_size features are the forward direction's H, then the reverse's.
  //   reverse (directions 1): runs from each sequence's last frame to its first.
  //   clip > 0: every gate's pre-activation clipped to [-clip, clip] (0: none).
  //   peephole (3 H), LSTM: p_i, p_f, p_o: i = sigmoid(... + p_i c), f likewise, o =
  //     sigmoid(... + p_o c') with c' the new cell state.
  //   input_forget, LSTM: f = 1 - i (the input and forget gates coupled).
  //   lengths (N) i64: each sequence's length, bound when the file was read (ONNX's
  //     sequence_lens given as an input); a run's batch must be N, frames past a sequence's
  //     end give zeros and leave its state as it was.
  //   h0 and c0 of (N, H) (after the direction axis): one initial state for each of a batch of
  //     N (an ONNX initial_h given as an input); a run's batch must be N.
  int64_t directions = 1;
  bool reverse = false;
  float clip = 0;
  Tensor peephole, lengths;
  bool input_forget = false;
  // dense: weight (out_size, in_size), bias (out_size) or undefined.
  // prelu: weight (out_size): y = x >= 0 ? x : weight x.
  // batchnorm (inference): y = (x - mean) * weight + bias, where weight = gamma / sqrt(var +
  //   eps) was computed when the file was read (as RTNeural does) and bias = beta (zero
  //   without an affine part); mean, weight, bias (out_size).
  Tensor weight, bias, mean;
  // activation: which.
  Activation activation = Activation::tanh;

  // "tanh", "relu", "sigmoid", "softmax", "elu".
  static const char* activation_name(Activation a);
  bool recurrent() const { return kind == Kind::gru || kind == Kind::lstm; }
  // A recurrent layer's H: out_size / directions.
  int64_t hidden_size() const { return out_size / directions; }
  // Empty when a stream can run the layer; otherwise why not ("bidirectional", "clip", ...).
  std::string whole_sequence_only() const;
  // "gru", "lstm", "dense", "activation", "prelu", "batchnorm".
  const char* kind_name() const;
  // Numbers it holds: weights, biases, stored initial states (a format's single recurrent
  // bias is held as b_ih with a b_hh of zeros, counted too).
  int64_t parameters() const;
};

// A graph's named inputs and outputs (ONNX): the frames come in through `input`, their axes
// in `input_axes` order, and each output is the model's frames, its last frame or the final
// states of recurrent layers. Axes: 'T' time, 'N' batch, 'F' features, 'L' stacked layers,
// '1' an axis of size 1, 'D' the two directions of a bidirectional layer's frames or states
// (e.g. "TNF", "NTF", "T1NF", "TDNF", "LNF", "DNF").
struct ModelGraphOutput {
  enum class What { frames, last_frame, hidden, cell };
  std::string name;
  What what = What::frames;
  std::string axes;
  // hidden, cell: the states stacked on the 'L', 'D' or '1' axis, each that of the spec's
  // recurrent layer layers[k] in its direction directions[k] (0 forward, 1 reverse).
  std::vector<int64_t> layers;
  std::vector<int> directions;
};
struct ModelGraph {
  std::string input;  // empty: the model has no graph (the other formats)
  std::string input_axes;
  std::vector<ModelGraphOutput> outputs;
};

struct ModelSpec {
  ModelFormat format = ModelFormat::safetensors;
  int64_t input_size = 0;  // features a frame going in
  std::vector<ModelLayer> layers;
  // The first `skip` input features are added to the output's features (0: none; otherwise
  // skip == output_size() <= input_size: GuitarML's skip, an input of audio and knobs whose
  // audio is added back).
  int64_t skip = 0;
  double sample_rate = 0;  // Hz the model was trained at; 0 where the file does not say
  std::string name;        // the file's own name for the model, where it has one
  ModelGraph graph;        // ONNX: the graph's inputs and outputs

  // Features a frame going out: the last layer's, or input_size without layers.
  int64_t output_size() const;
  // Empty when a ModelStream can run the model; otherwise the first layer that needs the whole
  // sequence and why ("layer 0 (gru) is bidirectional").
  std::string whole_sequence_only() const;
  // The batch the model's bound run inputs fix (lengths, per-sequence initial states); 0: any.
  int64_t bound_batch() const;
  int64_t parameters() const;
  // Throws grux::Error naming the layer (its position and kind) and what was wrong: sizes
  // that do not chain, tensors of the wrong shape or dtype, a bad skip.
  void validate() const;
};

// Reads a model file of any format above, told from its content: a safetensors header, or
// JSON with RTNeural's "layers", GuitarML's "model_data" and "state_dict", NAM's "architecture"
// and "weights", or only state-dict keys ("gru.weight_ih_l0", ...). Throws grux::Error with one
// line naming the file and what was wrong (malformed JSON, a missing or misshapen weight, sizes
// that do not chain, a layer grux cannot run, named by its position and type, with what is
// supported). Files over 256 MiB are refused before they are read.
ModelSpec read_model(const std::string& path);
// The same from bytes in memory; `what` names the source in messages.
ModelSpec parse_model(const std::string& bytes, const std::string& what);
// An ONNX file whose weights are graph inputs (as ONNX's node tests give W, R and B): their
// values by input name. Other formats ignore `given`.
ModelSpec read_model(const std::string& path, const std::map<std::string, Tensor>& given);

// Writes a model as safetensors, atomically: every layer's tensors under "layers.{k}." and the
// topology as JSON in the metadata's "grux.model"; read_model reads it back exactly.
void write_model(const std::string& path, const ModelSpec& spec);
std::string serialize_model(const ModelSpec& spec);

// The model as an ONNX graph of opset 14 (`grux model export-onnx`), written atomically: the
// frames "x" (time, batch, features) in, "y" (time, batch, features) out, one GRU or LSTM node
// per recurrent layer (docs/format_onnx.md gives the nodes of each layer); read_model reads it
// back to the same layers. Refuses lengths bound when a model was read (a run's input).
void write_onnx(const std::string& path, const ModelSpec& spec);
std::string serialize_onnx(const ModelSpec& spec);

// The model as C source (`grux model export-c`): its weights as static const float arrays and a
// grux_model_desc named `name` (a C identifier) for grux_model_from_desc (grux/grux.h), which
// builds the same model without a file. `source` names the file in the header's comment.
std::string model_as_c(const ModelSpec& spec, const std::string& name, const std::string& source);

class ModelStream;

// A model ready to run: the spec, checked, and its weights arranged for the stream kernels.
// Immutable; may be shared by threads and streams. A Model keeps what its streams need, and
// a stream keeps its own copy: either may go away first.
class Model {
 public:
  explicit Model(ModelSpec spec);  // validates it
  ~Model();
  Model(const Model&);
  Model& operator=(const Model&);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelSpec& spec() const;
  int64_t input_size() const;
  int64_t output_size() const;

  // A whole signal from the initial state: x (T, I) for one sequence or (T, N, I) for N, f32;
  // returns (T, O) or (T, N, O). The same bits as a ModelStream of that batch over the same
  // frames (however they are split into calls), for a model a stream can run; a model with
  // layers that need the whole sequence (ModelLayer::whole_sequence_only) runs layer by layer
  // over all of it.
  Tensor process(const Tensor& x, int threads = 0) const;

  struct Impl;  // opaque: the stages the model runs (src/ops/model.cpp)

 private:
  friend class ModelStream;
  friend std::vector<std::pair<std::string, Tensor>> run_graph(const Model& model, const Tensor& x,
                                                               int threads);
  std::shared_ptr<const Impl> impl_;
};

// grux::load_model(path) = Model(read_model(path)).
Model load_model(const std::string& path);

// Runs a model read from a graph (spec().graph.input not empty) on its frames input x, laid out
// as spec().graph.input_axes says (f32 or f64, computed in f32), from the initial state:
// returns each graph output by name, in the graph's order, in the axes it declares.
std::vector<std::pair<std::string, Tensor>> run_graph(const Model& model, const Tensor& x,
                                                      int threads = 0);

// Sample-rate correction (RTNeural's): a model trained at rate R run at rate S = r R (r >= 1)
// feeds each recurrent layer back its state from r frames before instead of the last one, so
// that its recurrence spans the time it was trained to; each layer's output is that delayed
// state. no_interp: r must be whole; the state r - 1 frames back. lin_interp: any r >= 1, the
// two states around the delay mixed linearly (as RTNeural's LinInterp). For a whole r the two
// give the same numbers.
enum class SampleRateCorrection { none, no_interp, lin_interp };
// "lin_interp", "no_interp" or "none"; anything else is an error naming it.
SampleRateCorrection parse_sample_rate_correction(const std::string& name);

struct ModelStreamOptions {
  Precision precision = Precision::f32;  // the recurrent layers' products (dense stays f32)
  int threads = 0;                       // as GruStream's (0 or 1: the calling thread only)
  // The rate the stream runs at (Hz); 0: the model's own (no correction). A rate other than
  // the model's corrects it with `correction` (f32 only); the model's rate is its file's, or
  // `trained_rate` where the file has none (0: 48000).
  double sample_rate = 0;
  double trained_rate = 0;
  SampleRateCorrection correction = SampleRateCorrection::lin_interp;
  // Frames of zeros run through the model when the stream is made, whose final state becomes
  // the one reset() returns to (NAM's plugins run half a second of zeros; 0: none, as the
  // formats' engines do without their plugins).
  int64_t warmup_frames = 0;
};

// A model's state for `batch` sequences, fed frame by frame or in blocks. The guarantees of
// GruStream (grux/gru.h): after construction process() and reset() allocate nothing, take no
// lock, start no thread and make no system call (with sample-rate correction: for recurrent
// layers of up to 256 units); the bits of every output do not depend on how the frames are
// split into calls. One sequence in f32 on the calling thread runs the real-time kernels, a
// dense layer right after the top recurrent layer inside its step.
class ModelStream {
 public:
  // batch >= 1. precision: that of the recurrent layers' products (docs/precision.md; dense
  // layers stay f32). threads: as GruStream's (0 or 1: the calling thread only).
  ModelStream(const Model& model, int64_t batch, Precision precision = Precision::f32,
              int threads = 0);
  ModelStream(const Model& model, int64_t batch, const ModelStreamOptions& options);
  ~ModelStream();
  ModelStream(ModelStream&&) noexcept;
  ModelStream& operator=(ModelStream&&) noexcept;

  // in: frames x batch x input_size floats, time-major; out: frames x batch x output_size.
  // in and out must not overlap. frames >= 0.
  void process(const float* in, float* out, int64_t frames);
  // frames (t, N, I), or (t, I) for a stream of batch 1; returns (t, N, O) / (t, O).
  Tensor step(const Tensor& frames);
  // Back to the initial state (the file's, or zeros; after warmup_frames, the state they left).
  void reset();

  int64_t batch() const;
  int64_t input_size() const;
  int64_t output_size() const;
  // The delay r of the sample-rate correction (1: none).
  double rate_ratio() const;
  // The state of the spec's recurrent layer `layer` now: h (batch, H) or an LSTM's c (batch,
  // H); a copy. Not under sample-rate correction.
  Tensor hidden_state(int64_t layer) const;
  Tensor cell_state(int64_t layer) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace GRUX_API
