// grux._grux: prefix_scan, reduce_scan (a built-in kernel by name, or a Python callable driven
// through grux's ScanFn), affine_scan and affine_scan_backward (scan.h). The Python functions
// (python/grux/_scan.py) map names and known callables, convert torch tensors and hold the
// autograd glue; this file holds no policy.
//
// A Python combine runs with threads = 1: the scan runs with the GIL released and the
// callback takes it back for each call (so it cannot deadlock against the calling thread).
// A Python exception raised by the callable travels through the C++ scan as
// py::error_already_set and is restored unchanged when the binding returns.
#include "grux/scan.h"

#include <cstdint>
#include <string>
#include <utility>

#include "convert.h"
#include "grux/error.h"

namespace py = pybind11;
using grux::Tensor;
using grux_py::from_array;
using grux_py::from_optional;
using grux_py::to_array;

namespace {

grux::ScanOptions scan_options(bool exclusive, bool reverse, int threads, Tensor identity = {}) {
  grux::ScanOptions o;
  o.exclusive = exclusive, o.reverse = reverse, o.threads = threads;
  o.identity = std::move(identity);
  return o;
}

grux::AffineScanOptions affine_options(bool reverse, bool log_space, int threads) {
  grux::AffineScanOptions o;
  o.reverse = reverse, o.log_space = log_space, o.threads = threads;
  return o;
}

// A Python callable as a grux::ScanFn. The operands are handed over as NumPy arrays over the
// tensors' memory (read-only when `readonly`); the result must be array-like with the slice's
// shape and dtype. `fn` is borrowed: the binding's frame keeps it alive for the whole scan, so
// copying this object (std::function does) touches no Python reference counts.
struct PyCombine {
  py::handle fn;
  std::string name;  // the argument named in errors ("prefix_func")
  grux::Shape slice;
  grux::DType dtype;
  bool readonly;

  py::object operand(const Tensor& t) const {
    py::object a = to_array(t);
    if (readonly) a.attr("setflags")(py::arg("write") = false);
    return a;
  }

  Tensor operator()(const Tensor& earlier, const Tensor& later) const {
    py::gil_scoped_acquire gil;
    py::object r = fn(operand(earlier), operand(later));
    // Anything NumPy makes a numeric array of (a NumPy scalar from 0-d operands) is taken.
    py::array arr = py::array::ensure(r);
    if (!arr || std::string("biufc").find(arr.dtype().kind()) == std::string::npos)
      throw grux::Error(
          name + ": the function returned " + py::str(py::type::of(r)).cast<std::string>() +
          ", expected an array of shape " + grux::shape_str(slice) + " (one slice of x)");
    const grux::Shape shape(arr.shape(), arr.shape() + arr.ndim());
    const bool same_dtype =
        arr.dtype().kind() == 'f' && arr.dtype().itemsize() == py::ssize_t(grux::dtype_size(dtype));
    if (shape != slice || !same_dtype)
      throw grux::Error(name + ": the function returned shape " + grux::shape_str(shape) + " " +
                        py::str(static_cast<py::handle>(arr.dtype())).cast<std::string>() +
                        ", expected " + grux::shape_str(slice) + " " + grux_py::dtype_str(dtype) +
                        " (one slice of x; the function must preserve shape and dtype)");
    return from_array(arr, name.c_str());
  }
};

grux::Shape slice_shape(const Tensor& x, int64_t dim) {
  grux::Shape s = x.shape();
  const int64_t r = x.dim();
  if (r > 0 && dim >= -r && dim < r) s.erase(s.begin() + (dim < 0 ? dim + r : dim));
  return s;  // an invalid dim is reported by the scan itself
}

// The built-in kernels, by grux's name (scan_op_name).
Tensor scan_builtin(bool reduce, const py::object& x, int64_t dim, const std::string& op,
                    bool exclusive, bool reverse, int threads) {
  const Tensor tx = from_array(x, "x");
  const grux::ScanOp o = grux::parse_scan_op(op);
  const grux::ScanOptions opt = scan_options(exclusive, reverse, threads);
  py::gil_scoped_release nogil;
  return reduce ? grux::reduce_scan(tx, dim, o, opt) : grux::prefix_scan(tx, dim, o, opt);
}

// A Python callable, on one thread.
Tensor scan_callable(bool reduce, const py::object& x, int64_t dim, const py::function& fn,
                     const std::string& name, bool exclusive, bool reverse,
                     const py::object& identity, bool readonly) {
  const Tensor tx = from_array(x, "x");
  const grux::ScanOptions opt =
      scan_options(exclusive, reverse, 1, from_optional(identity, "identity"));
  const grux::ScanFn op = PyCombine{fn, name, slice_shape(tx, dim), tx.dtype(), readonly};
  py::gil_scoped_release nogil;
  return reduce ? grux::reduce_scan(tx, dim, op, opt) : grux::prefix_scan(tx, dim, op, opt);
}

}  // namespace

