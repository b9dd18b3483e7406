// Google Benchmark benches: the fused gate kernel (optimized vs reference) and the GRU stack
// forward/backward on the standard workload shapes of ../shared/WORKLOADS.md.
#include <benchmark/benchmark.h>

#include <vector>

#include "cpu/gemm_lowp.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_gates.h"
#include "cpu/ref/gru_gates_ref.h"
#include "grux/gru.h"
#include "measure/blas.h"

namespace {

template <bool kReference>
void BM_gates_lbr_forward(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1);
  const int64_t blocks = (H + grux::cpu::kUnit<float> - 1) / grux::cpu::kUnit<float>;
  std::vector<float> g(B * 3 * H, 0.1f), gh(B * 3 * H, 0.2f), b(3 * H, 0.01f), hp(B * H, 0.3f),
      h(B * H), hn(B * H);
  for (auto _ : state) {
    if (kReference)
      grux::cpu::ref::gru_gates_lbr_forward<float>(B, H, 0, blocks, g.data(), gh.data(), b.data(),
                                                   hp.data(), h.data(), hn.data(), H);
    else
      grux::cpu::gru_gates_lbr_forward<float>(B, H, 0, blocks, g.data(), gh.data(), b.data(),
                                              hp.data(), h.data(), hn.data(), H);
    benchmark::DoNotOptimize(h.data());
  }
  state.SetItemsProcessed(state.iterations() * B * H);
}
BENCHMARK(BM_gates_lbr_forward<false>)->Args({1, 256})->Args({64, 512});
BENCHMARK(BM_gates_lbr_forward<true>)->Args({1, 256})->Args({64, 512});

