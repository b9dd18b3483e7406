// Models in safetensors: what `grux model convert` writes (every layer's tensors under
// "layers.{k}.", the topology as JSON in the metadata's "grux.model"), or a PyTorch state dict
// of one nn.GRU or nn.LSTM (keys weight_ih_l0, ..., under any prefix) optionally with one
// nn.Linear after it (its weight and bias under another prefix).
#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux {

namespace {

constexpr const char* kMetadataKey = "grux.model";

}  // namespace

std::string serialize_model(const ModelSpec& spec) {
  spec.validate();
  formats::Json meta;
  meta["input_size"] = spec.input_size;
  meta["skip"] = spec.skip;
  meta["sample_rate"] = spec.sample_rate;
  meta["name"] = spec.name;
  meta["source_format"] = model_format_name(spec.format);
  meta["layers"] = formats::Json::array();
  std::map<std::string, Tensor> tensors;
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const ModelLayer& l = spec.layers[k];
    formats::Json d;
    d["kind"] = l.kind_name();
    d["in_size"] = l.in_size;
    d["out_size"] = l.out_size;
    if (l.kind == ModelLayer::Kind::gru) d["form"] = gru_form_name(l.form);
    if (l.lengths.defined())
      throw Error(fmt::format(
          "model: layer {} ({}) has sequence lengths bound when it was read: they are a run's "
          "input, not the model's, and a model file does not keep them",
          k, l.kind_name()));
    if (l.directions != 1) d["directions"] = l.directions;
    if (l.reverse) d["reverse"] = true;
    if (l.clip != 0) d["clip"] = l.clip;
    if (l.input_forget) d["input_forget"] = true;
    if (l.kind == ModelLayer::Kind::activation)
      d["activation"] = ModelLayer::activation_name(l.activation);
    meta["layers"].push_back(d);
    for (const auto& [name, member] : formats::layer_tensors())
      if ((l.*member).defined()) tensors.emplace(fmt::format("layers.{}.{}", k, name), l.*member);
  }
  // A name that is not UTF-8 (an ONNX graph's may be any bytes) is kept with U+FFFD in place
  // of the bytes that are not.
  return serialize_safetensors(
      tensors,
      {{kMetadataKey, meta.dump(-1, ' ', false, formats::Json::error_handler_t::replace)}});
}

void write_model(const std::string& path, const ModelSpec& spec) {
  write_file_atomic(path, serialize_model(spec));
}

