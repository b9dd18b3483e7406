// conv1d / conv2d: every PyTorch golden case with every algorithm, the three algorithms agreeing
// on random problems, f64 finite-difference gradients, thread-count invariance, error paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "grux/conv.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_conv {
namespace {

using ::testing::HasSubstr;
const ConvAlgo kAlgos[] = {ConvAlgo::loops, ConvAlgo::im2col, ConvAlgo::toeplitz};

// Options of either rank, so that conv1d and conv2d cases share one harness.
struct Conv {
  int dims = 2;
  Conv2dOptions o2;
  Conv1dOptions o1;
  void set_algo(ConvAlgo a) { o2.algo = o1.algo = a; }
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) const {
    return dims == 2 ? conv2d_forward(x, w, b, o2) : conv1d_forward(x, w, b, o1);
  }
  ConvGrads backward(const Tensor& dy, const Tensor& x, const Tensor& w, bool bias) const {
    return dims == 2 ? conv2d_backward(x, w, dy, bias, o2) : conv1d_backward(x, w, dy, bias, o1);
  }
};

// Tolerance from the reduction: a sum of `terms` products carries a rounding error of about
// eps * terms * (size of the terms); the tensor's largest value stands for that size. The
// factor 4 covers the reference's rounding (PyTorch or our own f32 GEMM) on the other side.
test::Tol reduction_tol(DType t, int64_t terms, const Tensor& expected) {
  const double eps = t == DType::f32 ? std::numeric_limits<float>::epsilon()
                                     : std::numeric_limits<double>::epsilon();
  double scale = 1;
  for (int64_t i = 0; i < expected.numel(); ++i)
    scale = std::max(scale, std::abs(expected.at_flat(i)));
  const double e = 4 * eps * double(std::max<int64_t>(terms, 1));
  return {e * scale, e};
}

// The reduction lengths of output, grad_input and grad_weight / grad_bias of a problem.
struct Terms {
  int64_t out, in, weight;
};
Terms terms_of(const Tensor& x, const Tensor& w, const Tensor& y, int64_t groups) {
  int64_t k = 1, pixels = 1;
  for (int64_t d = 2; d < w.dim(); ++d) k *= w.size(d);
  for (int64_t d = 0; d < y.dim(); ++d)
    if (d != (y.dim() == x.dim() ? 1 : 0)) pixels *= y.size(d);
  return {w.size(1) * k, (w.size(0) / groups) * k, pixels};
}

// ---- Golden files --------------------------------------------------------------------------

struct GoldenCase {
  std::string name;
  Conv conv;
  bool bias = false;
  int64_t groups = 1;
};

std::string golden_dir() {
  return std::string(GRUX_GOLDEN_DIR) + "/conv";
}

std::vector<GoldenCase> golden_cases() {
  std::ifstream f(golden_dir() + "/cases.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    GoldenCase g;
    g.name = c["name"];
    g.conv.dims = c["dims"];
    g.bias = c["bias"];
    g.groups = c["groups"];
    auto v = [&](const char* k, int i) { return c[k][i].get<int64_t>(); };
    if (g.conv.dims == 2) {
      g.conv.o2.stride = {v("stride", 0), v("stride", 1)};
      g.conv.o2.padding = {v("padding", 0), v("padding", 1)};
      g.conv.o2.dilation = {v("dilation", 0), v("dilation", 1)};
      g.conv.o2.groups = g.groups;
    } else {
      g.conv.o1.stride = v("stride", 0);
      g.conv.o1.padding = v("padding", 0);
      g.conv.o1.dilation = v("dilation", 0);
      g.conv.o1.groups = g.groups;
    }
    cases.push_back(g);
  }
  return cases;
}

Tensor golden_tensor(const std::string& name, const char* what) {
  const std::string path = golden_dir() + "/" + name + "/" + what + ".npy";
  return std::filesystem::exists(path) ? read_npy(path) : Tensor();
}

