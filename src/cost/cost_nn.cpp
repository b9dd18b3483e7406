// Cost of Linear, conv1d / conv2d and the elementwise activations. Formulas:
// docs/cost_model.md. es = bytes per scalar.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "core/descriptor.h"
#include "cost/cost_util.h"

namespace grux {
namespace {

using cost_detail::kSeed;
using cost_detail::wide;
using cost_detail::WideCounts;

// Threads that can share a weight matrix of `rows` output rows (one cache line of rows each).
int64_t split_rows(int64_t rows, DType dtype) {
  const int64_t unit = 64 / static_cast<int64_t>(dtype_size(dtype));
  return std::max<int64_t>(1, (rows + unit - 1) / unit);
}

// Positions of a padded input of one dimension that at least one tap reads: `out` outputs,
// kernel `k`, stride `s`, dilation `r`, i.e. the size of the union over taps j < k of
// {j r + o s : o < out}. Taps whose offsets j r agree modulo s read the same residue class of
// positions (disjoint from the others'), each an interval of `out` consecutive members of it.
// With g = gcd(s, r), s' = s/g, r' = r/g: the classes are j mod s' (min(k, s') of them), a
// class of c taps has its intervals r' members apart, so it covers (c - 1) r' + out members
// when r' <= out (the intervals touch or overlap) and c out otherwise. Dilation 1 gives
// (out - 1) s + k when s <= k and out k when s >= k.
wide covered(wide out, wide k, wide s, wide r) {
  const wide g = std::gcd(static_cast<int64_t>(s), static_cast<int64_t>(r)), sp = s / g, rp = r / g;
  auto cls = [&](wide c) { return c == 0 ? 0 : rp <= out ? (c - 1) * rp + out : c * out; };
  if (k < sp) return k * cls(1);
  const wide q = k / sp, rem = k % sp;  // rem classes of q + 1 taps, sp - rem of q
  return rem * cls(q + 1) + (sp - rem) * cls(q);
}

// A convolution in any number of spatial dimensions, reduced to what the counts need.
struct ConvShape {
  std::string op, problem;
  DType dtype;
  wide N, C, D, G;
  wide taps;       // (C/G) x kernel volume: the dot length of one output
  wide in_space;   // input positions per channel (H*W, or L)
  wide out_space;  // output positions per channel (OH*OW, or OL)
  wide covered;    // padded-input positions per channel read by some tap
  bool bias;
};

CostReport conv_cost(const ConvShape& s) {
  using namespace cost_detail;
  CostReport r;
  r.op = s.op;
  r.problem = s.problem;
  r.variant = s.bias ? "bias" : "no bias";
  r.dtype = s.dtype;
  const std::string what = s.op + " " + s.problem;
  cost_detail::check_countable(
      64.0 * (double(s.N) * double(s.D) * double(s.out_space) * double(s.taps) +
              double(s.N) * double(s.C) * double(s.in_space) + double(s.D) * double(s.taps)),
      what);
  const wide es = static_cast<wide>(dtype_size(s.dtype));
  const wide outputs = s.N * s.D * s.out_space;  // P
  const wide macs = outputs * s.taps;            // M
  WideCounts c;
  add_dots(c.fwd, outputs, s.taps);
  if (s.bias) c.fwd[kSeed].bias += outputs;
  // Backward. grad_weight: D x taps entries, each a sum over N x out_space products.
  add_dots(c.bwd, s.D * s.taps, s.N * s.out_space);
  // grad_input (in the padded frame, then cropped): every forward product appears once as
  // dy * w; a position read by m taps needs m multiplies and m - 1 adds.
  const wide covered_all = s.N * s.C * s.covered;
  c.bwd[kSeed].matmul += 2 * macs - covered_all;
  c.bwd[kGemm].matmul += 2 * macs;
  c.bwd[kMac].matmul += macs;
  if (s.bias) c.bwd[kSeed].bias += s.D * (s.N * s.out_space - 1);  // grad_bias: column sums
  c.store(r);

  const wide w = s.D * s.taps, b = s.bias ? s.D : 0, x = s.N * s.C * s.in_space, y = outputs;
  r.memory.parameters = narrow(w + b, what);
  r.memory.parameter_bytes = narrow((w + b) * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((x + y) * es, what);
  r.memory.training_bytes = narrow((x + y) * es, what);  // backward needs x (and w)
  // reread: the filter is fetched again for every image (im2col works image by image).
  r.inference_traffic.cached = {narrow((w + b + x) * es, what), narrow(y * es, what)};
  r.inference_traffic.reread = {narrow((s.N * (w + b) + x) * es, what), narrow(y * es, what)};
  // Training: the backward reads dy, x and w, writes dx, dw and db.
  r.training_traffic.cached = {narrow((w + b + x + y + x + w) * es, what),
                               narrow((y + x + w + b) * es, what)};
  r.training_traffic.reread = {narrow((s.N * (w + b) + x + y + x + s.N * w) * es, what),
                               narrow((y + x + w + b) * es, what)};
  Phase f;
  f.name = "forward";
  f.gemm_flops = static_cast<double>(2 * macs);
  f.weight_bytes = static_cast<double>((w + b) * es);
  f.weight_passes = static_cast<double>(s.N);
  f.split = split_rows(static_cast<int64_t>(s.D), s.dtype);
  f.stream_bytes = static_cast<double>((x + y) * es);
  r.inference_phases = {f};
  Phase bk = f;
  bk.name = "backward";
  bk.gemm_flops = static_cast<double>(4 * macs);
  bk.weight_bytes = static_cast<double>(w * es);
  bk.stream_bytes = static_cast<double>((y + x + x + w + b) * es);
  r.training_phases = {f, bk};
  return r;
}

}  // namespace

CostReport linear_cost(const LinearProblem& p) {
  using namespace cost_detail;
  CostReport r;
  r.op = "linear";
  r.problem = p.descriptor();
  r.variant = p.bias ? "bias" : "no bias";
  r.dtype = p.dtype;
  const std::string what = "linear " + p.descriptor();
  check_countable(64.0 * (double(p.B) * double(p.O) * double(p.I) + double(p.B) * double(p.I) +
                          double(p.B) * double(p.O) + double(p.O)),
                  what);
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide B = p.B, I = p.I, O = p.O;
  WideCounts c;
  add_dots(c.fwd, B * O, I);
  if (p.bias) c.fwd[kSeed].bias += B * O;
  add_dots(c.bwd, B * I, O);                     // dx = dy W
  add_dots(c.bwd, O * I, B);                     // dW = dy^T x
  if (p.bias) c.bwd[kSeed].bias += O * (B - 1);  // db: column sums of dy
  c.store(r);
  const wide w = O * I, b = p.bias ? O : 0;
  r.memory.parameters = narrow(w + b, what);
  r.memory.parameter_bytes = narrow((w + b) * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((B * I + B * O) * es, what);
  r.memory.training_bytes = narrow((B * I + B * O) * es, what);  // backward needs x
  const Traffic fwd{narrow((w + b + B * I) * es, what), narrow(B * O * es, what)};
  const Traffic trn{narrow((w + b + B * I + B * O + B * I + w) * es, what),
                    narrow((B * O + B * I + w + b) * es, what)};
  r.inference_traffic = {fwd, fwd};  // one step: both cache models agree
  r.training_traffic = {trn, trn};
  Phase f;
  f.name = "forward";
  f.gemm_flops = static_cast<double>(2 * B * O * I);
  f.weight_bytes = static_cast<double>((w + b) * es);
  f.weight_passes = 1;
  f.split = split_rows(p.O, p.dtype);
  f.stream_bytes = static_cast<double>((B * I + B * O) * es);
  r.inference_phases = {f};
  Phase bk = f;
  bk.name = "backward";
  bk.gemm_flops = 2 * f.gemm_flops;
  bk.weight_bytes = static_cast<double>(w * es);
  bk.stream_bytes = static_cast<double>((B * O + B * I + B * I + w + b) * es);
  r.training_phases = {f, bk};
  return r;
}

CostReport conv2d_cost(const ConvProblem& p) {
  const wide OH = p.OH(), OW = p.OW();
  return conv_cost({"conv2d", p.descriptor(), p.dtype, p.N, p.C, p.D, p.groups,
                    wide(p.C / p.groups) * p.kernel.h * p.kernel.w, wide(p.H) * p.W, OH * OW,
                    covered(OH, p.kernel.h, p.stride.h, p.dilation.h) *
                        covered(OW, p.kernel.w, p.stride.w, p.dilation.w),
                    p.bias});
}

CostReport conv1d_cost(const Conv1dProblem& p) {
  const wide OL = p.OL();
  return conv_cost({"conv1d", p.descriptor(), p.dtype, p.N, p.C, p.D, p.groups,
                    wide(p.C / p.groups) * p.K, p.L, OL, covered(OL, p.K, p.stride, p.dilation),
                    p.bias});
}

namespace {

using namespace cost_detail;

// Each activation's name and seed-mode ops per element, forward and backward, in the order of
// enum Activation.
struct ActivationInfo {
  const char* name;
  int fwd, bwd;
};
constexpr ActivationInfo kActivations[] = {
    {"sigmoid", kSigmoidOps, kSigmoidGradOps}, {"tanh", kTanhOps, kTanhGradOps},
    {"relu", kReluOps, kReluGradOps},          {"gelu", kGeluOps, kGeluGradOps},
    {"silu", kSiluOps, kSiluGradOps},          {"leaky_relu", kLeakyReluOps, kLeakyReluGradOps},
};
static_assert(std::size(kActivations) == static_cast<size_t>(Activation::leaky_relu) + 1);

const ActivationInfo& info(Activation a) {
  return kActivations[static_cast<size_t>(a)];
}

}  // namespace

const char* activation_name(Activation a) {
  return info(a).name;
}

ActivationProblem ActivationProblem::parse(Activation kind, const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'n', false, false, 12}}, fmt::format("{} problem descriptor", activation_name(kind)),
      "n{COUNT}, e.g. n65536");
  ActivationProblem p;
  p.kind = kind;
  p.n = d.get('n');
  if (p.n < 1)
    throw Error(fmt::format("{} problem descriptor '{}': n{} (expected >= 1)",
                            activation_name(kind), text, p.n));
  return p;
}

