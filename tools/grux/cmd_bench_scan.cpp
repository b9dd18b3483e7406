// `grux bench scan OP DESCRIPTOR`: times a scan after checking it against the reference
// kernels, next to this machine's limit measured in the same process: memcpy bandwidth for the
// bandwidth-bound scans, small-matrix sgemm throughput for matmul scans. One JSON line.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "cpu/gemm.h"
#include "grux/dist.h"
#include "grux/runtime.h"
#include "grux/scan.h"
#include "grux/tensor_ops.h"

namespace grux::cli {

namespace {

struct ScanBenchArgs {
  std::string op, descriptor, dtype = "f32";
  bool log_space = false, inject_mismatch = false;
  int threads = 0, reps = 10;
};

// One warm-up, then reps runs: median and minimum in ms.
std::pair<double, double> time_ms(int reps, const std::function<void()>& fn) {
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

// memcpy bandwidth (bytes read + written per second, GB/s) with `threads` threads each copying
// its share of a buffer of `bytes`: the best of several runs.
double memcpy_gbps(int64_t bytes, int threads) {
  bytes = std::max<int64_t>(bytes, 64 << 20);  // beyond the caches
  std::vector<char> src(size_t(bytes), 1), dst(size_t(bytes), 0);
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int64_t p = omp_get_thread_num(), P = omp_get_num_threads();
      const int64_t lo = bytes * p / P, hi = bytes * (p + 1) / P;
      std::memcpy(dst.data() + lo, src.data() + lo, size_t(hi - lo));
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(bytes) / best / 1e9;
}

// Throughput of independent d x d x d GEMMs (GFLOP/s), each thread multiplying its own cache-
// resident matrices, as a matmul scan does: the best of several runs.
template <typename T>
double small_gemm_gflops(int64_t d, int threads) {
  const int64_t dd = d * d, iters = std::max<int64_t>(64, int64_t(2e8 / double(2 * dd * d)));
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      std::vector<T> a(static_cast<size_t>(dd), T(0.01)), b(static_cast<size_t>(dd), T(0.02)),
          c(static_cast<size_t>(dd));
      // Not chained: repeated products of these matrices would sink into denormals.
      for (int64_t i = 0; i < iters; ++i)
        cpu::gemm<T>(false, false, d, d, d, a.data(), d, b.data(), d, nullptr, false, c.data(), d);
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return double(threads) * double(iters) * 2.0 * double(dd * d) / best / 1e9;
}

Tensor uniform(const Shape& shape, DType dtype, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng);
  return t.to(dtype);
}

// |got - want| <= tol * (1 + max |want|) everywhere, else exit code 3 naming the first index.
// `want` comes from the reference kernels in f64; a long f32 scan carries rounding error that
// grows with the partial results' size and the square root of the length, hence the scale.
void check(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.at_flat(i))) scale = std::max(scale, std::abs(want.at_flat(i)));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.at_flat(i), w = want.at_flat(i);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    if (!(std::abs(g - w) <= tol * (1 + scale)))
      throw ResultMismatch(
          fmt::format("{}: element {} is {} but the reference kernels give {}", what, i, g, w));
  }
}

