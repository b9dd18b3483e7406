// Determinism guarantees of the optimized GRU, bit for bit: results (forward and every
// gradient) do not depend on the number of threads, and a sequence's outputs do not depend
// on which other sequences share its batch. Shapes put the thread split and the SIMD tails
// at unit-block edges (H = 33 f32 / 17 f64: three blocks).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "cpu/gemm_packed.h"
#include "cpu/gru_gates.h"
#include "grux/gru.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_gru_invariance {
namespace {

struct InvCase {
  const char* name;
  GruForm form;
  DType dtype;
  int64_t H, layers;
  bool bidir, lengths;
};

std::vector<Tensor> train_once(const Gru& gru, const Tensor& x, const Tensor& h0,
                               const Tensor& lengths, const Tensor& dy, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  GruTape tape;
  GruOutput y = gru.forward_train(x, h0, lengths, tape);
  GruGrads g = gru.backward(tape, dy, {});
  omp_set_num_threads(before);
  std::vector<Tensor> out{y.output, y.h_n, g.dinput, g.dh0};
  for (auto& [k, v] : g.state_dict(gru.config())) out.push_back(v);
  return out;
}

GruOutput infer_once(const Gru& gru, const Tensor& x, const Tensor& h0, const Tensor& lengths,
                     int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  GruOutput y = gru.forward(x, h0, lengths);
  omp_set_num_threads(before);
  return y;
}

GruConfig config_for(const InvCase& k) {
  GruConfig c;
  c.input_size = 7;
  c.hidden_size = k.H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.form = k.form;
  return c;
}

class Invariance : public ::testing::TestWithParam<InvCase> {};

TEST_P(Invariance, ThreadCountDoesNotChangeAnyBit) {
  const InvCase& k = GetParam();
  const GruConfig c = config_for(k);
  Gru gru(c, k.dtype, 3);
  std::mt19937_64 rng(8);
  const int64_t T = 6, N = 5, LD = k.layers * c.directions();
  Tensor x = test::random_tensor({T, N, 7}, k.dtype, rng);
  Tensor h0 = test::random_tensor({LD, N, k.H}, k.dtype, rng);
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, {2, 6, 1, 5, 6}) : Tensor();
  Tensor dy = test::random_tensor({T, N, c.directions() * k.H}, k.dtype, rng);
  const auto one = train_once(gru, x, h0, lengths, dy, 1);
  const auto two = train_once(gru, x, h0, lengths, dy, 2);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(test::all_close(k.name, "result " + std::to_string(i), two[i], one[i], {0, 0}));
}

TEST_P(Invariance, BatchMatesDoNotChangeASequence) {
  const InvCase& k = GetParam();
  const GruConfig c = config_for(k);
  Gru gru(c, k.dtype, 4);
  std::mt19937_64 rng(9);
  const int64_t T = 6, N = 5;
  Tensor x = test::random_tensor({T, N, 7}, k.dtype, rng);
  const std::vector<int64_t> len{2, 6, 1, 5, 6};
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, len) : Tensor();
  GruOutput all = gru.forward(x, {}, lengths);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t Tn = k.lengths ? len[n] : T;
    Tensor alone = gru.forward(x.slice(0, 0, Tn).slice(1, n, n + 1).contiguous()).output;
    EXPECT_TRUE(test::all_close(k.name, "sequence " + std::to_string(n), alone,
                                all.output.slice(0, 0, Tn).slice(1, n, n + 1), {0, 0}));
  }
}

