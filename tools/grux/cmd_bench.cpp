// `grux bench`: times GRU problems (inference, training, streaming cell), LSTM problems
// (inference, training), minGRU problems against the GRU of the same size, conv2d problems and
// large GEMMs, after checking the optimized result against the reference kernels; one JSON line
// each, with the cost model's roofline bound for GRU problems (and, with --predict, its
// prediction).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "cpu/gemm.h"
#include "cpu/ref/gemm_ref.h"
#include "grux/calibrate.h"
#include "grux/conv.h"
#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/gru.h"
#include "grux/io.h"
#include "grux/lstm.h"
#include "grux/mingru.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "measure/blas.h"

namespace grux::cli {

namespace {

struct BenchArgs {
  std::string descriptor, lengths, dtype = "f32", precision = "f32";
  bool train = false, cell = false, reset_before = false, prepacked = false;
  bool inject_mismatch = false;  // testing only: perturb the result to prove the check works
  bool predict = false;
  std::string profile;
  int threads = 0, reps = 10;
  int64_t block = 1;  // --cell: frames per call
};

struct Timing {
  double median_ms, min_ms;
};

// Runs fn once to warm up, then `reps` times; median and minimum wall time.
Timing time_it(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "f64") return DType::f64;
  throw Error(fmt::format("--dtype {} (expected f32 or f64)", s));
}

Tensor uniform(const Shape& shape, DType dtype, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng);
  return t.to(dtype);
}

// The time a problem cannot beat on this machine, measured in this process: the cost model's
// roofline (src/cost) with the GEMM peak just measured (for bf16 or int8 products, the
// low-precision GEMM's: lowp_gflops) and the read bandwidth measured for a buffer the size of
// one thread's share of the weights read at every step.
struct Bound {
  double ms, compute_ms, traffic_ms, read_gbps;
  std::string side;
};
Bound live_bound(const std::vector<Phase>& phases, DType dtype, int threads, double peak_gflops,
                 double lowp_gflops = 0) {
  // The weight set read most (bytes x passes), split over the threads that share it.
  double share = 0, most = 0;
  int team = 1;
  for (const Phase& ph : phases) {
    const int k = static_cast<int>(std::clamp<int64_t>(ph.split, 1, threads));
    if (ph.weight_bytes * ph.weight_passes > most)
      most = ph.weight_bytes * ph.weight_passes, share = ph.weight_bytes / k, team = k;
  }
  ThreadProfile t;
  t.sgemm_gflops = t.dgemm_gflops = peak_gflops;
  t.bf16_gflops = t.int8_gflops = lowp_gflops;
  t.read_gbps = {{std::max(share, 1.0), measure_read_bandwidth(static_cast<int64_t>(share), team)}};
  MachineProfile live;  // activations (memcpy 0) and step costs are left out of this bound
  live.threads[threads] = t;
  if (team != threads) live.threads[team] = t;
  const Prediction p = predict(phases, dtype, live, threads);
  return {p.roofline_ms, p.compute_ms, p.traffic_ms, t.read_gbps[0].second, p.bound};
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      r += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    r += c;
  }
  return r;
}

// With --predict: the prediction from the calibrated profile, as JSON fields.
std::string prediction_fields(const std::vector<Phase>& phases, DType dtype, int threads,
                              bool stream, const std::string& profile_path, double median_ms) {
  const MachineProfile prof = load_profile(profile_path);
  const Prediction p = predict(phases, dtype, prof, threads, stream);
  return fmt::format(
      ",\"predicted_ms\":{:.6g},\"predicted_over_measured\":{:.3f},\"predicted_bound\":\"{}\","
      "\"predicted_compute_ms\":{:.6g},\"predicted_traffic_ms\":{:.6g},"
      "\"predicted_overhead_ms\":{:.6g},\"profile\":\"{}\"",
      p.ms, p.ms / median_ms, p.bound, p.compute_ms, p.traffic_ms, p.overhead_ms,
      json_escape(prof.source));
}

// Checks every tensor of `got` against `want` with the engine's tolerance, scaled by each
// tensor's magnitude (gradients summed over many steps grow with the problem).
// `atol_lowp` > 0: the absolute tolerance of a bf16 or int8 run instead (the reference twin
// rounds or quantizes the same values, but a state that differs in its last bit can round to
// a neighbouring bf16 or int8 value at the next step).
void check_against_reference(const std::string& what, const std::vector<Tensor>& got,
                             const std::vector<Tensor>& want, double atol_lowp = 0) {
  for (size_t i = 0; i < got.size(); ++i) {
    double scale = 1;
    for (int64_t j = 0; j < want[i].numel(); ++j)
      scale = std::max(scale, std::abs(want[i].at_flat(j)));
    const bool f32 = got[i].dtype() == DType::f32;
    const double atol = atol_lowp > 0 ? atol_lowp * scale : (f32 ? 1e-5 : 1e-10) * scale;
    const double rtol = atol_lowp > 0 ? 0 : f32 ? 1e-4 : 1e-10;
    for (int64_t j = 0; j < got[i].numel(); ++j) {
      const double a = got[i].at_flat(j), e = want[i].at_flat(j);
      if (!(std::abs(a - e) <= atol + rtol * std::abs(e)))
        throw ResultMismatch(fmt::format(
            "bench {}: optimized result {} differs from the reference at flat index {}: {} vs {} "
            "(no time reported)",
            what, i, j, a, e));
    }
  }
}

// Bytes of memory the machine can still give (MemAvailable), or 0 if unknown.
double available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

// Refuses problems whose buffers (input, activations kept for backward, workspace, weights)
// would not fit in memory, instead of being killed half-way.
void check_fits_in_memory(const GruProblem& p, bool train) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  const double rows = static_cast<double>(p.T) * p.N, H = p.hidden_size;
  double bytes = rows * p.input_size * es * 3;  // input, its packed copy, input gradient
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const double in = l == 0 ? p.input_size : p.directions() * H;
    bytes += p.directions() * (3 * H * (in + H) * es * 3);  // weights, packed, gradients
    bytes += p.directions() * rows * (6 * H + in) * es * (train ? 3 : 1);  // gates, states, outputs
  }
  const double avail = available_bytes();
  if (avail > 0 && bytes > 0.8 * avail)
    throw Error(
        fmt::format("problem {} needs about {:.1f} GiB, more than the {:.1f} GiB of "
                    "memory available",
                    p.descriptor(), bytes / (1 << 30), avail / (1 << 30)));
}

// A batch-1 f32 stream's bound (measure_stream_bound) as JSON fields, beside its measured
// ns a frame.
std::string stream_bound_fields(const StreamBound& sb, double ns) {
  return fmt::format(
      ",\"bound_ns_per_frame\":{:.1f},\"bound_side\":\"{}\",\"pct_of_frame_bound\":{:.1f},"
      "\"chain_ns\":{:.1f},\"work_ns\":{:.1f},\"weights_ns\":{:.1f},\"weights_gbps\":{:.1f},"
      "\"fma_ns\":{:.2f},\"sigmoid_ns\":{:.2f},\"tanh_ns\":{:.2f}",
      sb.ns(), sb.side(), 100 * sb.ns() / ns, sb.chain_ns, sb.work_ns, sb.weights_ns,
      sb.weights_gbps, sb.fma_ns, sb.sigmoid_ns, sb.tanh_ns);
}

