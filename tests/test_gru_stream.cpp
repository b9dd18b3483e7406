// Streaming (GruStream) against whole-sequence forward: frame by frame, in chunks, mixed
// chunk sizes, batched / unbatched / batch_first, layers, both forms, f32 and f64, with h0;
// plus GruCell against a one-step GRU, and the stream's error paths.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "cpu/lstm_stream.h"
#include "cpu/ref/gru_stream_ref.h"
#include "grux/gru.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_gru_stream {
namespace {

struct StreamCase {
  const char* name;
  GruForm form;
  int64_t layers, batch;  // batch 0: unbatched
  bool batch_first, h0;
  DType dtype;
  std::vector<int64_t> chunks;  // chunk lengths, summing to T
};

class Stream : public ::testing::TestWithParam<StreamCase> {};

TEST_P(Stream, EqualsWholeSequence) {
  const StreamCase& k = GetParam();
  int64_t T = 0;
  for (int64_t t : k.chunks) T += t;
  const int64_t I = 7, H = 19, N = k.batch == 0 ? 1 : k.batch;
  GruConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.num_layers = k.layers;
  c.batch_first = k.batch_first;
  c.form = k.form;
  Gru gru(c, k.dtype, 9);
  std::mt19937_64 rng(3);
  Tensor x_tm = test::random_tensor({T, N, I}, k.dtype, rng);  // time-major
  Tensor h0 = k.h0 ? test::random_tensor({k.layers, N, H}, k.dtype, rng) : Tensor();
  // Whole sequence, in the caller's layout.
  Tensor x = k.batch == 0    ? x_tm.select(1, 0)
             : k.batch_first ? x_tm.transpose(0, 1).contiguous()
                             : x_tm;
  Tensor h0c = h0.defined() && k.batch == 0 ? h0.select(1, 0) : h0;
  GruOutput whole = gru.forward(x, h0c);
  Tensor y_tm = k.batch == 0    ? whole.output.unsqueeze(1)
                : k.batch_first ? whole.output.transpose(0, 1)
                                : whole.output;

  // A stream of one sequence in f32 runs the real-time kernel (cpu/gru_stream.h): within f32
  // rounding of the whole-sequence engine, and bit-identical for any split into calls
  // (checked against a stream fed every frame in one call). Every other stream runs the
  // engine's kernels: bit-identical to the whole sequence.
  const bool realtime = k.dtype == DType::f32 && N == 1;
  const test::Tol tol = realtime ? test::tol_for(DType::f32) : test::Tol{0.0, 0.0};
  Tensor y_one_call;
  if (realtime) {
    GruStream all_at_once(gru, k.batch, h0c);
    y_one_call = all_at_once.step(k.batch == 0 ? x_tm.select(1, 0) : x_tm);
    if (k.batch != 0) y_one_call = y_one_call.select(1, 0);
  }
  GruStream stream(gru, k.batch, h0c);
  int64_t t0 = 0;
  for (int64_t len : k.chunks) {
    Tensor chunk = x_tm.slice(0, t0, t0 + len);  // (len, N, I)
    Tensor frames, expect = y_tm.slice(0, t0, t0 + len);
    if (len == 1) {  // a single frame, no time axis
      frames = k.batch == 0 ? chunk.select(0, 0).select(0, 0) : chunk.select(0, 0);
      expect = k.batch == 0 ? expect.select(0, 0).select(0, 0) : expect.select(0, 0);
    } else {
      frames = k.batch == 0 ? chunk.select(1, 0) : k.batch_first ? chunk.transpose(0, 1) : chunk;
      expect = k.batch == 0 ? expect.select(1, 0) : k.batch_first ? expect.transpose(0, 1) : expect;
    }
    Tensor got = stream.step(frames);
    // Bit-identical: the input projection's rounding does not depend on the chunk size.
    ASSERT_TRUE(test::all_close(std::string(k.name) + " chunk at t=" + std::to_string(t0), "output",
                                got, expect, tol));
    if (realtime) {
      const Tensor one_call = y_one_call.slice(0, t0, t0 + len).reshape(got.shape());
      ASSERT_EQ(max_abs_diff(got, one_call), 0.0) << k.name << " chunk at t=" << t0;
    }
    t0 += len;
  }
  Tensor state = stream.state();
  EXPECT_TRUE(test::all_close(k.name, "state", state, whole.h_n, tol));
}

constexpr auto LBR = GruForm::linear_before_reset;
constexpr auto RB = GruForm::reset_before;
const std::vector<int64_t> kFrames(12, 1);
// clang-format off
const StreamCase kStreamCases[] = {
    {"frames_f32", LBR, 1, 3, false, true, DType::f32, kFrames},
    {"frames_f64", LBR, 2, 3, false, true, DType::f64, kFrames},
    {"chunks_f32", LBR, 2, 4, false, false, DType::f32, {5, 1, 7, 2, 1}},
    {"chunks_rb_f64", RB, 3, 2, false, true, DType::f64, {3, 3, 1, 6}},
    {"chunks_rb_f32", RB, 1, 5, false, true, DType::f32, {1, 11}},
    {"batch_first_f32", LBR, 2, 3, true, true, DType::f32, {4, 1, 4}},
    {"unbatched_f32", LBR, 2, 0, false, true, DType::f32, {1, 1, 5, 3}},
    {"unbatched_rb_f64", RB, 1, 0, false, false, DType::f64, kFrames},
    {"batch1_long_f32", LBR, 1, 1, false, true, DType::f32, std::vector<int64_t>(300, 1)},
};
// clang-format on
INSTANTIATE_TEST_SUITE_P(All, Stream, ::testing::ValuesIn(kStreamCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(StreamApi, StepIntoReusesOutputAndResetRestarts) {
  GruConfig c;
  c.input_size = 4;
  c.hidden_size = 8;
  Gru gru(c, DType::f32, 1);
  std::mt19937_64 rng(1);
  Tensor x = test::random_tensor({6, 2, 4}, DType::f32, rng);
  GruStream s(gru, 2);
  Tensor out = Tensor::empty({2, 8}, DType::f32);
  for (int64_t t = 0; t < 6; ++t) s.step_into(x.select(0, t), out);
  const Tensor first = out.clone();
  s.reset();
  for (int64_t t = 0; t < 6; ++t) s.step_into(x.select(0, t), out);
  EXPECT_EQ(max_abs_diff(out, first), 0.0);
  Tensor wrong = Tensor::empty({3, 8}, DType::f32);
  EXPECT_THROW(s.step_into(x.select(0, 0), wrong), Error);
}

TEST(StreamApi, Errors) {
  GruConfig c;
  c.input_size = 4;
  c.hidden_size = 8;
  c.bidirectional = true;
  Gru bidir(c, DType::f32, 1);
  EXPECT_THROW(GruStream(bidir, 1), Error);
  c.bidirectional = false;
  Gru gru(c, DType::f32, 1);
  GruStream s(gru, 2);
  EXPECT_THROW(s.step(Tensor::zeros({2, 5}, DType::f32)), Error);                // wrong I
  EXPECT_THROW(s.step(Tensor::zeros({3, 4}, DType::f32)), Error);                // wrong N
  EXPECT_THROW(s.step(Tensor::zeros({2, 4}, DType::f64)), Error);                // wrong dtype
  EXPECT_THROW(s.step(Tensor::zeros({0, 2, 4}, DType::f32)), Error);             // empty chunk
  EXPECT_THROW(GruStream(gru, 2, Tensor::zeros({1, 3, 8}, DType::f32)), Error);  // h0 shape
  EXPECT_THROW(GruStream(gru, -1), Error);
  EXPECT_THROW(GruStream(gru, 1, {}, Precision::f32, -2), Error);  // threads
  float in[8] = {0}, out[16] = {0};
  EXPECT_THROW(s.process<float>(nullptr, out, 1), Error);
  EXPECT_THROW(s.process<float>(in, out, -1), Error);
  EXPECT_THROW(s.process<double>(nullptr, nullptr, 1), Error);  // dtype
  EXPECT_NO_THROW(s.process<float>(nullptr, nullptr, 0));
}

// The stream keeps its own copy of the weights and configuration: the Gru may go away (or
// move) after the stream is made. AddressSanitizer catches a dangling read. Also: process()
// on raw pointers gives step()'s bits, and the thread count does not change them.
TEST(StreamApi, OutlivesItsGruAndRawProcessMatchesStep) {
  GruConfig c;
  c.input_size = 5;
  c.hidden_size = 80;  // large enough for a thread team when threads allow
  c.num_layers = 2;
  std::mt19937_64 rng(7);
  const Tensor x = test::random_tensor({6, 3, 5}, DType::f32, rng);
  auto gru = std::make_unique<Gru>(c, DType::f32, 2);
  const Tensor expected = gru->forward(x).output;
  GruStream one(*gru, 3, {}, Precision::f32, 1), any(*gru, 3, {}, Precision::f32, 0);
  { Gru moved = std::move(*gru); }
  gru.reset();
  EXPECT_EQ(max_abs_diff(one.step(x), expected), 0.0);
  Tensor out = Tensor::zeros({6, 3, 80}, DType::f32);
  any.process<float>(x.data<float>(), out.data<float>(), 2);
  any.process<float>(x.data<float>() + 2 * 3 * 5, out.data<float>() + 2 * 3 * 80, 4);
  EXPECT_EQ(max_abs_diff(out, expected), 0.0);
}

// A head after the stream (GruStream::set_head): the GRU's outputs through nn.Linear (the
// public linear_forward), plus the frames with residual. Batches run linear_forward's own
// product (the same bits); one sequence runs dot products of the head's rows (within f32
// rounding of it, K = H terms), fused into the real-time kernel's steps where it runs. Every
// split of the frames into calls, step() in any layout and process() give the same bits.
TEST(StreamApi, HeadIsLinearAfterTheGruInEverySplit) {
  struct Case {
    int64_t N, I, H, O;
    bool bias, residual, weight;
    int threads;
  };
  for (const Case k : {Case{1, 4, 24, 3, true, false, true, 0},  // real-time kernel
                       Case{1, 5, 16, 5, false, true, true, 0},  // + skip
                       Case{1, 6, 6, 6, false, true, false, 0},  // skip only (O = H = I)
                       Case{3, 4, 24, 7, true, false, true, 0},  // batch: packed product
                       Case{3, 7, 20, 7, true, true, true, 2},   // batch, skip, two threads
                       Case{1, 6, 300, 6, true, true, true, 0},  // past the kernel's H: engine
                       Case{2, 5, 5, 5, false, true, false, 0}}) {
    SCOPED_TRACE(::testing::Message() << "N " << k.N << " I " << k.I << " H " << k.H << " O " << k.O
                                      << (k.residual ? " residual" : ""));
    GruConfig c;
    c.input_size = k.I;
    c.hidden_size = k.H;
    c.num_layers = 2;
    const Gru gru(c, DType::f32, 3);
    std::mt19937_64 rng(11);
    const int64_t T = 9;
    const Tensor x = test::random_tensor({T, k.N, k.I}, DType::f32, rng);
    GruStreamHead head;
    int64_t O = k.H;
    if (k.weight) {
      head.weight = test::random_tensor({k.O, k.H}, DType::f32, rng);
      O = k.O;
      if (k.bias) head.bias = test::random_tensor({k.O}, DType::f32, rng);
    }
    head.residual = k.residual;
    // The reference: the stream without a head, then linear_forward, then the skip.
    Tensor y = GruStream(gru, k.N).step(x).reshape({T * k.N, k.H});
    if (k.weight) y = linear_forward(y, head.weight, head.bias);
    Tensor want = y.reshape({T, k.N, O}).clone();
    if (k.residual)
      for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += x.data<float>()[i];

    GruStream s(gru, k.N, {}, Precision::f32, k.threads);
    s.set_head(head);
    EXPECT_EQ(s.output_size(), O);
    Tensor got = Tensor::zeros({T, k.N, O}, DType::f32);
    s.process<float>(x.data<float>(), got.data<float>(), 4);
    s.process<float>(x.data<float>() + 4 * k.N * k.I, got.data<float>() + 4 * k.N * O, T - 4);
    const double tol = k.N == 1 && k.weight ? 1e-5 : 0.0;
    EXPECT_LE(max_abs_diff(got, want), tol);
    // step() frame by frame and in one chunk, after reset(): process()'s bits.
    s.reset();
    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(max_abs_diff(s.step(x.select(0, t)), got.select(0, t)), 0.0) << "frame " << t;
    s.reset();
    EXPECT_EQ(max_abs_diff(s.step(x), got), 0.0);
    // Into a strided output (batch-major view of a transposed buffer).
    s.reset();
    Tensor strided = Tensor::zeros({k.N, T, O}, DType::f32);
    Tensor view = strided.transpose(0, 1);
    s.step_into(x, view);
    EXPECT_EQ(max_abs_diff(view, got), 0.0);
  }
}

TEST(StreamApi, HeadErrors) {
  GruConfig c;
  c.input_size = 4;
  c.hidden_size = 8;
  const Gru gru(c, DType::f32, 1);
  GruStream s(gru, 1);
  auto message = [&](const GruStreamHead& h) {
    try {
      s.set_head(h);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  GruStreamHead h;
  h.weight = Tensor::zeros({3, 7}, DType::f32);
  EXPECT_THAT(message(h), ::testing::HasSubstr("head weight has shape (3, 7), expected (O, 8)"));
  h.weight = Tensor::zeros({3, 8}, DType::f64);
  EXPECT_THAT(message(h), ::testing::HasSubstr("head weight is f64, expected f32"));
  h.weight = Tensor::zeros({3, 8}, DType::f32);
  h.bias = Tensor::zeros({4}, DType::f32);
  EXPECT_THAT(message(h), ::testing::HasSubstr("head bias"));
  h.bias = {};
  h.residual = true;
  EXPECT_THAT(message(h), ::testing::HasSubstr("input has 4 features and the output 3"));
  GruStreamHead bias_only;
  bias_only.bias = Tensor::zeros({8}, DType::f32);
  EXPECT_THAT(message(bias_only), ::testing::HasSubstr("without a head weight"));
  EXPECT_EQ(s.output_size(), 8);  // a failed set_head changes nothing
  const Gru g64(c, DType::f64, 1);
  GruStream s64(g64, 1);
  EXPECT_THROW(s64.set_head(GruStreamHead{}), Error);
}

// The one-layer Gru holding a cell's weights (its form and bias too).
Gru gru_of(const GruCell& cell) {
  GruConfig c;
  c.input_size = cell.input_size();
  c.hidden_size = cell.hidden_size();
  c.form = cell.form();
  return Gru(c, {cell.weights()});
}

// GruCell's batch-1 f32 step is the real-time kernel's first step from h (the stream's
// arithmetic), the same bits whether the arguments are contiguous (read in place, no Tensor
// made but the result) or strided views (made contiguous first), batched (1, I) or unbatched,
// with h or without (zeros); at H 37 (tiles) and 13 (state in registers), both forms.
TEST(StreamApi, GruCellBatchOneIsTheStreamsStepInAnyLayout) {
  for (const int64_t H : {37, 13})
    for (const GruForm form : {GruForm::linear_before_reset, GruForm::reset_before}) {
      const int64_t I = 5;
      const GruCell cell(I, H, true, form, DType::f32, 4);
      const Gru gru = gru_of(cell);
      std::mt19937_64 rng(11);
      const Tensor x = test::random_tensor({1, I}, DType::f32, rng);
      const Tensor h = test::random_tensor({1, H}, DType::f32, rng);
      GruStream from_h(gru, 1, h.unsqueeze(0)), from_zero(gru, 1);
      const Tensor want = from_h.step(x.unsqueeze(0)).select(0, 0);
      const Tensor want0 = from_zero.step(x.unsqueeze(0)).select(0, 0);
      // Strided copies: every other element of a larger tensor.
      const Tensor xs = Tensor::zeros({1, 2 * I}, DType::f32).slice(1, 0, 2 * I, 2);
      const Tensor hs = Tensor::zeros({1, 2 * H}, DType::f32).slice(1, 0, 2 * H, 2);
      Tensor(xs).copy_from(x);
      Tensor(hs).copy_from(h);
      ASSERT_FALSE(xs.is_contiguous());
      const std::string at = "H " + std::to_string(H);
      EXPECT_EQ(max_abs_diff(cell.forward(x, h), want), 0.0) << at;
      EXPECT_EQ(max_abs_diff(cell.forward(xs, hs), want), 0.0) << at;
      EXPECT_EQ(max_abs_diff(cell.forward(x.select(0, 0), h.select(0, 0)), want.select(0, 0)), 0.0)
          << at;
      EXPECT_EQ(max_abs_diff(cell.forward(xs.select(0, 0), hs.select(0, 0)), want.select(0, 0)),
                0.0)
          << at;
      EXPECT_EQ(max_abs_diff(cell.forward(x), want0), 0.0) << at;
      EXPECT_EQ(max_abs_diff(cell.forward(xs.select(0, 0)), want0.select(0, 0)), 0.0) << at;
      EXPECT_EQ(cell.forward(x.select(0, 0)).shape(), (Shape{H})) << at;
      // From raw memory: the same bits, into other memory or in place, from h or from zeros.
      std::vector<float> out(H, -1.0f), inplace(h.data<float>(), h.data<float>() + H);
      cell.forward(x.data<float>(), h.data<float>(), out.data());
      EXPECT_EQ(max_abs_diff(Tensor::from_vector({1, H}, out), want), 0.0) << at;
      cell.forward(x.data<float>(), inplace.data(), inplace.data());
      EXPECT_EQ(max_abs_diff(Tensor::from_vector({1, H}, inplace), want), 0.0) << at;
      cell.forward(x.data<float>(), nullptr, out.data());
      EXPECT_EQ(max_abs_diff(Tensor::from_vector({1, H}, out), want0), 0.0) << at;
    }
}

// The raw-memory step refuses what it cannot take, in one line naming it.
TEST(StreamApi, GruCellRawStepErrors) {
  const auto expect_error = [](auto fn, const std::string& piece) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one saying: " << piece;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
    }
  };
  const GruCell cell(3, 4);
  std::vector<float> x(3), h(4);
  expect_error([&] { cell.forward(nullptr, h.data(), h.data()); }, "input is null");
  expect_error([&] { cell.forward(x.data(), h.data(), nullptr); }, "h_new is null");
  expect_error([&] { cell.forward(x.data(), h.data(), h.data(), -1); }, "threads is -1");
  const GruCell f64(3, 4, true, GruForm::linear_before_reset, DType::f64);
  expect_error([&] { f64.forward(x.data(), h.data(), h.data()); }, "takes an f32 cell");
}

// The smallest multiple of 16 hidden units whose f32 cell weights (3H (I + H) floats) take
// more than `quarters` quarters of this machine's L2: where a cell starts sharing its step.
int64_t hidden_past_l2(int64_t I, int64_t quarters = 1) {
  int64_t H = 16;
  while (3 * H * (I + H) * 4 <= cpu::l2_cache_bytes() / 4 * quarters) H += 16;
  return H;
}

// A cell whose weights take much of the L2 (sized from the L2 the OS reports) shares its
// batch-1 step among the threads when two are allowed. Past a quarter of the L2 a
// linear-before-reset cell runs the real-time kernel's step in parts, one a thread: the same
// bits as on one thread, contiguous or strided, batched or not, from raw memory (in place
// too). Past 3/4 a reset-before cell runs the engine's team, bit-identical to Gru::forward;
// below that, the real-time kernel on the calling thread.
TEST(StreamApi, GruCellLargerThanTheL2SharesTheStepOnTwoThreads) {
  const int64_t I = 8;
  // A partial unit block too.
  const auto past = [&](int64_t quarters) { return hidden_past_l2(I, quarters) + 3; };
  for (const int64_t H : {past(1), past(3)})
    for (GruForm form : {GruForm::linear_before_reset, GruForm::reset_before}) {
      const GruCell cell(I, H, true, form, DType::f32, 6);
      const Gru gru = gru_of(cell);
      std::mt19937_64 rng(12);
      const Tensor x = test::random_tensor({1, I}, DType::f32, rng);
      const Tensor h = test::random_tensor({1, H}, DType::f32, rng);
      const Tensor engine = gru.forward(x.unsqueeze(0), h.unsqueeze(0)).h_n.select(0, 0);
      const Tensor alone = cell.forward(x, h, 1);  // the real-time kernel on this thread
      const bool lbr = form == GruForm::linear_before_reset;
      const bool on_engine = !lbr && 3 * H * (I + H) * 4 > cpu::l2_cache_bytes() / 4 * 3;
      const Tensor want = on_engine ? engine : alone;
      const Tensor xs = Tensor::zeros({1, 2 * I}, DType::f32).slice(1, 0, 2 * I, 2);
      Tensor(xs).copy_from(x);
      const std::string at = "H " + std::to_string(H) + (lbr ? "" : " reset-before");
      EXPECT_EQ(max_abs_diff(cell.forward(x, h, 2), want), 0.0) << at;
      EXPECT_EQ(max_abs_diff(cell.forward(xs, h, 2), want), 0.0) << at;
      EXPECT_EQ(max_abs_diff(cell.forward(x.select(0, 0), h.select(0, 0), 2), want.select(0, 0)),
                0.0)
          << at;
      std::vector<float> raw(H), inplace(h.data<float>(), h.data<float>() + H);
      cell.forward(x.data<float>(), h.data<float>(), raw.data(), 2);
      EXPECT_EQ(max_abs_diff(Tensor::from_vector({1, H}, raw), want), 0.0) << at;
      cell.forward(x.data<float>(), inplace.data(), inplace.data(), 2);
      EXPECT_EQ(max_abs_diff(Tensor::from_vector({1, H}, inplace), want), 0.0) << at;
      // From zeros: the same as from a zero state.
      const Tensor zero = Tensor::zeros({1, H}, DType::f32);
      EXPECT_EQ(max_abs_diff(cell.forward(x, {}, 2), cell.forward(x, zero, on_engine ? 2 : 1)), 0.0)
          << at;
      // The real-time kernel is within the engine's tolerance of Gru::forward, not its bits.
      EXPECT_LT(max_abs_diff(alone, engine), 1e-5) << at;
      EXPECT_GT(max_abs_diff(alone, engine), 0.0)
          << at << ": one thread should be the real-time kernel";
    }
}

// The shared step's threads (a team the cell starts at its first shared step and keeps) serve
// one caller at a time: callers on four threads at once (the others take an OpenMP region) and
// callers inside an OpenMP region get the same bits as one thread, step after step.
TEST(StreamApi, GruCellSharedStepFromSeveralThreadsAtOnce) {
  const int64_t I = 8, H = hidden_past_l2(I);
  const GruCell cell(I, H, true, GruForm::linear_before_reset, DType::f32, 7);
  std::mt19937_64 rng(13);
  const Tensor x = test::random_tensor({I}, DType::f32, rng);
  const Tensor h0 = test::random_tensor({H}, DType::f32, rng);
  constexpr int kSteps = 40;
  // Each step's state on one thread.
  std::vector<std::vector<float>> want(kSteps + 1, std::vector<float>(H));
  std::copy(h0.data<float>(), h0.data<float>() + H, want[0].begin());
  for (int s = 0; s < kSteps; ++s)
    cell.forward(x.data<float>(), want[s].data(), want[s + 1].data(), 1);
  ASSERT_NE(want[kSteps], want[0]);
  const auto run = [&](int64_t* mismatches) {
    std::vector<float> h = want[0];
    for (int s = 0; s < kSteps; ++s) {
      cell.forward(x.data<float>(), h.data(), h.data(), 2);
      if (h != want[s + 1]) ++*mismatches;
    }
  };
  int64_t alone = 0;
  run(&alone);
  EXPECT_EQ(alone, 0) << "H " << H << ": the team's steps differ from one thread's";
  std::vector<int64_t> mismatches(4, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) callers.emplace_back(run, &mismatches[t]);
  for (auto& c : callers) c.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "caller " << t;
  std::vector<int64_t> nested(2, 0);
#pragma omp parallel num_threads(2)
  run(&nested[omp_get_thread_num()]);
  EXPECT_EQ(nested[0] + nested[1], 0) << "inside an OpenMP region";
}

// A process that forks after its streams and cells started their threads: the child has none
// of those threads, and its streams and cells still run (the stream's frames on the calling
// thread, the cell's step on a team of the child's own), with the same bits, instead of
// waiting forever for workers that exist only in the parent.
TEST(StreamApi, StreamsAndCellsMadeBeforeForkRunInTheChild) {
  GruConfig c;
  c.input_size = 5;
  c.hidden_size = 80;  // large enough for a thread team
  std::mt19937_64 rng(17);
  const Gru gru(c, DType::f32, 3);
  const Tensor x3 = test::random_tensor({4, 3, 5}, DType::f32, rng);
  const Tensor x1 = test::random_tensor({4, 1, 5}, DType::f32, rng);
  GruStream batched(gru, 3, {}, Precision::f32, 2), single(gru, 1, {}, Precision::f32, 2);
  const Tensor want3 = gru.forward(x3).output;  // the streams' bits (engine kernels)
  const Tensor want1 = gru.forward(x1).output;
  const int64_t I = 8, H = hidden_past_l2(I);  // a shared step
  const GruCell cell(I, H, true, GruForm::linear_before_reset, DType::f32, 7);
  const Tensor xc = test::random_tensor({I}, DType::f32, rng);
  std::vector<float> want_h(H, 0.0f), h(H, 0.0f);
  for (int s = 0; s < 3; ++s) cell.forward(xc.data<float>(), want_h.data(), want_h.data(), 1);
  // The parent's threads run once before the fork.
  EXPECT_EQ(max_abs_diff(batched.step(x3), want3), 0.0);
  EXPECT_EQ(max_abs_diff(single.step(x1), want1), 0.0);
  cell.forward(xc.data<float>(), h.data(), h.data(), 2);
  batched.reset();
  single.reset();
  std::fill(h.begin(), h.end(), 0.0f);
  const int code = test::exit_code_in_child([&] {
    int failed = 0;
    if (max_abs_diff(batched.step(x3), want3) != 0.0) failed |= 1;
    if (max_abs_diff(single.step(x1), want1) != 0.0) failed |= 2;
    for (int s = 0; s < 3; ++s) cell.forward(xc.data<float>(), h.data(), h.data(), 2);
    if (h != want_h) failed |= 4;
    return failed;
  });
  EXPECT_EQ(code, 0) << "1: batched stream, 2: batch-1 stream, 4: cell (sums of these), "
                        "125: an exception, 128 + N: killed by signal N";
  EXPECT_EQ(max_abs_diff(batched.step(x3), want3), 0.0);  // the parent's threads still run
}

// The real-time kernel's gates (a rational tanh and the sigmoid from it, cpu/gate_math-inl.h)
// against f64 over the whole range: within 4e-7 absolute everywhere (measured 3.0e-7 and
// 2.2e-7 on the SIMD targets), within 4 ulp relative for tanh near 0, where outputs are small
// (measured 3.5), saturation reached (|tanh| within 4e-7 of 1 beyond the clamp, sigmoid
// within 4e-7 of 0 and 1), NaN passed on.
TEST(StreamKernel, GatesWithinTheirBounds) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1e-30f,
                           -1e-30f,
                           1e-6f,
                           -1e-6f,
                           8.99f,
                           9.0f,
                           9.01f,
                           17.99f,
                           18.0f,
                           18.01f,
                           88.0f,
                           -88.0f,
                           1e4f,
                           -1e4f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  for (int i = 0; i <= 400000; ++i) xs.push_back(-40.0f + 80.0f * i / 400000);
  for (int i = 0; i <= 20000; ++i) xs.push_back(std::pow(10.0f, -8.0f + 8.0f * i / 20000));
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> sig(n), th(n);
  cpu::stream_gates(n, xs.data(), sig.data(), th.data());
  double worst_sig = 0, worst_tanh = 0, worst_rel = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const double x = xs[i];
    const double ws = 1 / (1 + std::exp(-x)), wt = std::tanh(x);
    ASSERT_TRUE(std::isfinite(sig[i]) && std::isfinite(th[i])) << "x = " << x;
    worst_sig = std::max(worst_sig, std::abs(sig[i] - ws));
    worst_tanh = std::max(worst_tanh, std::abs(th[i] - wt));
    if (std::abs(x) < 0.5 && x != 0) {
      const double ulp = std::abs(double(std::nextafter(float(wt), 2.0f)) - float(wt));
      worst_rel = std::max(worst_rel, std::abs(th[i] - wt) / ulp);
    }
    if (x == 0) {
      ASSERT_EQ(th[i], 0.0f) << "tanh(0)";
    }
  }
  EXPECT_LE(worst_sig, 4e-7);
  EXPECT_LE(worst_tanh, 4e-7);
  EXPECT_LE(worst_rel, 4.0);
  EXPECT_TRUE(std::isnan(sig[n - 1]) && std::isnan(th[n - 1])) << sig[n - 1] << " " << th[n - 1];
  std::printf("worst error: sigmoid %.2e, tanh %.2e absolute; tanh near 0 %.2f ulp\n", worst_sig,
              worst_tanh, worst_rel);
}

// The real-time kernel against its reference twin (f64, straight from the equations) at the
// sizes where its tiling changes: H below, at and past the SIMD width and its multiples, odd
// sizes, several tiles; I from 1; both forms; with and without bias; state carried across
// calls of different lengths.
TEST(StreamKernel, MatchesReference) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  int cases = 0;
  for (int64_t H : {1, 3, 4, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 100, 128, 200})
    for (int64_t I : {1, 3, 16})
      for (bool rb : {false, true})
        for (bool bias : {true, false}) {
          if (!bias && (I != 3 || H % 2 == 0)) continue;
          std::vector<float> wih(3 * H * I), whh(3 * H * H), bih(3 * H), bhh(3 * H);
          for (auto* v : {&wih, &whh, &bih, &bhh})
            for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 1.0f);
          const cpu::StreamLayer L =
              cpu::gru_stream_pack(I, H, rb, wih.data(), whh.data(), bias ? bih.data() : nullptr,
                                   bias ? bhh.data() : nullptr);
          const int64_t T = 9;
          std::vector<float> x(T * I), out(T * H);
          for (float& v : x) v = 2 * u(rng);
          auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(L, T));
          auto state = hwy::AllocateAligned<float>(2 * L.Hp);
          std::fill(state.get(), state.get() + 2 * L.Hp, 0.0f);
          std::vector<double> h(H, 0.0), want(T * H);
          for (int64_t u0 = 0; u0 < H; ++u0) state[u0] = static_cast<float>(h[u0] = 0.1 * (u0 % 5));
          // Calls of 1, 3 and 5 frames.
          for (int64_t t0 : {0, 1, 4})
            cpu::gru_stream_forward(L,
                                    t0 == 0   ? 1
                                    : t0 == 1 ? 3
                                              : 5,
                                    t0, x.data() + t0 * I, I, state.get(), {out.data() + t0 * H, H},
                                    scratch.get());
          cpu::ref::gru_stream_forward(I, H, rb, wih.data(), whh.data(),
                                       bias ? bih.data() : nullptr, bias ? bhh.data() : nullptr, T,
                                       x.data(), h.data(), want.data());
          const std::string where = "H " + std::to_string(H) + " I " + std::to_string(I) +
                                    (rb ? " reset-before" : "") + (bias ? "" : " no bias");
          for (int64_t i = 0; i < T * H; ++i)
            ASSERT_NEAR(out[i], want[i], 2e-6 + 1e-5 * std::abs(want[i])) << where << " at " << i;
          for (int64_t u0 = 0; u0 < H; ++u0)
            ASSERT_EQ(state[u0], out[(T - 1) * H + u0])
                << where << ": the state is the last output";
          for (int64_t u0 = H; u0 < L.Hp; ++u0) ASSERT_EQ(state[u0], 0.0f) << where << ": padding";
          ++cases;
        }
  EXPECT_GT(cases, 100);
}

