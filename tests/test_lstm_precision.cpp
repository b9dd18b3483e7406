// The LSTM in bf16 and int8 (LstmInference and LstmStream with a precision), as the GRU's are
// tested: the optimized kernels against their reference twins on the same converted weights at
// the shapes where the paths start (odd H, H around a unit, I of 1, batch 1, layers, both
// directions, a projection, variable lengths, h0 and c0); the error against f32 within the
// GRU's bounds; the same bits on 1 or 2 threads, alone or in a batch, and from a stream of
// any split and thread count; and the errors for what cannot run. Also f32 streams on a team
// of threads (threads > 1), bit-identical to Lstm::forward.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "grux/lstm.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_lstm_precision {
namespace {

struct Case {
  int64_t I, H, P, N, T, layers;
  bool bidir, lengths;
};

std::string name_of(const Case& k, Precision p) {
  return std::string(precision_name(p)) + " I" + std::to_string(k.I) + " H" + std::to_string(k.H) +
         " P" + std::to_string(k.P) + " N" + std::to_string(k.N) + " T" + std::to_string(k.T) +
         " L" + std::to_string(k.layers) + (k.bidir ? " bidir" : "") +
         (k.lengths ? " lengths" : "");
}

const Case kCases[] = {
    {1, 8, 0, 1, 30, 1, false, false},   {3, 16, 0, 1, 20, 2, false, false},
    {5, 17, 0, 3, 12, 2, false, false},  {64, 37, 0, 4, 10, 1, true, true},
    {33, 48, 20, 2, 9, 2, true, false},  {128, 100, 0, 1, 25, 1, false, false},
    {20, 130, 31, 5, 7, 1, false, true},
};

struct CaseData {
  Lstm lstm;
  Tensor x, h0, c0, lengths;
};
CaseData make_case(const Case& k, std::mt19937_64& rng) {
  LstmConfig c;
  c.input_size = k.I, c.hidden_size = k.H, c.proj_size = k.P, c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  Lstm lstm(c, DType::f32, 5);
  const int64_t LD = k.layers * c.directions();
  Tensor x = test::random_tensor({k.T, k.N, k.I}, DType::f32, rng);
  Tensor h0 = test::random_tensor({LD, k.N, c.output_size()}, DType::f32, rng);
  Tensor c0 = test::random_tensor({LD, k.N, k.H}, DType::f32, rng);
  std::vector<int64_t> len(k.N);
  for (int64_t n = 0; n < k.N; ++n) len[n] = k.lengths ? 1 + (n * 5) % k.T : k.T;
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({k.N}, len) : Tensor();
  return {std::move(lstm), x, h0, c0, lengths};
}

// Optimized against the reference twins on the same converted weights (accumulation order
// apart), and against f32 within the GRU's bounds (docs/precision.md), not equal to it.
TEST(LstmPrecision, MatchesTheReferenceTwinsAndStaysNearF32) {
  for (Precision prec : {Precision::bf16, Precision::int8})
    for (const Case& k : kCases) {
      std::mt19937_64 rng(6);
      const CaseData d = make_case(k, rng);
      const std::string what = name_of(k, prec);
      const LstmInference inf(d.lstm, prec);
      EXPECT_EQ(inf.precision(), prec);
      const LstmOutput y = inf.forward(d.x, d.h0, d.c0, d.lengths);
      set_reference_kernels(true);
      const LstmOutput r = LstmInference(d.lstm, prec).forward(d.x, d.h0, d.c0, d.lengths);
      set_reference_kernels(false);
      const double tol = prec == Precision::bf16 ? 1e-2 : 3e-2;
      EXPECT_LE(max_abs_diff(y.output, r.output), tol) << what;
      EXPECT_LE(max_abs_diff(y.h_n, r.h_n), tol) << what;
      EXPECT_LE(max_abs_diff(y.c_n, r.c_n), 2 * tol) << what;

      const LstmOutput f = d.lstm.forward(d.x, d.h0, d.c0, d.lengths);
      const double err = max_abs_diff(y.output, f.output);
      EXPECT_LE(err, prec == Precision::bf16 ? 2e-2 : 5e-2) << what;
      EXPECT_GT(err, 1e-6) << what;
      EXPECT_LE(max_abs_diff(y.c_n, f.c_n), prec == Precision::bf16 ? 4e-2 : 1e-1) << what;
      // f32 through LstmInference: Lstm::forward's bits.
      EXPECT_EQ(
          max_abs_diff(LstmInference(d.lstm).forward(d.x, d.h0, d.c0, d.lengths).output, f.output),
          0.0)
          << what;
    }
}

TEST(LstmPrecision, SameBitsOnAnyThreadCountAndAloneOrInABatch) {
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    LstmConfig c;
    c.input_size = 24, c.hidden_size = 50, c.num_layers = 2;  // unit blocks two threads split
    const Lstm lstm(c, DType::f32, 7);
    const LstmInference inf(lstm, prec);
    std::mt19937_64 rng(8);
    const int64_t T = 15, N = 5;
    const Tensor x = test::random_tensor({T, N, 24}, DType::f32, rng);
    const Tensor one = inf.forward(x, {}, {}, {}, 1).output;
    const Tensor two = inf.forward(x, {}, {}, {}, 2).output;
    EXPECT_EQ(max_abs_diff(one, two), 0.0) << precision_name(prec);
    for (int64_t n : {0, 3}) {
      const Tensor alone = inf.forward(x.slice(1, n, n + 1).contiguous()).output;
      EXPECT_EQ(max_abs_diff(alone, one.slice(1, n, n + 1).contiguous()), 0.0)
          << precision_name(prec) << " sequence " << n;
    }
  }
}

