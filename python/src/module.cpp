// grux._grux: the C++ engine for Python (pybind11). Arrays cross without copies: a NumPy array
// in becomes a Tensor over its memory (Tensor::from_blob, the array held alive), a Tensor out
// becomes an array over the Tensor's storage (the Tensor held by the array's base). The GIL is
// released while grux computes. grux::Error surfaces as grux.Error (a ValueError) with the C++
// message. The Python-facing classes (python/grux/) wrap these; this file holds no policy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "grux/error.h"
#include "grux/gru.h"
#include "grux/runtime.h"
#include "grux/tensor.h"
#include "grux/version.h"

namespace py = pybind11;
using grux::DType;
using grux::Tensor;

namespace {

std::string numpy_dtype_name(const py::dtype& dt) {
  return py::str(static_cast<const py::handle&>(dt)).cast<std::string>();
}

// A NumPy array as a Tensor over the same memory. `name` is the argument named in errors.
// f32, f64 and (for lengths) i64; any strides that are whole elements and non-negative (else
// a contiguous copy is viewed, as NumPy would make).
Tensor from_array(const py::handle& obj, const char* name, bool allow_int = false) {
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
  if (!usable) a = py::array::ensure(a, py::array::c_style);
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

Tensor from_optional(const py::object& obj, const char* name, bool allow_int = false) {
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

grux::GruForm form_of(bool reset_before) {
  return reset_before ? grux::GruForm::reset_before : grux::GruForm::linear_before_reset;
}

grux::GruConfig make_config(int64_t input_size, int64_t hidden_size, int64_t num_layers,
                            bool bias, bool batch_first, double dropout, bool bidirectional,
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

// The tape of a forward_train, with the Gru it was taken with (backward needs both).
struct Tape {
  grux::GruTape tape;
};

}  // namespace

PYBIND11_MODULE(_grux, m) {
  m.doc() = "grux's C++ engine (use the grux package, not this module)";
  py::register_exception<grux::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = GRUX_VERSION_STRING;
  m.def("simd_target", &grux::simd_target);

  py::class_<Tape>(m, "Tape");

  py::class_<grux::Gru>(m, "Gru")
      .def(py::init([](int64_t I, int64_t H, int64_t L, bool bias, bool batch_first,
                       double dropout, bool bidirectional, bool reset_before,
                       const std::string& dtype, uint64_t seed) {
             return grux::Gru(make_config(I, H, L, bias, batch_first, dropout, bidirectional,
                                          reset_before),
                              parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers"),
           py::arg("bias"), py::arg("batch_first"), py::arg("dropout"),
           py::arg("bidirectional"), py::arg("reset_before"), py::arg("dtype"),
           py::arg("seed"))
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
      .def_property_readonly("dtype", [](const grux::Gru& g) {
        return std::string(g.dtype() == DType::f32 ? "float32" : "float64");
      })
      .def_property_readonly("input_size", [](const grux::Gru& g) { return g.config().input_size; })
      .def_property_readonly("hidden_size", [](const grux::Gru& g) { return g.config().hidden_size; })
      .def_property_readonly("num_layers", [](const grux::Gru& g) { return g.config().num_layers; })
      .def_property_readonly("bias", [](const grux::Gru& g) { return g.config().bias; })
      .def_property_readonly("bidirectional", [](const grux::Gru& g) { return g.config().bidirectional; })
      .def(
          "forward",
          [](const grux::Gru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tl = from_optional(lengths, "lengths", true);
            grux::GruOutput out;
            {
              py::gil_scoped_release nogil;
              out = g.forward(tx, th, tl, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("lengths") = py::none(),
          py::arg("threads") = 0)
      .def(
          "forward_train",
          [](const grux::Gru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, uint64_t dropout_seed, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tl = from_optional(lengths, "lengths", true);
            auto tape = std::make_unique<Tape>();
            grux::GruOutput out;
            {
              py::gil_scoped_release nogil;
              out = g.forward_train(tx, th, tl, tape->tape, dropout_seed, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n), std::move(tape));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("lengths") = py::none(),
          py::arg("dropout_seed") = 0, py::arg("threads") = 0)
      .def(
          "backward",
          [](const grux::Gru& g, const Tape& tape, const py::object& dout,
             const py::object& dh_n, int threads) {
            if (tape.tape.empty()) throw grux::Error("backward: the tape is empty (use the tape forward_train returned)");
            const Tensor to = from_optional(dout, "grad_output"), th = from_optional(dh_n, "grad_h_n");
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
      .def(py::init([](int64_t I, int64_t H, bool bias, bool reset_before,
                       const std::string& dtype, uint64_t seed) {
             return grux::GruCell(I, H, bias, form_of(reset_before), parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("bias"),
           py::arg("reset_before"), py::arg("dtype"), py::arg("seed"))
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
      .def_property_readonly("dtype", [](const grux::GruCell& c) {
        return std::string(c.weights().w_ih.dtype() == DType::f32 ? "float32" : "float64");
      })
      .def(
          "forward",
          [](const grux::GruCell& c, const py::object& x, const py::object& h, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx");
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = c.forward(tx, th, threads);
            }
            return to_array(out);
          },
          py::arg("input"), py::arg("hx") = py::none(), py::arg("threads") = 0)
      .def(
          "backward",
          [](const grux::GruCell& c, const py::object& x, const py::object& h,
             const py::object& dh_new, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx"),
                         td = from_array(dh_new, "grad_output");
            grux::GruCell::Grads g;
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

  py::class_<grux::GruStream>(m, "GruStream")
      .def(py::init([](const grux::Gru& g, int64_t batch, const py::object& h0, int threads) {
             return std::make_unique<grux::GruStream>(g, batch, from_optional(h0, "h0"), threads);
           }),
           py::arg("gru"), py::arg("batch"), py::arg("h0") = py::none(), py::arg("threads") = 0)
      .def(
          "step",
          [](grux::GruStream& s, const py::object& frames) {
            const Tensor tx = from_array(frames, "frames");
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = s.step(tx);
            }
            return to_array(out);
          },
          py::arg("frames"))
      .def("state", [](const grux::GruStream& s) { return to_array(s.state()); })
      .def(
          "reset", [](grux::GruStream& s, const py::object& h0) { s.reset(from_optional(h0, "h0")); },
          py::arg("h0") = py::none());
}
