// The GRU in bf16 and int8 (GruInference and GruStream with a precision): the optimized
// kernels against their reference twins on the same converted weights, at the shapes where
// the paths start (odd H, H around a unit, I of 1, batch 1, two layers, both directions, both
// candidate forms, variable lengths, h0); the error against f32 within the precision's scale;
// the determinism promises (the same bits on 1 or 2 threads, a sequence alone or in a batch,
// a stream frame by frame); and the errors for what cannot run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "grux/gru.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_gru_precision {
namespace {

struct Case {
  int64_t I, H, N, T, layers;
  bool bidir, rb, lengths;
};

std::string name_of(const Case& k, Precision p) {
  return std::string(precision_name(p)) + " I" + std::to_string(k.I) + " H" + std::to_string(k.H) +
         " N" + std::to_string(k.N) + " T" + std::to_string(k.T) + " L" + std::to_string(k.layers) +
         (k.bidir ? " bidir" : "") + (k.rb ? " reset_before" : "") + (k.lengths ? " lengths" : "");
}

const Case kCases[] = {
    {1, 8, 1, 30, 1, false, false, false},  {3, 16, 1, 20, 1, false, true, false},
    {5, 17, 3, 12, 2, false, false, false}, {64, 37, 4, 10, 1, true, false, true},
    {33, 48, 2, 9, 2, true, true, false},   {128, 100, 1, 25, 1, false, false, false},
    {20, 130, 5, 7, 1, false, true, true},
};

// A case's GRU (weights from seed 5) and inputs: x, then h0, drawn from rng; the lengths
// when the case has them.
struct CaseData {
  GruConfig c;
  Gru gru;
  Tensor x, h0, lengths;
};
CaseData make_case(const Case& k, std::mt19937_64& rng) {
  GruConfig c;
  c.input_size = k.I;
  c.hidden_size = k.H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.form = k.rb ? GruForm::reset_before : GruForm::linear_before_reset;
  Gru gru(c, DType::f32, 5);
  Tensor x = test::random_tensor({k.T, k.N, k.I}, DType::f32, rng);
  Tensor h0 = test::random_tensor({k.layers * c.directions(), k.N, k.H}, DType::f32, rng);
  std::vector<int64_t> len(k.N);
  for (int64_t n = 0; n < k.N; ++n) len[n] = k.lengths ? 1 + (n * 5) % k.T : k.T;
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({k.N}, len) : Tensor();
  return {c, std::move(gru), x, h0, lengths};
}

// Optimized against the reference twins: the same converted weights, so the two differ by
// accumulation order only, plus the occasional neighbouring bf16 / int8 value where a state
// differing in its last bit rounds the other way at the next step.
TEST(GruPrecision, MatchesTheReferenceTwinsAndStaysNearF32) {
  for (Precision prec : {Precision::bf16, Precision::int8})
    for (const Case& k : kCases) {
      std::mt19937_64 rng(6);
      const CaseData d = make_case(k, rng);
      const Gru& gru = d.gru;
      const Tensor &x = d.x, &h0 = d.h0, &lengths = d.lengths;
      const std::string what = name_of(k, prec);

      const GruInference inf(gru, prec);
      EXPECT_EQ(inf.precision(), prec);
      const GruOutput y = inf.forward(x, h0, lengths);
      set_reference_kernels(true);
      const GruOutput r = GruInference(gru, prec).forward(x, h0, lengths);
      set_reference_kernels(false);
      const double tol = prec == Precision::bf16 ? 1e-2 : 3e-2;
      EXPECT_LE(max_abs_diff(y.output, r.output), tol) << what;
      EXPECT_LE(max_abs_diff(y.h_n, r.h_n), tol) << what;

      // Against f32: within the precision's scale, and not equal (it did run in low precision).
      const GruOutput f = gru.forward(x, h0, lengths);
      const double err = max_abs_diff(y.output, f.output);
      EXPECT_LE(err, prec == Precision::bf16 ? 2e-2 : 5e-2) << what;
      EXPECT_GT(err, 1e-6) << what;
    }
}

TEST(GruPrecision, SameBitsOnAnyThreadCountAndAloneOrInABatch) {
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    GruConfig c;
    c.input_size = 24;
    c.hidden_size = 50;  // four unit blocks: two threads split them
    c.num_layers = 2;
    const Gru gru(c, DType::f32, 7);
    const GruInference inf(gru, prec);
    std::mt19937_64 rng(8);
    const int64_t T = 15, N = 5;
    const Tensor x = test::random_tensor({T, N, 24}, DType::f32, rng);
    const Tensor one = inf.forward(x, {}, {}, 1).output, two = inf.forward(x, {}, {}, 2).output;
    EXPECT_EQ(max_abs_diff(one, two), 0.0) << precision_name(prec);
    for (int64_t n : {0, 3}) {
      const Tensor alone = inf.forward(x.slice(1, n, n + 1).contiguous()).output;
      EXPECT_EQ(max_abs_diff(alone, one.slice(1, n, n + 1).contiguous()), 0.0)
          << precision_name(prec) << " sequence " << n;
    }
  }
}

