// The LSTM (nn.LSTM / nn.LSTMCell): against PyTorch golden files (tests/reference/golden/lstm,
// written by gen_lstm_golden.py, which also checks PyTorch against its own implementation of
// the equations), finite differences in f64 for every gradient, the gate kernels against their
// reference twins, row and thread invariance, and the errors of bad input.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cpu/gemm_packed.h"
#include "cpu/lstm_gates.h"
#include "cpu/ref/lstm_gates_ref.h"
#include "grux/io.h"
#include "grux/lstm.h"
#include "grux/runtime.h"
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
      if (ln < T) EXPECT_EQ(test::max_abs(all.output.slice(0, ln, T).slice(1, n, n + 1)), 0.0);
    }
    // Training's forward gives the inference bits.
    LstmTape tape;
    LstmOutput tr = lstm.forward_train(x, {}, {}, len, tape);
    EXPECT_TRUE(same_bits(tr.output, all.output));
    EXPECT_TRUE(same_bits(tr.h_n, all.h_n));
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

}  // namespace
}  // namespace grux::test_lstm
