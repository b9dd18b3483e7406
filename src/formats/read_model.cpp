// read_model: the format told from the content, the JSON helpers every reader shares, and the
// ModelSpec checks (grux/model.h).
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux {

// Declared in grux/gru.h; defined here, with the other names the formats write, so that the
// readers build without the engine (tests/fuzz).
const char* gru_form_name(GruForm f) {
  return f == GruForm::linear_before_reset ? "linear_before_reset" : "reset_before";
}

const char* model_format_name(ModelFormat format) {
  switch (format) {
    case ModelFormat::safetensors:
      return "safetensors";
    case ModelFormat::rtneural_json:
      return "rtneural-json";
    case ModelFormat::guitarml_json:
      return "guitarml-json";
    case ModelFormat::state_dict_json:
      return "state-dict-json";
    case ModelFormat::nam:
      return "nam";
    case ModelFormat::onnx:
      return "onnx";
  }
  return "?";
}

const char* ModelLayer::activation_name(Activation a) {
  switch (a) {
    case ModelLayer::Activation::tanh:
      return "tanh";
    case ModelLayer::Activation::relu:
      return "relu";
    case ModelLayer::Activation::sigmoid:
      return "sigmoid";
    case ModelLayer::Activation::softmax:
      return "softmax";
    case ModelLayer::Activation::elu:
      return "elu";
  }
  return "?";
}

const char* ModelLayer::kind_name() const {
  switch (kind) {
    case Kind::gru:
      return "gru";
    case Kind::lstm:
      return "lstm";
    case Kind::dense:
      return "dense";
    case Kind::activation:
      return "activation";
    case Kind::prelu:
      return "prelu";
    case Kind::batchnorm:
      return "batchnorm";
  }
  return "?";
}

int64_t ModelLayer::parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : formats::layer_tensors())
    if ((this->*t).defined()) n += (this->*t).numel();
  return n;
}

std::string ModelLayer::whole_sequence_only() const {
  if (!recurrent()) return "";
  const int64_t state_dims = directions == 2 ? 2 : 1;
  if (directions == 2) return "is bidirectional";
  if (reverse) return "runs in reverse";
  if (clip > 0) return "clips its gates";
  if (peephole.defined()) return "has peepholes";
  if (input_forget) return "couples its input and forget gates";
  if (lengths.defined()) return "has sequence lengths";
  if ((h0.defined() && h0.dim() > state_dims) || (c0.defined() && c0.dim() > state_dims))
    return "has initial states for a batch";
  return "";
}

std::string ModelSpec::whole_sequence_only() const {
  for (size_t k = 0; k < layers.size(); ++k) {
    const std::string why = layers[k].whole_sequence_only();
    if (!why.empty()) return fmt::format("layer {} ({}) {}", k, layers[k].kind_name(), why);
  }
  return "";
}

int64_t ModelSpec::bound_batch() const {
  for (const ModelLayer& l : layers) {
    if (!l.recurrent()) continue;
    const int64_t state_dims = l.directions == 2 ? 2 : 1;
    if (l.lengths.defined()) return l.lengths.size(0);
    for (const Tensor* t : {&l.h0, &l.c0})
      if (t->defined() && t->dim() > state_dims) return t->size(t->dim() - 2);
  }
  return 0;
}

int64_t ModelSpec::output_size() const {
  return layers.empty() ? input_size : layers.back().out_size;
}

int64_t ModelSpec::parameters() const {
  int64_t n = 0;
  for (const ModelLayer& l : layers) n += l.parameters();
  return n;
}

namespace {

// Every tensor of a layer: f32, contiguous, of the shape its kind requires (undefined where
// optional).
void check_tensor(const std::string& where, const char* name, const Tensor& t, const Shape& shape,
                  bool required) {
  if (!t.defined()) {
    if (required)
      throw Error(fmt::format("{}: {} is missing, expected {}", where, name, shape_str(shape)));
    return;
  }
  if (t.dtype() != DType::f32)
    throw Error(fmt::format("{}: {} is {}, expected f32", where, name, dtype_name(t.dtype())));
  if (t.shape() != shape)
    throw Error(fmt::format("{}: {} has shape {}, expected {}", where, name, shape_str(t.shape()),
                            shape_str(shape)));
  if (!t.is_contiguous()) throw Error(fmt::format("{}: {} is not contiguous", where, name));
}

}  // namespace

