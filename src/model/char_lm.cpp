// The character-level language model: UTF-8 vocabulary, the model's forward and backward
// (embedding -> GRU or LSTM -> Linear -> cross-entropy), generation streams, and TBPTT batching.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "grux/lm.h"
#include "grux/nn.h"

namespace grux {

// ---- UTF-8 ---------------------------------------------------------------------------

std::vector<char32_t> utf8_decode(const std::string& text, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto bad = [&](size_t at) {
    return Error(
        fmt::format("{} is not valid UTF-8: invalid byte sequence at byte offset {}", what, at));
  };
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    int len;
    char32_t c, min;
    if ((b & 0xE0) == 0xC0) {
      len = 2, c = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, c = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, c = b & 0x07, min = 0x10000;
    } else {
      throw bad(i);
    }
    if (i + len > n) throw bad(i);
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) throw bad(i);
      c = (c << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (c < min || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) throw bad(i);
    out.push_back(c);
    i += len;
  }
  return out;
}

std::string utf8_encode(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// ---- Vocabulary ----------------------------------------------------------------------

Vocab::Vocab(std::vector<char32_t> chars) : chars_(std::move(chars)) {
  if (chars_.empty()) throw Error("vocabulary is empty (expected at least one character)");
  for (size_t i = 1; i < chars_.size(); ++i)
    if (!(chars_[i - 1] < chars_[i]))
      throw Error("vocabulary is not sorted and unique (expected distinct characters in order)");
}

Vocab Vocab::from_text(const std::string& text) {
  if (text.empty()) throw Error("text is empty (expected at least one character)");
  const std::vector<char32_t> cps = utf8_decode(text, "text");
  std::set<char32_t> seen(cps.begin(), cps.end());
  return Vocab(std::vector<char32_t>(seen.begin(), seen.end()));
}

std::vector<int64_t> Vocab::encode(const std::string& text, const std::string& what) const {
  std::vector<int64_t> ids;
  const std::vector<char32_t> cps = utf8_decode(text, what);
  ids.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    auto it = std::lower_bound(chars_.begin(), chars_.end(), cps[i]);
    if (it == chars_.end() || *it != cps[i])
      throw Error(
          fmt::format("{}: character U+{:04X} at position {} is not in the model's "
                      "vocabulary of {} characters",
                      what, static_cast<uint32_t>(cps[i]), i, chars_.size()));
    ids.push_back(it - chars_.begin());
  }
  return ids;
}

std::string Vocab::decode(int64_t id) const {
  GRUX_ASSERT(id >= 0 && id < size());
  return utf8_encode(chars_[id]);
}

std::string Vocab::to_utf8() const {
  std::string s;
  for (char32_t c : chars_) s += utf8_encode(c);
  return s;
}

Vocab Vocab::from_utf8(const std::string& text) {
  return Vocab(utf8_decode(text, "vocabulary"));
}

// ---- Configuration -------------------------------------------------------------------

void CharLmConfig::validate() const {
  auto positive = [](const char* name, int64_t v, int64_t max) {
    if (v < 1 || v > max) throw Error(fmt::format("model {} is {}, expected 1..{}", name, v, max));
  };
  positive("vocab", vocab, 1 << 21);
  positive("embed", embed, 1 << 16);
  positive("hidden", hidden, 1 << 16);
  positive("layers", layers, 64);
  if (!(dropout >= 0 && dropout < 1))
    throw Error(fmt::format("model dropout is {}, expected 0 <= dropout < 1", dropout));
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(fmt::format("model dtype is {}, expected f32 or f64", dtype_name(dtype)));
  if (cell != "gru" && cell != "lstm")
    throw Error(fmt::format("model cell is '{}', expected gru or lstm", cell));
}

