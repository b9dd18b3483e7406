// Arrays <-> Tensors (convert.h).
#include "convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// What the conversions use of torch, once the interpreter has imported it (grux never imports
// it). Never freed: Python objects must not be released after the interpreter has finalized.
struct TorchApi {
  PyTypeObject* tensor_type;
  py::object f32, f64, i64, from_numpy;
  // Interned attribute names for the per-frame fast path (pybind11's attr("...") would make
  // a new string every call).
  PyObject *dtype, *is_cpu, *is_contiguous, *shape, *stride, *data_ptr, *requires_grad;
  // grux._torch_access where it loads (python/src/torch_access.h), else null.
  const TorchAccess* access = nullptr;
};

// Whether raw_array and new_torch_result use grux._torch_access when it is loaded (the
// tests switch it off to compare with the attribute path).
bool g_use_access = true;

py::object getattr_of(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_GetAttr(o, name);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

py::object call_method(PyObject* o, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(o, name);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// torch's float dtype object (and with allow_int torch.int64) as a DType; nullopt otherwise.
std::optional<DType> torch_dtype(const TorchApi& api, const py::object& dtype, bool allow_int) {
  if (dtype.is(api.f32)) return DType::f32;
  if (dtype.is(api.f64)) return DType::f64;
  if (allow_int && dtype.is(api.i64)) return DType::i64;
  return std::nullopt;
}

// Element d of a tuple of ints (a torch.Size, a stride tuple).
int64_t tuple_int(PyObject* t, Py_ssize_t d) {
  const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(t, d));
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<int64_t>(v);
}

// A tensor's data_ptr().
void* torch_data(const TorchApi& api, PyObject* o);

const TorchApi* torch_api() {
  static const TorchApi* api = nullptr;
  if (api != nullptr) return api;
  PyObject* mod = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (mod == nullptr) return nullptr;
  auto torch = py::reinterpret_borrow<py::object>(mod);
  if (!py::hasattr(torch, "from_numpy")) return nullptr;  // still importing
  py::object type = torch.attr("Tensor");
  if (!PyType_Check(type.ptr())) return nullptr;
  api = new TorchApi{reinterpret_cast<PyTypeObject*>(type.release().ptr()),
                     torch.attr("float32"),
                     torch.attr("float64"),
                     torch.attr("int64"),
                     torch.attr("from_numpy"),
                     PyUnicode_InternFromString("dtype"),
                     PyUnicode_InternFromString("is_cpu"),
                     PyUnicode_InternFromString("is_contiguous"),
                     PyUnicode_InternFromString("shape"),
                     PyUnicode_InternFromString("stride"),
                     PyUnicode_InternFromString("data_ptr"),
                     PyUnicode_InternFromString("requires_grad")};
  // torch is imported by now, so loading the module that links libtorch costs nothing more.
  if (PyObject* m = PyImport_ImportModule("grux._torch_access")) {
    PyObject* cap = PyObject_GetAttrString(m, "access");
    const auto* a = cap == nullptr ? nullptr
                                   : static_cast<const TorchAccess*>(
                                         PyCapsule_GetPointer(cap, "grux._torch_access.access"));
    if (a != nullptr && a->abi == kTorchAccessAbi) const_cast<TorchApi*>(api)->access = a;
    Py_XDECREF(cap);
    Py_DECREF(m);
  }
  PyErr_Clear();  // not built, or built for another torch: the attribute path
  return api;
}

// A Tensor over a torch tensor's memory (the tensor and its storage held alive: another thread
// may give the tensor other storage, x.set_(), while grux reads without the GIL) from its shape
// and strides as torch gives them (those of dimensions of size 1 are set to 0); an empty tensor
// is zeros (there is no memory to view; data() is then not called: data_ptr may be null).
template <class Data>
Tensor torch_tensor(const py::handle& obj, DType dt, grux::Shape shape, grux::Shape strides,
                    const Data& data) {
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 1) strides[d] = 0;
    empty = empty || shape[d] == 0;
  }
  if (empty) return Tensor::zeros(shape, dt);
  void* p = data();
  const py::object storage =
      py::hasattr(obj, "untyped_storage") ? obj.attr("untyped_storage")() : obj.attr("storage")();
  auto* held = new py::object(py::make_tuple(obj, storage));
  std::shared_ptr<void> owner(held, [](void* q) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(q);
  });
  return Tensor::from_blob(p, shape, strides, dt, std::move(owner));
}

// grux._torch_access where it is loaded and in use, else null.
const TorchAccess* access_in_use() {
  const TorchApi* api = torch_api();
  return api != nullptr && g_use_access ? api->access : nullptr;
}

// What grux._torch_access reads of o, where it is in use and takes o (else nullopt: the
// attribute path).
std::optional<TorchView> access_view(PyObject* o) {
  TorchView v;
  const TorchAccess* a = access_in_use();
  if (a == nullptr || a->view(o, &v) != 1) return std::nullopt;
  return v;
}

