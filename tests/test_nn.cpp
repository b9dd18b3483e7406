// Linear, Embedding and softmax cross-entropy: PyTorch golden files (golden/nn, written by
// gen_nn_golden.py) with optimized and reference kernels, f64 finite differences, optimized
// vs reference kernels on edge sizes and strided operands, thread-count invariance, errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "grux/io.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_nn {
namespace {

const std::string kDir = std::string(GRUX_GOLDEN_DIR) + "/nn";

std::vector<std::string> golden_files(const std::vector<std::string>& prefixes) {
  return test::golden_files(kDir, prefixes);
}

// Runs with the reference-kernel switch set as asked, restoring it afterwards.
struct KernelMode {
  explicit KernelMode(bool reference) { set_reference_kernels(reference); }
  ~KernelMode() { set_reference_kernels(false); }
};

// Runs with a given OpenMP thread count, restoring it afterwards.
struct Threads {
  int before;
  explicit Threads(int n) : before(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.raw_data(), bc.raw_data(), ac.numel() * dtype_size(a.dtype())) == 0;
}

// ---- Golden files ------------------------------------------------------------------------

class NnGolden : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(NnGolden, MatchesPyTorch) {
  const auto& [file, reference] = GetParam();
  KernelMode mode(reference);
  const SafeTensors st = read_safetensors(kDir + "/" + file);
  const auto cfg = nlohmann::json::parse(st.metadata.at("config"));
  auto get = [&](const std::string& k) {
    return st.tensors.count(k) ? st.tensors.at(k) : Tensor();
  };
  const std::string where = file + (reference ? " (reference kernels)" : " (optimized kernels)");
  const bool f32 = cfg["dtype"] == "f32";
  const test::Tol tol = test::tol_for(f32 ? DType::f32 : DType::f64);
  const std::string kind = cfg["kind"];
  if (kind == "linear") {
    const bool bias = cfg["bias"];
    EXPECT_TRUE(
        test::all_close(where, "y", linear_forward(get("x"), get("w"), get("b")), get("y"), tol));
    LinearGrads g = linear_backward(get("x"), get("w"), get("dy"), bias);
    EXPECT_TRUE(test::all_close(where, "grad.x", g.dinput, get("grad.x"), tol));
    EXPECT_TRUE(test::all_close(where, "grad.w", g.dweight, get("grad.w"), tol));
    if (bias) {
      EXPECT_TRUE(test::all_close(where, "grad.b", g.dbias, get("grad.b"), tol));
    } else {
      EXPECT_FALSE(g.dbias.defined()) << where;
    }
    EXPECT_FALSE(linear_backward(get("x"), get("w"), get("dy"), bias, false).dinput.defined());
  } else if (kind == "embedding") {
    EXPECT_TRUE(test::all_close(where, "y", embedding_forward(get("ids"), get("table")), get("y"),
                                test::Tol{0, 0}));
    EXPECT_TRUE(test::all_close(where, "grad.table",
                                embedding_backward(get("ids"), get("dy"), cfg["V"]),
                                get("grad.table"), tol));
  } else if (kind == "cross_entropy") {
    const CrossEntropy ce = cross_entropy(get("logits"), get("targets"));
    const double expected = get("loss").item();
    // f32: PyTorch sums in float, grux in double; the difference is a few float ulps of the
    // row losses.
    EXPECT_NEAR(ce.loss, expected, f32 ? 1e-5 * std::max(1.0, std::abs(expected)) : 1e-12) << where;
    EXPECT_TRUE(test::all_close(where, "grad.logits", ce.dlogits, get("grad.logits"), tol));
    const CrossEntropy no_grad = cross_entropy(get("logits"), get("targets"), false);
    EXPECT_EQ(no_grad.loss, ce.loss) << where;
    EXPECT_FALSE(no_grad.dlogits.defined()) << where;
  } else {
    FAIL() << where << ": unknown kind " << kind;
  }
}

std::string golden_name(const ::testing::TestParamInfo<NnGolden::ParamType>& info) {
  std::string n = std::get<0>(info.param);
  return n.substr(0, n.size() - std::string(".safetensors").size()) +
         (std::get<1>(info.param) ? "_ref" : "_opt");
}

INSTANTIATE_TEST_SUITE_P(
    nnPyTorch, NnGolden,
    ::testing::Combine(::testing::ValuesIn(golden_files({"linear_", "embedding_", "ce_"})),
                       ::testing::Bool()),
    golden_name);

TEST(nnGoldenFiles, AllCasesPresent) {
  // Guards against a missing folder making the parametrized suite vanish silently.
  EXPECT_EQ(golden_files({"linear_"}).size(), 8u);
  EXPECT_EQ(golden_files({"embedding_"}).size(), 4u);
  EXPECT_EQ(golden_files({"ce_"}).size(), 8u);
}

// ---- Finite differences (f64) ------------------------------------------------------------

// Central differences of a scalar function f over every element of `x` (modified in place
// and restored), compared with `grad`. With h = 1e-6 on smooth O(1) functions the error is
// ~h^2 + 1e-16 / h, well below 1e-7.
template <class F>
void expect_fd(const std::string& where, Tensor x, const Tensor& grad, F f) {
  ASSERT_EQ(x.dtype(), DType::f64);
  const double h = 1e-6;
  Tensor num = Tensor::empty(x.shape(), DType::f64);
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = p[i];
    p[i] = v + h;
    const double fp = f();
    p[i] = v - h;
    const double fm = f();
    p[i] = v;
    num.data<double>()[i] = (fp - fm) / (2 * h);
  }
  EXPECT_TRUE(test::all_close(where, "finite differences", grad, num, test::Tol{1e-7, 1e-6}));
}

