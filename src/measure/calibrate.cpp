// Measuring the machine for the roofline: GEMM peaks (the BLAS and grux's packed GEMM), read
// bandwidth per buffer size (which cache level holds what), memcpy bandwidth, and the fixed
// cost of one sequential GRU step. Used by `grux calibrate` and `grux bench`.
#include "grux/calibrate.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include "cost/cost_util.h"
#include "cpu/kernel_probe.h"
#include "measure/blas.h"
#include "measure/read_bandwidth.h"

namespace grux {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best (shortest) time of `reps` runs after one warm-up: a peak is what the machine can do.
double best_seconds(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// A GRU input (T, N, I) for problem p, uniform in [-1, 1), f32.
Tensor gru_input(const GruProblem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor x = Tensor::empty({p.T, p.N, p.input_size}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(u(rng));
  return x;
}

// `count` values uniform in [-1, 1] from rng.
template <typename T>
std::vector<T> uniform_values(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(count);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

// grux's packed GEMM (precision p) on the n x n operands a, b, B packed as the operators pack
// it: the best GFLOP/s of `reps` runs.
template <typename T>
double packed_rate(int reps, int64_t n, const std::vector<T>& a, const std::vector<T>& b,
                   Precision p) {
  std::vector<T> c(n * n);
  const probe::PackedGemm gemm(dtype_of<T>(), p, n, b.data());
  const double s = best_seconds(reps, [&] { gemm.run(a.data(), c.data()); });
  return 2.0 * n * n * n / s / 1e9;
}

// The side peak_side gives for the rate of a probe at 192 (operands from `seed`).
template <typename T>
int64_t probed_side(uint64_t seed, Precision p) {
  std::mt19937_64 rng(seed);
  const std::vector<T> a = uniform_values<T>(192 * 192, rng), b = uniform_values<T>(192 * 192, rng);
  return peak_side(packed_rate<T>(3, 192, a, b, p));
}

template <typename T>
GemmRates gemm_rates(int reps, int64_t n) {
  if (n == 0) n = probed_side<T>(1, Precision::f32);
  std::mt19937_64 rng(1);
  const std::vector<T> a = uniform_values<T>(n * n, rng), b = uniform_values<T>(n * n, rng);
  std::vector<T> c(n * n);
  const double flops = 2.0 * n * n * n;
  double blas = 0;
  if (measure::blas_available()) {
    const double s = best_seconds(reps, [&] {
      measure::blas_gemm<T>(false, true, n, n, n, T(1), a.data(), n, b.data(), n, T(0), c.data(),
                            n);
    });
    blas = flops / s / 1e9;
  }
  return {n, blas, packed_rate<T>(reps, n, a, b, Precision::f32)};
}

void set_threads(int k) {
  omp_set_num_threads(k);
  measure::blas_set_threads(k);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

GemmRates measure_gemm_rates(DType dtype, int reps, int64_t n) {
  if (dtype == DType::f64) return gemm_rates<double>(reps, n);
  return gemm_rates<float>(reps, n);
}

int64_t peak_side(double probe_gflops) {
  int64_t side = 1536;
  while (side > 192 && 2.0 * side * side * side / (std::max(probe_gflops, 1e-3) * 1e9) > 0.5)
    side /= 2;
  return side;
}

double measure_lowp_gemm_rate(Precision p, int reps, int64_t n, int64_t* n_used) {
  if (p == Precision::f32) throw Error("measure_lowp_gemm_rate: bf16 or int8, not f32");
  if (n == 0) n = probed_side<float>(2, p);
  if (n_used) *n_used = n;
  std::mt19937_64 rng(2);
  const std::vector<float> a = uniform_values<float>(n * n, rng),
                           b = uniform_values<float>(n * n, rng);
  return packed_rate<float>(reps, n, a, b, p);
}

double measure_read_bandwidth(int64_t bytes_per_thread, int threads, double bytes_to_read,
                              bool alternate) {
  const int64_t n = std::max<int64_t>(bytes_per_thread / 4, 4096) / 64 * 64;
  const int64_t passes =
      std::max<int64_t>(1, static_cast<int64_t>(bytes_to_read / double(n * 4 * threads)));
  double best = 0;
  std::vector<float> sums(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    // Each reader first-touches its own 64-byte aligned buffer.
    std::vector<float> storage(n + 16, 1.0f);
    float* buf = storage.data();
    while (reinterpret_cast<uintptr_t>(buf) % 64) ++buf;
    for (int rep = 0; rep < 3; ++rep) {
#pragma omp barrier
      const auto t0 = Clock::now();
      for (int64_t p = 0; p < passes; ++p)
        sums[t] += measure::read_sum(buf, n, alternate && (p & 1));
#pragma omp barrier
#pragma omp master
      best =
          std::max(best, double(n) * 4 * passes * omp_get_num_threads() / seconds_since(t0) / 1e9);
    }
  }
  return best;
}

double measure_handoff_ns(int threads) {
  return probe::handoff_round_trip_ns(threads);
}

namespace {
// A stream's bound from its chain (set by the caller from b's latencies), its products' flops
// a frame and the floats of weights a frame reads.
StreamBound finish_stream_bound(StreamBound b, double flops_per_frame, double peak_gflops,
                                int64_t floats) {
  b.work_ns = flops_per_frame / (peak_gflops * 1e9) * 1e9;
  // Fewer bytes than 16 KiB are read at the rate of 16 KiB (L1 either way), which the cost of
  // a call to the reading loop does not blur.
  b.weights_gbps = measure_read_bandwidth(floats * 4, 1, 2e7, true);
  b.weights_ns = floats * 4 / b.weights_gbps;
  return b;
}

StreamBound with_latencies() {
  const probe::StreamLatencies lat = probe::stream_latencies();
  StreamBound b;
  b.fma_ns = lat.fma_ns, b.sigmoid_ns = lat.sigmoid_ns, b.tanh_ns = lat.tanh_ns;
  return b;
}

double tree_depth(int64_t terms) {
  return std::ceil(std::log2(std::max(static_cast<double>(terms), 1.0)));
}
}  // namespace

StreamBound measure_stream_bound(const GruProblem& p, double peak_gflops) {
  StreamBound b = with_latencies();
  b.chain_ns = (1 + tree_depth(p.hidden_size) + 1 + 1 + 2) * b.fma_ns + b.sigmoid_ns + b.tanh_ns;
  // The weights a step reads: 3H (I_l + H) floats per layer (in the kernel's layout, no less).
  const int64_t layers = p.config().num_layers;
  const int64_t floats =
      3 * p.hidden_size * (p.input_size + p.hidden_size + (layers - 1) * 2 * p.hidden_size);
  return finish_stream_bound(b, p.gemm_flops() / static_cast<double>(p.T), peak_gflops, floats);
}

StreamBound measure_stream_bound(const LstmProblem& p, double peak_gflops) {
  StreamBound b = with_latencies();
  const int64_t H = p.hidden_size, P = p.output_size();
  const bool proj = p.proj_size > 0;
  b.chain_ns = (1 + tree_depth(P) + 1 + 2 + 1 + (proj ? 1 + tree_depth(H) : 0)) * b.fma_ns +
               std::max(b.sigmoid_ns, b.tanh_ns) + b.tanh_ns;
  int64_t floats = 0;
  for (int64_t l = 0; l < p.num_layers; ++l)
    floats += 4 * H * (p.layer_input_size(l) + P) + (proj ? P * H : 0);
  return finish_stream_bound(b, p.gemm_flops() / static_cast<double>(p.T), peak_gflops, floats);
}

double measure_recurrence_stream(int64_t bytes_per_thread, int threads, double bytes_to_read) {
  // A batch-1 GRU whose recurrent weights give each thread about `bytes_per_thread` (H a
  // multiple of 16, I = 16 so that the input projection is negligible): each step streams
  // W_hh + b_hh once, and the rate counts the whole step (its barrier and gates included).
  const double h = std::sqrt(double(bytes_per_thread) * threads / 12.0);
  GruProblem p;
  p.N = 1, p.input_size = 16,
  p.hidden_size = std::max<int64_t>(16 * threads, (static_cast<int64_t>(h) + 8) / 16 * 16);
  const double whh = (3.0 * p.hidden_size * p.hidden_size + 3.0 * p.hidden_size) * 4;
  p.T = std::clamp<int64_t>(static_cast<int64_t>(bytes_to_read / whh), 20, 4000);
  Gru gru(p.config(), DType::f32, 1);
  Tensor x = Tensor::full({p.T, 1, p.input_size}, 0.25, DType::f32);
  const double s = best_seconds(3, [&] { gru.forward(x); });
  return whh * double(p.T) / s / 1e9;
}

double measure_gru_gflops(bool quick, Precision precision) {
  GruProblem p = GruProblem::parse(quick ? "l1t20n16i64h128" : "l1t50n48i192h384");
  Gru gru(p.config(), DType::f32, 1);
  const Tensor x = gru_input(p, 3);
  const int reps = quick ? 2 : 5;
  if (precision == Precision::f32)
    return p.gemm_flops() / best_seconds(reps, [&] { gru.forward(x); }) / 1e9;
  const GruInference lowp(gru, precision);
  return p.gemm_flops() / best_seconds(reps, [&] { lowp.forward(x); }) / 1e9;
}

double measure_memcpy_bandwidth(int64_t bytes, int threads, int reps) {
  const int64_t per = std::max<int64_t>(bytes / threads / 64 * 64, 4096);
  std::vector<std::vector<char>> src(threads), dst(threads);
  double best = 0;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    src[t].assign(per, 1);  // first touch by the thread that copies
    dst[t].assign(per, 0);
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
#pragma omp barrier
      const auto t0 = Clock::now();
      std::memcpy(dst[t].data(), src[t].data(), per);
#pragma omp barrier
#pragma omp master
      if (rep > 0)
        best = std::max(best, 2.0 * per * omp_get_num_threads() / seconds_since(t0) / 1e9);
    }
  }
  return best;
}

std::pair<double, double> measure_step_overhead(const ThreadProfile& rates, int threads,
                                                int steps) {
  // One hidden block of 16 units per thread, so that the team is exactly `threads` wide and
  // pays its barrier, while the work of a step is a few hundred flops.
  GruProblem p;
  p.T = steps, p.N = 1, p.input_size = 16, p.hidden_size = 16 * threads;
  Gru gru(p.config(), DType::f32, 1);
  const Tensor x = gru_input(p, 2);
  MachineProfile one;
  one.threads[threads] = rates;
  const double seq_s = best_seconds(5, [&] { gru.forward(x); });
  const double seq_roof =
      predict(gru_cost(p).inference_phases, DType::f32, one, threads).roofline_ms;
  GruStream stream(gru, 1);
  Tensor out = Tensor::empty({1, p.hidden_size}, DType::f32);
  const double str_s = best_seconds(5, [&] {
    stream.reset();
    for (int64_t t = 0; t < p.T; ++t) {
      Tensor frame = out;
      stream.step_into(x.select(0, t), frame);
    }
  });
  const double str_roof =
      predict(gru_stream_cost(p).inference_phases, DType::f32, one, threads).roofline_ms;
  return {std::max(0.0, (seq_s * 1e3 - seq_roof) * 1e3 / p.T),
          std::max(0.0, (str_s * 1e3 - str_roof) * 1e3 / p.T)};
}

MachineProfile calibrate(const std::vector<int>& thread_counts, bool quick, int rounds) {
  if (rounds < 1) throw Error(fmt::format("--rounds {} (expected >= 1)", rounds));
  for (int k : thread_counts)
    if (k < 1) throw Error(fmt::format("--threads {} (expected >= 1)", k));
  const int saved = omp_get_max_threads();
  MachineProfile prof;
  prof.source = "measured";
  prof.machine = cpu_model();
  prof.created = today();
  const int reps = quick ? 1 : 5;
  const int64_t n = quick ? 384 : 1536;
  std::vector<double> sizes = {16e3, 32e3,  64e3, 128e3, 256e3, 384e3, 512e3, 768e3,
                               1e6,  1.5e6, 2e6,  4e6,   8e6,   16e6,  64e6};
  if (quick) sizes = {32e3, 512e3, 4e6};
  std::vector<double> stream_sizes = {32e3, 128e3, 384e3, 768e3, 1.5e6, 4e6, 16e6};
  if (quick) stream_sizes = {128e3, 1.5e6};
  // Each round measures every thread count; a machine shared with other work is sometimes
  // slower than it can be, never faster, so each rate keeps its best round (the highest rate,
  // the lowest step cost).
  auto best_of = [](ThreadProfile& acc, const ThreadProfile& t, bool first) {
    if (first) {
      acc = t;
      return;
    }
    auto up = [](double& a, double b) { a = std::max(a, b); };
    up(acc.sgemm_gflops, t.sgemm_gflops), up(acc.dgemm_gflops, t.dgemm_gflops);
    up(acc.blas_sgemm_gflops, t.blas_sgemm_gflops), up(acc.blas_dgemm_gflops, t.blas_dgemm_gflops);
    up(acc.bf16_gflops, t.bf16_gflops), up(acc.int8_gflops, t.int8_gflops);
    up(acc.memcpy_gbps, t.memcpy_gbps);
    for (size_t i = 0; i < acc.read_gbps.size(); ++i)
      up(acc.read_gbps[i].second, t.read_gbps[i].second);
    for (size_t i = 0; i < acc.stream_gbps.size(); ++i)
      up(acc.stream_gbps[i].second, t.stream_gbps[i].second);
    up(acc.gru_gemm_efficiency, t.gru_gemm_efficiency);
    up(acc.bf16_gru_efficiency, t.bf16_gru_efficiency);
    up(acc.int8_gru_efficiency, t.int8_gru_efficiency);
    acc.step_us = std::min(acc.step_us, t.step_us);
    acc.stream_step_us = std::min(acc.stream_step_us, t.stream_step_us);
  };
  try {
    for (int round = 0; round < rounds; ++round)
      for (int k : thread_counts) {
        set_threads(k);
        ThreadProfile t;
        const GemmRates s = measure_gemm_rates(DType::f32, reps, n);
        const GemmRates d = measure_gemm_rates(DType::f64, reps, n);
        t.sgemm_gflops = s.best(), t.blas_sgemm_gflops = s.blas;
        t.dgemm_gflops = d.best(), t.blas_dgemm_gflops = d.blas;
        t.bf16_gflops = measure_lowp_gemm_rate(Precision::bf16, reps, n);
        t.int8_gflops = measure_lowp_gemm_rate(Precision::int8, reps, n);
        t.memcpy_gbps = measure_memcpy_bandwidth(quick ? (int64_t(16) << 20) : (int64_t(256) << 20),
                                                 k, quick ? 1 : 3);
        for (double b : sizes) {
          t.read_gbps.push_back(
              {b, measure_read_bandwidth(static_cast<int64_t>(b), k, quick ? 2e7 : 4e8)});
        }
        t.gru_gemm_efficiency = std::min(1.0, measure_gru_gflops(quick) / t.sgemm_gflops);
        t.bf16_gru_efficiency =
            std::min(1.0, measure_gru_gflops(quick, Precision::bf16) / t.bf16_gflops);
        t.int8_gru_efficiency =
            std::min(1.0, measure_gru_gflops(quick, Precision::int8) / t.int8_gflops);
        // The step cost is what a step takes beyond its roofline: measured against this
        // round's rates, so that a slow round does not count as step cost.
        const auto [seq, str] = measure_step_overhead(t, k, quick ? 200 : 2000);
        t.step_us = seq, t.stream_step_us = str;
        for (double b : stream_sizes)
          t.stream_gbps.push_back(
              {b, measure_recurrence_stream(static_cast<int64_t>(b), k, quick ? 2e7 : 2e8)});
        best_of(prof.threads[k], t, round == 0);
      }
  } catch (...) {
    set_threads(saved);
    throw;
  }
  set_threads(saved);
  return prof;
}

}  // namespace grux
