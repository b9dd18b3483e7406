// Arrays <-> Tensors for the bindings (python/src/*.cpp): a NumPy array in becomes a Tensor
// over its memory (Tensor::from_blob, the array held alive), a Tensor out becomes an array over
// the Tensor's storage (the Tensor held by the array's base). `name` is the argument named in
// errors. Each binding file declares its bind_* function here; module.cpp calls them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <optional>
#include <string>

#include "grux/tensor.h"
#include "torch_access.h"

namespace grux_py {

namespace py = pybind11;

// A NumPy array or a CPU torch.Tensor (read through its data_ptr, without NumPy): f32, f64
// and (allow_int) i64; any strides that are whole non-negative elements (else a contiguous copy
// is viewed, as NumPy would make). A torch tensor that requires grad is read as if detached.
grux::Tensor from_array(const py::handle& obj, const char* name, bool allow_int = false);
// None -> an undefined Tensor.
grux::Tensor from_optional(const py::object& obj, const char* name, bool allow_int = false);
// An undefined Tensor -> None.
py::object to_array(const grux::Tensor& t);
// A result of the input's kind: a torch.Tensor over the same memory when `like` is one, else
// the NumPy array itself.
py::object to_like(py::array a, const py::handle& like);
py::object to_like(const grux::Tensor& t, const py::handle& like);
// As to_like for a result grux made (never a view of an input: rearrange's must share its
// memory), except that a small result (up to 64 KB) of a torch input is copied into a tensor
// made by libtorch where grux._torch_access is loaded: cheaper than wrapping grux's memory
// through NumPy (a cell's result, one step).
py::object to_like_result(const grux::Tensor& t, const py::handle& like);
py::dict to_dict(const std::map<std::string, grux::Tensor>& m);
std::map<std::string, grux::Tensor> from_dict(const py::dict& d, const char* what);
// The memory of a C-contiguous, element-aligned f32 or f64 NumPy array or CPU torch.Tensor of
// 1 to 3 dimensions, without building a Tensor (the fast paths of per-frame calls, where a
// Tensor's bookkeeping is a large share of the call). nullopt for anything else: the caller
// then takes the general path, whose errors name what was wrong.
struct RawArray {
  void* data = nullptr;
  grux::DType dtype = grux::DType::f32;
  int ndim = 0;
  int64_t shape[3] = {0, 0, 0};
  bool torch = false;          // a torch.Tensor (results are made torch tensors too)
  bool requires_grad = false;  // torch only
  int64_t numel() const;
};
std::optional<RawArray> raw_array(const py::handle& obj);
// A new contiguous CPU torch tensor of that shape made by libtorch (grux._torch_access), its
// memory in *data; nullopt where that module is not loaded (the caller makes a NumPy array and
// wraps it with torch.from_numpy).
std::optional<py::object> new_torch_result(grux::DType dtype, int ndim, const int64_t* shape,
                                           void** data);
// grux._torch_access's functions where it is in use (use_torch_access), else null.
const TorchAccess* torch_access_in_use();
// Sets whether grux._torch_access is used (when `enable` is given) and says whether it is in
// use now: loaded (torch imported, the module built for this torch) and enabled.
bool use_torch_access(std::optional<bool> enable);
// Each tensor's identity, data pointer and version as bytes (equal bytes: the same tensors,
// storage and contents as when taken, provided the caller keeps the tensors alive so that no
// identity is reused); None where grux._torch_access is not in use or an entry is no tensor.
py::object weights_stamp(const py::sequence& weights);
bool is_torch_tensor(const py::handle& obj);

// "float32"/"f32" or "float64"/"f64"; anything else is a grux::Error naming it.
grux::DType parse_dtype(const std::string& s);
// The inverse: "float32", "float64" (or "int64").
std::string dtype_str(grux::DType dtype);

void bind_gru(py::module_& m);     // module.cpp
void bind_stream(py::module_& m);  // module.cpp: GRU and LSTM streams
void bind_lstm(py::module_& m);    // lstm.cpp
void bind_scan(py::module_& m);    // scan.cpp
void bind_mingru(py::module_& m);  // mingru.cpp
void bind_conv(py::module_& m);    // conv.cpp
void bind_cost(py::module_& m);    // cost.cpp
void bind_model(py::module_& m);   // model.cpp

}  // namespace grux_py