void run_bench_gru(const BenchArgs& a) {
  GruProblem p = GruProblem::parse(a.descriptor);
  p.dtype = parse_dtype(a.dtype);
  p.form = a.reset_before ? GruForm::reset_before : GruForm::linear_before_reset;
  if (a.train && a.cell) throw Error("--train and --cell cannot be combined");
  if (a.prepacked && (a.train || a.cell))
    throw Error(
        fmt::format("--prepacked times the inference forward; it cannot be combined with "
                    "{} (training packs its weights once per step, a stream once)",
                    a.train ? "--train" : "--cell"));
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  std::string name = p.descriptor() + p.set_lengths(a.lengths);
  if (a.cell && !p.lengths.empty()) throw Error("--lengths cannot be used with --cell");
  if (a.cell && p.directions() != 1) throw Error("--cell needs a unidirectional problem (d1)");
  if (a.block != 1 && !a.cell) throw Error("--block needs --cell (it sets the frames per call)");
  if (a.block < 1 || a.block > p.T)
    throw Error(fmt::format("--block {} (expected 1 to T = {})", a.block, p.T));
  const Precision prec = parse_precision(a.precision);
  const bool lowp = prec != Precision::f32;
  if (prec == Precision::int8 && a.train)
    throw Error("--precision int8 is for inference; --train takes f32 or bf16");
  if (lowp && p.dtype != DType::f32)
    throw Error(
        fmt::format("--precision {} takes --dtype f32 (the weights are converted from "
                    "f32), not {}",
                    a.precision, a.dtype));
  if (a.reset_before) name += "_rb";
  if (lowp) name += "_" + a.precision;
  check_fits_in_memory(p, a.train);
  const int threads = set_threads(a.threads);
  const std::string mode = a.train ? "train" : a.cell ? "cell" : "inference";

  Gru gru(p.config(), p.dtype, 1);
  std::mt19937_64 rng(2);
  Tensor x = uniform({p.T, p.N, p.input_size}, p.dtype, rng);
  Tensor lengths = p.lengths.empty() ? Tensor() : Tensor::from_vector<int64_t>({p.N}, p.lengths);
  Tensor dy =
      a.train ? uniform({p.T, p.N, p.directions() * p.hidden_size}, p.dtype, rng) : Tensor();

  // The computation under test; returns the tensors that are checked.
  std::function<std::vector<Tensor>()> run;
  if (a.train) {
    run = [&] {
      GruTape tape;
      GruOutput y = gru.forward_train(x, {}, lengths, tape, 0, prec);
      GruGrads g = gru.backward(tape, dy, {});
      std::vector<Tensor> out{y.output, y.h_n, g.dinput};
      for (const auto& [k, v] : g.state_dict(gru.config())) out.push_back(v);
      return out;
    };
  } else if (a.cell) {
    // `block` frames per call through the raw real-time API (GruStream::process), as a
    // real-time caller would, on the threads the stream was created with; outputs kept for
    // the check.
    run = [&, stream = std::make_shared<GruStream>(gru, p.N, Tensor(), prec, a.threads),
           all = Tensor::empty({p.T, p.N, p.hidden_size}, p.dtype)]() mutable {
      stream->reset();
      const int64_t in_frame = p.N * p.input_size, out_frame = p.N * p.hidden_size;
      auto go = [&]<typename T>(T*) {
        const T* in = x.data<T>();
        T* out = all.data<T>();
        for (int64_t t = 0; t < p.T; t += a.block) {
          const int64_t f = std::min(a.block, p.T - t);
          stream->process<T>(in + t * in_frame, out + t * out_frame, f);
        }
      };
      if (p.dtype == DType::f32)
        go(static_cast<float*>(nullptr));
      else
        go(static_cast<double*>(nullptr));
      return std::vector<Tensor>{all};
    };
  } else if (a.prepacked || lowp) {
    // Weights packed once, before the check and the timing (as oneDNN's reorders are); bf16
    // and int8 weights are converted once so.
    run = [&, inf = std::make_shared<GruInference>(gru, prec)] {
      GruOutput y = inf->forward(x, {}, lengths);
      return std::vector<Tensor>{y.output, y.h_n};
    };
  } else {
    run = [&] {
      GruOutput y = gru.forward(x, {}, lengths);
      return std::vector<Tensor>{y.output, y.h_n};
    };
  }
  // 1. Check: the optimized kernels against the reference kernels on this very problem.
  std::vector<Tensor> got = run();
  if (a.inject_mismatch) {
    got[0] = got[0].clone();
    got[0].reshape({-1}).set({got[0].numel() / 2}, got[0].at_flat(got[0].numel() / 2) + 0.5);
  }
  set_reference_kernels(true);
  std::vector<Tensor> want;
  if (a.train) {
    want = run();  // the twins of every kernel, bf16 ones included
  } else if (lowp) {
    // The reference twins on weights converted afresh, at the same precision.
    GruInference ref(gru, prec);
    GruOutput y = ref.forward(x, {}, lengths);
    want = {y.output, y.h_n};
    if (a.cell) want.resize(1);
  } else if (a.cell) {
    want = {gru.forward(x).output};
  } else if (a.prepacked) {
    // Packed afresh from the weights, not the copy under test.
    GruOutput y = gru.forward(x, {}, lengths);
    want = {y.output, y.h_n};
  } else {
    want = run();
  }
  set_reference_kernels(false);
  check_against_reference(name, got, want, !lowp ? 0 : prec == Precision::bf16 ? 2e-2 : 5e-2);
  // The precision's error: the largest difference of the output from f32's.
  std::string lowp_fields;
  if (lowp) {
    const Tensor f32_out = gru.forward(x, {}, lengths).output;
    double err = 0;
    for (int64_t j = 0; j < f32_out.numel(); ++j)
      err = std::max(err, std::abs(got[0].at_flat(j) - f32_out.at_flat(j)));
    lowp_fields = fmt::format(",\"precision_kernel\":\"{}\",\"max_abs_diff_vs_f32\":{:.3g}",
                              precision_kernel(prec), err);
  }
  // 2. Time.
  const Timing t = time_it(a.reps, [&] { run(); });
  const double flops = p.gemm_flops() * (a.train ? 3 : 1);
  const double gflops = flops / (t.median_ms * 1e6);
  // The peak's products: side 1536, smaller where that would take long (calibrate.h).
  const GemmRates peak = measure_gemm_rates(p.dtype, 3, 0);
  // bf16 / int8: the peak is the low-precision GEMM's, measured the same way (no BLAS has it).
  int64_t lowp_side = 0;
  const double lowp_peak =
      prec == Precision::f32 ? 0 : measure_lowp_gemm_rate(prec, 3, 0, &lowp_side);
  const double peak_gflops = lowp_peak > 0 ? lowp_peak : peak.best();
  p.precision = prec;  // the prediction prices the products in it
  const CostReport cost = a.cell ? gru_stream_cost(p) : gru_cost(p);
  const std::vector<Phase>& phases = a.train ? cost.training_phases : cost.inference_phases;
  const Bound bound = live_bound(phases, p.dtype, threads, peak.best(), lowp_peak);
  const std::string handoff =
      threads > 1 ? fmt::format(",\"handoff_ns\":{:.0f}", measure_handoff_ns(threads)) : "";
  const std::string predicted =
      a.predict ? prediction_fields(phases, p.dtype, threads, a.cell, a.profile, t.median_ms) : "";
  // A stream's figures per frame (a sample for audio): ns, the real-time factor at 48 kHz
  // (the frame budget, 20833 ns, over the time taken) and its lower bound on this machine.
  std::string per_frame;
  if (a.cell) {
    const double ns = t.median_ms * 1e6 / static_cast<double>(p.T);
    per_frame = fmt::format(",\"block\":{},\"ns_per_frame\":{:.1f},\"realtime_factor_48k\":{:.1f}",
                            a.block, ns, 1e9 / 48000.0 / ns);
    if (p.dtype == DType::f32 && p.N == 1)
      per_frame +=
          stream_bound_fields(measure_stream_bound(p, peak.best() / std::max(threads, 1)), ns);
  }
  fmt::print(
      "{{\"op\":\"gru\",\"problem\":\"{}\",\"mode\":\"{}\",\"threads\":{},\"dtype\":\"{}\","
      "\"reps\":{},\"median_ms\":{:.6g},\"min_ms\":{:.6g},\"gflops\":{:.6g},"
      "\"pct_of_gemm_peak\":{:.1f},\"gemm_peak_gflops\":{:.2f},\"gemm_peak_n\":{},"
      "\"blas_gflops\":{:.2f},"
      "\"grux_gemm_gflops\":{:.2f},\"bound_ms\":{:.6g},\"bound\":\"{}\",\"pct_of_bound\":{:.1f},"
      "\"read_gbps\":{:.1f}{}{}{}{},\"precision\":\"{}\"{},\"checked\":true}}\n",
      name, mode, threads, dtype_name(p.dtype), a.reps, t.median_ms, t.min_ms, gflops,
      100 * gflops / peak_gflops, peak_gflops, lowp_peak > 0 ? lowp_side : peak.n, peak.blas,
      peak.grux, bound.ms, bound.side, 100 * bound.ms / t.median_ms, bound.read_gbps, handoff,
      a.prepacked ? ",\"prepacked\":true" : "", predicted, per_frame, a.precision, lowp_fields);
}

