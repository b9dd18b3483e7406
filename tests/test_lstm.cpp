// The LSTM (nn.LSTM / nn.LSTMCell): against PyTorch golden files (tests/reference/golden/lstm,
// written by gen_lstm_golden.py, which also checks PyTorch against its own implementation of
// the equations), finite differences in f64 for every gradient, the gate kernels against their
// reference twins, row and thread invariance, and the errors of bad input.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cpu/gemm_packed.h"
#include "cpu/lstm_gates.h"
#include "cpu/lstm_stream.h"
#include "cpu/ref/lstm_gates_ref.h"
#include "cpu/ref/lstm_stream_ref.h"
#include "grux/io.h"
#include "grux/lstm.h"
#include "grux/runtime.h"
#include "ops/recurrent.h"
#include "test_util.h"

namespace grux::test_lstm {
namespace {

const std::string kDir = std::string(GRUX_GOLDEN_DIR) + "/lstm";

std::vector<std::string> lstm_golden_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kDir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

struct Golden {
  nlohmann::json config;
  std::map<std::string, Tensor> t, weights;
  Tensor get(const std::string& k) const { return t.count(k) ? t.at(k) : Tensor(); }
};

Golden load(const std::string& file) {
  Golden g;
  SafeTensors st = read_safetensors(kDir + "/" + file);
  g.config = nlohmann::json::parse(st.metadata.at("config"));
  g.t = st.tensors;
  for (const auto& [k, v] : st.tensors)
    if (k.rfind("w.", 0) == 0) g.weights[k.substr(2)] = v;
  return g;
}

// A summed gradient's tolerance grows with its terms: plus a part of its largest element.
test::Tol grad_tol(const Tensor& expected, test::Tol tol) {
  return {tol.atol + tol.rtol * test::max_abs(expected) * 0.1, tol.rtol};
}

class LstmGolden : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override { set_reference_kernels(std::get<1>(GetParam())); }
  void TearDown() override { set_reference_kernels(false); }
};

TEST_P(LstmGolden, MatchesPyTorch) {
  const Golden g = load(std::get<0>(GetParam()));
  const std::string where =
      std::get<0>(GetParam()) + (std::get<1>(GetParam()) ? " (reference)" : " (optimized)");
  const test::Tol tol = test::tol_for(g.get("input").dtype());
  const auto close = [&](const std::string& name, const Tensor& a, const std::string& key) {
    const Tensor e = g.get(key);
    const bool grad = key.rfind("grad.", 0) == 0;
    EXPECT_TRUE(test::all_close(where, name, a, e, grad ? grad_tol(e, tol) : tol));
  };
  const Tensor x = g.get("input"), h0 = g.get("h0"), c0 = g.get("c0");
  if (g.config["kind"] == "cell") {
    LstmCell cell = LstmCell::from_state_dict(g.weights);
    auto [h, c] = cell.forward(x, h0, c0);
    close("h_new", h, "h_new");
    close("c_new", c, "c_new");
    LstmCellGrads d = cell.backward(x, h0, c0, g.get("grad_h_new"), g.get("grad_c_new"));
    close("grad.input", d.dinput, "grad.input");
    if (h0.defined()) close("grad.h0", d.dh, "grad.h0");
    if (c0.defined()) close("grad.c0", d.dc, "grad.c0");
    close("grad.weight_ih", d.dweights.w_ih, "grad.weight_ih");
    close("grad.weight_hh", d.dweights.w_hh, "grad.weight_hh");
    if (g.config["bias"]) {
      close("grad.bias_ih", d.dweights.b_ih, "grad.bias_ih");
      close("grad.bias_hh", d.dweights.b_hh, "grad.bias_hh");
    }
    return;
  }
  LstmConfig options;
  options.batch_first = g.config["batch_first"];
  Lstm lstm = Lstm::from_state_dict(g.weights, options);
  EXPECT_EQ(lstm.config().num_layers, g.config["num_layers"]);
  EXPECT_EQ(lstm.config().bidirectional, g.config["bidirectional"]);
  EXPECT_EQ(lstm.config().bias, g.config["bias"]);
  EXPECT_EQ(lstm.config().proj_size, g.config["proj_size"]);
  const Tensor lengths = g.get("lengths");
  LstmOutput inf = lstm.forward(x, h0, c0, lengths);
  close("output", inf.output, "output");
  close("h_n", inf.h_n, "h_n");
  close("c_n", inf.c_n, "c_n");
  LstmTape tape;
  LstmOutput y = lstm.forward_train(x, h0, c0, lengths, tape);
  close("output (train)", y.output, "output");
  close("h_n (train)", y.h_n, "h_n");
  close("c_n (train)", y.c_n, "c_n");
  LstmGrads d = lstm.backward(tape, g.get("grad_output"), g.get("grad_h_n"), g.get("grad_c_n"));
  close("grad.input", d.dinput, "grad.input");
  if (h0.defined()) close("grad.h0", d.dh0, "grad.h0");
  if (c0.defined()) close("grad.c0", d.dc0, "grad.c0");
  const auto dstate = d.state_dict(lstm.config());
  EXPECT_EQ(dstate.size(), g.weights.size());
  for (const auto& [key, w] : g.weights) {
    ASSERT_TRUE(dstate.count(key)) << where << ": no gradient for " << key;
    close("grad." + key, dstate.at(key), "grad." + key);
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, LstmGolden,
                         ::testing::Combine(::testing::ValuesIn(lstm_golden_files()),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           return n.substr(0, n.size() - 12) +
                                  (std::get<1>(info.param) ? "_ref" : "_opt");
                         });

TEST(LstmGoldenFiles, AllCasesPresent) {
  EXPECT_GE(lstm_golden_files().size(), 80u);  // an empty folder must not pass vacuously
}

// ---- Finite differences ------------------------------------------------------------------

struct Case {
  const char* name;
  int64_t layers, proj;
  bool bidir, bias, batch_first, unbatched, lengths, h0, c0;
  double dropout;
  bool grad_out, grad_hn, grad_cn;
};
// clang-format off
const Case kCases[] = {
    // name                      L  P  bidir  bias   bf     unb    len    h0     c0     drop grad_out hn  cn
    {"basic",                    1, 0, false, true,  false, false, false, true,  true,  0.0, true,  true,  true},
    {"nobias_c0_only",           1, 0, false, false, false, false, false, false, true,  0.0, true,  false, true},
    {"proj",                     1, 2, false, true,  false, false, false, true,  true,  0.0, true,  true,  true},
    {"l2_bidir_lengths_bf_proj", 2, 3, true,  true,  true,  false, true,  true,  true,  0.0, true,  true,  true},
    {"l3_lengths_gradcn",        3, 0, false, true,  false, false, true,  false, true,  0.0, false, false, true},
    {"bidir_lengths_gradhn",     1, 0, true,  true,  false, false, true,  true,  false, 0.0, false, true,  false},
    {"unbatched_l2_bidir_proj",  2, 2, true,  true,  false, true,  false, true,  true,  0.0, true,  true,  true},
    {"l2_dropout",               2, 0, false, true,  false, false, false, true,  true,  0.4, true,  true,  false},
    {"l3_bidir_dropout_proj",    3, 2, true,  true,  true,  false, true,  true,  true,  0.3, true,  false, true},
};
// clang-format on

class LstmGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(LstmGradCheck, FiniteDifferencesF64) {
  const Case& k = GetParam();
  const int64_t T = 5, N = 3, I = 3, H = 4;
  LstmConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.num_layers = k.layers;
  c.proj_size = k.proj;
  c.bidirectional = k.bidir;
  c.bias = k.bias;
  c.batch_first = k.batch_first;
  c.dropout = k.dropout;
  Lstm lstm(c, DType::f64, 7);
  std::mt19937_64 rng(11);
  const int64_t LD = k.layers * c.directions(), P = c.output_size(), DP = c.directions() * P;
  const Shape xs = k.unbatched ? Shape{T, I} : k.batch_first ? Shape{N, T, I} : Shape{T, N, I};
  const Shape ys = k.unbatched ? Shape{T, DP} : k.batch_first ? Shape{N, T, DP} : Shape{T, N, DP};
  const Shape hs = k.unbatched ? Shape{LD, P} : Shape{LD, N, P};
  const Shape cs = k.unbatched ? Shape{LD, H} : Shape{LD, N, H};
  Tensor x = test::random_tensor(xs, DType::f64, rng);
  Tensor h0 = k.h0 ? test::random_tensor(hs, DType::f64, rng, 0.5) : Tensor();
  Tensor c0 = k.c0 ? test::random_tensor(cs, DType::f64, rng, 0.5) : Tensor();
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, {3, 5, 1}) : Tensor();
  Tensor dy = k.grad_out ? test::random_tensor(ys, DType::f64, rng) : Tensor();
  Tensor dhn = k.grad_hn ? test::random_tensor(hs, DType::f64, rng) : Tensor();
  Tensor dcn = k.grad_cn ? test::random_tensor(cs, DType::f64, rng) : Tensor();
  const uint64_t seed = 5;  // the same dropout mask in every evaluation
  const auto dot = [](const Tensor& a, const Tensor& b) {
    double l = 0;
    if (b.defined())
      for (int64_t i = 0; i < a.numel(); ++i) l += a.at_flat(i) * b.at_flat(i);
    return l;
  };
  auto loss = [&]() {
    LstmTape tape;
    LstmOutput y = lstm.forward_train(x, h0, c0, lengths, tape, seed);
    return dot(y.output, dy) + dot(y.h_n, dhn) + dot(y.c_n, dcn);
  };
  LstmTape tape;
  lstm.forward_train(x, h0, c0, lengths, tape, seed);
  LstmGrads g = lstm.backward(tape, dy, dhn, dcn);
  const double eps = 1e-6;
  auto check = [&](const std::string& name, Tensor param, const Tensor& analytic) {
    ASSERT_EQ(param.shape(), analytic.shape()) << name;
    Tensor numeric = Tensor::empty(param.shape(), DType::f64);
    double* p = param.data<double>();
    for (int64_t i = 0; i < param.numel(); ++i) {
      const double saved = p[i];
      p[i] = saved + eps;
      const double up = loss();
      p[i] = saved - eps;
      const double down = loss();
      p[i] = saved;
      numeric.data<double>()[i] = (up - down) / (2 * eps);
    }
    EXPECT_TRUE(test::all_close(std::string(k.name), name, analytic, numeric, {1e-7, 1e-6}));
  };
  check("grad_input", x, g.dinput);
  if (h0.defined()) check("grad_h0", h0, g.dh0);
  if (c0.defined()) check("grad_c0", c0, g.dc0);
  const auto dstate = g.state_dict(c);
  for (auto& [key, w] : lstm.state_dict()) check("grad." + key, w, dstate.at(key));
}

INSTANTIATE_TEST_SUITE_P(AllOptions, LstmGradCheck, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Kernels against their twins ---------------------------------------------------------

template <typename T>
void kernels_match_reference(double tol) {
  std::mt19937_64 rng(3);
  for (int64_t H : {1, 7, 16, 17, 33, 64, 70}) {
    const int64_t B = 3, G = 4 * H, U = cpu::kUnit<T>, blocks = (H + U - 1) / U;
    const DType dt = dtype_of<T>();
    Tensor a = test::random_tensor({B, G}, dt, rng, 3.0), cp = test::random_tensor({B, H}, dt, rng);
    Tensor a1 = a.clone(), a2 = a.clone(), c1 = Tensor::empty({B, H}, dt),
           c2 = Tensor::empty({B, H}, dt), m1 = Tensor::empty({B, H}, dt),
           m2 = Tensor::empty({B, H}, dt);
    cpu::lstm_gates_forward<T>(B, H, 0, blocks, a1.data<T>(), cp.data<T>(), c1.data<T>(),
                               m1.data<T>(), H, true);
    cpu::ref::lstm_gates_forward<T>(B, H, 0, blocks, a2.data<T>(), cp.data<T>(), c2.data<T>(),
                                    m2.data<T>(), H, true);
    const std::string where = fmt::format("H {}", H);
    EXPECT_TRUE(test::all_close(where, "activations", a1, a2, {tol, tol}));
    EXPECT_TRUE(test::all_close(where, "c", c1, c2, {tol, tol}));
    EXPECT_TRUE(test::all_close(where, "m", m1, m2, {tol, tol}));
    Tensor dm = test::random_tensor({B, H}, dt, rng), dmn = test::random_tensor({B, H}, dt, rng);
    Tensor dc0 = test::random_tensor({B, H}, dt, rng);
    Tensor dc1 = dc0.clone(), dc2 = dc0.clone(), da1 = Tensor::empty({B, G}, dt),
           da2 = Tensor::empty({B, G}, dt), s1 = Tensor::zeros({G}, dt),
           s2 = Tensor::zeros({G}, dt);
    cpu::lstm_gates_backward<T>(B, H, 0, blocks, a2.data<T>(), c2.data<T>(), cp.data<T>(),
                                dm.data<T>(), dmn.data<T>(), 2, dc1.data<T>(), da1.data<T>(),
                                s1.data<T>());
    cpu::ref::lstm_gates_backward<T>(B, H, 0, blocks, a2.data<T>(), c2.data<T>(), cp.data<T>(),
                                     dm.data<T>(), dmn.data<T>(), 2, dc2.data<T>(), da2.data<T>(),
                                     s2.data<T>());
    EXPECT_TRUE(test::all_close(where, "dc", dc1, dc2, {tol, tol}));
    EXPECT_TRUE(test::all_close(where, "da", da1, da2, {tol, tol}));
    EXPECT_TRUE(test::all_close(where, "da_sum", s1, s2, {tol, tol}));
  }
}
TEST(LstmKernels, MatchReferenceF32) {
  kernels_match_reference<float>(2e-6);
}
TEST(LstmKernels, MatchReferenceF64) {
  kernels_match_reference<double>(1e-14);
}

// ---- Invariance and semantics ------------------------------------------------------------

Lstm make_lstm(int64_t L, int64_t H, int64_t P, bool bidir, DType dt = DType::f32) {
  LstmConfig c;
  c.input_size = 5;
  c.hidden_size = H;
  c.num_layers = L;
  c.proj_size = P;
  c.bidirectional = bidir;
  return Lstm(c, dt, 1);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.numel() * dtype_size(x.dtype())) == 0;
}

// A sequence gives the same bits alone or inside a batch, with any lengths and thread count.
TEST(LstmInvariance, RowsAndThreads) {
  for (int64_t P : {0, 7}) {
    Lstm lstm = make_lstm(2, 40, P, true);
    std::mt19937_64 rng(2);
    const int64_t T = 9, N = 5;
    Tensor x = test::random_tensor({T, N, 5}, DType::f32, rng);
    Tensor len = Tensor::from_vector<int64_t>({N}, {9, 4, 9, 1, 6});
    LstmOutput all = lstm.forward(x, {}, {}, len, 0);
    LstmOutput one_thread = lstm.forward(x, {}, {}, len, 1);
    EXPECT_TRUE(same_bits(all.output, one_thread.output));
    EXPECT_TRUE(same_bits(all.c_n, one_thread.c_n));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t ln = len.data<int64_t>()[n];
      Tensor xn = x.slice(0, 0, ln).slice(1, n, n + 1).contiguous();
      LstmOutput r = lstm.forward(xn);
      EXPECT_TRUE(same_bits(r.output, all.output.slice(0, 0, ln).slice(1, n, n + 1))) << n;
      EXPECT_TRUE(same_bits(r.h_n, all.h_n.slice(1, n, n + 1))) << n;
      EXPECT_TRUE(same_bits(r.c_n, all.c_n.slice(1, n, n + 1))) << n;
      if (ln < T) {
        EXPECT_EQ(test::max_abs(all.output.slice(0, ln, T).slice(1, n, n + 1)), 0.0);
      }
    }
    // Training's forward gives the inference bits.
    LstmTape tape;
    LstmOutput tr = lstm.forward_train(x, {}, {}, len, tape);
    EXPECT_TRUE(same_bits(tr.output, all.output));
    EXPECT_TRUE(same_bits(tr.h_n, all.h_n));
  }
}

