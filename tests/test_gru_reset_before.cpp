// The reset-before form (and, as a cross-check, the linear-before-reset form) against two
// references written in the test from the equations, independently of grux's kernels:
//  1. per sequence, per step, scalar loops over PyTorch's layout (gates r, z, n);
//  2. Keras/TensorFlow's formulation: kernels transposed to (in, 3H) in gate order z, r, h,
//     the candidate as one product of concatenated [x ; r*h] with stacked [W_in ; W_hn].
// The two references must agree with each other, and grux with both.
#include <gtest/gtest.h>

#include <cmath>

#include "grux/gru.h"
#include "test_util.h"

namespace grux::test_gru_reset_before {
namespace {

using Vec = std::vector<long double>;
long double sigm(long double x) {
  return 1.0L / (1.0L + std::exp(-x));
}

// Weights of one layer-direction as long double row-major copies.
struct W {
  int64_t in, H;
  Vec w_ih, w_hh, b_ih, b_hh;  // (3H, in), (3H, H), (3H), (3H); zeros without bias
};
W take(const GruLayerWeights& w, int64_t H) {
  W o;
  o.H = H;
  o.in = w.w_ih.size(1);
  auto copy = [](const Tensor& t, int64_t n) {
    Vec v(n, 0.0L);
    if (t.defined())
      for (int64_t i = 0; i < n; ++i) v[i] = t.at_flat(i);
    return v;
  };
  o.w_ih = copy(w.w_ih, 3 * H * o.in);
  o.w_hh = copy(w.w_hh, 3 * H * H);
  o.b_ih = copy(w.b_ih, 3 * H);
  o.b_hh = copy(w.b_hh, 3 * H);
  return o;
}

// Reference 1: the equations in PyTorch's layout, one scalar at a time.
Vec step_pytorch_layout(const W& w, GruForm form, const Vec& x, const Vec& h) {
  const int64_t H = w.H, in = w.in;
  auto dot_ih = [&](int64_t row) {
    long double s = w.b_ih[row];
    for (int64_t i = 0; i < in; ++i) s += w.w_ih[row * in + i] * x[i];
    return s;
  };
  auto dot_hh = [&](int64_t row, const Vec& v) {
    long double s = w.b_hh[row];
    for (int64_t i = 0; i < H; ++i) s += w.w_hh[row * H + i] * v[i];
    return s;
  };
  Vec r(H), z(H), out(H);
  for (int64_t j = 0; j < H; ++j) {
    r[j] = sigm(dot_ih(j) + dot_hh(j, h));
    z[j] = sigm(dot_ih(H + j) + dot_hh(H + j, h));
  }
  Vec rh(H);
  for (int64_t j = 0; j < H; ++j) rh[j] = r[j] * h[j];
  for (int64_t j = 0; j < H; ++j) {
    const long double n = form == GruForm::reset_before
                              ? std::tanh(dot_ih(2 * H + j) + dot_hh(2 * H + j, rh))
                              : std::tanh(dot_ih(2 * H + j) + r[j] * dot_hh(2 * H + j, h));
    out[j] = (1 - z[j]) * n + z[j] * h[j];
  }
  return out;
}

// Reference 2: Keras layout. kernel (in, 3H) and recurrent_kernel (H, 3H), gate order z, r, h;
// for reset-before the candidate is tanh([x, r*h] . [kernel_h ; recurrent_h] + b).
Vec step_keras_layout(const W& w, GruForm form, const Vec& x, const Vec& h) {
  const int64_t H = w.H, in = w.in;
  const int64_t keras_to_torch[3] = {1, 0, 2};  // z, r, h  ->  PyTorch blocks r=0, z=1, n=2
  auto kernel = [&](int64_t i, int64_t gate, int64_t j) {  // kernel[i][gate*H + j]
    return w.w_ih[(keras_to_torch[gate] * H + j) * in + i];
  };
  auto recurrent = [&](int64_t i, int64_t gate, int64_t j) {
    return w.w_hh[(keras_to_torch[gate] * H + j) * H + i];
  };
  auto bias = [&](int64_t gate, int64_t j, bool input_side) {
    return input_side ? w.b_ih[keras_to_torch[gate] * H + j] : w.b_hh[keras_to_torch[gate] * H + j];
  };
  // x_proj[gate*H + j] = x . kernel[:, gate*H + j] + b_in; h_proj likewise with h.
  Vec xz(3 * H), hz(3 * H);
  for (int64_t gate = 0; gate < 3; ++gate)
    for (int64_t j = 0; j < H; ++j) {
      long double sx = bias(gate, j, true), sh = bias(gate, j, false);
      for (int64_t i = 0; i < in; ++i) sx += x[i] * kernel(i, gate, j);
      for (int64_t i = 0; i < H; ++i) sh += h[i] * recurrent(i, gate, j);
      xz[gate * H + j] = sx;
      hz[gate * H + j] = sh;
    }
  Vec out(H);
  if (form == GruForm::reset_before) {
    // Concatenate u = [x ; r*h] and multiply by the stacked candidate weights.
    Vec u(in + H);
    for (int64_t i = 0; i < in; ++i) u[i] = x[i];
    for (int64_t i = 0; i < H; ++i) u[in + i] = sigm(xz[H + i] + hz[H + i]) * h[i];
    for (int64_t j = 0; j < H; ++j) {
      long double s = bias(2, j, true) + bias(2, j, false);
      for (int64_t i = 0; i < in; ++i) s += u[i] * kernel(i, 2, j);
      for (int64_t i = 0; i < H; ++i) s += u[in + i] * recurrent(i, 2, j);
      const long double z = sigm(xz[j] + hz[j]);
      out[j] = z * h[j] + (1 - z) * std::tanh(s);
    }
  } else {
    for (int64_t j = 0; j < H; ++j) {
      const long double z = sigm(xz[j] + hz[j]), r = sigm(xz[H + j] + hz[H + j]);
      out[j] = z * h[j] + (1 - z) * std::tanh(xz[2 * H + j] + r * hz[2 * H + j]);
    }
  }
  return out;
}

using StepFn = Vec (*)(const W&, GruForm, const Vec&, const Vec&);

// Whole stack, one sequence at a time over its valid part. x time-major (T, N, I);
// returns output (T, N, D*H) with zero padding and h_n (L*D, N, H), as long double.
struct RefOut {
  std::vector<Vec> out;  // [t * N + n] -> D*H values
  std::vector<Vec> hn;   // [ld * N + n] -> H values
};
RefOut reference_stack(const Gru& gru, const Tensor& x, const Tensor& h0,
                       const std::vector<int64_t>& len, StepFn step) {
  const GruConfig& c = gru.config();
  const int64_t T = x.size(0), N = x.size(1), H = c.hidden_size, D = c.directions();
  RefOut r;
  r.hn.assign(c.num_layers * D * N, Vec(H));
  std::vector<Vec> layer_in(T * N);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < x.size(2); ++i) layer_in[t * N + n].push_back(x.item({t, n, i}));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::vector<Vec> out(T * N, Vec(D * H, 0.0L));
    for (int64_t d = 0; d < D; ++d) {
      const W w = take(gru.weights()[l * D + d], H);
      for (int64_t n = 0; n < N; ++n) {
        Vec h(H, 0.0L);
        if (h0.defined())
          for (int64_t j = 0; j < H; ++j) h[j] = h0.item({l * D + d, n, j});
        for (int64_t s = 0; s < len[n]; ++s) {
          const int64_t t = d == 0 ? s : len[n] - 1 - s;
          h = step(w, c.form, layer_in[t * N + n], h);
          for (int64_t j = 0; j < H; ++j) out[t * N + n][d * H + j] = h[j];
        }
        r.hn[(l * D + d) * N + n] = h;
      }
    }
    layer_in = out;
  }
  r.out = layer_in;
  return r;
}