// ---- LSTM ----------------------------------------------------------------------------------

struct LstmBenchArgs {
  std::string descriptor, lengths, dtype = "f32", profile, precision = "f32";
  bool train = false, cell = false, inject_mismatch = false, predict = false;
  int threads = 0, reps = 10;
  int64_t block = 1;  // --cell: frames per call
};

// An LSTM problem, forward (or forward + backward), checked against the reference kernels and
// timed; gflops and pct_of_gemm_peak as the GRU's (LstmProblem::gemm_flops).
void run_bench_lstm(const LstmBenchArgs& a) {
  LstmProblem p = LstmProblem::parse(a.descriptor);
  p.dtype = parse_dtype(a.dtype);
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  const std::string name = p.descriptor() + p.set_lengths(a.lengths);
  if (a.train && a.cell) throw Error("--train and --cell cannot be combined");
  if (a.cell && !p.lengths.empty()) throw Error("--lengths cannot be used with --cell");
  if (a.cell && p.directions() != 1) throw Error("--cell needs a unidirectional problem (d1)");
  if (a.block != 1 && !a.cell) throw Error("--block needs --cell (it sets the frames per call)");
  if (a.block < 1 || a.block > p.T)
    throw Error(fmt::format("--block {} (expected 1 to T = {})", a.block, p.T));
  {
    // Memory, as check_fits_in_memory estimates a GRU's: 4 gates and c in place of 3 gates.
    const double es = static_cast<double>(dtype_size(p.dtype));
    const double rows = static_cast<double>(p.T) * p.N, H = p.hidden_size;
    double bytes = rows * p.input_size * es * 3;
    for (int64_t l = 0; l < p.num_layers; ++l) {
      const double in = p.layer_input_size(l), P = p.output_size();
      bytes += p.directions() * (4 * H * (in + P) + H * P) * es * 3;
      bytes += p.directions() * rows * (8 * H + 2 * P + in) * es * (a.train ? 3 : 1);
    }
    const double avail = available_bytes();
    if (avail > 0 && bytes > 0.8 * avail)
      throw Error(fmt::format(
          "problem {} needs about {:.1f} GiB, more than the {:.1f} GiB of memory available",
          p.descriptor(), bytes / (1 << 30), avail / (1 << 30)));
  }
  const Precision prec = parse_precision(a.precision);
  const bool lowp = prec != Precision::f32;
  if (prec == Precision::int8 && a.train)
    throw Error("--precision int8 is for inference and --cell; --train takes f32 or bf16");
  const int threads = set_threads(a.threads);
  const Lstm lstm(p.config(), p.dtype, 1);
  // bf16 / int8: the weights converted once, before timing (as bench gru's).
  const auto plan = lowp ? std::make_shared<LstmInference>(lstm, prec) : nullptr;
  std::mt19937_64 rng(2);
  const Tensor x = uniform({p.T, p.N, p.input_size}, p.dtype, rng);
  const Tensor lengths =
      p.lengths.empty() ? Tensor() : Tensor::from_vector<int64_t>({p.N}, p.lengths);
  const Tensor dy =
      a.train ? uniform({p.T, p.N, p.directions() * p.output_size()}, p.dtype, rng) : Tensor();
  // --cell: `block` frames per call through the raw real-time API (LstmStream::process).
  const auto stream =
      a.cell ? std::make_shared<LstmStream>(lstm, p.N, Tensor(), Tensor(), prec) : nullptr;
  Tensor all = a.cell ? Tensor::empty({p.T, p.N, p.output_size()}, p.dtype) : Tensor();
  const auto run = [&] {
    if (a.cell) {
      stream->reset();
      const int64_t in_frame = p.N * p.input_size, out_frame = p.N * p.output_size();
      auto go = [&]<typename F>(F*) {
        const F* in = x.data<F>();
        F* out = all.data<F>();
        for (int64_t t = 0; t < p.T; t += a.block)
          stream->process<F>(in + t * in_frame, out + t * out_frame, std::min(a.block, p.T - t));
      };
      if (p.dtype == DType::f32)
        go(static_cast<float*>(nullptr));
      else
        go(static_cast<double*>(nullptr));
      return std::vector<Tensor>{all.clone()};
    }
    if (!a.train) {
      LstmOutput y = plan ? plan->forward(x, {}, {}, lengths) : lstm.forward(x, {}, {}, lengths);
      return std::vector<Tensor>{y.output, y.h_n, y.c_n};
    }
    LstmTape tape;
    LstmOutput y = lstm.forward_train(x, {}, {}, lengths, tape, 0, prec);
    LstmGrads g = lstm.backward(tape, dy, {}, {});
    std::vector<Tensor> out{y.output, y.h_n, y.c_n, g.dinput};
    for (const auto& [k, v] : g.state_dict(lstm.config())) out.push_back(v);
    return out;
  };
  std::vector<Tensor> got = run();
  if (a.inject_mismatch) {
    got[0] = got[0].clone();
    got[0].reshape({-1}).set({got[0].numel() / 2}, got[0].at_flat(got[0].numel() / 2) + 0.5);
  }
  // The stream's kernels against the whole sequence on the reference kernels (bf16, int8:
  // the twins on weights converted afresh, at the same precision; training: the twins of
  // every kernel, bf16 ones included).
  set_reference_kernels(true);
  std::vector<Tensor> want;
  if (a.train) {
    want = run();
  } else if (lowp) {
    const LstmOutput y = LstmInference(lstm, prec).forward(x, {}, {}, lengths);
    want = a.cell ? std::vector<Tensor>{y.output} : std::vector<Tensor>{y.output, y.h_n, y.c_n};
  } else {
    want = a.cell ? std::vector<Tensor>{lstm.forward(x).output} : run();
  }
  set_reference_kernels(false);
  check_against_reference(name, got, want, !lowp ? 0 : prec == Precision::bf16 ? 2e-2 : 5e-2);
  // The precision's error: the largest difference of the output from f32's.
  std::string lowp_fields;
  if (lowp) {
    const Tensor f32_out = lstm.forward(x, {}, {}, lengths).output;
    double err = 0;
    for (int64_t j = 0; j < f32_out.numel(); ++j)
      err = std::max(err, std::abs(got[0].at_flat(j) - f32_out.at_flat(j)));
    lowp_fields = fmt::format(",\"precision_kernel\":\"{}\",\"max_abs_diff_vs_f32\":{:.3g}",
                              precision_kernel(prec), err);
  }
  const Timing t = time_it(a.reps, [&] { run(); });
  const double gflops = p.gemm_flops() * (a.train ? 3 : 1) / (t.median_ms * 1e6);
  const GemmRates peak = measure_gemm_rates(p.dtype, 3, 0);
  std::string per_frame;
  if (a.cell) {
    const double ns = t.median_ms * 1e6 / static_cast<double>(p.T);
    per_frame = fmt::format(",\"block\":{},\"ns_per_frame\":{:.1f},\"realtime_factor_48k\":{:.1f}",
                            a.block, ns, 1e9 / 48000.0 / ns);
    if (p.dtype == DType::f32 && p.N == 1 && !lowp)
      per_frame +=
          stream_bound_fields(measure_stream_bound(p, peak.best() / std::max(threads, 1)), ns);
  }
  // The cost model's roofline with this process's rates, and with --predict its prediction.
  const CostReport cost = a.cell ? lstm_stream_cost(p) : lstm_cost(p);
  const std::vector<Phase>& phases = a.train ? cost.training_phases : cost.inference_phases;
  const Bound bound = live_bound(phases, p.dtype, threads, peak.best());
  const std::string predicted =
      a.predict ? prediction_fields(phases, p.dtype, threads, a.cell, a.profile, t.median_ms) : "";
  fmt::print(
      "{{\"op\":\"lstm\",\"problem\":\"{}\",\"mode\":\"{}\",\"threads\":{},\"dtype\":\"{}\","
      "\"reps\":{},\"median_ms\":{:.6g},\"min_ms\":{:.6g},\"gflops\":{:.6g},"
      "\"pct_of_gemm_peak\":{:.1f},\"gemm_peak_gflops\":{:.2f},\"gemm_peak_n\":{},"
      "\"blas_gflops\":{:.2f},\"grux_gemm_gflops\":{:.2f},\"bound_ms\":{:.6g},\"bound\":\"{}\","
      "\"pct_of_bound\":{:.1f},\"read_gbps\":{:.1f}{}{},\"precision\":\"{}\"{},"
      "\"checked\":true}}\n",
      name,
      a.train  ? "train"
      : a.cell ? "cell"
               : "inference",
      threads, dtype_name(p.dtype), a.reps, t.median_ms, t.min_ms, gflops,
      100 * gflops / peak.best(), peak.best(), peak.n, peak.blas, peak.grux, bound.ms, bound.side,
      100 * bound.ms / t.median_ms, bound.read_gbps, predicted, per_frame, a.precision,
      lowp_fields);
}

