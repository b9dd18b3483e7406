// The cost model against hand-computed closed forms, and against operation counts taken by
// running the equations on a scalar type that counts every +, -, x, / and exp it performs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grux/calibrate.h"
#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/error.h"

namespace grux::test_cost {
namespace {

using ::testing::HasSubstr;

constexpr CountMode kSeed = CountMode::seed, kGemm = CountMode::gemm, kMac = CountMode::mac;

// ---- A scalar that counts its operations (the seed convention, performed literally) -------

int64_t g_ops = 0;
struct Num {
  double v = 0;
};
Num operator+(Num a, Num b) {
  return ++g_ops, Num{a.v + b.v};
}
Num operator-(Num a, Num b) {
  return ++g_ops, Num{a.v - b.v};
}
Num operator*(Num a, Num b) {
  return ++g_ops, Num{a.v * b.v};
}
Num operator/(Num a, Num b) {
  return ++g_ops, Num{a.v / b.v};
}
Num operator-(Num a) {
  return Num{-a.v};
}  // negation is free
Num exp_(Num a) {
  return ++g_ops, Num{std::exp(a.v)};
}
const Num kOne{1};
Num sigmoid_(Num a) {
  return kOne / (kOne + exp_(-a));
}
Num tanh_(Num a) {
  return (exp_(a) - exp_(-a)) / (exp_(a) + exp_(-a));
}
// A dot product as the seed writes it: K multiplies and K - 1 adds.
template <typename F>
Num dot(int64_t K, F term) {
  Num s = term(0);
  for (int64_t k = 1; k < K; ++k) s = s + term(k);
  return s;
}
// `v` filled with distinct small values (the values do not matter; the counts do).
std::vector<Num> filled(int64_t n, double seed) {
  std::vector<Num> v(n);
  for (int64_t i = 0; i < n; ++i) v[i].v = std::sin(seed + 0.37 * double(i));
  return v;
}

struct CellCounts {
  int64_t forward, backward;
};

// One GRUCell step, forward then backward, written from the equations in gru.h with the
// counted scalar. Gate order r, z, n. Backward from saved r, z, n, hn = W_hn h + b_hn.
CellCounts count_gru_cell(int64_t N, int64_t I, int64_t H, bool bias, GruForm form) {
  const auto wih = filled(3 * H * I, 1), whh = filled(3 * H * H, 2), bih = filled(3 * H, 3),
             bhh = filled(3 * H, 4), x = filled(N * I, 5), h = filled(N * H, 6);
  auto Wih = [&](int64_t g, int64_t i) { return wih[g * I + i]; };
  auto Whh = [&](int64_t g, int64_t j) { return whh[g * H + j]; };
  std::vector<Num> r(N * H), z(N * H), n(N * H), hn(N * H), rh(N * H), hnew(N * H);
  g_ops = 0;
  // The input and hidden halves of gate g for row b, with their biases.
  auto half_i = [&](int64_t b, int64_t g) {
    Num s = dot(I, [&](int64_t i) { return Wih(g, i) * x[b * I + i]; });
    return bias ? s + bih[g] : s;
  };
  auto half_h = [&](int64_t b, int64_t g, const std::vector<Num>& state) {
    Num s = dot(H, [&](int64_t j) { return Whh(g, j) * state[b * H + j]; });
    return bias ? s + bhh[g] : s;
  };
  if (form == GruForm::reset_before) {
    for (int64_t b = 0; b < N; ++b)
      for (int64_t u = 0; u < H; ++u) r[b * H + u] = sigmoid_(half_i(b, u) + half_h(b, u, h));
    for (int64_t i = 0; i < N * H; ++i) rh[i] = r[i] * h[i];
  }
  for (int64_t b = 0; b < N; ++b)
    for (int64_t u = 0; u < H; ++u) {
      const int64_t k = b * H + u;
      if (form == GruForm::linear_before_reset) r[k] = sigmoid_(half_i(b, u) + half_h(b, u, h));
      z[k] = sigmoid_(half_i(b, H + u) + half_h(b, H + u, h));
      if (form == GruForm::linear_before_reset) {
        hn[k] = half_h(b, 2 * H + u, h);
        n[k] = tanh_(half_i(b, 2 * H + u) + r[k] * hn[k]);
      } else {
        n[k] = tanh_(half_i(b, 2 * H + u) + half_h(b, 2 * H + u, rh));
      }
      hnew[k] = (kOne - z[k]) * n[k] + z[k] * h[k];
    }
  const int64_t forward = g_ops;

  g_ops = 0;
  const auto dhnew = filled(N * H, 7);
  // Gate gradients: dgi for the input side (r, z, n), dgh for the hidden side.
  std::vector<Num> dgi(N * 3 * H), dgh(N * 3 * H), skip(N * H), drh(N * H);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t u = 0; u < H; ++u) {
      const int64_t k = b * H + u;
      const Num g = dhnew[k];
      const Num dz = g * (h[k] - n[k]);
      const Num dn = g * (kOne - z[k]);
      skip[k] = g * z[k];
      const Num dan = dn * (kOne - n[k] * n[k]);
      const Num daz = dz * (z[k] * (kOne - z[k]));
      dgi[b * 3 * H + H + u] = dgh[b * 3 * H + H + u] = daz;
      dgi[b * 3 * H + 2 * H + u] = dan;
      if (form == GruForm::linear_before_reset) {
        dgh[b * 3 * H + 2 * H + u] = dan * r[k];
        const Num dar = (dan * hn[k]) * (r[k] * (kOne - r[k]));
        dgi[b * 3 * H + u] = dgh[b * 3 * H + u] = dar;
      } else {
        dgh[b * 3 * H + 2 * H + u] = dan;
      }
    }
  std::vector<Num> dh(N * H);
  if (form == GruForm::reset_before) {
    // d(r*h) through W_hn, then r's gradient and the state gradient's extra term.
    for (int64_t b = 0; b < N; ++b)
      for (int64_t j = 0; j < H; ++j)
        drh[b * H + j] =
            dot(H, [&](int64_t u) { return dgh[b * 3 * H + 2 * H + u] * Whh(2 * H + u, j); });
    for (int64_t b = 0; b < N; ++b)
      for (int64_t u = 0; u < H; ++u) {
        const int64_t k = b * H + u;
        const Num dr = drh[k] * h[k];
        dgi[b * 3 * H + u] = dgh[b * 3 * H + u] = dr * (r[k] * (kOne - r[k]));
      }
    for (int64_t b = 0; b < N; ++b)
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = b * H + j;
        const Num rz = dot(2 * H, [&](int64_t g) { return dgh[b * 3 * H + g] * Whh(g, j); });
        dh[k] = skip[k] + drh[k] * r[k] + rz;
      }
  } else {
    for (int64_t b = 0; b < N; ++b)
      for (int64_t j = 0; j < H; ++j)
        dh[b * H + j] =
            skip[b * H + j] + dot(3 * H, [&](int64_t g) { return dgh[b * 3 * H + g] * Whh(g, j); });
  }
  for (int64_t b = 0; b < N; ++b)  // dx
    for (int64_t i = 0; i < I; ++i)
      dot(3 * H, [&](int64_t g) { return dgi[b * 3 * H + g] * Wih(g, i); });
  for (int64_t g = 0; g < 3 * H; ++g) {  // dW_ih, dW_hh (r*h in place of h for n, reset-before)
    for (int64_t i = 0; i < I; ++i)
      dot(N, [&](int64_t b) { return dgi[b * 3 * H + g] * x[b * I + i]; });
    const auto& st = form == GruForm::reset_before && g >= 2 * H ? rh : h;
    for (int64_t j = 0; j < H; ++j)
      dot(N, [&](int64_t b) { return dgh[b * 3 * H + g] * st[b * H + j]; });
  }
  if (bias)
    for (int64_t g = 0; g < 3 * H; ++g) {
      dot(N, [&](int64_t b) { return dgi[b * 3 * H + g]; });
      dot(N, [&](int64_t b) { return dgh[b * 3 * H + g]; });
    }
  return {forward, g_ops};
}

// The dot helper counts K - 1 adds for a plain sum of K terms; a sum over terms that are not
// products must not count multiplies. (Checked once, so the bias sums above are right.)
TEST(CostCountingScalar, SumsCountOnlyTheirAdds) {
  const auto v = filled(5, 0);
  g_ops = 0;
  dot(5, [&](int64_t i) { return v[i]; });
  EXPECT_EQ(g_ops, 4);
  g_ops = 0;
  sigmoid_(v[0]);
  EXPECT_EQ(g_ops, 3);
  g_ops = 0;
  tanh_(v[0]);
  EXPECT_EQ(g_ops, 7);
}

// ---- GRUCell ------------------------------------------------------------------------------

GruCellProblem cell(int64_t N, int64_t I, int64_t H, bool bias = true,
                    GruForm form = GruForm::linear_before_reset) {
  GruCellProblem p;
  p.N = N, p.I = I, p.H = H, p.bias = bias, p.form = form;
  return p;
}

TEST(CostGruCell, SeedExampleFromTheIssue) {
  // 6 * N * H * (I + H + 3.5) with N = 1, I = H = 256: 6 * 256 * 515.5.
  EXPECT_EQ(gru_cell_cost(cell(1, 256, 256)).fwd(kSeed).total(), 791808);
  // Without bias: 6 * 256 * 514.5.
  EXPECT_EQ(gru_cell_cost(cell(1, 256, 256, false)).fwd(kSeed).total(), 790272);
}

TEST(CostGruCell, SeedClosedFormsBothFormsAnySize) {
  for (auto [N, I, H] : {std::tuple{1, 1, 1}, {3, 5, 7}, {2, 64, 17}, {7, 13, 128}})
    for (GruForm form : {GruForm::linear_before_reset, GruForm::reset_before}) {
      // 6NH(I + H + 3.5) = NH(6I + 6H + 21); without bias NH(6I + 6H + 15).
      EXPECT_EQ(gru_cell_cost(cell(N, I, H, true, form)).fwd(kSeed).total(),
                int64_t(N) * H * (6 * I + 6 * H + 21));
      EXPECT_EQ(gru_cell_cost(cell(N, I, H, false, form)).fwd(kSeed).total(),
                int64_t(N) * H * (6 * I + 6 * H + 15));
    }
}