// Sequences of one length, a batch of 21 on two threads: the same bits as one thread and as
// each sequence alone, with h0 and c0, with and without a projection.
TEST(LstmInvariance, ABatchOnTwoThreads) {
  for (int64_t P : {0, 7}) {
    Lstm lstm = make_lstm(2, 24, P, true);
    std::mt19937_64 rng(3);
    const int64_t T = 6, N = 21, R = 4, Hout = P > 0 ? P : 24;
    Tensor x = test::random_tensor({T, N, 5}, DType::f32, rng);
    Tensor h0 = test::random_tensor({R, N, Hout}, DType::f32, rng);
    Tensor c0 = test::random_tensor({R, N, 24}, DType::f32, rng);
    LstmOutput two = lstm.forward(x, h0, c0, {}, 2);
    LstmOutput one = lstm.forward(x, h0, c0, {}, 1);
    EXPECT_TRUE(same_bits(two.output, one.output));
    EXPECT_TRUE(same_bits(two.h_n, one.h_n));
    EXPECT_TRUE(same_bits(two.c_n, one.c_n));
    for (int64_t n : {int64_t(0), int64_t(10), N - 1}) {
      const auto row = [&](const Tensor& t) { return t.slice(1, n, n + 1).contiguous(); };
      LstmOutput r = lstm.forward(row(x), row(h0), row(c0), {}, 1);
      EXPECT_TRUE(same_bits(r.output, two.output.slice(1, n, n + 1))) << n;
      EXPECT_TRUE(same_bits(r.c_n, two.c_n.slice(1, n, n + 1))) << n;
    }
  }
}