// ---- minGRU --------------------------------------------------------------------------------

struct MinGruBenchArgs {
  std::string descriptor, dtype = "f32";
  bool train = false, log_space = false;
  bool inject_mismatch = false;  // testing only
  int threads = 0, reps = 10;
};

// Wall time (median, minimum) and the median process CPU time (all threads) of `reps` runs
// after a warm-up. On a shared machine the CPU time shows the work done whatever the share
// of the cores the run was given.
struct CpuTiming {
  double median_ms, min_ms, cpu_median_ms;
};
CpuTiming time_with_cpu(int reps, const std::function<void()>& fn) {
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  };
  fn();
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], wall.front(), cpu[cpu.size() / 2]};
}

// A minGRU problem of the GRU's size (l{L}t{T}n{N}i{I}h{H}), timed with grux's GRU layer of
// the same size in the same process. Checked first on the first Ts = min(T, 32) steps against
// the reference kernels; the full run's first Ts output steps must then match that small run
// (outputs at t < Ts do not depend on later inputs), so the full-size path is checked too.
void run_bench_mingru(const MinGruBenchArgs& a) {
  MinGruProblem p = MinGruProblem::parse(a.descriptor);
  p.dtype = parse_dtype(a.dtype);
  p.log_space = a.log_space;
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  // The GRU of the same sizes, timed beside it.
  GruProblem gp;
  static_cast<SequenceShape&>(gp) = p;
  gp.input_size = p.input_size, gp.hidden_size = p.hidden_size, gp.num_layers = p.num_layers;
  gp.bias = p.bias;
  check_fits_in_memory(gp, a.train);
  const int threads = set_threads(a.threads);
  const MinGruConfig& cfg = p.config();
  const MinGru m(cfg, p.dtype, 1);
  std::mt19937_64 rng(2);
  const Tensor x = uniform({p.T, p.N, p.input_size}, p.dtype, rng);
  const Tensor dy = a.train ? uniform({p.T, p.N, p.hidden_size}, p.dtype, rng) : Tensor();
  auto run = [&](const Tensor& xs, const Tensor& dys) {
    if (!a.train) {
      MinGruOutput y = m.forward(xs);
      return std::vector<Tensor>{y.output, y.h_n};
    }
    MinGruTape tape;
    MinGruOutput y = m.forward_train(xs, {}, {}, tape);
    MinGruGrads g = m.backward(tape, dys, {});
    std::vector<Tensor> out{y.output, y.h_n, g.dinput};
    for (const auto& [k, v] : g.state_dict(cfg)) out.push_back(v);
    return out;
  };
  // 1. Check.
  const int64_t Ts = std::min<int64_t>(p.T, 32);
  const Tensor xs = x.slice(0, 0, Ts), dys = a.train ? dy.slice(0, 0, Ts) : Tensor();
  std::vector<Tensor> got = run(xs, dys);
  std::vector<Tensor> full = run(x, dy);
  if (a.inject_mismatch) {
    full[0] = full[0].clone();
    full[0].reshape({-1}).set({0}, full[0].at_flat(0) + 0.5);
  }
  set_reference_kernels(true);
  const std::vector<Tensor> want = run(xs, dys);
  set_reference_kernels(false);
  const std::string name = p.descriptor() + (a.log_space ? "_log" : "");
  check_against_reference(name + " (first steps)", got, want);
  check_against_reference(name + " (full run, first steps)", {full[0].slice(0, 0, Ts)}, {got[0]});
  full.clear();
  // 2. Time the minGRU, then the GRU of the same size.
  const CpuTiming t = time_with_cpu(a.reps, [&] { run(x, dy); });
  Gru gru(gp.config(), p.dtype, 1);
  const CpuTiming tg = time_with_cpu(a.reps, [&] {
    if (!a.train) {
      gru.forward(x);
      return;
    }
    GruTape tape;
    GruOutput y = gru.forward_train(x, {}, {}, tape);
    gru.backward(tape, dy, {});
  });
  // 3. The minGRU's GEMMs alone (the layers' projections, and with --train their dx and dW
  // products), as nn.Linear runs them: no minGRU can be faster than these, so
  // speedup_bound = gru_median_ms / gemm_median_ms is the most any scan could reach.
  std::vector<Tensor> gx, gw, gb, gdy;
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const int64_t in = l == 0 ? p.input_size : p.hidden_size;
    gx.push_back(uniform({p.T * p.N, in}, p.dtype, rng));
    gw.push_back(uniform({2 * p.hidden_size, in}, p.dtype, rng));
    gb.push_back(p.bias ? uniform({2 * p.hidden_size}, p.dtype, rng) : Tensor());
    gdy.push_back(a.train ? uniform({p.T * p.N, 2 * p.hidden_size}, p.dtype, rng) : Tensor());
  }
  const CpuTiming tb = time_with_cpu(a.reps, [&] {
    for (int64_t l = 0; l < p.num_layers; ++l) {
      linear_forward(gx[l], gw[l], gb[l]);
      if (a.train) linear_backward(gx[l], gw[l], gdy[l], p.bias, /*want_dx=*/true);
    }
  });
  double flops = 0;  // 2 * rows * 2H * in per layer, x3 with backward
  for (int64_t l = 0; l < p.num_layers; ++l)
    flops += 2.0 * p.T * p.N * 2 * p.hidden_size * (l == 0 ? p.input_size : p.hidden_size) *
             (a.train ? 3 : 1);
  fmt::print(
      "{{\"op\":\"mingru\",\"problem\":\"{}\",\"mode\":\"{}\",\"log_space\":{},"
      "\"threads\":{},\"dtype\":\"{}\",\"reps\":{},\"median_ms\":{:.4f},\"min_ms\":{:.4f},"
      "\"cpu_ms\":{:.4f},\"gflops\":{:.2f},\"gru_median_ms\":{:.4f},\"gru_min_ms\":{:.4f},"
      "\"gru_cpu_ms\":{:.4f},\"speedup_vs_gru\":{:.2f},\"speedup_vs_gru_cpu\":{:.2f},"
      "\"gemm_median_ms\":{:.4f},\"speedup_bound\":{:.2f},\"checked\":true}}\n",
      p.descriptor(), a.train ? "train" : "forward", a.log_space, threads, dtype_name(p.dtype),
      a.reps, t.median_ms, t.min_ms, t.cpu_median_ms, flops / (t.median_ms * 1e6), tg.median_ms,
      tg.min_ms, tg.cpu_median_ms, tg.median_ms / t.median_ms, tg.cpu_median_ms / t.cpu_median_ms,
      tb.median_ms, tg.median_ms / tb.median_ms);
}

