// The analytic cost model: exact operation counts in three conventions, memory (parameters,
// activations, bytes moved under two cache models), and a calibrated roofline prediction.
//
// Every function reads the problem description its operator uses (GruProblem, GruCellProblem,
// LinearProblem, ConvProblem, Conv1dProblem). Counts are exact integers; a count that does not
// fit in 63 bits is an error, never a silent wrap. docs/cost_model.md derives every formula.
//
// Adding an operator: write one function `CostReport xxx_cost(const
// XxxProblem&)` below and list it in cost_ops() (src/cost/registry.cpp); the CLI, the sweep
// and the HTML report pick it up from there.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grux/conv.h"
#include "grux/export.h"
#include "grux/gru.h"
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

// ---- Many processes ----------------------------------------------------------------------
// A network link between ranks as the collectives see it: a fixed cost per message and the
// bandwidth of one rank's port (each direction).
struct LinkModel {
  std::string name;       // "10 Gbit/s", "local (grux calibrate)", ...
  double latency_us = 0;  // per message
  double gbit_s = 0;      // per rank and direction
};
// The two networks of the scaling tables: 10 Gbit/s Ethernet (TCP, 25 us per message) and
// 100 Gbit/s (RDMA, 3 us per message); docs/cost_model.md, "Many processes".
const std::vector<LinkModel>& network_presets();
// Summing `bytes` across K ranks as grux does (Communicator::sum: every rank sends and
// receives 2 (K - 1) / K of the bytes, in 2 (K - 1) messages; a ring allreduce moves the same).
double allreduce_ms(double bytes, int ranks, const LinkModel& link);
// Every rank's `bytes` on every rank (all_gather: K - 1 messages in, K - 1 out).
double allgather_ms(double bytes, int ranks, const LinkModel& link);

// ---- Operators by name (the CLI and the sweep) -------------------------------------------

// Options that are not part of a descriptor string.
struct CostOptions {
  bool bias = true;
  GruForm form = GruForm::linear_before_reset;
  DType dtype = DType::f32;
  Precision precision = Precision::f32;  // gru, gru_stream: the products' precision
  std::string lengths;  // GRU only: GruProblem::set_lengths specification, "" for all T
};

struct CostOp {
  std::string name;      // "gru"
  std::string what;      // one line for help texts
  std::string syntax;    // "l{L}d{D}t{T}n{N}i{I}h{H}"
  std::string example;   // the default problem of a sweep
  std::string letters;   // the descriptor's letters in order: "ldtnih"
  std::string optional;  // letters that may be omitted: "ld"
  bool has_bias, has_form, has_lengths;
  CostReport (*compute)(const std::string& descriptor, const CostOptions& options);
};
const std::vector<CostOp>& cost_ops();
// Throws grux::Error naming `name` and the known operators.
const CostOp& find_cost_op(const std::string& name);
// Parses `descriptor` for `op`, applies `options` and computes the report. Options the
// operator does not have (e.g. lengths for linear) are errors naming the option.
CostReport cost_of(const std::string& op, const std::string& descriptor,
                   const CostOptions& options);

// ---- Rendering one report ----------------------------------------------------------------

struct Prediction;

// What to show of a report.
struct CostView {
  std::vector<CountMode> modes{CountMode::seed};  // several: the reconciliation table
  bool train = false;                             // backward and training totals too
  const Prediction* inference = nullptr;          // roofline predictions, when available
  const Prediction* training = nullptr;
  std::string profile;  // where the predictions' rates came from
};

enum class CostFormat { table, csv, json, md };
// Throws grux::Error naming `text` and the accepted names.
CostFormat parse_cost_format(const std::string& text);
std::string format_cost(const CostReport& r, const CostView& view, CostFormat format);

// One number of a report with its unit, as the CSV columns and the sweep's metrics carry it.
// `key` ends with the unit ("forward_total_ops", "parameter_bytes", "predicted_ms").
struct CostField {
  std::string key, label, unit;
  double value = 0;
};
// The fields of one report in one mode (the first of view.modes).
std::vector<CostField> cost_fields(const CostReport& r, const CostView& view);

// ---- Machine profile and roofline --------------------------------------------------------

// Rates measured on one machine at one thread count.
struct ThreadProfile {
  double sgemm_gflops = 0, dgemm_gflops = 0;  // best large square GEMM (BLAS or grux's own)
  // grux's bf16 and int8 packed GEMMs (cpu/gemm_lowp.h) on a large square product, in GFLOP/s
  // of the same 2 M N K; 0 (profiles from before them) predicts those phases at sgemm's rate.
  double bf16_gflops = 0, int8_gflops = 0;
  double blas_sgemm_gflops = 0, blas_dgemm_gflops = 0;
  double memcpy_gbps = 0;  // large copy: (bytes read + bytes written) per second
  // Read bandwidth (GB/s, all threads together) with each thread re-reading its own buffer
  // of the given size: the rate of the cache level (or memory) that holds such a buffer.
  std::vector<std::pair<double, double>> read_gbps;  // (bytes per thread, GB/s), by size
  // The rate at which the GRU's recurrence at batch 1 streams W_hh when each thread holds the
  // given size of it (GB/s of all threads, by size; whole steps, fixed costs included): grux's
  // kernels read weights in context more slowly than a plain read loop does. Weight passes
  // are predicted at this rate (at read_gbps when it is empty), as compute is predicted at
  // grux's own GEMM rate; the per-step term then only adds what a streaming-API call costs
  // beyond a step (stream_step_us - step_us), since whole steps are already in the rate.
  std::vector<std::pair<double, double>> stream_gbps;
  // Fixed cost of one sequential step of a GRU (microseconds): a tiny problem whose compute
  // and traffic are negligible, timed per step. `step_us` for whole-sequence runs,
  // `stream_step_us` for one frame through the streaming API.
  double step_us = 0, stream_step_us = 0;
  // The fraction of the GEMM peak that grux's GRU forward reaches in context (its gates,
  // weight packing and per-step barriers included), measured on a mid-size problem that is
  // none of the standard workloads (l1t50n48i192h384). Phases marked `gru_kernel` compute at
  // this fraction of the peak, as weight passes stream at `stream_gbps`; 0 (older profiles,
  // the preset) computes them at the peak.
  double gru_gemm_efficiency = 0;
  // The same in bf16 and int8: the fraction of bf16_gflops / int8_gflops that the GRU forward
  // reaches in that precision on the same problem (its conversions of the input rows
  // included). 0 (older profiles): gru_gemm_efficiency stands for them.
  double bf16_gru_efficiency = 0, int8_gru_efficiency = 0;
};

