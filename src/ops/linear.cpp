// nn.Linear driver: validates input, weight, bias (and doutput) at the API boundary, normalizes
// strided operands for the GEMM, and calls the optimized or the reference kernels (cpu/linear.h).
#include "cpu/linear.h"

#include <fmt/format.h>

#include "core/descriptor.h"
#include "cpu/ref/nn_ref.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "ops/nn_util.h"
#include "ops/recurrent.h"
#include "ops/threads_option.h"

namespace grux {

namespace {

// input (M, I) and weight (O, I): defined, 2-D, one floating dtype, CPU, matching I.
void check_input_weight(const char* op, const Tensor& input, const Tensor& weight) {
  ops::check_float_cpu(op, "input", input);
  ops::check_float_cpu(op, "weight", weight);
  ops::check_dim(op, "input", input, 2, "(M, I)");
  ops::check_dim(op, "weight", weight, 2, "(O, I)");
  check_same_dtype(op, "input", input, "weight", weight);
  check_same_device(op, "input", input, "weight", weight);
  if (weight.size(1) != input.size(1))
    throw Error(
        fmt::format("{}: weight has shape {}, expected (O, {}) to match input's {} features", op,
                    shape_str(weight.shape()), input.size(1), input.size(1)));
}

template <typename T>
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
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
LinearGrads linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, bool bias,
                            bool want_dx) {
  const int64_t M = x.size(0), I = x.size(1), O = w.size(0);
  const auto xo = ops::mat_operand<T>(x), wo = ops::mat_operand<T>(w);
  const auto dyo = ops::row_major_operand<T>(dy);
  LinearGrads g;
  if (want_dx) g.dinput = Tensor::empty({M, I}, dtype_of<T>());
  g.dweight = Tensor::empty({O, I}, dtype_of<T>());
  if (bias) g.dbias = Tensor::empty({O}, dtype_of<T>());
  auto kernel = reference_kernels() ? &cpu::ref::linear_backward<T> : &cpu::linear_backward<T>;
  kernel(M, I, O, xo.data, xo.ld, xo.trans, wo.data, wo.ld, wo.trans, dyo.data, dyo.ld,
         want_dx ? g.dinput.data<T>() : nullptr, g.dweight.data<T>(),
         bias ? g.dbias.data<T>() : nullptr);
  return g;
}

}  // namespace

Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, int threads) {
  const char* op = "linear_forward";
  ops::ThreadsScope scope(op, threads);
  check_input_weight(op, input, weight);
  if (bias.defined()) {
    ops::check_float_cpu(op, "bias", bias);
    check_same_dtype(op, "input", input, "bias", bias);
    check_same_device(op, "input", input, "bias", bias);
    check_shape(op, "bias", bias, {weight.size(0)});
  }
  return ops::dispatch_float(
      input.dtype(), [&](auto t) { return linear_forward<decltype(t)>(input, weight, bias); });
}

LinearGrads linear_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                            bool bias, bool want_dinput, int threads) {
  const char* op = "linear_backward";
  ops::ThreadsScope scope(op, threads);
  check_input_weight(op, input, weight);
  ops::check_float_cpu(op, "doutput", doutput);
  check_same_dtype(op, "input", input, "doutput", doutput);
  check_same_device(op, "input", input, "doutput", doutput);
  check_shape(op, "doutput", doutput, {input.size(0), weight.size(0)});
  return ops::dispatch_float(input.dtype(), [&](auto t) {
    return linear_backward<decltype(t)>(input, weight, doutput, bias, want_dinput);
  });
}

LinearProblem LinearProblem::parse(const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'b'}, {'i'}, {'o'}}, "Linear problem descriptor", "b{B}i{I}o{O}, e.g. b32i256o512");
  LinearProblem p;
  p.B = d.get('b'), p.I = d.get('i'), p.O = d.get('o');
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
