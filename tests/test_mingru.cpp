// minGRU (Feng et al. 2024): the scan-based layer against a sequential f64 oracle stepping
// one t at a time, against PyTorch golden files (outputs, h_n, every gradient), its
// gradients against f64 finite differences, the pointwise kernels against their reference
// twins at SIMD edges, and every error path.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "cpu/mingru_gates.h"
#include "cpu/ref/mingru_gates_ref.h"
#include "grux/error.h"
#include "grux/mingru.h"
#include "grux/runtime.h"
#include "grux/tensor_ops.h"
#include "ops/mingru_internal.h"
#include "test_util.h"

namespace grux::test_mingru {
namespace {

using test::all_close;
using test::random_tensor;
using test::Tol;

// ---- The sequential oracle -------------------------------------------------------------

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}
double g(double v) {
  return v >= 0 ? v + 0.5 : sigmoid(v);
}

struct Seq {
  Tensor output, h_n;  // f64, time-major (T, N, H) and (L, N, H)
};

// The minGRU equations stepped one t at a time in f64: x (T, N, I) time-major, h0 (L, N, H)
// or undefined, len (N) or empty. Weights are read from `m` (converted to f64).
Seq sequential(const MinGru& m, const Tensor& x_in, const Tensor& h0_in,
               const std::vector<int64_t>& len) {
  const MinGruConfig& c = m.config();
  const int64_t T = x_in.size(0), N = x_in.size(1), H = c.hidden_size, L = c.num_layers;
  Tensor x = x_in.to(DType::f64).contiguous();
  Tensor h0 = h0_in.defined() ? h0_in.to(DType::f64).contiguous() : Tensor();
  Tensor h_n = Tensor::empty({L, N, H}, DType::f64);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = c.layer_input_size(l);
    Tensor W = m.weights()[l].weight.to(DType::f64).contiguous();
    Tensor B = m.weights()[l].bias.defined() ? m.weights()[l].bias.to(DType::f64).contiguous()
                                             : Tensor::zeros({2 * H}, DType::f64);
    const double *w = W.data<double>(), *b = B.data<double>(), *xp = x.data<double>();
    std::vector<double> h(N * H);
    for (int64_t i = 0; i < N * H; ++i) {
      const double raw = h0.defined() ? h0.data<double>()[l * N * H + i] : 0.0;
      h[i] = c.log_space ? g(raw) : raw;
    }
    Tensor out = Tensor::zeros({T, N, H}, DType::f64);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        if (!len.empty() && t >= len[n]) continue;  // padding: output 0, state held
        for (int64_t j = 0; j < H; ++j) {
          double kz = b[j], v = b[H + j];
          for (int64_t i = 0; i < in; ++i) {
            kz += w[j * in + i] * xp[(t * N + n) * in + i];
            v += w[(H + j) * in + i] * xp[(t * N + n) * in + i];
          }
          const double z = sigmoid(kz), cand = c.log_space ? g(v) : v;
          h[n * H + j] = (1 - z) * h[n * H + j] + z * cand;
          out.data<double>()[(t * N + n) * H + j] = h[n * H + j];
        }
      }
    std::copy(h.begin(), h.end(), h_n.data<double>() + l * N * H);
    x = out;
  }
  return {x, h_n};
}

// ---- Scan layer vs the sequential oracle ----------------------------------------------

struct Case {
  int64_t T, N, I, H, L;
  bool h0, lengths, batch_first, unbatched, log_space;
  std::string name() const {
    return fmt::format("T{}N{}I{}H{}L{}{}{}{}{}{}", T, N, I, H, L, h0 ? "_h0" : "",
                       lengths ? "_len" : "", batch_first ? "_bf" : "", unbatched ? "_unb" : "",
                       log_space ? "_log" : "");
  }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name();
}

std::vector<int64_t> draw_lengths(int64_t T, int64_t N, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> u(1, T);
  std::vector<int64_t> len(N);
  for (auto& v : len) v = u(rng);
  len[0] = T;  // the longest need not come first, but one sequence is full
  if (N > 1) len[N - 1] = 1;
  return len;
}

// Tolerance of a result that went through a GEMM of length `in` and T scan steps (the scan
// groups its products differently from the step loop; log space adds exp / log rounding).
Tol seq_tol(DType dt, int64_t T, int64_t in) {
  const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
  const double k = 16 * eps * (double(T) + double(in) + 4);
  return {k, k};
}