TEST(CostGruCell, GemmAndMacModes) {
  const CostReport r = gru_cell_cost(cell(1, 256, 256));
  EXPECT_EQ(r.fwd(kGemm).total(), 2 * 3 * 256 * 512);  // 786,432 FLOP
  EXPECT_EQ(r.fwd(kMac).total(), 3 * 256 * 512);       // 393,216 MAC
  EXPECT_EQ(r.fwd(kGemm).bias + r.fwd(kGemm).elementwise + r.fwd(kGemm).activation, 0);
  // Bias and no bias differ only in the seed mode.
  const CostReport nb = gru_cell_cost(cell(1, 256, 256, false));
  EXPECT_EQ(nb.fwd(kGemm).total(), r.fwd(kGemm).total());
  EXPECT_EQ(nb.fwd(kMac).total(), r.fwd(kMac).total());
  // Reconciliation: seed = gemm - (one add per dot product) + bias adds + gate arithmetic
  // + activations; 2 * 3H dots per row.
  EXPECT_EQ(r.fwd(kSeed).total(), r.fwd(kGemm).total() - 6 * 256 + 6 * 256 + 8 * 256 + 13 * 256);
}

TEST(CostGruCell, ForwardAndBackwardMatchTheCountedEquations) {
  for (auto [N, I, H] : {std::tuple{1, 1, 1}, {2, 3, 4}, {3, 5, 2}, {4, 2, 6}})
    for (bool bias : {true, false})
      for (GruForm form : {GruForm::linear_before_reset, GruForm::reset_before}) {
        const CellCounts counted = count_gru_cell(N, I, H, bias, form);
        const CostReport r = gru_cell_cost(cell(N, I, H, bias, form));
        SCOPED_TRACE(testing::Message() << "N=" << N << " I=" << I << " H=" << H << " bias=" << bias
                                        << " " << gru_form_name(form));
        EXPECT_EQ(r.fwd(kSeed).total(), counted.forward);
        EXPECT_EQ(r.bwd(kSeed).total(), counted.backward);
      }
}

TEST(CostGruCell, BackwardByHand) {
  // N = 2, I = 3, H = 4, bias, linear-before-reset (R = N = 2 rows):
  //   state gradient: R*H dots of 3H = 8 * 23; input gradient: R*I dots of 3H = 6 * 23;
  //   dW_ih, dW_hh: 3H*I + 3H*H entries, dots of R: (36 + 48) * 3; bias sums 2 * 3H * (R-1) = 24;
  //   pointwise 8 * R*H = 64; activation derivatives 9 * R*H = 72.
  const OpCount b = gru_cell_cost(cell(2, 3, 4)).bwd(kSeed);
  EXPECT_EQ(b.matmul, 8 * 23 + 6 * 23 + (36 + 48) * 3);
  EXPECT_EQ(b.bias, 24);
  EXPECT_EQ(b.elementwise, 64);
  EXPECT_EQ(b.activation, 72);
  EXPECT_EQ(b.total(), 734);
  // GEMM mode: the backward's four products are twice the forward's two.
  const CostReport r = gru_cell_cost(cell(2, 3, 4));
  EXPECT_EQ(r.bwd(kGemm).total(), 2 * r.fwd(kGemm).total());
  EXPECT_EQ(r.bwd(kMac).total(), 2 * r.fwd(kMac).total());
  EXPECT_EQ(r.training_total(kGemm), 3 * r.fwd(kGemm).total());
}

// ---- GRU stack ------------------------------------------------------------------------------

GruProblem gru(const std::string& d, bool bias = true) {
  GruProblem p = GruProblem::parse(d);
  p.bias = bias;
  return p;
}

TEST(CostGru, OneLayerIsTheCellOverAllRows) {
  // A layer over T steps of N rows counts like one cell of N*T rows; the backward adds the
  // output gradient to the carried one (one add per row and unit).
  for (bool bias : {true, false}) {
    const CostReport g = gru_cost(gru("t7n3i5h4", bias));
    const CostReport c = gru_cell_cost(cell(21, 5, 4, bias));
    for (CountMode m : {kSeed, kGemm, kMac}) EXPECT_EQ(g.fwd(m).total(), c.fwd(m).total());
    EXPECT_EQ(g.bwd(kSeed).total(), c.bwd(kSeed).total() + 21 * 4);
    EXPECT_EQ(g.bwd(kGemm).total(), c.bwd(kGemm).total());
  }
}

TEST(CostGru, StackClosedForm) {
  // l2d2t200n32i128h256: rows R = 6400; layer 0 in = 128, layer 1 in = 2H = 512.
  const CostReport r = gru_cost(gru("l2d2t200n32i128h256"));
  const int64_t R = 6400, H = 256;
  EXPECT_EQ(r.fwd(kSeed).total(),
            2 * R * H * (6 * 128 + 6 * H + 21) + 2 * R * H * (6 * 512 + 6 * H + 21));
  EXPECT_EQ(r.fwd(kGemm).total(), 2 * 2 * R * 3 * H * (128 + H) + 2 * 2 * R * 3 * H * (512 + H));
  EXPECT_EQ(double(r.fwd(kGemm).total()), GruProblem::parse("l2d2t200n32i128h256").gemm_flops());
  EXPECT_EQ(r.fwd(kMac).total() * 2, r.fwd(kGemm).total());
  EXPECT_EQ(r.training_total(kGemm), 3 * r.fwd(kGemm).total());  // WORKLOADS.md's 3x
  // Backward seed: per layer-direction as a cell of R rows plus the carry add, plus the sum of
  // the two directions' input gradients (R * in per layer).
  int64_t bwd = 0;
  for (int64_t in : {128, 512})
    bwd += 2 * (gru_cell_cost(cell(R, in, H)).bwd(kSeed).total() + R * H) + R * in;
  EXPECT_EQ(r.bwd(kSeed).total(), bwd);
}

TEST(CostGru, VariableLengthsCountTheSumOfLengths) {
  GruProblem p = gru("l1d2t10n3i5h7");
  p.lengths = {10, 4, 1};
  const CostReport r = gru_cost(p);
  GruProblem full = gru("l1d2t5n3i5h7");  // 15 rows, same as the lengths' sum
  const CostReport f = gru_cost(full);
  for (CountMode m : {kSeed, kGemm, kMac}) {
    EXPECT_EQ(r.fwd(m).total(), f.fwd(m).total());
    EXPECT_EQ(r.bwd(m).total(), f.bwd(m).total());
  }
  EXPECT_EQ(double(r.fwd(kGemm).total()), p.gemm_flops());
  // uniform:10:100:1 lengths (W6): the count follows rows().
  GruProblem w6 = gru("l1d1t100n64i128h256");
  w6.set_lengths("uniform:10:100:1");
  EXPECT_EQ(gru_cost(w6).fwd(kMac).total(), w6.rows() * 3 * 256 * (128 + 256));
  EXPECT_LT(w6.rows(), 64 * 100);
}

TEST(CostGru, BothFormsCountAlike) {
  GruProblem a = gru("l2d1t9n2i3h5"), b = a;
  b.form = GruForm::reset_before;
  for (CountMode m : {kSeed, kGemm, kMac}) {
    EXPECT_EQ(gru_cost(a).fwd(m).total(), gru_cost(b).fwd(m).total());
    EXPECT_EQ(gru_cost(a).bwd(m).total(), gru_cost(b).bwd(m).total());
  }
}

TEST(CostGru, ParameterAndActivationBytes) {
  // nn.GRU(128, 256, num_layers=2, bidirectional=True): per direction, layer 0
  // 3*256*128 + 3*256*256 + 6*256 = 296,448; layer 1 (in 512) 591,360.
  const CostReport r = gru_cost(gru("l2d2t200n32i128h256"));
  EXPECT_EQ(r.memory.parameters, 2 * (296448 + 591360));
  EXPECT_EQ(r.memory.parameter_bytes, 4 * 2 * (296448 + 591360));
  GruProblem p64 = gru("l2d2t200n32i128h256");
  p64.dtype = DType::f64;
  EXPECT_EQ(gru_cost(p64).memory.parameter_bytes, 8 * 2 * (296448 + 591360));
  EXPECT_EQ(gru_cost(gru("l2d2t200n32i128h256", false)).memory.parameters,
            2 * (296448 + 591360) - 4 * 6 * 256);
  // Inference peak: layer 1's input and output (T*N*2H each) + the final states (L*D*N*H).
  const int64_t TN = 6400;
  EXPECT_EQ(r.memory.inference_bytes, 4 * (TN * 512 + TN * 512 + 4 * 32 * 256));
  // Training: input, both layers' outputs, the tape (4H per row + R + N states per
  // layer-direction), final states.
  EXPECT_EQ(r.memory.training_bytes,
            4 * (TN * 128 + 2 * TN * 512 + 4 * (TN * 4 * 256 + (TN + 32) * 256) + 4 * 32 * 256));
}

TEST(CostGru, TrafficUnderBothCacheModels) {
  // l1d1t100n64i256h512: the reread model fetches W_hh + b_hh at each of the 100 steps.
  const CostReport r = gru_cost(gru("l1d1t100n64i256h512"));
  const int64_t whh = (3 * 512 * 512 + 3 * 512) * 4;
  EXPECT_EQ(r.inference_traffic.reread.read - r.inference_traffic.cached.read, 99 * whh);
  EXPECT_EQ(r.inference_traffic.reread.written, r.inference_traffic.cached.written);
  // Cached forward: weights + x + h0 in, y + h_n out.
  const int64_t w = (3 * 512 * 256 + 3 * 512 * 512 + 6 * 512) * 4;
  EXPECT_EQ(r.inference_traffic.cached.read, w + 4 * (6400 * 256 + 64 * 512));
  EXPECT_EQ(r.inference_traffic.cached.written, 4 * (6400 * 512 + 64 * 512));
  // Training moves more than inference in both models.
  EXPECT_GT(r.training_traffic.cached.total(), 2 * r.inference_traffic.cached.total());
  EXPECT_GT(r.training_traffic.reread.read, r.training_traffic.cached.read);
  // The streaming API re-reads the input weights too, every frame.
  const CostReport s = gru_stream_cost(gru("l1d1t100n64i256h512"));
  EXPECT_EQ(s.fwd(kSeed).total(), r.fwd(kSeed).total());
  EXPECT_EQ(s.inference_traffic.reread.read, 100 * w + 4 * (6400 * 256 + 64 * 512));
}

TEST(CostGru, TooLargeToCountIsAnError) {
  const GruProblem p = GruProblem::parse("l9d2t999999999n999999999i999999999h999999999");
  try {
    gru_cost(p);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not fit in 64 bits"));
  }
}

// ---- LSTM -----------------------------------------------------------------------------------

