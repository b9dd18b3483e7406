// Results on every SIMD target this CPU can run (grux/runtime.h's set_simd_target): the same
// operators computed once per target in one process. Every target with fused multiply-add
// (AVX2 and the AVX-512 ones) gives the same bits, so Intel and AMD machines agree exactly; the
// older ones (SSE4, SSSE3, the scalar baseline) round a*b + c twice and agree within the
// tolerances. The whole suite also runs once per target (scripts/test.sh), which checks each
// promise within a target.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "grux/conv.h"
#include "grux/gru.h"
#include "grux/lstm.h"
#include "grux/mingru.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "grux/scan.h"
#include "grux/tensor_ops.h"
#include "test_util.h"

namespace grux::test_simd_targets {
namespace {

using Results = std::map<std::string, Tensor>;

// Restores the target the test started on (GRUX_SIMD_TARGET's, when the suite runs under it).
struct TargetScope {
  std::string saved = simd_target();
  ~TargetScope() { set_simd_target(saved); }
};

bool has_fma(const std::string& target) {
  return target == "AVX2" || target.rfind("AVX3", 0) == 0 || target.rfind("AVX10", 0) == 0;
}

// Every optimized kernel family once, f32 (and the GRU and LSTM in f64): the GRU forward,
// backward and stream (gates, packed GEMM), the LSTM forward and backward (with and without a
// projection), minGRU linear and log space with its backward (coefficients,
// scans), Linear and matmul (the general GEMM), conv2d stride 1 and 2 (shifted and column
// GEMMs), the built-in scans, the affine scans, elementwise functions and reductions.
Results compute_all() {
  std::mt19937_64 rng(11);
  Results r;
  const int64_t T = 9, N = 3, I = 19, H = 37;  // tails past every SIMD width
  const Tensor x = test::random_tensor({T, N, I}, DType::f32, rng);
  const Tensor lengths = Tensor::from_vector<int64_t>({N}, {9, 4, 7});
  for (GruForm form : {GruForm::linear_before_reset, GruForm::reset_before}) {
    GruConfig c;
    c.input_size = I, c.hidden_size = H, c.num_layers = 2, c.bidirectional = true, c.form = form;
    const std::string f = gru_form_name(form);
    for (DType dt : {DType::f32, DType::f64}) {
      const Gru gru(c, dt, 5);
      const Tensor xd = x.to(dt);
      GruTape tape;
      const GruOutput y = gru.forward_train(xd, {}, lengths, tape);
      const GruGrads g = gru.backward(tape, y.output, {});
      const std::string k = "gru_" + f + "_" + dtype_name(dt);
      r[k + "_output"] = y.output;
      r[k + "_h_n"] = y.h_n;
      r[k + "_dinput"] = g.dinput;
      r[k + "_dweight_hh"] = g.dweights[0].w_hh;
    }
  }
  for (int64_t proj : {0, 11}) {
    LstmConfig c;
    c.input_size = I, c.hidden_size = H, c.num_layers = 2, c.bidirectional = true;
    c.proj_size = proj;
    for (DType dt : {DType::f32, DType::f64}) {
      const Lstm lstm(c, dt, 8);
      LstmTape tape;
      const LstmOutput y = lstm.forward_train(x.to(dt), {}, {}, lengths, tape);
      const LstmGrads g = lstm.backward(tape, y.output, {}, y.c_n);
      const std::string k = "lstm_p" + std::to_string(proj) + "_" + dtype_name(dt);
      r[k + "_output"] = y.output;
      r[k + "_c_n"] = y.c_n;
      r[k + "_dinput"] = g.dinput;
      r[k + "_dweight_hh"] = g.dweights[0].w_hh;
    }
  }
  {
    GruConfig c;
    c.input_size = I, c.hidden_size = H;
    const Gru gru(c, DType::f32, 6);
    GruStream stream(gru, N);
    for (int64_t t = 0; t < T; ++t) r["stream_" + std::to_string(t)] = stream.step(x.select(0, t));
  }
  for (bool log_space : {false, true}) {
    MinGruConfig c;
    c.input_size = I, c.hidden_size = H, c.num_layers = 2, c.log_space = log_space;
    const MinGru m(c, DType::f32, 7);
    MinGruTape tape;
    const MinGruOutput y = m.forward_train(x, {}, lengths, tape);
    const MinGruGrads g = m.backward(tape, y.output, {});
    const std::string k = log_space ? "mingru_log" : "mingru";
    r[k + "_output"] = y.output;
    r[k + "_forward"] = m.forward(x, {}, lengths).output;
    r[k + "_dinput"] = g.dinput;
    r[k + "_dweight"] = g.dweights[0].weight;
  }
  {
    const Tensor xs = test::random_tensor({70, 33}, DType::f32, rng);
    const Tensor w = test::random_tensor({29, 33}, DType::f32, rng);
    const Tensor b = test::random_tensor({29}, DType::f32, rng);
    const Tensor y = linear_forward(xs, w, b);
    const LinearGrads g = linear_backward(xs, w, y, true);
    r["linear_y"] = y, r["linear_dx"] = g.dinput, r["linear_dw"] = g.dweight,
    r["linear_db"] = g.dbias;
    r["matmul"] = matmul(test::random_tensor({4, 17, 23}, DType::f32, rng),
                         test::random_tensor({23, 31}, DType::f32, rng));
  }
  for (int64_t stride : {1, 2}) {
    const Tensor xi = test::random_tensor({2, 5, 13, 11}, DType::f32, rng);
    const Tensor w = test::random_tensor({7, 5, 3, 3}, DType::f32, rng);
    const Tensor b = test::random_tensor({7}, DType::f32, rng);
    Conv2dOptions o;
    o.stride = stride, o.padding = 1;
    const Tensor y = conv2d_forward(xi, w, b, o);
    const ConvGrads g = conv2d_backward(xi, w, y, true, o);
    const std::string k = "conv_s" + std::to_string(stride);
    r[k + "_y"] = y, r[k + "_dx"] = g.dinput, r[k + "_dw"] = g.dweight;
  }
  {
    const Tensor s = test::random_tensor({300, 37}, DType::f32, rng);
    for (ScanOp op : {ScanOp::sum, ScanOp::prod, ScanOp::max, ScanOp::logaddexp})
      r[std::string("scan_") + scan_op_name(op)] = prefix_scan(s, 0, op);
    const Tensor m = test::random_tensor({40, 6, 6}, DType::f32, rng, 0.4);
    r["scan_matmul"] = prefix_scan(m, 0, ScanOp::matmul);
    const Tensor a = test::random_tensor({300, 37}, DType::f32, rng, 0.5);
    const Tensor h = affine_scan(a, s, 0);
    r["affine_diag"] = h;
    r["affine_diag_da"] = affine_scan_backward(a, {}, h, s, 0).da;
    r["affine_matrix"] = affine_scan(m, test::random_tensor({40, 6}, DType::f32, rng), 0);
    r["tensor_exp"] = exp(s), r["tensor_tanh"] = tanh(s), r["tensor_sigmoid"] = sigmoid(s);
    r["tensor_sum"] = sum(s, {0}), r["tensor_max"] = max(s, {1});
  }
  return r;
}

TEST(SimdTargets, FmaTargetsGiveTheSameBitsOthersAgreeWithinTolerance) {
  const std::vector<std::string> targets = simd_targets();
  ASSERT_FALSE(targets.empty());
  TargetScope restore;
  std::map<std::string, Results> by_target;
  for (const std::string& t : targets) {
    set_simd_target(t);
    ASSERT_EQ(simd_target(), t);
    by_target[t] = compute_all();
  }
  // The first FMA target (or the best one, on a CPU without FMA) is the yardstick.
  std::string ref = targets.front();
  for (const std::string& t : targets)
    if (has_fma(t)) {
      ref = t;
      break;
    }
  for (const std::string& t : targets) {
    const bool exact = has_fma(t) && has_fma(ref);
    std::printf("%s vs %s: %s\n", t.c_str(), ref.c_str(), exact ? "bit-identical" : "tolerance");
    for (const auto& [name, want] : by_target[ref]) {
      const Tensor& got = by_target[t].at(name);
      const test::Tol tol = exact ? test::Tol{0, 0} : test::tol_for(want.dtype());
      EXPECT_TRUE(test::all_close(t + " vs " + ref, name, got, want, tol));
    }
  }
}

TEST(SimdTargets, UnknownTargetIsAnErrorNamingTheTargets) {
  TargetScope restore;
  const std::string before = simd_target(), best = simd_targets().front();
  try {
    set_simd_target("NEON_NOT_HERE");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NEON_NOT_HERE"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(best), std::string::npos) << e.what();
  }
  EXPECT_EQ(simd_target(), before) << "a refused name changes nothing";
  set_simd_target(simd_targets().back());
  EXPECT_EQ(simd_target(), simd_targets().back());
  set_simd_target("");
  EXPECT_EQ(simd_target(), best) << "\"\" restores the best target";
}

}  // namespace
}  // namespace grux::test_simd_targets
