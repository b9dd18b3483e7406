// grux._grux: Lstm, LstmCell (lstm.h) and the tape Lstm::forward_train fills; the LSTM's
// stream is module.cpp's Stream. The Python classes grux.LSTM, grux.LSTMCell (python/grux/
// _lstm.py) and grux.torch.LSTM / LSTMCell wrap these; this file holds no policy.
#include "grux/lstm.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "convert.h"
#include "grux/error.h"
#include "grux/precision.h"

namespace py = pybind11;
using grux::Tensor;
using grux_py::from_array;
using grux_py::from_optional;
using grux_py::to_array;
using grux_py::to_dict;

namespace {

grux::LstmConfig make_config(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                             bool batch_first, double dropout, bool bidirectional,
                             int64_t proj_size) {
  grux::LstmConfig c;
  c.input_size = input_size, c.hidden_size = hidden_size, c.num_layers = num_layers;
  c.bias = bias, c.batch_first = batch_first, c.dropout = dropout;
  c.bidirectional = bidirectional, c.proj_size = proj_size;
  c.validate();
  return c;
}

// What forward_train saved (LstmTape is move-only, so it lives behind a unique_ptr). Named
// apart from module.cpp's Tape: pybind11 keys types by typeid, and clang gives two types of
// the same name in different files' anonymous namespaces equal typeids.
struct LstmTapeHolder {
  grux::LstmTape tape;
};

py::dict weights_dict(const grux::LstmLayerWeights& w) {
  py::dict d;
  d["weight_ih"] = to_array(w.w_ih);
  d["weight_hh"] = to_array(w.w_hh);
  if (w.b_ih.defined()) {
    d["bias_ih"] = to_array(w.b_ih);
    d["bias_hh"] = to_array(w.b_hh);
  }
  return d;
}

}  // namespace