void check_against_sequential(const Case& c, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  MinGruConfig cfg;
  cfg.input_size = c.I;
  cfg.hidden_size = c.H;
  cfg.num_layers = c.L;
  cfg.batch_first = c.batch_first;
  cfg.log_space = c.log_space;
  MinGru m(cfg, dt, seed);
  const int64_t N = c.unbatched ? 1 : c.N;
  Tensor x = random_tensor({c.T, N, c.I}, dt, rng);  // time-major
  Tensor h0 = c.h0 ? random_tensor({c.L, N, c.H}, dt, rng) : Tensor();
  std::vector<int64_t> len = c.lengths ? draw_lengths(c.T, N, rng) : std::vector<int64_t>{};
  const Seq want = sequential(m, x, h0, len);

  Tensor xin = c.unbatched ? x.select(1, 0) : c.batch_first ? x.transpose(0, 1).contiguous() : x;
  Tensor h0in = c.h0 && c.unbatched ? h0.select(1, 0) : h0;
  Tensor lin = c.lengths ? Tensor::from_vector<int64_t>({N}, len) : Tensor();
  const Tol tol = seq_tol(dt, c.T, std::max(c.I, c.H));
  // Inference (default chunks, one step per chunk, a few steps per chunk) and training (which
  // takes the path that keeps every projection), with both kinds of kernels.
  for (int variant = 0; variant < 8; ++variant) {
    const bool ref = variant >= 4;
    const int64_t chunk_bytes[] = {0, 1, 3000};
    const bool train = variant % 4 == 3;
    set_reference_kernels(ref);
    ops::set_mingru_chunk_bytes(train ? 0 : chunk_bytes[variant % 4]);
    const std::string where =
        fmt::format("{} {}{}{}", c.name(), dtype_name(dt), ref ? " (reference)" : "",
                    train ? " train" : fmt::format(" chunk{}", variant % 4));
    MinGruTape tape;
    MinGruOutput y = train ? m.forward_train(xin, h0in, lin, tape) : m.forward(xin, h0in, lin);
    Tensor out = c.unbatched     ? y.output.unsqueeze(1)
                 : c.batch_first ? y.output.transpose(0, 1)
                                 : y.output;
    Tensor hn = c.unbatched ? y.h_n.unsqueeze(1) : y.h_n;
    EXPECT_TRUE(all_close(where, "output", out.to(DType::f64), want.output, tol));
    EXPECT_TRUE(all_close(where, "h_n", hn.to(DType::f64), want.h_n, tol));
    // Padding is exactly zero.
    for (int64_t n = 0; n < (int64_t)len.size(); ++n)
      for (int64_t t = len[n]; t < c.T; ++t)
        for (int64_t j = 0; j < c.H; ++j) ASSERT_EQ(out.item({t, n, j}), 0.0) << where;
  }
  set_reference_kernels(false);
  ops::set_mingru_chunk_bytes(0);
}

std::vector<Case> sequential_cases() {
  std::vector<Case> cases;
  for (int64_t T : {1, 2, 3, 7, 1000})
    for (bool log_space : {false, true}) {
      cases.push_back({T, 1, 3, 4, 1, false, false, false, false, log_space});
      cases.push_back({T, 1, 3, 4, 1, true, false, false, true, log_space});
      cases.push_back({T, 3, 5, 6, 1, true, true, false, false, log_space});
      cases.push_back({T, 4, 5, 3, 2, false, true, true, false, log_space});
      cases.push_back({T, 5, 4, 17, 3, true, false, true, false, log_space});
      cases.push_back({T, 2, 6, 37, 2, true, true, false, false, log_space});
    }
  // Wide: C = N * H above one channel block of the scan (sequence-parallel path).
  cases.push_back({7, 4, 9, 200, 1, true, true, false, false, false});
  cases.push_back({7, 4, 9, 200, 2, true, false, true, false, true});
  return cases;
}

class MinGruSequential : public ::testing::TestWithParam<Case> {};