// A TorchView's dtype code as a DType: float32, float64, and int64 with allow_int.
std::optional<DType> dtype_of_code(int code, bool allow_int) {
  if (code == 0) return DType::f32;
  if (code == 1) return DType::f64;
  if (code == 2 && allow_int) return DType::i64;
  return std::nullopt;
}

// After a Python error reading a tensor: a grux::Error if the tensor is not strided (sparse
// tensors have no strides or data pointer), else the error itself.
[[noreturn]] void refuse_layout(const py::handle& obj, const char* name) {
  py::error_already_set e;
  const std::string layout = py::str(obj.attr("layout"));
  if (layout != "torch.strided")
    throw grux::Error(std::string(name) + ": a tensor of layout " + layout +
                      " was given; expected a dense (torch.strided) tensor (use .to_dense())");
  throw e;
}

// A CPU torch tensor as a Tensor over its memory (the tensor held alive), strides as torch
// reports them (never negative). Read through grux._torch_access where it is loaded, else
// through the tensor's attributes (which also word every error).
Tensor from_torch(const TorchApi& api, const py::handle& obj, const char* name, bool allow_int) {
  PyObject* o = obj.ptr();
  if (const std::optional<TorchView> v = access_view(o); v && v->cpu) {
    const grux::Shape shape(v->shape, v->shape + v->ndim);
    const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
    if (const std::optional<DType> dt = dtype_of_code(v->dtype, allow_int);
        dt && (empty || v->data))
      return torch_tensor(obj, *dt, shape, grux::Shape(v->strides, v->strides + v->ndim),
                          [&] { return v->data; });
  }
  if (getattr_of(o, api.is_cpu).ptr() != Py_True)
    throw grux::Error(std::string(name) + ": a tensor on " +
                      py::str(obj.attr("device")).cast<std::string>() +
                      " was given; grux runs on the CPU (move it with .cpu())");
  const py::object dtype = getattr_of(o, api.dtype);
  const std::optional<DType> dt = torch_dtype(api, dtype, allow_int);
  if (!dt)
    throw grux::Error(std::string(name) + ": dtype " + py::str(dtype).cast<std::string>() +
                      " is not supported (expected " +
                      (allow_int ? "torch.int64" : "torch.float32 or torch.float64") + ")");
  PyObject* shape_p = PyObject_GetAttr(o, api.shape);
  PyObject* stride_p = shape_p ? PyObject_CallMethodNoArgs(o, api.stride) : nullptr;
  const auto shape_t = py::reinterpret_steal<py::object>(shape_p);
  const auto stride_t = py::reinterpret_steal<py::object>(stride_p);
  if (stride_p == nullptr) refuse_layout(obj, name);
  if (!PyTuple_Check(shape_t.ptr()) || !PyTuple_Check(stride_t.ptr()) ||
      PyTuple_GET_SIZE(shape_t.ptr()) != PyTuple_GET_SIZE(stride_t.ptr()))
    throw grux::Error(std::string(name) +
                      ": the tensor's shape and strides are not tuples of "
                      "the same length");
  const auto ndim = static_cast<size_t>(PyTuple_GET_SIZE(shape_t.ptr()));
  grux::Shape shape(ndim), strides(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    shape[d] = tuple_int(shape_t.ptr(), static_cast<Py_ssize_t>(d));
    strides[d] = tuple_int(stride_t.ptr(), static_cast<Py_ssize_t>(d));
  }
  return torch_tensor(obj, *dt, shape, strides, [&] { return torch_data(api, o); });
}

void* torch_data(const TorchApi& api, PyObject* o) {
  const py::object ptr = call_method(o, api.data_ptr);
  const unsigned long long v = PyLong_AsUnsignedLongLong(ptr.ptr());
  if (PyErr_Occurred()) throw py::error_already_set();
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v));
}

// raw_array's reading of a torch tensor through its attributes (without grux._torch_access):
// false where the fast path does not take it.
bool read_torch_attributes(const TorchApi& api, PyObject* o, RawArray& r) {
  const std::optional<DType> dt = torch_dtype(api, getattr_of(o, api.dtype), false);
  if (!dt) return false;
  r.dtype = *dt;
  if (getattr_of(o, api.is_cpu).ptr() != Py_True ||
      call_method(o, api.is_contiguous).ptr() != Py_True)
    return false;
  const py::object shape = getattr_of(o, api.shape);  // torch.Size, a tuple
  if (!PyTuple_Check(shape.ptr())) return false;
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape.ptr());
  if (ndim < 1 || ndim > 3) return false;
  r.ndim = static_cast<int>(ndim);
  for (int d = 0; d < r.ndim; ++d) r.shape[d] = tuple_int(shape.ptr(), d);
  try {
    r.data = torch_data(api, o);
  } catch (const py::error_already_set&) {  // no storage (sparse, ...): the general path
    return false;                           // words the error
  }
  r.requires_grad = getattr_of(o, api.requires_grad).ptr() == Py_True;
  return true;
}

}  // namespace

bool is_torch_tensor(const py::handle& obj) {
  const TorchApi* api = torch_api();
  return api != nullptr && PyObject_TypeCheck(obj.ptr(), api->tensor_type);
}

int64_t RawArray::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