// sum(y * r): a scalar whose gradient with respect to y is r.
double dot(const Tensor& y, const Tensor& r) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += y.at_flat(i) * r.at_flat(i);
  return s;
}

class NnGradCheck : public ::testing::TestWithParam<bool> {};

TEST_P(NnGradCheck, Linear) {
  KernelMode mode(GetParam());
  std::mt19937_64 rng(11);
  const int64_t M = 4, I = 5, O = 3;
  Tensor x = test::random_tensor({M, I}, DType::f64, rng);
  Tensor w = test::random_tensor({O, I}, DType::f64, rng);
  Tensor b = test::random_tensor({O}, DType::f64, rng);
  const Tensor r = test::random_tensor({M, O}, DType::f64, rng);
  const LinearGrads g = linear_backward(x, w, r, true);
  auto f = [&] { return dot(linear_forward(x, w, b), r); };
  expect_fd("linear dx", x, g.dinput, f);
  expect_fd("linear dw", w, g.dweight, f);
  expect_fd("linear db", b, g.dbias, f);
}

TEST_P(NnGradCheck, Embedding) {
  KernelMode mode(GetParam());
  std::mt19937_64 rng(12);
  const Tensor ids = Tensor::from_vector<int64_t>({2, 4}, {3, 0, 3, 2, 3, 5, 0, 1});
  Tensor table = test::random_tensor({6, 3}, DType::f64, rng);
  const Tensor r = test::random_tensor({2, 4, 3}, DType::f64, rng);
  expect_fd("embedding dtable", table, embedding_backward(ids, r, 6),
            [&] { return dot(embedding_forward(ids, table), r); });
}

TEST_P(NnGradCheck, CrossEntropy) {
  KernelMode mode(GetParam());
  std::mt19937_64 rng(13);
  Tensor logits = test::random_tensor({5, 9}, DType::f64, rng, 2.0);
  const Tensor targets = Tensor::from_vector<int64_t>({5}, {0, 8, 3, 3, 4});
  const Tensor d = cross_entropy(logits, targets).dlogits;
  expect_fd("cross_entropy dlogits", logits, d,
            [&] { return cross_entropy(logits, targets, false).loss; });
}

