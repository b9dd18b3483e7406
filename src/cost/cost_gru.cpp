// Cost of the GRU: the stack (layers x directions x time, variable lengths), the stack driven
// frame by frame through the streaming API, and nn.GRUCell. Formulas: docs/cost_model.md.
//
// Sizes: L layers, D directions, T steps, N sequences, I inputs, H hidden; per layer-direction
// `in` is I for layer 0 and D*H above, R = rows = sum of lengths (N*T without lengths),
// S = sequential steps = the longest length (T without lengths). es = bytes per scalar.
#include <fmt/format.h>

#include <algorithm>

#include "cost/cost_util.h"

namespace grux {
namespace {

using cost_detail::kSeed;
using cost_detail::wide;
using cost_detail::WideCounts;

// Forward and backward counts of one layer-direction over R rows of width `in`.
// `carry`: the backward adds the output gradient of a step to the gradient carried from the
// next step (a sequence); a lone cell receives d(h') whole.
WideCounts layer_counts(wide R, wide in, wide H, bool bias, GruForm form, bool carry) {
  using namespace cost_detail;
  WideCounts c;
  const wide RH = R * H;
  // Forward. Gate pre-activations: 3H dots of length `in` and 3H of length H per row, each
  // with its bias (b_ih and b_hh are separate adds, as the equations write them).
  add_dots(c.fwd, R * 3 * H, in);
  add_dots(c.fwd, R * 3 * H, H);
  if (bias) c.fwd[kSeed].bias += 2 * R * 3 * H;
  // Per (row, unit): r and z each add their two halves (2); n multiplies by r and adds (2) —
  // in the reset-before form r*h is formed before the product instead, also 2;
  // h' = (1 - z) * n + z * h (4).
  c.fwd[kSeed].elementwise += 8 * RH;
  c.fwd[kSeed].activation += (2 * kSigmoidOps + kTanhOps) * RH;

  // Backward, from the saved r, z, n, (W_hn h + b_hn) and the states.
  // Gradient into the previous state: linear-before-reset one dot over the 3H gate gradients
  // per (row, unit); reset-before a dot over H (into r*h) and one over 2H (r and z).
  if (form == GruForm::linear_before_reset) {
    add_dots(c.bwd, RH, 3 * H);
  } else {
    add_dots(c.bwd, RH, H);
    add_dots(c.bwd, RH, 2 * H);
  }
  add_dots(c.bwd, R * in, 3 * H);                      // input gradient
  add_dots(c.bwd, 3 * H * in, R);                      // dW_ih: each entry a sum over the rows
  add_dots(c.bwd, 3 * H * H, R);                       // dW_hh
  if (bias) c.bwd[kSeed].bias += 2 * 3 * H * (R - 1);  // db_ih, db_hh: column sums
  // Per (row, unit): dz = g*(h - n) (2), dn = g*(1 - z) (2), g*z (1), then
  //   linear-before-reset: d(hn) = da_n*r (1), da_n*hn (1), one add into the state gradient;
  //   reset-before: d(rh)*h (1), d(rh)*r (1), two adds into the state gradient;
  // plus, in a sequence, g = dy + the carried gradient (1).
  c.bwd[kSeed].elementwise += (form == GruForm::linear_before_reset ? 8 : 9) * RH;
  if (carry) c.bwd[kSeed].elementwise += RH;
  c.bwd[kSeed].activation += (2 * kSigmoidGradOps + kTanhGradOps) * RH;
  return c;
}

std::string variant_of(bool bias, GruForm form) {
  return fmt::format("{}, {}", bias ? "bias" : "no bias", gru_form_name(form));
}

// Threads that can share one layer-direction's weights: grux splits the hidden units into
// blocks of one cache line (16 f32, 8 f64).
int64_t split_of(int64_t H, DType dtype) {
  const int64_t unit = 64 / static_cast<int64_t>(dtype_size(dtype));
  return std::max<int64_t>(1, (H + unit - 1) / unit);
}

// Bytes of one pass over a weight matrix of `elements` with `cols` output columns, as the
// products read it: es (the dtype's size), 2 (bf16), or 1 plus a scale and a column sum per
// column (int8).
cost_detail::wide weight_pass_bytes(Precision precision, cost_detail::wide es,
                                    cost_detail::wide elements, cost_detail::wide cols) {
  switch (precision) {
    case Precision::bf16:
      return 2 * elements;
    case Precision::int8:
      return elements + 8 * cols;
    default:
      return es * elements;
  }
}

}  // namespace

CostReport gru_cost(const GruProblem& p) {
  using namespace cost_detail;
  check_lengths("gru", p);
  CostReport r;
  r.op = "gru";
  r.problem = p.descriptor();
  r.variant = variant_of(p.bias, p.form);
  if (!p.lengths.empty()) r.variant += fmt::format(", lengths (sum {})", p.rows());
  r.dtype = p.dtype;
  if (p.precision != Precision::f32) {
    if (p.dtype != DType::f32)
      throw Error(fmt::format("gru {}: precision {} takes f32, not {}", p.descriptor(),
                              precision_name(p.precision), dtype_name(p.dtype)));
    r.variant += fmt::format(", {} products", precision_name(p.precision));
  }
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide R = p.rows(), H = p.hidden_size, N = p.N, TN = wide(p.T) * p.N;
  const int64_t S = p.lengths.empty() ? p.T : *std::max_element(p.lengths.begin(), p.lengths.end());
  const std::string what = "gru " + p.descriptor();
  const auto weight_pass = [&](wide elements) {
    return weight_pass_bytes(p.precision, es, elements, 3 * H);
  };
  {
    // Per row, unit and layer-direction at most 6 in + 6H + 21 forward and twice that backward
    // (ops), or 4 in + 6H values moved: 64 (in + H) bounds both, in + H <= (I + 2H) + H.
    const double rows = static_cast<double>(R) + static_cast<double>(TN) + double(p.N);
    check_countable(64.0 * double(p.num_layers) * double(p.directions()) * rows *
                        double(p.hidden_size) *
                        (double(p.input_size) + 3.0 * double(p.hidden_size) + 8) * 8.0,
                    what);
    check_countable(64.0 * double(p.num_layers) * double(p.directions()) * double(S) *
                        double(p.hidden_size) *
                        (double(p.input_size) + 3.0 * double(p.hidden_size) + 8),
                    what);
  }

  WideCounts counts;
  wide params = 0, tape = 0, infer_peak = 0;
  wide fwd_cached_r = 0, fwd_cached_w = 0, fwd_reread_r = 0;
  wide trn_cached_r = 0, trn_cached_w = 0, trn_reread_r = 0;
  // Bytes of the weight passes (in the products' precision), apart from the counts above.
  wide fwd_cached_wb = 0, fwd_reread_wb = 0, trn_cached_wb = 0, trn_reread_wb = 0;
  wide pack_r = 0, pack_w = 0;  // training in bf16: the weights converted every step
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const wide in = l == 0 ? p.input_size : p.directions() * p.hidden_size;
    // Inference peak while layer l runs: its input, its output, the final states.
    infer_peak = std::max(infer_peak, TN * in + TN * p.directions() * H);
    if (p.directions() == 2)
      counts.bwd[kSeed].elementwise += R * in;  // the two directions' dx summed
    for (int64_t d = 0; d < p.directions(); ++d) {
      counts += layer_counts(R, in, H, p.bias, p.form, /*carry=*/true);
      const wide wi = 3 * H * in, wh = 3 * H * H, b = p.bias ? 3 * H : 0;
      params += wi + wh + 2 * b;
      // The tape: gate values r, z, n and W_hn h + b_hn per row (4H), and every state (the
      // initial one included).
      tape += R * 4 * H + (R + N) * H;
      // Forward: weights, input rows and initial state in; output rows and final state out.
      const wide act_r = R * in + N * H, act_w = R * H + N * H;
      fwd_cached_r += 2 * b + act_r;
      fwd_reread_r += b + S * b + act_r;
      fwd_cached_wb += weight_pass(wi) + weight_pass(wh);
      fwd_reread_wb += weight_pass(wi) + S * weight_pass(wh);
      fwd_cached_w += act_w;
      // Training: the forward also writes the tape; the backward reads the output gradient,
      // the tape, the input rows and the weights, and writes the input, state and weight
      // gradients.
      const wide bwd_act_r = R * H + R * 4 * H + (R + N) * H + R * in;
      const wide bwd_w = R * in + N * H + wi + wh + 2 * b;
      trn_cached_r += 2 * b + act_r + bwd_act_r;
      trn_reread_r += (b + S * b + act_r) + bwd_act_r;
      trn_cached_wb += 2 * (weight_pass(wi) + weight_pass(wh));
      trn_reread_wb += 2 * weight_pass(wi) + 2 * S * weight_pass(wh);
      // bf16: W_ih and W_hh read in f32 and written in bf16 twice (as is and transposed).
      if (p.precision != Precision::f32) pack_r += es * (wi + wh), pack_w += 4 * (wi + wh);
      trn_cached_w += act_w + R * 4 * H + (R + N) * H + bwd_w;

      // Roofline phases, in the order grux runs them (src/ops/gru_layer.cpp): the input
      // projection of all rows (a GEMM in blocks of 96 rows, each thread re-reading its
      // share of W_ih per block), then the recurrence (W_hh at every step, the gate
      // pre-activations read back); in training, the backward recurrence (W_hh at every
      // step) and then dx, dW_ih and dW_hh as GEMMs over all rows.
      const double e = static_cast<double>(es);
      const int64_t split = split_of(p.hidden_size, p.dtype);
      Phase proj;
      proj.name = fmt::format("layer {} direction {}: input projection", l, d);
      proj.gemm_flops = static_cast<double>(2 * R * 3 * H * in);
      proj.weight_bytes = static_cast<double>(weight_pass(wi) + b * es);
      proj.weight_passes = static_cast<double>((R + 95) / 96);
      proj.split = split;
      proj.stream_bytes = static_cast<double>(R * in + R * 3 * H) * e;
      proj.gru_kernel = true;
      proj.precision = p.precision;
      Phase rec;
      rec.name = fmt::format("layer {} direction {}: recurrence", l, d);
      rec.gemm_flops = static_cast<double>(2 * R * 3 * H * H);
      rec.weight_bytes = static_cast<double>(weight_pass(wh) + b * es);
      rec.weight_passes = static_cast<double>(S);
      rec.split = split;
      rec.stream_bytes = static_cast<double>(R * 3 * H + R * H + 2 * N * H) * e;
      rec.steps = static_cast<double>(S);
      rec.gru_kernel = true;
      rec.precision = p.precision;
      r.inference_phases.push_back(proj);
      r.inference_phases.push_back(rec);
      Phase rec_t = rec;  // training: the tape's extra columns (hn) are written too
      rec_t.stream_bytes += static_cast<double>(R * H + (R + N) * H) * e;
      r.training_phases.push_back(proj);
      r.training_phases.push_back(rec_t);
      Phase back;
      back.name = fmt::format("layer {} direction {}: backward recurrence", l, d);
      back.gemm_flops = static_cast<double>(2 * R * 3 * H * H);
      back.weight_bytes = static_cast<double>(weight_pass(wh));
      back.precision = p.precision;
      back.weight_passes = static_cast<double>(S);
      back.split = split;
      // dy, the tape (r z n, hn, states) in; the gate gradients out.
      back.stream_bytes = static_cast<double>(R * H + R * 4 * H + (R + N) * H + R * 3 * H) * e;
      back.steps = static_cast<double>(S);
      Phase grads;
      grads.name = fmt::format("layer {} direction {}: dx, dW_ih, dW_hh", l, d);
      grads.gemm_flops = static_cast<double>(2 * R * 3 * H * in + 2 * 3 * H * (in + H) * R);
      grads.weight_bytes = static_cast<double>(weight_pass(wi));
      grads.precision = p.precision;
      grads.weight_passes = 1;
      grads.split = split;
      // Gate gradients (read by three GEMMs), x and the states in; dx and the weight
      // gradients out.
      grads.stream_bytes =
          static_cast<double>(3 * R * 3 * H + R * in + R * H + R * in + wi + wh + 2 * b) * e;
      r.training_phases.push_back(back);
      r.training_phases.push_back(grads);
    }
  }
  counts.store(r);
  const wide states = wide(p.num_layers) * p.directions() * N * H;
  r.memory.parameters = narrow(params, what);
  r.memory.parameter_bytes = narrow(params * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((infer_peak + states) * es, what);
  // Training keeps the input, every layer's output (the next layer's input; the top one is
  // the output), the tape of every layer-direction and the final states.
  r.memory.training_bytes = narrow(
      (TN * p.input_size + wide(p.num_layers) * TN * p.directions() * H + tape + states) * es,
      what);
  r.inference_traffic.cached = {narrow(fwd_cached_r * es + fwd_cached_wb, what),
                                narrow(fwd_cached_w * es, what)};
  r.inference_traffic.reread = {narrow(fwd_reread_r * es + fwd_reread_wb, what),
                                narrow(fwd_cached_w * es, what)};
  r.training_traffic.cached = {narrow(trn_cached_r * es + trn_cached_wb + pack_r, what),
                               narrow(trn_cached_w * es + pack_w, what)};
  r.training_traffic.reread = {narrow(trn_reread_r * es + trn_reread_wb + pack_r, what),
                               narrow(trn_cached_w * es + pack_w, what)};
  return r;
}

CostReport gru_stream_cost(const GruProblem& p) {
  using namespace cost_detail;
  if (p.directions() != 1)
    throw Error(fmt::format("gru {}: the streaming API runs unidirectional stacks only (d1)",
                            p.descriptor()));
  if (!p.lengths.empty())
    throw Error(fmt::format("gru {}: the streaming API takes no lengths", p.descriptor()));
  CostReport r = gru_cost(p);
  r.op = "gru_stream";
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide H = p.hidden_size, N = p.N, T = p.T;
  const std::string what = "gru_stream " + p.descriptor();
  // Every frame is a separate call: each layer reads all its weights once per frame.
  wide reread_r = 0;
  r.inference_phases.clear();
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const wide in = l == 0 ? p.input_size : H;
    // Weight bytes per frame: W_ih and W_hh in the products' precision, biases in f32.
    const wide wb = weight_pass_bytes(p.precision, es, 3 * H * in, 3 * H) +
                    weight_pass_bytes(p.precision, es, 3 * H * H, 3 * H) +
                    (p.bias ? 6 * H : 0) * es;
    reread_r += T * wb + (T * N * in + N * H) * es;
    Phase f;
    f.name = fmt::format("layer {} streamed frame by frame", l);
    f.gemm_flops = static_cast<double>(2 * T * N * 3 * H * (in + H));
    f.precision = p.precision;
    f.weight_bytes = static_cast<double>(wb);
    f.weight_passes = static_cast<double>(T);
    f.split = split_of(p.hidden_size, p.dtype);
    f.stream_bytes = static_cast<double>((T * N * in + T * N * H + 2 * N * H) * es);
    f.steps = static_cast<double>(T);
    r.inference_phases.push_back(f);
  }
  r.inference_traffic.reread.read = narrow(reread_r, what);
  return r;
}