TEST(LstmCellApi, EqualsOneLayerOneStep) {
  LstmCell cell(5, 9);
  std::mt19937_64 rng(4);
  Tensor x = test::random_tensor({3, 5}, DType::f32, rng),
         h = test::random_tensor({3, 9}, DType::f32, rng),
         c = test::random_tensor({3, 9}, DType::f32, rng);
  auto [h1, c1] = cell.forward(x, h, c);
  LstmConfig cfg;
  cfg.input_size = 5;
  cfg.hidden_size = 9;
  Lstm lstm(cfg, {cell.weights()});
  LstmOutput r = lstm.forward(x.unsqueeze(0), h.unsqueeze(0), c.unsqueeze(0));
  EXPECT_TRUE(same_bits(h1, r.h_n.select(0, 0)));
  EXPECT_TRUE(same_bits(c1, r.c_n.select(0, 0)));
}

// One sequence of an f32 cell: the real-time kernel's step, the bits of an LstmStream's first
// frame from the same state and within f32 rounding of the engine's step; unbatched or (1, I),
// h and c given or not. f64 and H > 256 run the engine (its bits).
TEST(LstmCellApi, OneSequenceRunsTheRealTimeKernel) {
  for (int64_t H : {int64_t(9), int64_t(64)}) {
    LstmCell cell(5, H, true, DType::f32, 3);
    std::mt19937_64 rng(5);
    Tensor x = test::random_tensor({1, 5}, DType::f32, rng),
           h = test::random_tensor({1, H}, DType::f32, rng),
           c = test::random_tensor({1, H}, DType::f32, rng);
    LstmConfig cfg;
    cfg.input_size = 5, cfg.hidden_size = H;
    const Lstm lstm(cfg, {cell.weights()});
    LstmOutput r = lstm.forward(x.unsqueeze(0), h.unsqueeze(0), c.unsqueeze(0));
    auto [h1, c1] = cell.forward(x, h, c);
    EXPECT_LE(max_abs_diff(h1, r.h_n.select(0, 0)), 1e-6) << H;
    EXPECT_LE(max_abs_diff(c1, r.c_n.select(0, 0)), 1e-6) << H;
    LstmStream stream(lstm, 1, h.unsqueeze(0), c.unsqueeze(0));
    Tensor hs = Tensor::empty({H}, DType::f32);
    stream.process<float>(x.data<float>(), hs.data<float>(), 1);
    EXPECT_TRUE(same_bits(h1, hs.unsqueeze(0))) << H;
    EXPECT_TRUE(same_bits(c1, stream.cell_state().reshape({1, H}))) << H;
    auto [hu, cu] = cell.forward(x.select(0, 0), h.select(0, 0), c.select(0, 0));
    EXPECT_TRUE(same_bits(hu, h1.select(0, 0)));
    EXPECT_TRUE(same_bits(cu, c1.select(0, 0)));
    auto [hz, cz] = cell.forward(x);  // zero state
    LstmOutput rz = lstm.forward(x.unsqueeze(0));
    EXPECT_LE(max_abs_diff(hz, rz.h_n.select(0, 0)), 1e-6) << H;
  }
  for (auto [H, dt] : {std::pair{int64_t(300), DType::f32}, std::pair{int64_t(9), DType::f64}}) {
    LstmCell cell(4, H, true, dt, 3);
    std::mt19937_64 rng(6);
    Tensor x = test::random_tensor({4}, dt, rng);
    LstmConfig cfg;
    cfg.input_size = 4, cfg.hidden_size = H;
    LstmOutput r = Lstm(cfg, {cell.weights()}).forward(x.unsqueeze(0).unsqueeze(0));
    auto [h1, c1] = cell.forward(x);
    EXPECT_TRUE(same_bits(h1, r.h_n.reshape({H}))) << H;
    EXPECT_TRUE(same_bits(c1, r.c_n.reshape({H}))) << H;
  }
  LstmCell cell(3, 4);
  EXPECT_THAT([&] { cell.forward(Tensor::zeros({3}, DType::f64)); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("dtype")));
  EXPECT_THAT(
      [&] {
        cell.forward(Tensor::zeros({1, 3}, DType::f32), {}, {}, -1);
      },
      testing::ThrowsMessage<Error>(testing::HasSubstr("threads is -1")));
}