TEST_P(MinGruSequential, F64MatchesTheStepLoop) {
  check_against_sequential(GetParam(), DType::f64, 7);
}
TEST_P(MinGruSequential, F32MatchesTheStepLoop) {
  check_against_sequential(GetParam(), DType::f32, 8);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MinGruSequential, ::testing::ValuesIn(sequential_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

// Thread counts: one (the split forward runs as one share), three (shares of unequal width),
// and a call from inside a parallel region (a team of one thread takes every share).
TEST(MinGru, AnyThreadCountMatchesTheStepLoop) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    check_against_sequential({1000, 3, 4, 5, 2, true, true, false, false, false}, DType::f64, 3);
    check_against_sequential({1000, 1, 4, 5, 1, true, false, false, false, true}, DType::f64, 4);
    check_against_sequential({200, 3, 4, 72, 2, true, true, false, false, false}, DType::f32, 5);
    check_against_sequential({200, 3, 4, 72, 2, true, true, false, false, true}, DType::f64, 5);
  }
  omp_set_num_threads(3);
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    check_against_sequential({200, 3, 4, 72, 1, true, true, false, false, false}, DType::f32, 6);
  }
  omp_set_max_active_levels(levels);
  omp_set_num_threads(saved);
}

// Log space keeps long products of (1 - z) that underflow in f32's linear space: strongly
// decaying gates over many steps, against the f64 oracle.
TEST(MinGru, LogSpaceLongSequence) {
  MinGruConfig cfg;
  cfg.input_size = 2;
  cfg.hidden_size = 3;
  cfg.log_space = true;
  MinGru m(cfg, DType::f32, 5);
  std::mt19937_64 rng(6);
  Tensor x = random_tensor({4097, 2, 2}, DType::f32, rng);
  const Seq want = sequential(m, x, {}, {});
  MinGruOutput y = m.forward(x);
  EXPECT_TRUE(all_close("log long", "output", y.output.to(DType::f64), want.output,
                        seq_tol(DType::f32, 4097, 3)));
}

TEST(MinGru, ForwardTrainMatchesForward) {
  MinGruConfig cfg;
  cfg.input_size = 5;
  cfg.hidden_size = 7;
  cfg.num_layers = 2;
  MinGru m(cfg, DType::f32, 1);
  std::mt19937_64 rng(2);
  Tensor x = random_tensor({9, 3, 5}, DType::f32, rng);
  MinGruTape tape;
  MinGruOutput a = m.forward(x), b = m.forward_train(x, {}, {}, tape);
  EXPECT_TRUE(all_close("train", "output", b.output, a.output, Tol{0, 0}));
  EXPECT_TRUE(all_close("train", "h_n", b.h_n, a.h_n, Tol{0, 0}));
  EXPECT_FALSE(tape.empty());
}

// ---- Golden files from PyTorch (tests/reference/gen_scan_golden.py, section 4) ------------

const std::string kGoldenDir = std::string(GRUX_GOLDEN_DIR) + "/scan";

class MinGruGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MinGruGolden, MatchesPyTorch) {
  const std::string name = GetParam();
  SafeTensors st = read_safetensors(kGoldenDir + "/" + name);
  const auto& t = st.tensors;
  const nlohmann::json config = nlohmann::json::parse(st.metadata.at("config"));
  const DType dt = name.find("_f32") != std::string::npos ? DType::f32 : DType::f64;
  MinGruConfig options;
  options.batch_first = t.at("batch_first").item() != 0;
  options.log_space = t.at("log_space").item() != 0;
  std::map<std::string, Tensor> weights;
  for (const auto& [key, v] : t)
    if (key.rfind("weight_l", 0) == 0 || key.rfind("bias_l", 0) == 0) weights[key] = v;
  MinGru m = MinGru::from_state_dict(weights, options);
  EXPECT_EQ(m.config().num_layers, config.at("num_layers").get<int64_t>());
  EXPECT_EQ(m.dtype(), dt);
  const Tensor h0 = t.count("h0") ? t.at("h0") : Tensor();
  const Tensor lengths = t.count("lengths") ? t.at("lengths") : Tensor();
  // f32 files hold f64 results rounded once; ours round at every operation.
  const Tol tol = dt == DType::f32 ? Tol{3e-6, 3e-5} : Tol{1e-12, 1e-11};
  for (bool ref : {false, true}) {
    set_reference_kernels(ref);
    const std::string where = name + (ref ? " (reference kernels)" : "");
    MinGruTape tape;
    MinGruOutput y = m.forward_train(t.at("input"), h0, lengths, tape);
    EXPECT_TRUE(all_close(where, "output", y.output, t.at("output"), tol));
    EXPECT_TRUE(all_close(where, "h_n", y.h_n, t.at("h_n"), tol));
    MinGruOutput y2 = m.forward(t.at("input"), h0, lengths);
    EXPECT_TRUE(all_close(where, "output (forward)", y2.output, t.at("output"), tol));
    MinGruGrads gr = m.backward(tape, t.at("doutput"), t.at("dh_n"));
    EXPECT_TRUE(all_close(where, "d_input", gr.dinput, t.at("d_input"), tol));
    if (t.count("d_h0")) {
      EXPECT_TRUE(all_close(where, "d_h0", gr.dh0, t.at("d_h0"), tol));
    }
    for (const auto& [key, v] : gr.state_dict(m.config()))
      EXPECT_TRUE(all_close(where, "d_" + key, v, t.at("d_" + key), tol));
  }
  set_reference_kernels(false);
}