// Narrow tiles (one unit group each, taken where the recurrent weights exceed L1) and wide
// ones give the same bits: the layout and the tiles' order change, the sums do not. H from
// one tile to several, odd sizes, both forms; 7 steps in calls of 1, 2 and 4 frames (tiles
// forward and backward).
TEST(StreamKernel, NarrowTilesAreBitIdenticalToWide) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t H : {17, 40, 65, 100, 128, 200})
    for (bool rb : {false, true}) {
      const int64_t I = 5, T = 7;
      std::vector<float> wih(3 * H * I), whh(3 * H * H), bih(3 * H), bhh(3 * H), x(T * I);
      for (auto* v : {&wih, &whh, &bih, &bhh, &x})
        for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 2.0f);
      std::vector<float> outs[2];
      for (int narrow = 0; narrow < 2; ++narrow) {
        const cpu::StreamLayer L = cpu::gru_stream_pack(I, H, rb, wih.data(), whh.data(),
                                                        bih.data(), bhh.data(), narrow == 1);
        ASSERT_EQ(L.narrow_tiles, narrow == 1 && L.Hp / L.V > 2);
        auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(L, T));
        auto state = hwy::AllocateAligned<float>(2 * L.Hp);
        std::fill(state.get(), state.get() + 2 * L.Hp, 0.0f);
        outs[narrow].assign(T * H, 0.0f);
        for (int64_t t0 : {0, 1, 3})
          cpu::gru_stream_forward(L,
                                  t0 == 0   ? 1
                                  : t0 == 1 ? 2
                                            : 4,
                                  t0, x.data() + t0 * I, I, state.get(),
                                  {outs[narrow].data() + t0 * H, H}, scratch.get());
      }
      for (int64_t i = 0; i < T * H; ++i)
        ASSERT_EQ(outs[0][i], outs[1][i])
            << "H " << H << (rb ? " reset-before" : "") << " at " << i;
    }
}

