// grux._grux: the C++ engine for Python (pybind11), its GRU classes and the stream of either
// cell; the other areas are in lstm.cpp, scan.cpp, mingru.cpp, conv.cpp, cost.cpp, the array
// conversions in convert.h. Arrays
// cross without copies (convert.h). The GIL is released while grux computes. grux::Error
// surfaces as grux.Error (a ValueError) with the C++ message. The Python-facing classes
// (python/grux/) wrap these; this file holds no policy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "grux/error.h"
#include "grux/gru.h"
#include "grux/lstm.h"
#include "grux/runtime.h"
#include "grux/tensor.h"
#include "grux/version.h"

namespace py = pybind11;
using namespace grux_py;
using grux::DType;
using grux::Tensor;

namespace {

// "ndarray of shape (1, 3) and dtype float64", "list": what a wrong argument was, for errors.
std::string describe(const py::handle& o) {
  std::string s = py::type::of(o).attr("__name__").cast<std::string>();
  if (py::hasattr(o, "shape")) {
    s += " of shape (";
    for (const auto& d : o.attr("shape"))
      s += (s.back() == '(' ? "" : ", ") + py::str(d).cast<std::string>();
    s += py::len(o.attr("shape")) == 1 ? ",)" : ")";
  }
  if (py::hasattr(o, "dtype")) s += " and dtype " + py::str(o.attr("dtype")).cast<std::string>();
  if (py::isinstance<py::array>(o) &&
      !(py::reinterpret_borrow<py::array>(o).flags() & py::array::c_style))
    s += ", not C-contiguous";
  else if (is_torch_tensor(o) && !o.attr("is_contiguous")().cast<bool>())
    s += ", not contiguous";
  return s;
}

grux::GruForm form_of(bool reset_before) {
  return reset_before ? grux::GruForm::reset_before : grux::GruForm::linear_before_reset;
}

grux::GruConfig make_config(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                            bool batch_first, double dropout, bool bidirectional,
                            bool reset_before) {
  grux::GruConfig c;
  c.input_size = input_size, c.hidden_size = hidden_size, c.num_layers = num_layers;
  c.bias = bias, c.batch_first = batch_first, c.dropout = dropout;
  c.bidirectional = bidirectional, c.form = form_of(reset_before);
  c.validate();
  return c;
}

py::dict grads_dict(const grux::GruConfig& cfg, const grux::GruGrads& g) {
  py::dict d = to_dict(g.state_dict(cfg));
  d["input"] = to_array(g.dinput);
  d["h0"] = to_array(g.dh0);
  return d;
}

// A GruStream or an LstmStream and what the binding's fast path needs to know of it.
struct Stream {
  std::unique_ptr<grux::GruStream> gru;
  std::unique_ptr<grux::LstmStream> lstm;
  int64_t N = 0, I = 0, H = 0;  // N = 0: unbatched; H: the output's width (H_out for an LSTM)
  int64_t row_work = 0;         // multiply-adds of one frame of one sequence in the first layer
  bool batch_first = false;
  DType dtype = DType::f32;

  template <typename T>
  void process(const T* in, T* out, int64_t frames) {
    if (lstm)
      lstm->process(in, out, frames);
    else
      gru->process(in, out, frames);
  }
  grux::Tensor step(const grux::Tensor& frames) {
    return lstm ? lstm->step(frames) : gru->step(frames);
  }

