// The analytic cost model: exact operation counts in three conventions, memory (parameters,
// activations, bytes moved under two cache models), and a calibrated roofline prediction.
//
// Every function reads the problem description its operator uses (GruProblem, GruCellProblem,
// LstmProblem, LstmCellProblem, LinearProblem, ConvProblem, Conv1dProblem). Counts are exact
// integers; a count that does not fit in 63 bits is an error, never a silent wrap.
// docs/cost_model.md derives every formula.
//
// Adding an operator: write one function `CostReport xxx_cost(const
// XxxProblem&)` below and list it in cost_ops() (src/cost/registry.cpp, grux/cost_registry.h);
// the CLI, the sweep and the HTML report pick it up from there. The rest of the model, by
// purpose: grux/cost_registry.h (operators by name), grux/cost_format.h (rendering a report),
// grux/cost_profile.h (machine profiles and their files), grux/cost_predict.h (the roofline
// prediction, one machine or many ranks).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grux/conv.h"
#include "grux/export.h"
#include "grux/gru.h"
#include "grux/lstm.h"
#include "grux/mingru.h"
#include "grux/nn.h"
#include "grux/scan.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// ---- Counting conventions ----------------------------------------------------------------

// seed: every scalar +, -, x, / and exp is 1 op (the GRUCell page's convention): a length-K
//       dot product is K multiplies and K-1 adds, a bias add 1 per output, sigmoid 3
//       (exp, +, /), tanh 7 (four exps, -, +, /), ReLU 1; negation is free. Unit "ops".
// gemm: GEMM flops only, 2 per multiply-accumulate (PyTorch's FlopCounterMode, DeepSpeed).
//       Unit "FLOP".
// mac:  multiply-accumulates only (thop, ptflops). Unit "MAC".
enum class CountMode { seed = 0, gemm = 1, mac = 2 };
constexpr int kCountModes = 3;
const char* count_mode_name(CountMode m);  // "seed", "gemm", "mac"
const char* count_unit(CountMode m);       // "ops", "FLOP", "MAC"
// Throws grux::Error naming `text` and the accepted names.
CountMode parse_count_mode(const std::string& text);

// One count, split by where the work comes from; every part in the unit of its mode.
struct OpCount {
  int64_t matmul = 0;       // dot products (matrix products, convolutions)
  int64_t bias = 0;         // bias adds and bias-gradient sums (seed only)
  int64_t elementwise = 0;  // +, -, x between tensors: gate arithmetic, gradient sums (seed)
  int64_t activation = 0;   // sigmoid, tanh, ReLU and their derivatives (seed only)
  int64_t total() const;
};

// ---- Memory and traffic (bytes) ----------------------------------------------------------

struct MemoryCost {
  int64_t parameters = 0;       // number of scalars
  int64_t parameter_bytes = 0;  // at the problem's dtype
  int64_t gradient_bytes = 0;   // parameter gradients a training step writes
  // Activations live at the peak of an inference forward: input, output, states, and (for
  // stacks) the layer output being consumed by the next layer. Weights not included.
  int64_t inference_bytes = 0;
  // Activations a training forward keeps for backward (the tape), plus input and output.
  int64_t training_bytes = 0;
};

struct Traffic {
  int64_t read = 0, written = 0;
  int64_t total() const { return read + written; }
};

// Bytes one call moves between memory and the cores, under two cache models:
//   reread: every weight a step uses is fetched again at every step (no reuse across steps;
//           for the GRU the recurrent weights every step, the input projection one GEMM);
//   cached: weights are fetched once per call and then stay in cache.
// Activations (inputs, outputs, states, the tape) are moved once in both.
struct TrafficCost {
  Traffic reread, cached;
};

// ---- Roofline inputs ---------------------------------------------------------------------

// One phase of a run (one kernel: a GEMM, a time loop) as the roofline sees it: work at GEMM
// speed, a weight set read `weight_passes` times (split across up to `split` threads), and
// bytes moved once. The prediction takes max(compute, traffic) per phase and sums them.
struct Phase {
  std::string name;          // "layer 0 direction 1 forward", ...
  double gemm_flops = 0;     // FLOP at the GEMM rate
  double weight_bytes = 0;   // the weights one pass reads
  double weight_passes = 0;  // passes over them (time steps; 1 for one GEMM)
  int64_t split = 1;         // at most this many threads share the weights
  double stream_bytes = 0;   // activations read + written once, at memory bandwidth
  double steps = 0;          // sequential steps (each pays the step overhead)
  bool gru_kernel = false;   // the GRU forward's GEMMs: at ThreadProfile::gru_gemm_efficiency
  Precision precision = Precision::f32;  // the GEMMs' (bf16, int8: at their own rate)
};