// A call's frames projected in blocks (projection_frames, set where the projections of a few
// frames fit in L1 beside the weights) or all at once: the same bits, for register-resident
// and tiled states, both forms, with a head and residual, calls of 1 to 23 frames.
TEST(StreamKernel, ProjectionBlocksAreBitIdentical) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t H : {8, 32, 40, 48, 100})
    for (bool rb : {false, true}) {
      const int64_t I = 3, T = 23, O = 2;
      std::vector<float> wih(3 * H * I), whh(3 * H * H), bih(3 * H), bhh(3 * H), x(T * I),
          hw(O * H), hb(O), res(T * O);
      for (auto* v : {&wih, &whh, &bih, &bhh, &x, &hw, &hb, &res})
        for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 2.0f);
      const cpu::StreamHead head =
          cpu::gru_stream_pack_head(O, H, hw.data(), hb.data(), cpu::stream_target(H).lanes);
      std::vector<float> outs[3], states[3];
      for (int64_t k = 0; k < 3; ++k) {  // all at once; blocks of 4; blocks of 1
        cpu::StreamLayer L =
            cpu::gru_stream_pack(I, H, rb, wih.data(), whh.data(), bih.data(), bhh.data());
        L.projection_frames = k == 0 ? 0 : k == 1 ? 4 : 1;
        auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(L, T));
        auto state = hwy::AllocateAligned<float>(2 * L.Hp);
        std::fill(state.get(), state.get() + 2 * L.Hp, 0.0f);
        outs[k].assign(T * O, 0.0f);
        for (int64_t t0 = 0, n = 1; t0 < T; t0 += n, n = std::min(n + 7, T - t0))
          cpu::gru_stream_forward(L, n, t0, x.data() + t0 * I, I, state.get(),
                                  {outs[k].data() + t0 * O, O, &head, res.data() + t0 * O, O},
                                  scratch.get());
        states[k].assign(state.get(), state.get() + H);
      }
      for (int k = 1; k < 3; ++k) {
        ASSERT_EQ(outs[k], outs[0]) << "H " << H << (rb ? " reset-before" : "") << ", blocks " << k;
        ASSERT_EQ(states[k], states[0]) << "H " << H << (rb ? " reset-before" : "");
      }
    }
  // Where the rule sets blocks: the weights in L1 with room for at least 4 frames beside them.
  const int64_t V = cpu::gru_stream_lanes();
  EXPECT_EQ(cpu::stream_projection_frames(1, 1024, 1024), 0);
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  if (l1 >= (int64_t(32) << 10)) {  // H 32's weights (12.4 KiB) fit 3/4 of any such L1
    const int64_t Hp = (32 + V - 1) / V * V, f = cpu::stream_projection_frames(1, 32, Hp);
    EXPECT_GE(f, 4);
    EXPECT_LE(3 * Hp * (1 + 32 + f) * 4, l1 / 4 * 3);
    EXPECT_GT(3 * Hp * (1 + 32 + f + 1) * 4, l1 / 4 * 3);  // the most frames that fit
  }
}