void grux_py::bind_scan(py::module_& m) {
  m.def(
      "prefix_scan",
      [](const py::object& x, int64_t dim, const std::string& op, bool exclusive, bool reverse,
         int threads) {
        return to_array(scan_builtin(false, x, dim, op, exclusive, reverse, threads));
      },
      py::arg("x"), py::arg("dim"), py::arg("op"), py::arg("exclusive"), py::arg("reverse"),
      py::arg("threads"));
  m.def(
      "reduce_scan",
      [](const py::object& x, int64_t dim, const std::string& op, int threads) {
        return to_array(scan_builtin(true, x, dim, op, false, false, threads));
      },
      py::arg("x"), py::arg("dim"), py::arg("op"), py::arg("threads"));
  m.def(
      "prefix_scan_callable",
      [](const py::object& x, int64_t dim, const py::function& fn, const std::string& name,
         bool exclusive, bool reverse, const py::object& identity, bool readonly) {
        return to_array(
            scan_callable(false, x, dim, fn, name, exclusive, reverse, identity, readonly));
      },
      py::arg("x"), py::arg("dim"), py::arg("fn"), py::arg("name"), py::arg("exclusive"),
      py::arg("reverse"), py::arg("identity"), py::arg("readonly"));
  m.def(
      "reduce_scan_callable",
      [](const py::object& x, int64_t dim, const py::function& fn, const std::string& name,
         bool readonly) {
        return to_array(scan_callable(true, x, dim, fn, name, false, false, py::none(), readonly));
      },
      py::arg("x"), py::arg("dim"), py::arg("fn"), py::arg("name"), py::arg("readonly"));
  m.def(
      "affine_scan",
      [](const py::object& a, const py::object& b, int64_t dim, const py::object& h0, bool reverse,
         bool log_space, int threads) {
        const Tensor ta = from_array(a, "a"), tb = from_array(b, "b"), th = from_optional(h0, "h0");
        Tensor h;
        {
          py::gil_scoped_release nogil;
          h = grux::affine_scan(ta, tb, dim, th, affine_options(reverse, log_space, threads));
        }
        return to_array(h);
      },
      py::arg("a"), py::arg("b"), py::arg("dim"), py::arg("h0"), py::arg("reverse"),
      py::arg("log_space"), py::arg("threads"));
  m.def(
      "affine_scan_backward",
      [](const py::object& a, const py::object& h0, const py::object& h, const py::object& dh,
         int64_t dim, bool reverse, bool log_space, int threads) {
        const Tensor ta = from_array(a, "a"), th0 = from_optional(h0, "h0"),
                     th = from_array(h, "h"), tdh = from_array(dh, "grad_h");
        grux::AffineScanGrads g;
        {
          py::gil_scoped_release nogil;
          g = grux::affine_scan_backward(ta, th0, th, tdh, dim,
                                         affine_options(reverse, log_space, threads));
        }
        return py::make_tuple(to_array(g.da), to_array(g.db), to_array(g.dh0));
      },
      py::arg("a"), py::arg("h0"), py::arg("h"), py::arg("grad_h"), py::arg("dim"),
      py::arg("reverse"), py::arg("log_space"), py::arg("threads"));
}