  // Frames handed straight to GruStream::process when they are a C-contiguous NumPy array or
  // CPU torch tensor of the stream's dtype in time-major layout ((N, I), (t, N, I); unbatched
  // (I), (t, I)): no Tensor on the way in or out. The result is written into `out` when given
  // (checked: the shape of the result, the stream's dtype, C-contiguous, not overlapping the
  // frames) and returned, else it is a new array or tensor of the frames' kind. Frames the fast
  // path does not take (other types, layouts, wrong shapes, whose errors the Tensor path words)
  // return nullopt. The GIL is released for any step that computes more than a few
  // microseconds; shorter ones keep it, since releasing and taking it back costs about as much.
  // single: one frame only (a block returns nullopt).
  std::optional<py::object> step_raw(const py::handle& frames, const py::handle& out,
                                     bool single = false) {
    const std::optional<RawArray> in = raw_array(frames);
    if (!in || in->dtype != dtype) return std::nullopt;
    const int frame_dims = N == 0 ? 1 : 2;
    const bool chunk = in->ndim == frame_dims + 1;
    if (single && chunk) return std::nullopt;
    if ((in->ndim != frame_dims && !chunk) || (chunk && batch_first && N > 0)) return std::nullopt;
    if (in->shape[in->ndim - 1] != I || (N > 0 && in->shape[in->ndim - 2] != N))
      return std::nullopt;
    const int64_t t = chunk ? in->shape[0] : 1, rows = N == 0 ? 1 : N;
    RawArray want = *in;
    want.shape[want.ndim - 1] = H;
    py::object result;
    void* o = nullptr;
    std::optional<py::object> made;  // a torch frame's result made by libtorch, where it can be
    if (!out.is_none()) {
      o = checked_out(out, want, in->data, in->numel() * grux::dtype_size(dtype));
      result = py::reinterpret_borrow<py::object>(out);
    } else if (in->torch && (made = new_torch_result(dtype, want.ndim, want.shape, &o))) {
      result = std::move(*made);
    } else {
      std::vector<py::ssize_t> shape(want.shape, want.shape + want.ndim);
      py::array a = dtype == DType::f32 ? py::array(py::array_t<float>(shape))
                                        : py::array(py::array_t<double>(shape));
      o = a.mutable_data();
      result = in->torch ? to_like(std::move(a), frames) : py::object(std::move(a));
    }
    auto run = [&] {
      if (dtype == DType::f32)
        process(static_cast<const float*>(in->data), static_cast<float*>(o), t);
      else
        process(static_cast<const double*>(in->data), static_cast<double*>(o), t);
    };
    if (t * rows * row_work >= (int64_t(1) << 16)) {
      py::gil_scoped_release nogil;
      run();
    } else {
      run();
    }
    return result;
  }

  // `out`'s memory when it can take a result of shape `want` (else a grux::Error naming what
  // was wrong and what was expected).
  void* checked_out(const py::handle& out, const RawArray& want, const void* in, size_t in_bytes) {
    const std::optional<RawArray> r = raw_array(out);
    bool ok = r && r->dtype == want.dtype && r->ndim == want.ndim;
    for (int d = 0; ok && d < want.ndim; ++d) ok = r->shape[d] == want.shape[d];
    if (!ok) {  // the message is built only here: a step per call must not pay for it
      std::string expected =
          "a C-contiguous " + dtype_str(dtype) + " array or CPU tensor of shape (";
      for (int d = 0; d < want.ndim; ++d)
        expected += (d ? ", " : "") + std::to_string(want.shape[d]);
      expected += want.ndim == 1 ? ",)" : ")";
      throw grux::Error("out: expected " + expected + ", got " + describe(out));
    }
    if (py::isinstance<py::array>(out) && !py::reinterpret_borrow<py::array>(out).writeable())
      throw grux::Error("out: the array is read-only");
    if (r->requires_grad)
      throw grux::Error(
          "out: a tensor that requires grad cannot be written (pass one made under "
          "torch.no_grad(), or none)");
    const auto* a = static_cast<const char*>(in);  // in_bytes 0: nothing to overlap
    const auto* b = static_cast<const char*>(r->data);
    if (a < b + r->numel() * grux::dtype_size(dtype) && b < a + in_bytes)
      throw grux::Error(
          "out: overlaps the frames (the stream reads each frame while it writes "
          "the output; pass separate memory)");
    return r->data;
  }
};

// The tape of a forward_train, with the Gru it was taken with (backward needs both).
struct Tape {
  grux::GruTape tape;
};

// grux.Error (grux::Error's Python type), set when the module is made.
PyObject* g_error_type = PyExc_ValueError;

// Inside a catch block of the plain CPython functions below: the Python error for the C++
// exception being handled (grux::Error as grux.Error), as pybind11 sets it for its methods.
void set_python_error() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const grux::Error& e) {
    PyErr_SetString(g_error_type, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "grux: an unknown C++ exception");
  }
}

// A stream's handle for step_frame below: a capsule of the Stream, holding its Python object.
constexpr const char* kStreamHandle = "grux.GruStream.handle";

// _step_frame(handle, frame, out): Stream::step_raw of one frame, or None where the frame is
// not one it takes (GRUStream.step then takes the general path). A plain CPython function
// (METH_FASTCALL) rather than a pybind11 method: a frame of a small model takes a few
// microseconds, and pybind11's dispatch (argument loaders, the type lookup of `self`) was a
// tenth of GRUStream.step's cost from Python.
PyObject* step_frame_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "_step_frame(handle, frame, out) takes 3 arguments");
    return nullptr;
  }
  auto* s = static_cast<Stream*>(PyCapsule_GetPointer(args[0], kStreamHandle));
  if (s == nullptr) return nullptr;
  try {
    if (auto r = s->step_raw(args[1], args[2], true)) return r->release().ptr();
    Py_RETURN_NONE;
  } catch (...) {
    set_python_error();
  }
  return nullptr;
}

PyMethodDef kStepFrameDef = {
    "_step_frame", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(step_frame_fast)),
    METH_FASTCALL,
    "_step_frame(handle, frame, out): one frame through a stream's fast "
    "path, or None (GRUStream.step's general path then)."};