INSTANTIATE_TEST_SUITE_P(nnKernels, NnGradCheck, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "ref" : "opt"; });

// ---- Optimized vs reference on edge sizes ------------------------------------------------

// Tolerance for a sum of K products of O(1) values: a few ulps of dtype times K (the GEMM
// and the reference add in different orders; the reference adds in double).
test::Tol sum_tol(DType t, int64_t K) {
  const double eps = t == DType::f32 ? 6e-8 : 1.1e-16;
  const double a = 8 * eps * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))) *
                   std::max(1.0, std::sqrt(static_cast<double>(K)));
  return {a, a};
}

template <class F>
auto with_kernels(bool reference, F f) {
  KernelMode mode(reference);
  return f();
}

class NnEdge : public ::testing::TestWithParam<DType> {};

TEST_P(NnEdge, LinearOptimizedMatchesReference) {
  const DType dt = GetParam();
  std::mt19937_64 rng(21);
  for (int64_t M : {1, 2, 17, 300}) {
    for (int64_t I : {1, 7, 33}) {
      for (int64_t O : {1, 16, 65}) {
        const std::string where = "linear M" + std::to_string(M) + " I" + std::to_string(I) + " O" +
                                  std::to_string(O) + " " + dtype_name(dt);
        const Tensor x = test::random_tensor({M, I}, dt, rng);
        const Tensor w = test::random_tensor({O, I}, dt, rng);
        const Tensor b = test::random_tensor({O}, dt, rng);
        const Tensor dy = test::random_tensor({M, O}, dt, rng);
        auto fwd = [&] { return linear_forward(x, w, b); };
        auto bwd = [&] { return linear_backward(x, w, dy, true); };
        EXPECT_TRUE(test::all_close(where, "y", with_kernels(false, fwd), with_kernels(true, fwd),
                                    sum_tol(dt, I)));
        const LinearGrads o = with_kernels(false, bwd), r = with_kernels(true, bwd);
        EXPECT_TRUE(test::all_close(where, "dx", o.dinput, r.dinput, sum_tol(dt, O)));
        EXPECT_TRUE(test::all_close(where, "dw", o.dweight, r.dweight, sum_tol(dt, M)));
        EXPECT_TRUE(test::all_close(where, "db", o.dbias, r.dbias, sum_tol(dt, M)));
      }
    }
  }
}

TEST_P(NnEdge, LinearStridedOperands) {
  // Transposed, sliced and single-row views give the same numbers as contiguous copies.
  const DType dt = GetParam();
  std::mt19937_64 rng(22);
  const int64_t M = 9, I = 6, O = 5;
  const Tensor xt = test::random_tensor({I, M}, dt, rng);  // x = xt^T: column-major
  const Tensor wt = test::random_tensor({I, O}, dt, rng);  // w = wt^T: column-major
  const Tensor wide = test::random_tensor({M, 2 * I + 1}, dt, rng);
  const Tensor bb = test::random_tensor({2 * O}, dt, rng);
  const Tensor dy = test::random_tensor({M, O}, dt, rng);
  struct Operands {
    Tensor x, w, b;
  };
  const Operands views[] = {
      {xt.transpose(0, 1), wt.transpose(0, 1), bb.slice(0, 0, O)},
      {wide.slice(1, 1, 1 + I), wt.transpose(0, 1), bb.slice(0, 0, 2 * O, 2)},
      {wide.slice(1, 0, 2 * I, 2), wt.transpose(0, 1), bb.slice(0, O, 2 * O)},     // step-2 columns
      {xt.transpose(0, 1).slice(0, 3, 4), wt.transpose(0, 1), bb.slice(0, 0, O)},  // one row
  };
  for (bool reference : {false, true}) {
    KernelMode mode(reference);
    for (size_t k = 0; k < std::size(views); ++k) {
      const Operands& v = views[k];
      const std::string where = std::string("strided case ") + std::to_string(k) +
                                (reference ? " ref " : " opt ") + dtype_name(dt);
      const Tensor x = v.x.clone(), w = v.w.clone(), b = v.b.clone();
      const Tensor dyk = dy.slice(0, 0, x.size(0));
      const test::Tol tol = sum_tol(dt, 2 * M);
      EXPECT_TRUE(
          test::all_close(where, "y", linear_forward(v.x, v.w, v.b), linear_forward(x, w, b), tol));
      const LinearGrads a = linear_backward(v.x, v.w, dyk, true);
      const LinearGrads c = linear_backward(x, w, dyk.clone(), true);
      EXPECT_TRUE(test::all_close(where, "dx", a.dinput, c.dinput, tol));
      EXPECT_TRUE(test::all_close(where, "dw", a.dweight, c.dweight, tol));
      EXPECT_TRUE(test::all_close(where, "db", a.dbias, c.dbias, tol));
      // dy given column-major.
      const LinearGrads t =
          linear_backward(v.x, v.w, dyk.clone().transpose(0, 1).clone().transpose(0, 1), true);
      EXPECT_TRUE(test::all_close(where, "dw (column-major dy)", t.dweight, c.dweight, tol));
    }
  }
}

