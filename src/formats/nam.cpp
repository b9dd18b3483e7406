// The Neural Amp Modeler's .nam file (JSON: version, metadata, architecture, config, a flat
// "weights" array, sample_rate), architecture "LSTM", into a ModelSpec. The weights in NAM
// Core's order (NAM/lstm.cpp): for each layer, its (4 H, in + H) matrix row-major — the input
// weights' columns, then the recurrent ones', gates i, f, g, o as PyTorch's —, its 4 H biases
// (b_ih + b_hh, summed by the exporter), then the layer's initial h and c (H each, learned);
// after the layers the head, a Linear of (out_channels, H) row-major and its biases.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux::formats {

ModelSpec read_nam(const Json& j, const std::string& what) {
  ModelSpec spec;
  spec.format = ModelFormat::nam;
  const Json& version = member(j, "version", what);
  if (!version.is_string() || version.get<std::string>().rfind("0.", 0) != 0)
    throw Error(fmt::format("{}: version {}; grux reads .nam files of version 0.x", what,
                            describe(version)));
  const Json& arch = member(j, "architecture", what);
  if (!arch.is_string()) throw Error(fmt::format("{}: \"architecture\" is not a string", what));
  if (arch.get<std::string>() != "LSTM")
    throw Error(fmt::format(
        "{}: architecture \"{}\"; grux runs NAM's \"LSTM\" models (not WaveNet, ConvNet, Linear "
        "or containers)",
        what, arch.get<std::string>()));
  const std::string where = what + ": config";
  const Json& config = member(j, "config", what);
  const int64_t I =
      integer(member(config, "input_size", where), 1, 1 << 16, where + ": input_size");
  const int64_t H =
      integer(member(config, "hidden_size", where), 1, 1 << 16, where + ": hidden_size");
  const int64_t L = integer(member(config, "num_layers", where), 1, 64, where + ": num_layers");
  const int64_t in_channels =
      config.contains("in_channels") ? integer(config["in_channels"], 1, 1 << 16, where) : 1;
  const int64_t O =
      config.contains("out_channels") ? integer(config["out_channels"], 1, 1 << 16, where) : 1;
  if (in_channels != I)
    throw Error(
        fmt::format("{}: in_channels {} differs from input_size {}; NAM Core feeds the "
                    "channels to the LSTM's inputs one to one",
                    where, in_channels, I));
  spec.input_size = I;
  const Json& weights = member(j, "weights", what);
  if (!weights.is_array()) throw Error(fmt::format("{}: \"weights\" is not an array", what));
  int64_t expected = O * H + O;
  for (int64_t l = 0; l < L; ++l) expected += 4 * H * ((l == 0 ? I : H) + H) + 4 * H + 2 * H;
  if (int64_t(weights.size()) != expected)
    throw Error(fmt::format(
        "{}: \"weights\" has {} numbers, but {} layers of {} with {} inputs and {} outputs take {}",
        what, weights.size(), L, H, I, O, expected));
  size_t at = 0;
  const auto next = [&](Tensor& t) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i, ++at) {
      const Json& w = weights[at];
      if (w.is_number_float() && std::isfinite(w.get<double>()) &&
          std::fabs(w.get<double>()) <= 3.4028234663852886e38)
        p[i] = float(w.get<double>());
      else
        p[i] = number(w, fmt::format("{}: weights[{}]", what, at));
    }
  };
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = l == 0 ? I : H;
    Tensor w = Tensor::empty({4 * H, in + H}, DType::f32);
    next(w);
    ModelLayer layer;
    layer.kind = ModelLayer::Kind::lstm;
    layer.in_size = in;
    layer.out_size = H;
    layer.w_ih = w.slice(1, 0, in).contiguous();
    layer.w_hh = w.slice(1, in, in + H).contiguous();
    layer.b_ih = Tensor::empty({4 * H}, DType::f32);
    next(layer.b_ih);
    layer.b_hh = Tensor::zeros({4 * H}, DType::f32);
    layer.h0 = Tensor::empty({H}, DType::f32);
    next(layer.h0);
    layer.c0 = Tensor::empty({H}, DType::f32);
    next(layer.c0);
    spec.layers.push_back(std::move(layer));
  }
  ModelLayer head;
  head.kind = ModelLayer::Kind::dense;
  head.in_size = H;
  head.out_size = O;
  head.weight = Tensor::empty({O, H}, DType::f32);
  next(head.weight);
  head.bias = Tensor::empty({O}, DType::f32);
  next(head.bias);
  spec.layers.push_back(std::move(head));
  if (j.contains("sample_rate") && !j["sample_rate"].is_null())
    spec.sample_rate = number(j["sample_rate"], what + ": sample_rate");
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("name") &&
      j["metadata"]["name"].is_string())
    spec.name = j["metadata"]["name"].get<std::string>();
  return spec;
}

}  // namespace grux::formats