// The raw-pointer step: forward()'s bits from the same values (the kernel's for H <= 256, the
// engine's above and written into the caller's memory), null h / c as zeros, h_new and c_new
// may be h and c; an f64 cell, null outputs and threads < 0 are errors.
TEST(LstmCellApi, RawStepGivesForwardsBits) {
  for (int64_t H : {int64_t(1), int64_t(9), int64_t(64), int64_t(300)}) {
    const LstmCell cell(3, H, true, DType::f32, 4);
    std::mt19937_64 rng(7);
    const Tensor x = test::random_tensor({3}, DType::f32, rng),
                 h = test::random_tensor({H}, DType::f32, rng),
                 c = test::random_tensor({H}, DType::f32, rng);
    const auto [h1, c1] = cell.forward(x, h, c);
    Tensor hr = Tensor::empty({H}, DType::f32), cr = Tensor::empty({H}, DType::f32);
    cell.forward(x.data<float>(), h.data<float>(), c.data<float>(), hr.data<float>(),
                 cr.data<float>());
    EXPECT_TRUE(same_bits(hr, h1)) << H;
    EXPECT_TRUE(same_bits(cr, c1)) << H;
    Tensor hi = h.clone(), ci = c.clone();  // in place
    cell.forward(x.data<float>(), hi.data<float>(), ci.data<float>(), hi.data<float>(),
                 ci.data<float>());
    EXPECT_TRUE(same_bits(hi, h1)) << H;
    EXPECT_TRUE(same_bits(ci, c1)) << H;
    const auto [hz, cz] = cell.forward(x);
    cell.forward(x.data<float>(), nullptr, nullptr, hr.data<float>(), cr.data<float>());
    EXPECT_TRUE(same_bits(hr, hz)) << H;
    EXPECT_TRUE(same_bits(cr, cz)) << H;
  }
  const LstmCell cell(3, 4);
  float x[3] = {}, h[4] = {}, c[4] = {};
  EXPECT_THAT([&] { cell.forward(nullptr, h, c, h, c); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("input is null, expected 3")));
  EXPECT_THAT([&] { cell.forward(x, h, c, h, nullptr); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("c_new is null, expected 4")));
  EXPECT_THAT([&] { cell.forward(x, h, c, h, c, -2); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("threads is -2")));
  const LstmCell f64(3, 4, true, DType::f64);
  EXPECT_THAT([&] { f64.forward(x, h, c, h, c); },
              testing::ThrowsMessage<Error>(testing::HasSubstr("takes an f32 cell, not f64")));
}