// One LSTM step of N rows, forward then backward, written from the equations in lstm.h with
// the counted scalar: gates i, f, g, o; c' = f c + i g; m = o tanh(c'); h' = m, or W_hr m with
// a projection of P > 0 rows. The backward starts from d(h') and d(c'), recomputes tanh(c')
// (as PyTorch's fused cell backward does) and reads the saved gates and c.
CellCounts count_lstm_cell(int64_t N, int64_t I, int64_t H, int64_t P, bool bias) {
  const int64_t Ho = P > 0 ? P : H;
  const auto wih = filled(4 * H * I, 1), whh = filled(4 * H * Ho, 2), bih = filled(4 * H, 3),
             bhh = filled(4 * H, 4), whr = filled(P * H, 8), x = filled(N * I, 5),
             h = filled(N * Ho, 6), c = filled(N * H, 9);
  auto Wih = [&](int64_t g, int64_t i) { return wih[g * I + i]; };
  auto Whh = [&](int64_t g, int64_t j) { return whh[g * Ho + j]; };
  std::vector<Num> gi(N * H), gf(N * H), gg(N * H), go(N * H), cn(N * H), m(N * H), hn(N * Ho);
  g_ops = 0;
  auto pre = [&](int64_t b, int64_t g) {
    Num si = dot(I, [&](int64_t i) { return Wih(g, i) * x[b * I + i]; });
    Num sh = dot(Ho, [&](int64_t j) { return Whh(g, j) * h[b * Ho + j]; });
    if (bias) si = si + bih[g], sh = sh + bhh[g];
    return si + sh;
  };
  for (int64_t b = 0; b < N; ++b)
    for (int64_t u = 0; u < H; ++u) {
      const int64_t k = b * H + u;
      gi[k] = sigmoid_(pre(b, u));
      gf[k] = sigmoid_(pre(b, H + u));
      gg[k] = tanh_(pre(b, 2 * H + u));
      go[k] = sigmoid_(pre(b, 3 * H + u));
      cn[k] = gf[k] * c[k] + gi[k] * gg[k];
      m[k] = go[k] * tanh_(cn[k]);
    }
  for (int64_t b = 0; b < N; ++b)
    for (int64_t p = 0; p < Ho; ++p)
      hn[b * Ho + p] =
          P > 0 ? dot(H, [&](int64_t u) { return whr[p * H + u] * m[b * H + u]; }) : m[b * H + p];
  const int64_t forward = g_ops;

  g_ops = 0;
  const auto dh = filled(N * Ho, 7), dcn = filled(N * H, 10);
  std::vector<Num> dm(N * H), da(N * 4 * H);
  for (int64_t b = 0; b < N; ++b)
    for (int64_t u = 0; u < H; ++u)
      dm[b * H + u] = P > 0 ? dot(P, [&](int64_t p) { return whr[p * H + u] * dh[b * Ho + p]; })
                            : dh[b * H + u];
  for (int64_t b = 0; b < N; ++b)
    for (int64_t u = 0; u < H; ++u) {
      const int64_t k = b * H + u;
      const Num tc = tanh_(cn[k]);
      const Num d_o = dm[k] * tc;
      const Num dc = dcn[k] + (dm[k] * go[k]) * (kOne - tc * tc);
      const Num di = dc * gg[k], dg = dc * gi[k], df = dc * c[k];
      (void)(dc * gf[k]);  // the previous cell state's gradient
      da[b * 4 * H + u] = di * (gi[k] * (kOne - gi[k]));
      da[b * 4 * H + H + u] = df * (gf[k] * (kOne - gf[k]));
      da[b * 4 * H + 2 * H + u] = dg * (kOne - gg[k] * gg[k]);
      da[b * 4 * H + 3 * H + u] = d_o * (go[k] * (kOne - go[k]));
    }
  for (int64_t b = 0; b < N; ++b)  // the previous state's gradient
    for (int64_t j = 0; j < Ho; ++j)
      dot(4 * H, [&](int64_t g) { return da[b * 4 * H + g] * Whh(g, j); });
  for (int64_t b = 0; b < N; ++b)  // dx
    for (int64_t i = 0; i < I; ++i)
      dot(4 * H, [&](int64_t g) { return da[b * 4 * H + g] * Wih(g, i); });
  for (int64_t g = 0; g < 4 * H; ++g) {  // dW_ih, dW_hh
    for (int64_t i = 0; i < I; ++i)
      dot(N, [&](int64_t b) { return da[b * 4 * H + g] * x[b * I + i]; });
    for (int64_t j = 0; j < Ho; ++j)
      dot(N, [&](int64_t b) { return da[b * 4 * H + g] * h[b * Ho + j]; });
  }
  for (int64_t p = 0; p < P; ++p)  // dW_hr
    for (int64_t u = 0; u < H; ++u)
      dot(N, [&](int64_t b) { return dh[b * Ho + p] * m[b * H + u]; });
  if (bias)
    for (int64_t g = 0; g < 4 * H; ++g)
      for (int twice = 0; twice < 2; ++twice) dot(N, [&](int64_t b) { return da[b * 4 * H + g]; });
  return {forward, g_ops};
}

LstmCellProblem lstm_cell(int64_t N, int64_t I, int64_t H, bool bias = true) {
  LstmCellProblem p;
  p.N = N, p.I = I, p.H = H, p.bias = bias;
  return p;
}

LstmProblem lstm(const std::string& d, bool bias = true) {
  LstmProblem p = LstmProblem::parse(d);
  p.bias = bias;
  return p;
}

TEST(CostLstmCell, SeedClosedForms) {
  // NH(8I + 8H + 31) with bias, NH(8I + 8H + 23) without (docs/cost_model.md, the LSTMCell).
  EXPECT_EQ(lstm_cell_cost(lstm_cell(1, 256, 256)).fwd(kSeed).total(), 1056512);
  EXPECT_EQ(lstm_cell_cost(lstm_cell(1, 256, 256, false)).fwd(kSeed).total(), 1054464);
  for (auto [N, I, H] : {std::tuple{1, 1, 1}, {3, 5, 7}, {2, 64, 17}, {7, 13, 128}}) {
    EXPECT_EQ(lstm_cell_cost(lstm_cell(N, I, H)).fwd(kSeed).total(),
              int64_t(N) * H * (8 * I + 8 * H + 31));
    EXPECT_EQ(lstm_cell_cost(lstm_cell(N, I, H, false)).fwd(kSeed).total(),
              int64_t(N) * H * (8 * I + 8 * H + 23));
  }
  const CostReport r = lstm_cell_cost(lstm_cell(1, 256, 256));
  EXPECT_EQ(r.fwd(kGemm).total(), 2 * 4 * 256 * 512);
  EXPECT_EQ(r.fwd(kMac).total(), 4 * 256 * 512);
  EXPECT_EQ(r.bwd(kGemm).total(), 2 * r.fwd(kGemm).total());
  EXPECT_EQ(r.training_total(kGemm), 3 * r.fwd(kGemm).total());
}

TEST(CostLstmCell, ForwardAndBackwardMatchTheCountedEquations) {
  for (auto [N, I, H] : {std::tuple{1, 1, 1}, {2, 3, 4}, {3, 5, 2}, {4, 2, 6}})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " I=" << I << " H=" << H << " bias=" << bias);
      const CellCounts counted = count_lstm_cell(N, I, H, 0, bias);
      const CostReport r = lstm_cell_cost(lstm_cell(N, I, H, bias));
      EXPECT_EQ(r.fwd(kSeed).total(), counted.forward);
      EXPECT_EQ(r.bwd(kSeed).total(), counted.backward);
    }
}

TEST(CostLstm, OneLayerIsTheCountedStepOverAllRowsWithOrWithoutProjection) {
  // A layer over T steps of N rows counts like one step of N*T rows; the backward adds the
  // output gradient to the carried one (one add per row and unit of h).
  for (const char* d : {"t7n3i5h4", "t7n3i5h4p2", "t2n1i1h3p1"})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(testing::Message() << d << " bias=" << bias);
      const LstmProblem p = lstm(d, bias);
      const int64_t R = p.T * p.N;
      const CellCounts counted = count_lstm_cell(R, p.input_size, p.hidden_size, p.proj_size, bias);
      const CostReport r = lstm_cost(p);
      EXPECT_EQ(r.fwd(kSeed).total(), counted.forward);
      EXPECT_EQ(r.bwd(kSeed).total(), counted.backward + R * p.output_size());
      EXPECT_EQ(double(r.fwd(kGemm).total()), p.gemm_flops());
      EXPECT_EQ(r.bwd(kGemm).total(), 2 * r.fwd(kGemm).total());
    }
}

TEST(CostLstm, StackLengthsBytesAndTraffic) {
  // l2d2t200n32i128h256 (L5 as an LSTM): layer 1's input is 2H.
  const CostReport r = lstm_cost(lstm("l2d2t200n32i128h256"));
  const int64_t R = 6400, H = 256, N = 32;
  EXPECT_EQ(r.fwd(kGemm).total(), 2 * 2 * R * 4 * H * (128 + H) + 2 * 2 * R * 4 * H * (512 + H));
  EXPECT_EQ(r.training_total(kGemm), 3 * r.fwd(kGemm).total());
  // nn.LSTM(128, 256, 2, bidirectional=True): per direction 4H(in + H) + 8H.
  const int64_t p0 = 4 * H * (128 + H) + 8 * H, p1 = 4 * H * (512 + H) + 8 * H;
  EXPECT_EQ(r.memory.parameters, 2 * (p0 + p1));
  EXPECT_EQ(r.memory.parameter_bytes, 4 * 2 * (p0 + p1));
  // Inference peak: layer 1's input and output + the final h and c of every layer-direction.
  EXPECT_EQ(r.memory.inference_bytes, 4 * (R * 512 + R * 512 + 4 * N * 2 * H));
  // Training: input, both layers' outputs, the tape (4H gates per row, every h and every c,
  // the initial ones included, per layer-direction), the final states.
  const int64_t tape = R * 4 * H + 2 * (R + N) * H;
  EXPECT_EQ(r.memory.training_bytes, 4 * (R * 128 + 2 * R * 512 + 4 * tape + 4 * N * 2 * H));
  // Variable lengths count their sum.
  LstmProblem p = lstm("l1d2t10n3i5h7p3");
  p.lengths = {10, 4, 1};
  const CostReport v = lstm_cost(p), f = lstm_cost(lstm("l1d2t5n3i5h7p3"));
  for (CountMode m : {kSeed, kGemm, kMac}) {
    EXPECT_EQ(v.fwd(m).total(), f.fwd(m).total());
    EXPECT_EQ(v.bwd(m).total(), f.bwd(m).total());
  }
  // l1d1t100n64i256h512: the reread model fetches W_hh + b_hh at each of the 100 steps; the
  // stream re-reads every weight every frame.
  const CostReport c = lstm_cost(lstm("l1d1t100n64i256h512"));
  const int64_t whh = (4 * 512 * 512 + 4 * 512) * 4;
  EXPECT_EQ(c.inference_traffic.reread.read - c.inference_traffic.cached.read, 99 * whh);
  const int64_t w = (4 * 512 * 256 + 4 * 512 * 512 + 8 * 512) * 4;
  const int64_t states = 64 * (512 + 512);  // h and c
  EXPECT_EQ(c.inference_traffic.cached.read, w + 4 * (6400 * 256 + states));
  EXPECT_EQ(c.inference_traffic.cached.written, 4 * (6400 * 512 + states));
  const CostReport s = lstm_stream_cost(lstm("l1d1t100n64i256h512"));
  EXPECT_EQ(s.op, "lstm_stream");
  EXPECT_EQ(s.fwd(kSeed).total(), c.fwd(kSeed).total());
  EXPECT_EQ(s.inference_traffic.reread.read, 100 * w + 4 * (6400 * 256 + states));
  // A projection's weights are read with W_hh at every step.
  const CostReport pr = lstm_cost(lstm("l1d1t100n64i256h512p128"));
  const int64_t whh_p = (4 * 512 * 128 + 4 * 512 + 128 * 512) * 4;
  EXPECT_EQ(pr.inference_traffic.reread.read - pr.inference_traffic.cached.read, 99 * whh_p);
}