INSTANTIATE_TEST_SUITE_P(Files, MinGruGolden,
                         ::testing::ValuesIn(test::golden_files(kGoldenDir, {"mingru_"})),
                         test::golden_case_name);

TEST(MinGruGoldenFiles, AreThere) {
  EXPECT_EQ(test::golden_files(kGoldenDir, {"mingru_"}).size(), 18u);
}

// ---- Gradients against f64 finite differences ---------------------------------------------

// loss = sum(output * dout) + sum(h_n * dhn) through forward().
double loss_of(const MinGru& m, const Tensor& x, const Tensor& h0, const Tensor& len,
               const Tensor& dout, const Tensor& dhn) {
  MinGruOutput y = m.forward(x, h0, len);
  double s = 0;
  for (int64_t i = 0; i < y.output.numel(); ++i) s += y.output.at_flat(i) * dout.at_flat(i);
  for (int64_t i = 0; i < y.h_n.numel(); ++i) s += y.h_n.at_flat(i) * dhn.at_flat(i);
  return s;
}

// Central differences of loss w.r.t. every element of `p` (modified in place and restored);
// one-sided (from the right) where the function has a kink at the point.
Tensor numeric_grad(Tensor p, const std::function<double()>& loss, bool one_sided = false) {
  const double eps = 1e-6;
  Tensor gnum = Tensor::empty(p.shape(), DType::f64);
  double* d = p.data<double>();
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double v = d[i];
    d[i] = v + eps;
    const double up = loss();
    d[i] = one_sided ? v : v - eps;
    const double down = loss();
    d[i] = v;
    gnum.data<double>()[i] = (up - down) / (one_sided ? eps : 2 * eps);
  }
  return gnum;
}

struct GradCase {
  int64_t T, N, I, H, L;
  bool h0, lengths, batch_first, unbatched, log_space, bias;
  std::string name() const {
    return fmt::format("T{}N{}I{}H{}L{}{}{}{}{}{}{}", T, N, I, H, L, h0 ? "_h0" : "",
                       lengths ? "_len" : "", batch_first ? "_bf" : "", unbatched ? "_unb" : "",
                       log_space ? "_log" : "", bias ? "" : "_nobias");
  }
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.name();
}

class MinGruGradcheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(MinGruGradcheck, MatchesFiniteDifferences) {
  const GradCase c = GetParam();
  std::mt19937_64 rng(11);
  MinGruConfig cfg;
  cfg.input_size = c.I;
  cfg.hidden_size = c.H;
  cfg.num_layers = c.L;
  cfg.batch_first = c.batch_first;
  cfg.log_space = c.log_space;
  cfg.bias = c.bias;
  MinGru m(cfg, DType::f64, 12);
  const int64_t N = c.unbatched ? 1 : c.N;
  const Shape xs = c.unbatched     ? Shape{c.T, c.I}
                   : c.batch_first ? Shape{N, c.T, c.I}
                                   : Shape{c.T, N, c.I};
  const Shape ys = c.unbatched     ? Shape{c.T, c.H}
                   : c.batch_first ? Shape{N, c.T, c.H}
                                   : Shape{c.T, N, c.H};
  const Shape hs = c.unbatched ? Shape{c.L, c.H} : Shape{c.L, N, c.H};
  Tensor x = random_tensor(xs, DType::f64, rng);
  Tensor h0 = c.h0 ? random_tensor(hs, DType::f64, rng) : Tensor();
  Tensor len = c.lengths ? Tensor::from_vector<int64_t>({N}, draw_lengths(c.T, N, rng)) : Tensor();
  Tensor dout = random_tensor(ys, DType::f64, rng), dhn = random_tensor(hs, DType::f64, rng);
  for (bool ref : {false, true}) {
    set_reference_kernels(ref);
    const std::string where = c.name() + (ref ? " (reference)" : "");
    MinGruTape tape;
    m.forward_train(x, h0, len, tape);
    MinGruGrads gr = m.backward(tape, dout, dhn);
    auto loss = [&] { return loss_of(m, x, h0, len, dout, dhn); };
    const Tol tol{2e-8, 1e-6};
    EXPECT_TRUE(all_close(where, "dinput", gr.dinput, numeric_grad(x, loss), tol));
    if (c.h0) {
      EXPECT_TRUE(all_close(where, "dh0", gr.dh0, numeric_grad(h0, loss), tol));
    } else {
      // Without h0 the gradient is w.r.t. the implicit zeros (g(0) = 0.5 in log space). g
      // has a kink at 0 (slope 1/4 on the left, 1 on the right); like PyTorch's
      // where(v >= 0, ...), the gradient there is the right-hand one.
      Tensor zeros = Tensor::zeros(hs, DType::f64);
      auto loss0 = [&] { return loss_of(m, x, zeros, len, dout, dhn); };
      EXPECT_TRUE(all_close(where, "dh0 (implicit)", gr.dh0,
                            numeric_grad(zeros, loss0, c.log_space),
                            c.log_space ? Tol{1e-5, 1e-5} : tol));
    }
    for (int64_t l = 0; l < c.L; ++l) {
      // Handles to the model's weight storage: numeric_grad perturbs them in place.
      MinGruLayerWeights w = m.weights()[l];
      EXPECT_TRUE(all_close(where, mingru_key("dweight", l), gr.dweights[l].weight,
                            numeric_grad(w.weight, loss), tol));
      if (c.bias)
        EXPECT_TRUE(all_close(where, mingru_key("dbias", l), gr.dweights[l].bias,
                              numeric_grad(w.bias, loss), tol));
      else
        EXPECT_FALSE(gr.dweights[l].bias.defined());
    }
    // Only one of the two upstream gradients.
    MinGruGrads only_out = m.backward(tape, dout, {});
    MinGruGrads only_hn = m.backward(tape, {}, dhn);
    EXPECT_TRUE(all_close(where, "dinput (split)", add(only_out.dinput, only_hn.dinput), gr.dinput,
                          Tol{1e-12, 1e-10}));
  }
  set_reference_kernels(false);
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cases;
  for (bool log_space : {false, true}) {
    cases.push_back({4, 2, 3, 3, 1, true, false, false, false, log_space, true});
    cases.push_back({4, 2, 3, 3, 1, false, false, false, false, log_space, true});
    cases.push_back({5, 3, 2, 3, 2, true, true, false, false, log_space, true});
    cases.push_back({5, 3, 2, 3, 2, false, true, true, false, log_space, true});
    cases.push_back({3, 1, 2, 4, 3, true, false, false, true, log_space, true});
    cases.push_back({1, 2, 3, 2, 2, true, false, false, false, log_space, false});
    cases.push_back({6, 2, 3, 3, 1, true, true, false, false, log_space, false});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MinGruGradcheck, ::testing::ValuesIn(grad_cases()),
                         [](const ::testing::TestParamInfo<GradCase>& i) {
                           return i.param.name();
                         });

TEST(MinGru, PaddedInputsGetZeroGradient) {
  MinGruConfig cfg;
  cfg.input_size = 3;
  cfg.hidden_size = 4;
  cfg.num_layers = 2;
  MinGru m(cfg, DType::f32, 1);
  std::mt19937_64 rng(3);
  Tensor x = random_tensor({6, 3, 3}, DType::f32, rng);
  Tensor len = Tensor::from_vector<int64_t>({3}, {2, 6, 1});
  MinGruTape tape;
  MinGruOutput y = m.forward_train(x, {}, len, tape);
  MinGruGrads gr = m.backward(tape, random_tensor(y.output.shape(), DType::f32, rng),
                              random_tensor(y.h_n.shape(), DType::f32, rng));
  for (int64_t n : {0, 2})
    for (int64_t t = n == 0 ? 2 : 1; t < 6; ++t)
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(gr.dinput.item({t, n, i}), 0.0);
}

// ---- Pointwise kernels against their reference twins ----------------------------------------

template <typename T>
T* ptr(Tensor t) {  // a handle copy: writes reach the same storage
  return t.data<T>();
}

template <typename T>
void check_kernels(int64_t N, int64_t H, int64_t Tn, bool padding, bool with_bias, double scale) {
  std::mt19937_64 rng(static_cast<uint64_t>(N * 1000 + H * 10 + Tn));
  const DType dt = dtype_of<T>();
  const int64_t rows = Tn * N;
  Tensor k = random_tensor({rows, 2 * H}, dt, rng, scale);
  Tensor bias = random_tensor({2 * H}, dt, rng);
  Tensor h0 = random_tensor({N, H}, dt, rng), h = random_tensor({rows, H}, dt, rng);
  Tensor G = random_tensor({rows, H}, dt, rng);
  std::vector<int64_t> lenv = padding ? draw_lengths(Tn, N, rng) : std::vector<int64_t>{};
  const int64_t* len = padding ? lenv.data() : nullptr;
  const T* b = with_bias ? ptr<T>(bias) : nullptr;
  const std::string where = fmt::format("{} N{} H{} T{} scale {}{}", dtype_name(dt), N, H, Tn,
                                        scale, padding ? " padded" : "");
  // Sigmoids and logs of O(1) arguments: a few ulps each.
  const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
  const Tol tol{16 * eps, 16 * eps};
  auto pair = [&](int64_t w) {
    return std::pair{Tensor::empty({rows, w}, dt), Tensor::empty({rows, w}, dt)};
  };
  {
    auto [a1, a2] = pair(H);
    auto [b1, b2] = pair(H);
    // Split the rows in two calls to exercise r0 > 0.
    const int64_t mid = rows / 2;
    cpu::mingru_forward_coeffs<T>(0, mid, 0, N, H, len, ptr<T>(k), b, ptr<T>(a1), ptr<T>(b1));
    cpu::mingru_forward_coeffs<T>(mid, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a1), ptr<T>(b1));
    cpu::ref::mingru_forward_coeffs<T>(0, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a2), ptr<T>(b2));
    // a = 1 - z cancels in the reference for large k_z: compare absolutely.
    EXPECT_TRUE(all_close(where, "a", a1, a2, tol));
    EXPECT_TRUE(all_close(where, "b", b1, b2, Tol{tol.atol * scale, tol.rtol}));
  }
  {
    auto [a1, a2] = pair(H);
    auto [b1, b2] = pair(H);
    cpu::mingru_forward_log_coeffs<T>(0, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a1), ptr<T>(b1));
    cpu::ref::mingru_forward_log_coeffs<T>(0, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a2),
                                           ptr<T>(b2));
    EXPECT_TRUE(all_close(where, "log a", a1, a2, tol));
    EXPECT_TRUE(all_close(where, "log b", b1, b2, Tol{8 * tol.atol, tol.rtol}));
  }
  {
    auto [a1, a2] = pair(H);
    cpu::mingru_backward_decay<T>(0, rows, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a1));
    cpu::ref::mingru_backward_decay<T>(0, rows, rows, 0, N, H, len, ptr<T>(k), b, ptr<T>(a2));
    EXPECT_TRUE(all_close(where, "a_next", a1, a2, tol));
  }
  for (bool log_space : {false, true}) {
    auto [d1, d2] = pair(2 * H);
    Tensor dh1 = Tensor::empty({N, H}, dt), dh2 = Tensor::empty({N, H}, dt);
    cpu::mingru_backward<T>(0, rows, 0, N, H, len, log_space, ptr<T>(k), b, ptr<T>(h0), ptr<T>(h),
                            ptr<T>(G), ptr<T>(d1), ptr<T>(dh1));
    cpu::ref::mingru_backward<T>(0, rows, 0, N, H, len, log_space, ptr<T>(k), b, ptr<T>(h0),
                                 ptr<T>(h), ptr<T>(G), ptr<T>(d2), ptr<T>(dh2));
    const Tol t2{tol.atol * 4 * scale, tol.rtol * 4};
    EXPECT_TRUE(all_close(where + (log_space ? " log" : ""), "dk", d1, d2, t2));
    EXPECT_TRUE(all_close(where + (log_space ? " log" : ""), "dh0", dh1, dh2, t2));
  }
}

