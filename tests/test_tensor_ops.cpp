// Element-wise ops with broadcasting, matmul and reductions: hand-computed cases, naive
// references written here (index arithmetic by division, triple-loop matmul), strided and
// 0-size inputs, every error path, device checks, and PyTorch golden files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/tensor_test_access.h"
#include "grux/io.h"
#include "grux/tensor_ops.h"
#include "test_util.h"

namespace grux::test_tensor_ops {
namespace {

using test::all_close;
using test::random_tensor;
using test::Tol;
using test::tol_for;
using ::testing::HasSubstr;

Tensor values(const Shape& shape, const std::vector<double>& v, DType dtype = DType::f32) {
  return Tensor::from_vector<double>(shape, v).to(dtype);
}

Tensor arange(const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = double(i);
  return t.to(dtype);
}

// Message of the grux::Error thrown by fn ("" if none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Row-major multi-index of flat position i in `shape`, by division: deliberately a different
// algorithm from the kernels' odometers.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    if (shape[d]) i /= shape[d];
  }
  return idx;
}

// Element of t at the output index `out_idx` under broadcasting (t right-aligned).
double broadcast_at(const Tensor& t, const std::vector<int64_t>& out_idx) {
  int64_t flat = 0;
  const size_t lead = out_idx.size() - t.shape().size();
  for (size_t d = 0; d < t.shape().size(); ++d) {
    const int64_t i = t.shape()[d] == 1 ? 0 : out_idx[lead + d];
    flat = flat * t.shape()[d] + i;
  }
  return t.at_flat(flat);
}

// The expected result of a binary op, element by element in double.
Tensor naive_binary(const Tensor& a, const Tensor& b, const Shape& out_shape,
                    const std::function<double(double, double)>& f) {
  Tensor out = Tensor::empty(out_shape, DType::f64);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto idx = unravel(i, out_shape);
    out.data<double>()[i] = f(broadcast_at(a, idx), broadcast_at(b, idx));
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// Broadcasting

TEST(Broadcast, ShapesFollowNumpyRules) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {3}, {2, 3}},
      {{2, 1}, {1, 3}, {2, 3}},
      {{}, {2, 3}, {2, 3}},
      {{}, {}, {}},
      {{0}, {1}, {0}},
      {{1}, {0}, {0}},
      {{0, 3}, {1, 3}, {0, 3}},
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},
      {{5, 1, 1}, {1, 6, 1}, {5, 6, 1}},
      {{1, 1, 1, 7}, {7}, {1, 1, 1, 7}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(broadcast_shapes(c.a, c.b), c.out) << shape_str(c.a) << " " << shape_str(c.b);
    EXPECT_EQ(broadcast_shapes(c.b, c.a), c.out) << shape_str(c.b) << " " << shape_str(c.a);
  }
}

TEST(Broadcast, ErrorNamesOpShapesAndDimension) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({4}, DType::f32);
  EXPECT_EQ(error_of([&] { add(a, b); }),
            "add: shapes (2, 3) and (4,) do not broadcast: dimension -1 is 3 vs 4");
  EXPECT_EQ(error_of([&] {
              mul(Tensor::zeros({2, 3, 4}, DType::f32), Tensor::zeros({5, 4}, DType::f32));
            }),
            "mul: shapes (2, 3, 4) and (5, 4) do not broadcast: dimension -2 is 3 vs 5");
  // 0 broadcasts only against 1, never against another size.
  EXPECT_THAT(
      error_of([&] { sub(Tensor::zeros({0}, DType::f32), Tensor::zeros({2}, DType::f32)); }),
      HasSubstr("dimension -1 is 0 vs 2"));
}

TEST(Broadcast, SeedExampleRowBroadcastEqualsExplicitRepeat) {
  // a + b with b = [[1, -1]] equals a + c with c = [[1, -1], [1, -1]] (the seed's example).
  for (DType dt : {DType::i64, DType::f32, DType::f64}) {
    Tensor a = values({2, 2}, {1, 2, 3, 4}, dt);
    Tensor b = values({1, 2}, {1, -1}, dt);
    Tensor c = values({2, 2}, {1, -1, 1, -1}, dt);
    Tensor ab = add(a, b), ac = add(a, c);
    EXPECT_EQ(ab.shape(), (Shape{2, 2}));
    EXPECT_EQ(ab.dtype(), dt);
    EXPECT_EQ(max_abs_diff(ab, ac), 0.0);
    EXPECT_EQ(max_abs_diff(ab, values({2, 2}, {2, 1, 4, 3})), 0.0);
  }
}