// grux.torch.GRUCell's and LSTMCell's per-call fast path: a capsule of the packed cell and the
// weights it was packed from (held, so that their identities stay theirs), with each weight's
// data pointer and version at packing (grux._torch_access's stamp).
constexpr const char* kCellHandle = "grux.GruCell.handle";
struct CellFast {
  py::object cell_obj;                  // the grux GruCell or LstmCell (holds the weights)
  const grux::GruCell* cell = nullptr;  // one of these two
  const grux::LstmCell* lstm = nullptr;
  int64_t I = 0, H = 0;
  std::vector<py::object> names, weights;
  std::vector<void*> data;
  std::vector<int64_t> versions;
};

// _cell_handle(cell, names, weights): the fast path's handle for an f32 cell packed from these
// torch weights (names: their keys in the module's _parameters), or None where there is no
// fast path (an f64 cell, grux._torch_access not in use, a weight it cannot stamp).
py::object cell_handle(const py::object& cell_obj, const py::sequence& names,
                       const py::sequence& weights) {
  const TorchAccess* a = torch_access_in_use();
  auto f = std::make_unique<CellFast>();
  DType dtype;
  if (py::isinstance<grux::LstmCell>(cell_obj)) {
    f->lstm = &cell_obj.cast<const grux::LstmCell&>();
    f->I = f->lstm->input_size(), f->H = f->lstm->hidden_size();
    dtype = f->lstm->weights().w_ih.dtype();
  } else {
    f->cell = &cell_obj.cast<const grux::GruCell&>();
    f->I = f->cell->input_size(), f->H = f->cell->hidden_size();
    dtype = f->cell->weights().w_ih.dtype();
  }
  if (a == nullptr || dtype != DType::f32 || names.size() != weights.size()) return py::none();
  f->cell_obj = cell_obj;
  for (size_t i = 0; i < weights.size(); ++i) {
    void* data = nullptr;
    int64_t version = 0;
    if (a->stamp(weights[i].ptr(), &data, &version) != 1) return py::none();
    PyObject* name = PyUnicode_InternFromString(names[i].cast<std::string>().c_str());
    if (name == nullptr) throw py::error_already_set();
    f->names.push_back(py::reinterpret_steal<py::object>(name));
    f->weights.push_back(weights[i]);
    f->data.push_back(data);
    f->versions.push_back(version);
  }
  return py::capsule(f.release(), kCellHandle, [](PyObject* c) {
    delete static_cast<CellFast*>(PyCapsule_GetPointer(c, kCellHandle));
  });
}

// Whether r is a contiguous f32 torch tensor of shape (n) (unbatched) or (1, n) with ndim
// dimensions (0: either).
bool is_cell_row(const std::optional<RawArray>& r, int64_t n, int ndim) {
  if (!r || !r->torch || r->dtype != DType::f32 || (ndim != 0 && r->ndim != ndim)) return false;
  return (r->ndim == 1 || (r->ndim == 2 && r->shape[0] == 1)) && r->shape[r->ndim - 1] == n;
}