TEST(MinGruKernels, MatchReferenceAtSimdEdges) {
  for (int64_t H : {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 67})
    for (int64_t N : {1, 3})
      for (bool padding : {false, true}) {
        check_kernels<float>(N, H, 5, padding, true, 1.0);
        check_kernels<double>(N, H, 5, padding, H % 2 == 0, 1.0);
      }
}

TEST(MinGruKernels, SaturatedGates) {
  // |k| up to ~100: exp(-|k|) underflows; z and 1 - z must stay exact 0 / 1, no NaN.
  check_kernels<float>(2, 19, 4, true, true, 40.0);
  check_kernels<double>(2, 19, 4, true, true, 300.0);
}

// ---- API -----------------------------------------------------------------------------------

TEST(MinGru, StateDictRoundTrip) {
  MinGruConfig cfg;
  cfg.input_size = 4;
  cfg.hidden_size = 6;
  cfg.num_layers = 3;
  MinGru m(cfg, DType::f64, 9);
  auto sd = m.state_dict();
  EXPECT_EQ(sd.size(), 6u);
  EXPECT_EQ(sd.at("weight_l0").shape(), (Shape{12, 4}));
  EXPECT_EQ(sd.at("weight_l2").shape(), (Shape{12, 6}));
  EXPECT_EQ(sd.at("bias_l1").shape(), (Shape{12}));
  MinGruConfig opt;
  opt.log_space = true;
  MinGru m2 = MinGru::from_state_dict(sd, opt);
  EXPECT_EQ(m2.config().input_size, 4);
  EXPECT_EQ(m2.config().hidden_size, 6);
  EXPECT_EQ(m2.config().num_layers, 3);
  EXPECT_TRUE(m2.config().bias);
  EXPECT_TRUE(m2.config().log_space);
  // The same seed draws the same weights; bounds are 1/sqrt(fan_in).
  MinGru m3(cfg, DType::f64, 9);
  EXPECT_TRUE(
      all_close("seed", "weight_l0", m3.weights()[0].weight, sd.at("weight_l0"), Tol{0, 0}));
  EXPECT_LE(test::max_abs(sd.at("weight_l0")), 0.5);
  EXPECT_LE(test::max_abs(sd.at("weight_l1")), 1 / std::sqrt(6.0));
  cfg.bias = false;
  MinGru nb(cfg, DType::f32);
  EXPECT_EQ(nb.state_dict().size(), 3u);
  EXPECT_FALSE(MinGru::from_state_dict(nb.state_dict()).config().bias);
}

