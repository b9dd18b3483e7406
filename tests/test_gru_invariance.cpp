// Determinism guarantees of the optimized GRU, bit for bit: results (forward and every
// gradient) do not depend on the number of threads, and a sequence's outputs do not depend
// on which other sequences share its batch. Shapes put the thread split and the SIMD tails
// at unit-block edges (H = 33 f32 / 17 f64: three blocks).
#include <gtest/gtest.h>
#include <omp.h>

#include "grux/gru.h"
#include "test_util.h"

namespace grux {
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

class Invariance : public ::testing::TestWithParam<InvCase> {};

TEST_P(Invariance, ThreadCountDoesNotChangeAnyBit) {
  const InvCase& k = GetParam();
  GruConfig c;
  c.input_size = 7;
  c.hidden_size = k.H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.form = k.form;
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
  GruConfig c;
  c.input_size = 7;
  c.hidden_size = k.H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.form = k.form;
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
INSTANTIATE_TEST_SUITE_P(Bits, Invariance, ::testing::ValuesIn(kInvCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace grux