TEST(CostLstm, RegistryAndErrors) {
  EXPECT_EQ(cost_of("lstm", "l1d1t10n2i3h4p2", {}).op, "lstm");
  EXPECT_EQ(cost_of("lstm_cell", "n1i3h4", {}).fwd(kSeed).total(), 4 * (8 * 3 + 8 * 4 + 31));
  CostOptions lengths;
  lengths.lengths = "uniform:2:10:1";
  EXPECT_EQ(cost_of("lstm", "t10n4i3h4", lengths).variant.find("lengths"), 6u);
  EXPECT_TRUE(is_stream_op("lstm_stream") && is_stream_op("gru_stream") && !is_stream_op("lstm"));
  for (auto [op, d, msg] : {std::tuple{"lstm_stream", "l1d2t10n1i3h4", "unidirectional"},
                            {"lstm", "t10n1i3h4p4", "p4"},
                            {"lstm_cell", "n1i3", "h"}}) {
    try {
      cost_of(op, d, {});
      ADD_FAILURE() << op << " " << d << ": expected an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(msg)) << op << " " << d;
    }
  }
  CostOptions rb;
  rb.form = GruForm::reset_before;
  EXPECT_THROW(cost_of("lstm", "t10n1i3h4", rb), Error);
  EXPECT_THROW(cost_of("lstm_stream", "t10n1i3h4", lengths), Error);
}

// ---- Linear -------------------------------------------------------------------------------

LinearProblem lin(int64_t B, int64_t I, int64_t O, bool bias = true) {
  LinearProblem p;
  p.B = B, p.I = I, p.O = O, p.bias = bias;
  return p;
}

TEST(CostLinear, ClosedForms) {
  // b32i256o512: with bias 2*B*O*I; without B*O*(2I - 1).
  EXPECT_EQ(linear_cost(lin(32, 256, 512)).fwd(kSeed).total(), 2LL * 32 * 512 * 256);
  EXPECT_EQ(linear_cost(lin(32, 256, 512, false)).fwd(kSeed).total(), 32LL * 512 * (2 * 256 - 1));
  EXPECT_EQ(linear_cost(lin(32, 256, 512)).fwd(kGemm).total(), 2LL * 32 * 512 * 256);
  EXPECT_EQ(linear_cost(lin(32, 256, 512, false)).fwd(kGemm).total(), 2LL * 32 * 512 * 256);
  EXPECT_EQ(linear_cost(lin(32, 256, 512)).fwd(kMac).total(), 32LL * 512 * 256);
  // Backward: dx B*I dots of O, dW O*I dots of B, db O*(B - 1).
  const CostReport r = linear_cost(lin(3, 5, 7));
  EXPECT_EQ(r.bwd(kSeed).total(), 3 * 5 * 13 + 7 * 5 * 5 + 7 * 2);
  EXPECT_EQ(linear_cost(lin(3, 5, 7, false)).bwd(kSeed).total(), 3 * 5 * 13 + 7 * 5 * 5);
  EXPECT_EQ(r.bwd(kGemm).total(), 4 * 3 * 5 * 7);
  EXPECT_EQ(r.bwd(kMac).total(), 2 * 3 * 5 * 7);
  EXPECT_EQ(r.memory.parameters, 7 * 5 + 7);
  EXPECT_EQ(r.memory.parameter_bytes, 4 * (7 * 5 + 7));
  EXPECT_EQ(r.inference_traffic.cached.read, 4 * (35 + 7 + 15));
  EXPECT_EQ(r.inference_traffic.cached.written, 4 * 21);
}

TEST(CostLinear, MatchesTheCountedEquations) {
  for (auto [B, I_, O_] : {std::tuple{1, 1, 1}, {3, 5, 7}, {4, 1, 3}})
    for (bool bias : {true, false}) {
      // Copies: clang before 16 does not let a lambda capture a structured binding.
      const int64_t I = I_, O = O_;
      const auto w = filled(O * I, 1), b = filled(O, 2), x = filled(B * I, 3),
                 dy = filled(B * O, 4);
      g_ops = 0;
      for (int64_t r = 0; r < B; ++r)
        for (int64_t o = 0; o < O; ++o) {
          Num s = dot(I, [&](int64_t i) { return w[o * I + i] * x[r * I + i]; });
          if (bias) s = s + b[o];
        }
      const int64_t fwd = g_ops;
      g_ops = 0;
      for (int64_t r = 0; r < B; ++r)
        for (int64_t i = 0; i < I; ++i)
          dot(O, [&](int64_t o) { return dy[r * O + o] * w[o * I + i]; });
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t i = 0; i < I; ++i)
          dot(B, [&](int64_t r) { return dy[r * O + o] * x[r * I + i]; });
        if (bias) dot(B, [&](int64_t r) { return dy[r * O + o]; });
      }
      const CostReport rep = linear_cost(lin(B, I, O, bias));
      EXPECT_EQ(rep.fwd(kSeed).total(), fwd) << B << " " << I << " " << O << " " << bias;
      EXPECT_EQ(rep.bwd(kSeed).total(), g_ops) << B << " " << I << " " << O << " " << bias;
    }
}

// ---- Convolution ----------------------------------------------------------------------------

// conv2d forward and backward with the counted scalar, padding materialized as zeros: any
// kernel, stride, padding and dilation per dimension, with or without bias.
CellCounts count_conv2d(const ConvProblem& p) {
  const int64_t N = p.N, C = p.C, D = p.D, G = p.groups, KH = p.kernel.h, KW = p.kernel.w;
  const int64_t SH = p.stride.h, SW = p.stride.w, RH = p.dilation.h, RW = p.dilation.w;
  const int64_t HP = p.H + 2 * p.padding.h, WP = p.W + 2 * p.padding.w, OH = p.OH(), OW = p.OW(),
                CG = C / G, DG = D / G, KK = KH * KW;
  const auto xp = filled(N * C * HP * WP, 1), w = filled(D * CG * KK, 2), b = filled(D, 3),
             dy = filled(N * D * OH * OW, 4);
  auto X = [&](int64_t n, int64_t c, int64_t y, int64_t x) {
    return xp[((n * C + c) * HP + y) * WP + x];
  };
  auto Wt = [&](int64_t d, int64_t c, int64_t i, int64_t j) {
    return w[((d * CG + c) * KH + i) * KW + j];
  };
  auto DY = [&](int64_t n, int64_t d, int64_t y, int64_t x) {
    return dy[((n * D + d) * OH + y) * OW + x];
  };
  g_ops = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t g = d / DG;
          Num s = dot(CG * KK, [&](int64_t t) {
            const int64_t c = t / KK, i = t / KW % KH, j = t % KW;
            return Wt(d, c, i, j) * X(n, g * CG + c, oy * SH + i * RH, ox * SW + j * RW);
          });
          if (p.bias) s = s + b[d];
        }
  const int64_t fwd = g_ops;
  g_ops = 0;
  for (int64_t d = 0; d < D; ++d) {
    const int64_t g = d / DG;
    for (int64_t t = 0; t < CG * KK; ++t) {
      const int64_t c = t / KK, i = t / KW % KH, j = t % KW;
      dot(N * OH * OW, [&](int64_t q) {
        const int64_t n = q / (OH * OW), oy = q / OW % OH, ox = q % OW;
        return DY(n, d, oy, ox) * X(n, g * CG + c, oy * SH + i * RH, ox * SW + j * RW);
      });
    }
    if (p.bias)
      dot(N * OH * OW, [&](int64_t q) { return DY(q / (OH * OW), d, q / OW % OH, q % OW); });
  }
  // grad_input in the padded frame: the first product at a position is stored, later ones
  // added.
  std::vector<Num> dx(N * C * HP * WP);
  std::vector<bool> touched(dx.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox)
          for (int64_t t = 0; t < CG * KK; ++t) {
            const int64_t c = d / DG * CG + t / KK, i = t / KW % KH, j = t % KW;
            const int64_t at = ((n * C + c) * HP + oy * SH + i * RH) * WP + ox * SW + j * RW;
            const Num prod = DY(n, d, oy, ox) * Wt(d, t / KK, i, j);
            dx[at] = touched[at] ? dx[at] + prod : prod;
            touched[at] = true;
          }
  return {fwd, g_ops};
}

TEST(CostConv, Conv2dMatchesTheCountedLoops) {
  for (const char* d :
       {"n1c1h3w3d1k3", "n2c4h5w6d6k3p1", "n1c2h7w7d2k2s3", "n2c4h6w5d4k3s2p1g2", "n1c3h4w4d3k1",
        "n1c2h5w5d2k3s1p2",
        // non-square kernels, strides and padding; dilation (windows that interleave, touch
        // and leave gaps, also with strides sharing a factor with the dilation)
        "n1c2h6w9d2k2x4s1x2p0x1", "n1c1h9w9d1k3r2", "n1c2h11w10d2k3s2r2", "n1c1h13w12d1k2s4r3",
        "n2c2h12w12d2k3x2s3x2p1r2x3", "n1c1h16w15d1k4s2r4", "n1c1h9w9d1k2s2r3", "n1c4h7w7d2k3r2g2"})
    for (bool bias : {true, false}) {
      ConvProblem p = ConvProblem::parse(d);
      p.bias = bias;
      const CellCounts counted = count_conv2d(p);
      const CostReport r = conv2d_cost(p);
      EXPECT_EQ(r.fwd(kSeed).total(), counted.forward) << d << " bias " << bias;
      EXPECT_EQ(r.bwd(kSeed).total(), counted.backward) << d << " bias " << bias;
      EXPECT_EQ(double(r.fwd(kGemm).total()), p.flops()) << d;
      EXPECT_EQ(r.bwd(kGemm).total(), 2 * r.fwd(kGemm).total()) << d;
      EXPECT_EQ(2 * r.fwd(kMac).total(), r.fwd(kGemm).total()) << d;
      EXPECT_EQ(r.variant, bias ? "bias" : "no bias");
    }
}

