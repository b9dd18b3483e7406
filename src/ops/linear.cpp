// nn.Linear driver: validates x, w, b (and dy) at the API boundary, normalizes strided
// operands for the GEMM, and calls the optimized or the reference kernels (cpu/linear.h).
#include "cpu/linear.h"

#include <fmt/format.h>

#include <regex>

#include "cpu/ref/nn_ref.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "ops/nn_util.h"

namespace grux {

namespace {

// x (M, I) and w (O, I): defined, 2-D, one floating dtype, CPU, matching I.
void check_x_w(const char* op, const Tensor& x, const Tensor& w) {
  ops::check_float_cpu(op, "x", x);
  ops::check_float_cpu(op, "w", w);
  ops::check_dim(op, "x", x, 2, "(M, I)");
  ops::check_dim(op, "w", w, 2, "(O, I)");
  check_same_dtype(op, "x", x, "w", w);
  check_same_device(op, "x", x, "w", w);
  if (w.size(1) != x.size(1))
    throw Error(fmt::format("{}: w has shape {}, expected (O, {}) to match x's {} input features",
                            op, shape_str(w.shape()), x.size(1), x.size(1)));
}

template <typename T>
Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t M = x.size(0), I = x.size(1), O = w.size(0);
  const auto xo = ops::mat_operand<T>(x), wo = ops::mat_operand<T>(w);
  Tensor bc = b.defined() ? b.contiguous() : Tensor();
  Tensor y = Tensor::empty({M, O}, dtype_of<T>());
  auto kernel = reference_kernels() ? &cpu::ref::linear_forward<T> : &cpu::linear_forward<T>;
  kernel(M, I, O, xo.data, xo.ld, xo.trans, wo.data, wo.ld, wo.trans,
         bc.defined() ? bc.data<T>() : nullptr, y.data<T>());
  return y;
}

template <typename T>
LinearGrads backward(const Tensor& x, const Tensor& w, bool bias, const Tensor& dy, bool want_dx) {
  const int64_t M = x.size(0), I = x.size(1), O = w.size(0);
  const auto xo = ops::mat_operand<T>(x), wo = ops::mat_operand<T>(w);
  const auto dyo = ops::row_major_operand<T>(dy);
  LinearGrads g;
  if (want_dx) g.dx = Tensor::empty({M, I}, dtype_of<T>());
  g.dw = Tensor::empty({O, I}, dtype_of<T>());
  if (bias) g.db = Tensor::empty({O}, dtype_of<T>());
  auto kernel = reference_kernels() ? &cpu::ref::linear_backward<T> : &cpu::linear_backward<T>;
  kernel(M, I, O, xo.data, xo.ld, xo.trans, wo.data, wo.ld, wo.trans, dyo.data, dyo.ld,
         want_dx ? g.dx.data<T>() : nullptr, g.dw.data<T>(), bias ? g.db.data<T>() : nullptr);
  return g;
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "linear_forward";
  check_x_w(op, x, w);
  if (b.defined()) {
    ops::check_float_cpu(op, "b", b);
    check_same_dtype(op, "x", x, "b", b);
    check_same_device(op, "x", x, "b", b);
    check_shape(op, "b", b, {w.size(0)});
  }
  return x.dtype() == DType::f32 ? forward<float>(x, w, b) : forward<double>(x, w, b);
}

LinearGrads linear_backward(const Tensor& x, const Tensor& w, bool bias, const Tensor& dy,
                            bool want_dx) {
  const char* op = "linear_backward";
  check_x_w(op, x, w);
  ops::check_float_cpu(op, "dy", dy);
  check_same_dtype(op, "x", x, "dy", dy);
  check_same_device(op, "x", x, "dy", dy);
  check_shape(op, "dy", dy, {x.size(0), w.size(0)});
  return x.dtype() == DType::f32 ? backward<float>(x, w, bias, dy, want_dx)
                                 : backward<double>(x, w, bias, dy, want_dx);
}

LinearProblem LinearProblem::parse(const std::string& text) {
  static const std::regex re(R"(b(\d{1,9})i(\d{1,9})o(\d{1,9}))");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw Error(fmt::format(
        "Linear problem descriptor '{}' is malformed (expected b{{B}}i{{I}}o{{O}}, e.g. "
        "b32i256o512)",
        text));
  LinearProblem p;
  p.B = std::stoll(m[1].str()), p.I = std::stoll(m[2].str()), p.O = std::stoll(m[3].str());
  for (auto [name, v] : {std::pair{"b", p.B}, {"i", p.I}, {"o", p.O}})
    if (v < 1)
      throw Error(
          fmt::format("Linear problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  return p;
}

std::string LinearProblem::descriptor() const {
  return fmt::format("b{}i{}o{}", B, I, O);
}

}  // namespace grux