// A layer's units in parts (one a thread in GruCell's shared step): each part's step, from
// any state, is the same bits as the whole layer's first step for its units where the parts
// have 4 or more unit groups; at tile edges (a partial last group, parts of other sizes than
// the tiles'), with and without biases.
TEST(StreamKernel, PartsAreTheWholeLayersStep) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const int64_t V = cpu::gru_stream_lanes();
  for (int64_t H : {8 * V, 8 * V + 5, 13 * V + 3})
    for (int64_t I : {1, 7})
      for (int64_t n : {2, 3}) {
        const int64_t G = (H + V - 1) / V;
        if (G / n < 4) continue;
        const bool bias = I == 7;
        std::vector<float> wih(3 * H * I), whh(3 * H * H), bih(3 * H), bhh(3 * H), x(I);
        for (auto* v : {&wih, &whh, &bih, &bhh, &x})
          for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 2.0f);
        const float* bi = bias ? bih.data() : nullptr;
        const float* bh = bias ? bhh.data() : nullptr;
        const cpu::StreamLayer whole =
            cpu::gru_stream_pack(I, H, false, wih.data(), whh.data(), bi, bh);
        auto state = hwy::AllocateAligned<float>(2 * whole.Hp);
        std::fill(state.get(), state.get() + 2 * whole.Hp, 0.0f);
        for (int64_t k = 0; k < H; ++k) state[k] = u(rng);
        const std::vector<float> h(state.get(), state.get() + whole.Hp);  // H, then zeros
        auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(whole, 1));
        std::vector<float> want(H);
        cpu::gru_stream_forward(whole, 1, 0, x.data(), I, state.get(), {want.data(), H},
                                scratch.get());
        const std::string at = "H " + std::to_string(H) + " I " + std::to_string(I) + ", " +
                               std::to_string(n) + " parts";
        for (int64_t p = 0; p < n; ++p) {
          const int64_t u0 = G * p / n * V, u1 = std::min(H, G * (p + 1) / n * V);
          const cpu::StreamLayer part =
              cpu::gru_stream_pack_part(I, H, u0, u1 - u0, wih.data(), whh.data(), bi, bh);
          auto out = hwy::AllocateAligned<float>(part.Hp);
          auto ps = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(part, 1));
          cpu::gru_stream_part_step(part, x.data(), h.data(), out.get(), ps.get());
          for (int64_t k = u0; k < u1; ++k)
            ASSERT_EQ(out[k - u0], want[k]) << at << ", part " << p << ", unit " << k;
        }
      }
  // Parts must start at a unit group and lie inside the layer.
  std::vector<float> w(3 * 64 * 64);
  EXPECT_THROW(
      cpu::gru_stream_pack_part(64, 64, V > 1 ? 1 : -1, 32, w.data(), w.data(), nullptr, nullptr),
      std::invalid_argument);
  EXPECT_THROW(cpu::gru_stream_pack_part(64, 64, 0, 65, w.data(), w.data(), nullptr, nullptr),
               std::invalid_argument);
}