TEST(LstmDropout, TrainingOnlySeededBetweenLayers) {
  LstmConfig c;
  c.input_size = 5;
  c.hidden_size = 8;
  c.num_layers = 2;
  c.dropout = 0.5;
  Lstm lstm(c, DType::f32, 1);
  std::mt19937_64 rng(2);
  Tensor x = test::random_tensor({6, 3, 5}, DType::f32, rng);
  LstmTape t1, t2, t3;
  LstmOutput a = lstm.forward_train(x, {}, {}, {}, t1, 1);
  LstmOutput b = lstm.forward_train(x, {}, {}, {}, t2, 1);
  LstmOutput d = lstm.forward_train(x, {}, {}, {}, t3, 2);
  EXPECT_TRUE(same_bits(a.output, b.output));
  EXPECT_FALSE(same_bits(a.output, d.output));
  LstmOutput inf = lstm.forward(x);
  EXPECT_FALSE(same_bits(inf.output, a.output));  // inference drops nothing
}

// The real-time kernel against its reference (the equations in double): sizes from one unit to
// many tiles, SIMD tails, with and without bias, calls of 1, 3 and 5 frames; narrow and wide
// tiles give the same bits.
TEST(LstmStreamKernel, MatchesReferenceAndTilesAgree) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  int cases = 0;
  for (int64_t H : {1, 3, 7, 8, 9, 16, 17, 18, 24, 33, 40, 48, 64, 65, 80, 96, 128, 200})
    for (int64_t I : {1, 2, 3, 16})
      for (bool bias : {true, false}) {
        if (!bias && I != 3) continue;
        std::vector<float> wih(4 * H * I), whh(4 * H * H), bih(4 * H), bhh(4 * H);
        for (auto* v : {&wih, &whh, &bih, &bhh})
          for (float& w : *v) w = u(rng) * (v == &whh ? 4.0f / std::sqrt(float(H)) : 1.0f);
        const int64_t T = 9;
        std::vector<float> x(T * I);
        for (float& v : x) v = 2 * u(rng);
        std::vector<float> outs[2];
        for (int narrow = 0; narrow < 2; ++narrow) {
          const cpu::StreamLayer L =
              cpu::lstm_stream_pack(I, H, wih.data(), whh.data(), bias ? bih.data() : nullptr,
                                    bias ? bhh.data() : nullptr, narrow == 1);
          auto scratch = hwy::AllocateAligned<float>(cpu::lstm_stream_scratch(L, T));
          auto state = hwy::AllocateAligned<float>(3 * L.Hp);
          std::fill(state.get(), state.get() + 3 * L.Hp, 0.0f);
          std::vector<double> h(H), c(H), want(T * H);
          for (int64_t j = 0; j < H; ++j) {
            state[j] = static_cast<float>(h[j] = 0.1 * (j % 5));
            state[2 * L.Hp + j] = static_cast<float>(c[j] = -0.2 * (j % 3));
          }
          outs[narrow].assign(T * H, 0.0f);
          for (int64_t t0 : {0, 1, 4})
            cpu::lstm_stream_forward(L,
                                     t0 == 0   ? 1
                                     : t0 == 1 ? 3
                                               : 5,
                                     t0, x.data() + t0 * I, I, state.get(),
                                     {outs[narrow].data() + t0 * H, H}, scratch.get());
          cpu::ref::lstm_stream_forward(I, H, wih.data(), whh.data(), bias ? bih.data() : nullptr,
                                        bias ? bhh.data() : nullptr, T, x.data(), h.data(),
                                        c.data(), want.data());
          const std::string where =
              fmt::format("H {} I {}{}{}", H, I, bias ? "" : " no bias", narrow ? " narrow" : "");
          for (int64_t i = 0; i < T * H; ++i)
            ASSERT_NEAR(outs[narrow][i], want[i], 2e-6 + 1e-5 * std::abs(want[i]))
                << where << " at " << i;
          for (int64_t j = 0; j < H; ++j) {
            ASSERT_EQ(state[j], outs[narrow][(T - 1) * H + j]) << where << ": h is the last output";
            ASSERT_NEAR(state[2 * L.Hp + j], c[j], 2e-6 + 1e-5 * std::abs(c[j])) << where << ": c";
          }
          for (int64_t j = H; j < L.Hp; ++j) ASSERT_EQ(state[j], 0.0f) << where << ": padding";
          ++cases;
        }
        EXPECT_EQ(outs[0], outs[1]) << "H " << H << " I " << I << ": narrow and wide tiles differ";
      }
  EXPECT_GT(cases, 100);
}