void expect_error(const std::function<void()>& f, const std::string& piece) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << piece << "'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(piece));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(MinGru, ErrorsNameWhatWasWrong) {
  MinGruConfig cfg;
  cfg.input_size = 3;
  cfg.hidden_size = 4;
  cfg.num_layers = 2;
  MinGru m(cfg, DType::f32);
  const Tensor x = Tensor::zeros({5, 2, 3}, DType::f32);
  // Configuration.
  expect_error([] { MinGru(MinGruConfig{}); }, "mingru: input_size is 0, expected >= 1");
  expect_error([] { MinGru(MinGruConfig{3, 0}); }, "hidden_size is 0");
  expect_error([] { MinGru(MinGruConfig{3, 4, 0}); }, "num_layers is 0");
  expect_error([&] { MinGru(cfg, DType::i64); }, "dtype i64 is not supported");
  expect_error([&] { MinGru(cfg, std::vector<MinGruLayerWeights>(1)); },
               "1 weight sets given, expected num_layers = 2");
  // Inputs.
  expect_error([&] { m.forward(Tensor()); }, "input");
  expect_error(
      [&] {
        m.forward(Tensor::zeros({5, 2, 3}, DType::f64));
      },
      "input has dtype f64 but the weights have dtype f32");
  expect_error([&] { m.forward(Tensor::zeros({5}, DType::f32)); },
               "input has shape (5,), expected (T, N, I)");
  expect_error(
      [&] {
        m.forward(Tensor::zeros({5, 2, 4}, DType::f32));
      },
      "feature size 4, expected input_size 3");
  expect_error(
      [&] {
        m.forward(Tensor::zeros({0, 2, 3}, DType::f32));
      },
      "expected at least one time step");
  expect_error([&] { m.forward(x, Tensor::zeros({2, 3, 4}, DType::f32)); }, "h0");
  expect_error([&] { m.forward(x, Tensor::zeros({2, 2, 4}, DType::f64)); }, "h0");
  expect_error(
      [&] {
        m.forward(x, {}, Tensor::from_vector<int64_t>({2}, {5, 6}));
      },
      "lengths[1] = 6 is out of range (expected 1 <= length <= T = 5)");
  expect_error(
      [&] {
        m.forward(x, {}, Tensor::from_vector<int64_t>({2}, {0, 5}));
      },
      "lengths[0] = 0 is out of range");
  expect_error([&] { m.forward(x, {}, Tensor::from_vector<int64_t>({3}, {1, 2, 3})); }, "lengths");
  expect_error([&] { m.forward(x, {}, Tensor::zeros({2}, DType::f32)); }, "lengths");
  expect_error(
      [&] {
        m.forward(Tensor::zeros({5, 3}, DType::f32), {}, Tensor::from_vector<int64_t>({1}, {5}));
      },
      "lengths given with unbatched input");
  // Backward.
  MinGruTape empty;
  expect_error([&] { m.backward(empty, x, {}); }, "the tape is empty");
  MinGruTape tape;
  MinGruOutput y = m.forward_train(x, {}, {}, tape);
  expect_error([&] { m.backward(tape, {}, {}); }, "neither doutput nor dh_n");
  expect_error([&] { m.backward(tape, Tensor::zeros({5, 2, 5}, DType::f32), {}); }, "doutput");
  expect_error([&] { m.backward(tape, y.output.to(DType::f64), {}); },
               "doutput has dtype f64, expected f32");
  expect_error([&] { m.backward(tape, {}, Tensor::zeros({1, 2, 4}, DType::f32)); }, "dh_n");
  MinGru m64(cfg, DType::f64);
  expect_error([&] { m64.backward(tape, y.output.to(DType::f64), {}); }, "another dtype");
  // Weights.
  auto sd = m.state_dict();
  auto missing = sd;
  missing.erase("weight_l1");
  expect_error([&] { MinGru::from_state_dict(missing); }, "missing key 'weight_l1'");
  auto extra = sd;
  extra["weight_ih_l0"] = sd.at("weight_l0");
  expect_error([&] { MinGru::from_state_dict(extra); }, "unexpected key 'weight_ih_l0'");
  auto extra_layer = sd;
  extra_layer["bias_l2"] = sd.at("bias_l0");
  expect_error([&] { MinGru::from_state_dict(extra_layer); }, "missing key 'weight_l2'");
  auto odd = sd;
  odd["weight_l0"] = Tensor::zeros({7, 3}, DType::f32);
  expect_error([&] { MinGru::from_state_dict(odd); }, "'weight_l0' has shape (7, 3)");
  auto bad = sd;
  bad["weight_l1"] = Tensor::zeros({8, 3}, DType::f32);
  expect_error([&] { MinGru::from_state_dict(bad); },
               "weight 'weight_l1' has shape (8, 3), expected (8, 4)");
  auto mixed = sd;
  mixed["bias_l1"] = sd.at("bias_l1").to(DType::f64);
  expect_error([&] { MinGru::from_state_dict(mixed); }, "weight 'bias_l1' has dtype f64");
  auto nobias0 = sd;
  nobias0.erase("bias_l0");
  expect_error([&] { MinGru::from_state_dict(nobias0); }, "unexpected key 'bias_l1'");
}