TEST(CostConv, Conv1dIsConv2dOfHeightOne) {
  for (const char* d : {"n2c4l9d6k3s2p1g2", "n1c2l20d3k3r3", "n1c1l17d1k4s3p2r2"})
    for (bool bias : {true, false}) {
      Conv1dProblem p = Conv1dProblem::parse(d);
      p.bias = bias;
      ConvProblem q;
      q.N = p.N, q.C = p.C, q.H = 1, q.W = p.L, q.D = p.D, q.kernel = {1, p.K};
      q.stride = {1, p.stride}, q.padding = {0, p.padding}, q.dilation = {1, p.dilation};
      q.groups = p.groups, q.bias = bias;
      const CellCounts counted = count_conv2d(q);
      const CostReport r = conv1d_cost(p);
      EXPECT_EQ(r.fwd(kSeed).total(), counted.forward) << d;
      EXPECT_EQ(r.bwd(kSeed).total(), counted.backward) << d;
      EXPECT_EQ(r.memory.parameters, p.D * (p.C / p.groups) * p.K + (bias ? p.D : 0)) << d;
    }
}

TEST(CostConv, ClosedFormsAndBytes) {
  // n8c16h64w64d32k3: 62x62 outputs, 144 taps: 2 * 8 * 32 * 3844 * 144 FLOP; seed with bias
  // counts the same (2K - 1 per dot + 1 bias).
  const CostReport r = conv2d_cost(ConvProblem::parse("n8c16h64w64d32k3"));
  EXPECT_EQ(r.fwd(kGemm).total(), 2LL * 8 * 32 * 3844 * 144);
  EXPECT_EQ(r.fwd(kSeed).total(), 2LL * 8 * 32 * 3844 * 144);
  EXPECT_EQ(r.memory.parameters, 32 * 144 + 32);
  EXPECT_EQ(r.memory.inference_bytes, 4 * (8 * 16 * 64 * 64 + 8 * 32 * 3844));
  // conv1d n2c4l9d6k3s2p1g2: OL = (9 + 2 - 3) / 2 + 1 = 5 outputs of (4/2) * 3 = 6 taps.
  const CostReport c1 = conv1d_cost(Conv1dProblem::parse("n2c4l9d6k3s2p1g2"));
  EXPECT_EQ(c1.memory.parameters, 6 * 2 * 3 + 6);
  EXPECT_EQ(c1.fwd(kMac).total(), 2 * 6 * 5 * 2 * 3);
}

// ---- Scans and minGRU ----------------------------------------------------------------------

ScanProblem scan(const char* d) {
  return ScanProblem::parse(d);
}

TEST(CostScan, ElementwiseClosedForms) {
  // t10c3: 3 sequences of 10, 9 combines each.
  const CostReport s = scan_cost(ScanCostOp::sum, scan("t10c3"));
  EXPECT_EQ(s.op, "scan_sum");
  EXPECT_EQ(s.fwd(kSeed).total(), 27);
  EXPECT_EQ(s.bwd(kSeed).total(), 27);  // the reverse cumsum of dy
  EXPECT_EQ(s.fwd(kGemm).total(), 0);
  EXPECT_EQ(s.fwd(kMac).total(), 0);
  // n2t5c3: 6 sequences, 24 combines; prod backward: dy*y (30), reverse sum (24), /x (30).
  const CostReport p = scan_cost(ScanCostOp::prod, scan("n2t5c3"));
  EXPECT_EQ(p.fwd(kSeed).total(), 24);
  EXPECT_EQ(p.bwd(kSeed).total(), 30 + 24 + 30);
  EXPECT_EQ(scan_cost(ScanCostOp::max, scan("n2t5c3")).bwd(kSeed).total(), 30);
  EXPECT_EQ(scan_cost(ScanCostOp::min, scan("n2t5c3")).fwd(kSeed).total(), 24);
  EXPECT_EQ(scan_cost(ScanCostOp::logaddexp, scan("t10c3")).fwd(kSeed).total(), 6 * 27);
  // Diagonal affine n1t6c2: 10 combines of x and +; backward 3 per combine.
  const CostReport a = scan_cost(ScanCostOp::affine, scan("t6c2"));
  EXPECT_EQ(a.fwd(kSeed).total(), 20);
  EXPECT_EQ(a.bwd(kSeed).total(), 30);
  // Bytes: x and y, 30 f32 each; a and b in, h out for affine.
  EXPECT_EQ(p.memory.inference_bytes, 4 * 60);
  EXPECT_EQ(p.inference_traffic.cached.read, 4 * 30);
  EXPECT_EQ(p.inference_traffic.cached.written, 4 * 30);
  EXPECT_EQ(a.inference_traffic.reread.read, 4 * 24);
  EXPECT_EQ(a.inference_traffic.reread.written, 4 * 12);
  ScanProblem f64 = scan("n2t5c3");
  f64.dtype = DType::f64;
  EXPECT_EQ(scan_cost(ScanCostOp::sum, f64).memory.inference_bytes, 8 * 60);
}

TEST(CostScan, MatrixScansCountTheirProducts) {
  // matmul t5d4: 4 products of 4x4 matrices: 16 dots of length 4 each.
  const CostReport m = scan_cost(ScanCostOp::matmul, scan("t5d4"));
  EXPECT_EQ(m.fwd(kGemm).total(), 2 * 4 * 4 * 4 * 4);
  EXPECT_EQ(m.fwd(kMac).total(), 4 * 4 * 4 * 4);
  EXPECT_EQ(m.fwd(kSeed).total(), 4 * 16 * 7);
  EXPECT_EQ(m.bwd(kGemm).total(), 2 * m.fwd(kGemm).total());
  EXPECT_EQ(m.bwd(kSeed).total(), 2 * 4 * 16 * 7 + 4 * 16);
  // n3 chains: three times one chain.
  EXPECT_EQ(scan_cost(ScanCostOp::matmul, scan("n3t5d4")).fwd(kSeed).total(),
            3 * m.fwd(kSeed).total());
  // Matrix affine t6d3: 5 steps of a 3x3 matrix-vector product plus the bias add.
  const CostReport a = scan_cost(ScanCostOp::affine, scan("t6d3"));
  EXPECT_EQ(a.fwd(kSeed).total(), 5 * 3 * (5 + 1));
  EXPECT_EQ(a.fwd(kGemm).total(), 2 * 5 * 9);
  // Backward: W^T g (5 * 3 dots of 3), its adds, and dW's 5 * 9 products.
  EXPECT_EQ(a.bwd(kSeed).total(), 5 * 3 * 5 + 5 * 3 + 5 * 9);
  EXPECT_EQ(a.memory.inference_bytes, 4 * (6 * 12 + 6 * 3));
}

