// PyTorch state dicts kept as JSON: GuitarML's and Automated-GuitarAmpModelling's files
// (Proteus, NeuralPi, SmartAmp, Chameleon: "model_data" with the unit type and sizes, and a
// "state_dict" of "rec.*", an nn.LSTM or nn.GRU, and "lin.*", an nn.Linear), and bare state
// dicts (RTNeural's torch_helpers tests: modules in the order their keys first appear, each an
// nn.GRU, an nn.LSTM or an nn.Linear). The weights are in PyTorch's layout already.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux::formats {

namespace {

// A state dict's arrays as tensors of the shapes the JSON holds (1-D or 2-D), keys kept.
std::map<std::string, Tensor> tensors_of(const Json& sd, const std::string& where) {
  if (!sd.is_object()) throw Error(fmt::format("{}: expected an object of arrays", where));
  std::map<std::string, Tensor> out;
  for (const auto& item : sd.items()) {
    const Json& v = item.value();
    const std::string at = fmt::format("{} \"{}\"", where, item.key());
    if (!v.is_array())
      throw Error(fmt::format("{}: is {}, expected an array of numbers", at, v.type_name()));
    out.emplace(item.key(),
                !v.empty() && v[0].is_array() ? matrix_of(v, -1, -1, at) : vector_of(v, -1, at));
  }
  return out;
}

// Appends the layers of the nn.GRU / nn.LSTM under `prefix` (weight_ih_l0, ...: as many layers
// as the keys hold) to spec; marks the keys it used. Returns the top layer's width.
int64_t append_recurrent(ModelSpec& spec, const std::map<std::string, Tensor>& t,
                         std::map<std::string, bool>& used, const std::string& prefix, int64_t in,
                         const std::string& what) {
  const auto hh = t.find(prefix + "weight_hh_l0");
  if (hh == t.end()) throw Error(fmt::format("{}: {}weight_hh_l0 is missing", what, prefix));
  const Tensor& w = hh->second;
  const bool lstm = w.dim() == 2 && w.size(0) == 4 * w.size(1);
  if (!lstm && !(w.dim() == 2 && w.size(0) == 3 * w.size(1)))
    throw Error(
        fmt::format("{}: {}weight_hh_l0 has shape {}, expected (3 H, H) for an nn.GRU or "
                    "(4 H, H) for an nn.LSTM",
                    what, prefix, shape_str(w.shape())));
  const auto get = [&](const std::string& key) {
    const auto it = t.find(key);
    if (it == t.end()) return Tensor();
    used[key] = true;
    return it->second;
  };
  for (int64_t l = 0; t.count(fmt::format("{}weight_ih_l{}", prefix, l)) ||
                      t.count(fmt::format("{}weight_hh_l{}", prefix, l));
       ++l) {
    spec.layers.push_back(recurrent_from_state_dict(get, prefix, l, in, lstm, what));
    in = spec.layers.back().out_size;
  }
  return in;
}

// Appends the nn.Linear under `prefix` (weight (O, in), bias (O) optional).
int64_t append_linear(ModelSpec& spec, const std::map<std::string, Tensor>& t,
                      std::map<std::string, bool>& used, const std::string& prefix, int64_t in,
                      const std::string& what) {
  const auto w = t.find(prefix + "weight");
  if (w == t.end()) throw Error(fmt::format("{}: {}weight is missing", what, prefix));
  if (w->second.dim() != 2 || w->second.size(1) != in || w->second.size(0) < 1)
    throw Error(fmt::format("{}: {}weight has shape {}, expected (out_features, {})", what, prefix,
                            shape_str(w->second.shape()), in));
  ModelLayer l;
  l.kind = ModelLayer::Kind::dense;
  l.in_size = in;
  l.out_size = w->second.size(0);
  l.weight = w->second;
  used[prefix + "weight"] = true;
  const auto b = t.find(prefix + "bias");
  if (b != t.end()) {
    if (b->second.shape() != Shape{l.out_size})
      throw Error(fmt::format("{}: {}bias has shape {}, expected ({})", what, prefix,
                              shape_str(b->second.shape()), l.out_size));
    l.bias = b->second;
    used[prefix + "bias"] = true;
  }
  spec.layers.push_back(std::move(l));
  return spec.layers.back().out_size;
}

void check_all_used(const std::map<std::string, Tensor>& t, const std::map<std::string, bool>& used,
                    const std::string& what, const char* expected) {
  for (const auto& [key, v] : t)
    if (!used.count(key))
      throw Error(fmt::format("{}: unexpected key \"{}\" (expected {})", what, key, expected));
}

}  // namespace