TEST(Binary, HandComputedValues) {
  Tensor a = values({4}, {1, -2, 3.5, 0}), b = values({4}, {2, 4, -0.5, 3});
  EXPECT_EQ(max_abs_diff(add(a, b), values({4}, {3, 2, 3, 3})), 0.0);
  EXPECT_EQ(max_abs_diff(sub(a, b), values({4}, {-1, -6, 4, -3})), 0.0);
  EXPECT_EQ(max_abs_diff(mul(a, b), values({4}, {2, -8, -1.75, 0})), 0.0);
  EXPECT_EQ(max_abs_diff(div(a, b), values({4}, {0.5, -0.5, -7, 0})), 0.0);
  EXPECT_EQ(max_abs_diff(maximum(a, b), values({4}, {2, 4, 3.5, 3})), 0.0);
  EXPECT_EQ(max_abs_diff(minimum(a, b), values({4}, {1, -2, -0.5, 0})), 0.0);
  EXPECT_EQ(max_abs_diff(pow(values({3}, {2, 9, 4}), values({3}, {3, 0.5, -1})),
                         values({3}, {8, 3, 0.25})),
            0.0);
  // Column (3, 1) against row (2,): an outer sum.
  Tensor col = values({3, 1}, {0, 10, 20}), row = values({2}, {1, 2});
  EXPECT_EQ(max_abs_diff(add(col, row), values({3, 2}, {1, 2, 11, 12, 21, 22})), 0.0);
}

// Each op on random broadcast pairs of shapes, including strided views (a transposed and a
// stepped slice) and 0-d tensors, against the naive reference.
TEST(Binary, BroadcastStridedAndScalarCasesMatchNaiveReference) {
  std::mt19937_64 rng(7);
  struct Op {
    const char* name;
    Tensor (*fn)(const Tensor&, const Tensor&);
    std::function<double(double, double)> ref;
  };
  const std::vector<Op> ops = {
      {"add", add, [](double x, double y) { return x + y; }},
      {"sub", sub, [](double x, double y) { return x - y; }},
      {"mul", mul, [](double x, double y) { return x * y; }},
      {"div", div, [](double x, double y) { return x / y; }},
      {"maximum", maximum, [](double x, double y) { return std::max(x, y); }},
      {"minimum", minimum, [](double x, double y) { return std::min(x, y); }},
      {"pow", pow, [](double x, double y) { return std::pow(x, y); }},
  };
  struct Pair {
    Shape a, b;
  };
  const std::vector<Pair> pairs = {{{5, 7}, {5, 7}},      {{5, 7}, {7}}, {{5, 1}, {1, 7}},
                                   {{}, {3, 4}},          {{3, 4}, {}},  {{2, 3, 17}, {3, 1}},
                                   {{4, 1, 33}, {6, 33}}, {{1}, {9}},    {{0, 3}, {3}},
                                   {{2, 0, 3}, {1, 1}}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Op& op : ops) {
      for (const Pair& p : pairs) {
        for (int layout = 0; layout < 3; ++layout) {
          Tensor a = random_tensor(p.a, dt, rng), b = random_tensor(p.b, dt, rng);
          if (op.name == std::string("div")) b = add(abs(b), 0.5);
          if (op.name == std::string("pow")) a = add(abs(a), 0.5);
          // layout 1: a is a transposed view; layout 2: b is a stepped slice of a bigger one.
          if (layout == 1 && a.dim() >= 2)
            a = a.transpose(0, a.dim() - 1).contiguous().transpose(0, a.dim() - 1);
          if (layout == 2 && b.dim() >= 1) {
            Shape big = b.shape();
            big.back() = big.back() * 2;
            Tensor wide = random_tensor(big, dt, rng);
            if (op.name == std::string("div")) wide = add(abs(wide), 0.5);
            b = wide.slice(-1, 0, big.back(), 2);
          }
          const Shape out_shape = broadcast_shapes(p.a, p.b);
          Tensor got = op.fn(a, b);
          EXPECT_TRUE(got.is_contiguous());
          EXPECT_FALSE(got.shares_storage(a) || got.shares_storage(b));
          EXPECT_EQ(got.dtype(), dt);
          Tensor want = naive_binary(a, b, out_shape, op.ref);
          const std::string where = std::string(op.name) + " " + dtype_name(dt) + " " +
                                    shape_str(p.a) + " x " + shape_str(p.b) + " layout " +
                                    std::to_string(layout);
          EXPECT_TRUE(all_close(where, "out", got, want, tol_for(dt)));
        }
      }
    }
  }
}