// A GEMM problem of `grux bench gemm DESCRIPTOR`: m{M}n{N}k{K}[ta][tb].
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  std::string descriptor() const {
    return fmt::format("m{}n{}k{}{}{}", M, N, K, trans_a ? "ta" : "", trans_b ? "tb" : "");
  }
};

GemmShape parse_gemm_shape(const std::string& d) {
  const auto bad = [&] {
    return Error(fmt::format(
        "bench gemm: descriptor '{}' (expected m{{M}}n{{N}}k{{K}}[ta][tb] with sizes from 1 to "
        "1000000, e.g. m6400n1536k256 or m256n768k6400ta)",
        d));
  };
  GemmShape g;
  size_t i = 0;
  const auto number = [&](char c) {
    if (i >= d.size() || d[i] != c) throw bad();
    ++i;
    int64_t v = 0;
    const size_t start = i;
    while (i < d.size() && d[i] >= '0' && d[i] <= '9' && i - start < 8) v = v * 10 + (d[i++] - '0');
    if (i == start || v < 1 || v > 1000000) throw bad();
    return v;
  };
  g.M = number('m'), g.N = number('n'), g.K = number('k');
  const std::string rest = d.substr(i);
  if (rest == "ta" || rest == "tatb") g.trans_a = true;
  if (rest == "tb" || rest == "tatb") g.trans_b = true;
  if (!rest.empty() && !g.trans_a && !g.trans_b) throw bad();
  return g;
}