CostReport gru_cell_cost(const GruCellProblem& p) {
  using namespace cost_detail;
  CostReport r;
  r.op = "gru_cell";
  r.problem = p.descriptor();
  r.variant = variant_of(p.bias, p.form);
  r.dtype = p.dtype;
  const std::string what = "gru_cell " + p.descriptor();
  check_countable(64.0 * (double(p.N) + 1) * double(p.H) * (double(p.I) + double(p.H) + 8) * 8,
                  what);
  const wide es = static_cast<wide>(dtype_size(p.dtype));
  const wide N = p.N, I = p.I, H = p.H;
  layer_counts(N, I, H, p.bias, p.form, /*carry=*/false).store(r);
  const wide w = 3 * H * I + 3 * H * H, b = p.bias ? 6 * H : 0;
  r.memory.parameters = narrow(w + b, what);
  r.memory.parameter_bytes = narrow((w + b) * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((N * I + 2 * N * H) * es, what);
  // Backward needs x, h and the gate values r, z, n, W_hn h + b_hn (4H per row).
  r.memory.training_bytes = narrow((N * I + 2 * N * H + 4 * N * H) * es, what);
  // One step: both cache models move the same bytes.
  const Traffic fwd{narrow((w + b + N * I + N * H) * es, what), narrow(N * H * es, what)};
  // Training: forward + tape out; backward reads d(h'), the tape, x, h and the weights and
  // writes dx, dh and the weight gradients.
  const Traffic trn{
      narrow((w + b + N * I + N * H + N * H + 4 * N * H + N * I + N * H + w) * es, what),
      narrow((N * H + 4 * N * H + N * I + N * H + w + b) * es, what)};
  r.inference_traffic = {fwd, fwd};
  r.training_traffic = {trn, trn};
  Phase f;
  f.name = "one step";
  f.gemm_flops = static_cast<double>(2 * N * 3 * H * (I + H));
  f.weight_bytes = static_cast<double>((w + b) * es);
  f.weight_passes = 1;
  f.split = split_of(p.H, p.dtype);
  f.stream_bytes = static_cast<double>((N * I + 2 * N * H) * es);
  f.steps = 1;
  r.inference_phases = {f};
  Phase ft = f;
  ft.stream_bytes += static_cast<double>(4 * N * H * es);  // the tape
  Phase bk = f;
  bk.name = "one step backward";
  bk.gemm_flops = 2 * f.gemm_flops;
  bk.weight_bytes = static_cast<double>(w * es);
  // Backward activations: d(h'), the tape, x and h in; dx, dh and the weight gradients out.
  bk.stream_bytes =
      static_cast<double>((N * H + 4 * N * H + N * I + N * H) * es + (N * I + N * H + w + b) * es);
  r.training_phases = {ft, bk};
  return r;
}

}  // namespace grux