std::string CharLmConfig::to_json() const {
  nlohmann::json j{{"vocab", vocab},   {"embed", embed},     {"hidden", hidden},
                   {"layers", layers}, {"dropout", dropout}, {"dtype", dtype_name(dtype)},
                   {"cell", cell}};
  return j.dump();
}

CharLmConfig CharLmConfig::from_json(const std::string& text) {
  CharLmConfig c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    c.vocab = j.at("vocab").get<int64_t>();
    c.embed = j.at("embed").get<int64_t>();
    c.hidden = j.at("hidden").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.dropout = j.at("dropout").get<double>();
    c.cell = j.value("cell", std::string("gru"));  // absent: a GRU model
    const std::string dt = j.at("dtype").get<std::string>();
    if (dt == "f32")
      c.dtype = DType::f32;
    else if (dt == "f64")
      c.dtype = DType::f64;
    else
      throw Error(fmt::format("model config: dtype '{}' (expected f32 or f64)", dt));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("model config is malformed: {}", e.what()));
  }
  c.validate();
  return c;
}

// ---- The model -----------------------------------------------------------------------

namespace {

template <typename Config>  // GruConfig or LstmConfig
Config stack_config(const CharLmConfig& c) {
  Config g;
  g.input_size = c.embed;
  g.hidden_size = c.hidden;
  g.num_layers = c.layers;
  g.dropout = c.dropout;
  return g;
}

// Parameter names and shapes in order: embedding, the recurrent layers, fc.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const CharLmConfig& c) {
  std::vector<std::pair<std::string, Shape>> s;
  const int64_t H = c.hidden, G = c.lstm() ? 4 : 3;
  const std::string prefix = c.cell + ".";
  s.push_back({"embedding.weight", {c.vocab, c.embed}});
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t in = l == 0 ? c.embed : H;
    s.push_back({prefix + gru_key("weight_ih", l, 0), {G * H, in}});
    s.push_back({prefix + gru_key("weight_hh", l, 0), {G * H, H}});
    s.push_back({prefix + gru_key("bias_ih", l, 0), {G * H}});
    s.push_back({prefix + gru_key("bias_hh", l, 0), {G * H}});
  }
  s.push_back({"fc.weight", {c.vocab, H}});
  s.push_back({"fc.bias", {c.vocab}});
  return s;
}

}  // namespace

CharLm::CharLm(const CharLmConfig& config, uint64_t seed) : config_(config) {
  config_.validate();
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden));
  for (const auto& [name, shape] : parameter_shapes(config_)) {
    Tensor t = Tensor::empty(shape, DType::f64);
    double* p = t.data<double>();
    if (name == "embedding.weight") {
      std::normal_distribution<double> nd(0.0, 1.0);
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
    } else {
      std::uniform_real_distribution<double> ud(-bound, bound);
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = ud(rng);
    }
    params_.push_back({name, t.to(config_.dtype), Tensor()});
  }
  bind();
}

CharLm::CharLm(const CharLmConfig& config, const std::map<std::string, Tensor>& state)
    : config_(config) {
  config_.validate();
  const auto shapes = parameter_shapes(config_);
  for (const auto& [name, shape] : shapes) {
    auto it = state.find(name);
    if (it == state.end()) throw Error(fmt::format("model: missing parameter '{}'", name));
    const Tensor& t = it->second;
    if (t.shape() != shape)
      throw Error(fmt::format("model: parameter '{}' has shape {}, expected {}", name,
                              shape_str(t.shape()), shape_str(shape)));
    if (t.dtype() != config_.dtype)
      throw Error(fmt::format("model: parameter '{}' has dtype {}, expected {}", name,
                              dtype_name(t.dtype()), dtype_name(config_.dtype)));
    if (t.device() != Device::cpu())
      throw Error(
          fmt::format("model: parameter '{}' is on {}, expected cpu", name, t.device().str()));
    params_.push_back({name, t.clone(), Tensor()});
  }
  if (state.size() != shapes.size())
    for (const auto& entry : state)  // (a lambda may not capture a structured binding in clang 14)
      if (std::none_of(shapes.begin(), shapes.end(),
                       [&](auto& s) { return s.first == entry.first; }))
        throw Error(fmt::format("model: unexpected parameter '{}'", entry.first));
  bind();
}