void ModelSpec::validate() const {
  if (input_size < 1)
    throw Error(fmt::format("model: input_size is {}, expected at least 1", input_size));
  int64_t in = input_size;
  for (size_t k = 0; k < layers.size(); ++k) {
    const ModelLayer& l = layers[k];
    const std::string where = fmt::format("model: layer {} ({})", k, l.kind_name());
    if (l.in_size != in)
      throw Error(fmt::format("{}: takes {} features, but the {} gives {}", where, l.in_size,
                              k == 0 ? std::string("input") : fmt::format("layer {}", k - 1), in));
    if (l.out_size < 1)
      throw Error(fmt::format("{}: out_size is {}, expected at least 1", where, l.out_size));
    const int64_t O = l.out_size, I = l.in_size;
    switch (l.kind) {
      case ModelLayer::Kind::gru:
      case ModelLayer::Kind::lstm: {
        const bool lstm = l.kind == ModelLayer::Kind::lstm;
        const int64_t D = l.directions;
        if (D != 1 && D != 2)
          throw Error(fmt::format("{}: directions is {}, expected 1 or 2", where, D));
        if (D == 2 && l.reverse)
          throw Error(
              fmt::format("{}: reverse with two directions, expected one of the two", where));
        if (O % D != 0)
          throw Error(fmt::format("{}: out_size {} is not two directions' features", where, O));
        const int64_t H = O / D, G = (lstm ? 4 : 3) * H;
        // Shapes with the direction axis of a bidirectional layer in front.
        const auto dir = [&](Shape s) {
          if (D == 2) s.insert(s.begin(), 2);
          return s;
        };
        check_tensor(where, "w_ih", l.w_ih, dir({G, I}), true);
        check_tensor(where, "w_hh", l.w_hh, dir({G, H}), true);
        check_tensor(where, "b_ih", l.b_ih, dir({G}), false);
        check_tensor(where, "b_hh", l.b_hh, dir({G}), false);
        if (l.b_ih.defined() != l.b_hh.defined())
          throw Error(fmt::format("{}: has {} but not {}; expected both biases or neither", where,
                                  l.b_ih.defined() ? "b_ih" : "b_hh",
                                  l.b_ih.defined() ? "b_hh" : "b_ih"));
        // An initial state for every sequence, or one each for a batch (the same batch for h0,
        // c0 and lengths).
        int64_t batch = 0;
        const auto state = [&](const char* name, const Tensor& t) {
          if (t.defined() && t.dim() == int64_t(D == 2) + 2) {
            check_tensor(where, name, t, dir({t.size(t.dim() - 2), H}), true);
            if (batch != 0 && t.size(t.dim() - 2) != batch)
              throw Error(
                  fmt::format("{}: {} is for a batch of {}, another state or the lengths "
                              "for {}",
                              where, name, t.size(t.dim() - 2), batch));
            batch = t.size(t.dim() - 2);
          } else {
            check_tensor(where, name, t, dir({H}), false);
          }
        };
        state("h0", l.h0);
        if (!lstm && l.c0.defined())
          throw Error(fmt::format("{}: a GRU has no cell state c0", where));
        state("c0", l.c0);
        if (!(l.clip >= 0) || !std::isfinite(l.clip))
          throw Error(fmt::format("{}: clip is {}, expected a bound > 0 (0: none)", where, l.clip));
        if (!lstm && (l.peephole.defined() || l.input_forget))
          throw Error(fmt::format("{}: a GRU has no peepholes or input_forget", where));
        check_tensor(where, "peephole", l.peephole, dir({3 * H}), false);
        if (l.lengths.defined()) {
          if (l.lengths.dtype() != DType::i64 || l.lengths.dim() != 1 || !l.lengths.is_contiguous())
            throw Error(fmt::format("{}: lengths is {} {}, expected (N) i64", where,
                                    dtype_name(l.lengths.dtype()), shape_str(l.lengths.shape())));
          if (batch != 0 && l.lengths.size(0) != batch)
            throw Error(fmt::format("{}: lengths are for a batch of {}, the initial states for {}",
                                    where, l.lengths.size(0), batch));
          for (int64_t n = 0; n < l.lengths.size(0); ++n)
            if (l.lengths.data<int64_t>()[n] < 0)
              throw Error(fmt::format("{}: lengths[{}] is {}, expected >= 0", where, n,
                                      l.lengths.data<int64_t>()[n]));
        }
        break;
      }
      case ModelLayer::Kind::dense:
        if (l.directions != 1 || l.reverse || l.clip != 0 || l.peephole.defined() ||
            l.lengths.defined() || l.input_forget)
          throw Error(fmt::format("{}: has a recurrent layer's options", where));
        check_tensor(where, "weight", l.weight, {O, I}, true);
        check_tensor(where, "bias", l.bias, {O}, false);
        break;
      case ModelLayer::Kind::activation:
        if (O != I)
          throw Error(fmt::format("{}: out_size {} differs from in_size {}", where, O, I));
        break;
      case ModelLayer::Kind::prelu:
        if (O != I)
          throw Error(fmt::format("{}: out_size {} differs from in_size {}", where, O, I));
        check_tensor(where, "weight", l.weight, {O}, true);
        break;
      case ModelLayer::Kind::batchnorm:
        if (O != I)
          throw Error(fmt::format("{}: out_size {} differs from in_size {}", where, O, I));
        check_tensor(where, "mean", l.mean, {O}, true);
        check_tensor(where, "weight", l.weight, {O}, true);
        check_tensor(where, "bias", l.bias, {O}, true);
        break;
    }
    in = O;
  }
  if (skip < 0 || skip > input_size || (skip > 0 && skip != output_size()))
    throw Error(fmt::format(
        "model: skip is {}, expected 0 or the output's {} features (at most the input's {})", skip,
        output_size(), input_size));
  if (!(sample_rate >= 0) || !std::isfinite(sample_rate))
    throw Error(
        fmt::format("model: sample_rate is {}, expected a rate in Hz (0: unknown)", sample_rate));
}

