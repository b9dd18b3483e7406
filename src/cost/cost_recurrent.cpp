// Cost of the recurrent cells, the GRU and the LSTM: the stack (layers x directions x time,
// variable lengths), the stack driven frame by frame through the streaming API, and the single
// cell (nn.GRUCell, nn.LSTMCell). One stack, stream and cell model (StackCell says what differs
// between the cells); each cell's operation counts. Formulas: docs/cost_model.md.
//
// Sizes: L layers, D directions, T steps, N sequences, I inputs, H hidden, G gates (3 or 4),
// H_out the width of h (the LSTM's proj_size P, else H); per layer-direction `in` is I for
// layer 0 and D*H_out above, R = rows = sum of lengths (N*T without lengths), S = sequential
// steps = the longest length (T without lengths). es = bytes per scalar.
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "cost/cost_util.h"

namespace grux {
namespace {

using cost_detail::kSeed;
using cost_detail::wide;
using cost_detail::WideCounts;

// Forward and backward counts of one GRU layer-direction over R rows of width `in`.
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

// Forward and backward counts of one LSTM layer-direction over R rows of width `in`, P the
// projection's width (0: none). `carry` as for the GRU.
WideCounts lstm_layer_counts(wide R, wide in, wide H, wide P, bool bias, bool carry) {
  using namespace cost_detail;
  WideCounts c;
  const wide RH = R * H, Ho = P > 0 ? P : H;
  // Forward. Gate pre-activations: 4H dots of length `in` and 4H of length H_out per row, each
  // with its bias.
  add_dots(c.fwd, R * 4 * H, in);
  add_dots(c.fwd, R * 4 * H, Ho);
  if (bias) c.fwd[kSeed].bias += 2 * R * 4 * H;
  // Per (row, unit): the four gates add their two halves (4); c' = f*c + i*g (3);
  // o * tanh(c') (1). Sigmoid for i, f, o, tanh for g and c'.
  c.fwd[kSeed].elementwise += 8 * RH;
  c.fwd[kSeed].activation += (3 * kSigmoidOps + 2 * kTanhOps) * RH;
  if (P > 0) add_dots(c.fwd, R * P, H);  // h' = W_hr (o * tanh(c'))

  // Backward, from the saved gates and cell states (and o * tanh(c') with a projection);
  // tanh(c') is recomputed, as PyTorch's fused LSTM cell backward does.
  if (P > 0) {
    add_dots(c.bwd, RH, P);     // the gradient into o * tanh(c'): W_hr^T dh
    add_dots(c.bwd, P * H, R);  // dW_hr
  }
  add_dots(c.bwd, R * Ho, 4 * H);                      // gradient into the previous state h
  add_dots(c.bwd, R * in, 4 * H);                      // input gradient
  add_dots(c.bwd, 4 * H * in, R);                      // dW_ih
  add_dots(c.bwd, 4 * H * Ho, R);                      // dW_hh
  if (bias) c.bwd[kSeed].bias += 2 * 4 * H * (R - 1);  // db_ih, db_hh: column sums
  // Per (row, unit), with m = o * tanh(c'): do = dm*tanh(c') (1); dm*o (1) into tanh's
  // derivative, added to the cell gradient from the next step or the caller (1);
  // di = dc*g, dg = dc*i, df = dc*c, and dc*f into the previous cell state (4).
  c.bwd[kSeed].elementwise += 7 * RH;
  // In a sequence, g = dy + the carried gradient, per (row, unit of h).
  if (carry) c.bwd[kSeed].elementwise += R * Ho;
  c.bwd[kSeed].activation += (kTanhOps + 3 * kSigmoidGradOps + 2 * kTanhGradOps) * RH;
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

// What the stack, stream and cell models read of a cell; the rest is the same for both.
struct StackCell {
  int64_t gates = 3;     // G
  int64_t H = 0, P = 0;  // hidden size; projection width (0: none)
  bool bias = true;
  bool cell_state = false;  // the LSTM's c: a second state, H wide, in and out
  int64_t tape_gates = 4;   // the tape's values per row and unit besides the states
  // Operation counts of one layer-direction over R rows of width `in`.
  std::function<cost_detail::WideCounts(cost_detail::wide R, cost_detail::wide in, bool carry)>
      counts;

  int64_t out() const { return P > 0 ? P : H; }  // H_out
  // State values per sequence, per layer-direction: h, and c for the LSTM.
  cost_detail::wide state() const { return out() + (cell_state ? H : 0); }
  // The tape of one layer-direction over R rows of N sequences: the gate values per row
  // (tape_gates * H: the GRU's r, z, n and W_hn h + b_hn, the LSTM's i, f, g, o), every
  // state h (the initial one included), the LSTM's every c, and o * tanh(c') with a
  // projection.
  cost_detail::wide tape(cost_detail::wide R, cost_detail::wide N) const {
    cost_detail::wide t = R * tape_gates * H + (R + N) * out();
    if (cell_state) t += (R + N) * H;
    if (P > 0) t += R * H;
    return t;
  }
};

// The stack's report: counts, memory, traffic and roofline phases of L layers x D directions
// over the problem's rows, for `cell`. r holds op, problem, variant and dtype already.
void stack_cost(CostReport& r, const StackCell& cell, const SequenceShape& s, int64_t L, int64_t D,
                int64_t I, Precision precision) {
  using namespace cost_detail;
  const wide es = static_cast<wide>(dtype_size(s.dtype));
  const wide R = s.rows(), H = cell.H, Ho = cell.out(), P = cell.P, G = cell.gates, N = s.N,
             TN = wide(s.T) * s.N;
  const int64_t S = s.lengths.empty() ? s.T : *std::max_element(s.lengths.begin(), s.lengths.end());
  const std::string what = r.op + " " + r.problem;
  const auto weight_pass = [&](wide elements) {
    return weight_pass_bytes(precision, es, elements, G * H);
  };
  {
    // Per row, unit and layer-direction at most 2G in + 2G H + 8G forward and twice that
    // backward (ops), or (G + 1) in + 2G H values moved: 64 (in + H) bounds both, with
    // in + H <= (I + 2H) + H.
    const double rows = static_cast<double>(R) + static_cast<double>(TN) + double(N);
    const double width = double(I) + double(G) * double(H) + 8;
    check_countable(64.0 * double(L) * double(D) * rows * double(H) * width * 8.0, what);
    check_countable(64.0 * double(L) * double(D) * double(S) * double(H) * width, what);
  }

  WideCounts counts;
  wide params = 0, tape = 0, infer_peak = 0;
  wide fwd_cached_r = 0, fwd_cached_w = 0, fwd_reread_r = 0;
  wide trn_cached_r = 0, trn_cached_w = 0, trn_reread_r = 0;
  // Bytes of the weight passes (in the products' precision), apart from the counts above.
  wide fwd_cached_wb = 0, fwd_reread_wb = 0, trn_cached_wb = 0, trn_reread_wb = 0;
  wide pack_r = 0, pack_w = 0;  // training in bf16: the weights converted every step
  for (int64_t l = 0; l < L; ++l) {
    const wide in = l == 0 ? I : D * Ho;
    // Inference peak while layer l runs: its input, its output, the final states.
    infer_peak = std::max(infer_peak, TN * in + TN * D * Ho);
    if (D == 2) counts.bwd[kSeed].elementwise += R * in;  // the two directions' dx summed
    for (int64_t d = 0; d < D; ++d) {
      counts += cell.counts(R, in, /*carry=*/true);
      const wide wi = G * H * in, wh = G * H * Ho, wr = P * H, b = cell.bias ? G * H : 0;
      const wide tp = cell.tape(R, N);
      params += wi + wh + wr + 2 * b;
      tape += tp;
      // Forward: weights, input rows and initial states in; output rows and final states out.
      const wide act_r = R * in + N * cell.state(), act_w = R * Ho + N * cell.state();
      // The projection's weights, read as stored (es), with the recurrent ones at every step.
      const wide rec_wb = weight_pass(wh) + es * wr;
      fwd_cached_r += 2 * b + act_r;
      fwd_reread_r += b + S * b + act_r;
      fwd_cached_wb += weight_pass(wi) + rec_wb;
      fwd_reread_wb += weight_pass(wi) + S * rec_wb;
      fwd_cached_w += act_w;
      // Training: the forward also writes the tape; the backward reads the output gradient,
      // the tape, the input rows and the weights, and writes the input, state and weight
      // gradients.
      const wide bwd_act_r = R * Ho + tp + R * in;
      const wide bwd_w = R * in + N * cell.state() + wi + wh + wr + 2 * b;
      trn_cached_r += 2 * b + act_r + bwd_act_r;
      trn_reread_r += (b + S * b + act_r) + bwd_act_r;
      trn_cached_wb += 2 * (weight_pass(wi) + rec_wb);
      trn_reread_wb += 2 * weight_pass(wi) + 2 * S * rec_wb;
      // bf16: W_ih and W_hh read in f32 and written in bf16 twice (as is and transposed).
      if (precision != Precision::f32) pack_r += es * (wi + wh), pack_w += 4 * (wi + wh);
      trn_cached_w += act_w + tp + bwd_w;

      // Roofline phases, in the order grux runs them (src/ops/recurrent_layer.h): the input
      // projection of all rows (a GEMM in blocks of 96 rows, each thread re-reading its
      // share of W_ih per block), then the recurrence (W_hh, and W_hr with a projection, at
      // every step, the gate pre-activations read back); in training, the backward recurrence
      // (the same weights at every step) and then dx and the weight gradients as GEMMs over
      // all rows.
      const double e = static_cast<double>(es);
      const int64_t split = split_of(cell.H, s.dtype);
      Phase proj;
      proj.name = fmt::format("layer {} direction {}: input projection", l, d);
      proj.gemm_flops = static_cast<double>(2 * R * G * H * in);
      proj.weight_bytes = static_cast<double>(weight_pass(wi) + b * es);
      proj.weight_passes = static_cast<double>((R + 95) / 96);
      proj.split = split;
      proj.stream_bytes = static_cast<double>(R * in + R * G * H) * e;
      proj.gru_kernel = true;
      proj.precision = precision;
      Phase rec;
      rec.name = fmt::format("layer {} direction {}: recurrence", l, d);
      rec.gemm_flops = static_cast<double>(2 * R * G * H * Ho + 2 * R * P * H);
      rec.weight_bytes = static_cast<double>(rec_wb + b * es);
      rec.weight_passes = static_cast<double>(S);
      rec.split = split;
      rec.stream_bytes = static_cast<double>(R * G * H + R * Ho + 2 * N * cell.state()) * e;
      rec.steps = static_cast<double>(S);
      rec.gru_kernel = true;
      rec.precision = precision;
      r.inference_phases.push_back(proj);
      r.inference_phases.push_back(rec);
      Phase rec_t = rec;  // training: the rest of the tape is written too
      rec_t.stream_bytes += static_cast<double>(tp - R * G * H) * e;
      r.training_phases.push_back(proj);
      r.training_phases.push_back(rec_t);
      Phase back;
      back.name = fmt::format("layer {} direction {}: backward recurrence", l, d);
      back.gemm_flops = static_cast<double>(2 * R * G * H * Ho + 2 * R * P * H);
      back.weight_bytes = static_cast<double>(rec_wb);
      back.precision = precision;
      back.weight_passes = static_cast<double>(S);
      back.split = split;
      // dy and the tape in; the gate gradients out.
      back.stream_bytes = static_cast<double>(R * Ho + tp + R * G * H) * e;
      back.steps = static_cast<double>(S);
      Phase grads;
      grads.name =
          fmt::format("layer {} direction {}: dx, dW_ih, dW_hh{}", l, d, P > 0 ? ", dW_hr" : "");
      grads.gemm_flops =
          static_cast<double>(2 * R * G * H * in + 2 * G * H * (in + Ho) * R + 2 * P * H * R);
      grads.weight_bytes = static_cast<double>(weight_pass(wi));
      grads.precision = precision;
      grads.weight_passes = 1;
      grads.split = split;
      // Gate gradients (read by three GEMMs), x and the states in; dx and the weight
      // gradients out.
      grads.stream_bytes =
          static_cast<double>(3 * R * G * H + R * in + R * Ho + R * in + wi + wh + wr + 2 * b) * e;
      r.training_phases.push_back(back);
      r.training_phases.push_back(grads);
    }
  }
  counts.store(r);
  const wide states = wide(L) * D * N * cell.state();
  r.memory.parameters = narrow(params, what);
  r.memory.parameter_bytes = narrow(params * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((infer_peak + states) * es, what);
  // Training keeps the input, every layer's output (the next layer's input; the top one is
  // the output), the tape of every layer-direction and the final states.
  r.memory.training_bytes = narrow((TN * I + wide(L) * TN * D * Ho + tape + states) * es, what);
  r.inference_traffic.cached = {narrow(fwd_cached_r * es + fwd_cached_wb, what),
                                narrow(fwd_cached_w * es, what)};
  r.inference_traffic.reread = {narrow(fwd_reread_r * es + fwd_reread_wb, what),
                                narrow(fwd_cached_w * es, what)};
  r.training_traffic.cached = {narrow(trn_cached_r * es + trn_cached_wb + pack_r, what),
                               narrow(trn_cached_w * es + pack_w, what)};
  r.training_traffic.reread = {narrow(trn_reread_r * es + trn_reread_wb + pack_r, what),
                               narrow(trn_cached_w * es + pack_w, what)};
}

// A stack's report (stack_cost's) turned into the streaming API's: every frame is a separate
// call, so each layer reads all its weights once per frame.
void stream_cost(CostReport& r, const StackCell& cell, const SequenceShape& s, int64_t L, int64_t I,
                 Precision precision) {
  using namespace cost_detail;
  const wide es = static_cast<wide>(dtype_size(s.dtype));
  const wide H = cell.H, Ho = cell.out(), G = cell.gates, N = s.N, T = s.T;
  const std::string what = r.op + " " + r.problem;
  wide reread_r = 0;
  r.inference_phases.clear();
  for (int64_t l = 0; l < L; ++l) {
    const wide in = l == 0 ? I : Ho;
    // Weight bytes per frame: W_ih and W_hh in the products' precision, W_hr and the biases
    // as stored.
    const wide wb = weight_pass_bytes(precision, es, G * H * in, G * H) +
                    weight_pass_bytes(precision, es, G * H * Ho, G * H) +
                    (cell.P * H + (cell.bias ? 2 * G * H : 0)) * es;
    reread_r += T * wb + (T * N * in + N * cell.state()) * es;
    Phase f;
    f.name = fmt::format("layer {} streamed frame by frame", l);
    f.gemm_flops = static_cast<double>(2 * T * N * (G * H * (in + Ho) + cell.P * H));
    f.precision = precision;
    f.weight_bytes = static_cast<double>(wb);
    f.weight_passes = static_cast<double>(T);
    f.split = split_of(cell.H, s.dtype);
    f.stream_bytes = static_cast<double>((T * N * in + T * N * Ho + 2 * N * cell.state()) * es);
    f.steps = static_cast<double>(T);
    r.inference_phases.push_back(f);
  }
  r.inference_traffic.reread.read = narrow(reread_r, what);
}

// One step of one layer (nn.GRUCell, nn.LSTMCell): N rows, I inputs, H hidden. The tape is
// the gate values and, for the LSTM, c' (tape_gates + 1 values per row and unit).
void cell_cost(CostReport& r, const StackCell& cell, int64_t N_, int64_t I_, DType dtype) {
  using namespace cost_detail;
  const std::string what = r.op + " " + r.problem;
  check_countable(64.0 * (double(N_) + 1) * double(cell.H) * (double(I_) + double(cell.H) + 8) * 8 *
                      double(cell.gates),
                  what);
  const wide es = static_cast<wide>(dtype_size(dtype));
  const wide N = N_, I = I_, H = cell.H, G = cell.gates;
  const wide st = cell.cell_state ? 2 : 1;  // states in and out: h, and c
  const wide tp = N * H * (cell.tape_gates + (cell.cell_state ? 1 : 0));
  cell.counts(N, I, /*carry=*/false).store(r);
  const wide w = G * H * I + G * H * H, b = cell.bias ? 2 * G * H : 0;
  r.memory.parameters = narrow(w + b, what);
  r.memory.parameter_bytes = narrow((w + b) * es, what);
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = narrow((N * I + 2 * st * N * H) * es, what);
  // Backward needs x, the states and the tape.
  r.memory.training_bytes = narrow((N * I + 2 * st * N * H + tp) * es, what);
  // One step: both cache models move the same bytes.
  const Traffic fwd{narrow((w + b + N * I + st * N * H) * es, what), narrow(st * N * H * es, what)};
  // Training: forward + tape out; backward reads the states' gradients, the tape, x, the
  // states and the weights and writes dx, the states' gradients and the weight gradients.
  const Traffic trn{
      narrow((w + b + N * I + st * N * H + st * N * H + tp + N * I + st * N * H + w) * es, what),
      narrow((st * N * H + tp + N * I + st * N * H + w + b) * es, what)};
  r.inference_traffic = {fwd, fwd};
  r.training_traffic = {trn, trn};
  Phase f;
  f.name = "one step";
  f.gemm_flops = static_cast<double>(2 * N * G * H * (I + H));
  f.weight_bytes = static_cast<double>((w + b) * es);
  f.weight_passes = 1;
  f.split = split_of(cell.H, dtype);
  f.stream_bytes = static_cast<double>((N * I + 2 * st * N * H) * es);
  f.steps = 1;
  r.inference_phases = {f};
  Phase ft = f;
  ft.stream_bytes += static_cast<double>(tp * es);  // the tape
  Phase bk = f;
  bk.name = "one step backward";
  bk.gemm_flops = 2 * f.gemm_flops;
  bk.weight_bytes = static_cast<double>(w * es);
  // Backward activations: the states' gradients, the tape, x and the states in; dx, the
  // states' gradients and the weight gradients out.
  bk.stream_bytes = static_cast<double>((st * N * H + tp + N * I + st * N * H) * es +
                                        (N * I + st * N * H + w + b) * es);
  r.training_phases = {ft, bk};
}

StackCell gru_cell_of(int64_t H, bool bias, GruForm form) {
  StackCell c;
  c.gates = 3, c.H = H, c.bias = bias, c.tape_gates = 4;
  c.counts = [H, bias, form](cost_detail::wide R, cost_detail::wide in, bool carry) {
    return layer_counts(R, in, H, bias, form, carry);
  };
  return c;
}

StackCell lstm_cell_of(int64_t H, int64_t P, bool bias) {
  StackCell c;
  c.gates = 4, c.H = H, c.P = P, c.bias = bias, c.cell_state = true, c.tape_gates = 4;
  c.counts = [H, P, bias](cost_detail::wide R, cost_detail::wide in, bool carry) {
    return lstm_layer_counts(R, in, H, P, bias, carry);
  };
  return c;
}

// The streaming API's shape contract, either cell.
template <typename Problem>
void check_streamable(const char* op, const Problem& p) {
  if (p.directions() != 1)
    throw Error(fmt::format("{} {}: the streaming API runs unidirectional stacks only (d1)", op,
                            p.descriptor()));
  if (!p.lengths.empty())
    throw Error(fmt::format("{} {}: the streaming API takes no lengths", op, p.descriptor()));
}

}  // namespace

CostReport gru_cost(const GruProblem& p) {
  cost_detail::check_lengths("gru", p);
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
  stack_cost(r, gru_cell_of(p.hidden_size, p.bias, p.form), p, p.num_layers, p.directions(),
             p.input_size, p.precision);
  return r;
}

CostReport gru_stream_cost(const GruProblem& p) {
  check_streamable("gru", p);
  CostReport r = gru_cost(p);
  r.op = "gru_stream";
  stream_cost(r, gru_cell_of(p.hidden_size, p.bias, p.form), p, p.num_layers, p.input_size,
              p.precision);
  return r;
}

CostReport gru_cell_cost(const GruCellProblem& p) {
  CostReport r;
  r.op = "gru_cell";
  r.problem = p.descriptor();
  r.variant = variant_of(p.bias, p.form);
  r.dtype = p.dtype;
  cell_cost(r, gru_cell_of(p.H, p.bias, p.form), p.N, p.I, p.dtype);
  return r;
}

CostReport lstm_cost(const LstmProblem& p) {
  cost_detail::check_lengths("lstm", p);
  CostReport r;
  r.op = "lstm";
  r.problem = p.descriptor();
  r.variant = p.bias ? "bias" : "no bias";
  if (!p.lengths.empty()) r.variant += fmt::format(", lengths (sum {})", p.rows());
  r.dtype = p.dtype;
  stack_cost(r, lstm_cell_of(p.hidden_size, p.proj_size, p.bias), p, p.num_layers, p.directions(),
             p.input_size, Precision::f32);
  return r;
}

CostReport lstm_stream_cost(const LstmProblem& p) {
  check_streamable("lstm", p);
  CostReport r = lstm_cost(p);
  r.op = "lstm_stream";
  stream_cost(r, lstm_cell_of(p.hidden_size, p.proj_size, p.bias), p, p.num_layers, p.input_size,
              Precision::f32);
  return r;
}

CostReport lstm_cell_cost(const LstmCellProblem& p) {
  CostReport r;
  r.op = "lstm_cell";
  r.problem = p.descriptor();
  r.variant = p.bias ? "bias" : "no bias";
  r.dtype = p.dtype;
  cell_cost(r, lstm_cell_of(p.H, 0, p.bias), p.N, p.I, p.dtype);
  return r;
}

}  // namespace grux