void CharLm::bind() {
  // The stack holds the same tensors (shared storage): optimizer updates are seen by it.
  auto layer = [&](int64_t l, auto& w) {
    const size_t k = 1 + 4 * l;
    w.w_ih = params_[k].value, w.w_hh = params_[k + 1].value;
    w.b_ih = params_[k + 2].value, w.b_hh = params_[k + 3].value;
  };
  if (config_.lstm()) {
    std::vector<LstmLayerWeights> w(config_.layers);
    for (int64_t l = 0; l < config_.layers; ++l) layer(l, w[l]);
    lstm_ = std::make_unique<Lstm>(stack_config<LstmConfig>(config_), std::move(w));
  } else {
    std::vector<GruLayerWeights> w(config_.layers);
    for (int64_t l = 0; l < config_.layers; ++l) layer(l, w[l]);
    gru_ = std::make_unique<Gru>(stack_config<GruConfig>(config_), std::move(w));
  }
}

const Gru& CharLm::gru() const {
  if (!gru_)
    throw Error(fmt::format("the model is an {}, not a GRU (bf16 and int8 run GRU models only)",
                            config_.cell == "lstm" ? "LSTM" : config_.cell));
  return *gru_;
}

const Lstm& CharLm::lstm() const {
  if (!lstm_) throw Error("the model is a GRU, not an LSTM");
  return *lstm_;
}

std::map<std::string, Tensor> CharLm::state_dict() const {
  std::map<std::string, Tensor> s;
  for (const Parameter& p : params_) s[p.name] = p.value;
  return s;
}

int64_t CharLm::num_parameters() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

namespace {

void check_window(const CharLmConfig& c, const Tensor& ids, const Tensor& targets,
                  const Tensor& h) {
  const char* op = "char_lm";
  check_defined(op, "ids", ids);
  check_defined(op, "targets", targets);
  check_dtype(op, "ids", ids, DType::i64);
  check_dtype(op, "targets", targets, DType::i64);
  if (ids.dim() != 2)
    throw Error(fmt::format("char_lm: ids have shape {}, expected (T, N)", shape_str(ids.shape())));
  check_shape(op, "targets", targets, ids.shape());
  if (h.defined()) check_shape(op, "h", h, {c.state_rows(), ids.size(1), c.hidden});
}

}  // namespace

double CharLm::loss(const Tensor& ids, const Tensor& targets, Tensor& h,
                    const GruInference& gru) const {
  check_window(config_, ids, targets, h);
  const int64_t T = ids.size(0), N = ids.size(1), H = config_.hidden;
  Tensor x = embedding_forward(ids, params_.front().value);
  GruOutput y = gru.forward(x, h);
  h = y.h_n;
  Tensor logits = linear_forward(y.output.reshape({T * N, H}), params_[params_.size() - 2].value,
                                 params_.back().value);
  return cross_entropy(logits, targets.reshape({T * N}), false).loss;
}

double CharLm::loss(const Tensor& ids, const Tensor& targets, Tensor& h,
                    const LstmInference& lstm) const {
  check_window(config_, ids, targets, h);
  const int64_t T = ids.size(0), N = ids.size(1), H = config_.hidden, L = config_.layers;
  Tensor x = embedding_forward(ids, params_.front().value);
  // The carried state: h (L rows) then c (L rows), as forward_backward carries it.
  const Tensor h0 = h.defined() ? h.slice(0, 0, L) : Tensor(),
               c0 = h.defined() ? h.slice(0, L, 2 * L) : Tensor();
  LstmOutput y = lstm.forward(x, h0, c0);
  h = Tensor::empty({2 * L, N, H}, y.h_n.dtype());
  h.slice(0, 0, L).copy_from(y.h_n);
  h.slice(0, L, 2 * L).copy_from(y.c_n);
  Tensor logits = linear_forward(y.output.reshape({T * N, H}), params_[params_.size() - 2].value,
                                 params_.back().value);
  return cross_entropy(logits, targets.reshape({T * N}), false).loss;
}