namespace formats {

const std::vector<std::pair<const char*, Tensor ModelLayer::*>>& layer_tensors() {
  static const std::vector<std::pair<const char*, Tensor ModelLayer::*>> kTensors = {
      {"w_ih", &ModelLayer::w_ih},        {"w_hh", &ModelLayer::w_hh}, {"b_ih", &ModelLayer::b_ih},
      {"b_hh", &ModelLayer::b_hh},        {"h0", &ModelLayer::h0},     {"c0", &ModelLayer::c0},
      {"weight", &ModelLayer::weight},    {"bias", &ModelLayer::bias}, {"mean", &ModelLayer::mean},
      {"peephole", &ModelLayer::peephole}};
  return kTensors;
}

bool kind_from_name(const std::string& name, ModelLayer::Kind& kind) {
  using K = ModelLayer::Kind;
  for (K k : {K::gru, K::lstm, K::dense, K::activation, K::prelu, K::batchnorm}) {
    ModelLayer l;
    l.kind = k;
    if (name == l.kind_name()) return kind = k, true;
  }
  return false;
}

bool activation_from_name(const std::string& name, ModelLayer::Activation& a) {
  using A = ModelLayer::Activation;
  for (A x : {A::tanh, A::relu, A::sigmoid, A::softmax, A::elu})
    if (name == ModelLayer::activation_name(x)) return a = x, true;
  return false;
}

std::string describe(const Json& v) {
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    return t.size() <= 40 ? "\"" + t + "\"" : "\"" + t.substr(0, 40) + "...\"";
  }
  if (v.is_null()) return "null";
  return v.is_array() ? "an array" : "an object";
}

const Json& member(const Json& j, const std::string& key, const std::string& where) {
  if (!j.is_object()) throw Error(fmt::format("{}: expected an object", where));
  const auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("{}: \"{}\" is missing", where, key));
  return *it;
}

int64_t integer(const Json& v, int64_t lo, int64_t hi, const std::string& where) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
      throw Error(
          fmt::format("{}: {} is out of range, expected {}..{}", where, describe(v), lo, hi));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      throw Error(fmt::format("{}: {} is out of range, expected {}..{}", where, x, lo, hi));
    return x;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= double(lo) && d <= double(hi))
      return int64_t(d);
  }
  throw Error(fmt::format("{}: {} is not a whole number in {}..{}", where, describe(v), lo, hi));
}