TEST_P(NnEdge, LinearEmptyRows) {
  const DType dt = GetParam();
  std::mt19937_64 rng(23);
  const Tensor x = Tensor::empty({0, 4}, dt), w = test::random_tensor({3, 4}, dt, rng);
  const Tensor b = test::random_tensor({3}, dt, rng);
  EXPECT_EQ(linear_forward(x, w, b).shape(), (Shape{0, 3}));
  const LinearGrads g = linear_backward(x, w, Tensor::empty({0, 3}, dt), true);
  EXPECT_EQ(g.dinput.shape(), (Shape{0, 4}));
  EXPECT_EQ(max_abs_diff(g.dweight, Tensor::zeros({3, 4}, dt)), 0.0);
  EXPECT_EQ(max_abs_diff(g.dbias, Tensor::zeros({3}, dt)), 0.0);
}

TEST_P(NnEdge, CrossEntropyOptimizedMatchesReference) {
  const DType dt = GetParam();
  std::mt19937_64 rng(24);
  for (int64_t V : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 65, 100}) {
    for (int64_t M : {1, 3, 40}) {
      for (double scale : {1.0, 30.0}) {
        const std::string where = "cross_entropy M" + std::to_string(M) + " V" + std::to_string(V) +
                                  " scale " + std::to_string(scale) + " " + dtype_name(dt);
        const Tensor logits = test::random_tensor({M, V}, dt, rng, scale);
        std::vector<int64_t> t(M);
        for (auto& v : t) v = static_cast<int64_t>(rng() % V);
        const Tensor targets = Tensor::from_vector<int64_t>({M}, t);
        const auto run = [&] { return cross_entropy(logits, targets); };
        const CrossEntropy o = with_kernels(false, run), r = with_kernels(true, run);
        // exp differs by ~1 ulp between the SIMD and libm versions; the sums are in double.
        const double eps = dt == DType::f32 ? 6e-8 : 1.1e-16;
        EXPECT_NEAR(o.loss, r.loss, 16 * eps * std::max(1.0, std::abs(r.loss))) << where;
        EXPECT_TRUE(test::all_close(where, "dlogits", o.dlogits, r.dlogits,
                                    test::Tol{8 * eps / M, 8 * eps}));
      }
    }
  }
}