// Data parallelism: a batch cut in parts, each run with its BatchShare, drops what the whole
// batch drops, so every output and gradient of a part equals the whole batch's, bit for bit.
TEST_P(Invariance, PartsOfABatchDrawTheWholeBatchsDropout) {
  const InvCase& k = GetParam();
  GruConfig c = config_for(k);
  c.num_layers = 2;
  c.dropout = 0.4;
  Gru gru(c, k.dtype, 5);
  std::mt19937_64 rng(10);
  const int64_t T = 6, N = 5, D = c.directions();
  Tensor x = test::random_tensor({T, N, 7}, k.dtype, rng);
  Tensor dy = test::random_tensor({T, N, D * k.H}, k.dtype, rng);
  GruTape tape;
  const GruOutput all = gru.forward_train(x, {}, {}, tape, 77);
  const GruGrads g_all = gru.backward(tape, dy, {});
  for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {4, 1}}) {
    const std::string part =
        std::string(k.name) + " streams " + std::to_string(first) + "+" + std::to_string(count);
    GruTape t;
    const Tensor xp = x.slice(1, first, first + count).contiguous();
    const GruOutput y = gru.forward_train(xp, {}, {}, t, 77, Precision::f32, {first, N});
    EXPECT_TRUE(test::all_close(part, "output", y.output, all.output.slice(1, first, first + count),
                                {0, 0}));
    const GruGrads g = gru.backward(t, dy.slice(1, first, first + count).contiguous(), {});
    EXPECT_TRUE(test::all_close(part, "dinput", g.dinput,
                                g_all.dinput.slice(1, first, first + count), {0, 0}));
  }
  // Without its share, a part draws other masks.
  GruTape t;
  const GruOutput y = gru.forward_train(x.slice(1, 2, 5).contiguous(), {}, {}, t, 77);
  EXPECT_FALSE(test::all_close(k.name, "output", y.output, all.output.slice(1, 2, 5), {0, 0}));
  EXPECT_THROW(
      gru.forward_train(x.slice(1, 2, 5).contiguous(), {}, {}, t, 77, Precision::f32, {3, 5}),
      Error);
}

constexpr auto LBR = GruForm::linear_before_reset;
constexpr auto RB = GruForm::reset_before;
// clang-format off
const InvCase kInvCases[] = {
    {"lbr_f32_H33",              LBR, DType::f32, 33, 1, false, false},
    {"rb_f32_H33",               RB,  DType::f32, 33, 1, false, false},
    {"lbr_f64_H17_l2_bidir_len", LBR, DType::f64, 17, 2, true,  true},
    {"rb_f64_H17_l2_bidir_len",  RB,  DType::f64, 17, 2, true,  true},
    {"lbr_f32_H100_len",         LBR, DType::f32, 100, 1, false, true},
};
// clang-format on
// GruInference (weights packed once) returns Gru::forward's bits, call after call, in every
// layout: batched, batch_first, unbatched, with h0 and lengths; at 1 and 2 threads.
TEST_P(Invariance, PackedOnceEqualsForward) {
  const InvCase& k = GetParam();
  GruConfig c = config_for(k);
  const int64_t T = 6, N = 5, LD = k.layers * c.directions();
  std::mt19937_64 rng(10);
  Tensor x = test::random_tensor({T, N, 7}, k.dtype, rng);
  Tensor h0 = test::random_tensor({LD, N, k.H}, k.dtype, rng);
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, {2, 6, 1, 5, 6}) : Tensor();
  for (const bool batch_first : {false, true}) {
    c.batch_first = batch_first;
    Gru gru(c, k.dtype, 5);
    const GruInference inf(gru);
    const Tensor xb = batch_first ? x.transpose(0, 1).contiguous() : x;
    for (const int threads : {1, 2}) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      const std::string where = std::string(k.name) + (batch_first ? " batch_first" : "") +
                                " threads " + std::to_string(threads);
      for (int call = 0; call < 2; ++call) {
        const GruOutput want = gru.forward(xb, h0, lengths), got = inf.forward(xb, h0, lengths);
        EXPECT_TRUE(test::all_close(where, "output", got.output, want.output, {0, 0}));
        EXPECT_TRUE(test::all_close(where, "h_n", got.h_n, want.h_n, {0, 0}));
      }
      // Unbatched: (T, I) and (L*D, H).
      const GruOutput want = gru.forward(x.select(1, 1), h0.select(1, 1));
      const GruOutput got = inf.forward(x.select(1, 1), h0.select(1, 1));
      EXPECT_TRUE(test::all_close(where, "unbatched output", got.output, want.output, {0, 0}));
      EXPECT_TRUE(test::all_close(where, "unbatched h_n", got.h_n, want.h_n, {0, 0}));
      omp_set_num_threads(before);
    }
  }
}

