// Finite-difference gradient checks in f64 for every gradient of the GRU (input, h0, every
// weight and bias) over every option: both forms, lengths, directions, layers, bias,
// batch_first, unbatched, dropout, and gradients of output only / h_n only / both.
#include <gtest/gtest.h>

#include "grux/gru.h"
#include "ops/gru_layer.h"
#include "test_util.h"

namespace grux::test_gru_gradcheck {
namespace {

struct Case {
  const char* name;
  GruForm form;
  int64_t layers;
  bool bidir, bias, batch_first, unbatched, lengths, h0;
  double dropout;
  bool grad_out, grad_hn;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

constexpr auto LBR = GruForm::linear_before_reset;
constexpr auto RB = GruForm::reset_before;

// clang-format off
const Case kCases[] = {
    // name                         form L  bidir  bias   bf     unb    len    h0     drop grad_out grad_hn
    {"lbr_basic",                   LBR, 1, false, true,  false, false, false, true,  0.0, true,  true},
    {"rb_basic",                    RB,  1, false, true,  false, false, false, true,  0.0, true,  true},
    {"lbr_nobias",                  LBR, 1, false, false, false, false, false, true,  0.0, true,  true},
    {"rb_nobias",                   RB,  1, false, false, false, false, false, true,  0.0, true,  true},
    {"lbr_l2_bidir_lengths_bf",     LBR, 2, true,  true,  true,  false, true,  true,  0.0, true,  true},
    {"rb_l2_bidir_lengths_bf",      RB,  2, true,  true,  true,  false, true,  true,  0.0, true,  true},
    {"lbr_l3_lengths_gradout",      LBR, 3, false, true,  false, false, true,  true,  0.0, true,  false},
    {"rb_l3_bidir_gradhn",          RB,  3, true,  true,  false, false, false, true,  0.0, false, true},
    {"lbr_bidir_lengths_gradhn",    LBR, 1, true,  false, false, false, true,  true,  0.0, false, true},
    {"rb_bidir_lengths_gradout",    RB,  1, true,  true,  false, false, true,  false, 0.0, true,  false},
    {"lbr_unbatched_l2_bidir",      LBR, 2, true,  true,  false, true,  false, true,  0.0, true,  true},
    {"rb_unbatched",                RB,  1, false, true,  false, true,  false, true,  0.0, true,  true},
    {"lbr_l2_dropout",              LBR, 2, false, true,  false, false, false, true,  0.4, true,  true},
    {"rb_l3_bidir_dropout_lengths", RB,  3, true,  true,  true,  false, true,  true,  0.3, true,  true},
};
// clang-format on

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, FiniteDifferencesF64) {
  const Case& k = GetParam();
  const int64_t T = 5, N = 3, I = 3, H = 4;
  GruConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.bias = k.bias;
  c.batch_first = k.batch_first;
  c.dropout = k.dropout;
  c.form = k.form;
  Gru gru(c, DType::f64, 7);
  std::mt19937_64 rng(11);
  const int64_t LD = k.layers * c.directions(), DH = c.directions() * H;
  const Shape xs = k.unbatched ? Shape{T, I} : k.batch_first ? Shape{N, T, I} : Shape{T, N, I};
  const Shape ys = k.unbatched ? Shape{T, DH} : k.batch_first ? Shape{N, T, DH} : Shape{T, N, DH};
  const Shape hs = k.unbatched ? Shape{LD, H} : Shape{LD, N, H};
  Tensor x = test::random_tensor(xs, DType::f64, rng);
  Tensor h0 = k.h0 ? test::random_tensor(hs, DType::f64, rng, 0.5) : Tensor();
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, {3, 5, 1}) : Tensor();
  Tensor dy = k.grad_out ? test::random_tensor(ys, DType::f64, rng) : Tensor();
  Tensor dhn = k.grad_hn ? test::random_tensor(hs, DType::f64, rng) : Tensor();
  const uint64_t seed = 5;  // same dropout mask in every evaluation

  auto loss = [&]() {
    GruTape tape;
    GruOutput y = gru.forward_train(x, h0, lengths, tape, seed);
    double l = 0;
    if (dy.defined())
      for (int64_t i = 0; i < y.output.numel(); ++i) l += y.output.at_flat(i) * dy.at_flat(i);
    if (dhn.defined())
      for (int64_t i = 0; i < y.h_n.numel(); ++i) l += y.h_n.at_flat(i) * dhn.at_flat(i);
    return l;
  };
  GruTape tape;
  gru.forward_train(x, h0, lengths, tape, seed);
  GruGrads g = gru.backward(tape, dy, dhn);

