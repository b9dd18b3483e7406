// Cost of the scans (grux scan: sum, prod, max, min, logaddexp, matmul, affine) and of the
// minGRU stack. Formulas: docs/cost_model.md, section 4b.
//
// Scans are counted as their sequential formulation: T - 1 combines per sequence and
// channel (an inclusive scan without an initial state), which is the work any scan must do.
// grux's parallel scans do up to about twice that when they split time over threads (scan
// each chunk, then fix it up); the counts do not include that. Backward counts are those of
// the gradient as PyTorch computes it (cumsum, cumprod, cummax, logcumsumexp, matmul chains)
// and as affine_scan_backward computes it. GEMM and MAC modes count matrix products only,
// as FLOP counters do (they count nothing for cumsum); the matmul and matrix-affine scans
// are matrix products.
#include <fmt/format.h>

#include <algorithm>

#include "cost/cost_util.h"

namespace grux {
namespace {

using cost_detail::kSeed;
using cost_detail::wide;
using cost_detail::WideCounts;

// Seed-mode ops of one logaddexp combine: max(a, b) + log(1 + exp(-|a - b|)) is max, -,
// exp, +, log, + (log counted like exp; negation and |.| free).
constexpr int kLogAddExpOps = 6;

int64_t split_units(int64_t H, DType dtype) {
  const int64_t unit = 64 / static_cast<int64_t>(dtype_size(dtype));
  return std::max<int64_t>(1, (H + unit - 1) / unit);
}

}  // namespace

const char* scan_cost_op_name(ScanCostOp op) {
  switch (op) {
    case ScanCostOp::sum:
      return "sum";
    case ScanCostOp::prod:
      return "prod";
    case ScanCostOp::max:
      return "max";
    case ScanCostOp::min:
      return "min";
    case ScanCostOp::logaddexp:
      return "logaddexp";
    case ScanCostOp::matmul:
      return "matmul";
    case ScanCostOp::affine:
      return "affine";
  }
  return "?";
}

CostReport scan_cost(ScanCostOp op, const ScanProblem& p) {
  using namespace cost_detail;
  CostReport r;
  r.op = std::string("scan_") + scan_cost_op_name(op);
  r.problem = p.descriptor();
  r.dtype = p.dtype;
  const std::string what = r.op + " " + r.problem;
  const bool matrix = p.d > 0;
  if (op == ScanCostOp::matmul && !matrix)
    throw Error(fmt::format("{}: the matmul scan needs a matrix size d (e.g. t8192d64)", what));
  if (op != ScanCostOp::matmul && op != ScanCostOp::affine && matrix)
    throw Error(
        fmt::format("{}: element-wise scans take channels c, not d (e.g. n8t4096c1536)", what));
  r.variant = op == ScanCostOp::affine ? (matrix ? "matrix x_t = W_t x_{t-1} + b_t, no h0"
                                                 : "diagonal h_t = a_t h_{t-1} + b_t, no h0")
                                       : "inclusive";
  const double d = static_cast<double>(std::max<int64_t>(p.d, 1));
  check_countable(64.0 * double(p.N) * double(p.T) * double(p.C) * (d * d * d + d * d + 8), what);
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide seqs = wide(p.N) * p.C;  // independent sequences (d = 0) or chains (d > 0)
  const wide T = p.T, combines = seqs * (T - 1), D = std::max<int64_t>(p.d, 1);
  // Elements of one step: x (matmul: d x d), y; affine: a, b and h.
  wide x_elems = 0, y_elems = 0;
  WideCounts c;
  switch (op) {
    case ScanCostOp::sum:
      c.fwd[kSeed].elementwise = combines;
      c.bwd[kSeed].elementwise = combines;  // a reverse cumsum of dy
      x_elems = y_elems = seqs * T;
      break;
    case ScanCostOp::prod:
      c.fwd[kSeed].elementwise = combines;
      // dx = reverse_cumsum(dy * y) / x: a multiply, the reverse sum, a divide.
      c.bwd[kSeed].elementwise = seqs * T + combines + seqs * T;
      x_elems = y_elems = seqs * T;
      break;
    case ScanCostOp::max:
    case ScanCostOp::min:
      c.fwd[kSeed].elementwise = combines;  // one compare-and-select per combine
      c.bwd[kSeed].elementwise = seqs * T;  // dy added into the position that won
      x_elems = y_elems = seqs * T;
      break;
    case ScanCostOp::logaddexp:
      c.fwd[kSeed].elementwise = combines * kLogAddExpOps;
      // dx_t = exp(x_t) * reverse_cumsum(dy_s * exp(-y_s)): exp, x, the sum, exp, x.
      c.bwd[kSeed].elementwise = 4 * seqs * T + combines;
      x_elems = y_elems = seqs * T;
      break;
    case ScanCostOp::matmul:
      // y_t = y_{t-1} x_t: d^2 dots of length d per combine. Backward: dx_t = y_{t-1}^T g_t
      // and g_{t-1} = dy_{t-1} + g_t x_t^T: two products and d^2 adds per step.
      add_dots(c.fwd, combines * D * D, D);
      add_dots(c.bwd, 2 * combines * D * D, D);
      c.bwd[kSeed].elementwise = combines * D * D;
      x_elems = y_elems = seqs * T * D * D;
      break;
    case ScanCostOp::affine:
      if (!matrix) {
        // h_t = a_t h_{t-1} + b_t: x, +. Backward (affine_scan_backward): g_t = dh_t +
        // a_{t+1} g_{t+1} (x, +), da_t = g_t h_{t-1} (x); db = g.
        c.fwd[kSeed].elementwise = 2 * combines;
        c.bwd[kSeed].elementwise = 3 * combines;
        x_elems = 2 * seqs * T;  // a and b
        y_elems = seqs * T;
      } else {
        // x_t = W_t x_{t-1} + b_t: d dots of length d and d adds. Backward: g_t = dh_t +
        // W_{t+1}^T g_{t+1} (d dots of length d, d adds), dW_t = g_t x_{t-1}^T (d^2 products).
        add_dots(c.fwd, combines * D, D);
        c.fwd[kSeed].elementwise = combines * D;
        add_dots(c.bwd, combines * D, D);
        c.bwd[kSeed].elementwise = combines * D;
        add_dots(c.bwd, combines * D * D, 1);
        x_elems = seqs * T * (D * D + D);  // W and b
        y_elems = seqs * T * D;
      }
      break;
  }
  c.store(r);
  r.memory.inference_bytes = narrow((x_elems + y_elems) * es, what);
  // Backward reads the inputs and the result (both kept), and dy.
  r.memory.training_bytes = narrow((x_elems + y_elems) * es, what);
  const Traffic fwd{narrow(x_elems * es, what), narrow(y_elems * es, what)};
  // Training: the forward, then the backward reads x, y and dy and writes dx.
  const Traffic trn{narrow((x_elems + x_elems + 2 * y_elems) * es, what),
                    narrow((y_elems + x_elems) * es, what)};
  r.inference_traffic = {fwd, fwd};  // no weights: both cache models agree
  r.training_traffic = {trn, trn};
  Phase f;
  f.name = "scan";
  f.gemm_flops = static_cast<double>(r.fwd(CountMode::gemm).matmul);
  f.stream_bytes = static_cast<double>((x_elems + y_elems) * es);
  r.inference_phases = {f};
  Phase bk;
  bk.name = "reverse scan";
  bk.gemm_flops = static_cast<double>(r.bwd(CountMode::gemm).matmul);
  bk.stream_bytes = static_cast<double>((x_elems + 2 * y_elems + x_elems) * es);
  r.training_phases = {f, bk};
  return r;
}

CostReport mingru_cost(const MinGruProblem& p) {
  using namespace cost_detail;
  check_lengths("mingru", p);
  CostReport r;
  r.op = "mingru";
  r.problem = p.descriptor();
  r.variant = std::string(p.bias ? "bias" : "no bias") + ", linear variant";
  if (!p.lengths.empty()) r.variant += fmt::format(", lengths (sum {})", p.rows());
  r.dtype = p.dtype;
  const std::string what = "mingru " + p.descriptor();
  check_countable(64.0 * double(p.num_layers) * (double(p.T) * double(p.N) + 1) *
                      double(p.hidden_size) * (double(p.input_size) + double(p.hidden_size) + 16),
                  what);
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide R = p.rows(), H = p.hidden_size, N = p.N, TN = wide(p.T) * p.N, RH = R * H;
  WideCounts c;
  wide params = 0, tape = 0, infer_peak = 0, fwd_r = 0, fwd_w = 0, trn_r = 0, trn_w = 0;
  const double e = static_cast<double>(es);
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const wide in = l == 0 ? p.input_size : p.hidden_size;
    // Forward per row: 2H dots of length `in` (k_z and v) with their biases; per (row,
    // unit) the sigmoid, a = 1 - z and b = z v (2), and the scan step a h + b (2).
    add_dots(c.fwd, R * 2 * H, in);
    if (p.bias) c.fwd[kSeed].bias += R * 2 * H;
    c.fwd[kSeed].activation += kSigmoidOps * RH;
    c.fwd[kSeed].elementwise += 4 * RH;
    // Backward: the reverse scan g_t = dy_t + a_{t+1} g_{t+1} (2), dz = g (v - h_{t-1}) (2)
    // through the sigmoid's derivative, dv = g z (1); then dx = dk W, dW = dk^T x, db.
    c.bwd[kSeed].elementwise += 5 * RH;
    c.bwd[kSeed].activation += kSigmoidGradOps * RH;
    add_dots(c.bwd, R * in, 2 * H);
    add_dots(c.bwd, 2 * H * in, R);
    if (p.bias) c.bwd[kSeed].bias += 2 * H * (R - 1);

    const wide w = 2 * H * in, b = p.bias ? 2 * H : 0;
    params += w + b;
    infer_peak = std::max(infer_peak, TN * in + TN * H);
    // The tape: the projections k (2H per row) and the layer's output (the next layer's
    // input; layer 0's input is counted once below), whole (T x N rows) buffers.
    tape += TN * 2 * H + TN * H;
    // Forward: weights, input rows and the initial state in; the output rows and h_n out.
    fwd_r += w + b + R * in + N * H;
    fwd_w += R * H + N * H;
    // Training: the forward writes k too; the backward reads dy, k, the outputs, x and the
    // weights and writes dx and the weight gradients.
    trn_r += w + b + R * in + N * H + R * H + R * 2 * H + R * H + R * in + w;
    trn_w += R * H + N * H + R * 2 * H + R * in + w + b;

    // Roofline: inference runs the fused path (each thread projects a chunk of time onto
    // its share of the units and scans it in cache): one GEMM's work, x and the output
    // streamed once. Training keeps k: the GEMM writes it, the pointwise pass reads it and
    // writes a and b, the scan reads them and writes the output.
    Phase f;
    f.name = fmt::format("layer {}: projection and scan", l);
    f.gemm_flops = static_cast<double>(2 * R * 2 * H * in);
    f.weight_bytes = static_cast<double>(w + b) * e;
    f.weight_passes = 1;
    f.split = split_units(p.hidden_size, p.dtype);
    f.stream_bytes = static_cast<double>(R * in + R * H) * e;
    r.inference_phases.push_back(f);
    Phase ft = f;
    ft.stream_bytes = static_cast<double>(R * in + 2 * R * 2 * H + 4 * RH + RH) * e;
    Phase bk;
    bk.name = fmt::format("layer {}: reverse scan, dx, dW", l);
    bk.gemm_flops = static_cast<double>(2 * 2 * R * 2 * H * in);
    bk.weight_bytes = static_cast<double>(w) * e;
    bk.weight_passes = 1;
    bk.split = f.split;
    // dy, k and the states in; dk out and read back by both GEMMs; x in, dx out.
    bk.stream_bytes =
        static_cast<double>(RH + R * 2 * H + RH + 3 * R * 2 * H + 2 * R * in + w + b) * e;
    r.training_phases.push_back(ft);
    r.training_phases.push_back(bk);
  }
  c.store(r);
  const wide states = wide(p.num_layers) * N * H;
  r.memory.parameters = narrow(params, what);
  r.memory.parameter_bytes = narrow(params * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((infer_peak + states) * es, what);
  r.memory.training_bytes = narrow((TN * p.input_size + tape + states) * es, what);
  // Nothing re-reads weights step by step: both cache models agree.
  r.inference_traffic.cached =
      r.inference_traffic.reread = {narrow(fwd_r * es, what), narrow(fwd_w * es, what)};
  r.training_traffic.cached =
      r.training_traffic.reread = {narrow(trn_r * es, what), narrow(trn_w * es, what)};
  return r;
}

}  // namespace grux