TEST(Binary, ScalarOverloads) {
  Tensor t = values({3}, {1, 2, 4}, DType::f64);
  EXPECT_EQ(max_abs_diff(mul(t, 2.0), values({3}, {2, 4, 8})), 0.0);
  EXPECT_EQ(max_abs_diff(mul(2.0, t), values({3}, {2, 4, 8})), 0.0);
  EXPECT_EQ(max_abs_diff(add(t, 1), values({3}, {2, 3, 5})), 0.0);
  EXPECT_EQ(max_abs_diff(sub(1.0, t), values({3}, {0, -1, -3})), 0.0);
  EXPECT_EQ(max_abs_diff(sub(t, 1.0), values({3}, {0, 1, 3})), 0.0);
  EXPECT_EQ(max_abs_diff(div(1.0, t), values({3}, {1, 0.5, 0.25})), 0.0);
  EXPECT_EQ(max_abs_diff(div(t, 4.0), values({3}, {0.25, 0.5, 1})), 0.0);
  EXPECT_EQ(max_abs_diff(pow(t, 2.0), values({3}, {1, 4, 16})), 0.0);
  EXPECT_EQ(max_abs_diff(pow(2.0, t), values({3}, {2, 4, 16})), 0.0);
  EXPECT_EQ(max_abs_diff(maximum(t, 1.5), values({3}, {1.5, 2, 4})), 0.0);
  EXPECT_EQ(max_abs_diff(minimum(t, 1.5), values({3}, {1, 1.5, 1.5})), 0.0);
  EXPECT_EQ(mul(t, 2.0).dtype(), DType::f64);
  // A scalar on a strided view.
  Tensor m = arange({3, 4}).transpose(0, 1);
  EXPECT_EQ(mul(m, 10.0).item({3, 2}), 110.0);
  // i64: whole numbers only.
  Tensor i = values({2}, {3, -4}, DType::i64);
  EXPECT_EQ(mul(i, 3).item({1}), -12.0);
  EXPECT_THAT(error_of([&] { mul(i, 2.5); }), HasSubstr("scalar 2.5 is not a whole number"));
  EXPECT_THAT(error_of([&] { add(i, 1e19); }), HasSubstr("i64"));
}

TEST(Binary, NanPropagatesThroughMaximumAndMinimum) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = values({3}, {nan, 1, 2}, dt), b = values({3}, {0, nan, 1}, dt);
    Tensor mx = maximum(a, b), mn = minimum(a, b);
    EXPECT_TRUE(std::isnan(mx.item({0})) && std::isnan(mx.item({1})));
    EXPECT_TRUE(std::isnan(mn.item({0})) && std::isnan(mn.item({1})));
    EXPECT_EQ(mx.item({2}), 2.0);
    EXPECT_EQ(mn.item({2}), 1.0);
  }
}

TEST(Binary, I64ArithmeticWrapsAndRefusesDivAndPow) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor a = Tensor::from_vector<int64_t>({3}, {big, -7, 5});
  Tensor b = Tensor::from_vector<int64_t>({3}, {1, 3, -2});
  Tensor s = add(a, b);
  EXPECT_EQ(s.data<int64_t>()[0], std::numeric_limits<int64_t>::min());  // wraps, no UB
  EXPECT_EQ(s.data<int64_t>()[1], -4);
  EXPECT_EQ(mul(a, b).data<int64_t>()[2], -10);
  EXPECT_EQ(sub(a, b).data<int64_t>()[1], -10);
  EXPECT_EQ(maximum(a, b).data<int64_t>()[1], 3);
  EXPECT_EQ(minimum(a, b).data<int64_t>()[0], 1);
  EXPECT_THAT(error_of([&] { div(a, b); }), HasSubstr("div: dtype i64 is not supported"));
  EXPECT_THAT(error_of([&] { pow(a, b); }), HasSubstr("pow: dtype i64 is not supported"));
}

TEST(Binary, MixedDtypesAreAnErrorNamingBoth) {
  Tensor a = Tensor::zeros({2}, DType::f32), b = Tensor::zeros({2}, DType::f64);
  const std::string msg = error_of([&] { add(a, b); });
  EXPECT_THAT(msg, HasSubstr("add"));
  EXPECT_THAT(msg, HasSubstr("b has dtype f64"));
  EXPECT_THAT(msg, HasSubstr("a has dtype f32"));
  EXPECT_THAT(error_of([&] { maximum(Tensor::zeros({2}, DType::i64), b); }),
              HasSubstr("maximum: b has dtype f64 but a has dtype i64"));
  EXPECT_THAT(error_of([&] { add(Tensor(), b); }), HasSubstr("add: a is undefined"));
}

// ------------------------------------------------------------------------------------------
// Unary