float number(const Json& v, const std::string& where) {
  if (!v.is_number()) throw Error(fmt::format("{}: {} is not a number", where, describe(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > double(std::numeric_limits<float>::max()))
    throw Error(fmt::format("{}: {} is not a finite f32 number", where, describe(v)));
  return float(d);
}

namespace {

// v as an f32 when it is a finite number in range (the readers' inner loops: no message built
// unless it is not).
bool as_f32(const Json& v, float& out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > double(std::numeric_limits<float>::max())) return false;
  out = float(d);
  return true;
}

}  // namespace

Tensor vector_of(const Json& v, int64_t n, const std::string& where) {
  if (!v.is_array())
    throw Error(fmt::format("{}: expected an array of {} numbers, found {}", where,
                            n < 0 ? std::string("") : std::to_string(n), v.type_name()));
  if (n >= 0 && int64_t(v.size()) != n)
    throw Error(fmt::format("{}: has {} numbers, expected {}", where, v.size(), n));
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::f32);
  float* p = t.data<float>();
  for (size_t i = 0; i < v.size(); ++i)
    if (!as_f32(v[i], p[i])) number(v[i], fmt::format("{}[{}]", where, i));  // throws
  return t;
}

Tensor matrix_of(const Json& v, int64_t rows, int64_t cols, const std::string& where) {
  if (!v.is_array() || (v.size() > 0 && !v[0].is_array()))
    throw Error(fmt::format("{}: expected an array of rows (arrays of numbers), found {}", where,
                            v.is_array() ? "an array of numbers" : v.type_name()));
  if (rows >= 0 && int64_t(v.size()) != rows)
    throw Error(fmt::format("{}: has {} rows, expected {}", where, v.size(), rows));
  const int64_t R = int64_t(v.size()),
                C = R > 0 ? int64_t(v[0].size()) : std::max<int64_t>(cols, 0);
  if (cols >= 0 && C != cols)
    throw Error(fmt::format("{}[0]: has {} numbers, expected {}", where, C, cols));
  // Every row's length before the allocation: R x C is then what the file holds.
  for (int64_t r = 0; r < R; ++r) {
    const Json& row = v[size_t(r)];
    if (!row.is_array() || int64_t(row.size()) != C)
      throw Error(fmt::format("{}[{}]: expected an array of {} numbers (as row 0)", where, r, C));
  }
  Tensor t = Tensor::empty({R, C}, DType::f32);
  float* p = t.data<float>();
  for (int64_t r = 0; r < R; ++r) {
    const Json& row = v[size_t(r)];
    for (int64_t c = 0; c < C; ++c)
      if (!as_f32(row[size_t(c)], p[r * C + c]))
        number(row[size_t(c)], fmt::format("{}[{}][{}]", where, r, c));  // throws
  }
  return t;
}

ModelLayer recurrent_from_state_dict(const std::function<Tensor(const std::string&)>& get,
                                     const std::string& prefix, int64_t layer, int64_t in_size,
                                     bool lstm, const std::string& what) {
  const int64_t gates = lstm ? 4 : 3;
  const auto key = [&](const char* name) { return fmt::format("{}{}_l{}", prefix, name, layer); };
  ModelLayer l;
  l.kind = lstm ? ModelLayer::Kind::lstm : ModelLayer::Kind::gru;
  l.w_hh = get(key("weight_hh"));
  l.w_ih = get(key("weight_ih"));
  if (!l.w_hh.defined() || !l.w_ih.defined())
    throw Error(fmt::format("{}: {} is missing", what,
                            l.w_hh.defined() ? key("weight_ih") : key("weight_hh")));
  const int64_t H = l.w_hh.dim() == 2 ? l.w_hh.size(1) : 0;
  if (l.w_hh.dim() != 2 || H < 1 || l.w_hh.size(0) != gates * H)
    throw Error(fmt::format("{}: {} has shape {}, expected ({} H, H) for an {}", what,
                            key("weight_hh"), shape_str(l.w_hh.shape()), gates,
                            lstm ? "LSTM" : "GRU"));
  if (l.w_ih.shape() != Shape{gates * H, in_size})
    throw Error(fmt::format("{}: {} has shape {}, expected ({}, {}) (input {} features)", what,
                            key("weight_ih"), shape_str(l.w_ih.shape()), gates * H, in_size,
                            in_size));
  l.b_ih = get(key("bias_ih"));
  l.b_hh = get(key("bias_hh"));
  for (const auto& [name, t] : {std::pair{"bias_ih", &l.b_ih}, std::pair{"bias_hh", &l.b_hh}})
    if (t->defined() && t->shape() != Shape{gates * H})
      throw Error(fmt::format("{}: {} has shape {}, expected ({})", what, key(name),
                              shape_str(t->shape()), gates * H));
  if (l.b_ih.defined() != l.b_hh.defined())
    throw Error(fmt::format("{}: {} is missing (expected both biases or neither)", what,
                            l.b_ih.defined() ? key("bias_hh") : key("bias_ih")));
  l.in_size = in_size;
  l.out_size = H;
  return l;
}

}  // namespace formats

