// The cost model's operators by name (for the CLI and the sweep), the counting modes, and the
// small shared pieces of the report. To add an operator: one entry in cost_ops().
#include <fmt/format.h>

#include "cost/cost_util.h"

namespace grux {

int64_t OpCount::total() const {
  int64_t t = 0;
  for (int64_t part : {matmul, bias, elementwise, activation})
    if (__builtin_add_overflow(t, part, &t))
      throw Error("operation count does not fit in 64 bits (problem too large)");
  return t;
}

int64_t CostReport::training_total(CountMode m) const {
  int64_t t = 0;
  if (__builtin_add_overflow(fwd(m).total(), bwd(m).total(), &t))
    throw Error(fmt::format("{} {}: the training count does not fit in 64 bits", op, problem));
  return t;
}

const char* count_mode_name(CountMode m) {
  switch (m) {
    case CountMode::seed:
      return "seed";
    case CountMode::gemm:
      return "gemm";
    case CountMode::mac:
      return "mac";
  }
  return "?";
}

const char* count_unit(CountMode m) {
  switch (m) {
    case CountMode::seed:
      return "ops";
    case CountMode::gemm:
      return "FLOP";
    case CountMode::mac:
      return "MAC";
  }
  return "?";
}

CountMode parse_count_mode(const std::string& text) {
  for (CountMode m : {CountMode::seed, CountMode::gemm, CountMode::mac})
    if (text == count_mode_name(m)) return m;
  throw Error(fmt::format("--mode {} (expected seed, gemm or mac)", text));
}

namespace {

void no_option(const std::string& op, bool given, const char* option) {
  if (given) throw Error(fmt::format("{} takes no {}", op, option));
}

// Options an operator without them must not be given.
void check_options(const CostOp& op, const CostOptions& o) {
  if (!op.has_bias) no_option(op.name, !o.bias, "--no-bias");
  if (!op.has_form) no_option(op.name, o.form != GruForm::linear_before_reset, "--reset-before");
  if (!op.has_lengths) no_option(op.name, !o.lengths.empty(), "--lengths");
  if (op.name != "gru" && op.name != "gru_stream")
    no_option(op.name, o.precision != Precision::f32, "--precision");
}

CostReport gru_from(const std::string& d, const CostOptions& o, bool stream) {
  GruProblem p = GruProblem::parse(d);
  p.bias = o.bias, p.form = o.form, p.dtype = o.dtype, p.precision = o.precision;
  p.set_lengths(o.lengths);
  return stream ? gru_stream_cost(p) : gru_cost(p);
}

CostReport lstm_from(const std::string& d, const CostOptions& o, bool stream) {
  LstmProblem p = LstmProblem::parse(d);
  p.bias = o.bias, p.dtype = o.dtype;
  p.set_lengths(o.lengths);
  return stream ? lstm_stream_cost(p) : lstm_cost(p);
}

CostReport scan_from(ScanCostOp op, const std::string& d, const CostOptions& o) {
  ScanProblem p = ScanProblem::parse(d);
  p.dtype = o.dtype;
  return scan_cost(op, p);
}

CostReport activation_from(Activation a, const std::string& d, const CostOptions& o) {
  ActivationProblem p = ActivationProblem::parse(a, d);
  p.dtype = o.dtype;
  return activation_cost(p);
}

}  // namespace

const std::vector<CostOp>& cost_ops() {
  static const std::vector<CostOp> ops = {
      {"gru", "GRU stack (nn.GRU): layers x directions x time", "l{L}d{D}t{T}n{N}i{I}h{H}",
       "l1d1t100n64i256h512", "ldtnih", "ld", true, true, true,
       [](const std::string& d, const CostOptions& o) { return gru_from(d, o, false); }},
      {"gru_stream", "GRU stack fed one frame per call (GruStream, grux bench gru --cell)",
       "l{L}d1t{T}n{N}i{I}h{H}", "l1d1t1000n1i64h256", "ldtnih", "ld", true, true, false,
       [](const std::string& d, const CostOptions& o) { return gru_from(d, o, true); }},
      {"gru_cell", "one GRUCell step (nn.GRUCell)", "n{N}i{I}h{H}", "n1i256h256", "nih", "", true,
       true, false,
       [](const std::string& d, const CostOptions& o) {
         GruCellProblem p = GruCellProblem::parse(d);
         p.bias = o.bias, p.form = o.form, p.dtype = o.dtype;
         return gru_cell_cost(p);
       }},
      {"lstm", "LSTM stack (nn.LSTM): layers x directions x time, optional projection p",
       "l{L}d{D}t{T}n{N}i{I}h{H}[p{P}]", "l1d1t100n64i256h512", "ldtnihp", "ldp", true, false, true,
       [](const std::string& d, const CostOptions& o) { return lstm_from(d, o, false); }},
      {"lstm_stream", "LSTM stack fed one frame per call (LstmStream, grux bench lstm --cell)",
       "l{L}d1t{T}n{N}i{I}h{H}[p{P}]", "l1d1t1000n1i64h256", "ldtnihp", "ldp", true, false, false,
       [](const std::string& d, const CostOptions& o) { return lstm_from(d, o, true); }},
      {"lstm_cell", "one LSTMCell step (nn.LSTMCell)", "n{N}i{I}h{H}", "n1i256h256", "nih", "",
       true, false, false,
       [](const std::string& d, const CostOptions& o) {
         LstmCellProblem p = LstmCellProblem::parse(d);
         p.bias = o.bias, p.dtype = o.dtype;
         return lstm_cell_cost(p);
       }},
      {"linear", "nn.Linear, y = x W^T + b", "b{B}i{I}o{O}", "b32i256o512", "bio", "", true, false,
       false,
       [](const std::string& d, const CostOptions& o) {
         LinearProblem p = LinearProblem::parse(d);
         p.bias = o.bias, p.dtype = o.dtype;
         return linear_cost(p);
       }},
      {"conv1d", "F.conv1d (r: dilation)", "n{N}c{C}l{L}d{D}k{K}[s{S}][p{P}][r{R}][g{G}]",
       "n8c16l128d32k3", "ncldksprg", "sprg", true, false, false,
       [](const std::string& d, const CostOptions& o) {
         Conv1dProblem p = Conv1dProblem::parse(d);
         p.bias = o.bias, p.dtype = o.dtype;
         return conv1d_cost(p);
       }},
      {"conv2d", "F.conv2d (r: dilation; k, s, p, r as one value or HxW)",
       "n{N}c{C}h{H}w{W}d{D}k{K}[s{S}][p{P}][r{R}][g{G}]", "n8c16h64w64d32k3", "nchwdksprg", "sprg",
       true, false, false,
       [](const std::string& d, const CostOptions& o) {
         ConvProblem p = ConvProblem::parse(d);
         p.bias = o.bias, p.dtype = o.dtype;
         return conv2d_cost(p);
       }},
      {"mingru", "minGRU stack (linear variant; grux bench mingru)", "l{L}t{T}n{N}i{I}h{H}",
       "l1t4096n8i256h256", "ltnih", "l", true, false, true,
       [](const std::string& d, const CostOptions& o) {
         MinGruProblem p = MinGruProblem::parse(d);
         p.bias = o.bias, p.dtype = o.dtype;
         p.set_lengths(o.lengths);
         return mingru_cost(p);
       }},
      {"charlm",
       "the language model of grux train, one window: embedding, GRU, linear, cross-entropy, "
       "Adam",
       "l{L}t{T}n{N}e{E}h{H}v{V}", "l1t64n16e64h512v65", "ltnehv", "", false, false, false,
       [](const std::string& d, const CostOptions& o) { return charlm_cost(d, o.dtype); }},
      {"scan_sum", "cumulative sum (grux scan sum)", "[n{N}]t{T}[c{C}]", "t16777216", "ntc", "nc",
       false, false, false,
       [](const std::string& d, const CostOptions& o) { return scan_from(ScanCostOp::sum, d, o); }},
      {"scan_prod", "cumulative product (grux scan prod)", "[n{N}]t{T}[c{C}]", "t16777216", "ntc",
       "nc", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return scan_from(ScanCostOp::prod, d, o);
       }},
      {"scan_max", "cumulative max (grux scan max)", "[n{N}]t{T}[c{C}]", "t16777216", "ntc", "nc",
       false, false, false,
       [](const std::string& d, const CostOptions& o) { return scan_from(ScanCostOp::max, d, o); }},
      {"scan_min", "cumulative min (grux scan min)", "[n{N}]t{T}[c{C}]", "t16777216", "ntc", "nc",
       false, false, false,
       [](const std::string& d, const CostOptions& o) { return scan_from(ScanCostOp::min, d, o); }},
      {"scan_logaddexp", "logcumsumexp (grux scan logaddexp)", "[n{N}]t{T}[c{C}]", "t16777216",
       "ntc", "nc", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return scan_from(ScanCostOp::logaddexp, d, o);
       }},
      {"scan_matmul", "cumulative matrix products (grux scan matmul)", "[n{N}]t{T}d{D}", "t8192d64",
       "ntd", "n", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return scan_from(ScanCostOp::matmul, d, o);
       }},
      {"scan_affine", "affine recurrence h_t = a_t h_{t-1} + b_t (grux scan affine)",
       "[n{N}]t{T}[c{C}|d{D}]", "n8t4096c1536", "ntcd", "ncd", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return scan_from(ScanCostOp::affine, d, o);
       }},
      {"sigmoid", "elementwise sigmoid", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::sigmoid, d, o);
       }},
      {"tanh", "elementwise tanh", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::tanh, d, o);
       }},
      {"relu", "elementwise ReLU", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::relu, d, o);
       }},
      {"gelu", "elementwise GELU (erf form)", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::gelu, d, o);
       }},
      {"silu", "elementwise SiLU (swish)", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::silu, d, o);
       }},
      {"leaky_relu", "elementwise leaky ReLU", "n{COUNT}", "n65536", "n", "", false, false, false,
       [](const std::string& d, const CostOptions& o) {
         return activation_from(Activation::leaky_relu, d, o);
       }},
  };
  return ops;
}

bool is_stream_op(const std::string& op) {
  return op == "gru_stream" || op == "lstm_stream";
}

const CostOp& find_cost_op(const std::string& name) {
  std::string known;
  for (const CostOp& op : cost_ops()) {
    if (op.name == name) return op;
    known += (known.empty() ? "" : ", ") + op.name;
  }
  throw Error(fmt::format("unknown operator '{}' (expected one of {})", name, known));
}

CostReport cost_of(const std::string& op_name, const std::string& descriptor,
                   const CostOptions& options) {
  const CostOp& op = find_cost_op(op_name);
  check_options(op, options);
  if (options.dtype != DType::f32 && options.dtype != DType::f64)
    throw Error(fmt::format("--dtype {} (expected f32 or f64)", dtype_name(options.dtype)));
  return op.compute(descriptor, options);
}

}  // namespace grux