// One step of a batch-1 or unbatched f32 cell on torch tensors, into a new tensor, while the
// module's weights (parameters: its _parameters) are still the ones the handle was made from
// (the same objects, storage and versions): a new reference to the result; else a new
// reference to None (the general path then, which repacks and words any error); null with a
// Python error set if one was raised.
PyObject* cell_step(PyObject* handle, PyObject* parameters, PyObject* input, PyObject* hx) {
  auto* f = static_cast<CellFast*>(PyCapsule_GetPointer(handle, kCellHandle));
  if (f == nullptr) return nullptr;
  try {
    const TorchAccess* a = torch_access_in_use();
    if (a == nullptr || !PyDict_Check(parameters)) Py_RETURN_NONE;
    for (size_t i = 0; i < f->weights.size(); ++i) {
      PyObject* w = PyDict_GetItemWithError(parameters, f->names[i].ptr());
      void* data = nullptr;
      int64_t version = 0;
      if (w != f->weights[i].ptr() || a->stamp(w, &data, &version) != 1 || data != f->data[i] ||
          version != f->versions[i]) {
        if (PyErr_Occurred()) return nullptr;
        Py_RETURN_NONE;
      }
    }
    const int64_t I = f->I, H = f->H;
    const std::optional<RawArray> x = raw_array(input);
    if (!is_cell_row(x, I, 0)) Py_RETURN_NONE;
    // hx: h (GRUCell), or (h, c) (LSTMCell); None: zeros.
    std::optional<RawArray> h, c;
    if (hx != Py_None) {
      if (f->lstm) {
        if (!PyTuple_Check(hx) || PyTuple_GET_SIZE(hx) != 2 ||
            !is_cell_row(h = raw_array(PyTuple_GET_ITEM(hx, 0)), H, x->ndim) ||
            !is_cell_row(c = raw_array(PyTuple_GET_ITEM(hx, 1)), H, x->ndim))
          Py_RETURN_NONE;
      } else if (!is_cell_row(h = raw_array(hx), H, x->ndim)) {
        Py_RETURN_NONE;
      }
    }
    const int64_t shape[2] = {1, H};
    const int64_t* dims = x->ndim == 1 ? shape + 1 : shape;
    void* out = nullptr;
    void* c_out = nullptr;
    std::optional<py::object> result = new_torch_result(DType::f32, x->ndim, dims, &out);
    std::optional<py::object> c_result;
    if (!result || (f->lstm && !(c_result = new_torch_result(DType::f32, x->ndim, dims, &c_out))))
      Py_RETURN_NONE;
    const auto* xp = static_cast<const float*>(x->data);
    const auto* hp = h ? static_cast<const float*>(h->data) : nullptr;
    const auto* cp = c ? static_cast<const float*>(c->data) : nullptr;
    auto* op = static_cast<float*>(out);
    auto* cop = static_cast<float*>(c_out);
    const auto step = [&] {
      if (f->lstm)
        f->lstm->forward(xp, hp, cp, op, cop);
      else
        f->cell->forward(xp, hp, op);
    };
    if ((f->lstm ? 4 : 3) * H * (I + H) >= (int64_t(1) << 16)) {  // as step_raw: short steps
      py::gil_scoped_release nogil;                               // keep the GIL
      step();
    } else {
      step();
    }
    if (!f->lstm) return result->release().ptr();
    return py::make_tuple(*result, *c_result).release().ptr();
  } catch (...) {
    set_python_error();
  }
  return nullptr;
}

// _cell_forward(handle, parameters, input, hx): cell_step from Python. A plain CPython function,
// like _step_frame: pybind11's dispatch and a Tensor per argument were a fifth of a W1 step
// (I 64, H 256) from Python.
PyObject* cell_forward_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError,
                    "_cell_forward(handle, parameters, input, hx) takes 4 arguments");
    return nullptr;
  }
  return cell_step(args[0], args[1], args[2], args[3]);
}

PyMethodDef kCellForwardDef = {
    "_cell_forward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(cell_forward_fast)),
    METH_FASTCALL,
    "_cell_forward(handle, parameters, input, hx): grux.torch.GRUCell's or LSTMCell's step on "
    "torch tensors, or None (its general path then)."};

// grux.torch.GRUCell.__call__ and LSTMCell.__call__: nn.Module.__call__ and the class's
// forward's fast path in one C call, where they would do nothing but that step: no hooks (the
// module's or the global ones), no tracing, autograd off, the class exactly grux.torch.GRUCell (a
// subclass may override forward) and its forward the one installed with this (none set on the class
// or instance since), nn.Module.__call__ itself not replaced (torch.fx patches it while tracing),
// positional (input[, hx]). Anything else, and every step the fast path does not take, calls
// nn.Module.__call__ as usual. Module.__call__'s Python frames would add about half a
// microsecond to a W1 step (a sixth of it on two threads).
struct CellCall {
  PyObject* cls = nullptr;          // grux.torch.GRUCell or LSTMCell
  PyObject* module_cls = nullptr;   // torch.nn.Module
  PyObject* module_call = nullptr;  // its __call__ when this was made
  PyObject* call_name = nullptr;    // "__call__"
  PyObject* forward_fn = nullptr;   // cls.forward
  PyObject* global_hooks[3] = {};   // torch.nn.modules.module's global hook dicts
  PyObject* local_hooks[3] = {};    // the instance's hook dicts' names
  PyObject* fast_name = nullptr;    // "_fast"
  PyObject* parameters_name = nullptr;
  PyObject* forward_name = nullptr;
};
// One a class (made once each, held for the life of the process, like the classes).
CellCall g_cell_calls[2];
int g_cell_call_count = 0;

// Whether the instance dict's entry `name` is an empty dict (null with an error set on error).
int empty_dict_entry(PyObject* dict, PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(dict, name);
  if (v == nullptr) return PyErr_Occurred() ? -1 : 0;
  return PyDict_Check(v) && PyDict_GET_SIZE(v) == 0 ? 1 : 0;
}