TEST_P(NnEdge, CrossEntropyStridedLogits) {
  // Row-strided, column-strided and column-major views give the bits of a contiguous copy.
  const DType dt = GetParam();
  std::mt19937_64 rng(25);
  const Tensor wide = test::random_tensor({6, 40}, dt, rng, 5.0);
  const Tensor targets = Tensor::from_vector<int64_t>({6}, {0, 18, 3, 7, 18, 11});
  const Tensor views[] = {
      wide.slice(1, 1, 20),
      wide.slice(1, 0, 38, 2),
      wide.slice(1, 0, 19).clone().transpose(0, 1).clone().transpose(0, 1),
  };
  for (const Tensor& logits : views) {
    ASSERT_EQ(logits.size(1), 19);
    const CrossEntropy a = cross_entropy(logits, targets);
    const CrossEntropy b = cross_entropy(logits.clone(), targets);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_TRUE(same_bits(a.dlogits, b.dlogits));
  }
}

TEST_P(NnEdge, CrossEntropyStableAtHugeLogits) {
  // exp(+-1000) overflows without the max subtraction; the answer is finite and exact here.
  const DType dt = GetParam();
  for (bool reference : {false, true}) {
    KernelMode mode(reference);
    const Tensor logits = Tensor::from_vector<double>({2, 3}, {1000, -1000, 1000, 0, 0, 0}).to(dt);
    const Tensor targets = Tensor::from_vector<int64_t>({2}, {1, 2});
    const CrossEntropy ce = cross_entropy(logits, targets);
    // Row 0: log(2) + 2000; row 1: log(3).
    EXPECT_NEAR(ce.loss, (std::log(2.0) + 2000 + std::log(3.0)) / 2, 1e-9);
    EXPECT_NEAR(ce.dlogits.item({0, 0}), 0.25, 1e-7);
    EXPECT_NEAR(ce.dlogits.item({0, 1}), -0.5, 1e-7);
    EXPECT_NEAR(ce.dlogits.item({1, 2}), (1.0 / 3 - 1) / 2, 1e-7);
  }
}

TEST_P(NnEdge, EmbeddingOptimizedMatchesReference) {
  const DType dt = GetParam();
  std::mt19937_64 rng(26);
  for (int64_t E : {1, 7, 16, 17, 70}) {
    for (int64_t N : {1, 5, 2000}) {
      const int64_t V = 13;
      std::vector<int64_t> ids(N);
      for (auto& v : ids) v = static_cast<int64_t>(rng() % V);
      const Tensor idt = Tensor::from_vector<int64_t>({N}, ids);
      const Tensor table = test::random_tensor({V, E}, dt, rng);
      const Tensor dy = test::random_tensor({N, E}, dt, rng);
      const std::string where = "embedding N" + std::to_string(N) + " E" + std::to_string(E);
      auto fwd = [&] { return embedding_forward(idt, table); };
      auto bwd = [&] { return embedding_backward(idt, dy, V); };
      EXPECT_TRUE(same_bits(with_kernels(false, fwd), with_kernels(true, fwd))) << where;
      // The optimized kernel adds in T in position order, the reference in double.
      EXPECT_TRUE(test::all_close(where, "dtable", with_kernels(false, bwd),
                                  with_kernels(true, bwd), sum_tol(dt, N)));
    }
  }
  // A table view with a row stride, and strided ids.
  const Tensor big = test::random_tensor({10, 9}, dt, rng);
  const Tensor ids = Tensor::from_vector<int64_t>({2, 3}, {0, 9, 1, 9, 4, 2}).transpose(0, 1);
  const Tensor view = big.slice(1, 2, 7);
  EXPECT_TRUE(
      same_bits(embedding_forward(ids, view), embedding_forward(ids.clone(), view.clone())));
  // Scalar ids give a single row.
  EXPECT_EQ(embedding_forward(Tensor::full({}, 3, DType::i64), view).shape(), (Shape{5}));
}