TEST(CostScan, ShapeErrorsNameTheDescriptor) {
  try {
    scan_cost(ScanCostOp::matmul, scan("t10c4"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("scan_matmul"));
    EXPECT_THAT(e.what(), HasSubstr("needs a matrix size d"));
  }
  EXPECT_THROW(scan_cost(ScanCostOp::sum, scan("t10d4")), Error);
  EXPECT_THROW(scan_cost(ScanCostOp::matmul, scan("n9999999t9999999d99999")), Error);
}

MinGruProblem mingru(const char* d, bool bias = true) {
  MinGruProblem p = MinGruProblem::parse(d);
  p.bias = bias;
  return p;
}

TEST(CostMinGru, ForwardMatchesTheCountedEquations) {
  // The linear-variant minGRU, one layer after another, with the counting scalar:
  // z = sigmoid(W_z x + b_z), v = W_h x + b_h, h = (1 - z) h + z v.
  for (const char* d : {"l1t3n2i4h3", "l2t4n1i2h5", "l1t1n1i1h1"})
    for (bool bias : {true, false}) {
      const MinGruProblem p = mingru(d, bias);
      g_ops = 0;
      int64_t in = p.input_size;
      for (int64_t l = 0; l < p.num_layers; ++l) {
        const auto w = filled(2 * p.hidden_size * in, 1.0 + l),
                   b = filled(2 * p.hidden_size, 2.0 + l), x = filled(p.T * p.N * in, 3.0 + l);
        std::vector<Num> h = filled(p.N * p.hidden_size, 4.0 + l);
        for (int64_t t = 0; t < p.T; ++t)
          for (int64_t n = 0; n < p.N; ++n)
            for (int64_t u = 0; u < p.hidden_size; ++u) {
              const int64_t row = t * p.N + n;
              Num kz = dot(in, [&](int64_t i) { return w[u * in + i] * x[row * in + i]; });
              Num v = dot(
                  in, [&](int64_t i) { return w[(p.hidden_size + u) * in + i] * x[row * in + i]; });
              if (bias) kz = kz + b[u], v = v + b[p.hidden_size + u];
              const Num z = sigmoid_(kz);
              Num& hn = h[n * p.hidden_size + u];
              hn = (kOne - z) * hn + z * v;
            }
        in = p.hidden_size;
      }
      const CostReport r = mingru_cost(p);
      EXPECT_EQ(r.fwd(kSeed).total(), g_ops) << d << " " << bias;
    }
}

TEST(CostMinGru, ClosedFormsBytesAndLengths) {
  // l1t7n3i5h4: 21 rows, 8 dots of length 5 per row (k_z and v).
  const MinGruProblem p = mingru("l1t7n3i5h4");
  const CostReport r = mingru_cost(p);
  EXPECT_EQ(r.fwd(kGemm).total(), 2 * 21 * 8 * 5);  // GEMM mode: matrix products only
  EXPECT_EQ(r.fwd(kGemm).matmul, 2 * 21 * 8 * 5);
  EXPECT_EQ(r.bwd(kGemm).matmul, 2 * r.fwd(kGemm).matmul);  // dx and dW
  EXPECT_EQ(r.memory.parameters, 8 * 5 + 8);
  EXPECT_EQ(r.memory.parameter_bytes, 4 * 48);
  // Against the GRU of the same size: minGRU's matrix products are 4HI per row, the GRU's
  // 6H(I + H).
  const CostReport g = gru_cost(GruProblem::parse(p.descriptor()));
  EXPECT_EQ(g.fwd(kGemm).matmul * 4 * 5, r.fwd(kGemm).matmul * 6 * (5 + 4));
  // Every count is per row: lengths summing to 12 of the 21 rows count 12/21 of the work.
  MinGruProblem lp = mingru("l2t7n3i5h4");
  const CostReport full = mingru_cost(lp);
  lp.set_lengths("uniform:1:7:5");
  int64_t rows = 0;
  for (int64_t v : lp.lengths) rows += v;
  ASSERT_LT(rows, 21);
  const CostReport part = mingru_cost(lp);
  EXPECT_EQ(part.fwd(kSeed).total() * 21, full.fwd(kSeed).total() * rows);
  // and count as one sequence of that many rows, backward too (where db and dW sum over rows).
  const CostReport flat = mingru_cost(mingru(("l2t" + std::to_string(rows) + "n1i5h4").c_str()));
  EXPECT_EQ(part.fwd(kSeed).total(), flat.fwd(kSeed).total());
  EXPECT_EQ(part.bwd(kSeed).total(), flat.bwd(kSeed).total());
  EXPECT_EQ(part.bwd(kGemm).total(), flat.bwd(kGemm).total());
  EXPECT_THAT(part.variant, HasSubstr("lengths"));
  // Two layers: the second reads H inputs.
  EXPECT_EQ(full.memory.parameters, (8 * 5 + 8) + (8 * 4 + 8));
}

TEST(CostMinGru, Errors) {
  try {
    mingru("l1d2t4n1i2h3");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unidirectional"));
  }
  EXPECT_THROW(mingru_cost(mingru("l9t999999999n999999999i999999999h999999999")), Error);
  EXPECT_THROW(cost_of("mingru", "t10n2i3", {}), Error);
}

// ---- Activations, modes, registry ----------------------------------------------------------

TEST(CostActivation, SeedOpsPerElement) {
  for (auto [a, f, b] : {std::tuple{Activation::sigmoid, 3, 3},
                         {Activation::tanh, 7, 3},
                         {Activation::relu, 1, 1},
                         {Activation::gelu, 5, 11},
                         {Activation::silu, 4, 8},
                         {Activation::leaky_relu, 2, 2}}) {
    ActivationProblem p = ActivationProblem::parse(a, "n1000");
    const CostReport r = activation_cost(p);
    EXPECT_EQ(r.fwd(kSeed).total(), 1000 * f);
    EXPECT_EQ(r.bwd(kSeed).total(), 1000 * b);
    EXPECT_EQ(r.fwd(kGemm).total(), 0);
    EXPECT_EQ(r.fwd(kMac).total(), 0);
    EXPECT_EQ(r.inference_traffic.cached.total(), 8000);
  }
}

TEST(CostRegistry, NamesModesAndErrors) {
  EXPECT_EQ(parse_count_mode("mac"), kMac);
  EXPECT_STREQ(count_unit(kSeed), "ops");
  EXPECT_STREQ(count_unit(kGemm), "FLOP");
  EXPECT_STREQ(count_unit(kMac), "MAC");
  EXPECT_THROW(parse_count_mode("flops"), Error);
  EXPECT_EQ(cost_of("gru_cell", "n1i256h256", {}).fwd(kSeed).total(), 791808);
  CostOptions nb;
  nb.bias = false;
  EXPECT_EQ(cost_of("linear", "b32i256o512", nb).fwd(kSeed).total(), 32LL * 512 * 511);
  for (const CostOp& op : cost_ops()) {  // every operator computes its own example
    const CostReport r = cost_of(op.name, op.example, {});
    EXPECT_EQ(r.op, op.name);
    EXPECT_EQ(r.problem, op.example);
  }
  try {
    cost_of("rnn", "n1", {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown operator 'rnn'"));
    EXPECT_THAT(e.what(), HasSubstr("lstm_cell"));
  }
  EXPECT_THROW(cost_of("gru", "l1d3t1n1i1h1", {}), Error);
  EXPECT_THROW(cost_of("gru_cell", "n0i1h1", {}), Error);
  EXPECT_THROW(cost_of("linear", "b1i1", {}), Error);
  EXPECT_THROW(cost_of("conv2d", "n1c3h4w4d2k3g2", {}), Error);
  CostOptions lengths;
  lengths.lengths = "uniform:1:5:1";
  EXPECT_THROW(cost_of("linear", "b1i1o1", lengths), Error);
  EXPECT_THROW(cost_of("gru_stream", "l1d2t4n1i1h1", {}), Error);
}

}  // namespace
}  // namespace grux::test_cost

namespace grux::test_cost {
namespace {

// ---- Roofline -----------------------------------------------------------------------------

// A profile with round numbers: 100 GFLOP/s per thread, 1 TB/s up to 64 kB per thread, then
// 100 GB/s from 1 MB, memcpy 10 GB/s, 1 us per step (2 us streaming).
MachineProfile round_profile() {
  MachineProfile p;
  p.source = "test";
  for (int k : {1, 4}) {
    ThreadProfile t;
    t.sgemm_gflops = 100.0 * k;
    t.dgemm_gflops = 50.0 * k;
    t.memcpy_gbps = 10;
    t.read_gbps = {{64e3, 1000.0 * k}, {1e6, 100.0 * k}};
    t.step_us = 1;
    t.stream_step_us = 2;
    p.threads[k] = t;
  }
  return p;
}

TEST(CostRoofline, ComputeOrTrafficWhicheverIsLarger) {
  const MachineProfile prof = round_profile();
  Phase compute;
  compute.gemm_flops = 1e9;  // 10 ms at 100 GFLOP/s
  compute.weight_bytes = 1e6;
  compute.weight_passes = 1;  // 0.01 ms at 100 GB/s
  Prediction p = predict({compute}, DType::f32, prof, 1);
  EXPECT_NEAR(p.compute_ms, 10, 1e-9);
  EXPECT_NEAR(p.traffic_ms, 0.01, 1e-9);
  EXPECT_EQ(p.bound, "compute");
  EXPECT_NEAR(p.ms, 10, 1e-9);
  EXPECT_NEAR(predict({compute}, DType::f64, prof, 1).compute_ms, 20, 1e-9);

  Phase traffic;
  traffic.gemm_flops = 1e6;     // 0.01 ms
  traffic.weight_bytes = 64e3;  // from the 1 TB/s level: 64 ns per pass
  traffic.weight_passes = 1000;
  traffic.stream_bytes = 1e6;  // 0.1 ms at 10 GB/s
  traffic.steps = 1000;        // 1 ms of step overhead
  p = predict({traffic}, DType::f32, prof, 1);
  EXPECT_NEAR(p.traffic_ms, 0.064 + 0.1, 1e-9);
  EXPECT_EQ(p.bound, "traffic");
  EXPECT_NEAR(p.overhead_ms, 1, 1e-9);
  EXPECT_NEAR(p.ms, 0.164 + 1, 1e-9);
  EXPECT_NEAR(predict({traffic}, DType::f32, prof, 1, /*stream=*/true).overhead_ms, 2, 1e-9);
  // Each phase is its own roofline; the run is their sum, limited mostly by compute here.
  p = predict({compute, traffic}, DType::f32, prof, 1);
  EXPECT_NEAR(p.compute_ms, 10.01, 1e-9);
  EXPECT_NEAR(p.traffic_ms, 0.01 + 0.164, 1e-9);
  EXPECT_NEAR(p.roofline_ms, 10 + 0.164, 1e-9);
  EXPECT_EQ(p.bound, "compute");
}

TEST(CostRoofline, ThreadsSplitTheWeightsAndInterpolate) {
  const MachineProfile prof = round_profile();
  // Between measured sizes the bandwidth is interpolated in log(size); outside, clamped.
  const ThreadProfile one = prof.at(1);
  EXPECT_DOUBLE_EQ(read_bandwidth_at(one, 1e3), 1000);
  EXPECT_DOUBLE_EQ(read_bandwidth_at(one, 1e9), 100);
  EXPECT_NEAR(read_bandwidth_at(one, std::sqrt(64e3 * 1e6)), 550, 1e-9);
  // Thread counts between measured ones: linear in the count.
  EXPECT_DOUBLE_EQ(prof.at(2).sgemm_gflops, 200);
  EXPECT_DOUBLE_EQ(prof.at(8).sgemm_gflops, 400);  // clamped to the largest measured
  // A 1 MB weight set split 4 ways is 250 kB per thread.
  Phase ph;
  ph.weight_bytes = 1e6;
  ph.weight_passes = 1;
  ph.split = 100;
  const double bw4 = read_bandwidth_at(prof.at(4), 250e3);
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 4).traffic_ms, 1e6 / (bw4 * 1e9) * 1e3, 1e-12);
  ph.split = 1;  // cannot split: one thread at its own rates
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 4).traffic_ms, 1e6 / (100e9) * 1e3, 1e-12);
}

TEST(CostRoofline, MeasuredRecurrenceRateReplacesReadRateAndStepCost) {
  // With the recurrence's own streaming rate, weight passes run at that rate and a sequence's
  // steps add nothing (they are inside the rate); a streaming-API call adds only what it
  // costs beyond a step.
  MachineProfile prof = round_profile();
  prof.threads[1].stream_gbps = {{1e3, 50}, {1e9, 50}};
  Phase rec;
  rec.weight_bytes = 1e6;
  rec.weight_passes = 1000;  // 1e9 bytes at 50 GB/s: 20 ms
  rec.steps = 1000;
  Prediction p = predict({rec}, DType::f32, prof, 1);
  EXPECT_NEAR(p.traffic_ms, 20, 1e-9);
  EXPECT_NEAR(p.overhead_ms, 0, 1e-12);
  p = predict({rec}, DType::f32, prof, 1, /*stream=*/true);
  EXPECT_NEAR(p.overhead_ms, 1000 * (2 - 1) * 1e-3, 1e-9);  // (stream_step_us - step_us)
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  EXPECT_EQ(back.at(1).stream_gbps, prof.at(1).stream_gbps);
  EXPECT_TRUE(back.at(4).stream_gbps.empty());
}

TEST(CostRoofline, ProfileJsonRoundTripAndErrors) {
  const MachineProfile prof = round_profile();
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  ASSERT_EQ(back.threads.size(), 2u);
  EXPECT_DOUBLE_EQ(back.at(4).sgemm_gflops, 400);
  EXPECT_EQ(back.at(1).read_gbps, prof.at(1).read_gbps);
  for (const char* bad :
       {"", "[]", "{\"format\": \"other\"}", "{\"format\": \"grux-profile-1\", \"threads\": {}}",
        "{\"format\": \"grux-profile-1\", \"threads\": {\"x\": {}}}",
        "{\"format\": \"grux-profile-1\", \"threads\": {\"1\": {\"sgemm_gflops\": 1}}}"}) {
    EXPECT_THROW(MachineProfile::from_json(bad, "bad.json"), Error) << bad;
  }
  std::string neg = prof.to_json();
  neg.replace(neg.find("\"memcpy_gbps\": 10"), 17, "\"memcpy_gbps\": -1");
  EXPECT_THROW(MachineProfile::from_json(neg, "neg.json"), Error);
}