// The tiles of a product: they cover the unit groups in order, at most 12 / per groups each
// (one when narrow), as few as that allows, sizes within one of each other, the larger first;
// of(u) names the tile that holds group u.
TEST(StreamKernel, TilingSplitsTheGroupsEvenly) {
  for (int64_t per = 1; per <= 4; ++per)
    for (bool narrow : {false, true})
      for (int64_t G = 1; G <= 40; ++G) {
        const cpu::StreamTiling tiles(G, per, narrow);
        const int64_t most = narrow ? 1 : 12 / per;
        const std::string where = fmt::format("G {} per {}{}", G, per, narrow ? " narrow" : "");
        ASSERT_EQ(tiles.n, (G + most - 1) / most) << where;
        int64_t next = 0;
        for (int64_t t = 0; t < tiles.n; ++t) {
          ASSERT_EQ(tiles.start(t), next) << where << ", tile " << t;
          ASSERT_GE(tiles.size(t), 1) << where;
          ASSERT_LE(tiles.size(t), most) << where;
          ASSERT_LE(tiles.size(t), tiles.size(0)) << where;
          ASSERT_GE(tiles.size(t), tiles.size(0) - 1) << where;
          if (t > 0) {
            ASSERT_LE(tiles.size(t), tiles.size(t - 1)) << where;
          }
          for (int64_t u = next; u < next + tiles.size(t); ++u)
            ASSERT_EQ(tiles.of(u), t) << where << ", group " << u;
          next += tiles.size(t);
        }
        ASSERT_EQ(next, G) << where;
      }
  // The cases the layout was changed for: an LSTM's 4 groups, a GRU's 5 (AVX2 at H 32 and 40).
  const cpu::StreamTiling lstm(4, 4, false), gru(5, 3, false);
  EXPECT_EQ(lstm.n, 2);
  EXPECT_EQ(lstm.size(0), 2);
  EXPECT_EQ(lstm.size(1), 2);
  EXPECT_EQ(gru.size(0), 3);
  EXPECT_EQ(gru.size(1), 2);
}