TEST(Unary, MatchStdFunctionsOnStridedInputs) {
  std::mt19937_64 rng(11);
  struct Op {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double (*ref)(double);
    bool positive_input;
  };
  const std::vector<Op> ops = {
      {"neg", neg, [](double x) { return -x; }, false},
      {"exp", exp, [](double x) { return std::exp(x); }, false},
      {"log", log, [](double x) { return std::log(x); }, true},
      {"sigmoid", sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, false},
      {"tanh", tanh, [](double x) { return std::tanh(x); }, false},
      {"relu", relu, [](double x) { return x > 0 ? x : 0.0; }, false},
      {"abs", abs, [](double x) { return std::abs(x); }, false},
      {"sqrt", sqrt, [](double x) { return std::sqrt(x); }, true},
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Op& op : ops) {
      for (const Shape& shape : {Shape{}, Shape{0, 4}, Shape{17}, Shape{6, 35}, Shape{3, 4, 5}}) {
        Tensor base = random_tensor(shape, dt, rng, 3.0);
        if (op.positive_input) base = add(abs(base), 0.01);
        // The same values through a transposed view (contiguous after transposing back).
        Tensor strided = base.dim() >= 2 ? base.transpose(0, 1).contiguous().transpose(0, 1) : base;
        for (const Tensor& in : {base, strided}) {
          Tensor got = op.fn(in);
          Tensor want = Tensor::empty(shape, DType::f64);
          for (int64_t i = 0; i < in.numel(); ++i) want.data<double>()[i] = op.ref(in.at_flat(i));
          EXPECT_TRUE(got.is_contiguous());
          EXPECT_TRUE(
              all_close(std::string(op.name) + " " + dtype_name(dt) + " " + shape_str(shape), "out",
                        got, want, tol_for(dt)));
        }
      }
    }
  }
}

TEST(Unary, EdgeValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = values({4}, {-1000, 1000, nan, -inf}, DType::f32);
  Tensor s = sigmoid(x);
  EXPECT_EQ(s.item({0}), 0.0);  // exp(1000) overflows; the limit is still right
  EXPECT_EQ(s.item({1}), 1.0);
  EXPECT_TRUE(std::isnan(relu(x).item({2})));
  EXPECT_EQ(relu(x).item({3}), 0.0);
  EXPECT_EQ(tanh(x).item({0}), -1.0);
  EXPECT_TRUE(std::isnan(log(values({1}, {-1})).item({0})));
}

TEST(Unary, I64SupportsNegAbsReluOnly) {
  Tensor i = Tensor::from_vector<int64_t>({3}, {-3, 0, std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(neg(i).data<int64_t>()[0], 3);
  EXPECT_EQ(neg(i).data<int64_t>()[2], std::numeric_limits<int64_t>::min());  // wraps
  EXPECT_EQ(abs(i).data<int64_t>()[0], 3);
  EXPECT_EQ(relu(i).data<int64_t>()[0], 0);
  EXPECT_THAT(error_of([&] { exp(i); }), HasSubstr("exp: dtype i64 is not supported"));
  EXPECT_THAT(error_of([&] { sqrt(i); }), HasSubstr("sqrt: dtype i64"));
}

// ------------------------------------------------------------------------------------------
// matmul

// Naive batched matmul with broadcasting over the batch, after promoting 1-D operands.
Tensor naive_matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  const Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Shape ab(a.shape().begin(), a.shape().end() - 2),
      bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ab, bb);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::zeros(out_shape, DType::f64);
  int64_t nbatch = 1;
  for (int64_t s : batch) nbatch *= s;
  for (int64_t p = 0; p < nbatch; ++p) {
    const auto bi = unravel(p, batch);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          auto ia = bi, ib = bi;
          ia.push_back(m), ia.push_back(k);
          ib.push_back(k), ib.push_back(n);
          acc += broadcast_at(a, ia) * broadcast_at(b, ib);
        }
        out.data<double>()[(p * M + m) * N + n] = acc;
      }
  }
  Shape final_shape = batch;
  if (a_in.dim() > 1) final_shape.push_back(M);
  if (b_in.dim() > 1) final_shape.push_back(N);
  return out.reshape(final_shape);
}