// Fields of the wrong JSON type, duplicate or padded thread counts and bandwidth curves out of
// range are refused with grux::Error naming the field (fuzz_profile found the first: a
// "machine" object escaped as the JSON library's own exception).
TEST(CostRoofline, ProfileRefusesFieldsOfTheWrongType) {
  const std::string entry =
      R"("sgemm_gflops": 1, "dgemm_gflops": 1, "memcpy_gbps": 1, "step_us": 1,)"
      R"( "stream_step_us": 1, "read_gbps": [[1, 1]])";
  const auto profile = [&](const std::string& top, const std::string& extra) {
    return R"({"format": "grux-profile-1", )" + top + R"("threads": {"1": {)" + entry + extra +
           "}}}";
  };
  EXPECT_NO_THROW(MachineProfile::from_json(profile("", ""), "good.json"));
  for (const auto& [bad, names] : std::vector<std::pair<std::string, std::string>>{
           {profile(R"("machine": {"1": 2}, )", ""), "'machine'"},
           {profile(R"("created": 7, )", ""), "'created'"},
           {profile("", R"(, "blas_sgemm_gflops": "fast")"), "'blas_sgemm_gflops'"},
           {profile("", R"(, "stream_gbps": [[0, 1]])"), "'stream_gbps'"},
           {profile("", R"(, "stream_gbps": {})"), "'stream_gbps'"},
           {profile(R"("link": {"name": [], "latency_us": 1, "gbit_s": 1}, )", ""), "'name'"},
           {R"({"format": 1})", "not a grux profile"},
           {R"({"format": "grux-profile-1", "threads": {" 1": {}}})", "' 1'"},
           {R"({"format": "grux-profile-1", "threads": {"1": {)" + entry + R"(}, "01": {)" + entry +
                "}}}",
            "appears twice"}}) {
    try {
      MachineProfile::from_json(bad, "bad.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  }
}

// bf16 and int8: weight passes at 2 and 1 (+ 8 per column) bytes per weight, GEMM phases at
// the precision's measured rate (sgemm's when the profile has none), the profile keeps the
// rates; f64 and the other operators refuse a precision.
TEST(CostRoofline, PrecisionPricesWeightBytesAndRates) {
  GruProblem p = GruProblem::parse("l1d1t10n2i8h32");
  const CostReport f32 = gru_cost(p);
  p.precision = Precision::bf16;
  const CostReport bf16 = gru_cost(p);
  p.precision = Precision::int8;
  const CostReport int8 = gru_cost(p);
  EXPECT_THAT(bf16.variant, HasSubstr("bf16 products"));
  const double H = 32, wi = 3 * H * 8, wh = 3 * H * H, b = 3 * H;
  ASSERT_EQ(f32.inference_phases.size(), 2u);
  // The projection reads W_ih and b_ih, the recurrence W_hh and b_hh.
  EXPECT_DOUBLE_EQ(f32.inference_phases[1].weight_bytes, 4 * (wh + b));
  EXPECT_DOUBLE_EQ(bf16.inference_phases[1].weight_bytes, 2 * wh + 4 * b);
  EXPECT_DOUBLE_EQ(int8.inference_phases[1].weight_bytes, wh + 8 * 3 * H + 4 * b);
  EXPECT_DOUBLE_EQ(bf16.inference_phases[0].weight_bytes, 2 * wi + 4 * b);
  for (const Phase& ph : bf16.training_phases) EXPECT_EQ(ph.precision, Precision::bf16);
  // Traffic: the cached model reads each weight once: 2 bytes less per weight in bf16.
  EXPECT_EQ(f32.inference_traffic.cached.read - bf16.inference_traffic.cached.read,
            static_cast<int64_t>(2 * (wi + wh)));
  EXPECT_EQ(f32.inference_traffic.cached.written, bf16.inference_traffic.cached.written);
  // Training in bf16 also converts the weights every step (read f32, write two bf16 copies).
  EXPECT_EQ(bf16.training_traffic.cached.written - f32.training_traffic.cached.written,
            static_cast<int64_t>(4 * (wi + wh)));

  MachineProfile prof = round_profile();
  Phase ph;
  ph.gemm_flops = 1e9;  // 10 ms at 100 GFLOP/s
  ph.split = 4;
  ph.precision = Precision::bf16;
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 1).compute_ms, 10, 1e-9);  // no rate: sgemm's
  prof.threads[1].bf16_gflops = 250, prof.threads[4].bf16_gflops = 1000;
  prof.threads[1].int8_gflops = 400, prof.threads[4].int8_gflops = 1600;
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 1).compute_ms, 4, 1e-9);
  ph.precision = Precision::int8;
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 1).compute_ms, 2.5, 1e-9);
  EXPECT_NEAR(predict({ph}, DType::f32, prof, 2).compute_ms, 1e3 / 800, 1e-9);  // interpolated
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  EXPECT_DOUBLE_EQ(back.at(4).bf16_gflops, 1000);
  EXPECT_DOUBLE_EQ(back.at(1).int8_gflops, 400);
  EXPECT_DOUBLE_EQ(MachineProfile::from_json(round_profile().to_json(), "old").at(1).bf16_gflops,
                   0);

  p.dtype = DType::f64;
  EXPECT_THROW(gru_cost(p), Error);
  CostOptions o;
  o.precision = Precision::bf16;
  EXPECT_THROW(cost_of("linear", "b4i8o16", o), Error);
  EXPECT_NO_THROW(cost_of("gru_stream", "l1d1t10n1i8h32", o));
}

TEST(CostRoofline, LowPrecisionGruPhasesComputeAtTheirOwnMeasuredFraction) {
  MachineProfile prof = round_profile();
  prof.threads[1].bf16_gflops = 250, prof.threads[4].bf16_gflops = 1000;
  prof.threads[1].int8_gflops = 400, prof.threads[4].int8_gflops = 1600;
  prof.threads[1].gru_gemm_efficiency = prof.threads[4].gru_gemm_efficiency = 0.8;
  Phase gru;
  gru.gemm_flops = 1e9;
  gru.gru_kernel = true;
  gru.split = 4;
  gru.precision = Precision::bf16;
  // Without a fraction of its own, f32's stands for bf16 and int8: 250 x 0.8 GFLOP/s.
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 1e3 / 200, 1e-9);
  prof.threads[1].bf16_gru_efficiency = 0.5, prof.threads[4].bf16_gru_efficiency = 0.9;
  prof.threads[1].int8_gru_efficiency = 0.25, prof.threads[4].int8_gru_efficiency = 0.7;
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 1e3 / 125, 1e-9);
  gru.precision = Precision::int8;
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 1e3 / 100, 1e-9);
  // Two threads: 800 GFLOP/s x 0.4, both interpolated.
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 2).compute_ms, 1e3 / (800 * 0.4), 1e-9);
  gru.precision = Precision::f32;  // f32 keeps its own
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 1e3 / 80, 1e-9);
  // The profile keeps them; one above 1 is an error naming it; older profiles have none.
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  EXPECT_DOUBLE_EQ(back.at(4).bf16_gru_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(back.at(1).int8_gru_efficiency, 0.25);
  std::string big = prof.to_json();
  big.replace(big.find("\"int8_gru_efficiency\": 0.7"), 26, "\"int8_gru_efficiency\": 1.7");
  try {
    MachineProfile::from_json(big, "big.json");
    ADD_FAILURE() << "an int8_gru_efficiency of 1.7 was accepted";
  } catch (const Error& e) {
    for (const char* piece : {"big.json", "'int8_gru_efficiency' 1.7", "[0, 1]"})
      EXPECT_THAT(e.what(), HasSubstr(piece));
  }
  EXPECT_DOUBLE_EQ(
      MachineProfile::from_json(round_profile().to_json(), "old").at(1).bf16_gru_efficiency, 0);
}

TEST(CostRoofline, GruPhasesComputeAtTheMeasuredFractionOfThePeak) {
  MachineProfile prof = round_profile();
  Phase gru, plain;
  gru.gemm_flops = plain.gemm_flops = 1e9;  // 10 ms at 100 GFLOP/s
  gru.gru_kernel = true;
  gru.split = 4;  // up to 4 threads share it
  // Without a measured fraction both run at the peak.
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).ms, 10, 1e-9);
  prof.threads[1].gru_gemm_efficiency = 0.5;
  prof.threads[4].gru_gemm_efficiency = 0.8;
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 20, 1e-9);
  EXPECT_NEAR(predict({plain}, DType::f32, prof, 1).compute_ms, 10, 1e-9);
  EXPECT_NEAR(predict({gru}, DType::f64, prof, 1).compute_ms, 40, 1e-9);  // 50 GFLOP/s x 0.5
  // Two threads: 200 GFLOP/s x 0.6, both interpolated between the 1- and 4-thread entries.
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 2).compute_ms, 1e3 / (200 * 0.6), 1e-9);
  // The profile keeps it; a fraction above 1 is an error; an override of the peak drops it.
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  EXPECT_DOUBLE_EQ(back.at(4).gru_gemm_efficiency, 0.8);
  std::string big = prof.to_json();
  big.replace(big.find("\"gru_gemm_efficiency\": 0.5"), 26, "\"gru_gemm_efficiency\": 1.5");
  EXPECT_THROW(MachineProfile::from_json(big, "big.json"), Error);
  ProfileOverrides o;
  o.peak_gflops = 100;
  apply_overrides(prof, o, DType::f32);
  EXPECT_NEAR(predict({gru}, DType::f32, prof, 1).compute_ms, 10, 1e-9);
  // The GRU's input projection and recurrence are GRU-kernel phases; its backward is not.
  const CostReport r = gru_cost(GruProblem::parse("t10n4i8h16"));
  for (const Phase& ph : r.training_phases)
    EXPECT_EQ(ph.gru_kernel, ph.name.find("backward") == std::string::npos &&
                                 ph.name.find("dW") == std::string::npos)
        << ph.name;
}

TEST(CostRoofline, OverridesAndPreset) {
  MachineProfile prof = round_profile();
  ProfileOverrides o;
  o.peak_gflops = 7;
  o.cache_gbps = 3;
  o.mem_gbps = 2;
  apply_overrides(prof, o, DType::f32);
  EXPECT_DOUBLE_EQ(prof.at(1).sgemm_gflops, 7);
  EXPECT_DOUBLE_EQ(prof.at(1).dgemm_gflops, 50);
  EXPECT_DOUBLE_EQ(prof.at(1).read_gbps.front().second, 3);
  EXPECT_DOUBLE_EQ(prof.at(1).read_gbps.back().second, 2);
  EXPECT_DOUBLE_EQ(prof.at(4).memcpy_gbps, 2);
  EXPECT_THAT(prof.source, HasSubstr("overrides"));
  o = {};
  o.mem_gbps = -1;
  EXPECT_THROW(apply_overrides(prof, o, DType::f32), Error);
  const MachineProfile preset = MachineProfile::preset(2);
  EXPECT_EQ(preset.source, "preset");
  EXPECT_GT(predict(gru_cost(GruProblem::parse("t100n64i256h512")).inference_phases, DType::f32,
                    preset, 2)
                .ms,
            0);
}