class ConvGolden : public ::testing::TestWithParam<std::tuple<GoldenCase, ConvAlgo>> {};

TEST_P(ConvGolden, MatchesPyTorch) {
  GoldenCase k = std::get<0>(GetParam());
  const ConvAlgo algo = std::get<1>(GetParam());
  k.conv.set_algo(algo);
  const std::string where = k.name + " (" + conv_algo_name(algo) + ")";
  auto t = [&](const char* what) { return golden_tensor(k.name, what); };
  const Tensor x = t("input"), w = t("weight"), b = t("bias"), dy = t("grad_output");
  ASSERT_TRUE(x.defined() && w.defined() && dy.defined()) << "regenerate: /usr/bin/python3 "
                                                             "tests/reference/gen_conv_golden.py";
  ASSERT_EQ(b.defined(), k.bias);
  const Tensor y = k.conv.forward(x, w, b);
  const Terms n = terms_of(x, w, y, k.groups);
  const DType dt = x.dtype();
  EXPECT_TRUE(test::all_close(where, "output", y, t("output"), reduction_tol(dt, n.out, y)));
  const ConvGrads g = k.conv.backward(dy, x, w, k.bias);
  EXPECT_TRUE(test::all_close(where, "grad_input", g.dinput, t("grad_input"),
                              reduction_tol(dt, n.in, t("grad_input"))));
  EXPECT_TRUE(test::all_close(where, "grad_weight", g.dweight, t("grad_weight"),
                              reduction_tol(dt, n.weight, t("grad_weight"))));
  if (k.bias) {
    EXPECT_TRUE(test::all_close(where, "grad_bias", g.dbias, t("grad_bias"),
                                reduction_tol(dt, n.weight, t("grad_bias"))));
  } else {
    EXPECT_FALSE(g.dbias.defined());
  }
}

INSTANTIATE_TEST_SUITE_P(AllCasesAllAlgos, ConvGolden,
                         ::testing::Combine(::testing::ValuesIn(golden_cases()),
                                            ::testing::ValuesIn(kAlgos)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  conv_algo_name(std::get<1>(info.param));
                         });

TEST(ConvGoldenFiles, AllPresent) {
  const auto cases = golden_cases();
  EXPECT_EQ(cases.size(), 30u);
}

// ---- The algorithms agree on random problems ---------------------------------------------

struct RandomCase {
  const char* name;
  int64_t N, C, H, W, D, KH, KW;
  Pair2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};
std::ostream& operator<<(std::ostream& os, const RandomCase& c) {
  return os << c.name;
}