// ---- grux bench mingru ------------------------------------------------------------------

TEST(MinGruBench, PrintsOneCheckedJsonLine) {
  test::TempDir tmp;
  for (const char* extra : {"", " --train", " --log-space --dtype f64", " --train --log-space"}) {
    test::CliRun r = test::grux_cli(
        tmp.path, std::string("bench mingru l2t40n3i5h20 --threads 1 --reps 2") + extra);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    for (const char* field : {"\"op\":\"mingru\"", "\"problem\":\"l2t40n3i5h20\"", "\"median_ms\":",
                              "\"gru_median_ms\":", "\"speedup_vs_gru\":", "\"cpu_ms\":",
                              "\"gemm_median_ms\":", "\"speedup_bound\":", "\"checked\":true"})
      EXPECT_THAT(r.out, ::testing::HasSubstr(field)) << extra;
  }
}

TEST(MinGruBench, RefusesToTimeAWrongResultAndBadArguments) {
  test::TempDir tmp;
  test::CliRun r =
      test::grux_cli(tmp.path, "bench mingru t40n2i3h4 --threads 1 --reps 1 --inject-mismatch");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, ::testing::HasSubstr("differs from the reference"));
  test::expect_user_error(test::grux_cli(tmp.path, "bench mingru l1d2t5n2i3h4"),
                          {"unidirectional", "d1"});
  test::expect_user_error(test::grux_cli(tmp.path, "bench mingru t5n2i3"), {"malformed"});
  test::expect_user_error(test::grux_cli(tmp.path, "bench mingru t5n2i3h4 --dtype f16"), {"f16"});
  test::expect_user_error(test::grux_cli(tmp.path, "bench mingru t5n2i3h4 --reps 0"), {"--reps 0"});
}

}  // namespace
}  // namespace grux::test_mingru