// nn.Module.__call__ as it is now (a tracer may have replaced it) on self and the arguments.
PyObject* module_call(const CellCall& c, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                      PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  PyObject* now = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(c.module_cls), c.call_name);
  const py::object call = py::reinterpret_borrow<py::object>(now != nullptr ? now : c.module_call);
  try {
    std::vector<PyObject*> all(static_cast<size_t>(1 + nargs + nkw));
    all[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; ++i) all[static_cast<size_t>(1 + i)] = args[i];
    return PyObject_Vectorcall(call.ptr(), all.data(), static_cast<size_t>(1 + nargs), kwnames);
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

PyObject* cell_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // The class's entry; a subclass (not an exact match) finds the first and takes its
  // module_call below, as every other call the fast path does not take.
  const CellCall* found = &g_cell_calls[0];
  for (int i = 0; i < g_cell_call_count; ++i)
    if (reinterpret_cast<PyObject*>(Py_TYPE(self)) == g_cell_calls[i].cls) found = &g_cell_calls[i];
  const CellCall& c = *found;
  const auto fallback = [&] { return module_call(c, self, args, nargs, kwnames); };
  const TorchAccess* a = torch_access_in_use();
  PyObject** dict_ptr = _PyObject_GetDictPtr(self);
  PyObject* dict = dict_ptr == nullptr ? nullptr : *dict_ptr;
  if (a == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(self)) != c.cls || dict == nullptr ||
      nargs < 1 || nargs > 2 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0) ||
      a->grad_enabled() || a->tracing())
    return fallback();
  for (PyObject* g : c.global_hooks)
    if (PyDict_GET_SIZE(g) > 0) return fallback();
  for (PyObject* name : c.local_hooks) {
    const int empty = empty_dict_entry(dict, name);
    if (empty < 0) return nullptr;
    if (empty == 0) return fallback();
  }
  PyObject* fast = PyDict_GetItemWithError(dict, c.fast_name);
  PyObject* parameters =
      fast == nullptr ? nullptr : PyDict_GetItemWithError(dict, c.parameters_name);
  if (PyErr_Occurred()) return nullptr;
  if (fast == nullptr || fast == Py_None || parameters == nullptr ||
      _PyType_Lookup(Py_TYPE(self), c.forward_name) != c.forward_fn ||
      _PyType_Lookup(reinterpret_cast<PyTypeObject*>(c.module_cls), c.call_name) != c.module_call ||
      PyDict_GetItemWithError(dict, c.forward_name) != nullptr) {
    if (PyErr_Occurred()) return nullptr;
    return fallback();
  }
  // Held for the step: it runs without the GIL, while another thread could replace the
  // module's _fast (reset_packed_weights) and so free the handle and its packed cell. (The
  // parameters are read before the GIL is released.)
  const py::object hold_fast = py::reinterpret_borrow<py::object>(fast);
  PyObject* r = cell_step(fast, parameters, args[0], nargs == 2 ? args[1] : Py_None);
  if (r != Py_None) return r;
  Py_DECREF(r);
  return fallback();
}

PyMethodDef kCellCallDef = {
    "__call__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(cell_call)),
    METH_FASTCALL | METH_KEYWORDS,
    "Call self as a function (torch.nn.Module.__call__; one C call for an inference step)."};

// _cell_call(cls, module_cls, global_hooks): the method descriptor to set as cls.__call__.
py::object make_cell_call(const py::type& cls, const py::type& module_cls,
                          const py::tuple& global_hooks) {
  PyObject* call =
      PyDict_GetItemString(reinterpret_cast<PyTypeObject*>(module_cls.ptr())->tp_dict, "__call__");
  if (call == nullptr) throw grux::Error("_cell_call: the module class has no __call__");
  PyObject* forward =
      PyDict_GetItemString(reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_dict, "forward");
  if (forward == nullptr) throw grux::Error("_cell_call: the class has no forward of its own");
  if (g_cell_call_count == 2) throw grux::Error("_cell_call: made for two classes already");
  for (int i = 0; i < g_cell_call_count; ++i)
    if (g_cell_calls[i].cls == cls.ptr()) throw grux::Error("_cell_call: already made");
  if (global_hooks.size() != 3) throw grux::Error("_cell_call: expected 3 global hook dicts");
  for (const py::handle d : global_hooks)
    if (!PyDict_Check(d.ptr())) throw grux::Error("_cell_call: a global hook table is not a dict");
  PyObject* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &kCellCallDef);
  if (descr == nullptr) throw py::error_already_set();
  CellCall& c = g_cell_calls[g_cell_call_count++];
  c.cls = cls.inc_ref().ptr();
  c.module_cls = module_cls.inc_ref().ptr();
  c.module_call = py::reinterpret_borrow<py::object>(call).release().ptr();
  c.call_name = PyUnicode_InternFromString("__call__");
  c.forward_fn = py::reinterpret_borrow<py::object>(forward).release().ptr();
  for (size_t i = 0; i < 3; ++i) c.global_hooks[i] = py::object(global_hooks[i]).release().ptr();
  const char* names[3] = {"_backward_hooks", "_forward_hooks", "_forward_pre_hooks"};
  for (size_t i = 0; i < 3; ++i) c.local_hooks[i] = PyUnicode_InternFromString(names[i]);
  c.fast_name = PyUnicode_InternFromString("_fast");
  c.parameters_name = PyUnicode_InternFromString("_parameters");
  c.forward_name = PyUnicode_InternFromString("forward");
  return py::reinterpret_steal<py::object>(descr);
}

}  // namespace