// The tiles a layer takes when none are asked for: never narrow where the recurrent weights fit
// in L1 (or for up to two unit groups); beyond it the choice timed on this machine, made once
// per size and form, so that every later layer of that size takes the same tiles.
TEST(StreamKernel, TilesAreChosenOncePerSize) {
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  for (int64_t H : {8, 16, 40, 64, 100, 128, 160})
    for (bool rb : {false, true}) {
      const bool first = cpu::stream_narrow_tiles(H, rb);
      if (l1 > 0 && 3 * H * H * 4 <= l1) {
        EXPECT_FALSE(first) << "H " << H;
      }
      for (int again = 0; again < 3; ++again)
        ASSERT_EQ(cpu::stream_narrow_tiles(H, rb), first) << "H " << H << ": the choice changed";
      std::vector<float> wih(3 * H), whh(3 * H * H, 0.01f);
      const cpu::StreamLayer L =
          cpu::gru_stream_pack(1, H, rb, wih.data(), whh.data(), nullptr, nullptr);
      EXPECT_EQ(L.narrow_tiles, first && L.Hp / L.V > 2) << "H " << H;
    }
}

// The lanes a layer is packed for: 8 (the AVX2 kernel) for up to 8 units where the chosen
// target has more and AVX2 is compiled and supported; otherwise the chosen target's, for every
// part of a split layer as for the whole; the head packed for the layer's lanes.
TEST(StreamKernel, SmallLayersTakeTheEightLaneKernel) {
  const int64_t lanes = cpu::gru_stream_lanes();
  bool avx2 = false;
#if HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX2)
  avx2 = (hwy::SupportedTargets() & HWY_AVX2) != 0;
#endif
  for (int64_t H : {1, 3, 8, 9, 16, 40}) {
    const int64_t want = H <= 8 && lanes > 8 && avx2 ? 8 : lanes;
    std::vector<float> wih(4 * H * 2, 0.1f), whh(4 * H * H, 0.01f);
    const cpu::StreamLayer gru =
        cpu::gru_stream_pack(2, H, false, wih.data(), whh.data(), nullptr, nullptr);
    const cpu::StreamLayer lstm =
        cpu::lstm_stream_pack(2, H, wih.data(), whh.data(), nullptr, nullptr);
    EXPECT_EQ(gru.V, want) << "GRU H " << H;
    EXPECT_EQ(lstm.V, want) << "LSTM H " << H;
    EXPECT_EQ(gru.Hp % want, 0) << "H " << H;
    const cpu::StreamHead head = cpu::gru_stream_pack_head(1, H, wih.data(), nullptr, gru.V);
    EXPECT_EQ(head.Hp, gru.Hp) << "H " << H;
  }
  if (lanes > 8 && avx2) {  // a part of a layer of 16 keeps the whole layer's 16 lanes
    const int64_t H = 16;
    std::vector<float> wih(3 * H), whh(3 * H * H, 0.01f);
    const cpu::StreamLayer part =
        cpu::gru_stream_pack_part(1, H, 0, 8, wih.data(), whh.data(), nullptr, nullptr);
    EXPECT_EQ(part.V, lanes);
  }
}