// Steps read the recurrent weights in alternating directions beyond 32 KiB of the LSTM's own
// weights (4 H^2 floats: from H 46), not the GRU's 3 H^2 (from H 53): at H 48 the LSTM's 37 KB
// would otherwise be read in the same order every step, larger than a 32 KiB L1.
TEST(LstmStreamKernel, AlternatesBeyond32KiBOfItsOwnWeights) {
  for (int64_t H : {40, 45, 46, 48, 52, 53, 64}) {
    std::vector<float> wih(4 * H), whh(4 * H * H, 0.01f), b(4 * H);
    const cpu::StreamLayer L =
        cpu::lstm_stream_pack(1, H, wih.data(), whh.data(), b.data(), b.data());
    const bool more_than_two_groups = L.Hp / L.V > 2;
    EXPECT_EQ(L.alternate, more_than_two_groups && 4 * H * H * 4 > 32 * 1024) << "H " << H;
    EXPECT_EQ(cpu::stream_alternates(H, 4), H >= 46) << "H " << H;
    EXPECT_EQ(cpu::stream_alternates(H), H >= 53) << "H " << H;
  }
}

// ---- Errors ------------------------------------------------------------------------------

void expect_error(const std::function<void()>& f, std::initializer_list<const char*> pieces) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const char* p : pieces) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

