// Google Benchmark benches of conv2d: the three algorithms on a small problem, and the im2col
// kernels alone on the standard shapes (bench/compare_conv.py).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
#include <vector>

#include "cpu/conv_geom.h"
#include "cpu/im2col.h"
#include "grux/conv.h"

namespace {

grux::Tensor random(const grux::Shape& s) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  grux::Tensor t = grux::Tensor::empty(s, grux::DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(u(rng));
  return t;
}

// The public API, forward (+ backward when train). Args: algo, train.
// Problem: n4c8h20w20d16k3p1 (small enough for the loops and the Toeplitz matrix).
void BM_conv2d_api(benchmark::State& state) {
  const auto algo = static_cast<grux::ConvAlgo>(state.range(0));
  const bool train = state.range(1) != 0;
  const grux::ConvProblem p = grux::ConvProblem::parse("n4c8h20w20d16k3p1");
  const grux::Tensor x = random({p.N, p.C, p.H, p.W}),
                     w = random({p.D, p.C, p.kernel.h, p.kernel.w});
  const grux::Tensor b = random({p.D}), dy = random({p.N, p.D, p.OH(), p.OW()});
  const grux::Conv2dOptions o = p.options(algo);
  for (auto _ : state) {
    grux::Tensor y = grux::conv2d_forward(x, w, b, o);
    if (train) benchmark::DoNotOptimize(grux::conv2d_backward(x, w, dy, true, o).dinput);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetLabel(std::string(grux::conv_algo_name(algo)) + (train ? " train" : " forward"));
  state.counters["GFLOP/s"] = benchmark::Counter(
      p.flops() * (train ? 3 : 1) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_conv2d_api)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The im2col kernels alone (no allocation, no checks) on all threads, forward or forward +
// backward, on the standard shapes of bench/compare_conv.py. Args: problem (0:
// n8c16h64w64d32k3, 1: n8c64h56w56d64k3p1), train (0/1).
void BM_im2col_kernels(benchmark::State& state) {
  const grux::ConvProblem p =
      grux::ConvProblem::parse(state.range(0) == 0 ? "n8c16h64w64d32k3" : "n8c64h56w56d64k3p1");
  grux::cpu::ConvGeom g{p.N,          p.C,         p.H,         p.W,
                        p.D,          p.kernel.h,  p.kernel.w,  p.stride.h,
                        p.stride.w,   p.padding.h, p.padding.w, p.dilation.h,
                        p.dilation.w, p.groups,    p.OH(),      p.OW()};
  const grux::cpu::Im2colPlan plan = grux::cpu::im2col_plan(g, omp_get_max_threads());
  const bool train = state.range(1) != 0;
  const grux::Tensor x = random({p.N, p.C, p.H, p.W}),
                     w = random({p.D, p.C, p.kernel.h, p.kernel.w});
  const grux::Tensor b = random({p.D}), dy = random({p.N, p.D, p.OH(), p.OW()});
  grux::Tensor y = grux::Tensor::empty({p.N, p.D, p.OH(), p.OW()}, grux::DType::f32);
  grux::Tensor dx = grux::Tensor::empty(x.shape(), grux::DType::f32);
  grux::Tensor dw = grux::Tensor::empty(w.shape(), grux::DType::f32);
  grux::Tensor db = grux::Tensor::empty({p.D}, grux::DType::f32);
  grux::Tensor work =
      grux::Tensor::empty({grux::cpu::im2col_workspace_size(g, plan, true)}, grux::DType::f32);
  for (auto _ : state) {
    grux::cpu::conv2d_forward_im2col<float>(g, x.data<float>(), w.data<float>(), b.data<float>(),
                                            y.data<float>(), work.data<float>(), plan);
    if (train)
      grux::cpu::conv2d_backward_im2col<float>(g, dy.data<float>(), x.data<float>(),
                                               w.data<float>(), dx.data<float>(), dw.data<float>(),
                                               db.data<float>(), work.data<float>(), plan);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetLabel(p.descriptor() + (plan.shifted ? " shifted" : " blas") +
                 (train ? " train" : " forward"));
  state.counters["GFLOP/s"] = benchmark::Counter(
      p.flops() * (train ? 3 : 1) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_im2col_kernels)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