// clang-format off
const RandomCase kRandom[] = {
    // name                 N  C   H   W   D  KH KW stride   padding  dilation groups bias
    {"n1_blas_mode",        1, 5,  11, 9,  7, 3, 3, 1,       1,       1,       1,  true},
    {"n5_odd_batch",        5, 3,  8,  13, 4, 3, 5, {1, 2},  {2, 1},  1,       1,  true},
    {"primes",              3, 7,  13, 11, 5, 5, 3, {2, 3},  {2, 0},  {1, 2},  1,  false},
    {"groups4",             4, 8,  9,  9,  12, 3, 3, 2,      1,       1,       4,  true},
    {"depthwise",           2, 6,  10, 7,  6, 3, 3, 1,       1,       2,       6,  true},
    {"pointwise",           3, 9,  6,  5,  4, 1, 1, 1,       0,       1,       1,  true},
    {"pointwise_groups",    2, 8,  5,  7,  6, 1, 1, 1,       0,       1,       2,  false},
    {"pad_over_kernel",     2, 2,  3,  4,  3, 2, 2, 1,       3,       1,       1,  true},
    {"stride_over_kernel",  2, 3,  17, 16, 2, 2, 3, {4, 5},  0,       1,       1,  true},
    {"wide_row_1xk",        2, 3,  1,  40, 4, 1, 7, 1,       {0, 3},  {1, 2},  1,  true},
    {"big_batch_chunks",    20, 2, 6,  6,  3, 3, 3, 1,       1,       1,       1,  true},
    // More output pixels than one im2col block (1024 here): blocks end inside an output row.
    {"multi_block",         2, 2,  40, 37, 1, 3, 3, 1,       1,       1,       1,  true},
    {"multi_block_strided", 1, 1,  70, 70, 1, 3, 3, 2,       1,       {1, 2},  1,  false},
    // Stride 1 runs the GEMMs on shifted views of the image (im2col.cpp): no padding (the image
    // read in place; the batch's last image copied), batch 1, groups, reduction lengths over
    // the GEMM's K chunk (Kg 270, D/G*KH*KW 279), D/G around the panels of dy^T (17, 40).
    {"s1_unpadded_n1",      1, 3,  9,  9,  5, 3, 3, 1,       0,       1,       1,  true},
    {"s1_unpadded_dil",     3, 4,  10, 23, 9, 3, 2, 1,       0,       {2, 1},  1,  true},
    {"s1_groups3_asym_pad", 2, 9,  7,  12, 6, 3, 3, 1,       {1, 2},  1,       3,  true},
    {"s1_long_k",           2, 30, 9,  11, 31, 3, 3, 1,      1,       1,       1,  false},
    {"s1_dg17_k1x3",        2, 2,  5,  50, 17, 1, 3, 1,      {0, 1},  {1, 3},  1,  true},
    {"s1_dg40_groups2",     1, 4,  6,  7,  80, 2, 2, 1,      {2, 0},  1,       2,  true},
};
// clang-format on

class ConvAgree : public ::testing::TestWithParam<std::tuple<RandomCase, DType>> {};