// Under mpirun: the scan split along time across the ranks (dist_prefix_scan,
// dist_affine_scan), each rank holding its chunk of the same generated input. Checked against
// the one-process scan of the whole input on every rank's part; timed as the slowest rank's
// time per run (the ranks start each run together). Rank 0 prints.
void run_bench_scan_ranks(const ScanBenchArgs& a, const ScanProblem& p, Communicator& comm) {
  const bool affine = a.op == "affine";
  const ScanOp op = affine ? ScanOp::sum : parse_scan_op(a.op);
  const int threads = set_threads(a.threads);
  const int K = comm.size(), r = comm.rank();
  const DType dt = p.dtype;
  const int64_t t0 = p.T * r / K, t1 = p.T * (r + 1) / K;
  std::mt19937_64 rng(5);
  Tensor x, A, b;
  std::function<Tensor()> run;
  Tensor want;
  if (affine) {
    const bool matrix = p.d > 0;
    b = uniform(matrix ? Shape{p.N, p.T, p.d} : Shape{p.N, p.T, p.C}, dt, -1, 1, rng);
    A = matrix ? div(uniform({p.N, p.T, p.d, p.d}, dt, -1, 1, rng), std::sqrt(double(p.d)))
               : uniform(b.shape(), dt, a.log_space ? 0.5 : -1, 1, rng);
    if (a.log_space) b = uniform(b.shape(), dt, 0.1, 1, rng);
    AffineScanOptions o;
    o.log_space = a.log_space;
    o.threads = threads;
    const Tensor Ac = A.slice(1, t0, t1).contiguous(), bc = b.slice(1, t0, t1).contiguous();
    run = [&, o, Ac, bc] { return dist_affine_scan(comm, Ac, bc, 1, {}, o); };
    want = affine_scan(A, b, 1, {}, o).slice(1, t0, t1);
  } else {
    const Shape shape = p.d > 0 ? Shape{p.N, p.T, p.d, p.d} : Shape{p.N, p.T, p.C};
    x = op == ScanOp::prod ? uniform(shape, dt, 0.99, 1.01, rng) : uniform(shape, dt, -1, 1, rng);
    if (p.d > 0) x = mul(x, std::sqrt(3.0 / double(p.d)));
    ScanOptions o;
    o.threads = threads;
    const Tensor xc = x.slice(1, t0, t1).contiguous();
    run = [&, o, xc] { return dist_prefix_scan(comm, xc, 1, op, o); };
    want = prefix_scan(x, 1, op, o).slice(1, t0, t1);
  }
  std::string error;
  try {
    check(fmt::format("{} {} on {} ranks (rank {})", a.op, p.descriptor(), K, r), run(), want,
          (dt == DType::f32 ? 1e-6 : 1e-14) * std::sqrt(double(p.T)));
  } catch (const Error& e) {
    error = e.what();
  }
  const std::vector<std::string> errors = comm.all_gather(error);
  for (const std::string& e : errors)
    if (!e.empty()) throw ResultMismatch(e);
  // Each run starts together (a tiny sum); its time is the slowest rank's.
  std::vector<double> ms;
  for (int i = 0; i < a.reps + 1; ++i) {
    double sync = 0;
    comm.sum(&sync, 1);
    const auto start = std::chrono::steady_clock::now();
    run();
    const double mine =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    double slowest = 0;
    for (const std::string& v : comm.all_gather(fmt::format("{:.9g}", mine)))
      slowest = std::max(slowest, std::stod(v));
    if (i > 0) ms.push_back(slowest);  // the first is the warm-up
  }
  std::sort(ms.begin(), ms.end());
  if (r == 0)
    fmt::print(
        "{{\"op\":\"scan\",\"scan\":\"{}{}\",\"problem\":\"{}\",\"ranks\":{},\"threads\":{},"
        "\"dtype\":\"{}\",\"reps\":{},\"median_ms\":{:.4f},\"min_ms\":{:.4f}}}\n",
        a.op, a.log_space ? "-log" : "", p.descriptor(), K, threads, dtype_name(dt), a.reps,
        ms[ms.size() / 2], ms.front());
}