TEST(Matmul, HandComputed2x2AndDot) {
  Tensor a = values({2, 2}, {1, 2, 3, 4}), b = values({2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(max_abs_diff(matmul(a, b), values({2, 2}, {19, 22, 43, 50})), 0.0);
  Tensor d = matmul(values({3}, {1, 2, 3}), values({3}, {4, -5, 6}));
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item(), 12.0);
  // a^T through a transposed view: [[1, 3], [2, 4]] x b.
  EXPECT_EQ(max_abs_diff(matmul(a.transpose(0, 1), b), values({2, 2}, {26, 30, 38, 44})), 0.0);
}

TEST(Matmul, ShapesAndLayoutsMatchNaiveTripleLoop) {
  std::mt19937_64 rng(3);
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{7}, {7}},
      {{3, 4}, {4, 5}},
      {{1, 4}, {4, 1}},
      {{4}, {4, 5}},
      {{3, 4}, {4}},
      {{4}, {2, 4, 3}},
      {{2, 3, 4}, {4}},
      {{2, 3, 4}, {4, 5}},        // b shared by the batch: folds into one GEMM
      {{2, 1, 3, 4}, {5, 4, 2}},  // batch broadcast both ways
      {{1, 3, 4}, {6, 4, 2}},
      {{2, 17, 33}, {2, 33, 9}},
      {{3, 0}, {0, 4}},  // K = 0: zeros
      {{0, 3}, {3, 4}},
      {{2, 0, 3, 4}, {4, 5}},
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      // Layouts: 0 contiguous; 1 both operands as transposed views of their last two dims
      // (the GEMM's trans flags); 2 every other column of a wider tensor (needs a copy).
      for (int layout = 0; layout < 3; ++layout) {
        Tensor a = random_tensor(c.a, dt, rng), b = random_tensor(c.b, dt, rng);
        if (layout == 1) {
          if (a.dim() >= 2) a = a.transpose(-1, -2).contiguous().transpose(-1, -2);
          if (b.dim() >= 2) b = b.transpose(-1, -2).contiguous().transpose(-1, -2);
        }
        if (layout == 2) {
          auto widen = [&](const Tensor& t) {
            Shape wide = t.shape();
            wide.back() *= 2;
            Tensor w = random_tensor(wide, dt, rng);
            Tensor v = w.slice(-1, 0, wide.back(), 2);
            v.copy_from(t);
            return v;
          };
          a = widen(a);
          b = widen(b);
        }
        const std::string where = std::string(dtype_name(dt)) + " " + shape_str(c.a) + " x " +
                                  shape_str(c.b) + " layout " + std::to_string(layout);
        Tensor got = matmul(a, b);
        Tensor want = naive_matmul(a, b);
        // Tolerance from the reduction length: each product adds at most ~eps rounding.
        const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
        const int64_t K = c.a.back();
        EXPECT_TRUE(all_close(where, "out", got, want, {4 * eps * (K + 1), 4 * eps * (K + 1)}));
      }
    }
  }
}

TEST(Matmul, ErrorsNameTheInnerDimensions) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({4, 5}, DType::f32);
  EXPECT_EQ(error_of([&] { matmul(a, b); }),
            "matmul: inner dimensions differ: a (2, 3) has 3 in dimension -1 but b (4, 5) has 4 "
            "in dimension -2");
  EXPECT_THAT(
      error_of([&] { matmul(Tensor::zeros({3}, DType::f32), Tensor::zeros({4}, DType::f32)); }),
      HasSubstr("a (3,) has 3 in dimension -1 but b (4,) has 4 in dimension -1"));
  EXPECT_THAT(error_of([&] {
                matmul(Tensor::zeros({2, 3, 4}, DType::f32), Tensor::zeros({3, 4, 5}, DType::f32));
              }),
              HasSubstr("batch dimensions (2,) of a (2, 3, 4) and (3,) of b (3, 4, 5) do not "
                        "broadcast"));
  EXPECT_THAT(error_of([&] { matmul(Tensor::zeros({}, DType::f32), b); }),
              HasSubstr("at least 1 dimension"));
  EXPECT_THAT(error_of([&] {
                matmul(Tensor::zeros({2, 2}, DType::i64), Tensor::zeros({2, 2}, DType::i64));
              }),
              HasSubstr("matmul: dtype i64 is not supported"));
  EXPECT_THAT(error_of([&] {
                matmul(a, Tensor::zeros({3, 5}, DType::f64));
              }),
              HasSubstr("matmul: b has dtype f64 but a has dtype f32"));
}

// ------------------------------------------------------------------------------------------
// Reductions