namespace formats {

namespace {

ModelSpec read_grux_model(const SafeTensors& file, const std::string& what) {
  Json meta;
  try {
    meta = Json::parse(file.metadata.at(kMetadataKey));
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{}: the metadata's \"{}\" is not valid JSON", what, kMetadataKey));
  }
  const std::string where = fmt::format("{}: {}", what, kMetadataKey);
  ModelSpec spec;
  spec.format = ModelFormat::safetensors;
  spec.input_size = integer(member(meta, "input_size", where), 1, 1 << 20, where + ": input_size");
  spec.skip = integer(member(meta, "skip", where), 0, 1 << 20, where + ": skip");
  spec.sample_rate = number(member(meta, "sample_rate", where), where + ": sample_rate");
  if (meta.contains("name") && meta["name"].is_string())
    spec.name = meta["name"].get<std::string>();
  const Json& layers = member(meta, "layers", where);
  if (!layers.is_array()) throw Error(fmt::format("{}: \"layers\" is not an array", where));
  std::set<std::string> used;
  for (size_t k = 0; k < layers.size(); ++k) {
    const std::string at = fmt::format("{}: layer {}", where, k);
    const Json& d = layers[k];
    const Json& kind = member(d, "kind", at);
    ModelLayer l;
    if (!kind.is_string() || !kind_from_name(kind.get<std::string>(), l.kind))
      throw Error(fmt::format("{}: kind {} is not gru, lstm, dense, activation, prelu or batchnorm",
                              at, describe(kind)));
    l.in_size = integer(member(d, "in_size", at), 1, 1 << 20, at + ": in_size");
    l.out_size = integer(member(d, "out_size", at), 1, 1 << 20, at + ": out_size");
    if (l.kind == ModelLayer::Kind::gru) {
      const Json& form = member(d, "form", at);
      if (form.is_string() && form.get<std::string>() == gru_form_name(GruForm::reset_before))
        l.form = GruForm::reset_before;
      else if (!(form.is_string() &&
                 form.get<std::string>() == gru_form_name(GruForm::linear_before_reset)))
        throw Error(fmt::format("{}: form {} is not {} or {}", at, describe(form),
                                gru_form_name(GruForm::linear_before_reset),
                                gru_form_name(GruForm::reset_before)));
    }
    if (l.recurrent()) {
      if (d.contains("directions"))
        l.directions = integer(d["directions"], 1, 2, at + ": directions");
      const auto flag = [&](const char* key) {
        if (!d.contains(key)) return false;
        if (!d[key].is_boolean())
          throw Error(
              fmt::format("{}: {} is {}, expected true or false", at, key, describe(d[key])));
        return d[key].get<bool>();
      };
      l.reverse = flag("reverse");
      l.input_forget = flag("input_forget");
      if (d.contains("clip")) l.clip = number(d["clip"], at + ": clip");
    }
    if (l.kind == ModelLayer::Kind::activation) {
      const Json& a = member(d, "activation", at);
      if (!a.is_string() || !activation_from_name(a.get<std::string>(), l.activation))
        throw Error(fmt::format("{}: activation {} is not tanh, relu, sigmoid, softmax or elu", at,
                                describe(a)));
    }
    for (const auto& [name, m] : layer_tensors()) {
      const std::string key = fmt::format("layers.{}.{}", k, name);
      const auto it = file.tensors.find(key);
      if (it == file.tensors.end()) continue;
      l.*m = it->second;
      used.insert(key);
    }
    spec.layers.push_back(std::move(l));
  }
  for (const auto& [key, t] : file.tensors)
    if (!used.count(key))
      throw Error(
          fmt::format("{}: tensor \"{}\" belongs to no layer of \"{}\"", what, key, kMetadataKey));
  return spec;
}

}  // namespace

ModelSpec read_safetensors_model(const SafeTensors& file, const std::string& what) {
  for (const auto& [key, t] : file.tensors)
    if (t.dtype() != DType::f32)
      throw Error(fmt::format("{}: {} is {}, expected F32", what, key, dtype_name(t.dtype())));
  if (file.metadata.count(kMetadataKey)) return read_grux_model(file, what);
  // A state dict: modules by prefix (the key up to its last '.').
  std::map<std::string, std::vector<std::string>> modules;
  for (const auto& [key, t] : file.tensors) {
    if (key.size() > 8 && key.compare(key.size() - 8, 8, "_reverse") == 0)
      throw Error(
          fmt::format("{}: {} belongs to a bidirectional layer, which cannot stream (the "
                      "reverse direction needs the whole sequence)",
                      what, key));
    const size_t dot = key.rfind('.');
    modules[dot == std::string::npos ? "" : key.substr(0, dot + 1)].push_back(key);
  }
  std::optional<std::string> rec_prefix, lin_prefix;
  for (const auto& [prefix, keys] : modules) {
    const bool recurrent = file.tensors.count(prefix + "weight_hh_l0") > 0;
    const bool linear = file.tensors.count(prefix + "weight") > 0;
    std::optional<std::string>& slot = recurrent ? rec_prefix : lin_prefix;
    if ((!recurrent && !linear) || slot)
      throw Error(fmt::format(
          "{}: expected the state dict of one nn.GRU or nn.LSTM and at most one nn.Linear after "
          "it, found module \"{}\" ({}{})",
          what, prefix, keys.front(), keys.size() > 1 ? ", ..." : ""));
    slot = prefix;
  }
  if (!rec_prefix)
    throw Error(fmt::format("{}: no nn.GRU or nn.LSTM (no key ends in weight_hh_l0)", what));
  const std::string rec = *rec_prefix, lin = lin_prefix.value_or("");
  ModelSpec spec;
  spec.format = ModelFormat::safetensors;
  const auto w_ih = file.tensors.find(rec + "weight_ih_l0");
  if (w_ih == file.tensors.end() || w_ih->second.dim() != 2)
    throw Error(fmt::format("{}: {}weight_ih_l0 is missing or not a matrix", what, rec));
  spec.input_size = w_ih->second.size(1);
  const auto hh = file.tensors.at(rec + "weight_hh_l0");
  const bool lstm = hh.dim() == 2 && hh.size(0) == 4 * hh.size(1);
  std::set<std::string> used;
  const auto get = [&](const std::string& key) {
    const auto it = file.tensors.find(key);
    if (it == file.tensors.end()) return Tensor();
    used.insert(key);
    return it->second;
  };
  int64_t in = spec.input_size;
  for (int64_t l = 0; file.tensors.count(fmt::format("{}weight_hh_l{}", rec, l)); ++l) {
    spec.layers.push_back(recurrent_from_state_dict(get, rec, l, in, lstm, what));
    in = spec.layers.back().out_size;
  }
  if (lin_prefix) {
    const Tensor w = get(lin + "weight");
    if (w.dim() != 2 || w.size(1) != in || w.size(0) < 1)
      throw Error(fmt::format("{}: {}weight has shape {}, expected (out_features, {})", what, lin,
                              shape_str(w.shape()), in));
    ModelLayer d;
    d.kind = ModelLayer::Kind::dense;
    d.in_size = in;
    d.out_size = w.size(0);
    d.weight = w;
    d.bias = get(lin + "bias");
    spec.layers.push_back(std::move(d));
  }
  for (const auto& [key, t] : file.tensors)
    if (!used.count(key))
      throw Error(fmt::format("{}: unexpected key \"{}\" (expected {}weight_ih_l{{k}}, ...{})",
                              what, key, rec,
                              lin.empty() ? "" : fmt::format(", {}weight, {}bias", lin, lin)));
  return spec;
}

}  // namespace formats

}  // namespace grux