void grux_py::bind_lstm(py::module_& m) {
  py::class_<LstmTapeHolder>(m, "LstmTape");

  py::class_<grux::Lstm>(m, "Lstm")
      .def(py::init([](int64_t I, int64_t H, int64_t L, bool bias, bool batch_first, double dropout,
                       bool bidirectional, int64_t proj_size, const std::string& dtype,
                       uint64_t seed) {
             return grux::Lstm(
                 make_config(I, H, L, bias, batch_first, dropout, bidirectional, proj_size),
                 parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers"), py::arg("bias"),
           py::arg("batch_first"), py::arg("dropout"), py::arg("bidirectional"),
           py::arg("proj_size"), py::arg("dtype"), py::arg("seed"))
      .def_static(
          "from_state_dict",
          [](const py::dict& state, bool batch_first, double dropout) {
            grux::LstmConfig options;
            options.batch_first = batch_first, options.dropout = dropout;
            return grux::Lstm::from_state_dict(from_dict(state, "state_dict"), options);
          },
          py::arg("state"), py::arg("batch_first"), py::arg("dropout"))
      .def("state_dict", [](const grux::Lstm& l) { return to_dict(l.state_dict()); })
      .def_property_readonly("dtype", [](const grux::Lstm& l) { return dtype_str(l.dtype()); })
      .def_property_readonly("input_size",
                             [](const grux::Lstm& l) { return l.config().input_size; })
      .def_property_readonly("hidden_size",
                             [](const grux::Lstm& l) { return l.config().hidden_size; })
      .def_property_readonly("num_layers",
                             [](const grux::Lstm& l) { return l.config().num_layers; })
      .def_property_readonly("bias", [](const grux::Lstm& l) { return l.config().bias; })
      .def_property_readonly("bidirectional",
                             [](const grux::Lstm& l) { return l.config().bidirectional; })
      .def_property_readonly("proj_size", [](const grux::Lstm& l) { return l.config().proj_size; })
      .def(
          "forward",
          [](const grux::Lstm& l, const py::object& x, const py::object& h0, const py::object& c0,
             const py::object& lengths, int threads, const std::string& precision) {
            const grux::Precision p = grux::parse_precision(precision);
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tc = from_optional(c0, "c0"), tl = from_optional(lengths, "lengths", true);
            grux::LstmOutput out;
            {
              py::gil_scoped_release nogil;
              // bf16 / int8: the weights converted for this call (LstmInference).
              out = p == grux::Precision::f32
                        ? l.forward(tx, th, tc, tl, threads)
                        : grux::LstmInference(l, p).forward(tx, th, tc, tl, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n), to_array(out.c_n));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("c0") = py::none(),
          py::arg("lengths") = py::none(), py::arg("threads") = 0, py::arg("precision") = "f32")
      .def(
          "forward_train",
          [](const grux::Lstm& l, const py::object& x, const py::object& h0, const py::object& c0,
             const py::object& lengths, uint64_t dropout_seed, int threads,
             const std::string& precision) {
            const grux::Precision p = grux::parse_precision(precision);
            const Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                         tc = from_optional(c0, "c0"), tl = from_optional(lengths, "lengths", true);
            auto tape = std::make_unique<LstmTapeHolder>();
            grux::LstmOutput out;
            {
              py::gil_scoped_release nogil;
              out = l.forward_train(tx, th, tc, tl, tape->tape, dropout_seed, p, {}, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n), to_array(out.c_n),
                                  std::move(tape));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("c0") = py::none(),
          py::arg("lengths") = py::none(), py::arg("dropout_seed") = 0, py::arg("threads") = 0,
          py::arg("precision") = "f32")
      .def(
          "backward",
          [](const grux::Lstm& l, const LstmTapeHolder& tape, const py::object& dout,
             const py::object& dh_n, const py::object& dc_n, int threads) {
            if (tape.tape.empty())
              throw grux::Error(
                  "backward: the tape is empty (use the tape forward_train returned)");
            const Tensor to = from_optional(dout, "grad_output"),
                         th = from_optional(dh_n, "grad_h_n"), tc = from_optional(dc_n, "grad_c_n");
            grux::LstmGrads g;
            {
              py::gil_scoped_release nogil;
              g = l.backward(tape.tape, to, th, tc, threads);
            }
            py::dict d = to_dict(g.state_dict(l.config()));
            d["input"] = to_array(g.dinput);
            d["h0"] = to_array(g.dh0);
            d["c0"] = to_array(g.dc0);
            return d;
          },
          py::arg("tape"), py::arg("grad_output") = py::none(), py::arg("grad_h_n") = py::none(),
          py::arg("grad_c_n") = py::none(), py::arg("threads") = 0);

  py::class_<grux::LstmCell>(m, "LstmCell")
      .def(py::init([](int64_t I, int64_t H, bool bias, const std::string& dtype, uint64_t seed) {
             return grux::LstmCell(I, H, bias, parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("bias"), py::arg("dtype"),
           py::arg("seed"))
      .def_static(
          "from_state_dict",
          [](const py::dict& state) {
            return grux::LstmCell::from_state_dict(from_dict(state, "state_dict"));
          },
          py::arg("state"))
      .def("state_dict", [](const grux::LstmCell& c) { return to_dict(c.state_dict()); })
      .def_property_readonly("input_size", &grux::LstmCell::input_size)
      .def_property_readonly("hidden_size", &grux::LstmCell::hidden_size)
      .def_property_readonly(
          "dtype", [](const grux::LstmCell& c) { return dtype_str(c.weights().w_ih.dtype()); })
      .def(
          "forward",
          [](const grux::LstmCell& c, const py::object& x, const py::object& h,
             const py::object& cs, int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx"),
                         tc = from_optional(cs, "cx");
            std::pair<Tensor, Tensor> out;
            {
              py::gil_scoped_release nogil;
              out = c.forward(tx, th, tc, threads);
            }
            return py::make_tuple(grux_py::to_like_result(out.first, x),
                                  grux_py::to_like_result(out.second, x));
          },
          py::arg("input"), py::arg("hx") = py::none(), py::arg("cx") = py::none(),
          py::arg("threads") = 0)
      .def(
          "backward",
          [](const grux::LstmCell& c, const py::object& x, const py::object& h,
             const py::object& cs, const py::object& dh_new, const py::object& dc_new,
             int threads) {
            const Tensor tx = from_array(x, "input"), th = from_optional(h, "hx"),
                         tc = from_optional(cs, "cx"), tdh = from_optional(dh_new, "grad_h"),
                         tdc = from_optional(dc_new, "grad_c");
            grux::LstmCellGrads g;
            {
              py::gil_scoped_release nogil;
              g = c.backward(tx, th, tc, tdh, tdc, threads);
            }
            py::dict d = weights_dict(g.dweights);
            d["input"] = to_array(g.dinput);
            d["hx"] = to_array(g.dh);
            d["cx"] = to_array(g.dc);
            return d;
          },
          py::arg("input"), py::arg("hx"), py::arg("cx"), py::arg("grad_h"), py::arg("grad_c"),
          py::arg("threads") = 0);
}
