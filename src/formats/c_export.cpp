// `grux model export-c`: a ModelSpec as C data (grux/grux.h's grux_model_desc) for a program
// without a file system, which builds the model with grux_model_from_desc.
#include <fmt/format.h>

#include <cctype>
#include <string>

#include "formats/readers.h"
#include "grux/error.h"
#include "grux/model.h"

namespace grux {

namespace {

// An f32 as a C literal that reads back to the same float: 9 significant digits, always with a
// '.' or an exponent before the suffix ("1" would not be a floating literal).
std::string c_float(float v) {
  std::string s = fmt::format("{:.9g}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string c_array(const std::string& name, const Tensor& t) {
  std::string s = fmt::format("static const float {}[{}] = {{", name, t.numel());
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s += i % 6 == 0 ? "\n    " : " ";
    s += c_float(p[i]);
    if (i + 1 < t.numel()) s += ",";
  }
  return s + "};\n";
}

const char* kind_macro(ModelLayer::Kind k) {
  switch (k) {
    case ModelLayer::Kind::gru:
      return "GRUX_LAYER_GRU";
    case ModelLayer::Kind::lstm:
      return "GRUX_LAYER_LSTM";
    case ModelLayer::Kind::dense:
      return "GRUX_LAYER_DENSE";
    case ModelLayer::Kind::activation:
      return "GRUX_LAYER_ACTIVATION";
    case ModelLayer::Kind::prelu:
      return "GRUX_LAYER_PRELU";
    case ModelLayer::Kind::batchnorm:
      return "GRUX_LAYER_BATCHNORM";
  }
  return "0";
}

const char* option_macro(const ModelLayer& l) {
  if (l.kind == ModelLayer::Kind::gru)
    return l.form == GruForm::reset_before ? "GRUX_RESET_BEFORE" : "0";
  if (l.kind != ModelLayer::Kind::activation) return "0";
  switch (l.activation) {
    case ModelLayer::Activation::tanh:
      return "GRUX_ACT_TANH";
    case ModelLayer::Activation::relu:
      return "GRUX_ACT_RELU";
    case ModelLayer::Activation::sigmoid:
      return "GRUX_ACT_SIGMOID";
    case ModelLayer::Activation::softmax:
      return "GRUX_ACT_SOFTMAX";
    case ModelLayer::Activation::elu:
      return "GRUX_ACT_ELU";
  }
  return "0";
}

}  // namespace

std::string model_as_c(const ModelSpec& spec, const std::string& name, const std::string& source) {
  spec.validate();
  const std::string whole = spec.whole_sequence_only();
  if (!whole.empty())
    throw Error(
        fmt::format("export-c: {}: grux_model_from_desc builds streaming models only", whole));
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    throw Error(fmt::format("export-c: name \"{}\" is not a C identifier", name));
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      throw Error(fmt::format("export-c: name \"{}\" is not a C identifier", name));
  std::string guard;
  for (const char c : name) guard += char(std::toupper(static_cast<unsigned char>(c)));
  std::string s = fmt::format(
      "/* Written by `grux model export-c` from {} ({}): {} layers, {} parameters.\n"
      " * Build it with grux_model_from_desc(&{}, 0, err, sizeof err) (grux/grux.h). */\n"
      "#ifndef {}_GRUX_MODEL_H\n#define {}_GRUX_MODEL_H\n\n#include <grux/grux.h>\n\n",
      source, model_format_name(spec.format), spec.layers.size(), spec.parameters(), name, guard,
      guard);
  // In grux_layer_desc's order of its tensor fields: the layer's, less the peepholes a
  // streaming model has none of (refused above).
  std::vector<std::pair<const char*, Tensor ModelLayer::*>> tensors;
  for (const auto& t : formats::layer_tensors())
    if (std::string(t.first) != "peephole") tensors.push_back(t);
  for (size_t k = 0; k < spec.layers.size(); ++k)
    for (const auto& [t, m] : tensors)
      if ((spec.layers[k].*m).defined())
        s += c_array(fmt::format("{}_l{}_{}", name, k, t), spec.layers[k].*m);
  s += fmt::format("\nstatic const grux_layer_desc {}_layers[{}] = {{\n", name,
                   std::max<size_t>(spec.layers.size(), 1));
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const ModelLayer& l = spec.layers[k];
    s += fmt::format("    {{{}, {}, {}, {}", kind_macro(l.kind), option_macro(l), l.in_size,
                     l.out_size);
    for (const auto& [t, m] : tensors)
      s += (l.*m).defined() ? fmt::format(", {}_l{}_{}", name, k, t) : std::string(", 0");
    s += "},\n";
  }
  if (spec.layers.empty()) s += "    {0}\n";
  s += fmt::format(
      "}};\n\nstatic const grux_model_desc {} = {{GRUX_MODEL_DESC_VERSION, {}, {}, {}_layers, {}, "
      "{}}};\n\n#endif\n",
      name, spec.input_size, spec.layers.size(), name, spec.skip,
      fmt::format("{:.17g}", spec.sample_rate));
  return s;
}

}  // namespace grux