TEST(LstmErrors, BadInputNamesWhatWasExpected) {
  Lstm lstm = make_lstm(1, 6, 0, false);
  std::mt19937_64 rng(1);
  Tensor x = test::random_tensor({4, 2, 5}, DType::f32, rng);
  expect_error(
      [&] {
        lstm.forward(x, test::random_tensor({1, 2, 5}, DType::f32, rng));
      },
      {"h0", "(1, 2, 6)"});
  expect_error(
      [&] {
        lstm.forward(x, {}, test::random_tensor({1, 3, 6}, DType::f32, rng));
      },
      {"c0", "(1, 2, 6)"});
  expect_error([&] { lstm.forward(x.to(DType::f64)); }, {"input", "dtype"});
  expect_error(
      [&] {
        lstm.forward(x, {}, {}, Tensor::from_vector<int64_t>({2}, {0, 4}));
      },
      {"lengths[0]", "1 <= length"});
  expect_error(
      [&] {
        lstm.forward(test::random_tensor({4, 2, 3}, DType::f32, rng));
      },
      {"input_size 5"});
  LstmTape tape;
  lstm.forward_train(x, {}, {}, {}, tape);
  expect_error([&] { lstm.backward(tape, {}, {}, {}); }, {"none of doutput"});
  expect_error(
      [&] {
        lstm.backward(tape, {}, {}, Tensor::zeros({1, 2, 5}, DType::f32));
      },
      {"dc_n", "(1, 2, 6)"});
  LstmConfig bad;
  bad.input_size = 2;
  bad.hidden_size = 4;
  bad.proj_size = 4;
  expect_error([&] { Lstm l(bad); }, {"proj_size is 4", "< hidden_size = 4"});
}

TEST(LstmErrors, StateDictsOfOtherModelsAreRefused) {
  GruConfig g;
  g.input_size = 3;
  g.hidden_size = 8;  // 24 rows: divisible by 4, so only the shapes tell
  Gru gru(g);
  expect_error([&] { Lstm::from_state_dict(gru.state_dict()); }, {"weight_hh_l0", "(24, 6)"});
  auto sd = make_lstm(1, 6, 0, false).state_dict();
  sd["weight_ih_l0_extra"] = sd["weight_ih_l0"];
  expect_error([&] { Lstm::from_state_dict(sd); }, {"unexpected key 'weight_ih_l0_extra'"});
  sd.erase("weight_ih_l0_extra");
  sd.erase("bias_hh_l0");
  expect_error([&] { Lstm::from_state_dict(sd); }, {"missing key 'bias_hh_l0'"});
  auto with_proj = make_lstm(2, 6, 2, false).state_dict();
  with_proj.erase("weight_hr_l1");
  expect_error([&] { Lstm::from_state_dict(with_proj); }, {"missing key 'weight_hr_l1'"});
}

// ---- Streams ------------------------------------------------------------------------------

// Runs `x` (T, N, I) through a fresh stream of `lstm` in calls of `block` frames (process()).
Tensor stream_in_blocks(const Lstm& lstm, const Tensor& x, int64_t block, const GruStreamHead* head,
                        Tensor* h_n = nullptr, Tensor* c_n = nullptr) {
  LstmStream s(lstm, x.size(1));
  if (head) s.set_head(*head);
  const int64_t T = x.size(0), N = x.size(1), I = x.size(2), O = s.output_size();
  Tensor y = Tensor::empty({T, N, O}, x.dtype());
  ops::dispatch_float(x.dtype(), [&](auto t) {
    using F = decltype(t);
    for (int64_t t0 = 0; t0 < T; t0 += block)
      s.process<F>(x.data<F>() + t0 * N * I, y.data<F>() + t0 * N * O, std::min(block, T - t0));
  });
  if (h_n) *h_n = s.state();
  if (c_n) *c_n = s.cell_state();
  return y;
}