double CharLm::forward_backward(const Tensor& ids, const Tensor& targets, Tensor& h, bool train,
                                uint64_t dropout_seed, Precision precision, BatchShare share) {
  check_window(config_, ids, targets, h);
  const int64_t T = ids.size(0), N = ids.size(1), H = config_.hidden, V = config_.vocab;

  const Tensor& emb_w = params_.front().value;
  const Tensor& fc_w = params_[params_.size() - 2].value;
  const Tensor& fc_b = params_.back().value;

  // 1. Embedding lookup: (T, N) -> (T, N, E).
  Tensor x = embedding_forward(ids, emb_w);
  // 2. The stack over the window from the carried state.
  GruTape gru_tape;
  LstmTape lstm_tape;
  Tensor out;
  const int64_t L = config_.layers;
  if (lstm_) {
    const Tensor h0 = h.defined() ? h.slice(0, 0, L) : Tensor(),
                 c0 = h.defined() ? h.slice(0, L, 2 * L) : Tensor();
    LstmOutput y =
        train ? lstm_->forward_train(x, h0, c0, {}, lstm_tape, dropout_seed, precision, share)
              : lstm_->forward(x, h0, c0);
    h = Tensor::empty({2 * L, N, H}, y.h_n.dtype());
    h.slice(0, 0, L).copy_from(y.h_n);
    h.slice(0, L, 2 * L).copy_from(y.c_n);
    out = y.output;
  } else {
    GruOutput y = train ? gru_->forward_train(x, h, {}, gru_tape, dropout_seed, precision, share)
                        : gru_->forward(x, h);
    h = y.h_n;
    out = y.output;
  }
  // 3. Logits and loss over all T * N positions.
  Tensor y2 = out.reshape({T * N, H});
  Tensor logits = linear_forward(y2, fc_w, fc_b);
  CrossEntropy ce = cross_entropy(logits, targets.reshape({T * N}), train);
  if (!train) return ce.loss;

  // Backward in mirror order: fc, the stack (no gradient into the carried state), embedding.
  LinearGrads fc = linear_backward(y2, fc_w, ce.dlogits, true);
  const Tensor dy = fc.dinput.reshape({T, N, H});
  auto take = [&](const Tensor& dinput, const auto& dweights) {
    params_.front().grad = embedding_backward(ids, dinput, V);
    for (int64_t l = 0; l < L; ++l) {
      const size_t k = 1 + 4 * l;
      params_[k].grad = dweights[l].w_ih;
      params_[k + 1].grad = dweights[l].w_hh;
      params_[k + 2].grad = dweights[l].b_ih;
      params_[k + 3].grad = dweights[l].b_hh;
    }
  };
  if (lstm_) {
    LstmGrads g = lstm_->backward(lstm_tape, dy, {}, {});
    take(g.dinput, g.dweights);
  } else {
    GruGrads g = gru_->backward(gru_tape, dy, {});
    take(g.dinput, g.dweights);
  }
  params_[params_.size() - 2].grad = fc.dweight;
  params_.back().grad = fc.dbias;
  return ce.loss;
}

// ---- Generation stream ---------------------------------------------------------------

struct CharLm::Stream::Impl {
  const CharLm& model;
  int64_t B;
  std::optional<GruStream> gru;  // one of the two, as the model's cell
  std::optional<LstmStream> lstm;
  Impl(const CharLm& m, int64_t beams, Precision precision) : model(m), B(beams) {
    if (m.config().lstm()) {
      lstm.emplace(m.lstm(), beams, Tensor(), Tensor(), precision);
    } else {
      gru.emplace(m.gru(), beams, Tensor(), precision);
    }
  }
};

