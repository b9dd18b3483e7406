// The convolution driver (F.conv1d / F.conv2d semantics): validates a problem at the API
// boundary, turns it into kernel geometry, sizes the workspace once and calls the chosen
// algorithm's kernels. conv1d is conv2d with H = KH = 1. Also the conv problem descriptor.
#include "grux/conv.h"

#include <fmt/format.h>
#include <omp.h>

#include "core/descriptor.h"
#include "cpu/conv_geom.h"
#include "cpu/im2col.h"
#include "cpu/ref/conv_ref.h"
#include "cpu/toeplitz.h"
#include "grux/runtime.h"
#include "ops/threads_option.h"

namespace grux {

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::loops:
      return "loops";
    case ConvAlgo::im2col:
      return "im2col";
    case ConvAlgo::toeplitz:
      return "toeplitz";
  }
  return "?";
}

ConvAlgo parse_conv_algo(const std::string& text) {
  for (ConvAlgo a : {ConvAlgo::loops, ConvAlgo::im2col, ConvAlgo::toeplitz})
    if (text == conv_algo_name(a)) return a;
  throw Error(
      fmt::format("conv algorithm '{}' is unknown (expected loops, im2col or toeplitz)", text));
}

namespace {

// Options as the 2-d kernels see them, with the number of spatial dims the caller used (1 or
// 2) so that messages speak the caller's language.
struct Options {
  int dims;
  Pair2 stride, padding, dilation;
  int64_t groups;
  ConvAlgo algo;
  int threads;
};

Options from(const Conv2dOptions& o) {
  return {2, o.stride, o.padding, o.dilation, o.groups, o.algo, o.threads};
}
Options from(const Conv1dOptions& o) {
  return {1, {1, o.stride}, {0, o.padding}, {1, o.dilation}, o.groups, o.algo, o.threads};
}

// "2" for conv1d, "(2, 1)" for conv2d.
std::string spatial(const Options& o, Pair2 p) {
  return o.dims == 1 ? fmt::format("{}", p.w) : fmt::format("({}, {})", p.h, p.w);
}
const char* op_name(const Options& o) {
  return o.dims == 1 ? "conv1d" : "conv2d";
}

// A validated problem: kernel geometry plus the caller's tensors as contiguous 4-d ones.
struct Plan {
  cpu::ConvGeom g{};
  Tensor x, w;  // (N, C, H, W), (D, C/G, KH, KW), contiguous
  bool unbatched = false;
  Shape out_shape;  // as the caller sees it
  DType dtype = DType::f32;
};

void check_cpu(const char* op, const char* name, const Tensor& t) {
  if (t.device() != Device::cpu())
    throw Error(fmt::format("{}: {} is on {}, expected cpu (the only device of this build)", op,
                            name, t.device().str()));
}

Plan make_plan(const Options& o, const Tensor& input, const Tensor& weight) {
  const char* op = op_name(o);
  const bool d1 = o.dims == 1;
  check_defined(op, "input", input);
  check_defined(op, "weight", weight);
  check_cpu(op, "input", input);
  if (input.dtype() != DType::f32 && input.dtype() != DType::f64)
    throw Error(
        fmt::format("{}: input has dtype {}, expected f32 or f64", op, dtype_name(input.dtype())));
  check_same_dtype(op, "input", input, "weight", weight);
  check_same_device(op, "input", input, "weight", weight);

  Plan p;
  p.dtype = input.dtype();
  const int64_t rank = o.dims + 2;
  if (input.dim() == rank - 1) {
    p.unbatched = true;
  } else if (input.dim() != rank) {
    throw Error(
        fmt::format("{}: input has shape {}, expected {}", op, shape_str(input.shape()),
                    d1 ? "(N, C, L) or unbatched (C, L)" : "(N, C, H, W) or unbatched (C, H, W)"));
  }
  if (weight.dim() != rank)
    throw Error(fmt::format("{}: weight has shape {}, expected {}", op, shape_str(weight.shape()),
                            d1 ? "(D, C/groups, K)" : "(D, C/groups, KH, KW)"));
  // Everything below works on 4-d (N, C, H, W) views.
  Tensor x = p.unbatched ? input.unsqueeze(0) : input;
  Tensor w = weight;
  if (d1) {
    x = x.unsqueeze(2);
    w = w.unsqueeze(2);
  }

  for (auto [name, v, lo] :
       {std::tuple{"stride", o.stride, 1}, {"dilation", o.dilation, 1}, {"padding", o.padding, 0}})
    if (v.h < lo || v.w < lo)
      throw Error(fmt::format("{}: {} is {}, expected >= {}", op, name, spatial(o, v), lo));
  if (o.groups < 1) throw Error(fmt::format("{}: groups is {}, expected >= 1", op, o.groups));

  cpu::ConvGeom& g = p.g;
  g.N = x.size(0), g.C = x.size(1), g.H = x.size(2), g.W = x.size(3);
  g.D = w.size(0), g.KH = w.size(2), g.KW = w.size(3);
  g.SH = o.stride.h, g.SW = o.stride.w, g.PH = o.padding.h, g.PW = o.padding.w;
  g.DH = o.dilation.h, g.DW = o.dilation.w, g.G = o.groups;
  if (g.C < 1)
    throw Error(fmt::format("{}: input has shape {}: no channels (expected C >= 1)", op,
                            shape_str(input.shape())));
  if (g.C % g.G != 0)
    throw Error(
        fmt::format("{}: input has C = {} channels, not divisible by groups = {}", op, g.C, g.G));
  if (g.D < 1 || g.D % g.G != 0)
    throw Error(
        fmt::format("{}: weight has shape {}: D = {} filters, expected a positive "
                    "multiple of groups = {}",
                    op, shape_str(weight.shape()), g.D, g.G));
  if (w.size(1) != g.C / g.G)
    throw Error(
        fmt::format("{}: weight has shape {}: dim 1 is {}, expected C/groups = {} "
                    "(C = {}, groups = {})",
                    op, shape_str(weight.shape()), w.size(1), g.C / g.G, g.C, g.G));
  if (g.KH < 1 || g.KW < 1)
    throw Error(fmt::format("{}: weight has shape {}: kernel sizes must be >= 1", op,
                            shape_str(weight.shape())));
  // The dilated kernel must fit in the padded input (else there is no output pixel).
  const int64_t EH = g.DH * (g.KH - 1) + 1, EW = g.DW * (g.KW - 1) + 1;
  const int64_t HP = g.H + 2 * g.PH, WP = g.W + 2 * g.PW;
  if (EH > HP || EW > WP)
    throw Error(d1 ? fmt::format("{}: kernel size {} (dilated: {}) is larger than the padded input "
                                 "length {} (L = {}, padding {})",
                                 op, g.KW, EW, WP, g.W, g.PW)
                   : fmt::format("{}: kernel size ({}, {}) (dilated: ({}, {})) is larger than the "
                                 "padded input ({}, {}) (H, W = ({}, {}), padding ({}, {}))",
                                 op, g.KH, g.KW, EH, EW, HP, WP, g.H, g.W, g.PH, g.PW));
  g.OH = (HP - EH) / g.SH + 1;
  g.OW = (WP - EW) / g.SW + 1;

  if (o.algo == ConvAlgo::toeplitz && !reference_kernels()) {
    const double elems = double(cpu::toeplitz_rows(g)) * double(cpu::toeplitz_cols(g));
    const double bytes = elems * double(dtype_size(p.dtype));
    if (bytes > double(kToeplitzMaxBytes))
      throw Error(fmt::format(
          "{}: the toeplitz matrix would be D*OH*OW x C*(H+2PH)*(W+2PW) = {} x {} elements "
          "({:.1f} MiB), over the {} MiB limit (use algo im2col)",
          op, cpu::toeplitz_rows(g), cpu::toeplitz_cols(g), bytes / (1 << 20),
          kToeplitzMaxBytes >> 20));
  }

  p.x = x.contiguous();
  p.w = w.contiguous();
  if (p.unbatched)
    p.out_shape = d1 ? Shape{g.D, g.OW} : Shape{g.D, g.OH, g.OW};
  else
    p.out_shape = d1 ? Shape{g.N, g.D, g.OW} : Shape{g.N, g.D, g.OH, g.OW};
  return p;
}

void check_bias(const Options& o, const Plan& p, const Tensor& input, const Tensor& bias) {
  const char* op = op_name(o);
  check_same_dtype(op, "input", input, "bias", bias);
  check_same_device(op, "input", input, "bias", bias);
  check_shape(op, "bias", bias, {p.g.D});
}

template <typename T>
void forward_kernel(const Plan& p, ConvAlgo algo, const T* b, T* y) {
  const cpu::ConvGeom& g = p.g;
  const T* x = p.x.data<T>();
  const T* w = p.w.data<T>();
  if (algo == ConvAlgo::loops) {
    cpu::ref::conv2d_forward_ref<T>(g, x, w, b, y);
  } else if (algo == ConvAlgo::im2col) {
    const cpu::Im2colPlan plan = cpu::im2col_plan(g, omp_get_max_threads());
    Tensor work = Tensor::empty({cpu::im2col_workspace_size(g, plan, false)}, p.dtype);
    cpu::conv2d_forward_im2col<T>(g, x, w, b, y, work.data<T>(), plan);
  } else {
    Tensor work = Tensor::empty({cpu::toeplitz_workspace_size(g)}, p.dtype);
    cpu::conv2d_forward_toeplitz<T>(g, x, w, b, y, work.data<T>());
  }
}

template <typename T>
void backward_kernel(const Plan& p, ConvAlgo algo, const T* dy, T* dx, T* dw, T* db) {
  const cpu::ConvGeom& g = p.g;
  const T* x = p.x.data<T>();
  const T* w = p.w.data<T>();
  if (algo == ConvAlgo::loops) {
    cpu::ref::conv2d_backward_ref<T>(g, dy, x, w, dx, dw, db);
  } else if (algo == ConvAlgo::im2col) {
    const cpu::Im2colPlan plan = cpu::im2col_plan(g, omp_get_max_threads());
    Tensor work = Tensor::empty({cpu::im2col_workspace_size(g, plan, true)}, p.dtype);
    cpu::conv2d_backward_im2col<T>(g, dy, x, w, dx, dw, db, work.data<T>(), plan);
  } else {
    Tensor work = Tensor::empty({cpu::toeplitz_workspace_size(g)}, p.dtype);
    cpu::conv2d_backward_toeplitz<T>(g, dy, x, w, dx, dw, db, work.data<T>());
  }
}

ConvAlgo effective_algo(const Options& o) {
  return reference_kernels() ? ConvAlgo::loops : o.algo;
}

Tensor conv_forward(const Options& o, const Tensor& input, const Tensor& weight,
                    const Tensor& bias) {
  ops::ThreadsScope scope(op_name(o), o.threads);
  const Plan p = make_plan(o, input, weight);
  if (bias.defined()) check_bias(o, p, input, bias);
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = Tensor::empty(p.out_shape, p.dtype);
  if (p.g.N == 0) return y;
  if (p.dtype == DType::f32)
    forward_kernel<float>(p, effective_algo(o), b.defined() ? b.data<float>() : nullptr,
                          y.data<float>());
  else
    forward_kernel<double>(p, effective_algo(o), b.defined() ? b.data<double>() : nullptr,
                           y.data<double>());
  return y;
}

ConvGrads conv_backward(const Options& o, const Tensor& input, const Tensor& weight,
                        const Tensor& doutput, bool bias) {
  const char* op = op_name(o);
  ops::ThreadsScope scope(op, o.threads);
  const Plan p = make_plan(o, input, weight);
  check_defined(op, "doutput", doutput);
  check_same_dtype(op, "input", input, "doutput", doutput);
  check_same_device(op, "input", input, "doutput", doutput);
  check_shape(op, "doutput", doutput, p.out_shape);
  Tensor dy = doutput.contiguous();
  ConvGrads r;
  r.dinput = Tensor::empty(input.shape(), p.dtype);
  r.dweight = Tensor::zeros(weight.shape(), p.dtype);
  if (bias) r.dbias = Tensor::zeros({p.g.D}, p.dtype);
  if (p.g.N == 0) return r;  // empty batch: nothing flows back, gradients are zero
  auto run = [&]<typename T>(T*) {
    backward_kernel<T>(p, effective_algo(o), dy.data<T>(), r.dinput.data<T>(), r.dweight.data<T>(),
                       bias ? r.dbias.data<T>() : nullptr);
  };
  if (p.dtype == DType::f32)
    run(static_cast<float*>(nullptr));
  else
    run(static_cast<double*>(nullptr));
  return r;
}

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const Conv2dOptions& options) {
  return conv_forward(from(options), input, weight, bias);
}

