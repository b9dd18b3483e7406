// The model-file readers (grux/model.h's read_model dispatches to them) and what they share:
// reading JSON arrays of numbers into f32 tensors with every size checked against what the
// file declares before anything is allocated beyond the file's own size.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "grux/io.h"
#include "grux/model.h"
#include "grux/tensor.h"

namespace grux::formats {

// JSON objects keep their keys in file order (a bare state dict's modules come in that order).
using Json = nlohmann::ordered_json;

// Each reader throws grux::Error("<what>: ...") naming the key or layer and what was expected.
ModelSpec read_rtneural_json(const Json& j, const std::string& what);
ModelSpec read_guitarml_json(const Json& j, const std::string& what);
ModelSpec read_state_dict_json(const Json& j, const std::string& what);
ModelSpec read_nam(const Json& j, const std::string& what);
ModelSpec read_safetensors_model(const SafeTensors& file, const std::string& what);
// ONNX (src/formats/onnx.cpp): `given` holds values of graph inputs other than the frames.
bool looks_like_onnx(const std::string& bytes);
ModelSpec read_onnx(const std::string& bytes, const std::string& what,
                    const std::map<std::string, Tensor>& given);

// Each tensor a ModelLayer may hold, by the name the files grux writes (safetensors keys,
// C data) give it.
const std::vector<std::pair<const char*, Tensor ModelLayer::*>>& layer_tensors();
// The kind or activation of that name (kind_name(), activation_name()); false if none.
bool kind_from_name(const std::string& name, ModelLayer::Kind& kind);
bool activation_from_name(const std::string& name, ModelLayer::Activation& a);

// A value as messages quote it: a number or a short string as it is, anything else by its type
// ("an array", "an object", "null"); never the whole value (a hostile file's values may be
// nested a million deep, and printing them would recurse as deep).
std::string describe(const Json& v);
// The value of `key` in object `j` (an error naming `where` and the key when absent or j is not
// an object).
const Json& member(const Json& j, const std::string& key, const std::string& where);
// A whole number in [lo, hi] (an error naming `where` otherwise).
int64_t integer(const Json& v, int64_t lo, int64_t hi, const std::string& where);
// A finite number as f32 (an error naming `where` otherwise: a string, null, an object, or a
// value beyond f32's range).
float number(const Json& v, const std::string& where);
// v as a (n) vector (n = -1: any length up to what the file holds).
Tensor vector_of(const Json& v, int64_t n, const std::string& where);
// v as a (rows, cols) matrix of rows arrays of cols numbers each (-1: any, the same for all).
Tensor matrix_of(const Json& v, int64_t rows, int64_t cols, const std::string& where);

// One PyTorch nn.GRU / nn.LSTM layer (a state dict's `prefix`weight_ih_l{layer}, ...) as a
// ModelLayer; `get(key)` returns the tensor or an undefined one. Checks every shape.
ModelLayer recurrent_from_state_dict(const std::function<Tensor(const std::string&)>& get,
                                     const std::string& prefix, int64_t layer, int64_t in_size,
                                     bool lstm, const std::string& what);

}  // namespace grux::formats