PYBIND11_MODULE(_grux, m) {
  m.doc() = "grux's C++ engine (use the grux package, not this module)";
  g_error_type = py::register_exception<grux::Error>(m, "Error", PyExc_ValueError).ptr();
  m.attr("__version__") = GRUX_VERSION_STRING;
  m.def("simd_target", &grux::simd_target);
  m.def("_torch_access", &use_torch_access, py::arg("enable") = py::none(),
        "Whether torch tensors are read and made through grux._torch_access (libtorch) rather "
        "than their Python attributes; enable=True/False switches it (for tests).");
  m.def("_weights_stamp", &weights_stamp, py::arg("weights"),
        "Identity, data pointer and version of each tensor, as bytes (grux.torch.GRUCell's "
        "packed-weights check), or None without grux._torch_access.");
  m.def(
      "_raw_array",
      [](const py::handle& obj) -> py::object {
        const std::optional<RawArray> r = raw_array(obj);
        if (!r) return py::none();
        py::tuple shape(r->ndim);
        for (int d = 0; d < r->ndim; ++d) shape[d] = r->shape[d];
        return py::make_tuple(dtype_str(r->dtype), shape, reinterpret_cast<uintptr_t>(r->data),
                              r->torch, r->requires_grad);
      },
      "What the per-frame fast path reads of an array or tensor: (dtype, shape, data address, "
      "is torch, requires grad), or None where it takes the general path (for tests).");
  bind_gru(m);
  bind_lstm(m);
  bind_stream(m);
  m.add_object("_step_frame", py::reinterpret_steal<py::object>(
                                  PyCFunction_NewEx(&kStepFrameDef, nullptr, m.ptr())));
  m.def("_cell_handle", &cell_handle, py::arg("cell"), py::arg("names"), py::arg("weights"),
        "grux.torch.GRUCell's or LSTMCell's handle for _cell_forward, or None where it has no "
        "fast path.");
  m.add_object("_cell_forward", py::reinterpret_steal<py::object>(
                                    PyCFunction_NewEx(&kCellForwardDef, nullptr, m.ptr())));
  m.def("_cell_call", &make_cell_call, py::arg("cls"), py::arg("module_cls"),
        py::arg("global_hooks"),
        "grux.torch.GRUCell.__call__ or LSTMCell.__call__ (once each): nn.Module.__call__ with "
        "the inference step in C.");
  bind_scan(m);
  bind_mingru(m);
  bind_conv(m);
  bind_cost(m);
  bind_model(m);
}

