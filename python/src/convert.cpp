// Arrays <-> Tensors (convert.h).
#include "convert.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "grux/error.h"

namespace grux_py {

using grux::DType;
using grux::Tensor;

namespace {

std::string numpy_dtype_name(const py::dtype& dt) {
  return py::str(static_cast<const py::handle&>(dt)).cast<std::string>();
}

}  // namespace


// A NumPy array as a Tensor over the same memory. `name` is the argument named in errors.
// f32, f64 and (for lengths) i64; any strides that are whole elements and non-negative (else
// a contiguous copy is viewed, as NumPy would make).
Tensor from_array(const py::handle& obj, const char* name, bool allow_int) {
  if (!py::isinstance<py::array>(obj))
    throw grux::Error(std::string(name) + ": expected a NumPy array, got " +
                      py::str(py::type::of(obj)).cast<std::string>());
  auto a = py::reinterpret_borrow<py::array>(obj);
  DType dt;
  const char kind = a.dtype().kind();
  const auto isz = a.dtype().itemsize();
  if (kind == 'f' && isz == 4)
    dt = DType::f32;
  else if (kind == 'f' && isz == 8)
    dt = DType::f64;
  else if (allow_int && kind == 'i' && isz == 8)
    dt = DType::i64;
  else
    throw grux::Error(std::string(name) + ": dtype " + numpy_dtype_name(a.dtype()) +
                      " is not supported (expected " +
                      (allow_int ? "int64" : "float32 or float64") + ")");
  bool usable = (reinterpret_cast<uintptr_t>(a.data()) % isz) == 0;
  for (py::ssize_t d = 0; d < a.ndim() && usable; ++d)
    usable = a.shape(d) <= 1 || (a.strides(d) >= 0 && a.strides(d) % isz == 0);
  // A fresh C-contiguous copy (NumPy allocates it aligned); py::array::ensure would hand a
  // misaligned but contiguous array back unchanged.
  if (!usable)
    a = py::module_::import("numpy").attr("array")(a, py::arg("copy") = true, py::arg("order") = "C");
  grux::Shape shape(a.ndim()), strides(a.ndim());
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    shape[d] = a.shape(d);
    strides[d] = a.shape(d) <= 1 ? 0 : a.strides(d) / isz;
  }
  // The array is released with the GIL held, whichever thread drops the last Tensor.
  auto* held = new py::object(a);
  std::shared_ptr<void> owner(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  return Tensor::from_blob(const_cast<void*>(a.data()), shape, strides, dt, std::move(owner));
}

Tensor from_optional(const py::object& obj, const char* name, bool allow_int) {
  return obj.is_none() ? Tensor() : from_array(obj, name, allow_int);
}

// A Tensor as a NumPy array over its storage (the array's base holds the Tensor).
py::object to_array(const Tensor& t) {
  if (!t.defined()) return py::none();
  py::dtype dt = t.dtype() == DType::f32   ? py::dtype::of<float>()
                 : t.dtype() == DType::f64 ? py::dtype::of<double>()
                                           : py::dtype::of<int64_t>();
  const auto esize = static_cast<py::ssize_t>(grux::dtype_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * esize);
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, strides, t.raw_data(), base);
}

py::dict to_dict(const std::map<std::string, Tensor>& m) {
  py::dict d;
  for (const auto& [k, v] : m) d[py::str(k)] = to_array(v);
  return d;
}

std::map<std::string, Tensor> from_dict(const py::dict& d, const char* what) {
  std::map<std::string, Tensor> m;
  for (const auto& [k, v] : d) {
    const std::string key = py::str(k).cast<std::string>();
    m[key] = from_array(v, (std::string(what) + "['" + key + "']").c_str());
  }
  return m;
}

DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f32") return DType::f32;
  if (s == "float64" || s == "f64") return DType::f64;
  throw grux::Error("dtype: '" + s + "' is not supported (expected \"float32\" or \"float64\")");
}

}  // namespace grux_py