namespace {

// Larger files are refused before they are read: a real-time model is kilobytes to a few
// megabytes (the largest of the published ones here, an LSTM of 96 in JSON, is 0.9 MB).
constexpr size_t kMaxModelBytes = size_t(256) << 20;

ModelSpec parse_json_model(const std::string& bytes, const std::string& what) {
  formats::Json j;
  try {
    j = formats::Json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's messages start with "[json.exception.parse_error.101] parse error at ...".
    std::string m = e.what();
    const size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
    throw Error(fmt::format("{}: not valid JSON ({})", what, m));
  }
  if (!j.is_object())
    throw Error(
        fmt::format("{}: the JSON is {}, expected an object (a model file)", what, j.type_name()));
  if (j.contains("layers") && j.contains("in_shape")) return formats::read_rtneural_json(j, what);
  if (j.contains("model_data") && j.contains("state_dict"))
    return formats::read_guitarml_json(j, what);
  if (j.contains("architecture") && j.contains("weights")) return formats::read_nam(j, what);
  bool state_dict = !j.empty();  // only arrays: a bare state dict
  for (const auto& item : j.items()) state_dict = state_dict && item.value().is_array();
  if (state_dict) return formats::read_state_dict_json(j, what);
  throw Error(fmt::format(
      "{}: a JSON object with none of the formats' keys (expected RTNeural's \"in_shape\" and "
      "\"layers\", GuitarML's \"model_data\" and \"state_dict\", NAM's \"architecture\" and "
      "\"weights\", or a state dict of arrays)",
      what));
}

// A message quoting a file's strings (keys, layer types) kept to at most kMaxMessage bytes.
constexpr size_t kMaxMessage = 400;
std::string one_line(const std::string& m) {
  // Error already made it one printable line; a cut through a UTF-8 sequence is escaped when
  // the result becomes an Error again.
  return m.size() > kMaxMessage ? m.substr(0, kMaxMessage) + "..." : m;
}

ModelSpec parse_model_unchecked(const std::string& bytes, const std::string& what,
                                const std::map<std::string, Tensor>& given) {
  ModelSpec spec;
  size_t first = 0;
  while (first < bytes.size() && std::isspace(static_cast<unsigned char>(bytes[first]))) ++first;
  if (first < bytes.size() && bytes[first] == '{') {
    spec = parse_json_model(bytes, what);
  } else if (bytes.size() >= 9 && bytes[8] == '{') {  // safetensors: 8-byte length, then JSON
    spec = formats::read_safetensors_model(parse_safetensors(bytes, what), what);
  } else if (formats::looks_like_onnx(bytes)) {
    spec = formats::read_onnx(bytes, what, given);
  } else {
    throw Error(fmt::format(
        "{}: not a model file (expected JSON — RTNeural, GuitarML, NAM — safetensors or ONNX)",
        what));
  }
  try {
    spec.validate();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind("model: ", 0) == 0) m = m.substr(7);
    throw Error(fmt::format("{}: {}", what, m));
  }
  return spec;
}

}  // namespace

ModelSpec parse_model(const std::string& bytes, const std::string& what) {
  try {
    return parse_model_unchecked(bytes, what, {});
  } catch (const Error& e) {
    throw Error(one_line(e.what()));
  }
}

ModelSpec read_model(const std::string& path, const std::map<std::string, Tensor>& given) {
  std::string bytes;
  try {
    bytes = read_file(path, kMaxModelBytes);
    return parse_model_unchecked(bytes, path, given);
  } catch (const Error& e) {
    throw Error(one_line(e.what()));
  }
}

ModelSpec read_model(const std::string& path) {
  return read_model(path, {});
}

}  // namespace grux