// Inference on sequences of one length reads its input where it is and writes its states
// straight into the output (ops::DenseIo); the training forward keeps the packed copies. Both
// give the same bits: time-major input read in place (rows I apart, or 10 apart as a column
// slice of a wider tensor), batch-first input (copied once), lengths all T (the same layout
// as none), h0, two layers both ways, 1 and 2 threads.
TEST_P(Invariance, InPlaceInferenceEqualsTheTrainingForward) {
  const InvCase& k = GetParam();
  GruConfig c = config_for(k);
  c.num_layers = 2;
  c.bidirectional = true;
  // 17 sequences: two threads split them (8 and 9) where the weights fit in L2.
  const int64_t T = 6, N = 17, LD = 4;
  std::mt19937_64 rng(11);
  const Tensor wide = test::random_tensor({T, N, 10}, k.dtype, rng);
  const Tensor h0 = test::random_tensor({LD, N, k.H}, k.dtype, rng);
  const Tensor all_t = Tensor::from_vector<int64_t>({N}, std::vector<int64_t>(N, T));
  const Tensor slice = wide.slice(2, 2, 9), packed = slice.contiguous();
  for (const bool batch_first : {false, true}) {
    c.batch_first = batch_first;
    const Gru gru(c, k.dtype, 6);
    for (const int threads : {1, 2}) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      for (const Tensor* x : {&slice, &packed})
        for (const bool copied : {false, true})
          for (const bool lengths : {false, true}) {
            // Batch-first: a (N, T, I) view of the time-major rows (read in place), or its
            // contiguous copy (rows not evenly spaced in time: gathered).
            const Tensor xb = !batch_first ? *x
                              : copied     ? x->transpose(0, 1).contiguous()
                                           : x->transpose(0, 1);
            if (!batch_first && copied) continue;
            const Tensor len = lengths ? all_t : Tensor();
            GruTape tape;
            const GruOutput want = gru.forward_train(xb, h0, len, tape);
            const GruOutput got = gru.forward(xb, h0, len);
            const std::string where = std::string(k.name) + (batch_first ? " batch_first" : "") +
                                      (x == &slice ? " slice" : " contiguous") +
                                      (copied ? " copied" : "") + (lengths ? " lengths" : "") +
                                      " threads " + std::to_string(threads);
            EXPECT_TRUE(test::all_close(where, "output", got.output, want.output, {0, 0}));
            EXPECT_TRUE(test::all_close(where, "h_n", got.h_n, want.h_n, {0, 0}));
          }
      omp_set_num_threads(before);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bits, Invariance, ::testing::ValuesIn(kInvCases),
                         [](const auto& info) { return std::string(info.param.name); });

// GruInference keeps the weights it packed: a later change to the Gru's weights is not seen
// (as documented), and a new GruInference sees it. Bad input gets Gru::forward's errors.
TEST(PackedOnce, KeepsItsWeightsAndChecksInputs) {
  GruConfig c;
  c.input_size = 5;
  c.hidden_size = 40;
  Gru gru(c, DType::f32, 2);
  std::mt19937_64 rng(4);
  Tensor x = test::random_tensor({7, 3, 5}, DType::f32, rng);
  const GruInference before(gru);
  const Tensor old = gru.forward(x).output;
  std::vector<GruLayerWeights> w = gru.weights();
  w[0].w_hh = Tensor::full(w[0].w_hh.shape(), 0.25, DType::f32);
  gru.set_weights(w);
  const Tensor changed = gru.forward(x).output;
  ASSERT_FALSE(test::all_close("packed once", "changed", changed, old, {0, 0}));
  EXPECT_TRUE(test::all_close("packed once", "kept", before.forward(x).output, old, {0, 0}));
  EXPECT_TRUE(
      test::all_close("packed once", "new", GruInference(gru).forward(x).output, changed, {0, 0}));
  // It does not need the Gru any more.
  std::optional<Gru> temporary(gru);
  const GruInference orphan(*temporary);
  temporary.reset();
  EXPECT_TRUE(test::all_close("packed once", "orphan", orphan.forward(x).output, changed, {0, 0}));
  for (const Tensor& bad : {test::random_tensor({7, 3, 6}, DType::f32, rng),
                            test::random_tensor({7, 3, 5}, DType::f64, rng)}) {
    std::string want, got;
    try {
      gru.forward(bad);
    } catch (const Error& e) {
      want = e.what();
    }
    try {
      before.forward(bad);
    } catch (const Error& e) {
      got = e.what();
    }
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(got, want);
  }
}

// Optimized against reference kernels, forward and every gradient, at the shapes where the
// optimized code paths change: batch 1 and 2 (several panels per micro-kernel call), unit
// block tails, K above the L1 chunk (H = 300: the recurrent K and the backward's 3H), thread
// splits (1 and 2 threads), and the input projection in chunks of steps (batch 64).
struct PathCase {
  const char* name;
  GruForm form;
  DType dtype;
  int64_t N, I, H;
  bool bidir, lengths;
};

class KernelPaths : public ::testing::TestWithParam<std::tuple<PathCase, int>> {};

TEST_P(KernelPaths, OptimizedMatchesReference) {
  const PathCase& k = std::get<0>(GetParam());
  const int threads = std::get<1>(GetParam());
  GruConfig c;
  c.input_size = k.I;
  c.hidden_size = k.H;
  c.bidirectional = k.bidir;
  c.form = k.form;
  Gru gru(c, k.dtype, 5);
  std::mt19937_64 rng(6);
  const int64_t T = 5, D = c.directions();
  Tensor x = test::random_tensor({T, k.N, k.I}, k.dtype, rng);
  Tensor h0 = test::random_tensor({D, k.N, k.H}, k.dtype, rng);
  std::vector<int64_t> len(k.N);
  for (int64_t n = 0; n < k.N; ++n) len[n] = 1 + (n * 3) % T;
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({k.N}, len) : Tensor();
  Tensor dy = test::random_tensor({T, k.N, D * k.H}, k.dtype, rng);
  const auto opt = train_once(gru, x, h0, lengths, dy, threads);
  {
    // Inference (its input projection in chunks of steps) gives the training forward's bits.
    const GruOutput inf = infer_once(gru, x, h0, lengths, threads);
    const std::string where = std::string(k.name) + " inference threads " + std::to_string(threads);
    EXPECT_TRUE(test::all_close(where, "output", inf.output, opt[0], {0, 0}));
    EXPECT_TRUE(test::all_close(where, "h_n", inf.h_n, opt[1], {0, 0}));
  }
  set_reference_kernels(true);
  const auto ref = train_once(gru, x, h0, lengths, dy, threads);
  set_reference_kernels(false);
  const test::Tol tol = k.dtype == DType::f32 ? test::Tol{1e-5, 1e-4} : test::Tol{1e-10, 1e-10};
  for (size_t i = 0; i < opt.size(); ++i)
    EXPECT_TRUE(test::all_close(std::string(k.name) + " threads " + std::to_string(threads),
                                "result " + std::to_string(i), opt[i], ref[i], tol));
}

// clang-format off
const PathCase kPathCases[] = {
    {"batch1_lbr_f32_H80",       LBR, DType::f32, 1,  9,  80,  false, false},
    {"batch1_rb_f32_H80",        RB,  DType::f32, 1,  9,  80,  false, false},
    {"batch2_lbr_f64_H41_bidir", LBR, DType::f64, 2,  3,  41,  true,  false},
    {"batch7_rb_f32_H33",        RB,  DType::f32, 7,  20, 33,  false, true},
    {"batch13_lbr_f32_H300_len", LBR, DType::f32, 13, 5,  300, true,  true},
    {"batch13_rb_f64_H300_len",  RB,  DType::f64, 13, 5,  300, false, true},
    // A step's rows of g (64 x 600 floats, 154 KB) fill much of a quarter of the L2: the
    // input projection runs in chunks of one to three steps, the lengths ending mid-chunk.
    {"batch64_lbr_f32_H200_len", LBR, DType::f32, 64, 5,  200, false, true},
    // The same in both directions, one length: inference reads the input in place, the
    // reverse direction a step at a time.
    {"batch64_rb_f32_H200_bidir", RB, DType::f32, 64, 5,  200, true,  false},
};
// clang-format on
INSTANTIATE_TEST_SUITE_P(Shapes, KernelPaths,
                         ::testing::Combine(::testing::ValuesIn(kPathCases),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_t" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The optimized f32 gate kernel's sigmoid and tanh (its own exp and tanh, cpu/gru_gates.cpp)
// against f64 over the whole range, saturation included: r = sigmoid(x), z = sigmoid(-x),
// n = tanh(x / 10) with gh = 0, no bias, h_prev = 0. Within 2.5 ulp of the f64 value (or
// 1e-37 absolute, where the exact value is below f32's normal range); measured 2.0 and 1.23.
// (Highway's Exp and Tanh, used before, gave 2.0 and 2.49.)
TEST(GateKernel, SigmoidAndTanhF32WithinAFewUlpOfF64) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> xs = {nan,   0.0,  1e-30, -1e-30, 1e-6,  -1e-6, 86.9,   -86.9, 87.0,
                            -87.0, 88.0, -88.0, 89.0,   -89.0, 104.0, -104.0, 1e4,   -1e4};
  for (int i = 0; i <= 200000; ++i) xs.push_back(-100.0 + 200.0 * i / 200000);
  const int64_t H = static_cast<int64_t>(xs.size());
  std::vector<float> g(3 * H), gh(3 * H, 0.0f), hp(H, 0.0f), h(H), hn(H);
  for (int64_t j = 0; j < H; ++j) {
    g[cpu::gate_col3<float>(H, 0, j)] = static_cast<float>(xs[j]);
    g[cpu::gate_col3<float>(H, 1, j)] = static_cast<float>(-xs[j]);
    g[cpu::gate_col3<float>(H, 2, j)] = static_cast<float>(xs[j] / 10);
  }
  const int64_t blocks = (H + cpu::kUnit<float> - 1) / cpu::kUnit<float>;
  cpu::gru_gates_lbr_forward<float>(1, H, 0, blocks, g.data(), gh.data(), nullptr, hp.data(),
                                    h.data(), hn.data(), H);
  auto ulps = [](float got, double want) {
    const double ulp = std::max(std::abs(double(std::nextafter(float(want), 2.0f)) - float(want)),
                                double(std::numeric_limits<float>::denorm_min()));
    return std::abs(got - want) <= 1e-37 ? 0.0 : std::abs(got - want) / ulp;
  };
  double worst_sigmoid = 0, worst_tanh = 0;
  // NaN in, NaN out (as PyTorch), not a clamp bound's value.
  EXPECT_TRUE(std::isnan(g[cpu::gate_col3<float>(H, 0, 0)]) &&
              std::isnan(g[cpu::gate_col3<float>(H, 1, 0)]) &&
              std::isnan(g[cpu::gate_col3<float>(H, 2, 0)]))
      << "sigmoid / tanh of NaN: " << g[cpu::gate_col3<float>(H, 0, 0)] << " "
      << g[cpu::gate_col3<float>(H, 1, 0)] << " " << g[cpu::gate_col3<float>(H, 2, 0)];
  for (int64_t j = 1; j < H; ++j) {
    const float x = static_cast<float>(xs[j]), xn = static_cast<float>(xs[j] / 10);
    const float r = g[cpu::gate_col3<float>(H, 0, j)], z = g[cpu::gate_col3<float>(H, 1, j)];
    const float n = g[cpu::gate_col3<float>(H, 2, j)];
    worst_sigmoid = std::max({worst_sigmoid, ulps(r, 1 / (1 + std::exp(-double(x)))),
                              ulps(z, 1 / (1 + std::exp(double(x))))});
    worst_tanh = std::max(worst_tanh, ulps(n, std::tanh(double(xn))));
    ASSERT_TRUE(std::isfinite(r) && std::isfinite(z) && std::isfinite(n)) << "x = " << x;
  }
  EXPECT_LE(worst_sigmoid, 2.5);
  EXPECT_LE(worst_tanh, 2.5);
  std::printf("worst error: sigmoid %.2f ulp, tanh %.2f ulp\n", worst_sigmoid, worst_tanh);
}

// Callers may run grux inside their own parallel region (nested: grux gets a team of one)
// and from several threads at once on one const Gru: same bits, no deadlock.
TEST(Threads, CallsFromInsideACallersParallelRegion) {
  GruConfig c;
  c.input_size = 5;
  c.hidden_size = 40;  // three unit blocks: grux would use a team of two
  Gru gru(c, DType::f32, 2);
  std::mt19937_64 rng(3);
  Tensor x = test::random_tensor({7, 3, 5}, DType::f32, rng);
  const Tensor serial = gru.forward(x).output;
  std::vector<Tensor> got(4);
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 4; ++i) got[i] = gru.forward(x).output;
  for (const Tensor& g : got) EXPECT_TRUE(test::all_close("nested", "output", g, serial, {0, 0}));
  // The same for one GruInference shared by the threads.
  const GruInference inf(gru);
#pragma omp parallel for num_threads(2)
  for (int i = 0; i < 4; ++i) got[i] = inf.forward(x).output;
  for (const Tensor& g : got)
    EXPECT_TRUE(test::all_close("nested", "packed once", g, serial, {0, 0}));
}

}  // namespace
}  // namespace grux::test_gru_invariance
