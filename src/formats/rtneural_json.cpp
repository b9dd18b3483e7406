// RTNeural's JSON (its Keras exporter, python/model_utils.py; what AIDA-X ships and RTNeural's
// json_parser::parseJson reads) into a ModelSpec. Keras keeps weights as (in, out) kernels, a
// GRU's gates as z, r, h and an LSTM's as i, f, c, o; a ModelLayer holds them as PyTorch does
// ((out, in), r, z, n and i, f, g, o): every matrix is transposed and a GRU's first two gate
// blocks swap. docs/formats.md has the whole mapping.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux::formats {

namespace {

constexpr const char* kSupported =
    "supported: dense, time-distributed-dense, gru, lstm, prelu, batchnorm, activation";

// (rows, cols) in file order transposed to (cols, rows), gate blocks of `block` rows of the
// result reordered by `order` (result block g = source block order[g]); order empty: as is.
Tensor transposed(const Tensor& m, int64_t block, const std::vector<int>& order) {
  const int64_t R = m.size(0), C = m.size(1);
  Tensor t = Tensor::empty({C, R}, DType::f32);
  const float* s = m.data<float>();
  float* d = t.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    const int64_t src = order.empty() ? c : order[size_t(c / block)] * block + c % block;
    for (int64_t r = 0; r < R; ++r) d[c * R + r] = s[r * C + src];
  }
  return t;
}
Tensor reordered(const Tensor& v, int64_t block, const std::vector<int>& order) {
  const int64_t n = v.numel();
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = v.data<float>()[order[size_t(i / block)] * block + i % block];
  return t;
}

}  // namespace