TEST_P(NnEdge, ThreadCountDoesNotChangeBits) {
  // Large enough for the parallel paths of cross-entropy, embedding and the bias column sum.
  const DType dt = GetParam();
  std::mt19937_64 rng(27);
  const int64_t M = 3001, V = 65, E = 70;
  const Tensor logits = test::random_tensor({M, V}, dt, rng, 4.0);
  std::vector<int64_t> t(M);
  for (auto& v : t) v = static_cast<int64_t>(rng() % V);
  const Tensor targets = Tensor::from_vector<int64_t>({M}, t);
  const Tensor dy = test::random_tensor({M, E}, dt, rng);
  const Tensor x = test::random_tensor({M, 3}, dt, rng);
  const Tensor w = test::random_tensor({E, 3}, dt, rng);
  CrossEntropy ce[2];
  Tensor dtable[2], emb[2], db[2];
  for (int k = 0; k < 2; ++k) {
    Threads threads(k + 1);
    ce[k] = cross_entropy(logits, targets);
    dtable[k] = embedding_backward(targets, dy, V);
    emb[k] = embedding_forward(targets, dy.slice(0, 0, V));
    db[k] = linear_backward(x, w, dy, true, false).dbias;
  }
  EXPECT_EQ(ce[0].loss, ce[1].loss);
  EXPECT_TRUE(same_bits(ce[0].dlogits, ce[1].dlogits));
  EXPECT_TRUE(same_bits(dtable[0], dtable[1]));
  EXPECT_TRUE(same_bits(emb[0], emb[1]));
  EXPECT_TRUE(same_bits(db[0], db[1]));
}

INSTANTIATE_TEST_SUITE_P(nnDTypes, NnEdge, ::testing::Values(DType::f32, DType::f64),
                         [](const auto& info) { return dtype_name(info.param); });

// ---- Errors ------------------------------------------------------------------------------

// Expects grux::Error whose message contains `part`.
#define EXPECT_ERROR(stmt, part)                                                              \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << #stmt << " did not throw";                                             \
    } catch (const Error& e) {                                                                \
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)                          \
          << #stmt << " threw '" << e.what() << "', expected it to contain '" << part << "'"; \
    }                                                                                         \
  } while (0)

TEST(nnErrors, Linear) {
  const Tensor x = Tensor::zeros({4, 3}, DType::f32), w = Tensor::zeros({2, 3}, DType::f32);
  const Tensor b = Tensor::zeros({2}, DType::f32), dy = Tensor::zeros({4, 2}, DType::f32);
  EXPECT_ERROR(linear_forward(Tensor(), w, b), "linear_forward: input is undefined");
  EXPECT_ERROR(linear_forward(x, Tensor(), b), "linear_forward: weight is undefined");
  EXPECT_ERROR(linear_forward(Tensor::zeros({4, 3, 1}, DType::f32), w, b),
               "input has shape (4, 3, 1), expected (M, I)");
  EXPECT_ERROR(linear_forward(x, Tensor::zeros({6}, DType::f32), b),
               "weight has shape (6,), expected (O, I)");
  EXPECT_ERROR(linear_forward(x, Tensor::zeros({2, 4}, DType::f32), b),
               "weight has shape (2, 4), expected (O, 3)");
  EXPECT_ERROR(linear_forward(x, w.to(DType::f64), b),
               "weight has dtype f64 but input has dtype f32");
  EXPECT_ERROR(linear_forward(x, w, b.to(DType::f64)),
               "bias has dtype f64 but input has dtype f32");
  EXPECT_ERROR(linear_forward(x.to(DType::i64), w, b), "input has dtype i64, expected f32 or f64");
  EXPECT_ERROR(linear_forward(x, w, Tensor::zeros({3}, DType::f32)),
               "bias has shape (3,), expected (2,)");
  EXPECT_ERROR(linear_backward(x, w, Tensor::zeros({4, 3}, DType::f32), true),
               "linear_backward: doutput has shape (4, 3), expected (4, 2)");
  EXPECT_ERROR(linear_backward(x, w, dy.to(DType::f64), true),
               "doutput has dtype f64 but input has dtype f32");
  EXPECT_ERROR(linear_backward(x, w, Tensor(), true), "doutput is undefined");
}