void run_bench_scan(const ScanBenchArgs& a, Communicator& comm) {
  ScanProblem p = ScanProblem::parse(a.descriptor);
  if (a.dtype != "f32" && a.dtype != "f64")
    throw Error(fmt::format("--dtype {} (expected f32 or f64)", a.dtype));
  p.dtype = a.dtype == "f32" ? DType::f32 : DType::f64;
  if (a.reps < 1) throw Error(fmt::format("--reps {} (expected >= 1)", a.reps));
  const bool affine = a.op == "affine";
  const ScanOp op = affine ? ScanOp::sum : parse_scan_op(a.op);
  const bool matrix = p.d > 0;
  if (op == ScanOp::matmul && !matrix)
    throw Error(
        fmt::format("bench scan matmul needs a matrix size: descriptor '{}' has no d "
                    "(e.g. t8192d64)",
                    a.descriptor));
  if (!affine && op != ScanOp::matmul && matrix)
    throw Error(
        fmt::format("bench scan {}: descriptor '{}' has d (matrices); element-wise scans "
                    "take c (channels), e.g. n8t4096c1536",
                    a.op, a.descriptor));
  if (a.log_space && (!affine || matrix))
    throw Error("--log-space applies to the diagonal affine scan only");
  const double elems =
      double(p.N) * double(p.T) * double(matrix ? p.d * (op == ScanOp::matmul ? p.d : 1) : p.C);
  const double esize = p.dtype == DType::f32 ? 4 : 8;
  if (elems * esize * (matrix && affine ? p.d + 2 : 3) > 16e9)
    throw Error(fmt::format("descriptor '{}' needs more than 16 GB; expected a smaller problem",
                            a.descriptor));
  if (comm.size() > 1) {
    if (p.T < comm.size())
      throw CollectiveError(
          fmt::format("{} has {} steps for {} ranks (expected at least one "
                      "each)",
                      p.descriptor(), p.T, comm.size()));
    run_bench_scan_ranks(a, p, comm);
    return;
  }
  const int threads = set_threads(a.threads);
  std::mt19937_64 rng(5);
  const DType dt = p.dtype;

  // Inputs (time along dim 1, sequences along dim 0) and the computation under test.
  Tensor x, A, b;
  std::function<Tensor()> run;
  double bytes = 0, flops = 0;
  if (affine) {
    b = uniform(matrix ? Shape{p.N, p.T, p.d} : Shape{p.N, p.T, p.C}, dt, -1, 1, rng);
    if (matrix) {
      A = div(uniform({p.N, p.T, p.d, p.d}, dt, -1, 1, rng), std::sqrt(double(p.d)));
    } else {
      A = uniform(b.shape(), dt, a.log_space ? 0.5 : -1, 1, rng);
      if (a.log_space) b = uniform(b.shape(), dt, 0.1, 1, rng);
    }
    AffineScanOptions o;
    o.log_space = a.log_space;
    o.threads = threads;
    run = [&, o] { return affine_scan(A, b, 1, {}, o); };
    bytes = esize * double(A.numel() + 2 * b.numel());
    flops = 2.0 * double(A.numel());
  } else {
    const Shape shape = matrix ? Shape{p.N, p.T, p.d, p.d} : Shape{p.N, p.T, p.C};
    x = op == ScanOp::prod ? uniform(shape, dt, 0.99, 1.01, rng) : uniform(shape, dt, -1, 1, rng);
    if (matrix) x = mul(x, std::sqrt(3.0 / double(p.d)));  // products neither vanish nor blow up
    ScanOptions o;
    o.threads = threads;
    run = [&, o] { return prefix_scan(x, 1, op, o); };
    bytes = esize * 2 * double(x.numel());
    flops = matrix ? 2.0 * double(p.N * p.T) * double(p.d * p.d * p.d) : double(x.numel());
  }

  // 1. Check against the reference kernels (matmul and matrix affine: on the first 512 steps,
  // the naive reference being slow; the time-split path still runs, it is chosen by length).
  {
    Tensor got = run();
    if (a.inject_mismatch) {
      got = got.clone();
      got.reshape({-1}).set({got.numel() / 2}, got.at_flat(got.numel() / 2) + 0.5);
    }
    Tensor want;
    const double steps = double(std::min<int64_t>(p.T, 512));
    const double tol =
        (dt == DType::f32 ? 1e-6 : 1e-14) * std::sqrt(double(p.T)) * std::sqrt(steps);
    if (matrix && p.T > 512) {
      const int64_t T2 = 512;
      const Tensor got2 = [&] {
        if (affine) return affine_scan(A.slice(1, 0, T2), b.slice(1, 0, T2), 1);
        ScanOptions o;
        o.threads = threads;
        return prefix_scan(x.slice(1, 0, T2), 1, op, o);
      }();
      set_reference_kernels(true);
      const Tensor A2 = affine ? A.slice(1, 0, T2).to(DType::f64) : Tensor();
      want = affine ? affine_scan(A2, b.slice(1, 0, T2).to(DType::f64), 1)
                    : prefix_scan(x.slice(1, 0, T2).to(DType::f64), 1, op);
      set_reference_kernels(false);
      check(a.op + " " + p.descriptor() + " (first 512 steps)", got2, want, tol);
      check(a.op + " " + p.descriptor() + " (first 512 steps of the full run)", got.slice(1, 0, T2),
            want, tol);
    } else {
      set_reference_kernels(true);
      if (affine) {
        AffineScanOptions o;
        o.log_space = a.log_space;
        want = affine_scan(A.to(DType::f64), b.to(DType::f64), 1, {}, o);
      } else {
        want = prefix_scan(x.to(DType::f64), 1, op);
      }
      set_reference_kernels(false);
      check(a.op + " " + p.descriptor(), got, want, tol);
    }
  }
  // 2. Time, then the machine's limit in the same process.
  const auto [med, mn] = time_ms(a.reps, [&] { run(); });
  std::string extra;
  if (op == ScanOp::matmul && !affine) {
    // The same scan through the callable API (a lambda calling grux::matmul).
    const ScanFn mm = [](const Tensor& l, const Tensor& r) { return matmul(l, r); };
    ScanOptions o;
    o.threads = threads;
    const auto [cmed, cmn] = time_ms(a.reps, [&] { prefix_scan(x, 1, mm, o); });
    extra = fmt::format(",\"callable_median_ms\":{:.4f},\"callable_over_builtin\":{:.3f}", cmed,
                        cmed / med);
  }
  const bool compute = op == ScanOp::matmul && !affine;
  const double rate = compute ? flops / (med * 1e6) : bytes / (med * 1e6);
  const double limit = compute ? (dt == DType::f32 ? small_gemm_gflops<float>(p.d, threads)
                                                   : small_gemm_gflops<double>(p.d, threads))
                               : memcpy_gbps(int64_t(bytes / 2), threads);
  fmt::print(
      "{{\"op\":\"scan\",\"scan\":\"{}{}\",\"problem\":\"{}\",\"threads\":{},\"dtype\":\"{}\","
      "\"reps\":{},\"median_ms\":{:.4f},\"min_ms\":{:.4f},\"{}\":{:.2f},\"limit\":\"{}\","
      "\"limit_{}\":{:.2f},\"pct_of_limit\":{:.1f}{}}}\n",
      a.op, a.log_space ? "-log" : "", p.descriptor(), threads, dtype_name(dt), a.reps, med, mn,
      compute ? "gflops" : "gbps", rate,
      compute ? fmt::format("sgemm {}x{}x{}", p.d, p.d, p.d) : std::string("memcpy"),
      compute ? "gflops" : "gbps", limit, 100 * rate / limit, extra);
}

}  // namespace

