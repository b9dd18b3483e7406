// grux._torch_access: torch tensors read and made through libtorch (python/src/torch_access.h
// says why). Built only where torch's C++ headers are installed (Debian's libtorch-dev); it
// refuses to import under a torch other than the one it was compiled against (torch.__version__
// at build time, GRUX_TORCH_BUILT_FOR), so that _grux never reads a tensor through a layout it
// was not built for.
#include "torch_access.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <cstring>

namespace grux_py {
namespace {

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return 0;
    case at::kDouble:
      return 1;
    case at::kLong:
      return 2;
    default:
      return -1;
  }
}

int view(PyObject* o, TorchView* v) {
  // Exactly torch.Tensor: a subclass's Python attributes may say something else.
  if (!THPVariable_CheckExact(o)) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined() || t.layout() != at::kStrided || t.dim() > kTorchViewMaxDims) return 0;
    v->cpu = t.device().is_cpu();
    if (!v->cpu || !t.has_storage()) {  // CUDA, meta: the attribute path words the error
      v->data = nullptr;
    } else {
      v->data = t.data_ptr();
    }
    v->dtype = dtype_code(t.scalar_type());
    v->ndim = static_cast<int>(t.dim());
    for (int d = 0; d < v->ndim; ++d) v->shape[d] = t.size(d), v->strides[d] = t.stride(d);
    v->contiguous = t.is_contiguous();
    v->requires_grad = t.requires_grad();
    return 1;
  } catch (...) {
    return 0;
  }
}

PyObject* empty(int dtype, int ndim, const int64_t* shape, void** data) {
  if ((dtype != 0 && dtype != 1) || ndim < 0 || ndim > kTorchViewMaxDims) return nullptr;
  try {
    // empty_cpu, not at::empty: no trip through the dispatcher (a third of the cost).
    at::Tensor t(at::detail::empty_cpu(at::IntArrayRef(shape, static_cast<size_t>(ndim)),
                                       dtype == 0 ? at::kFloat : at::kDouble));
    *data = t.data_ptr();
    PyObject* r = THPVariable_Wrap(std::move(t));
    if (r == nullptr) PyErr_Clear();
    return r;
  } catch (...) {
    return nullptr;
  }
}

int stamp(PyObject* o, void** data, int64_t* version) {
  if (!THPVariable_Check(o)) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined() || t.layout() != at::kStrided || !t.has_storage()) return 0;
    *data = t.data_ptr();
    *version = static_cast<int64_t>(t._version());
    return 1;
  } catch (...) {
    return 0;
  }
}

int grad_enabled() {
  return c10::GradMode::is_enabled() ? 1 : 0;
}

int tracing() {
  return torch::jit::tracer::isTracing() ? 1 : 0;
}

const TorchAccess kAccess{kTorchAccessAbi, &view, &empty, &stamp, &grad_enabled, &tracing};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_torch_access",
                       "torch tensors read and made through libtorch (grux internal)",
                       -1,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace
}  // namespace grux_py

PyMODINIT_FUNC PyInit__torch_access() {
  // The torch running must be the one compiled against (tensor layouts are not a stable ABI).
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr) return nullptr;
  PyObject* version = PyObject_GetAttrString(torch, "__version__");
  Py_DECREF(torch);
  if (version == nullptr) return nullptr;
  const char* running = PyUnicode_AsUTF8(version);
  const bool same = running != nullptr && std::strcmp(running, GRUX_TORCH_BUILT_FOR) == 0;
  if (!same) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ImportError, "grux._torch_access was built for torch %s, not %s",
                   GRUX_TORCH_BUILT_FOR, running);
    Py_DECREF(version);
    return nullptr;
  }
  Py_DECREF(version);
  PyObject* m = PyModule_Create(&grux_py::kModule);
  if (m == nullptr) return nullptr;
  PyObject* cap = PyCapsule_New(const_cast<grux_py::TorchAccess*>(&grux_py::kAccess),
                                "grux._torch_access.access", nullptr);
  if (cap == nullptr || PyModule_AddObject(m, "access", cap) < 0) {
    Py_XDECREF(cap);
    Py_DECREF(m);
    return nullptr;
  }
  PyModule_AddStringConstant(m, "torch_version", GRUX_TORCH_BUILT_FOR);
  return m;
}