// Every path: the same bits however the frames are split into calls, and equal to the whole
// sequence's forward (bit-identical on the engine's path, within f32 rounding on the real-time
// kernel's); state() and cell_state() are h_n and c_n.
TEST(LstmStream, EqualsTheWholeSequenceOnAnySplit) {
  struct Case {
    int64_t L, I, H, P, N;
    DType dt;
    bool realtime;
  };
  for (const Case& k :
       {Case{1, 1, 8, 0, 1, DType::f32, true}, Case{3, 1, 18, 0, 1, DType::f32, true},
        Case{1, 2, 40, 0, 1, DType::f32, true}, Case{2, 3, 17, 0, 1, DType::f32, true},
        Case{1, 1, 64, 0, 1, DType::f32, true}, Case{1, 3, 96, 0, 1, DType::f32, true},
        Case{2, 2, 80, 0, 1, DType::f32, true}, Case{1, 5, 256, 0, 1, DType::f32, true},
        Case{2, 3, 12, 0, 4, DType::f32, false}, Case{2, 3, 12, 0, 1, DType::f64, false},
        Case{2, 3, 12, 5, 1, DType::f32, false}, Case{1, 3, 300, 0, 1, DType::f32, false}}) {
    LstmConfig c;
    c.input_size = k.I, c.hidden_size = k.H, c.num_layers = k.L, c.proj_size = k.P;
    const Lstm lstm(c, k.dt, 3);
    std::mt19937_64 rng(k.H);
    const Tensor x = test::random_tensor({150, k.N, k.I}, k.dt, rng);
    const std::string where =
        fmt::format("L {} I {} H {} P {} N {} {}", k.L, k.I, k.H, k.P, k.N, dtype_name(k.dt));
    Tensor h_n, c_n;
    const Tensor whole = stream_in_blocks(lstm, x, 150, nullptr, &h_n, &c_n);
    for (int64_t block : {1, 7, 64})
      EXPECT_TRUE(same_bits(stream_in_blocks(lstm, x, block, nullptr), whole))
          << where << " block " << block;
    const LstmOutput ref = lstm.forward(x);
    if (k.realtime) {
      EXPECT_FALSE(same_bits(whole, ref.output)) << where << ": not the real-time kernel's result";
      EXPECT_TRUE(test::all_close(where, "output", whole, ref.output, test::tol_for(k.dt)));
      EXPECT_TRUE(test::all_close(where, "c_n", c_n, ref.c_n, test::tol_for(k.dt)));
    } else {
      EXPECT_TRUE(same_bits(whole, ref.output)) << where;
      EXPECT_TRUE(same_bits(c_n, ref.c_n)) << where;
    }
    EXPECT_TRUE(same_bits(h_n.select(0, k.L - 1), whole.select(0, 149))) << where;
  }
}

TEST(LstmStream, InitialStateResetStepAndHead) {
  LstmConfig c;
  c.input_size = 2, c.hidden_size = 20, c.num_layers = 2;
  const Lstm lstm(c, DType::f32, 4);
  std::mt19937_64 rng(1);
  const Tensor x = test::random_tensor({30, 1, 2}, DType::f32, rng);
  const Tensor h0 = test::random_tensor({2, 1, 20}, DType::f32, rng),
               c0 = test::random_tensor({2, 1, 20}, DType::f32, rng);
  LstmStream s(lstm, 1, h0, c0);
  Tensor y = s.step(x);
  const LstmOutput ref = lstm.forward(x, h0, c0);
  const test::Tol tol = test::tol_for(DType::f32);
  EXPECT_TRUE(test::all_close("h0 c0", "output", y, ref.output, tol));
  EXPECT_TRUE(test::all_close("h0 c0", "c_n", s.cell_state(), ref.c_n, tol));
  // reset() goes back to zeros; frame by frame through step() gives the chunk's bits.
  s.reset();
  Tensor first = s.step(x.select(0, 0));
  s.reset();
  EXPECT_TRUE(same_bits(first, s.step(x).select(0, 0)));
  // Unbatched frames and a head: out = W h + b + x.
  LstmStream u(lstm, 0);
  GruStreamHead head;
  head.weight = test::random_tensor({2, 20}, DType::f32, rng);
  head.bias = test::random_tensor({2}, DType::f32, rng);
  head.residual = true;
  u.set_head(head);
  const Tensor yu = u.step(x.select(1, 0));
  const Tensor h = lstm.forward(x.select(1, 0)).output;
  for (int64_t t = 0; t < 30; ++t)
    for (int64_t o = 0; o < 2; ++o) {
      double want = head.bias.at_flat(o) + x.at_flat(t * 2 + o);
      for (int64_t j = 0; j < 20; ++j)
        want += head.weight.at_flat(o * 20 + j) * h.at_flat(t * 20 + j);
      EXPECT_NEAR(yu.at_flat(t * 2 + o), want, 2e-5) << t << " " << o;
    }
}

TEST(LstmStream, Errors) {
  LstmConfig c;
  c.input_size = 2, c.hidden_size = 6, c.bidirectional = true;
  expect_error([&] { LstmStream s(Lstm(c), 1); }, {"bidirectional", "cannot stream"});
  c.bidirectional = false;
  const Lstm lstm(c);
  expect_error([&] { LstmStream s(lstm, 1, {}, {}, -1); }, {"threads is -1", "expected >= 0"});
  expect_error(
      [&] {
        LstmStream s(lstm, 1, {}, Tensor::zeros({1, 1, 5}, DType::f32));
      },
      {"c0", "(1, 1, 6)"});
  LstmStream s(lstm, 2);
  expect_error([&] { s.step(Tensor::zeros({3, 2}, DType::f32)); }, {"frames", "(2, 2)"});
  GruStreamHead bad;
  bad.weight = Tensor::zeros({1, 5}, DType::f32);
  expect_error([&] { s.set_head(bad); }, {"head weight", "(O, 6)"});
}

}  // namespace
}  // namespace grux::test_lstm