Tensor to_tensor(const std::vector<Vec>& rows, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f64);
  int64_t k = 0;
  for (const Vec& row : rows)
    for (long double v : row) t.data<double>()[k++] = static_cast<double>(v);
  return t;
}

struct RbCase {
  const char* name;
  GruForm form;
  int64_t layers;
  bool bidir, bias, lengths, h0;
  DType dtype;
  double x_scale;
};

class ResetBefore : public ::testing::TestWithParam<RbCase> {};

TEST_P(ResetBefore, MatchesBothReferences) {
  const RbCase& k = GetParam();
  const int64_t T = 9, N = 4, I = 5, H = 17;  // H = 17: a SIMD tail for f32 and f64
  GruConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.num_layers = k.layers;
  c.bidirectional = k.bidir;
  c.bias = k.bias;
  c.form = k.form;
  Gru gru(c, k.dtype, 21);
  std::mt19937_64 rng(4);
  Tensor x = test::random_tensor({T, N, I}, k.dtype, rng, k.x_scale);
  Tensor h0 =
      k.h0 ? test::random_tensor({k.layers * c.directions(), N, H}, k.dtype, rng) : Tensor();
  std::vector<int64_t> len =
      k.lengths ? std::vector<int64_t>{4, 9, 1, 6} : std::vector<int64_t>(N, T);
  Tensor lengths = k.lengths ? Tensor::from_vector<int64_t>({N}, len) : Tensor();

  const RefOut a = reference_stack(gru, x, h0, len, step_pytorch_layout);
  const RefOut b = reference_stack(gru, x, h0, len, step_keras_layout);
  const Shape os{T, N, c.directions() * H}, hs{k.layers * c.directions(), N, H};
  // The two references agree to long-double rounding.
  EXPECT_TRUE(test::all_close(k.name, "reference outputs", to_tensor(a.out, os),
                              to_tensor(b.out, os), {1e-14, 1e-14}));
  EXPECT_TRUE(test::all_close(k.name, "reference h_n", to_tensor(a.hn, hs), to_tensor(b.hn, hs),
                              {1e-14, 1e-14}));
  GruOutput y = gru.forward(x, h0, lengths);
  const test::Tol tol = test::tol_for(k.dtype);
  EXPECT_TRUE(test::all_close(k.name, "output", y.output, to_tensor(a.out, os), tol));
  EXPECT_TRUE(test::all_close(k.name, "h_n", y.h_n, to_tensor(a.hn, hs), tol));
}