TEST(nnErrors, Embedding) {
  const Tensor table = Tensor::zeros({5, 3}, DType::f64);
  const Tensor ids = Tensor::from_vector<int64_t>({2, 2}, {0, 4, 1, 5});
  EXPECT_ERROR(embedding_forward(ids, table),
               "embedding_forward: ids[1, 1] = 5 is out of range (expected 0 <= id < 5)");
  EXPECT_ERROR(embedding_forward(Tensor::from_vector<int64_t>({2}, {-1, 0}), table),
               "ids[0] = -1 is out of range");
  EXPECT_ERROR(embedding_forward(ids.to(DType::f64), table), "ids has dtype f64, expected i64");
  EXPECT_ERROR(embedding_forward(Tensor(), table), "ids is undefined");
  EXPECT_ERROR(embedding_forward(ids, Tensor::zeros({5}, DType::f64)),
               "table has shape (5,), expected (V, E)");
  EXPECT_ERROR(embedding_forward(ids, table.to(DType::i64)), "table has dtype i64");
  const Tensor ok = Tensor::from_vector<int64_t>({2, 2}, {0, 4, 1, 2});
  const Tensor dy = Tensor::zeros({2, 2, 3}, DType::f64);
  EXPECT_ERROR(embedding_backward(ids, dy, 5), "embedding_backward: ids[1, 1] = 5 is out of range");
  EXPECT_ERROR(embedding_backward(ok, Tensor::zeros({2, 3}, DType::f64), 5),
               "doutput has shape (2, 3), expected ids.shape + (E) = (2, 2, E)");
  EXPECT_ERROR(embedding_backward(ok, Tensor::zeros({2, 1, 3}, DType::f64), 5),
               "doutput has shape (2, 1, 3)");
  EXPECT_ERROR(embedding_backward(Tensor::from_vector<int64_t>({2}, {0, 1}),
                                  Tensor::zeros({3, 4}, DType::f64), 5),
               "doutput has shape (3, 4), expected ids.shape + (E) = (2, E)");
  EXPECT_ERROR(embedding_backward(ok, dy, 0), "num_embeddings is 0, expected >= 1");
  EXPECT_ERROR(embedding_backward(ok, dy.to(DType::i64), 5), "doutput has dtype i64");
  EXPECT_ERROR(embedding_backward(ok.to(DType::f32), dy, 5), "ids has dtype f32, expected i64");
}

TEST(nnErrors, CrossEntropy) {
  const Tensor logits = Tensor::zeros({3, 4}, DType::f32);
  const Tensor targets = Tensor::from_vector<int64_t>({3}, {0, 3, 1});
  EXPECT_ERROR(cross_entropy(logits, Tensor::from_vector<int64_t>({3}, {0, 4, 1})),
               "cross_entropy: targets[1] = 4 is out of range (expected 0 <= target < 4)");
  EXPECT_ERROR(cross_entropy(logits, Tensor::from_vector<int64_t>({3}, {0, -100, 1})),
               "targets[1] = -100 is out of range");
  EXPECT_ERROR(cross_entropy(logits, Tensor::from_vector<int64_t>({2}, {0, 1})),
               "targets has shape (2,), expected (3,)");
  EXPECT_ERROR(cross_entropy(logits, targets.to(DType::f32)),
               "targets has dtype f32, expected i64");
  EXPECT_ERROR(cross_entropy(logits, Tensor()), "targets is undefined");
  EXPECT_ERROR(cross_entropy(Tensor::zeros({12}, DType::f32), targets),
               "logits has shape (12,), expected (M, V)");
  EXPECT_ERROR(cross_entropy(Tensor::zeros({0, 4}, DType::f32), Tensor::zeros({0}, DType::i64)),
               "expected at least one row and one class");
  EXPECT_ERROR(cross_entropy(logits.to(DType::i64), targets), "logits has dtype i64");
}

}  // namespace
}  // namespace grux::test_nn