ModelSpec read_guitarml_json(const Json& j, const std::string& what) {
  ModelSpec spec;
  spec.format = ModelFormat::guitarml_json;
  const Json& md = member(j, "model_data", what);
  const std::string where = what + ": model_data";
  const Json& unit = member(md, "unit_type", where);
  if (!unit.is_string() || (unit.get<std::string>() != "LSTM" && unit.get<std::string>() != "GRU"))
    throw Error(
        fmt::format("{}: unit_type is {}, expected \"LSTM\" or \"GRU\"", where, describe(unit)));
  const bool lstm = unit.get<std::string>() == "LSTM";
  spec.input_size = integer(member(md, "input_size", where), 1, 1 << 20, where + ": input_size");
  const int64_t hidden =
      integer(member(md, "hidden_size", where), 1, 1 << 20, where + ": hidden_size");
  const int64_t layers =
      md.contains("num_layers") ? integer(md["num_layers"], 1, 64, where + ": num_layers") : 1;
  const int64_t outputs = md.contains("output_size")
                              ? integer(md["output_size"], 1, 1 << 20, where + ": output_size")
                              : -1;
  spec.skip = md.contains("skip") ? integer(md["skip"], 0, 1 << 20, where + ": skip") : 0;
  if (md.contains("model") && md["model"].is_string() &&
      md["model"].get<std::string>() != "SimpleRNN")
    throw Error(
        fmt::format("{}: model \"{}\"; grux reads GuitarML's SimpleRNN (a recurrent "
                    "layer stack, then a Linear layer)",
                    where, md["model"].get<std::string>()));
  const std::map<std::string, Tensor> t =
      tensors_of(member(j, "state_dict", what), what + ": state_dict");
  std::map<std::string, bool> used;
  const int64_t top = append_recurrent(spec, t, used, "rec.", spec.input_size, what);
  const int64_t found = int64_t(spec.layers.size());
  const ModelLayer& first = spec.layers.front();
  if ((first.kind == ModelLayer::Kind::lstm) != lstm)
    throw Error(fmt::format("{}: unit_type says {}, but rec.weight_hh_l0 is an {}'s", where,
                            unit.get<std::string>(), lstm ? "GRU" : "LSTM"));
  if (found != layers || top != hidden)
    throw Error(fmt::format("{}: says {} layers of {}, but the state dict holds {} of {}", where,
                            layers, hidden, found, top));
  const int64_t O = append_linear(spec, t, used, "lin.", top, what);
  if (outputs >= 0 && O != outputs)
    throw Error(
        fmt::format("{}: output_size is {}, but lin.weight has {} rows", where, outputs, O));
  check_all_used(t, used, what, "rec.weight_ih_l{k}, ..., lin.weight, lin.bias");
  if (spec.skip > 0 && (spec.skip != O || spec.skip > spec.input_size))
    throw Error(fmt::format(
        "{}: skip {} adds that many input features to the output's {} (the input has {}); grux "
        "adds skip = output_size features, at most input_size",
        where, spec.skip, O, spec.input_size));
  return spec;
}

ModelSpec read_state_dict_json(const Json& j, const std::string& what) {
  ModelSpec spec;
  spec.format = ModelFormat::state_dict_json;
  const std::map<std::string, Tensor> t = tensors_of(j, what);
  // Modules in the order their keys first appear: "gru.weight_ih_l0" is module "gru.".
  std::vector<std::string> modules;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const size_t dot = key.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : key.substr(0, dot + 1);
    if (std::find(modules.begin(), modules.end(), prefix) == modules.end())
      modules.push_back(prefix);
  }
  std::map<std::string, bool> used;
  int64_t in = -1;
  for (const std::string& m : modules) {
    const bool recurrent = t.count(m + "weight_hh_l0") > 0;
    if (!recurrent && !t.count(m + "weight"))
      throw Error(fmt::format(
          "{}: module \"{}\" is neither an nn.GRU / nn.LSTM (weight_ih_l0, weight_hh_l0, ...) nor "
          "an nn.Linear (weight, bias)",
          what, m));
    if (in < 0) {  // the input size: the first module's
      const auto w = t.find(m + (recurrent ? "weight_ih_l0" : "weight"));
      if (w == t.end() || w->second.dim() != 2)
        throw Error(fmt::format("{}: {}{} is missing or not a matrix", what, m,
                                recurrent ? "weight_ih_l0" : "weight"));
      in = spec.input_size = w->second.size(1);
    }
    in = recurrent ? append_recurrent(spec, t, used, m, in, what)
                   : append_linear(spec, t, used, m, in, what);
  }
  check_all_used(t, used, what,
                 "the keys of nn.GRU, nn.LSTM and nn.Linear modules: weight_ih_l{k}, "
                 "weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, weight, bias");
  return spec;
}

}  // namespace grux::formats