constexpr auto LBR = GruForm::linear_before_reset;
constexpr auto RB = GruForm::reset_before;
// clang-format off
const RbCase kRbCases[] = {
    {"rb_f64", RB, 1, false, true, false, true, DType::f64, 1.0},
    {"rb_f32", RB, 1, false, true, false, true, DType::f32, 1.0},
    {"rb_nobias_f64", RB, 1, false, false, false, false, DType::f64, 1.0},
    {"rb_l2_bidir_lengths_f64", RB, 2, true, true, true, true, DType::f64, 1.0},
    {"rb_l3_bidir_lengths_f32", RB, 3, true, true, true, false, DType::f32, 1.0},
    {"rb_saturated_f64", RB, 2, true, true, true, true, DType::f64, 50.0},
    {"rb_saturated_f32", RB, 1, false, true, false, true, DType::f32, 50.0},
    {"lbr_l2_bidir_lengths_f64", LBR, 2, true, true, true, true, DType::f64, 1.0},
    {"lbr_saturated_f32", LBR, 1, true, true, true, false, DType::f32, 50.0},
};
// clang-format on
INSTANTIATE_TEST_SUITE_P(Equations, ResetBefore, ::testing::ValuesIn(kRbCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The two forms differ: a test that cannot tell them apart would prove nothing.
TEST(ResetBeforeForm, DiffersFromLinearBeforeReset) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  Gru lbr(c, DType::f64, 1);
  c.form = RB;
  Gru rb(c, lbr.weights());
  std::mt19937_64 rng(1);
  Tensor x = test::random_tensor({4, 2, 3}, DType::f64, rng);
  Tensor h0 = test::random_tensor({1, 2, 4}, DType::f64, rng);
  EXPECT_GT(max_abs_diff(lbr.forward(x, h0).output, rb.forward(x, h0).output), 1e-3);
}

}  // namespace
}  // namespace grux::test_gru_reset_before
