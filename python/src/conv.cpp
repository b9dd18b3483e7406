// grux._grux: conv1d, conv2d forward and backward (conv.h), rearrange (rearrange.h). The
// Python functions (python/grux/_conv.py) check and normalise the options; the C++ library
// checks the shapes. Results are new arrays (convolution) or, where grux returns a view, an
// array over the input's memory (rearrange).
#include "grux/conv.h"

#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "convert.h"
#include "grux/rearrange.h"

namespace py = pybind11;
using grux_py::from_array;
using grux_py::from_optional;
using grux_py::to_array;

namespace {

using Pair = std::array<int64_t, 2>;

grux::Conv2dOptions options2d(Pair stride, Pair padding, Pair dilation, int64_t groups,
                              const std::string& algo, int threads) {
  grux::Conv2dOptions o;
  o.stride = {stride[0], stride[1]}, o.padding = {padding[0], padding[1]};
  o.dilation = {dilation[0], dilation[1]};
  o.groups = groups, o.algo = grux::parse_conv_algo(algo), o.threads = threads;
  return o;
}

grux::Conv1dOptions options1d(int64_t stride, int64_t padding, int64_t dilation, int64_t groups,
                              const std::string& algo, int threads) {
  grux::Conv1dOptions o;
  o.stride = stride, o.padding = padding, o.dilation = dilation, o.groups = groups;
  o.algo = grux::parse_conv_algo(algo), o.threads = threads;
  return o;
}

py::dict grads_dict(const grux::ConvGrads& g) {
  py::dict d;
  d["input"] = to_array(g.dinput);
  d["weight"] = to_array(g.dweight);
  d["bias"] = to_array(g.dbias);  // None without a bias
  return d;
}

}  // namespace

void grux_py::bind_conv(py::module_& m) {
  m.def(
      "conv2d_forward",
      [](const py::object& x, const py::object& w, const py::object& b, Pair stride, Pair padding,
         Pair dilation, int64_t groups, const std::string& algo, int threads) {
        const auto o = options2d(stride, padding, dilation, groups, algo, threads);
        const grux::Tensor tx = from_array(x, "input"), tw = from_array(w, "weight"),
                           tb = from_optional(b, "bias");
        grux::Tensor y;
        {
          py::gil_scoped_release nogil;
          y = grux::conv2d_forward(tx, tw, tb, o);
        }
        return to_array(y);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
      py::arg("dilation"), py::arg("groups"), py::arg("algo"), py::arg("threads"));
  m.def(
      "conv2d_backward",
      [](const py::object& x, const py::object& w, const py::object& dy, bool bias, Pair stride,
         Pair padding, Pair dilation, int64_t groups, const std::string& algo, int threads) {
        const auto o = options2d(stride, padding, dilation, groups, algo, threads);
        const grux::Tensor tx = from_array(x, "input"), tw = from_array(w, "weight"),
                           tdy = from_array(dy, "grad_output");
        grux::ConvGrads g;
        {
          py::gil_scoped_release nogil;
          g = grux::conv2d_backward(tx, tw, tdy, bias, o);
        }
        return grads_dict(g);
      },
      py::arg("input"), py::arg("weight"), py::arg("grad_output"), py::arg("bias"),
      py::arg("stride"), py::arg("padding"), py::arg("dilation"), py::arg("groups"),
      py::arg("algo"), py::arg("threads"));
  m.def(
      "conv1d_forward",
      [](const py::object& x, const py::object& w, const py::object& b, int64_t stride,
         int64_t padding, int64_t dilation, int64_t groups, const std::string& algo, int threads) {
        const auto o = options1d(stride, padding, dilation, groups, algo, threads);
        const grux::Tensor tx = from_array(x, "input"), tw = from_array(w, "weight"),
                           tb = from_optional(b, "bias");
        grux::Tensor y;
        {
          py::gil_scoped_release nogil;
          y = grux::conv1d_forward(tx, tw, tb, o);
        }
        return to_array(y);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
      py::arg("dilation"), py::arg("groups"), py::arg("algo"), py::arg("threads"));
  m.def(
      "conv1d_backward",
      [](const py::object& x, const py::object& w, const py::object& dy, bool bias, int64_t stride,
         int64_t padding, int64_t dilation, int64_t groups, const std::string& algo, int threads) {
        const auto o = options1d(stride, padding, dilation, groups, algo, threads);
        const grux::Tensor tx = from_array(x, "input"), tw = from_array(w, "weight"),
                           tdy = from_array(dy, "grad_output");
        grux::ConvGrads g;
        {
          py::gil_scoped_release nogil;
          g = grux::conv1d_backward(tx, tw, tdy, bias, o);
        }
        return grads_dict(g);
      },
      py::arg("input"), py::arg("weight"), py::arg("grad_output"), py::arg("bias"),
      py::arg("stride"), py::arg("padding"), py::arg("dilation"), py::arg("groups"),
      py::arg("algo"), py::arg("threads"));
  m.def(
      "rearrange",
      [](const py::object& x, const std::string& pattern,
         const std::map<std::string, int64_t>& sizes) {
        const grux::Tensor t = from_array(x, "tensor");
        grux::Tensor y;
        {
          py::gil_scoped_release nogil;
          y = grux::rearrange(t, pattern, sizes);
        }
        return to_array(y);
      },
      py::arg("tensor"), py::arg("pattern"), py::arg("sizes"));
}