// The head fused into the kernel's step (the C API's model): out rows of O = b + W h' (+ res),
// against the reference's h' and a head in f64, for register-resident and tiled states, one or
// several outputs, with and without bias and residual; and rows of h' + res without a head.
TEST(StreamKernel, HeadAndResidualInTheStep) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t H : {1, 5, 8, 16, 17, 32, 33, 64, 100})
    for (int64_t O : {0, 1, 3})
      for (bool with_res : {false, true}) {
        const int64_t I = 4, T = 7, R = O > 0 ? O : H;  // R: floats of an out row
        std::vector<float> wih(3 * H * I), whh(3 * H * H), bih(3 * H), bhh(3 * H), hw(O * H), hb(O),
            res(T * R);
        for (auto* v : {&wih, &whh, &bih, &bhh, &hw, &hb, &res})
          for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 1.0f);
        const cpu::StreamLayer L =
            cpu::gru_stream_pack(I, H, false, wih.data(), whh.data(), bih.data(), bhh.data());
        const cpu::StreamHead head = cpu::gru_stream_pack_head(O, H, hw.data(), hb.data(), L.V);
        std::vector<float> x(T * I), out(T * R);
        for (float& v : x) v = 2 * u(rng);
        auto scratch = hwy::AllocateAligned<float>(cpu::gru_stream_scratch(L, T));
        auto state = hwy::AllocateAligned<float>(2 * L.Hp);
        std::fill(state.get(), state.get() + 2 * L.Hp, 0.0f);
        for (int64_t t0 : {0, 2})  // calls of 2 and 5 frames
          cpu::gru_stream_forward(L, t0 == 0 ? 2 : 5, t0, x.data() + t0 * I, I, state.get(),
                                  {out.data() + t0 * R, R, O > 0 ? &head : nullptr,
                                   with_res ? res.data() + t0 * R : nullptr, R},
                                  scratch.get());
        std::vector<double> h(H, 0.0), hs(T * H);
        cpu::ref::gru_stream_forward(I, H, false, wih.data(), whh.data(), bih.data(), bhh.data(), T,
                                     x.data(), h.data(), hs.data());
        const std::string where =
            "H " + std::to_string(H) + " O " + std::to_string(O) + (with_res ? " residual" : "");
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < R; ++k) {
            double want = O == 0 ? hs[t * H + k] : hb[k];
            if (O > 0)
              for (int64_t j = 0; j < H; ++j) want += double(hw[k * H + j]) * hs[t * H + j];
            if (with_res) want += res[t * R + k];
            ASSERT_NEAR(out[t * R + k], want, 4e-6 + 1e-5 * std::abs(want))
                << where << " at frame " << t << ", output " << k;
          }
        for (int64_t j = 0; j < H; ++j)  // the state is h', whatever is written out
          ASSERT_NEAR(state[j], hs[(T - 1) * H + j], 2e-6 + 1e-5 * std::abs(hs[(T - 1) * H + j]))
              << where;
      }
}

}  // namespace
}  // namespace grux::test_gru_stream