struct Spread {
  double median_ms, min_ms, max_ms;
};
Spread spread_of(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

// grux's general GEMM (cpu::gemm: op(B) packed on every call, as Linear and conv call it)
// against the BLAS on one shape, the two alternating rep by rep on the same operands.
template <typename T>
void bench_gemm_shape(const GemmShape& g, const BenchArgs& a, int threads) {
  const double elems = double(g.M) * g.K + double(g.K) * g.N + 2.0 * g.M * g.N;
  const double avail = available_bytes();
  if (avail > 0 && elems * sizeof(T) > 0.8 * avail)
    throw Error(
        fmt::format("bench gemm: {} needs about {:.1f} GiB, more than the {:.1f} GiB of "
                    "memory available",
                    g.descriptor(), elems * sizeof(T) / (1 << 30), avail / (1 << 30)));
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> A(g.M * g.K), B(g.K * g.N), C(g.M * g.N), Cb(g.M * g.N);
  for (auto& x : A) x = static_cast<T>(u(rng));
  for (auto& x : B) x = static_cast<T>(u(rng));
  const int64_t lda = g.trans_a ? g.M : g.K, ldb = g.trans_b ? g.K : g.N;
  const auto run = [&] {
    cpu::gemm<T>(g.trans_a, g.trans_b, g.M, g.N, g.K, A.data(), lda, B.data(), ldb, nullptr, false,
                 C.data(), g.N);
  };
  run();
  if (a.inject_mismatch) C[0] += T(1);
  // Rows 0-3 and the last against the reference (rows are independent: row invariance), each
  // element within the FMA chain's bound, (K + 2) eps times the sum of |a_k b_kn|.
  {
    std::vector<T> absA(A.size()), absB(B.size()), want(g.N), bound(g.N);
    for (size_t i = 0; i < A.size(); ++i) absA[i] = std::abs(A[i]);
    for (size_t i = 0; i < B.size(); ++i) absB[i] = std::abs(B[i]);
    const double eps = std::numeric_limits<T>::epsilon();
    for (int64_t m : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), g.M - 1}) {
      if (m >= g.M) continue;
      const int64_t off = g.trans_a ? m : m * lda;
      cpu::ref::gemm<T>(g.trans_a, g.trans_b, 1, g.N, g.K, A.data() + off, lda, B.data(), ldb,
                        nullptr, false, want.data(), g.N);
      cpu::ref::gemm<T>(g.trans_a, g.trans_b, 1, g.N, g.K, absA.data() + off, lda, absB.data(), ldb,
                        nullptr, false, bound.data(), g.N);
      for (int64_t n = 0; n < g.N; ++n) {
        const double got = C[m * g.N + n], e = want[n];
        if (!(std::abs(got - e) <= (g.K + 2) * eps * double(bound[n]) + 1e-30))
          throw ResultMismatch(fmt::format(
              "bench gemm {}: element ({}, {}) is {} where the reference gives {} (no time "
              "reported)",
              g.descriptor(), m, n, got, e));
      }
    }
  }
  const bool blas = measure::blas_available();
  const auto run_blas = [&] {
    measure::blas_gemm<T>(g.trans_a, g.trans_b, g.M, g.N, g.K, T(1), A.data(), lda, B.data(), ldb,
                          T(0), Cb.data(), g.N);
  };
  if (blas) run_blas();
  std::vector<double> ms, blas_ms;
  const auto ms_of = [](const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int r = 0; r < a.reps; ++r) {
    ms.push_back(ms_of(run));
    if (blas) blas_ms.push_back(ms_of(run_blas));
  }
  const Spread t = spread_of(ms);
  const Spread b = blas ? spread_of(blas_ms) : Spread{0, 0, 0};
  const double gflop = 2.0 * g.M * g.N * g.K / 1e9;
  const auto rate = [&](double m) { return m > 0 ? gflop / (m / 1e3) : 0.0; };
  fmt::print(
      "{{\"op\":\"gemm\",\"problem\":\"{}\",\"trans_a\":{},\"trans_b\":{},\"threads\":{},"
      "\"dtype\":\"{}\",\"reps\":{},\"median_ms\":{:.6g},\"min_ms\":{:.6g},\"max_ms\":{:.6g},"
      "\"gflops\":{:.2f},\"spread_pct\":{:.1f},\"blas_median_ms\":{:.6g},\"blas_min_ms\":{:.6g},"
      "\"blas_max_ms\":{:.6g},\"blas_gflops\":{:.2f},\"blas_spread_pct\":{:.1f},"
      "\"vs_blas\":{:.3f},\"blas_core\":\"{}\",\"blas_fallback\":{},\"simd\":\"{}\","
      "\"checked\":\"rows\"}}\n",
      g.descriptor(), g.trans_a, g.trans_b, threads, dtype_name(dtype_of<T>()), a.reps, t.median_ms,
      t.min_ms, t.max_ms, rate(t.median_ms), 100 * (t.max_ms / t.min_ms - 1), b.median_ms, b.min_ms,
      b.max_ms, rate(b.median_ms), blas ? 100 * (b.max_ms / b.min_ms - 1) : 0.0,
      blas ? b.median_ms / t.median_ms : 0.0, measure::blas_core(),
      measure::blas_core_is_fallback(), simd_target());
}

void print_blas_notes() {
  if (!measure::blas_available())
    fmt::print(stderr,
               "grux: note: OpenBLAS (libopenblas.so.0) is not installed, so the BLAS's figures "
               "are 0 and gflops is grux's own GEMM (install libopenblas0-openmp to measure the "
               "peer)\n");
  if (measure::blas_core_is_fallback())
    fmt::print(stderr,
               "grux: note: OpenBLAS picked its generic {} kernel on this AVX2 CPU (it does not "
               "recognise the CPU), so the BLAS's rate is several times below the machine; "
               "grux's operators do not use the BLAS. To measure the BLAS at its best, set "
               "OPENBLAS_CORETYPE (e.g. Haswell, SkylakeX or Zen).\n",
               measure::blas_core());
}

void run_bench_gemm(const BenchArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  if (!a.descriptor.empty()) {
    const GemmShape g = parse_gemm_shape(a.descriptor);
    const int threads = set_threads(a.threads);
    if (dtype == DType::f64)
      bench_gemm_shape<double>(g, a, threads);
    else
      bench_gemm_shape<float>(g, a, threads);
    print_blas_notes();
    return;
  }
  const int threads = set_threads(a.threads);
  const GemmRates peak = measure_gemm_rates(dtype, a.reps);
  fmt::print(
      "{{\"op\":\"gemm\",\"problem\":\"m{}n{}k{}\",\"threads\":{},\"dtype\":\"{}\",\"reps\":{},"
      "\"gflops\":{:.2f},\"blas_gflops\":{:.2f},\"grux_gflops\":{:.2f},\"blas_core\":\"{}\","
      "\"blas_fallback\":{},\"simd\":\"{}\"}}\n",
      peak.n, peak.n, peak.n, threads, dtype_name(dtype), a.reps, peak.best(), peak.blas, peak.grux,
      measure::blas_core(), measure::blas_core_is_fallback(), simd_target());
  print_blas_notes();
}

// ---- conv2d ------------------------------------------------------------------------------

struct ConvBenchArgs {
  std::string descriptor, algo = "im2col", dtype = "f32";
  bool train = false, inject_mismatch = false, predict = false;
  std::string profile;
  int threads = 0, reps = 10;
  // Problems whose check by the loops would cost more than this many flops (a few seconds of
  // loops) are checked on a batch of one instead. Hidden option, for tests.
  double full_check_flops = 2.5e9;
};

