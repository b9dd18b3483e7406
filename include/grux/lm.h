// The character-level language model: vocabulary (UTF-8 characters), the model (embedding ->
// GRU or LSTM stack -> Linear -> softmax cross-entropy), text batching for truncated
// backpropagation through time, and training with checkpoints that resume exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/gru.h"
#include "grux/lstm.h"
#include "grux/optim.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Sizes: V vocabulary, E embedding width, H hidden size, L recurrent layers, T window (time
// steps), N batch (parallel streams of text).

// The characters of a text, sorted by code point; id = index. Decoding and encoding check
// UTF-8 strictly (overlong forms, surrogates, truncated sequences are errors naming the byte
// offset).
class Vocab {
 public:
  Vocab() = default;
  explicit Vocab(std::vector<char32_t> chars);  // sorted, unique; throws otherwise
  // Every distinct character of `text` (valid UTF-8, non-empty).
  static Vocab from_text(const std::string& text);
  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  const std::vector<char32_t>& chars() const { return chars_; }
  // Ids of `text`; a character not in the vocabulary is an error naming it (`what` names the
  // source in the message, e.g. "--prompt").
  std::vector<int64_t> encode(const std::string& text, const std::string& what) const;
  std::string decode(int64_t id) const;  // one character as UTF-8
  // The vocabulary as UTF-8 text (the characters in order) and back, for checkpoints.
  std::string to_utf8() const;
  static Vocab from_utf8(const std::string& text);

 private:
  std::vector<char32_t> chars_;
};

// Decodes UTF-8 into code points; throws grux::Error naming `what` and the byte offset of the
// first invalid sequence.
std::vector<char32_t> utf8_decode(const std::string& text, const std::string& what);
std::string utf8_encode(char32_t c);

struct CharLmConfig {
  int64_t vocab = 0;
  int64_t embed = 64;
  int64_t hidden = 512;
  int64_t layers = 1;
  double dropout = 0.0;  // between recurrent layers (training only)
  DType dtype = DType::f32;
  std::string cell = "gru";  // the recurrent layers: "gru" or "lstm"
  void validate() const;     // throws grux::Error naming the field
  bool lstm() const { return cell == "lstm"; }
  // Rows of the carried state: L for the GRU (h), 2L for the LSTM (h, then c).
  int64_t state_rows() const { return lstm() ? 2 * layers : layers; }
  std::string to_json() const;
  static CharLmConfig from_json(const std::string& json);  // throws on malformed/missing fields
};

// The model. Parameters (names as a PyTorch module with attributes embedding, gru or lstm, fc):
//   embedding.weight (V, E); gru.weight_ih_l{k} (3H, E or H), gru.weight_hh_l{k} (3H, H),
//   gru.bias_ih_l{k}, gru.bias_hh_l{k} (3H); for an LSTM lstm.weight_ih_l{k} (4H, E or H) and
//   so on with 4H rows; fc.weight (V, H), fc.bias (V).
// The state h carried between windows is (L, N, H) for the GRU; for the LSTM h and c stacked,
// (2L, N, H): rows [0, L) are h, rows [L, 2L) are c.
class CharLm {
 public:
  // Initialised like PyTorch's modules: embedding N(0, 1); GRU and fc uniform(-1/sqrt(H),
  // 1/sqrt(H)); from a seeded generator.
  CharLm(const CharLmConfig& config, uint64_t seed);
  // From named tensors (a checkpoint or a PyTorch state_dict with the names above); every
  // name and shape is checked against `config`.
  CharLm(const CharLmConfig& config, const std::map<std::string, Tensor>& state);

  const CharLmConfig& config() const { return config_; }
  std::vector<Parameter>& parameters() { return params_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  std::map<std::string, Tensor> state_dict() const;  // the parameter values, by name
  int64_t num_parameters() const;
  // The recurrent stack: gru() for a GRU model, lstm() for an LSTM one (the other throws
  // grux::Error naming the model's cell).
  const Gru& gru() const;
  const Lstm& lstm() const;

  // Mean cross-entropy (nats per character) of predicting targets (T, N) from ids (T, N),
  // starting from state h (L, N, H) and leaving the final state in h. With `train`, also
  // computes every parameter's gradient (into parameters()[i].grad) with dropout drawn from
  // `dropout_seed`; the gradient does not flow into the incoming h (truncated BPTT).
  // `precision`: the GRU's products when training (f32 or bf16; Gru::forward_train; an LSTM
  // trains in f32).
  // `share`: which streams of a larger batch these are (data parallelism; the dropout masks
  // are then that batch's, Gru::forward_train).
  double forward_backward(const Tensor& ids, const Tensor& targets, Tensor& h, bool train,
                          uint64_t dropout_seed = 0, Precision precision = Precision::f32,
                          BatchShare share = {});
  // Forward only, through `gru` or `lstm` (an inference plan of this model's stack, in any
  // precision): the mean cross-entropy as forward_backward(..., false) computes it, the final
  // state in h.
  double loss(const Tensor& ids, const Tensor& targets, Tensor& h, const GruInference& gru) const;
  double loss(const Tensor& ids, const Tensor& targets, Tensor& h, const LstmInference& lstm) const;

  // Logits (V) of the next character after feeding `id` to a stream (generation).
  class Stream;

 private:
  CharLmConfig config_;
  std::vector<Parameter> params_;
  // The stack, its weight tensors the parameters' values (shared storage): one of the two.
  std::unique_ptr<Gru> gru_;
  std::unique_ptr<Lstm> lstm_;
  void bind();  // builds gru_ or lstm_ from params_
};

// Step-by-step generation over B independent beams (or samples): feed one id per beam, get
// log-probabilities of the next character. Uses the stack's streaming API; `precision` is the
// stack's products' (bf16 and int8 take an f32 model; see grux/precision.h).
class CharLm::Stream {
 public:
  Stream(const CharLm& model, int64_t beams, Precision precision = Precision::f32);
  ~Stream();
  // ids (B) -> logits (B, V) as double.
  std::vector<double> step(const std::vector<int64_t>& ids);
  // Reorders beams: new beam b continues old beam from[b].
  void reorder(const std::vector<int64_t>& from);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A text as ids split into training and validation parts, cut into N parallel streams for
// truncated BPTT: stream n is the n-th contiguous 1/N of the part; window w of a batch holds
// positions [w*T, w*T + T) of each stream, targets one position later.
class TextBatches {
 public:
  TextBatches(std::vector<int64_t> ids, int64_t N, int64_t T);
  int64_t windows() const { return windows_; }  // per pass over the part
  // ids and targets (T, N) i64 of window w (0 <= w < windows()).
  void window(int64_t w, Tensor& ids, Tensor& targets) const;
  // The same for streams [first, first + count) only: (T, count).
  void window(int64_t w, Tensor& ids, Tensor& targets, int64_t first, int64_t count) const;
  int64_t tokens() const { return static_cast<int64_t>(ids_.size()); }
  int64_t batch() const { return N_; }

 private:
  std::vector<int64_t> ids_;
  int64_t N_, T_, stream_len_, windows_;
};

}  // namespace GRUX_API