ConvGrads conv2d_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                          bool bias, const Conv2dOptions& options) {
  return conv_backward(from(options), input, weight, doutput, bias);
}

Tensor conv1d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias,
                      const Conv1dOptions& options) {
  return conv_forward(from(options), input, weight, bias);
}

ConvGrads conv1d_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                          bool bias, const Conv1dOptions& options) {
  return conv_backward(from(options), input, weight, doutput, bias);
}

// ---- Problem descriptor ------------------------------------------------------------------

namespace {

// "3" or "3x5" of a descriptor: one value for both dimensions, or the height's and the width's.
Pair2 pair_of(const detail::Descriptor& d, char letter, int64_t dflt) {
  return {d.get(letter, dflt), d.second(letter, dflt)};
}

std::string pair_str(const Pair2& p) {
  return p.h == p.w ? fmt::format("{}", p.h) : fmt::format("{}x{}", p.h, p.w);
}

}  // namespace

ConvProblem ConvProblem::parse(const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text,
      {{'n'},
       {'c'},
       {'h'},
       {'w'},
       {'d'},
       {'k', false, true},
       {'s', true, true},
       {'p', true, true},
       {'r', true, true},
       {'g', true}},
      "conv problem descriptor",
      "n{N}c{C}h{H}w{W}d{D}k{K}[s{S}][p{P}][r{R}][g{G}], each of k, s, p, r as one value or HxW, "
      "e.g. n8c16h64w64d32k3, n8c64h56w56d64k3p1 or n1c8h32w32d8k3x5s2p1x2");
  ConvProblem p;
  p.N = d.get('n'), p.C = d.get('c'), p.H = d.get('h'), p.W = d.get('w'), p.D = d.get('d');
  p.kernel = pair_of(d, 'k', 0), p.stride = pair_of(d, 's', 1);
  p.padding = pair_of(d, 'p', 0), p.dilation = pair_of(d, 'r', 1);
  p.groups = d.get('g', 1);
  for (auto [name, v] : {std::pair{"n", p.N},
                         {"c", p.C},
                         {"h", p.H},
                         {"w", p.W},
                         {"d", p.D},
                         {"k", std::min(p.kernel.h, p.kernel.w)},
                         {"s", std::min(p.stride.h, p.stride.w)},
                         {"r", std::min(p.dilation.h, p.dilation.w)},
                         {"g", p.groups}})
    if (v < 1)
      throw Error(fmt::format("conv problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  if (p.C % p.groups != 0 || p.D % p.groups != 0)
    throw Error(fmt::format("conv problem descriptor '{}': c{} and d{} must be multiples of g{}",
                            text, p.C, p.D, p.groups));
  const int64_t eh = p.dilation.h * (p.kernel.h - 1) + 1, ew = p.dilation.w * (p.kernel.w - 1) + 1;
  if (eh > p.H + 2 * p.padding.h || ew > p.W + 2 * p.padding.w)
    throw Error(fmt::format(
        "conv problem descriptor '{}': kernel k{}{} spans ({}, {}), larger than the "
        "padded input ({}, {})",
        text, pair_str(p.kernel), p.dilation == Pair2(1) ? "" : " dilated r" + pair_str(p.dilation),
        eh, ew, p.H + 2 * p.padding.h, p.W + 2 * p.padding.w));
  return p;
}

std::string ConvProblem::descriptor() const {
  std::string s = fmt::format("n{}c{}h{}w{}d{}k{}", N, C, H, W, D, pair_str(kernel));
  if (stride != Pair2(1)) s += fmt::format("s{}", pair_str(stride));
  if (padding != Pair2(0)) s += fmt::format("p{}", pair_str(padding));
  if (dilation != Pair2(1)) s += fmt::format("r{}", pair_str(dilation));
  if (groups != 1) s += fmt::format("g{}", groups);
  return s;
}

Conv2dOptions ConvProblem::options(ConvAlgo algo) const {
  Conv2dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  o.algo = algo;
  return o;
}

int64_t ConvProblem::OH() const {
  return (H + 2 * padding.h - dilation.h * (kernel.h - 1) - 1) / stride.h + 1;
}
int64_t ConvProblem::OW() const {
  return (W + 2 * padding.w - dilation.w * (kernel.w - 1) - 1) / stride.w + 1;
}

double ConvProblem::flops() const {
  return 2.0 * double(N) * double(D) * double(OH()) * double(OW()) * double(C / groups) *
         double(kernel.h) * double(kernel.w);
}

}  // namespace grux