void run_bench_conv2d(const ConvBenchArgs& a) {
  ConvProblem p = ConvProblem::parse(a.descriptor);
  p.dtype = parse_dtype(a.dtype);
  const ConvAlgo algo = parse_conv_algo(a.algo);
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  const int threads = set_threads(a.threads);
  std::mt19937_64 rng(3);
  const Tensor x = uniform({p.N, p.C, p.H, p.W}, p.dtype, rng);
  const Tensor w = uniform({p.D, p.C / p.groups, p.kernel.h, p.kernel.w}, p.dtype, rng);
  const Tensor b = uniform({p.D}, p.dtype, rng);
  const Tensor dy = a.train ? uniform({p.N, p.D, p.OH(), p.OW()}, p.dtype, rng) : Tensor();

  // The computation under test on images [0, n); returns the tensors that are checked.
  auto run = [&](ConvAlgo with, int64_t n) {
    const Conv2dOptions o = p.options(with);
    const Tensor xs = n == p.N ? x : x.slice(0, 0, n);
    std::vector<Tensor> out{conv2d_forward(xs, w, b, o)};
    if (a.train) {
      ConvGrads g = conv2d_backward(xs, w, n == p.N ? dy : dy.slice(0, 0, n), true, o);
      out.insert(out.end(), {g.dinput, g.dweight, g.dbias});
    }
    if (a.inject_mismatch && with != ConvAlgo::loops) {  // the result under test only
      out[0] = out[0].clone();
      out[0].reshape({-1}).set({out[0].numel() / 2}, out[0].at_flat(out[0].numel() / 2) + 0.5);
    }
    return out;
  };
  // 1. Check against the loops. Small problems: the whole problem. Large ones: image 0 alone
  // (every tensor, against the loops on that image), and image 0 of the full-batch run
  // (output and grad_input) against the batch-of-one run, so the batched path is covered too.
  const double cost = p.flops() * (a.train ? 3 : 1);
  std::string checked = "reference";
  if (algo != ConvAlgo::loops) {
    const std::string name = p.descriptor() + " " + conv_algo_name(algo);
    if (cost <= a.full_check_flops) {
      checked = "full";
      check_against_reference(name, run(algo, p.N), run(ConvAlgo::loops, p.N));
    } else {
      checked = "batch1";
      const std::vector<Tensor> one = run(algo, 1);
      check_against_reference(name + " (image 0)", one, run(ConvAlgo::loops, 1));
      const std::vector<Tensor> all = run(algo, p.N);
      std::vector<Tensor> got{all[0].slice(0, 0, 1)}, want{one[0]};
      if (a.train) got.push_back(all[1].slice(0, 0, 1)), want.push_back(one[1]);
      check_against_reference(name + " (image 0 of the batch)", got, want);
    }
  }
  // 2. Time.
  const Timing t = time_it(a.reps, [&] { run(algo, p.N); });
  std::string predicted;
  if (a.predict) {
    const CostReport c = conv2d_cost(p);
    predicted = prediction_fields(a.train ? c.training_phases : c.inference_phases, p.dtype,
                                  threads, false, a.profile, t.median_ms);
  }
  fmt::print(
      "{{\"op\":\"conv2d\",\"problem\":\"{}\",\"algo\":\"{}\",\"mode\":\"{}\",\"threads\":{},"
      "\"dtype\":\"{}\",\"reps\":{},\"median_ms\":{:.6g},\"min_ms\":{:.6g},\"gflops\":{:.6g}{},"
      "\"checked\":\"{}\"}}\n",
      p.descriptor(), conv_algo_name(algo), a.train ? "train" : "forward", threads,
      dtype_name(p.dtype), a.reps, t.median_ms, t.min_ms, cost / (t.median_ms * 1e6), predicted,
      checked);
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand(
      "bench",
      "Time GRU, LSTM, minGRU and conv2d problems, scans and GEMMs; one JSON line per problem "
      "(results are checked against the reference kernels first; a wrong result exits with "
      "code 3).");
  c->require_subcommand(1);
  CLI::App* g = c->add_subcommand(
      "gru",
      "Time a GRU problem. DESCRIPTOR is l{L}d{D}t{T}n{N}i{I}h{H} (l, d default 1), e.g. "
      "l1d1t100n64i256h512. Default mode: forward of the whole stack. gflops counts GEMM "
      "flops (2*N*T*3H*(in+H) per layer and direction, x3 for --train); pct_of_gemm_peak "
      "divides by the best large square GEMM rate (the BLAS's or grux's) measured in the same "
      "process at the same thread count (gemm_peak_gflops; with --precision bf16 or int8, "
      "grux's GEMM in that precision, which bound_ms also uses). With 2+ threads, handoff_ns is "
      "the round trip of a "
      "cache line between two of the threads, also measured in the process: each time step "
      "that threads share pays about two of them.");
  g->add_option("DESCRIPTOR", a->descriptor, "problem, e.g. l2d2t200n32i128h256")->required();
  g->add_flag("--train", a->train, "time forward + backward");
  g->add_flag("--cell", a->cell,
              "time T frames through the real-time streaming API (GruStream::process), one "
              "call per --block frames; adds ns_per_frame, realtime_factor_48k (48 kHz frame "
              "budget / time per frame) and, at batch 1 in f32, bound_ns_per_frame: the "
              "longest of the recurrence's dependency chain, its FMA work and the read of its "
              "weights at this machine's rates, measured in the process (chain_ns, work_ns, "
              "weights_ns at weights_gbps, and the fma / sigmoid / tanh latencies)");
  g->add_option("--block", a->block, "with --cell: frames per call (an audio callback's block)")
      ->capture_default_str();
  g->add_option("--lengths", a->lengths,
                "variable lengths: uniform:LO:HI:SEED, or an int64 .npy of shape (N,)");
  g->add_flag("--reset-before", a->reset_before, "the reset-before candidate form");
  g->add_flag("--prepacked", a->prepacked,
              "time GruInference::forward, the weights packed once before timing (default: "
              "Gru::forward, which packs them on every call); adds \"prepacked\":true");
  g->add_option("--threads", a->threads, "threads (default: all cores)");
  g->add_option("--reps", a->reps, "timed runs after one warm-up")->capture_default_str();
  g->add_option("--dtype", a->dtype, "f32 or f64")->capture_default_str();
  g->add_option("--precision", a->precision,
                "f32, bf16 or int8: the products' precision (inference and --cell: the weights "
                "converted once before timing; --train: bf16, converted every step; reports "
                "max_abs_diff_vs_f32)")
      ->capture_default_str();
  g->add_flag("--predict", a->predict,
              "also print the cost model's prediction (predicted_ms, predicted_over_measured, "
              "predicted_bound) from the calibrated profile (grux calibrate)");
  g->add_option("--profile", a->profile, "profile for --predict (default: grux calibrate's)");
  g->add_flag("--inject-mismatch", a->inject_mismatch)->group("");  // hidden: for tests
  auto la = std::make_shared<LstmBenchArgs>();
  CLI::App* lg = c->add_subcommand(
      "lstm",
      "Time an LSTM problem (nn.LSTM semantics). DESCRIPTOR is l{L}d{D}t{T}n{N}i{I}h{H}[p{P}] "
      "(l, d default 1; p: proj_size), e.g. l1d1t100n64i256h512. Default mode: forward of the "
      "whole stack. gflops counts GEMM flops (2*N*T*4H*(in+H_out) per layer and direction, "
      "plus 2*N*T*H*P for a projection; x3 for --train); pct_of_gemm_peak divides by the best "
      "large square GEMM rate (the BLAS's or grux's) measured in the same process at the same "
      "thread count. bound_ms is the cost model's roofline (grux cost lstm) at the rates "
      "measured in the process; pct_of_bound = bound_ms / median_ms.");
  lg->add_option("DESCRIPTOR", la->descriptor, "problem, e.g. l2d2t200n32i128h256")->required();
  lg->add_flag("--train", la->train, "time forward + backward");
  lg->add_flag("--cell", la->cell,
               "time T frames through the streaming API (LstmStream::process), one call per "
               "--block frames, on the calling thread; adds ns_per_frame, realtime_factor_48k "
               "(48 kHz frame budget / time per frame) and, at batch 1 in f32, "
               "bound_ns_per_frame: the longest of the recurrence's dependency chain, its FMA "
               "work and the read of its weights at this machine's rates, measured in the "
               "process (chain_ns, work_ns, weights_ns at weights_gbps, and the fma / sigmoid / "
               "tanh latencies)");
  lg->add_option("--block", la->block, "with --cell: frames per call (an audio callback's block)")
      ->capture_default_str();
  lg->add_option("--lengths", la->lengths,
                 "variable lengths: uniform:LO:HI:SEED, or an int64 .npy of shape (N,)");
  lg->add_option("--threads", la->threads, "threads (default: all cores)");
  lg->add_option("--reps", la->reps, "timed runs after one warm-up")->capture_default_str();
  lg->add_option("--dtype", la->dtype, "f32 or f64")->capture_default_str();
  lg->add_option("--precision", la->precision,
                 "f32, bf16 or int8: the products' precision (inference and --cell: the "
                 "weights converted once before timing; --train: bf16, converted every step; "
                 "reports max_abs_diff_vs_f32)")
      ->capture_default_str();
  lg->add_flag("--predict", la->predict,
               "also print the cost model's prediction (predicted_ms, predicted_over_measured, "
               "predicted_bound) from the calibrated profile (grux calibrate)");
  lg->add_option("--profile", la->profile, "profile for --predict (default: grux calibrate's)");
  lg->add_flag("--inject-mismatch", la->inject_mismatch)->group("");  // hidden: for tests
  auto ma = std::make_shared<MinGruBenchArgs>();
  CLI::App* mg = c->add_subcommand(
      "mingru",
      "Time a minGRU stack (Feng et al. 2024) of a GRU problem's size and, in the same process, "
      "grux's GRU layer of that size. DESCRIPTOR is MinGruProblem's l{L}t{T}n{N}i{I}h{H} ("
      "e.g. l1t4096n8i256h256; a GRU descriptor with d1 is accepted). Default mode: forward. "
      "gflops counts the minGRU's GEMM flops "
      "(2*N*T*2H*in per layer, x3 for --train); speedup_vs_gru = gru_median_ms / median_ms; "
      "cpu_ms / gru_cpu_ms are median process CPU times (all threads) and speedup_vs_gru_cpu "
      "their ratio, steadier than wall times on a shared machine. gemm_median_ms times the "
      "minGRU's GEMMs alone (as nn.Linear: projections, and dx, dW with --train) and "
      "speedup_bound = gru_median_ms / gemm_median_ms, the most any minGRU could gain. "
      "First min(T, 32) steps are checked against the reference kernels, and the full run's "
      "first steps against that run; a wrong result exits with code 3 and prints no time.");
  mg->add_option("DESCRIPTOR", ma->descriptor, "problem, e.g. l1t4096n8i256h256")->required();
  mg->add_flag("--train", ma->train, "time forward + backward");
  mg->add_flag("--log-space", ma->log_space, "the log-space variant");
  mg->add_option("--threads", ma->threads, "threads (default: all cores)");
  mg->add_option("--reps", ma->reps, "timed runs after one warm-up")->capture_default_str();
  mg->add_option("--dtype", ma->dtype, "f32 or f64")->capture_default_str();
  mg->add_flag("--inject-mismatch", ma->inject_mismatch)->group("");  // hidden: for tests
  CLI::App* m = c->add_subcommand(
      "gemm",
      "GEMM rates of grux and of the BLAS (OpenBLAS, a peer: no grux operator computes through "
      "it). Without DESCRIPTOR: the large square peak (best of --reps): blas_gflops, "
      "grux_gflops (its packed GEMM, B packed once) and gflops, the better of the two (the peak "
      "other benches divide by). With DESCRIPTOR m{M}n{N}k{K}[ta][tb] (C = op(A) op(B), op(A) "
      "M x K, op(B) K x N; ta, tb: A or B stored transposed), e.g. m6400n1536k256 or "
      "m256n768k6400ta: grux's general GEMM (B packed on every call, as Linear and conv2d call "
      "it) and the BLAS's on the same operands, alternating rep by rep; median, min and max ms "
      "of each, gflops at the median, spread_pct = max / min - 1, vs_blas = the BLAS's median "
      "time over grux's (above 1: grux is faster); rows 0-3 and the last are first checked "
      "against the reference GEMM (a wrong result exits with code 3 and prints no time). "
      "blas_core names the kernel OpenBLAS picked for this CPU; blas_fallback is true when that "
      "is a generic one on a CPU with AVX2 (OpenBLAS did not recognise it: its rate is then "
      "several times lower; a note on stderr says so). simd is the SIMD target grux's kernels "
      "run on.");
  m->add_option("DESCRIPTOR", a->descriptor, "problem, e.g. m6400n1536k256 (default: the peak)");
  m->add_option("--threads", a->threads, "threads (default: all cores)");
  m->add_option("--reps", a->reps, "timed runs after one warm-up")->capture_default_str();
  m->add_option("--dtype", a->dtype, "f32 or f64")->capture_default_str();
  m->add_flag("--inject-mismatch", a->inject_mismatch)->group("");  // hidden: for tests
  CLI::App* cv = c->add_subcommand(
      "conv2d",
      "Time a conv2d problem. DESCRIPTOR is n{N}c{C}h{H}w{W}d{D}k{K}[s{S}][p{P}][r{R}][g{G}] "
      "(kernel K, stride S, zero padding P, dilation R, groups G; defaults s1 p0 r1 g1; each of "
      "k, s, p, r one value or HxW), e.g. n8c16h64w64d32k3, n8c64h56w56d64k3p1 or "
      "n1c8h32w32d8k3x5s2p1x2. Default mode: forward with bias; --train adds the backward "
      "(grad_input, grad_weight, grad_bias). gflops counts 2*N*D*OH*OW*(C/G)*KH*KW per forward, "
      "x3 for --train. The result is first checked against the loops reference: the whole "
      "problem when that costs at most 2.5 GFLOP (\"checked\":\"full\"), else image 0 alone "
      "plus image 0 of the batched run (\"checked\":\"batch1\"); a wrong result exits with "
      "code 3 and prints no time.");
  auto ca = std::make_shared<ConvBenchArgs>();
  cv->add_option("DESCRIPTOR", ca->descriptor, "problem, e.g. n8c16h64w64d32k3")->required();
  cv->add_option("--algo", ca->algo, "loops, im2col or toeplitz")->capture_default_str();
  cv->add_flag("--train", ca->train, "time forward + backward");
  cv->add_option("--threads", ca->threads, "threads (default: all cores)");
  cv->add_option("--reps", ca->reps, "timed runs after one warm-up")->capture_default_str();
  cv->add_option("--dtype", ca->dtype, "f32 or f64")->capture_default_str();
  cv->add_flag("--predict", ca->predict,
               "also print the cost model's prediction from the calibrated profile");
  cv->add_option("--profile", ca->profile, "profile for --predict (default: grux calibrate's)");
  // Hidden, for tests: perturb the result; lower the full-check limit.
  cv->add_flag("--inject-mismatch", ca->inject_mismatch)->group("");
  cv->add_option("--full-check-flops", ca->full_check_flops)->group("");
  auto scan = add_bench_scan_command(c);
  return [a, g, cv, ca, mg, ma, lg, la, scan] {
    if (scan()) return;
    if (lg->parsed())
      run_bench_lstm(*la);
    else if (cv->parsed())
      run_bench_conv2d(*ca);
    else if (mg->parsed())
      run_bench_mingru(*ma);
    else if (g->parsed())
      run_bench_gru(*a);
    else
      run_bench_gemm(*a);
  };
}

}  // namespace grux::cli
