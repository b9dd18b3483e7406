// Every user-error path of the GRU API: each throws grux::Error whose one-line message names
// the argument and says what was expected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "grux/gru.h"
#include "test_util.h"

namespace grux::test_gru_errors {
namespace {

using ::testing::HasSubstr;

// Runs fn, expects grux::Error whose message contains every piece.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<const char*> pieces) {
  try {
    fn();
    ADD_FAILURE() << "expected grux::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "multi-line message: " << m;
    for (const char* p : pieces) EXPECT_THAT(m, HasSubstr(p));
  }
}

GruConfig small_config() {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  c.num_layers = 2;
  c.bidirectional = true;
  return c;
}

TEST(GruErrors, Config) {
  GruConfig c = small_config();
  c.hidden_size = 0;
  expect_error([&] { Gru g(c); }, {"hidden_size", "0", ">= 1"});
  c = small_config();
  c.dropout = 1.0;
  expect_error([&] { Gru g(c); }, {"dropout"});
  c = small_config();
  expect_error([&] { Gru g(c, DType::i64); }, {"i64", "f32 or f64"});
}

TEST(GruErrors, InputShapesAndDtypes) {
  Gru gru(small_config(), DType::f32, 1);
  const Tensor x = Tensor::zeros({5, 2, 3}, DType::f32);
  expect_error(
      [&] {
        gru.forward(Tensor::zeros({5, 2, 3, 1}, DType::f32));
      },
      {"input", "(5, 2, 3, 1)"});
  expect_error(
      [&] {
        gru.forward(Tensor::zeros({5, 2, 6}, DType::f32));
      },
      {"input", "input_size 3"});
  expect_error([&] { gru.forward(Tensor::zeros({5, 2, 3}, DType::f64)); }, {"input", "f64", "f32"});
  expect_error([&] { gru.forward(Tensor::zeros({0, 2, 3}, DType::f32)); }, {"input", "time step"});
  expect_error([&] { gru.forward(Tensor()); }, {"input", "undefined"});
  // h0: (L*D, N, H) = (4, 2, 4)
  expect_error(
      [&] {
        gru.forward(x, Tensor::zeros({2, 2, 4}, DType::f32));
      },
      {"h0", "(2, 2, 4)", "(4, 2, 4)"});
  expect_error([&] { gru.forward(x, Tensor::zeros({4, 2, 4}, DType::f64)); }, {"h0", "f64", "f32"});
  expect_error(
      [&] {
        gru.forward(x.select(1, 0), Tensor::zeros({4, 2, 4}, DType::f32));
      },
      {"h0", "(4, 4)"});
}

TEST(GruErrors, Lengths) {
  Gru gru(small_config(), DType::f32, 1);
  const Tensor x = Tensor::zeros({5, 2, 3}, DType::f32);
  expect_error(
      [&] {
        gru.forward(x, {}, Tensor::from_vector<int64_t>({2}, {5, 0}));
      },
      {"lengths[1] = 0", "1 <= length <= T = 5"});
  expect_error(
      [&] {
        gru.forward(x, {}, Tensor::from_vector<int64_t>({2}, {6, 1}));
      },
      {"lengths[0] = 6"});
  expect_error(
      [&] {
        gru.forward(x, {}, Tensor::from_vector<int64_t>({2}, {-1, 1}));
      },
      {"lengths[0] = -1"});
  expect_error(
      [&] {
        gru.forward(x, {}, Tensor::from_vector<int64_t>({3}, {1, 1, 1}));
      },
      {"lengths", "(3,)", "(2,)"});
  expect_error(
      [&] {
        gru.forward(x, {}, Tensor::from_vector<float>({2}, {1, 1}));
      },
      {"lengths", "f32", "i64"});
  expect_error([&] { gru.forward(x.select(1, 0), {}, Tensor::from_vector<int64_t>({1}, {5})); },
               {"lengths", "unbatched"});
}

TEST(GruErrors, StateDict) {
  Gru gru(small_config(), DType::f32, 1);
  auto sd = gru.state_dict();
  {
    auto s = sd;
    s.erase("weight_hh_l1_reverse");
    expect_error([&] { Gru::from_state_dict(s); }, {"missing", "weight_hh_l1_reverse"});
  }
  {
    auto s = sd;
    s["weight_ih_l2"] = Tensor::zeros({12, 8}, DType::f32);
    expect_error([&] { Gru::from_state_dict(s); }, {"missing", "weight_hh_l2"});
  }
  {
    auto s = sd;
    s["running_mean"] = Tensor::zeros({4}, DType::f32);
    expect_error([&] { Gru::from_state_dict(s); }, {"unexpected key 'running_mean'"});
  }
  {
    auto s = sd;
    s["bias_hh_l0"] = Tensor::zeros({11}, DType::f32);
    expect_error([&] { Gru::from_state_dict(s); }, {"bias_hh_l0", "(11,)", "(12,)"});
  }
  {
    auto s = sd;
    s["weight_hh_l0"] = Tensor::zeros({12, 4}, DType::f64);
    expect_error([&] { Gru::from_state_dict(s); }, {"weight_hh_l0", "f64"});
  }
  {
    auto s = sd;
    s.erase("bias_ih_l1");
    expect_error([&] { Gru::from_state_dict(s); }, {"missing", "bias_ih_l1"});
  }
  {
    std::map<std::string, Tensor> s{{"weight_ih_l0", Tensor::zeros({10, 3}, DType::f32)}};
    expect_error([&] { Gru::from_state_dict(s); }, {"weight_ih_l0", "3*hidden_size"});
  }
  expect_error([&] { Gru::from_state_dict({}); }, {"missing key 'weight_ih_l0'"});
  // A complete state dict round-trips.
  Gru back = Gru::from_state_dict(sd);
  EXPECT_EQ(back.config().num_layers, 2);
  EXPECT_TRUE(back.config().bidirectional);
  EXPECT_EQ(back.config().input_size, 3);
  EXPECT_EQ(back.config().hidden_size, 4);
}

TEST(GruErrors, Backward) {
  Gru gru(small_config(), DType::f32, 1);
  const Tensor x = Tensor::zeros({5, 2, 3}, DType::f32);
  GruTape empty;
  expect_error([&] { gru.backward(empty, Tensor::zeros({5, 2, 8}, DType::f32), {}); }, {"tape"});
  GruTape tape;
  gru.forward_train(x, {}, {}, tape);
  expect_error([&] { gru.backward(tape, {}, {}); }, {"doutput", "dh_n"});
  expect_error(
      [&] {
        gru.backward(tape, Tensor::zeros({5, 2, 4}, DType::f32), {});
      },
      {"doutput", "(5, 2, 4)", "(5, 2, 8)"});
  expect_error(
      [&] {
        gru.backward(tape, {}, Tensor::zeros({4, 2, 3}, DType::f32));
      },
      {"dh_n", "(4, 2, 3)", "(4, 2, 4)"});
  expect_error(
      [&] {
        gru.backward(tape, Tensor::zeros({5, 2, 8}, DType::f64), {});
      },
      {"doutput", "f64"});
}

TEST(GruErrors, Cell) {
  GruCell cell(3, 4);
  expect_error([&] { cell.forward(Tensor::zeros({2, 5}, DType::f32)); }, {"input", "input_size 3"});
  expect_error([&] { cell.forward(Tensor::zeros({2, 2, 3}, DType::f32)); }, {"input", "(N, I)"});
  expect_error(
      [&] {
        cell.forward(Tensor::zeros({2, 3}, DType::f32), Tensor::zeros({3, 4}, DType::f32));
      },
      {"hx", "(3, 4)", "(2, 4)"});
  expect_error(
      [&] {
        GruCell::from_state_dict({{"weight_ih_l0", Tensor::zeros({12, 3}, DType::f32)}});
      },
      {"unexpected key 'weight_ih_l0'"});
}

TEST(GruProblem, DescriptorRoundTripAndErrors) {
  GruProblem p = GruProblem::parse("l2d2t200n32i128h256");
  EXPECT_EQ(p.num_layers, 2);
  EXPECT_EQ(p.directions(), 2);
  EXPECT_EQ(p.T, 200);
  EXPECT_EQ(p.N, 32);
  EXPECT_EQ(p.input_size, 128);
  EXPECT_EQ(p.hidden_size, 256);
  EXPECT_EQ(p.descriptor(), "l2d2t200n32i128h256");
  GruProblem q = GruProblem::parse("t100n64i256h512");
  EXPECT_EQ(q.descriptor(), "l1d1t100n64i256h512");
  // 2 * N * T * 3H * (I + H) (../shared/WORKLOADS.md).
  EXPECT_DOUBLE_EQ(q.gemm_flops(), 2.0 * 64 * 100 * 3 * 512 * (256 + 512));
  // Layer 2 of a bidirectional stack reads D*H inputs; both directions count.
  EXPECT_DOUBLE_EQ(p.gemm_flops(),
                   2 * 2.0 * 32 * 200 * 768 * (128 + 256) + 2 * 2.0 * 32 * 200 * 768 * (512 + 256));
  q.lengths = std::vector<int64_t>(64, 10);
  EXPECT_EQ(q.rows(), 640);
  expect_error([] { GruProblem::parse("l1d1t100n64i256"); }, {"malformed"});
  expect_error([] { GruProblem::parse("d3t1n1i1h1"); }, {"d3"});
  expect_error([] { GruProblem::parse("t0n1i1h1"); }, {"t0"});
  expect_error([] { GruProblem::parse("l1d1t1n1i1h1 "); }, {"malformed"});
}

}  // namespace
}  // namespace grux::test_gru_errors