// A stream gives LstmInference's bits (Lstm::forward's in f32 off the real-time kernel), frame
// by frame or in blocks, on the calling thread or a team of two.
TEST(LstmPrecision, StreamEqualsInferenceOnAnyThreadCount) {
  for (Precision prec : {Precision::f32, Precision::bf16, Precision::int8})
    for (int64_t batch : {0, 1, 3})
      for (int threads : {1, 2}) {
        if (prec == Precision::f32 && batch <= 1 && threads == 1) continue;  // real-time kernel
        LstmConfig c;
        c.input_size = 6, c.hidden_size = 40, c.num_layers = 2;
        const Lstm lstm(c, DType::f32, 9);
        std::mt19937_64 rng(10);
        const int64_t T = 20, N = batch == 0 ? 1 : batch;
        const Tensor x = test::random_tensor({T, N, 6}, DType::f32, rng);
        const Tensor want = LstmInference(lstm, prec).forward(x).output;
        LstmStream stream(lstm, N, {}, {}, prec, threads);
        Tensor got = Tensor::empty({T, N, 40}, DType::f32);
        for (int64_t t = 0; t < 7; ++t)
          stream.process(x.data<float>() + t * N * 6, got.data<float>() + t * N * 40, 1);
        stream.process(x.data<float>() + 7 * N * 6, got.data<float>() + 7 * N * 40, T - 7);
        EXPECT_EQ(max_abs_diff(got, want), 0.0)
            << precision_name(prec) << " batch " << batch << " threads " << threads;
      }
}

// bf16 training (Lstm::forward_train with Precision::bf16, then backward): outputs and every
// gradient against the reference twins (the same bf16 roundings, sums in double) and near f32
// training, relative to each tensor's largest value, as the GRU's; the same bits on 1 and 2
// threads. Every case: projections, directions, lengths, h0 and c0, dropout off.
TEST(LstmPrecision, Bf16TrainingMatchesTheTwinsAndStaysNearF32) {
  for (const Case& k : kCases) {
    std::mt19937_64 rng(16);
    const CaseData d = make_case(k, rng);
    const LstmConfig& c = d.lstm.config();
    const Tensor dy =
        test::random_tensor({k.T, k.N, c.directions() * c.output_size()}, DType::f32, rng);
    const Tensor dcn = test::random_tensor(d.c0.shape(), DType::f32, rng);
    const std::string what = name_of(k, Precision::bf16) + " training";
    // Output, h_n, c_n, dinput, dh0, dc0, then the weight gradients by key.
    auto train = [&](Precision p, int threads) {
      LstmTape tape;
      const LstmOutput y =
          d.lstm.forward_train(d.x, d.h0, d.c0, d.lengths, tape, 0, p, {}, threads);
      const LstmGrads g = d.lstm.backward(tape, dy, {}, dcn, threads);
      test::NamedTensors out{{"output", y.output}, {"h_n", y.h_n}, {"c_n", y.c_n},
                             {"dinput", g.dinput}, {"dh0", g.dh0}, {"dc0", g.dc0}};
      for (const auto& [key, t] : g.state_dict(c)) out.push_back({key, t});
      return out;
    };
    test::expect_bf16_training_near_f32(what, train);
  }
}

TEST(LstmPrecision, TrainingTakesF32OrBf16) {
  LstmConfig c;
  c.input_size = 3, c.hidden_size = 4;
  const Tensor x = Tensor::zeros({2, 1, 3}, DType::f32);
  LstmTape tape;
  EXPECT_THAT(
      [&] { Lstm(c, DType::f32, 1).forward_train(x, {}, {}, {}, tape, 0, Precision::int8); },
      testing::ThrowsMessage<Error>(testing::StrEq(
          "lstm forward_train: precision int8 is for inference; train in f32 or bf16")));
  EXPECT_THAT(
      [&] {
        Lstm(c, DType::f64, 1)
            .forward_train(x.to(DType::f64), {}, {}, {}, tape, 0, Precision::bf16);
      },
      testing::ThrowsMessage<Error>(
          testing::StrEq("lstm forward_train: precision bf16 takes an f32 LSTM; this one is f64")));
}

TEST(LstmPrecision, AnF64LstmIsRefused) {
  LstmConfig c;
  c.input_size = 3, c.hidden_size = 4;
  const Lstm lstm(c, DType::f64, 1);
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    const std::string p = precision_name(prec);
    EXPECT_THAT([&] { LstmInference inf(lstm, prec); },
                testing::ThrowsMessage<Error>(testing::StrEq(
                    "lstm inference: precision " + p + " takes an f32 LSTM; this one is f64")));
    EXPECT_THAT([&] { LstmStream s(lstm, 1, {}, {}, prec); },
                testing::ThrowsMessage<Error>(testing::StrEq(
                    "lstm stream: precision " + p + " takes an f32 LSTM; this one is f64")));
  }
}

}  // namespace
}  // namespace grux::test_lstm_precision