std::function<bool()> add_bench_scan_command(CLI::App* bench) {
  auto a = std::make_shared<ScanBenchArgs>();
  CLI::App* s = bench->add_subcommand(
      "scan",
      "Time a scan. OP is sum, prod, max, min, logaddexp, matmul or affine; DESCRIPTOR is "
      "[n<N>]t<T>[c<C>][d<D>]: N sequences of T steps, each step C channels (element-wise and "
      "diagonal affine) or a D x D matrix (matmul; affine with a D x D map on D-vectors), e.g. "
      "t16777216, n8t4096c1536, t8192d64. The result is first checked against the reference "
      "kernels (exit code 3 if wrong). Prints median_ms, the rate (gbps = bytes read + written "
      "per second; gflops for matmul) and pct_of_limit: the fraction of this machine's memcpy "
      "bandwidth (or of its d x d x d sgemm throughput for matmul) measured in the same process "
      "with the same threads. matmul also times the same scan through a C++ callable. Under "
      "mpirun, the scan split along time across the ranks (the slowest rank's time).");
  s->add_option("OP", a->op, "sum, prod, max, min, logaddexp, matmul or affine")->required();
  s->add_option("DESCRIPTOR", a->descriptor, "problem, e.g. t16777216")->required();
  s->add_flag("--log-space", a->log_space, "affine: the log-space kernel (positive terms)");
  s->add_option("--threads", a->threads, "threads (default: all cores)");
  s->add_option("--reps", a->reps, "timed runs after one warm-up")->capture_default_str();
  s->add_option("--dtype", a->dtype, "f32 or f64")->capture_default_str();
  s->add_flag("--inject-mismatch", a->inject_mismatch)->group("");  // hidden: for tests
  return [a, s] {
    if (!s->parsed()) return false;
    run_launched("grux bench scan", [&](Communicator& comm) { run_bench_scan(*a, comm); });
    return true;
  };
}

}  // namespace grux::cli
