// Arrays <-> Tensors for the bindings (python/src/*.cpp): a NumPy array in becomes a Tensor
// over its memory (Tensor::from_blob, the array held alive), a Tensor out becomes an array over
// the Tensor's storage (the Tensor held by the array's base). `name` is the argument named in
// errors. Each binding file declares its bind_* function here; module.cpp calls them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <string>

#include "grux/tensor.h"

namespace grux_py {

namespace py = pybind11;

// f32, f64 and (allow_int) i64; any strides that are whole non-negative elements (else a
// contiguous copy is viewed, as NumPy would make).
grux::Tensor from_array(const py::handle& obj, const char* name, bool allow_int = false);
// None -> an undefined Tensor.
grux::Tensor from_optional(const py::object& obj, const char* name, bool allow_int = false);
// An undefined Tensor -> None.
py::object to_array(const grux::Tensor& t);
py::dict to_dict(const std::map<std::string, grux::Tensor>& m);
std::map<std::string, grux::Tensor> from_dict(const py::dict& d, const char* what);
// "float32"/"f32" or "float64"/"f64"; anything else is a grux::Error naming it.
grux::DType parse_dtype(const std::string& s);

void bind_gru(py::module_& m);     // module.cpp
void bind_scan(py::module_& m);    // scan.cpp
void bind_mingru(py::module_& m);  // mingru.cpp
void bind_conv(py::module_& m);    // conv.cpp
void bind_cost(py::module_& m);    // cost.cpp

}  // namespace grux_py