std::optional<RawArray> raw_array(const py::handle& obj) {
  RawArray r;
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (a.ndim() < 1 || a.ndim() > 3 || !(a.flags() & py::array::c_style)) return std::nullopt;
    if (a.dtype().is(py::dtype::of<float>()))
      r.dtype = DType::f32;
    else if (a.dtype().is(py::dtype::of<double>()))
      r.dtype = DType::f64;
    else
      return std::nullopt;
    r.data = const_cast<void*>(a.data());
    r.ndim = static_cast<int>(a.ndim());
    for (int d = 0; d < r.ndim; ++d) r.shape[d] = a.shape(d);
  } else if (is_torch_tensor(obj)) {
    const TorchApi& api = *torch_api();
    PyObject* o = obj.ptr();
    r.torch = true;
    if (const std::optional<TorchView> v = access_view(o)) {
      const std::optional<DType> dt = dtype_of_code(v->dtype, false);
      if (!dt || !v->cpu || !v->contiguous || v->ndim < 1 || v->ndim > 3) return std::nullopt;
      r.dtype = *dt;
      r.ndim = v->ndim;
      for (int d = 0; d < r.ndim; ++d) r.shape[d] = v->shape[d];
      r.data = v->data;
      r.requires_grad = v->requires_grad;
    } else if (!read_torch_attributes(api, o, r)) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  const size_t esize = grux::dtype_size(r.dtype);
  if (r.numel() == 0 || r.data == nullptr || reinterpret_cast<uintptr_t>(r.data) % esize != 0)
    return std::nullopt;
  return r;
}

// A NumPy array as a Tensor over the same memory. `name` is the argument named in errors.
// f32, f64 and (for lengths) i64; any strides that are whole elements and non-negative (else
// a contiguous copy is viewed, as NumPy would make).
Tensor from_array(const py::handle& obj, const char* name, bool allow_int) {
  if (const TorchApi* api = torch_api(); api && PyObject_TypeCheck(obj.ptr(), api->tensor_type))
    return from_torch(*api, obj, name, allow_int);
  if (!py::isinstance<py::array>(obj))
    throw grux::Error(std::string(name) + ": expected a NumPy array or a CPU torch tensor, got " +
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
    a = py::module_::import("numpy").attr("array")(a, py::arg("copy") = true,
                                                   py::arg("order") = "C");
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

std::optional<py::object> new_torch_result(grux::DType dtype, int ndim, const int64_t* shape,
                                           void** data) {
  const TorchAccess* a = access_in_use();
  if (a == nullptr || (dtype != DType::f32 && dtype != DType::f64)) return std::nullopt;
  PyObject* t = a->empty(dtype == DType::f32 ? 0 : 1, ndim, shape, data);
  if (t == nullptr) return std::nullopt;
  return py::reinterpret_steal<py::object>(t);
}

py::object to_like_result(const Tensor& t, const py::handle& like) {
  constexpr int64_t kCopyBytes = int64_t(64) << 10;  // copying 64 KB: about a microsecond
  if (t.defined() && t.dim() <= kTorchViewMaxDims && is_torch_tensor(like) &&
      t.numel() * static_cast<int64_t>(grux::dtype_size(t.dtype())) <= kCopyBytes) {
    void* data = nullptr;
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    if (auto r = new_torch_result(t.dtype(), static_cast<int>(shape.size()), shape.data(), &data)) {
      const Tensor c = t.contiguous();
      if (c.numel() > 0) std::memcpy(data, c.raw_data(), c.numel() * grux::dtype_size(c.dtype()));
      return std::move(*r);
    }
  }
  return to_like(t, like);
}

const TorchAccess* torch_access_in_use() {
  return access_in_use();
}

py::object weights_stamp(const py::sequence& weights) {
  const TorchAccess* a = access_in_use();
  if (a == nullptr) return py::none();
  std::vector<int64_t> s;
  s.reserve(3 * weights.size());
  for (const py::handle w : weights) {
    void* data = nullptr;
    int64_t version = 0;
    if (a->stamp(w.ptr(), &data, &version) != 1) return py::none();
    s.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.ptr())));
    s.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(data)));
    s.push_back(version);
  }
  return py::bytes(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int64_t));
}

bool use_torch_access(std::optional<bool> enable) {
  if (enable) g_use_access = *enable;
  return access_in_use() != nullptr;
}

py::object to_like(py::array a, const py::handle& like) {
  if (is_torch_tensor(like)) return torch_api()->from_numpy(a);
  return a;
}

py::object to_like(const Tensor& t, const py::handle& like) {
  py::object a = to_array(t);
  if (a.is_none() || !is_torch_tensor(like)) return a;
  return torch_api()->from_numpy(a);
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

std::string dtype_str(DType dtype) {
  return dtype == DType::f32 ? "float32" : dtype == DType::f64 ? "float64" : "int64";
}

DType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f32") return DType::f32;
  if (s == "float64" || s == "f64") return DType::f64;
  throw grux::Error("dtype: '" + s + "' is not supported (expected \"float32\" or \"float64\")");
}

}  // namespace grux_py