struct MachineProfile {
  std::string source;   // the file it was read from, or "preset"
  std::string machine;  // CPU model name
  std::string created;  // ISO date of the calibration
  std::map<int, ThreadProfile> threads;
  // The link between ranks that `mpirun -np K grux calibrate` measured (gbit_s 0: none).
  LinkModel link;

  // The rates at `threads`: the measured entry, or interpolated linearly in the thread count
  // between the nearest measured ones (clamped at the ends). Throws if there is none.
  ThreadProfile at(int threads) const;
  std::string to_json() const;
  // Throws grux::Error naming `what` and the problem.
  static MachineProfile from_json(const std::string& text, const std::string& what);
  // A conservative stand-in for an uncalibrated machine (documented in docs/cost_model.md).
  static MachineProfile preset(int max_threads);
};

// Where profiles live: $GRUX_PROFILE if set, else $XDG_CONFIG_HOME/grux/profile.json, else
// $HOME/.config/grux/profile.json.
std::string default_profile_path();
// Reads `path` ("" means default_profile_path()); when the default file does not exist,
// returns the preset (source "preset"). A given path that does not exist is an error.
MachineProfile load_profile(const std::string& path);

// Overrides given on the command line (0 = keep the profile's value).
struct ProfileOverrides {
  double peak_gflops = 0;  // GEMM peak for the problem's dtype
  double mem_gbps = 0;     // memory bandwidth (copy rate and the largest buffers)
  double cache_gbps = 0;   // a flat cache-resident read bandwidth for every buffer size
  double step_us = 0;      // per-step overhead (both kinds)
};
void apply_overrides(MachineProfile& profile, const ProfileOverrides& o, DType dtype);

// Read bandwidth (GB/s) for buffers of `bytes_per_thread` with `threads` threads:
// interpolated in log(size) between measured sizes, clamped at the ends; bandwidth_at does
// the same on any (bytes, GB/s) curve, such as ThreadProfile::stream_gbps.
double read_bandwidth_at(const ThreadProfile& t, double bytes_per_thread);
double bandwidth_at(const std::vector<std::pair<double, double>>& curve, double bytes_per_thread);

struct Prediction {
  int threads = 1;
  double compute_ms = 0;   // GEMM flops at the GEMM peak, all phases
  double traffic_ms = 0;   // weight passes at the bandwidth of their cache level + streams
  double roofline_ms = 0;  // the sum over phases of max(compute, traffic) (one phase: the max)
  double overhead_ms = 0;  // sequential steps x the profile's per-step cost
  double ms = 0;           // roofline_ms + overhead_ms: the predicted time
  std::string bound;       // "compute" or "traffic": the side that limits most of roofline_ms
};
// Predicts the time of `phases` with `threads` threads; `stream` selects the per-step cost of
// the streaming API.
Prediction predict(const std::vector<Phase>& phases, DType dtype, const MachineProfile& profile,
                   int threads, bool stream = false);

// One problem on K ranks: a training step (data parallelism: each rank runs 1/K of the batch,
// then the gradients are summed) or a forward; for the scans, each rank scans 1/K of the
// sequence, the ranks exchange their chunks' totals, and each rescans its chunk with them.
struct RankPrediction {
  int ranks = 1;
  std::string per_rank;   // the problem each rank runs ("l1d1t64n8i64h512")
  double compute_ms = 0;  // that problem at the profile's rates, with the rank's threads
  double comm_ms = 0;     // the collectives on `link`
  double ms = 0;          // compute_ms + comm_ms
  double speedup = 1;     // over the same problem on one rank (of the machine's threads)
};
// Which operators split across ranks, and along which letter: the batch (n) of gru, mingru
// and charlm, the time (t) of the scans. K must divide it; throws otherwise, and for other
// operators. `threads`: each rank's. `per_machine`: ranks sharing one machine (its cores and
// memory bandwidth: their work is priced as all of theirs on that machine's threads
// together); 1 for one rank per machine.
RankPrediction predict_ranks(const std::string& op, const std::string& descriptor,
                             const CostOptions& options, bool train, int ranks,
                             const LinkModel& link, const MachineProfile& profile, int threads,
                             int per_machine = 1);

}  // namespace grux