// A stream of the same precision gives GruInference's bits, frame by frame or in blocks.
TEST(GruPrecision, StreamEqualsInference) {
  for (Precision prec : {Precision::bf16, Precision::int8})
    for (int64_t batch : {0, 1, 3})
      for (int threads : {1, 2}) {
        GruConfig c;
        c.input_size = 6;
        c.hidden_size = 40;
        c.num_layers = 2;
        const Gru gru(c, DType::f32, 9);
        std::mt19937_64 rng(10);
        const int64_t T = 20, N = batch == 0 ? 1 : batch;
        const Tensor x = test::random_tensor({T, N, 6}, DType::f32, rng);
        const Tensor want = GruInference(gru, prec).forward(x).output;
        GruStream stream(gru, N, {}, prec, threads);
        Tensor got = Tensor::empty({T, N, 40}, DType::f32);
        for (int64_t t = 0; t < 7; ++t)
          stream.process(x.data<float>() + t * N * 6, got.data<float>() + t * N * 40, 1);
        stream.process(x.data<float>() + 7 * N * 6, got.data<float>() + 7 * N * 40, T - 7);
        EXPECT_EQ(max_abs_diff(got, want), 0.0)
            << precision_name(prec) << " batch " << batch << " threads " << threads;
      }
}

// bf16 training (Gru::forward_train with Precision::bf16, then backward): outputs and every
// gradient against the reference twins (the same bf16 roundings, sums in double) and near
// f32 training, relative to each tensor's largest value; the same bits on 1 and 2 threads.
TEST(GruPrecision, Bf16TrainingMatchesTheTwinsAndStaysNearF32) {
  for (const Case& k : kCases) {
    std::mt19937_64 rng(16);
    const CaseData d = make_case(k, rng);
    const GruConfig& c = d.c;
    const Gru& gru = d.gru;
    const Tensor &x = d.x, &h0 = d.h0, &lengths = d.lengths;
    const Tensor dy = test::random_tensor({k.T, k.N, c.directions() * k.H}, DType::f32, rng);
    const std::string what = name_of(k, Precision::bf16) + " training";
    // Output, h_n, dinput, dh0, then the weight gradients by key.
    auto train = [&](Precision p, int threads) {
      GruTape tape;
      const GruOutput y = gru.forward_train(x, h0, lengths, tape, 0, p, {}, threads);
      const GruGrads g = gru.backward(tape, dy, {}, threads);
      test::NamedTensors out{
          {"output", y.output}, {"h_n", y.h_n}, {"dinput", g.dinput}, {"dh0", g.dh0}};
      for (const auto& [key, t] : g.state_dict(c)) out.push_back({key, t});
      return out;
    };
    test::expect_bf16_training_near_f32(what, train);
  }
}

TEST(GruPrecision, TrainingTakesF32OrBf16) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  const Tensor x = Tensor::zeros({2, 1, 3}, DType::f32);
  GruTape tape;
  try {
    Gru(c, DType::f32, 1).forward_train(x, {}, {}, tape, 0, Precision::int8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "gru forward_train: precision int8 is for inference; train in f32 or bf16");
  }
  try {
    Gru(c, DType::f64, 1).forward_train(x.to(DType::f64), {}, {}, tape, 0, Precision::bf16);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "gru forward_train: precision bf16 takes an f32 GRU; this one is f64");
  }
}

// With the portable kernels switched off, a precision this CPU (or SIMD target) cannot run
// on its instructions is refused in one line; where it can, nothing changes.
TEST(GruPrecision, PortableKernelsCanBeSwitchedOff) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  const Gru gru(c, DType::f32, 1);
  const std::string saved = simd_target();
  const std::string below = test::target_below_avx512();
  GRUX_SKIP_WITHOUT_TARGET_BELOW_AVX512(below);
  set_portable_precision(false);
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    const std::string p = precision_name(prec);
    if (precision_kernel(prec) != "portable") {
      EXPECT_NO_THROW(GruInference(gru, prec)) << p;
    }
    set_simd_target(below);
    try {
      GruInference inf(gru, prec);
      ADD_FAILURE() << p << ": no error on " << below;
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("precision " + p + " needs"));
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("GRUX_LOWP_PORTABLE=0"));
    }
    EXPECT_THROW(GruStream(gru, 1, {}, prec), Error) << p;
    set_simd_target(saved);
  }
  GruTape tape;
  set_simd_target(below);
  EXPECT_THROW(
      gru.forward_train(Tensor::zeros({2, 1, 3}, DType::f32), {}, {}, tape, 0, Precision::bf16),
      Error);
  set_portable_precision(true);
  EXPECT_NO_THROW(GruInference(gru, Precision::bf16));  // portable, allowed again
  set_simd_target(saved);
}

TEST(GruPrecision, AnF64GruIsRefused) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  const Gru gru(c, DType::f64, 1);
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    const std::string p = precision_name(prec);
    try {
      GruInference inf(gru, prec);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "gru inference: precision " + p + " takes an f32 GRU; this one is f64");
    }
    try {
      GruStream s(gru, 1, {}, prec);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "gru stream: precision " + p + " takes an f32 GRU; this one is f64");
    }
  }
}

}  // namespace
}  // namespace grux::test_gru_precision