ModelSpec read_rtneural_json(const Json& j, const std::string& what) {
  ModelSpec spec;
  spec.format = ModelFormat::rtneural_json;
  const Json& in_shape = member(j, "in_shape", what);
  if (!in_shape.is_array() || in_shape.empty())
    throw Error(fmt::format("{}: \"in_shape\" is not an array like [null, null, 1]", what));
  if (in_shape.size() == 4)
    throw Error(fmt::format(
        "{}: \"in_shape\" has 4 dimensions (a conv2d model); grux runs sequences of feature "
        "vectors",
        what));
  spec.input_size = integer(in_shape.back(), 1, 1 << 20, what + ": in_shape's last dimension");
  const Json& layers = member(j, "layers", what);
  if (!layers.is_array()) throw Error(fmt::format("{}: \"layers\" is not an array", what));
  int64_t in = spec.input_size;
  for (size_t k = 0; k < layers.size(); ++k) {
    const Json& l = layers[k];
    const std::string at = fmt::format("{}: layer {}", what, k);
    const Json& type_v = member(l, "type", at);
    if (!type_v.is_string()) throw Error(fmt::format("{}: \"type\" is not a string", at));
    const std::string type = type_v.get<std::string>();
    const std::string where = fmt::format("{} ({})", at, type);
    if (type == "conv1d" || type == "conv2d" || type == "batchnorm2d")
      throw Error(
          fmt::format("{}: grux does not run RTNeural's {} layers ({})", where, type, kSupported));
    static const char* const kTypes[] = {
        "dense", "time-distributed-dense", "gru", "lstm", "prelu", "batchnorm", "activation"};
    if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes))
      // RTNeural skips a type it does not know and runs the rest, which then gives other
      // numbers than the model: refused.
      throw Error(fmt::format("{}: unknown layer type ({})", where, kSupported));
    const Json& shape = member(l, "shape", where);
    if (!shape.is_array() || shape.empty())
      throw Error(fmt::format("{}: \"shape\" is not an array like [null, null, 8]", where));
    const int64_t units = integer(shape.back(), 1, 1 << 20, where + ": shape's last dimension");
    std::string act_name;
    if (l.contains("activation")) {
      if (!l["activation"].is_string())
        throw Error(fmt::format("{}: \"activation\" is not a string", where));
      act_name = l["activation"].get<std::string>();
    }
    ModelLayer::Activation act{};
    if (!act_name.empty() && !activation_from_name(act_name, act))
      throw Error(fmt::format(
          "{}: activation \"{}\" is not one RTNeural runs (tanh, relu, sigmoid, softmax, elu)",
          where, act_name));
    const Json* weights = nullptr;
    if (type != "activation") {
      weights = &member(l, "weights", where);
      if (!weights->is_array()) throw Error(fmt::format("{}: \"weights\" is not an array", where));
    }
    const auto weight = [&](size_t i, const char* name) -> const Json& {
      if (i >= weights->size())
        throw Error(fmt::format("{}: weights[{}] ({}) is missing", where, i, name));
      return (*weights)[i];
    };
    ModelLayer layer;
    layer.in_size = in;
    layer.out_size = units;
    if (type == "dense" || type == "time-distributed-dense") {
      layer.kind = ModelLayer::Kind::dense;
      const Tensor kernel = matrix_of(weight(0, "kernel"), in, units, where + ": the kernel");
      layer.weight = transposed(kernel, 1, {});
      if (weights->size() >= 2) layer.bias = vector_of((*weights)[1], units, where + ": the bias");
    } else if (type == "gru" || type == "lstm") {
      // RTNeural computes tanh (and sigmoid gates) whatever the field says; a Keras layer
      // trained with another activation would then give other numbers in each: refused.
      if (!act_name.empty() && act_name != "tanh")
        throw Error(
            fmt::format("{}: activation \"{}\"; RTNeural's {} computes tanh whatever the file says "
                        "(Keras would "
                        "use {}), so grux refuses it rather than follow one of them silently",
                        where, act_name, type, act_name));
      act_name.clear();
      const bool lstm = type == "lstm";
      const int64_t G = (lstm ? 4 : 3) * units;
      const std::string unit_note = fmt::format(" ({} units, as \"shape\" says)", units);
      const Tensor kernel =
          matrix_of(weight(0, "kernel"), in, G, where + ": the kernel" + unit_note);
      const Tensor recurrent = matrix_of(weight(1, "recurrent kernel"), units, G,
                                         where + ": the recurrent kernel" + unit_note);
      // Keras's z, r, h to PyTorch's r, z, n; an LSTM's i, f, c, o are PyTorch's i, f, g, o.
      const std::vector<int> order = lstm ? std::vector<int>{} : std::vector<int>{1, 0, 2};
      layer.kind = lstm ? ModelLayer::Kind::lstm : ModelLayer::Kind::gru;
      layer.w_ih = transposed(kernel, units, order);
      layer.w_hh = transposed(recurrent, units, order);
      const Json& bias = weight(2, "bias");
      if (lstm) {
        layer.b_ih = vector_of(bias, G, where + ": the bias");
        layer.b_hh = Tensor::zeros({G}, DType::f32);
      } else if (bias.is_array() && !bias.empty() && bias[0].is_array()) {
        // reset_after=True (Keras's default, what RTNeural reads): input and recurrent biases,
        // PyTorch's form.
        const Tensor b = matrix_of(bias, 2, G, where + ": the bias (reset_after)");
        layer.b_ih = reordered(b.select(0, 0).contiguous(), units, order);
        layer.b_hh = reordered(b.select(0, 1).contiguous(), units, order);
      } else {
        // reset_after=False: one bias, the reset gate applied to h before its product (grux's
        // reset_before form). RTNeural cannot read this; Keras's equations are followed.
        layer.b_ih =
            reordered(vector_of(bias, G, where + ": the bias (reset_after=False)"), units, order);
        layer.b_hh = Tensor::zeros({G}, DType::f32);
        layer.form = GruForm::reset_before;
      }
    } else if (type == "prelu") {
      layer.kind = ModelLayer::Kind::prelu;
      if (units != in)
        throw Error(
            fmt::format("{}: \"shape\" says {} features, but its input has {}", where, units, in));
      const Json& w0 = weight(0, "alpha");
      if (!w0.is_array() || w0.empty())
        throw Error(fmt::format("{}: weights[0] is not [[alpha, ...]]", where));
      Tensor alpha = vector_of(w0[0], -1, where + ": alpha");
      if (alpha.numel() == 1) {  // one alpha shared by every feature, as RTNeural reads it
        layer.weight = Tensor::full({units}, alpha.data<float>()[0], DType::f32);
      } else if (alpha.numel() == units) {
        layer.weight = alpha;
      } else {
        throw Error(
            fmt::format("{}: alpha has {} values, expected {} or 1", where, alpha.numel(), units));
      }
    } else if (type == "batchnorm") {
      layer.kind = ModelLayer::Kind::batchnorm;
      if (units != in)
        throw Error(
            fmt::format("{}: \"shape\" says {} features, but its input has {}", where, units, in));
      const float eps = number(member(l, "epsilon", where), where + ": epsilon");
      const bool affine = weights->size() == 4;
      if (weights->size() != 4 && weights->size() != 2)
        throw Error(fmt::format(
            "{}: {} weight arrays, expected 4 (gamma, beta, mean, variance) or 2 (mean, variance)",
            where, weights->size()));
      const size_t m = affine ? 2 : 0;
      layer.mean = vector_of((*weights)[m], units, where + ": the running mean");
      const Tensor var = vector_of((*weights)[m + 1], units, where + ": the running variance");
      const Tensor gamma = affine ? vector_of((*weights)[0], units, where + ": gamma") : Tensor();
      layer.bias = affine ? vector_of((*weights)[1], units, where + ": beta")
                          : Tensor::zeros({units}, DType::f32);
      layer.weight = Tensor::empty({units}, DType::f32);
      for (int64_t i = 0; i < units; ++i) {
        const float v = var.data<float>()[i] + eps;
        if (!(v > 0))
          throw Error(
              fmt::format("{}: variance + epsilon is {} at feature {}, expected > 0", where, v, i));
        layer.weight.data<float>()[i] = (affine ? gamma.data<float>()[i] : 1.f) / std::sqrt(v);
      }
    } else {  // activation
      if (act_name.empty())
        throw Error(fmt::format("{}: an activation layer without \"activation\"", where));
      if (units != in)
        throw Error(
            fmt::format("{}: \"shape\" says {} features, but its input has {}", where, units, in));
    }
    if (type != "activation") spec.layers.push_back(std::move(layer));
    if (!act_name.empty()) {
      ModelLayer a;
      a.kind = ModelLayer::Kind::activation;
      a.in_size = a.out_size = units;
      a.activation = act;
      spec.layers.push_back(std::move(a));
    }
    in = units;
  }
  return spec;
}

}  // namespace grux::formats