CharLm::Stream::Stream(const CharLm& model, int64_t beams, Precision precision) {
  if (beams < 1) throw Error(fmt::format("beams is {}, expected >= 1", beams));
  impl_ = std::make_unique<Impl>(model, beams, precision);
}

CharLm::Stream::~Stream() = default;

std::vector<double> CharLm::Stream::step(const std::vector<int64_t>& ids) {
  const CharLm& m = impl_->model;
  const int64_t B = impl_->B, V = m.config_.vocab;
  GRUX_ASSERT(static_cast<int64_t>(ids.size()) == B);
  Tensor id = Tensor::from_vector<int64_t>({B}, ids);
  Tensor x = embedding_forward(id, m.params_.front().value);            // (B, E)
  Tensor y = impl_->lstm ? impl_->lstm->step(x) : impl_->gru->step(x);  // (B, H)
  Tensor logits = linear_forward(y, m.params_[m.params_.size() - 2].value, m.params_.back().value)
                      .to(DType::f64);
  const double* p = logits.data<double>();
  return std::vector<double>(p, p + B * V);
}

void CharLm::Stream::reorder(const std::vector<int64_t>& from) {
  const int64_t B = impl_->B;
  GRUX_ASSERT(static_cast<int64_t>(from.size()) == B);
  // Each state (L, B, H) with its beams taken from `from`.
  auto reordered = [&](const Tensor& s) {
    Tensor r = Tensor::empty(s.shape(), s.dtype());
    for (int64_t b = 0; b < B; ++b) r.select(1, b).copy_from(s.select(1, from[b]));
    return r;
  };
  if (impl_->lstm)
    impl_->lstm->reset(reordered(impl_->lstm->state()), reordered(impl_->lstm->cell_state()));
  else
    impl_->gru->reset(reordered(impl_->gru->state()));
}

// ---- Batches for truncated BPTT ------------------------------------------------------

TextBatches::TextBatches(std::vector<int64_t> ids, int64_t N, int64_t T)
    : ids_(std::move(ids)), N_(N), T_(T) {
  if (N < 1 || T < 1) throw Error(fmt::format("batch {} and window {}: expected >= 1", N, T));
  stream_len_ = static_cast<int64_t>(ids_.size()) / N;
  // Each window needs T inputs plus the next character as the last target.
  windows_ = stream_len_ > 0 ? (stream_len_ - 1) / T : 0;
  if (windows_ < 1)
    throw Error(fmt::format(
        "text of {} characters is too short for batch {} x window {} (needs at least {} "
        "characters)",
        ids_.size(), N, T, N * (T + 1)));
}

void TextBatches::window(int64_t w, Tensor& ids, Tensor& targets) const {
  window(w, ids, targets, 0, N_);
}

void TextBatches::window(int64_t w, Tensor& ids, Tensor& targets, int64_t first,
                         int64_t count) const {
  GRUX_ASSERT(w >= 0 && w < windows_);
  GRUX_ASSERT(first >= 0 && count >= 0 && first + count <= N_);
  if (!ids.defined() || ids.shape() != Shape{T_, count})
    ids = Tensor::empty({T_, count}, DType::i64);
  if (!targets.defined() || targets.shape() != Shape{T_, count})
    targets = Tensor::empty({T_, count}, DType::i64);
  int64_t* x = ids.data<int64_t>();
  int64_t* y = targets.data<int64_t>();
  for (int64_t n = 0; n < count; ++n) {
    const int64_t base = (first + n) * stream_len_ + w * T_;
    for (int64_t t = 0; t < T_; ++t) {
      x[t * count + n] = ids_[base + t];
      y[t * count + n] = ids_[base + t + 1];
    }
  }
}

}  // namespace grux