// Gru, GruCell.
void grux_py::bind_gru(py::module_& m) {
  m.def(
      "is_torch_tensor", [](const py::handle& x) { return is_torch_tensor(x); },
      "Whether x is a torch.Tensor (without importing torch).");
  py::class_<Tape>(m, "Tape");

  py::class_<grux::Gru>(m, "Gru")
      .def(py::init([](int64_t I, int64_t H, int64_t L, bool bias, bool batch_first, double dropout,
                       bool bidirectional, bool reset_before, const std::string& dtype,
                       uint64_t seed) {
             return grux::Gru(
                 make_config(I, H, L, bias, batch_first, dropout, bidirectional, reset_before),
                 parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers"), py::arg("bias"),
           py::arg("batch_first"), py::arg("dropout"), py::arg("bidirectional"),
           py::arg("reset_before"), py::arg("dtype"), py::arg("seed"))
      .def_static(
          "from_state_dict",
          [](const py::dict& state, bool batch_first, double dropout, bool reset_before) {
            grux::GruConfig options;
            options.batch_first = batch_first, options.dropout = dropout;
            options.form = form_of(reset_before);
            return grux::Gru::from_state_dict(from_dict(state, "state_dict"), options);
          },
          py::arg("state"), py::arg("batch_first"), py::arg("dropout"), py::arg("reset_before"))
      .def("state_dict", [](const grux::Gru& g) { return to_dict(g.state_dict()); })
      .def_property_readonly("dtype", [](const grux::Gru& g) { return dtype_str(g.dtype()); })
      .def_property_readonly("input_size", [](const grux::Gru& g) { return g.config().input_size; })
      .def_property_readonly("hidden_size",
                             [](const grux::Gru& g) { return g.config().hidden_size; })
      .def_property_readonly("num_layers", [](const grux::Gru& g) { return g.config().num_layers; })
      .def_property_readonly("bias", [](const grux::Gru& g) { return g.config().bias; })
      .def_property_readonly("bidirectional",
                             [](const grux::Gru& g) { return g.config().bidirectional; })
      .def(
          "forward",
          [](const grux::Gru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, int threads, const std::string& precision) {
            const grux::Precision p = grux::parse_precision(precision);
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tl = from_optional(lengths, "lengths", true);
            grux::GruOutput out;
            {
              py::gil_scoped_release nogil;
              // bf16 / int8: the weights converted for this call (GruInference).
              out = p == grux::Precision::f32
                        ? g.forward(tx, th, tl, threads)
                        : grux::GruInference(g, p).forward(tx, th, tl, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("lengths") = py::none(),
          py::arg("threads") = 0, py::arg("precision") = "f32")
      .def(
          "forward_train",
          [](const grux::Gru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, uint64_t dropout_seed, int threads,
             const std::string& precision) {
            const grux::Precision p = grux::parse_precision(precision);
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tl = from_optional(lengths, "lengths", true);
            auto tape = std::make_unique<Tape>();
            grux::GruOutput out;
            {
              py::gil_scoped_release nogil;
              out = g.forward_train(tx, th, tl, tape->tape, dropout_seed, p, {}, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n), std::move(tape));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("lengths") = py::none(),
          py::arg("dropout_seed") = 0, py::arg("threads") = 0, py::arg("precision") = "f32")
      .def(
          "backward",
          [](const grux::Gru& g, const Tape& tape, const py::object& dout, const py::object& dh_n,
             int threads) {
            if (tape.tape.empty())
              throw grux::Error(
                  "backward: the tape is empty (use the tape forward_train returned)");
            const Tensor to = from_optional(dout, "grad_output"),
                         th = from_optional(dh_n, "grad_h_n");
            grux::GruGrads grads;
            {
              py::gil_scoped_release nogil;
              grads = g.backward(tape.tape, to, th, threads);
            }
            return grads_dict(g.config(), grads);
          },
          py::arg("tape"), py::arg("grad_output") = py::none(), py::arg("grad_h_n") = py::none(),
          py::arg("threads") = 0);

  py::class_<grux::GruCell>(m, "GruCell")
      .def(py::init([](int64_t I, int64_t H, bool bias, bool reset_before, const std::string& dtype,
                       uint64_t seed) {
             return grux::GruCell(I, H, bias, form_of(reset_before), parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("bias"), py::arg("reset_before"),
           py::arg("dtype"), py::arg("seed"))
      .def_static(
          "from_state_dict",
          [](const py::dict& state, bool reset_before) {
            return grux::GruCell::from_state_dict(from_dict(state, "state_dict"),
                                                  form_of(reset_before));
          },
          py::arg("state"), py::arg("reset_before"))
      .def("state_dict", [](const grux::GruCell& c) { return to_dict(c.state_dict()); })
      .def_property_readonly("input_size", &grux::GruCell::input_size)
      .def_property_readonly("hidden_size", &grux::GruCell::hidden_size)
      .def_property_readonly(
          "dtype", [](const grux::GruCell& c) { return dtype_str(c.weights().w_ih.dtype()); })
      .def(
          "forward",
          [](const grux::GruCell& c, const py::object& x, const py::object& h, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx");
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = c.forward(tx, th, threads);
            }
            return to_like_result(out, x);
          },
          py::arg("input"), py::arg("hx") = py::none(), py::arg("threads") = 0)
      .def(
          "backward",
          [](const grux::GruCell& c, const py::object& x, const py::object& h,
             const py::object& dh_new, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx"),
                         td = from_array(dh_new, "grad_output");
            grux::GruCellGrads g;
            {
              py::gil_scoped_release nogil;
              g = c.backward(tx, th, td, threads);
            }
            py::dict d;
            d["input"] = to_array(g.dinput);
            d["hx"] = to_array(g.dh);
            d["weight_ih"] = to_array(g.dweights.w_ih);
            d["weight_hh"] = to_array(g.dweights.w_hh);
            if (g.dweights.b_ih.defined()) {
              d["bias_ih"] = to_array(g.dweights.b_ih);
              d["bias_hh"] = to_array(g.dweights.b_hh);
            }
            return d;
          },
          py::arg("input"), py::arg("hx"), py::arg("grad_output"), py::arg("threads") = 0);
}

// GruStream and LstmStream as one class (the fast path's Stream): made from a Gru or an Lstm.
void grux_py::bind_stream(py::module_& m) {
  py::class_<Stream>(m, "Stream")
      .def(py::init([](const grux::Gru& g, int64_t batch, const py::object& h0, int threads,
                       const std::string& precision) {
             auto st = std::make_unique<Stream>();
             st->gru = std::make_unique<grux::GruStream>(g, batch, from_optional(h0, "h0"),
                                                         grux::parse_precision(precision), threads);
             const grux::GruConfig& c = g.config();
             st->N = batch, st->I = c.input_size, st->H = c.hidden_size;
             st->row_work = 3 * c.hidden_size * (c.input_size + c.hidden_size);
             st->batch_first = c.batch_first, st->dtype = g.dtype();
             return st;
           }),
           py::arg("gru"), py::arg("batch"), py::arg("h0") = py::none(), py::arg("threads") = 0,
           py::arg("precision") = "f32")
      .def(py::init([](const grux::Lstm& l, int64_t batch, const py::object& h0,
                       const py::object& c0, int threads, const std::string& precision) {
             auto st = std::make_unique<Stream>();
             st->lstm = std::make_unique<grux::LstmStream>(
                 l, batch, from_optional(h0, "h0"), from_optional(c0, "c0"),
                 grux::parse_precision(precision), threads);
             const grux::LstmConfig& c = l.config();
             st->N = batch, st->I = c.input_size, st->H = c.output_size();
             st->row_work = 4 * c.hidden_size * (c.input_size + c.output_size());
             st->batch_first = c.batch_first, st->dtype = l.dtype();
             return st;
           }),
           py::arg("lstm"), py::arg("batch"), py::arg("h0") = py::none(),
           py::arg("c0") = py::none(), py::arg("threads") = 0, py::arg("precision") = "f32")
      .def(
          "step",
          [](Stream& s, const py::object& frames, const py::object& out) -> py::object {
            if (auto r = s.step_raw(frames, out)) return *r;
            const Tensor tx = from_array(frames, "frames");
            // Frames the fast path does not take (strided, batch-first blocks) go through a
            // Tensor; a given `out` is checked first (the step would be lost if it were
            // refused after), then the result copied into it.
            void* o = nullptr;
            RawArray want;
            if (!out.is_none() && tx.dim() >= 1 && tx.dim() <= 3) {
              want.dtype = s.dtype, want.ndim = static_cast<int>(tx.dim());
              for (int d = 0; d < want.ndim; ++d) want.shape[d] = tx.size(d);
              want.shape[want.ndim - 1] = s.H;
              o = s.checked_out(out, want, nullptr, 0);
            } else if (!out.is_none()) {
              throw grux::Error("out: frames of shape " + grux::shape_str(tx.shape()) +
                                " are not one frame or a block of them");
            }
            Tensor result;
            {
              py::gil_scoped_release nogil;
              result = s.step(tx);
            }
            if (o == nullptr) return to_like(result, frames);
            const Tensor c = result.contiguous();
            if (c.numel() != want.numel() || c.dtype() != want.dtype)  // never: the step's shape
              throw grux::Error("out: the result's shape " + grux::shape_str(c.shape()) +
                                " differs from the one checked");
            std::memcpy(o, c.raw_data(),
                        static_cast<size_t>(c.numel()) * grux::dtype_size(c.dtype()));
            return py::reinterpret_borrow<py::object>(out);
          },
          py::arg("frames"), py::arg("out") = py::none())
      .def(
          "handle",
          [](py::object self) {
            // The capsule holds a reference to the stream's Python object (released with it).
            Stream* s = self.cast<Stream*>();
            PyObject* cap = PyCapsule_New(s, kStreamHandle, [](PyObject* c) {
              Py_XDECREF(static_cast<PyObject*>(PyCapsule_GetContext(c)));
            });
            if (cap == nullptr) throw py::error_already_set();
            PyCapsule_SetContext(cap, self.release().ptr());
            return py::reinterpret_steal<py::object>(cap);
          },
          "A handle for _step_frame (holds this stream).")
      .def("state",
           [](const Stream& s) { return to_array(s.lstm ? s.lstm->state() : s.gru->state()); })
      .def("cell_state",
           [](const Stream& s) {
             if (!s.lstm) throw grux::Error("cell_state: a GRU stream has no cell state");
             return to_array(s.lstm->cell_state());
           })
      .def(
          "reset",
          [](Stream& s, const py::object& h0, const py::object& c0) {
            if (s.lstm) {
              s.lstm->reset(from_optional(h0, "h0"), from_optional(c0, "c0"));
            } else {
              if (!c0.is_none()) throw grux::Error("reset: c0 given, but a GRU has no cell state");
              s.gru->reset(from_optional(h0, "h0"));
            }
          },
          py::arg("h0") = py::none(), py::arg("c0") = py::none());
}