TEST_P(ConvAgree, Im2colAndToeplitzMatchLoops) {
  const RandomCase& c = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  std::mt19937_64 rng(42);
  const Tensor x = test::random_tensor({c.N, c.C, c.H, c.W}, dt, rng);
  const Tensor w = test::random_tensor({c.D, c.C / c.groups, c.KH, c.KW}, dt, rng, 0.5);
  const Tensor b = c.bias ? test::random_tensor({c.D}, dt, rng) : Tensor();
  Conv2dOptions o{c.stride, c.padding, c.dilation, c.groups, ConvAlgo::loops};
  const Tensor y_ref = conv2d_forward(x, w, b, o);
  const Tensor dy = test::random_tensor(y_ref.shape(), dt, rng);
  const ConvGrads g_ref = conv2d_backward(x, w, dy, c.bias, o);
  const Terms n = terms_of(x, w, y_ref, c.groups);
  for (ConvAlgo a : {ConvAlgo::im2col, ConvAlgo::toeplitz}) {
    o.algo = a;
    const std::string where = std::string(c.name) + " " + dtype_name(dt) + " " + conv_algo_name(a);
    EXPECT_TRUE(test::all_close(where, "output", conv2d_forward(x, w, b, o), y_ref,
                                reduction_tol(dt, n.out, y_ref)));
    const ConvGrads g = conv2d_backward(x, w, dy, c.bias, o);
    EXPECT_TRUE(test::all_close(where, "grad_input", g.dinput, g_ref.dinput,
                                reduction_tol(dt, n.in, g_ref.dinput)));
    EXPECT_TRUE(test::all_close(where, "grad_weight", g.dweight, g_ref.dweight,
                                reduction_tol(dt, n.weight, g_ref.dweight)));
    if (c.bias) {
      EXPECT_TRUE(test::all_close(where, "grad_bias", g.dbias, g_ref.dbias,
                                  reduction_tol(dt, n.weight, g_ref.dbias)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Random, ConvAgree,
                         ::testing::Combine(::testing::ValuesIn(kRandom),
                                            ::testing::Values(DType::f32, DType::f64)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// conv1d is conv2d on a height-1 image.
TEST(Conv1d, EqualsConv2dWithHeightOne) {
  std::mt19937_64 rng(3);
  const Tensor x = test::random_tensor({3, 4, 19}, DType::f64, rng);
  const Tensor w = test::random_tensor({6, 2, 4}, DType::f64, rng);
  const Tensor b = test::random_tensor({6}, DType::f64, rng);
  Conv1dOptions o1{3, 2, 2, 2, ConvAlgo::im2col};
  Conv2dOptions o2{{1, 3}, {0, 2}, {1, 2}, 2, ConvAlgo::im2col};
  const Tensor y1 = conv1d_forward(x, w, b, o1);
  const Tensor y2 = conv2d_forward(x.unsqueeze(2), w.unsqueeze(2), b, o2);
  EXPECT_EQ(max_abs_diff(y1, y2.squeeze(2)), 0.0);
  const Tensor dy = test::random_tensor(y1.shape(), DType::f64, rng);
  const ConvGrads g1 = conv1d_backward(x, w, dy, true, o1);
  const ConvGrads g2 = conv2d_backward(x.unsqueeze(2), w.unsqueeze(2), dy.unsqueeze(2), true, o2);
  EXPECT_EQ(max_abs_diff(g1.dinput, g2.dinput.squeeze(2)), 0.0);
  EXPECT_EQ(max_abs_diff(g1.dweight, g2.dweight.squeeze(2)), 0.0);
  EXPECT_EQ(max_abs_diff(g1.dbias, g2.dbias), 0.0);
}

// Unbatched (C, H, W) input gives the batch-of-one result without the batch axis.
TEST(Conv2d, UnbatchedAndStridedInputs) {
  std::mt19937_64 rng(4);
  const Tensor x = test::random_tensor({1, 3, 6, 7}, DType::f64, rng);
  const Tensor w = test::random_tensor({2, 3, 3, 3}, DType::f64, rng);
  for (ConvAlgo a : kAlgos) {
    Conv2dOptions o;
    o.algo = a;
    o.padding = 1;
    const Tensor y = conv2d_forward(x, w, {}, o);
    const Tensor yu = conv2d_forward(x.select(0, 0), w, {}, o);
    EXPECT_EQ(yu.shape(), (Shape{2, 6, 7}));
    EXPECT_EQ(max_abs_diff(yu, y.select(0, 0)), 0.0);
    const Tensor dy = test::random_tensor(yu.shape(), DType::f64, rng);
    const ConvGrads g = conv2d_backward(x.select(0, 0), w, dy, false, o);
    EXPECT_EQ(g.dinput.shape(), (Shape{3, 6, 7}));
    // A transposed (non-contiguous) view gives the same answer as its contiguous copy.
    const Tensor xt = test::random_tensor({3, 7, 6}, DType::f64, rng).transpose(1, 2);
    ASSERT_FALSE(xt.is_contiguous());
    EXPECT_EQ(max_abs_diff(conv2d_forward(xt, w, {}, o), conv2d_forward(xt.clone(), w, {}, o)),
              0.0);
  }
}

// An empty batch is valid (as in PyTorch): empty output, zero weight gradients.
TEST(Conv2d, EmptyBatch) {
  const Tensor x = Tensor::zeros({0, 3, 5, 5}, DType::f32);
  const Tensor w = Tensor::full({2, 3, 3, 3}, 1.0, DType::f32);
  for (ConvAlgo a : kAlgos) {
    Conv2dOptions o;
    o.algo = a;
    const Tensor y = conv2d_forward(x, w, {}, o);
    EXPECT_EQ(y.shape(), (Shape{0, 2, 3, 3}));
    const ConvGrads g = conv2d_backward(x, w, y, true, o);
    EXPECT_EQ(g.dinput.shape(), x.shape());
    EXPECT_EQ(g.dweight.at_flat(0), 0.0);
    EXPECT_EQ(g.dbias.at_flat(1), 0.0);
  }
}

// The reference switch forces the loops whatever algorithm is asked for.
TEST(Conv2d, ReferenceSwitchForcesLoops) {
  std::mt19937_64 rng(5);
  const Tensor x = test::random_tensor({2, 3, 6, 7}, DType::f32, rng);
  const Tensor w = test::random_tensor({4, 3, 3, 3}, DType::f32, rng);
  Conv2dOptions o;
  o.algo = ConvAlgo::loops;
  const Tensor y_loops = conv2d_forward(x, w, {}, o);
  o.algo = ConvAlgo::im2col;
  set_reference_kernels(true);
  const Tensor y = conv2d_forward(x, w, {}, o);
  set_reference_kernels(false);
  EXPECT_EQ(max_abs_diff(y, y_loops), 0.0);
}

// ---- Finite differences (f64) --------------------------------------------------------------

struct FdCase {
  const char* name;
  int dims;
  int64_t N, C, H, W, D, KH, KW;
  Pair2 stride, padding, dilation;
  int64_t groups;
};
std::ostream& operator<<(std::ostream& os, const FdCase& c) {
  return os << c.name;
}
// clang-format off
const FdCase kFd[] = {
    {"c2_basic",      2, 2, 3, 5, 4, 2, 3, 3, 1,      1,      1,      1},
    {"c2_mixed",      2, 2, 4, 6, 7, 4, 3, 2, {2, 1}, {1, 2}, {1, 2}, 2},
    {"c2_pointwise",  2, 2, 3, 3, 4, 2, 1, 1, 1,      0,      1,      1},
    {"c1_dilated",    1, 2, 2, 1, 9, 4, 1, 3, {1, 2}, {0, 2}, {1, 2}, 2},
    {"c2_s1_dil_grp", 2, 2, 4, 6, 7, 4, 3, 2, 1,      {1, 2}, {2, 1}, 2},
};
// clang-format on

class ConvGradCheck : public ::testing::TestWithParam<std::tuple<FdCase, ConvAlgo>> {};

TEST_P(ConvGradCheck, FiniteDifferencesF64) {
  const FdCase& c = std::get<0>(GetParam());
  const ConvAlgo algo = std::get<1>(GetParam());
  Conv conv;
  conv.dims = c.dims;
  conv.o2 = {c.stride, c.padding, c.dilation, c.groups, algo};
  conv.o1 = {c.stride.w, c.padding.w, c.dilation.w, c.groups, algo};
  std::mt19937_64 rng(9);
  const Shape xs = c.dims == 2 ? Shape{c.N, c.C, c.H, c.W} : Shape{c.N, c.C, c.W};
  const Shape ws =
      c.dims == 2 ? Shape{c.D, c.C / c.groups, c.KH, c.KW} : Shape{c.D, c.C / c.groups, c.KW};
  Tensor x = test::random_tensor(xs, DType::f64, rng);
  Tensor w = test::random_tensor(ws, DType::f64, rng);
  Tensor b = test::random_tensor({c.D}, DType::f64, rng);
  const Tensor dy = test::random_tensor(conv.forward(x, w, b).shape(), DType::f64, rng);
  auto loss = [&] {
    const Tensor y = conv.forward(x, w, b);
    double l = 0;
    for (int64_t i = 0; i < y.numel(); ++i) l += y.at_flat(i) * dy.at_flat(i);
    return l;
  };
  const ConvGrads g = conv.backward(dy, x, w, true);
  // The loss is linear in each parameter, so central differences are exact up to rounding.
  const double eps = 1e-3;
  auto check = [&](const char* name, Tensor& param, const Tensor& analytic) {
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
    EXPECT_TRUE(test::all_close(std::string(c.name) + " " + conv_algo_name(algo), name, analytic,
                                numeric, {1e-8, 1e-8}));
  };
  check("grad_input", x, g.dinput);
  check("grad_weight", w, g.dweight);
  check("grad_bias", b, g.dbias);
}

INSTANTIATE_TEST_SUITE_P(AllAlgos, ConvGradCheck,
                         ::testing::Combine(::testing::ValuesIn(kFd), ::testing::ValuesIn(kAlgos)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  conv_algo_name(std::get<1>(info.param));
                         });

// ---- Threads -------------------------------------------------------------------------------

// Sets the OpenMP thread count (grux's kernels) for a scope.
struct Threads {
  int saved = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved); }
};

// Results are bit-identical on 1, 2 and 3 threads: batch-parallel (N >= threads) and
// GEMM-parallel (N < threads) splits, and the weight gradient's fixed chunk order.
TEST(ConvThreads, SameBitsOnAnyThreadCount) {
  for (int64_t N : {1, 2, 5, 19}) {
    std::mt19937_64 rng(N);
    const Tensor x = test::random_tensor({N, 6, 12, 10}, DType::f32, rng);
    const Tensor w = test::random_tensor({8, 3, 3, 3}, DType::f32, rng);
    const Tensor b = test::random_tensor({8}, DType::f32, rng);
    Conv2dOptions o;
    o.padding = 1;
    o.groups = 2;
    for (ConvAlgo a : {ConvAlgo::im2col, ConvAlgo::toeplitz}) {
      o.algo = a;
      std::vector<Tensor> base;
      for (int t : {1, 2, 3}) {
        Threads scope(t);
        const Tensor y = conv2d_forward(x, w, b, o);
        const ConvGrads g = conv2d_backward(x, w, y, true, o);
        const std::vector<Tensor> got{y, g.dinput, g.dweight, g.dbias};
        if (base.empty()) base = got;
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(max_abs_diff(got[i], base[i]), 0.0)
              << "N=" << N << " " << conv_algo_name(a) << " threads=" << t << " tensor " << i;
      }
    }
  }
}

// ---- Errors --------------------------------------------------------------------------------

// Expects grux::Error whose one-line message contains every piece.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<const char*> pieces) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one containing " << *pieces.begin();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const char* p : pieces) EXPECT_THAT(m, HasSubstr(p));
  }
}

TEST(ConvErrors, EveryBadArgument) {
  const Tensor x = Tensor::zeros({2, 4, 7, 5}, DType::f32);
  const Tensor w = Tensor::zeros({6, 4, 3, 3}, DType::f32);
  auto fwd = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb, Conv2dOptions o = {}) {
    return [=] { conv2d_forward(xx, ww, bb, o); };
  };
  expect_error(fwd(Tensor(), w, {}), {"conv2d", "input", "undefined"});
  expect_error(fwd(x, Tensor(), {}), {"conv2d", "weight", "undefined"});
  expect_error(fwd(Tensor::zeros({2, 4, 7, 5}, DType::i64), w, {}), {"input", "i64", "f32 or f64"});
  expect_error(fwd(x, w.to(DType::f64), {}), {"weight", "f64", "f32"});
  expect_error(fwd(Tensor::zeros({4, 7}, DType::f32), w, {}), {"input", "(4, 7)", "(N, C, H, W)"});
  expect_error(fwd(x, Tensor::zeros({6, 4, 3}, DType::f32), {}),
               {"weight", "(6, 4, 3)", "(D, C/groups, KH, KW)"});
  expect_error(fwd(x, Tensor::zeros({6, 3, 3, 3}, DType::f32), {}),
               {"weight", "(6, 3, 3, 3)", "dim 1 is 3", "C/groups = 4"});
  expect_error(fwd(x, w, {}, {0, 0, 1, 1}), {"stride", "(0, 0)", ">= 1"});
  expect_error(fwd(x, w, {}, {{1, 0}, 0, 1, 1}), {"stride", "(1, 0)", ">= 1"});
  expect_error(fwd(x, w, {}, {1, 0, {1, 0}, 1}), {"dilation", "(1, 0)", ">= 1"});
  expect_error(fwd(x, w, {}, {1, {0, -1}, 1, 1}), {"padding", "(0, -1)", ">= 0"});
  expect_error(fwd(x, w, {}, {1, 0, 1, 0}), {"groups is 0", ">= 1"});
  expect_error(fwd(x, Tensor::zeros({6, 1, 3, 3}, DType::f32), {}, {1, 0, 1, 3}),
               {"C = 4", "not divisible by groups = 3"});
  expect_error(fwd(x, Tensor::zeros({5, 2, 3, 3}, DType::f32), {}, {1, 0, 1, 2}),
               {"D = 5", "multiple of groups = 2"});
  expect_error(fwd(x, Tensor::zeros({6, 4, 8, 3}, DType::f32), {}),
               {"kernel size (8, 3)", "larger than the padded input (7, 5)"});
  expect_error(fwd(x, w, {}, {1, 0, {4, 1}, 1}),
               {"kernel size (3, 3)", "dilated: (9, 3)", "padded input (7, 5)"});
  expect_error(fwd(x, Tensor::zeros({6, 4, 0, 3}, DType::f32), {}), {"kernel sizes must be >= 1"});
  expect_error(fwd(x, w, Tensor::zeros({5}, DType::f32)), {"bias", "(5,)", "(6,)"});
  expect_error(fwd(x, w, Tensor::zeros({6}, DType::f64)), {"bias", "f64"});
  // Backward: grad_output must match the forward's output.
  const Tensor dy = Tensor::zeros({2, 6, 5, 3}, DType::f32);
  expect_error([&] { conv2d_backward(x, w, Tensor(), true); }, {"doutput", "undefined"});
  expect_error(
      [&] {
        conv2d_backward(x, w, Tensor::zeros({2, 6, 5, 4}, DType::f32), true);
      },
      {"doutput", "(2, 6, 5, 4)", "(2, 6, 5, 3)"});
  expect_error([&] { conv2d_backward(x, w, dy.to(DType::f64), true); }, {"doutput", "f64"});
  // conv1d speaks in its own terms.
  const Tensor x1 = Tensor::zeros({2, 4, 5}, DType::f64);
  expect_error(
      [&] {
        conv1d_forward(x1, Tensor::zeros({3, 4, 3, 3}, DType::f64));
      },
      {"conv1d", "(D, C/groups, K)"});
  expect_error(
      [&] {
        conv1d_forward(x1, Tensor::zeros({3, 4, 9}, DType::f64), {}, {1, 1});
      },
      {"conv1d", "kernel size 9", "padded input length 7"});
  expect_error(
      [&] {
        conv1d_forward(x1, Tensor::zeros({3, 4, 3}, DType::f64), {}, {0});
      },
      {"conv1d", "stride is 0"});
  expect_error(
      [&] {
        conv1d_forward(Tensor::zeros({2, 4, 5, 1}, DType::f64), x1);
      },
      {"conv1d", "(N, C, L) or unbatched (C, L)"});
}

TEST(ConvErrors, ToeplitzRefusesAHugeMatrix) {
  // 64 x 56 x 56 in and out, 3x3, padding 1: the matrix is 200704 x 215296 floats (161 GiB).
  const Tensor x = Tensor::zeros({1, 64, 56, 56}, DType::f32);
  const Tensor w = Tensor::zeros({64, 64, 3, 3}, DType::f32);
  Conv2dOptions o;
  o.algo = ConvAlgo::toeplitz;
  o.padding = 1;
  expect_error([&] { conv2d_forward(x, w, {}, o); },
               {"toeplitz", "200704 x 215296", "MiB", "256 MiB limit", "im2col"});
  expect_error(
      [&] {
        conv2d_backward(x, w, Tensor::zeros({1, 64, 56, 56}, DType::f32), false, o);
      },
      {"toeplitz", "256 MiB limit"});
}

TEST(ConvErrors, AlgoNames) {
  EXPECT_EQ(parse_conv_algo("toeplitz"), ConvAlgo::toeplitz);
  EXPECT_EQ(parse_conv_algo("loops"), ConvAlgo::loops);
  expect_error([] { parse_conv_algo("winograd"); }, {"'winograd'", "loops, im2col or toeplitz"});
}

// ---- Problem descriptor --------------------------------------------------------------------

TEST(ConvProblem, ParsesAndPrints) {
  const ConvProblem p = ConvProblem::parse("n8c16h64w64d32k3");
  EXPECT_EQ(p.N, 8);
  EXPECT_EQ(p.C, 16);
  EXPECT_EQ(p.OH(), 62);
  EXPECT_EQ(p.descriptor(), "n8c16h64w64d32k3");
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * 8 * 32 * 62 * 62 * 16 * 9);
  const ConvProblem q = ConvProblem::parse("n2c64h56w56d64k3s2p1g4");
  EXPECT_EQ(q.stride, 2);
  EXPECT_EQ(q.padding, 1);
  EXPECT_EQ(q.groups, 4);
  EXPECT_EQ(q.OH(), 28);
  EXPECT_EQ(q.descriptor(), "n2c64h56w56d64k3s2p1g4");
  EXPECT_EQ(q.options(ConvAlgo::toeplitz).stride, Pair2(2));
  expect_error([] { ConvProblem::parse("n8c16h64w64k3"); }, {"'n8c16h64w64k3'", "malformed"});
  expect_error([] { ConvProblem::parse("n8c16h64w64d32k3p1s2"); }, {"malformed"});
  expect_error([] { ConvProblem::parse("n0c16h64w64d32k3"); }, {"n0", ">= 1"});
  expect_error([] { ConvProblem::parse("n1c6h8w8d4k3g4"); }, {"multiples of g4"});
  expect_error([] { ConvProblem::parse("n1c6h8w8d4k9"); }, {"k9", "larger than the padded"});
  // Per-dimension values and dilation.
  const ConvProblem r = ConvProblem::parse("n1c8h32w30d8k3x5s2x1p1r2x3");
  EXPECT_EQ(r.kernel, Pair2(3, 5));
  EXPECT_EQ(r.stride, Pair2(2, 1));
  EXPECT_EQ(r.padding, Pair2(1));
  EXPECT_EQ(r.dilation, Pair2(2, 3));
  EXPECT_EQ(r.descriptor(), "n1c8h32w30d8k3x5s2x1p1r2x3");
  EXPECT_EQ(r.OH(), (32 + 2 - 2 * 2 - 1) / 2 + 1);
  EXPECT_EQ(r.OW(), (30 + 2 - 3 * 4 - 1) / 1 + 1);
  EXPECT_EQ(r.options(ConvAlgo::loops).dilation, Pair2(2, 3));
  EXPECT_EQ(ConvProblem::parse("n1c1h8w8d1k3x3s1x1").descriptor(), "n1c1h8w8d1k3");
  expect_error([] { ConvProblem::parse("n1c1h8w8d1k3r4"); }, {"k3 dilated r4", "spans (9, 9)"});
  expect_error([] { ConvProblem::parse("n1c1h8w8d1k3r0"); }, {"r0", ">= 1"});
  expect_error([] { ConvProblem::parse("n1c1h8w8d1k3x0"); }, {"k0", ">= 1"});
  expect_error([] { ConvProblem::parse("n1c1h8w8d1k3g1r1"); }, {"malformed"});
  const Conv1dProblem c = Conv1dProblem::parse("n1c8l1024d8k3p4r4");
  EXPECT_EQ(c.dilation, 4);
  EXPECT_EQ(c.OL(), 1024);
  EXPECT_EQ(c.descriptor(), "n1c8l1024d8k3p4r4");
  EXPECT_EQ(c.options(ConvAlgo::loops).dilation, 4);
  expect_error([] { Conv1dProblem::parse("n1c1l8d1k3r5"); }, {"dilated r5", "spans 11"});
}

}  // namespace
}  // namespace grux::test_conv