TEST(CostRoofline, GruPhasesFollowTheWorkloads) {
  // W3 is compute-bound and W2 traffic-bound under any sensible profile.
  const MachineProfile prof = round_profile();
  const Prediction w3 = predict(gru_cost(GruProblem::parse("l1d1t100n64i256h512")).inference_phases,
                                DType::f32, prof, 1);
  EXPECT_EQ(w3.bound, "compute");
  EXPECT_NEAR(w3.compute_ms, GruProblem::parse("l1d1t100n64i256h512").gemm_flops() / 1e8, 1e-6);
  // W2 with its weights streaming from cache at 100 GB/s: the recurrence reads W_hh + b_hh
  // (787 kB) at each of 1000 steps, 7.9 ms against 2 x 1000 x 768 x 256 FLOP = 3.9 ms.
  MachineProfile l2 = prof;
  ProfileOverrides o;
  o.cache_gbps = 100;
  apply_overrides(l2, o, DType::f32);
  const CostReport w2r = gru_cost(GruProblem::parse("l1d1t1000n1i128h256"));
  ASSERT_EQ(w2r.inference_phases.size(), 2u);  // input projection, recurrence
  const Phase& rec = w2r.inference_phases[1];
  EXPECT_EQ(rec.weight_bytes, (3 * 256 * 256 + 3 * 256) * 4);
  EXPECT_EQ(rec.weight_passes, 1000);
  EXPECT_EQ(rec.steps, 1000);
  const double rec_traffic = rec.weight_bytes * 1000 / 100e9 + rec.stream_bytes / 10e9;
  const Phase& proj = w2r.inference_phases[0];
  EXPECT_EQ(proj.weight_passes, 11);  // blocks of 96 rows
  const double proj_traffic = proj.weight_bytes * 11 / 100e9 + proj.stream_bytes / 10e9;
  const double proj_compute = 2.0 * 1000 * 768 * 128 / 100e9;
  const Prediction w2 = predict(w2r.inference_phases, DType::f32, l2, 1);
  EXPECT_NEAR(w2.traffic_ms, (rec_traffic + proj_traffic) * 1e3, 1e-9);
  EXPECT_NEAR(w2.roofline_ms, (rec_traffic + std::max(proj_compute, proj_traffic)) * 1e3, 1e-9);
  EXPECT_EQ(w2.bound, "traffic");
  EXPECT_NEAR(w2.overhead_ms, 1000 * 1e-3, 1e-9);  // 1000 steps of 1 us
  // Training: forward + backward phases, the backward at twice the forward's flops.
  const CostReport w4 = gru_cost(GruProblem::parse("l1d1t100n64i256h512"));
  EXPECT_NEAR(predict(w4.training_phases, DType::f32, prof, 1).compute_ms, 3 * w3.compute_ms, 1e-6);
}

}  // namespace
}  // namespace grux::test_cost

namespace grux::test_cost {
namespace {

// ---- Many processes -----------------------------------------------------------------------

// The collectives' times, written out: 2 (K - 1) messages and 2 (K - 1) / K of the bytes for
// a sum; K - 1 messages and K - 1 slices for a gather.
TEST(CostNetwork, CollectiveTimesFromLatencyAndBandwidth) {
  const LinkModel link{"test", 10.0, 8.0};  // 10 us, 8 Gbit/s = 1 GB/s
  EXPECT_EQ(allreduce_ms(1e6, 1, link), 0.0);
  EXPECT_NEAR(allreduce_ms(1e6, 2, link), 2 * 0.010 + 1e6 / 1e9 * 1e3, 1e-12);
  EXPECT_NEAR(allreduce_ms(1e6, 4, link), 6 * 0.010 + 1.5 * 1e6 / 1e9 * 1e3, 1e-12);
  EXPECT_NEAR(allgather_ms(1000, 4, link), 3 * 0.010 + 3 * 1000 / 1e9 * 1e3, 1e-12);
  ASSERT_EQ(network_presets().size(), 2u);
  EXPECT_EQ(network_presets()[0].gbit_s, 10.0);
  EXPECT_EQ(network_presets()[1].gbit_s, 100.0);
  EXPECT_THROW(allreduce_ms(1, 2, LinkModel{"none", 1, 0}), Error);
}

// charlm = the GRU over the embeddings + the Linear over every position, plus the embedding's
// parameters and the optimizer's pass over all of them.
TEST(CostNetwork, TheLanguageModelIsItsGruAndLinearTogether) {
  const CostReport lm = cost_of("charlm", "l2t8n4e6h10v7", {});
  const CostReport g = cost_of("gru", "l2d1t8n4i6h10", {});
  const CostReport fc = cost_of("linear", "b32i10o7", {});
  for (CountMode m : {CountMode::seed, CountMode::gemm, CountMode::mac}) {
    EXPECT_EQ(lm.fwd(m).total(), g.fwd(m).total() + fc.fwd(m).total());
    EXPECT_EQ(lm.bwd(m).total(), g.bwd(m).total() + fc.bwd(m).total());
  }
  EXPECT_EQ(lm.memory.parameters, g.memory.parameters + fc.memory.parameters + 7 * 6);
  EXPECT_EQ(lm.memory.gradient_bytes, lm.memory.parameters * 4);
  ASSERT_FALSE(lm.training_phases.empty());
  EXPECT_EQ(lm.training_phases.back().name, "optimizer");
  EXPECT_EQ(lm.training_phases.back().stream_bytes, 7.0 * lm.memory.parameter_bytes);
  EXPECT_THROW(cost_of("charlm", "l1t8n4h10v7", {}), Error);
  EXPECT_THROW(cost_of("charlm", "l0t8n4e6h10v7", {}), Error);
}

TEST(CostNetwork, ProblemsSplitAcrossRanks) {
  const MachineProfile prof = round_profile();
  const LinkModel link{"test", 10.0, 8.0};
  const CostOptions o;
  // Training: each rank runs its share of the batch, then the gradients are summed.
  const RankPrediction one = predict_ranks("gru", "l1d1t10n8i16h32", o, true, 1, link, prof, 1);
  EXPECT_EQ(one.per_rank, "l1d1t10n8i16h32");
  EXPECT_EQ(one.comm_ms, 0.0);
  EXPECT_DOUBLE_EQ(one.speedup, 1.0);
  const RankPrediction two = predict_ranks("gru", "l1d1t10n8i16h32", o, true, 2, link, prof, 1);
  EXPECT_EQ(two.per_rank, "l1d1t10n4i16h32");
  const CostReport whole = cost_of("gru", "l1d1t10n8i16h32", o);
  const CostReport half = cost_of("gru", "l1d1t10n4i16h32", o);
  EXPECT_DOUBLE_EQ(two.compute_ms, predict(half.training_phases, DType::f32, prof, 1).ms);
  EXPECT_DOUBLE_EQ(two.comm_ms, allreduce_ms(whole.memory.gradient_bytes + 8.0, 2, link) +
                                    allreduce_ms(24, 2, link));
  EXPECT_DOUBLE_EQ(two.ms, two.compute_ms + two.comm_ms);
  EXPECT_DOUBLE_EQ(two.speedup, one.ms / two.ms);
  // Scans split time; the exchange is one slice per rank.
  const RankPrediction s = predict_ranks("scan_sum", "n2t1000c3", o, false, 4, link, prof, 1);
  EXPECT_EQ(s.per_rank, "n2t250c3");
  EXPECT_DOUBLE_EQ(s.comm_ms, allgather_ms(2 * 3 * 4.0, 4, link));
  EXPECT_GT(s.compute_ms,
            predict(cost_of("scan_sum", "n2t250c3", o).inference_phases, DType::f32, prof, 1).ms);
  // Two ranks on one machine share its threads and memory: their work is priced together on
  // the machine's threads, and compared with one rank using all of them.
  const RankPrediction shared =
      predict_ranks("gru", "l1d1t10n8i16h32", o, true, 2, link, prof, 2, 2);
  std::vector<Phase> both = half.training_phases;
  both.insert(both.end(), half.training_phases.begin(), half.training_phases.end());
  EXPECT_DOUBLE_EQ(shared.compute_ms, predict(both, DType::f32, prof, 4).ms);
  EXPECT_DOUBLE_EQ(shared.speedup,
                   predict(whole.training_phases, DType::f32, prof, 4).ms / shared.ms);
  EXPECT_THROW(predict_ranks("gru", "l1d1t10n8i16h32", o, true, 2, link, prof, 1, 3), Error);
  // What cannot be split is refused, naming why.
  for (auto [op, d, train, k] :
       {std::tuple{"gru", "l1d1t10n8i16h32", true, 3}, std::tuple{"linear", "b8i4o4", true, 2},
        std::tuple{"scan_sum", "t1000", true, 2}, std::tuple{"gru", "l1d1t10n8i16h32", true, 0}})
    EXPECT_THROW(predict_ranks(op, d, o, train, k, link, prof, 1), Error) << op << " " << k;
}

TEST(CostNetwork, ProfilesKeepTheMeasuredLink) {
  MachineProfile prof = round_profile();
  prof.link = {"local, 2 ranks (grux calibrate)", 1.5, 40};
  const MachineProfile back = MachineProfile::from_json(prof.to_json(), "mem");
  EXPECT_EQ(back.link.name, prof.link.name);
  EXPECT_EQ(back.link.latency_us, 1.5);
  EXPECT_EQ(back.link.gbit_s, 40);
  EXPECT_EQ(MachineProfile::from_json(round_profile().to_json(), "mem").link.gbit_s, 0);
  std::string bad = prof.to_json();
  bad.replace(bad.find("\"gbit_s\": 40"), 12, "\"gbit_s\": 0 ");
  EXPECT_THROW(MachineProfile::from_json(bad, "bad.json"), Error);
}

// The side of the products that measure `grux bench gru`'s peak: 1536 unless one product would
// take more than half a second at the probe's rate (2 * 1536^3 flops is 7.25 GFLOP).
TEST(CostCalibrate, PeakSideHalvesOnlyForSlowCode) {
  EXPECT_EQ(peak_side(80), 1536);
  EXPECT_EQ(peak_side(15), 1536);    // 0.48 s
  EXPECT_EQ(peak_side(14), 768);     // 0.52 s at 1536
  EXPECT_EQ(peak_side(1), 384);      // 7.2 s, 0.91 s, then 0.11 s
  EXPECT_EQ(peak_side(0.001), 192);  // never below the probe
  EXPECT_EQ(peak_side(0), 192);
  EXPECT_EQ(peak_side(-1), 192);
  // Chosen by a probe, and reported: a side the rule can give, and a rate.
  int64_t side = 0;
  const double rate = measure_lowp_gemm_rate(Precision::int8, 1, 0, &side);
  EXPECT_GT(rate, 0);
  EXPECT_THAT(side, ::testing::AnyOf(1536, 768, 384, 192));
  EXPECT_THROW(measure_lowp_gemm_rate(Precision::f32, 1), Error);
}

}  // namespace
}  // namespace grux::test_cost