TEST(Reduce, SumMeanHandComputed) {
  // x = arange(2*3*4) as (2, 3, 4).
  Tensor x = arange({2, 3, 4});
  EXPECT_EQ(sum(x).item(), 276.0);
  EXPECT_EQ(sum(x).dim(), 0);
  EXPECT_EQ(mean(x).item(), 11.5);
  Tensor s0 = sum(x, {0});
  EXPECT_EQ(s0.shape(), (Shape{3, 4}));
  EXPECT_EQ(s0.item({1, 2}), 6.0 + 18.0);
  Tensor s12 = sum(x, {1, -1});
  EXPECT_EQ(max_abs_diff(s12, values({2}, {66, 210})), 0.0);
  Tensor k = sum(x, {2}, true);
  EXPECT_EQ(k.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(k.item({1, 2, 0}), 20.0 + 21 + 22 + 23);
  EXPECT_EQ(mean(x, {1}).item({0, 3}), (3.0 + 7 + 11) / 3);
  EXPECT_EQ(sum(x, {}).shape(), x.shape());  // NumPy's axis=(): nothing reduced
  // Strided input: the transposed view sums the same numbers along the other axis.
  Tensor xt = x.transpose(0, 2);  // (4, 3, 2)
  EXPECT_EQ(max_abs_diff(sum(xt, {2}), sum(x, {0}).transpose(0, 1)), 0.0);
  // i64 stays i64.
  Tensor i = Tensor::from_vector<int64_t>({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(sum(i, {0}).dtype(), DType::i64);
  EXPECT_EQ(sum(i, {0}).data<int64_t>()[1], 6);
}

TEST(Reduce, EmptyReductions) {
  Tensor z = Tensor::zeros({0, 3}, DType::f32);
  EXPECT_EQ(sum(z).item(), 0.0);
  EXPECT_EQ(max_abs_diff(sum(z, {0}), Tensor::zeros({3}, DType::f32)), 0.0);
  EXPECT_TRUE(std::isnan(mean(z, {0}).item({1})));
  EXPECT_EQ(sum(z, {1}).shape(), (Shape{0}));
  EXPECT_EQ(max(z, {1}).shape(), (Shape{0}));  // nothing is reduced over a size-0 dim
  EXPECT_THAT(error_of([&] { max(z, {0}); }),
              HasSubstr("max: cannot reduce over dimension 0 of size 0"));
  EXPECT_THAT(error_of([&] { min(z); }), HasSubstr("min: cannot reduce over dimension 0"));
  Tensor scalar = Tensor::full({}, 5.0, DType::f64);
  EXPECT_EQ(sum(scalar).item(), 5.0);
  EXPECT_EQ(max(scalar).item(), 5.0);
}

// f32 sums accumulate in double: 10^6 copies of 0.1f sum to 100000.0015 (0.1f is
// 0.100000001490116), while a float accumulator drifts to about 100958.
TEST(Reduce, LongF32SumIsAccurate) {
  Tensor t = Tensor::full({1000000}, 0.1, DType::f32);
  EXPECT_NEAR(sum(t).item(), 100000.0015, 0.01);
  EXPECT_NEAR(mean(t).item(), 0.1, 1e-7);
  Tensor rows = Tensor::full({2000, 500}, 0.1, DType::f32);
  EXPECT_NEAR(sum(rows, {0}).item({7}), 200.000003, 1e-4);  // down columns (kept inner dim)
}

TEST(Reduce, MaxMinAndIndices) {
  Tensor x = values({2, 4}, {3, 7, 7, -2, 0, -2, 5, -2});
  EXPECT_EQ(max(x).item(), 7.0);
  EXPECT_EQ(min(x).item(), -2.0);
  EXPECT_EQ(max_abs_diff(max(x, {1}), values({2}, {7, 5})), 0.0);
  EXPECT_EQ(max_abs_diff(min(x, {0}), values({4}, {0, -2, 5, -2})), 0.0);
  ValuesIndices r = max_with_indices(x, 1);
  EXPECT_EQ(r.indices.dtype(), DType::i64);
  EXPECT_EQ(r.indices.data<int64_t>()[0], 1);  // the first of the tied 7s
  EXPECT_EQ(r.indices.data<int64_t>()[1], 2);
  ValuesIndices m = min_with_indices(x, -1, true);
  EXPECT_EQ(m.values.shape(), (Shape{2, 1}));
  EXPECT_EQ(m.indices.item({1, 0}), 1.0);  // first of the tied -2s
  EXPECT_EQ(argmax(x, 0).shape(), (Shape{4}));
  EXPECT_EQ(max_abs_diff(argmax(x, 0), values({4}, {0, 0, 0, 0}, DType::i64)), 0.0);
  EXPECT_EQ(max_abs_diff(argmin(x, 0), values({4}, {1, 1, 1, 0}, DType::i64)), 0.0);  // tie: 0
  // Along a transposed view: argmax over dim 1 of x^T is argmax over dim 0 of x.
  EXPECT_EQ(max_abs_diff(argmax(x.transpose(0, 1), 1), argmax(x, 0)), 0.0);
  // i64 and NaN.
  Tensor i = Tensor::from_vector<int64_t>({3}, {std::numeric_limits<int64_t>::min(), -5, -5});
  EXPECT_EQ(max(i).data<int64_t>()[0], -5);
  EXPECT_EQ(argmin(i, 0).data<int64_t>()[0], 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = values({4}, {1, nan, 3, nan}, DType::f64);
  EXPECT_TRUE(std::isnan(max(n).item()));
  EXPECT_EQ(argmax(n, 0).data<int64_t>()[0], 1);
  EXPECT_EQ(argmin(n, 0).data<int64_t>()[0], 1);
}

TEST(Reduce, MultiDimAgainstNaiveReference) {
  std::mt19937_64 rng(5);
  Tensor base = random_tensor({3, 5, 7, 2}, DType::f64, rng);
  Tensor x = base.permute({2, 0, 3, 1});  // (7, 3, 2, 5), strided
  for (const std::vector<int64_t>& dims :
       std::vector<std::vector<int64_t>>{{0}, {1}, {3}, {0, 2}, {1, 3}, {0, 1, 2, 3}, {2, 0}}) {
    Tensor s = sum(x, dims, true), mx = max(x, dims, true);
    Tensor want_s = Tensor::zeros(s.shape(), DType::f64);
    Tensor want_mx = Tensor::full(s.shape(), -1e300, DType::f64);
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unravel(i, x.shape());
      for (int64_t d : dims) idx[d] = 0;
      int64_t flat = 0;
      for (size_t d = 0; d < idx.size(); ++d) flat = flat * s.shape()[d] + idx[d];
      want_s.data<double>()[flat] += x.at_flat(i);
      want_mx.data<double>()[flat] = std::max(want_mx.data<double>()[flat], x.at_flat(i));
    }
    EXPECT_TRUE(all_close("sum dims", "out", s, want_s, tol_for(DType::f64)));
    EXPECT_EQ(max_abs_diff(mx, want_mx), 0.0);
  }
}

TEST(Reduce, Errors) {
  Tensor x = arange({2, 3});
  EXPECT_THAT(error_of([&] { sum(x, {0, -2}); }), HasSubstr("sum: dimension 0 is listed twice"));
  EXPECT_THAT(error_of([&] { sum(x, {2}); }),
              HasSubstr("sum: dimension 2 out of range for a tensor of rank 2"));
  EXPECT_THAT(error_of([&] { argmax(x, -3); }), HasSubstr("argmax: dimension -3 out of range"));
  EXPECT_THAT(error_of([&] { mean(Tensor::zeros({2}, DType::i64)); }),
              HasSubstr("mean: dtype i64 is not supported"));
  EXPECT_THAT(error_of([&] { sum(Tensor()); }), HasSubstr("sum: t is undefined"));
}

// ------------------------------------------------------------------------------------------
// Devices

// Only CPU exists in this build and Storage refuses to allocate anything else, so a tensor on
// "cuda:0" cannot be made honestly. TensorTestAccess relabels a CPU tensor's device tag
// (allocating nothing anywhere) so that the checks every op runs first can be exercised;
// a check that ran after touching the data would still read valid CPU memory.
TEST(Devices, MixedDevicesNameOpArgumentAndBothDevices) {
  const Device cuda{Device::Kind::cuda, 0};
  Tensor cpu_t = arange({2, 2});
  Tensor cuda_t = TensorTestAccess::with_device_tag(arange({2, 2}), cuda);
  EXPECT_EQ(cuda_t.device(), cuda);
  EXPECT_EQ(error_of([&] { add(cpu_t, cuda_t); }),
            "add: b is on cuda:0 but a is on cpu (expected the same device)");
  EXPECT_EQ(error_of([&] { matmul(cuda_t, cpu_t); }),
            "matmul: b is on cpu but a is on cuda:0 (expected the same device)");
  // Same device but not one this build can compute on.
  EXPECT_THAT(error_of([&] { mul(cuda_t, cuda_t); }),
              HasSubstr("mul: a is on cuda:0, but this build has kernels for cpu only"));
  EXPECT_THAT(error_of([&] { exp(cuda_t); }), HasSubstr("exp: t is on cuda:0"));
  EXPECT_THAT(error_of([&] { sum(cuda_t); }), HasSubstr("sum: t is on cuda:0"));
  EXPECT_THAT(error_of([&] { argmax(cuda_t, 0); }), HasSubstr("argmax: t is on cuda:0"));
  EXPECT_THAT(error_of([&] { mul(cuda_t, 2.0); }), HasSubstr("mul: tensor is on cuda:0"));
  // The device mismatch is reported even when the dtypes differ too.
  EXPECT_THAT(error_of([&] { add(cpu_t.to(DType::f64), cuda_t); }), HasSubstr("cuda:0"));
}

TEST(Devices, ToCudaFailsClearlyInANonCudaBuild) {
  Tensor t = arange({2});
  EXPECT_EQ(t.to(Device::cpu()).shares_storage(t), true);  // to(same device) is a no-op
  const std::string msg = error_of([&] { t.to(Device{Device::Kind::cuda, 0}); });
  EXPECT_THAT(msg, HasSubstr("to: device cuda:0 is not available in this build"));
  EXPECT_THAT(msg, HasSubstr("without CUDA"));
}

// ------------------------------------------------------------------------------------------
// Views vs clone (the seed's copy / deepcopy example)

TEST(ViewsVsClone, HandleCopyAliasesCloneIsIndependent) {
  Tensor b = arange({2, 3});
  Tensor c = b;          // copy(b): another handle to the same storage
  Tensor a = b.clone();  // deepcopy(b)
  c.set({0, 1}, 42.0);
  EXPECT_EQ(b.item({0, 1}), 42.0);
  EXPECT_TRUE(c.shares_storage(b));
  EXPECT_EQ(a.item({0, 1}), 1.0);
  EXPECT_FALSE(a.shares_storage(b));
  // Ops never return views: writing into a result leaves the inputs alone.
  Tensor r = add(b, 0.0);
  r.set({0, 0}, -1.0);
  EXPECT_EQ(b.item({0, 0}), 0.0);
  // permute is a view.
  Tensor p = b.permute({1, 0});
  EXPECT_TRUE(p.shares_storage(b));
  EXPECT_EQ(p.item({1, 0}), 42.0);
  EXPECT_THROW(b.permute({0, 0}), Error);
  EXPECT_THROW(b.permute({0}), Error);
}

// ------------------------------------------------------------------------------------------
// PyTorch golden files (tests/reference/gen_tensor_ops_golden.py)

Tensor golden(const std::string& name) {
  return read_npy(std::string(GRUX_GOLDEN_DIR) + "/tensor_ops/" + name + ".npy");
}

TEST(Golden, BinaryOps) {
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor&, const Tensor&)>> ops = {
      {"add", add},         {"sub", sub},         {"mul", mul}, {"div", div},
      {"maximum", maximum}, {"minimum", minimum}, {"pow", pow}};
  for (const char* dn : {"f32", "f64"})
    for (const auto& [name, fn] : ops) {
      const std::string c = "binary_" + name + "_" + dn;
      Tensor got = fn(golden(c + "_a"), golden(c + "_b"));
      Tensor want = golden(c + "_out");
      EXPECT_TRUE(all_close(c, "out", got, want, tol_for(want.dtype())));
    }
}

TEST(Golden, UnaryOps) {
  for (const char* dn : {"f32", "f64"}) {
    const std::string d = dn;
    Tensor x = golden("unary_x_" + d);
    const Tol tol = tol_for(x.dtype());
    EXPECT_TRUE(all_close(d, "neg", neg(x), golden("unary_neg_" + d), tol));
    EXPECT_TRUE(all_close(d, "exp", exp(x), golden("unary_exp_" + d), tol));
    EXPECT_TRUE(all_close(d, "log", log(add(abs(x), 0.1)), golden("unary_log_" + d), tol));
    EXPECT_TRUE(all_close(d, "sigmoid", sigmoid(x), golden("unary_sigmoid_" + d), tol));
    EXPECT_TRUE(all_close(d, "tanh", tanh(x), golden("unary_tanh_" + d), tol));
    EXPECT_TRUE(all_close(d, "relu", relu(x), golden("unary_relu_" + d), tol));
    EXPECT_TRUE(all_close(d, "abs", abs(x), golden("unary_abs_" + d), tol));
    EXPECT_TRUE(all_close(d, "sqrt", sqrt(abs(x)), golden("unary_sqrt_" + d), tol));
  }
}

TEST(Golden, Matmul) {
  for (const char* dn : {"f32", "f64"})
    for (const char* c : {"mm", "dot", "vec_batched", "batched_vec", "broadcast"}) {
      const std::string name = std::string("matmul_") + c + "_" + dn;
      Tensor got = matmul(golden(name + "_a"), golden(name + "_b"));
      Tensor want = golden(name + "_out");
      EXPECT_TRUE(all_close(name, "out", got, want, tol_for(want.dtype())));
    }
}

TEST(Golden, Reductions) {
  for (const char* dn : {"f32", "f64"}) {
    const std::string d = dn;
    Tensor x = golden("reduce_x_" + d);
    const Tol tol = tol_for(x.dtype());
    EXPECT_TRUE(all_close(d, "sum02", sum(x, {0, 2}), golden("reduce_sum_d02_" + d), tol));
    EXPECT_TRUE(all_close(d, "mean1", mean(x, {1}, true), golden("reduce_mean_d1_keep_" + d), tol));
    EXPECT_TRUE(all_close(d, "sum", sum(x), golden("reduce_sum_all_" + d), tol));
    ValuesIndices mx = max_with_indices(x, 2);
    EXPECT_TRUE(all_close(d, "max2", mx.values, golden("reduce_max_d2_values_" + d), tol));
    EXPECT_EQ(max_abs_diff(mx.indices, golden("reduce_max_d2_indices_" + d)), 0.0) << d;
    ValuesIndices mn = min_with_indices(x, 0);
    EXPECT_TRUE(all_close(d, "min0", mn.values, golden("reduce_min_d0_values_" + d), tol));
    EXPECT_EQ(max_abs_diff(mn.indices, golden("reduce_min_d0_indices_" + d)), 0.0) << d;
    EXPECT_TRUE(all_close(d, "max", max(x), golden("reduce_max_all_" + d), tol));
  }
}

}  // namespace
}  // namespace grux::test_tensor_ops
