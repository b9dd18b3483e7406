// grux._grux: MinGru (mingru.h) and the tape its forward_train fills. The Python class
// grux.MinGRU (python/grux/_mingru.py) wraps these; this file holds no policy.
#include "grux/mingru.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "convert.h"
#include "grux/error.h"

namespace py = pybind11;
using grux_py::from_array;
using grux_py::from_optional;
using grux_py::to_array;
using grux_py::to_dict;

namespace {

grux::MinGruConfig make_config(int64_t input_size, int64_t hidden_size, int64_t num_layers,
                               bool bias, bool batch_first, bool log_space) {
  grux::MinGruConfig c;
  c.input_size = input_size, c.hidden_size = hidden_size, c.num_layers = num_layers;
  c.bias = bias, c.batch_first = batch_first, c.log_space = log_space;
  c.validate();
  return c;
}

// What forward_train saved (MinGruTape is move-only, so it lives behind a unique_ptr).
struct MinTape {
  grux::MinGruTape tape;
};

}  // namespace

void grux_py::bind_mingru(py::module_& m) {
  py::class_<MinTape>(m, "MinGruTape");

  py::class_<grux::MinGru>(m, "MinGru")
      .def(py::init([](int64_t I, int64_t H, int64_t L, bool bias, bool batch_first, bool log_space,
                       const std::string& dtype, uint64_t seed) {
             return grux::MinGru(make_config(I, H, L, bias, batch_first, log_space),
                                 parse_dtype(dtype), seed);
           }),
           py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers"), py::arg("bias"),
           py::arg("batch_first"), py::arg("log_space"), py::arg("dtype"), py::arg("seed"))
      .def_static(
          "from_state_dict",
          [](const py::dict& state, bool batch_first, bool log_space) {
            grux::MinGruConfig options;
            options.batch_first = batch_first, options.log_space = log_space;
            return grux::MinGru::from_state_dict(from_dict(state, "state_dict"), options);
          },
          py::arg("state"), py::arg("batch_first"), py::arg("log_space"))
      .def("state_dict", [](const grux::MinGru& g) { return to_dict(g.state_dict()); })
      .def_property_readonly("dtype", [](const grux::MinGru& g) { return dtype_str(g.dtype()); })
      .def_property_readonly("input_size",
                             [](const grux::MinGru& g) { return g.config().input_size; })
      .def_property_readonly("hidden_size",
                             [](const grux::MinGru& g) { return g.config().hidden_size; })
      .def_property_readonly("num_layers",
                             [](const grux::MinGru& g) { return g.config().num_layers; })
      .def_property_readonly("bias", [](const grux::MinGru& g) { return g.config().bias; })
      .def(
          "forward",
          [](const grux::MinGru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, int threads) {
            const grux::Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                               tl = from_optional(lengths, "lengths", true);
            grux::MinGruOutput out;
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
          [](const grux::MinGru& g, const py::object& x, const py::object& h0,
             const py::object& lengths, int threads) {
            const grux::Tensor tx = from_array(x, "input"), th = from_optional(h0, "h0"),
                               tl = from_optional(lengths, "lengths", true);
            auto tape = std::make_unique<MinTape>();
            grux::MinGruOutput out;
            {
              py::gil_scoped_release nogil;
              out = g.forward_train(tx, th, tl, tape->tape, threads);
            }
            return py::make_tuple(to_array(out.output), to_array(out.h_n), std::move(tape));
          },
          py::arg("input"), py::arg("h0") = py::none(), py::arg("lengths") = py::none(),
          py::arg("threads") = 0)
      .def(
          "backward",
          [](const grux::MinGru& g, const MinTape& tape, const py::object& dout,
             const py::object& dh_n, int threads) {
            if (tape.tape.empty())
              throw grux::Error(
                  "backward: the tape is empty (use the tape forward_train returned)");
            const grux::Tensor to = from_optional(dout, "grad_output"),
                               th = from_optional(dh_n, "grad_h_n");
            grux::MinGruGrads grads;
            {
              py::gil_scoped_release nogil;
              grads = g.backward(tape.tape, to, th, threads);
            }
            py::dict d = to_dict(grads.state_dict(g.config()));
            d["input"] = to_array(grads.dinput);
            d["h0"] = to_array(grads.dh0);
            return d;
          },
          py::arg("tape"), py::arg("grad_output") = py::none(), py::arg("grad_h_n") = py::none(),
          py::arg("threads") = 0);
}