// The input projection (rows x 3H) = x (rows x I) W_ih^T: the row-invariant packed kernel
// against the BLAS. Args: rows, I, H, packed (0/1).
void BM_input_projection(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = 3 * state.range(2);
  const bool packed = state.range(3) != 0;
  if (!packed && !grux::measure::blas_available()) {
    state.SkipWithError("built without OpenBLAS: no BLAS to measure");
    return;
  }
  const int64_t panel = 3 * grux::cpu::kUnit<float>;
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.01f), C(M * N), b(N, 0.1f);
  grux::Tensor P =
      grux::Tensor::empty({grux::cpu::packed_size<float>(K, N, panel)}, grux::DType::f32);
  grux::cpu::pack_b<float>(K, N, panel, W.data(), 1, K, nullptr, nullptr, P.data<float>());
  const grux::cpu::PackedB<float> B{K, N, panel, P.data<float>()};
  for (auto _ : state) {
    if (packed)
      grux::cpu::gemm_packed_parallel<float>(M, A.data(), K, false, B, b.data(), false, C.data(),
                                             N);
    else
      grux::measure::blas_gemm<float>(false, true, M, N, K, 1.f, A.data(), K, W.data(), K, 0.f,
                                      C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_input_projection)
    ->Args({6400, 256, 512, 0})
    ->Args({6400, 256, 512, 1})  // W3 layer input
    ->Args({1000, 128, 256, 0})
    ->Args({1000, 128, 256, 1})  // W2
    ->Unit(benchmark::kMillisecond);

// One step's recurrent product gh (M x 3H) = h (M x H) W_hh^T on one thread, the packed
// operand as the forward uses it. Args: M, H.
void BM_recurrent_gemm(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = 3 * K;
  const int64_t panel = 3 * grux::cpu::kUnit<float>;
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.01f), C(M * N);
  grux::Tensor P =
      grux::Tensor::empty({grux::cpu::packed_size<float>(K, N, panel)}, grux::DType::f32);
  grux::cpu::pack_b<float>(K, N, panel, W.data(), 1, K, nullptr, nullptr, P.data<float>());
  const grux::cpu::PackedB<float> B{K, N, panel, P.data<float>()};
  for (auto _ : state) {
    grux::cpu::gemm_packed<float>(M, A.data(), K, false, B, nullptr, false, C.data(), N, 0,
                                  B.panels());
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_recurrent_gemm)->Args({64, 512})->Args({32, 256})->Args({1, 256})->Args({1, 512});

// The same product with W_hh in bf16 or int8 (cpu/gemm_lowp.h). Args: M, H, precision (1 bf16,
// 2 int8). GFLOP/s counts the same 2 M N K as f32's.
void BM_recurrent_gemm_lowp(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = 3 * K;
  const grux::Precision p = state.range(2) == 1 ? grux::Precision::bf16 : grux::Precision::int8;
  const int64_t panel = 3 * grux::cpu::kUnit<float>;
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.01f), C(M * N);
  grux::Tensor P =
      grux::Tensor::empty({grux::cpu::packed_lowp_bytes(p, K, N, panel) / 4}, grux::DType::f32);
  const grux::cpu::PackedB<float> B =
      grux::cpu::pack_b_lowp(p, K, N, panel, W.data(), 1, K, nullptr, nullptr, P.raw_data());
  for (auto _ : state) {
    grux::cpu::gemm_packed<float>(M, A.data(), K, false, B, nullptr, false, C.data(), N, 0,
                                  B.panels());
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(grux::cpu::lowp_kernel(p));
}
BENCHMARK(BM_recurrent_gemm_lowp)
    ->Args({64, 512, 1})
    ->Args({64, 512, 2})
    ->Args({1, 256, 1})
    ->Args({1, 256, 2})
    ->Args({1, 512, 1})
    ->Args({1, 512, 2});

// A weight gradient of training: dW (3H x N) = dG^T X over K = T * batch rows, in f32 (the
// packed GEMM with A transposed, B packed each call as training does) or bf16
// (cpu::gemm_at_b_bf16). Args: K, H, N (X's columns: I or H), bf16 (0/1). On all threads.
void BM_gradient_gemm(benchmark::State& state) {
  const int64_t K = state.range(0), M = 3 * state.range(1), N = state.range(2);
  const bool bf16 = state.range(3) != 0;
  const int64_t panel = 3 * grux::cpu::kUnit<float>;
  std::vector<float> A(K * M, 0.01f), B(K * N, 0.5f), C(M * N);
  // 64-byte aligned, as the packed GEMM reads it.
  grux::Tensor packed =
      grux::Tensor::empty({grux::cpu::packed_size<float>(K, N, panel)}, grux::DType::f32);
  float* pk = packed.data<float>();
  for (auto _ : state) {
    if (bf16) {
      grux::cpu::gemm_at_b_bf16(M, N, K, A.data(), M, B.data(), N, nullptr, false, C.data(), N);
    } else {
      grux::cpu::pack_b<float>(K, N, panel, B.data(), N, 1, nullptr, nullptr, pk);
      grux::cpu::gemm_packed_parallel<float>(M, A.data(), M, true, {K, N, panel, pk}, nullptr,
                                             false, C.data(), N);
    }
    benchmark::DoNotOptimize(C.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(bf16 ? grux::cpu::lowp_kernel(grux::Precision::bf16) : "f32");
}
BENCHMARK(BM_gradient_gemm)
    ->Args({6400, 512, 256, 0})
    ->Args({6400, 512, 256, 1})
    ->Args({6400, 512, 512, 0})
    ->Args({6400, 512, 512, 1})
    ->UseRealTime();

// One streaming step (W1: a frame of batch N through GruStream). Args: N, I, H.
void BM_stream_step(benchmark::State& state) {
  grux::GruConfig c;
  const int64_t N = state.range(0);
  c.input_size = state.range(1);
  c.hidden_size = state.range(2);
  grux::Gru gru(c, grux::DType::f32, 1);
  grux::GruStream stream(gru, N);
  grux::Tensor x = grux::Tensor::full({N, c.input_size}, 0.5, grux::DType::f32);
  grux::Tensor out = grux::Tensor::empty({N, c.hidden_size}, grux::DType::f32);
  for (auto _ : state) {
    stream.step_into(x, out);
    benchmark::DoNotOptimize(out.raw_data());
  }
}
BENCHMARK(BM_stream_step)->Args({1, 64, 256});

// Args: T, N, I, H, train (0/1).
void BM_gru_stack(benchmark::State& state) {
  grux::GruConfig c;
  const int64_t T = state.range(0), N = state.range(1);
  c.input_size = state.range(2);
  c.hidden_size = state.range(3);
  const bool train = state.range(4) != 0;
  grux::Gru gru(c, grux::DType::f32, 1);
  grux::Tensor x = grux::Tensor::full({T, N, c.input_size}, 0.5, grux::DType::f32);
  grux::Tensor dy = grux::Tensor::full({T, N, c.hidden_size}, 0.1, grux::DType::f32);
  for (auto _ : state) {
    if (train) {
      grux::GruTape tape;
      gru.forward_train(x, {}, {}, tape);
      benchmark::DoNotOptimize(gru.backward(tape, dy, {}).dinput.raw_data());
    } else {
      benchmark::DoNotOptimize(gru.forward(x).output.raw_data());
    }
  }
  const double flops = 2.0 * N * T * 3 * c.hidden_size * (c.input_size + c.hidden_size);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * (train ? 3 : 1) * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_gru_stack)
    ->Args({1000, 1, 128, 256, 0})  // W2
    ->Args({100, 64, 256, 512, 0})  // W3
    ->Args({100, 64, 256, 512, 1})  // W4
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
