// grux._grux: the C++ engine for Python (pybind11), and its GRU classes; the other areas are
// in scan.cpp, mingru.cpp, conv.cpp, cost.cpp, the array conversions in convert.h. Arrays
// cross without copies (convert.h). The GIL is released while grux computes. grux::Error
// surfaces as grux.Error (a ValueError) with the C++ message. The Python-facing classes
// (python/grux/) wrap these; this file holds no policy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "convert.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grux/error.h"
#include "grux/gru.h"
#include "grux/runtime.h"
#include "grux/tensor.h"
#include "grux/version.h"

namespace py = pybind11;
using namespace grux_py;
using grux::DType;
using grux::Tensor;

namespace {

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

// A GruStream and what the binding's fast path needs to know of it.
struct Stream {
  std::unique_ptr<grux::GruStream> stream;
  int64_t N = 0, I = 0, H = 0;  // N = 0: unbatched
  bool batch_first = false;
  DType dtype = DType::f32;

  // Frames handed straight to GruStream::process when they are a C-contiguous array of the
  // stream's dtype in time-major layout ((N, I), (t, N, I); unbatched (I), (t, I)): no Tensor
  // on the way in or out, the result a new array. Anything else (other types, layouts,
  // wrong shapes, whose errors the Tensor path words) returns nullopt. The GIL is released
  // for any step that computes more than a few microseconds; shorter ones keep it, since
  // releasing and taking it back costs about as much as they do.
  template <class T>
  std::optional<py::object> step_raw(const py::object& frames) {
    if (!py::isinstance<py::array_t<T>>(frames)) return std::nullopt;
    auto a = py::reinterpret_borrow<py::array>(frames);
    if (!a.dtype().is(py::dtype::of<T>()) || !(a.flags() & py::array::c_style) ||
        reinterpret_cast<uintptr_t>(a.data()) % sizeof(T) != 0)
      return std::nullopt;
    const int64_t frame_dims = N == 0 ? 1 : 2, rows = N == 0 ? 1 : N;
    const bool chunk = a.ndim() == frame_dims + 1;
    if ((a.ndim() != frame_dims && !chunk) || (chunk && batch_first && N > 0)) return std::nullopt;
    if (a.shape(a.ndim() - 1) != I || (N > 0 && a.shape(a.ndim() - 2) != N)) return std::nullopt;
    const int64_t t = chunk ? a.shape(0) : 1;
    std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
    shape.back() = H;
    py::array_t<T> out(shape);
    const T* in = static_cast<const T*>(a.data());
    T* o = out.mutable_data();
    if (t * rows * 3 * H * (I + H) >= (int64_t(1) << 16)) {
      py::gil_scoped_release nogil;
      stream->process(in, o, t);
    } else {
      stream->process(in, o, t);
    }
    return py::object(std::move(out));
  }
};

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
  bind_gru(m);
  bind_scan(m);
  bind_mingru(m);
  bind_conv(m);
  bind_cost(m);
}

// Gru, GruCell, GruStream.
void grux_py::bind_gru(py::module_& m) {
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

  py::class_<Stream>(m, "GruStream")
      .def(py::init([](const grux::Gru& g, int64_t batch, const py::object& h0, int threads) {
             auto st = std::make_unique<Stream>();
             st->stream = std::make_unique<grux::GruStream>(g, batch, from_optional(h0, "h0"),
                                                            threads);
             st->N = batch, st->I = g.config().input_size, st->H = g.config().hidden_size;
             st->batch_first = g.config().batch_first, st->dtype = g.dtype();
             return st;
           }),
           py::arg("gru"), py::arg("batch"), py::arg("h0") = py::none(), py::arg("threads") = 0)
      .def(
          "step",
          [](Stream& s, const py::object& frames) -> py::object {
            if (s.dtype == DType::f32) {
              if (auto r = s.step_raw<float>(frames)) return *r;
            } else if (auto r = s.step_raw<double>(frames)) {
              return *r;
            }
            const Tensor tx = from_array(frames, "frames");
            Tensor out;
            {
              py::gil_scoped_release nogil;
              out = s.stream->step(tx);
            }
            return to_array(out);
          },
          py::arg("frames"))
      .def("state", [](const Stream& s) { return to_array(s.stream->state()); })
      .def(
          "reset", [](Stream& s, const py::object& h0) { s.stream->reset(from_optional(h0, "h0")); },
          py::arg("h0") = py::none());
}