std::string ActivationProblem::descriptor() const {
  return fmt::format("n{}", n);
}

CostReport activation_cost(const ActivationProblem& p) {
  using namespace cost_detail;
  CostReport r;
  r.op = activation_name(p.kind);
  r.problem = p.descriptor();
  r.variant = "elementwise";
  r.dtype = p.dtype;
  const std::string what = r.op + " " + p.descriptor();
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide n = p.n;
  WideCounts c;
  c.fwd[kSeed].activation = n * info(p.kind).fwd;
  c.bwd[kSeed].activation = n * info(p.kind).bwd;
  c.store(r);
  r.memory.inference_bytes = narrow(2 * n * es, what);
  // Backward needs the output (sigmoid, tanh) or the input (the others): one tensor of n,
  // besides the output itself.
  r.memory.training_bytes = narrow(2 * n * es, what);
  const Traffic fwd{narrow(n * es, what), narrow(n * es, what)};
  const Traffic trn{narrow(3 * n * es, what), narrow(2 * n * es, what)};
  r.inference_traffic = {fwd, fwd};
  r.training_traffic = {trn, trn};
  Phase f;
  f.name = "forward";
  f.stream_bytes = static_cast<double>(2 * n * es);
  r.inference_phases = {f};
  Phase bk = f;
  bk.name = "backward";
  bk.stream_bytes = static_cast<double>(3 * n * es);
  r.training_phases = {f, bk};
  return r;
}

}  // namespace grux