  // Central differences on every element of `param`, compared with `analytic`.
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
  const auto dstate = g.state_dict(c);
  for (auto& [key, w] : gru.state_dict()) check("grad." + key, w, dstate.at(key));
}

INSTANTIATE_TEST_SUITE_P(AllOptions, GradCheck, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Padded positions get exactly zero output and zero input gradient.
TEST(GruLengths, PaddingIsZero) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 5;
  c.bidirectional = true;
  Gru gru(c, DType::f64, 3);
  std::mt19937_64 rng(2);
  Tensor x = test::random_tensor({6, 2, 3}, DType::f64, rng);
  Tensor lengths = Tensor::from_vector<int64_t>({2}, {2, 6});
  GruTape tape;
  GruOutput y = gru.forward_train(x, {}, lengths, tape);
  GruGrads g = gru.backward(tape, test::random_tensor({6, 2, 10}, DType::f64, rng), {});
  for (int64_t t = 2; t < 6; ++t) {
    for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(y.output.item({t, 0, j}), 0.0);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(g.dinput.item({t, 0, i}), 0.0);
  }
}

}  // namespace
}  // namespace grux::test_gru_gradcheck

namespace grux::test_gru_gradcheck {
namespace {

// Variable-length work follows the sum of lengths: the packed layout has exactly that many
// rows, and the active batch shrinks as sequences end, whatever the order of the lengths.
TEST(GruLengths, PackedRowsFollowSumOfLengths) {
  const std::vector<int64_t> len{3, 10, 1, 7, 10};
  ops::SeqLayout lay = ops::make_seq_layout(10, 5, len.data());
  EXPECT_EQ(lay.rows(), 3 + 10 + 1 + 7 + 10);
  EXPECT_EQ(lay.S, 10);
  EXPECT_EQ(lay.bs.front(), 5);
  EXPECT_EQ(lay.bs.back(), 2);
  EXPECT_EQ(lay.perm, (std::vector<int64_t>{1, 4, 3, 0, 2}));  // longest first, stable
  for (size_t s = 1; s < lay.bs.size(); ++s) EXPECT_LE(lay.bs[s], lay.bs[s - 1]);
  ops::SeqLayout short_batch = ops::make_seq_layout(10, 2, std::vector<int64_t>{2, 4}.data());
  EXPECT_EQ(short_batch.S, 4);  // no steps past the longest sequence
  EXPECT_EQ(short_batch.rows(), 6);
}

// Dropout acts between layers in forward_train only, is reproducible from its seed, and
// leaves the top layer's output undropped.
TEST(GruDropout, TrainingOnlySeededBetweenLayers) {
  GruConfig c;
  c.input_size = 4;
  c.hidden_size = 8;
  c.num_layers = 2;
  c.dropout = 0.5;
  Gru gru(c, DType::f64, 1);
  GruConfig c0 = c;
  c0.dropout = 0.0;
  Gru no_dropout(c0, gru.weights());
  std::mt19937_64 rng(5);
  Tensor x = test::random_tensor({6, 3, 4}, DType::f64, rng);
  GruTape t1, t2, t3;
  const Tensor a = gru.forward_train(x, {}, {}, t1, 7).output;
  const Tensor b = gru.forward_train(x, {}, {}, t2, 7).output;
  const Tensor other = gru.forward_train(x, {}, {}, t3, 8).output;
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  EXPECT_GT(max_abs_diff(a, other), 1e-6);
  EXPECT_EQ(max_abs_diff(gru.forward(x).output, no_dropout.forward(x).output), 0.0);
  EXPECT_GT(max_abs_diff(a, gru.forward(x).output), 1e-6);
  GruConfig one = c;
  one.num_layers = 1;
  Gru single(one, {gru.weights()[0]});
  GruTape t4;  // one layer: nothing between layers to drop
  EXPECT_EQ(max_abs_diff(single.forward_train(x, {}, {}, t4, 7).output, single.forward(x).output),
            0.0);
}

}  // namespace
}  // namespace grux::test_gru_gradcheck