// ---- The report --------------------------------------------------------------------------

// Everything the model says about one problem. Counts are indexed by CountMode.
struct CostReport {
  std::string op;       // name in cost_ops(): "gru", "gru_cell", "linear", ...
  std::string problem;  // the descriptor
  std::string variant;  // options not in the descriptor: "bias, linear_before_reset"
  DType dtype = DType::f32;
  std::array<OpCount, kCountModes> forward{}, backward{};
  MemoryCost memory;
  TrafficCost inference_traffic, training_traffic;
  // Roofline phases of an inference forward and of a training step (forward + backward).
  std::vector<Phase> inference_phases, training_phases;

  const OpCount& fwd(CountMode m) const { return forward[static_cast<int>(m)]; }
  const OpCount& bwd(CountMode m) const { return backward[static_cast<int>(m)]; }
  int64_t training_total(CountMode m) const;  // forward + backward, overflow-checked
};

// Shape contracts: every size >= 1 (the problems' parse() guarantee it); lengths, when given,
// in [1, T]. Counts cover one call: the whole stack over all steps for the GRU.
//
// GRU stack (L layers, D directions, T steps, N sequences, I inputs, H hidden, either form,
// bias or not). Variable lengths: every count uses rows = sum of lengths in place of N*T.
CostReport gru_cost(const GruProblem& p);
// The GRU stack driven one frame at a time through the streaming API (GruStream): the same
// counts as gru_cost (unidirectional only), but every step re-reads all its weights, and the
// roofline sees T steps of single-frame calls. Throws for D = 2 or variable lengths.
CostReport gru_stream_cost(const GruProblem& p);
// nn.GRUCell, one step: N rows, I inputs, H hidden.
CostReport gru_cell_cost(const GruCellProblem& p);
// The LSTM stack (nn.LSTM: L layers, D directions, T steps, N sequences, I inputs, H hidden,
// proj_size P, bias or not), its stream (LstmStream; unidirectional, no lengths) and one
// nn.LSTMCell step: the GRU's three models with the LSTM's counts (4 gates, the cell state c,
// the projection W_hr).
CostReport lstm_cost(const LstmProblem& p);
CostReport lstm_stream_cost(const LstmProblem& p);
CostReport lstm_cell_cost(const LstmCellProblem& p);
// nn.Linear: B rows, I in, O out.
CostReport linear_cost(const LinearProblem& p);
// conv2d / conv1d with bias (the problems' convention), padding counted as zeros that are
// multiplied like any other input (as FLOP counters do).
CostReport conv2d_cost(const ConvProblem& p);
CostReport conv1d_cost(const Conv1dProblem& p);

// The scans of grux scan over a ScanProblem ([n{N}]t{T}[c{C}][d{D}]), counted as the
// sequential scan (T - 1 combines per sequence and channel, no initial state); backward as
// the gradient PyTorch (or affine_scan_backward) computes. matmul needs d; the element-wise
// ops take c; affine takes either (d: the matrix form, x_t = W_t x_{t-1} + b_t).
enum class ScanCostOp { sum, prod, max, min, logaddexp, matmul, affine };
const char* scan_cost_op_name(ScanCostOp op);  // "sum", ..., "affine"
CostReport scan_cost(ScanCostOp op, const ScanProblem& p);
// The minGRU stack (linear variant; include/grux/mingru.h): MinGruProblem
// l{L}t{T}n{N}i{I}h{H}; bias or not; variable lengths count sum-of-lengths rows.
CostReport mingru_cost(const MinGruProblem& p);

// An elementwise activation over `n` elements. Descriptor: n{COUNT}, e.g. "n65536". gelu is
// the exact (erf) form, leaky_relu any slope (the count does not depend on it).
enum class Activation { sigmoid, tanh, relu, gelu, silu, leaky_relu };
const char* activation_name(Activation a);
struct ActivationProblem {
  Activation kind = Activation::sigmoid;
  int64_t n = 0;
  DType dtype = DType::f32;
  static ActivationProblem parse(Activation kind, const std::string& descriptor);
  std::string descriptor() const;
};
CostReport activation_cost(const ActivationProblem& p);

// The character-level language model of `grux train` (embedding -> GRU stack -> Linear ->
// cross-entropy), one window: descriptor l{L}t{T}n{N}e{E}h{H}v{V} (layers, window, batch,
// embedding width, hidden size, vocabulary), e.g. the default l1t64n16e64h512v65. The GRU's
// and the Linear's counts and phases, the embedding's parameters, and the optimizer step
// (Adam: value, gradient and two moments read and written once) as a streaming phase.
CostReport charlm_cost(const std::string& descriptor, DType dtype);

}  // namespace GRUX_API
