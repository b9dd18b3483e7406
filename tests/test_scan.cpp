// Scans: optimized kernels against the sequential reference kernels over every op, walk
// (inclusive/exclusive, forward/reverse), length, layout, thread count and both ways of using
// the threads; matmul scans against the chain of products; the affine forms against each
// other and the seed's augmented-matrix formulation; gradients against f64 finite
// differences; callables against built-ins; every error path.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cpu/ref/scan_ref.h"
#include "cpu/scan.h"
#include "grux/error.h"
#include "grux/runtime.h"
#include "grux/scan.h"
#include "grux/tensor_ops.h"
#include "test_util.h"

namespace grux::test_scan {
namespace {

using test::all_close;
using test::random_tensor;
using test::Tol;

const int64_t kLengths[] = {1, 2, 3, 7, 1000, 4097};

// Tolerance for a scan of length T over unit-scale data: a partial result of t combines
// carries rounding error up to about t * eps times the partial results' magnitude, and the
// kernels group the combines differently from the sequential reference.
Tol scan_tol(DType dt, int64_t T) {
  const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
  const double k = 4 * eps * (double(T) + 1);
  return {k, k};
}

Tensor positive(const Tensor& t) {
  return add(abs(t), 0.5);
}

// Inputs for an op: prod needs factors near 1, logaddexp any values.
Tensor op_input(cpu::ScanKind kind, const Shape& shape, DType dt, std::mt19937_64& rng) {
  Tensor x = random_tensor(shape, dt, rng);
  if (kind == cpu::ScanKind::prod) return add(mul(x, 0.01), 1.0);
  return x;
}

const char* kind_name(cpu::ScanKind k) {
  switch (k) {
    case cpu::ScanKind::sum:
      return "sum";
    case cpu::ScanKind::prod:
      return "prod";
    case cpu::ScanKind::max:
      return "max";
    case cpu::ScanKind::min:
      return "min";
    case cpu::ScanKind::logaddexp:
      return "logaddexp";
  }
  return "?";
}

// ---- element-wise kernels -----------------------------------------------------------------

template <typename T>
void check_elementwise(cpu::ScanKind kind, int64_t O, int64_t Tn, int64_t C, bool excl, bool rev,
                       int threads, cpu::TimeSplit split, std::mt19937_64& rng) {
  const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const Tensor x = op_input(kind, {O, Tn, C}, dt, rng);
  Tensor y = Tensor::empty(x.shape(), dt), r = Tensor::empty(x.shape(), dt);
  cpu::scan_elementwise(kind, x.data<T>(), y.data<T>(), O, Tn, C,
                        cpu::ScanWalk{excl, rev, threads, split});
  cpu::ref::scan_elementwise(kind, x.data<T>(), r.data<T>(), O, Tn, C, excl, rev);
  const bool exact = kind == cpu::ScanKind::max || kind == cpu::ScanKind::min;
  const std::string where = fmt::format("{} O={} T={} C={} excl={} rev={} threads={} split={}",
                                        kind_name(kind), O, Tn, C, excl, rev, threads, int(split));
  EXPECT_TRUE(all_close(where, "y", y, r, exact ? Tol{0, 0} : scan_tol(dt, Tn)));
}

TEST(ScanKernels, ElementwiseMatchesReferenceEverywhere) {
  std::mt19937_64 rng(1);
  for (auto kind : {cpu::ScanKind::sum, cpu::ScanKind::prod, cpu::ScanKind::max, cpu::ScanKind::min,
                    cpu::ScanKind::logaddexp})
    for (int64_t Tn : kLengths)
      for (bool excl : {false, true})
        for (bool rev : {false, true})
          for (auto [O, C] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {2, 37}}) {
            if (Tn == 4097 && C == 37) continue;  // the long ones once per layout is enough
            // Both paths (time split forced, and the default choice), and odd team sizes.
            for (int threads : {1, 2, 3})
              check_elementwise<float>(kind, O, Tn, C, excl, rev, threads, cpu::TimeSplit::always,
                                       rng);
            check_elementwise<float>(kind, O, Tn, C, excl, rev, 2, cpu::TimeSplit::automatic, rng);
            check_elementwise<double>(kind, O, Tn, C, excl, rev, 2, cpu::TimeSplit::automatic, rng);
          }
}

TEST(ScanKernels, TimeSplitWithManySuperBlocks) {
  // Long enough for several super-blocks on every path (C = 1 uses 8 interleaved segments).
  std::mt19937_64 rng(2);
  for (int64_t C : {1, 3, 16, 700})
    for (int threads : {1, 2, 4})
      for (bool excl : {false, true})
        check_elementwise<double>(cpu::ScanKind::sum, 1, 300000 / C + 7, C, excl, C == 3, threads,
                                  cpu::TimeSplit::always, rng);
}

TEST(ScanKernels, ContiguousSumAtBlockEdgesAndMisalignedOutput) {
  // The SIMD one-channel sum: lengths around the vector and block sizes, tiny super-blocks
  // (many barriers), odd team sizes, and an output not aligned for streaming stores.
  std::mt19937_64 rng(14);
  for (int64_t n : {1, 3, 4, 5, 63, 64, 65, 4096, 4097, 100003})
    for (int threads : {1, 2, 3})
      for (int64_t share : {int64_t(64), int64_t(1024), int64_t(256 << 10)})
        for (int64_t shift : {0, 1}) {
          const Tensor x = random_tensor({n}, DType::f32, rng);
          Tensor y = Tensor::zeros({n + 1}, DType::f32), r = Tensor::empty({n}, DType::f32);
          cpu::sum_scan_contiguous(x.data<float>(), y.data<float>() + shift, n, threads, share);
          cpu::ref::scan_elementwise(cpu::ScanKind::sum, x.data<float>(), r.data<float>(), 1, n, 1,
                                     false, false);
          EXPECT_TRUE(
              all_close(fmt::format("n={} threads={} share={} shift={}", n, threads, share, shift),
                        "y", y.slice(0, shift, shift + n), r, scan_tol(DType::f32, n)));
          Tensor yd = Tensor::empty({n}, DType::f64), rd = Tensor::empty({n}, DType::f64);
          const Tensor xd = x.to(DType::f64);
          cpu::sum_scan_contiguous(xd.data<double>(), yd.data<double>(), n, threads, share);
          cpu::ref::scan_elementwise(cpu::ScanKind::sum, xd.data<double>(), rd.data<double>(), 1, n,
                                     1, false, false);
          EXPECT_TRUE(all_close("f64", "y", yd, rd, scan_tol(DType::f64, n)));
        }
}

TEST(ScanKernels, IdentitiesAreExact) {
  // -0.0 stays -0.0 under sum; NaN propagates through max and min; -inf and +inf in logaddexp.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor x = Tensor::from_vector<double>({5}, {-0.0, -0.0, 1.0, -inf, 2.0});
  Tensor y = prefix_scan(x, 0, ScanOp::sum);
  EXPECT_TRUE(std::signbit(y.item({0})) && std::signbit(y.item({1})));
  Tensor m = Tensor::from_vector<double>({4}, {1.0, nan, 3.0, 0.0});
  for (ScanOp op : {ScanOp::max, ScanOp::min}) {
    Tensor r = prefix_scan(m, 0, op);
    EXPECT_EQ(r.item({0}), 1.0);
    for (int64_t i = 1; i < 4; ++i) EXPECT_TRUE(std::isnan(r.item({i}))) << scan_op_name(op) << i;
  }
  Tensor l = Tensor::from_vector<double>({4}, {-inf, -inf, 0.0, inf});
  Tensor r = prefix_scan(l, 0, ScanOp::logaddexp);
  EXPECT_EQ(r.item({0}), -inf);
  EXPECT_EQ(r.item({1}), -inf);
  EXPECT_EQ(r.item({2}), 0.0);
  EXPECT_EQ(r.item({3}), inf);
}

// ---- the public API over dims and layouts ----------------------------------------------------

// torch.cumsum and friends by hand along dim, via slices: an oracle independent of the layout
// code in the operator.
Tensor slice_oracle(const Tensor& x, int64_t dim, ScanOp op, bool excl, bool rev) {
  auto comb = [&](const Tensor& a, const Tensor& b) {
    switch (op) {
      case ScanOp::sum:
        return add(a, b);
      case ScanOp::prod:
        return mul(a, b);
      case ScanOp::max:
        return maximum(a, b);
      case ScanOp::min:
        return minimum(a, b);
      case ScanOp::logaddexp: {
        const Tensor m = maximum(a, b);
        return add(m, log(add(exp(sub(a, m)), exp(sub(b, m)))));
      }
      case ScanOp::matmul:
        return matmul(a, b);
    }
    return a;
  };
  const double ident[] = {0.0, 1.0, -INFINITY, INFINITY, -INFINITY};
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const int64_t Tn = x.size(dim);
  Tensor acc;
  for (int64_t i = 0; i < Tn; ++i) {
    const int64_t t = rev ? Tn - 1 - i : i;
    Tensor out = y.select(dim, t);
    if (excl)
      out.copy_from(acc.defined() ? acc : Tensor::full(out.shape(), ident[int(op)], x.dtype()));
    // Reversed walks keep the sequence order: the new (earlier) element goes on the left.
    const Tensor xt = x.select(dim, t);
    acc = !acc.defined() ? xt.clone() : rev ? comb(xt, acc) : comb(acc, xt);
    if (!excl) out.copy_from(acc);
  }
  return y;
}

TEST(Scan, EveryDimAndLayout) {
  std::mt19937_64 rng(3);
  for (ScanOp op : {ScanOp::sum, ScanOp::prod, ScanOp::max, ScanOp::min, ScanOp::logaddexp})
    for (int64_t dim : {0, 1, 2, -1})
      for (bool excl : {false, true})
        for (bool rev : {false, true}) {
          Tensor x = random_tensor({4, 7, 5}, DType::f64, rng);
          if (op == ScanOp::prod) x = add(mul(x, 0.1), 1.0);
          // Also a non-contiguous view: the scan must not care.
          const Tensor xt = x.transpose(0, 2);
          for (const Tensor& in : {x, xt}) {
            ScanOptions o;
            o.exclusive = excl;
            o.reverse = rev;
            const Tensor y = prefix_scan(in, dim, op, o);
            const int64_t d = dim < 0 ? dim + 3 : dim;
            EXPECT_TRUE(
                all_close(fmt::format("{} dim={} excl={} rev={}", scan_op_name(op), dim, excl, rev),
                          "y", y, slice_oracle(in, d, op, excl, rev), Tol{1e-12, 1e-12}));
          }
        }
}

TEST(Scan, ReduceEqualsLastOfScan) {
  std::mt19937_64 rng(4);
  const Tensor x = random_tensor({3, 1000, 2}, DType::f64, rng);
  for (ScanOp op : {ScanOp::sum, ScanOp::max, ScanOp::min, ScanOp::logaddexp}) {
    const Tensor r = reduce_scan(x, 1, op);
    EXPECT_EQ(r.shape(), (Shape{3, 2}));
    EXPECT_TRUE(all_close(scan_op_name(op), "r", r,
                          slice_oracle(x, 1, op, false, false).select(1, 999).contiguous(),
                          Tol{1e-11, 1e-11}));
  }
}

// ---- matmul scans -------------------------------------------------------------------------

TEST(ScanMatmul, KernelMatchesChainOfProducts) {
  std::mt19937_64 rng(5);
  for (int64_t Tn : kLengths)
    for (int64_t d : {1, 3, 8})
      for (bool rev : {false, true})
        for (int threads : {1, 2, 3})
          for (auto split : {cpu::TimeSplit::never, cpu::TimeSplit::always}) {
            if (Tn == 4097 && d == 8) continue;
            const int64_t O = 2;
            const Tensor x =
                div(random_tensor({O, Tn, d, d}, DType::f64, rng), std::sqrt(double(d)));
            Tensor y = Tensor::empty(x.shape(), DType::f64),
                   r = Tensor::empty(x.shape(), DType::f64);
            cpu::matmul_scan(x.data<double>(), y.data<double>(), O, Tn, d,
                             cpu::ScanWalk{false, rev, threads, split});
            cpu::ref::matmul_scan(x.data<double>(), r.data<double>(), O, Tn, d, rev);
            EXPECT_TRUE(all_close(fmt::format("T={} d={} rev={} threads={} split={}", Tn, d, rev,
                                              threads, int(split)),
                                  "y", y, r, Tol{1e-10, 1e-9}));
          }
}

TEST(ScanMatmul, NonCommutativeOrderAndLayouts) {
  // y_t = x_0 x_1 ... x_t; reversed y_t = x_t ... x_{T-1}; dim in the middle of the batch.
  std::mt19937_64 rng(6);
  const Tensor x = random_tensor({3, 9, 4, 4}, DType::f64, rng);  // (B, T, d, d), dim 1
  for (bool rev : {false, true}) {
    ScanOptions o;
    o.reverse = rev;
    const Tensor y = prefix_scan(x, 1, ScanOp::matmul, o);
    EXPECT_TRUE(all_close("matmul rev=" + std::to_string(rev), "y", y,
                          slice_oracle(x, 1, ScanOp::matmul, false, rev), Tol{1e-12, 1e-12}));
  }
  // Time first with a batch dimension between time and the matrices.
  const Tensor z = random_tensor({9, 3, 4, 4}, DType::f32, rng);
  EXPECT_TRUE(all_close("matmul dim0", "y", prefix_scan(z, 0, ScanOp::matmul),
                        slice_oracle(z, 0, ScanOp::matmul, false, false), Tol{1e-5, 1e-4}));
  const Tensor total = reduce_scan(z, 0, ScanOp::matmul);
  EXPECT_TRUE(all_close("matmul reduce", "total", total,
                        slice_oracle(z, 0, ScanOp::matmul, false, false).select(0, 8).contiguous(),
                        Tol{1e-5, 1e-4}));
}

// ---- callables --------------------------------------------------------------------------

TEST(ScanCallable, MatchesBuiltinsForEveryThreadCount) {
  std::mt19937_64 rng(7);
  const ScanFn mm = [](const Tensor& a, const Tensor& b) { return matmul(a, b); };
  const ScanFn plus = [](const Tensor& a, const Tensor& b) { return add(a, b); };
  for (int64_t Tn : kLengths)
    for (int threads : {1, 2, 3})
      for (bool rev : {false, true}) {
        ScanOptions o;
        o.threads = threads;
        o.reverse = rev;
        const Tensor x = div(random_tensor({Tn, 3, 3}, DType::f64, rng), 1.7);
        EXPECT_TRUE(all_close(fmt::format("mm T={} threads={} rev={}", Tn, threads, rev), "y",
                              prefix_scan(x, 0, mm, o), prefix_scan(x, 0, ScanOp::matmul, o),
                              Tol{1e-10, 1e-9}));
        const Tensor v = random_tensor({2, Tn}, DType::f64, rng);
        for (bool excl : {false, true}) {
          o.exclusive = excl;
          o.identity = excl ? Tensor::zeros({2}, DType::f64) : Tensor();
          ScanOptions b = o;
          b.identity = Tensor();
          EXPECT_TRUE(
              all_close(fmt::format("plus T={} threads={} rev={} excl={}", Tn, threads, rev, excl),
                        "y", prefix_scan(v, 1, plus, o), prefix_scan(v, 1, ScanOp::sum, b),
                        scan_tol(DType::f64, Tn)));
          o.exclusive = false;
          o.identity = Tensor();
        }
        EXPECT_TRUE(all_close(fmt::format("reduce T={} threads={}", Tn, threads), "r",
                              reduce_scan(x, 0, mm, o), reduce_scan(x, 0, ScanOp::matmul),
                              Tol{1e-10, 1e-9}));
      }
}

TEST(ScanCallable, BroadcastingInsideTheCombineIsFine) {
  // A combine on (k, 2) slices that broadcasts a (1, 2) row internally.
  const ScanFn f = [](const Tensor& a, const Tensor& b) {
    return add(a, mul(b, Tensor::from_vector<double>({1, 2}, {1.0, 1.0})));
  };
  const Tensor x = Tensor::from_vector<double>({3, 1, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor y = prefix_scan(x, 0, f);
  EXPECT_EQ(y.item({2, 0, 0}), 9.0);
  EXPECT_EQ(y.item({2, 0, 1}), 12.0);
}

TEST(ScanCallable, BadCombinesAreErrors) {
  const Tensor x = Tensor::zeros({50, 3}, DType::f64);
  for (int threads : {1, 2}) {
    ScanOptions o;
    o.threads = threads;
    const ScanFn shrink = [](const Tensor& a, const Tensor&) { return a.slice(0, 0, 1); };
    try {
      prefix_scan(x, 0, shrink, o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("must preserve the slice shape"));
    }
    const ScanFn thrower = [](const Tensor&, const Tensor&) -> Tensor {
      throw std::runtime_error("combine failed");
    };
    EXPECT_THROW(prefix_scan(x, 0, thrower, o), std::runtime_error);
    EXPECT_THROW(reduce_scan(x, 0, thrower, o), std::runtime_error);
  }
  ScanOptions excl;
  excl.exclusive = true;
  EXPECT_THROW(prefix_scan(x, 0, ScanFn([](const Tensor& a, const Tensor&) { return a; }), excl),
               Error);
  excl.identity = Tensor::zeros({4}, DType::f64);
  EXPECT_THROW(prefix_scan(x, 0, ScanFn([](const Tensor& a, const Tensor&) { return a; }), excl),
               Error);
}

// ---- affine recurrences ---------------------------------------------------------------------

TEST(ScanAffine, DiagonalKernelMatchesReference) {
  std::mt19937_64 rng(8);
  for (int64_t Tn : kLengths)
    for (auto [O, C] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}, {3, 600}}) {
      if (Tn == 4097 && C == 600) continue;
      // One set of operands for every walk of this shape (making them for each would take most
      // of the time).
      const Tensor a = mul(random_tensor({O, Tn, C}, DType::f64, rng), 0.5);
      const Tensor b = random_tensor({O, Tn, C}, DType::f64, rng);
      const Tensor h0 = random_tensor({O, C}, DType::f64, rng);
      const Tensor la = log(mul(sigmoid(a), 0.99)), lb = b;
      const double nan = std::numeric_limits<double>::quiet_NaN();
      for (bool rev : {false, true})
        for (bool with_h0 : {false, true}) {
          // The references once for every walk (computing them again for each would take a
          // third of the test's time).
          const double* h0p = with_h0 ? h0.data<double>() : nullptr;
          Tensor r = Tensor::full(b.shape(), nan, DType::f64);
          Tensor lr = Tensor::full(b.shape(), nan, DType::f64);
          cpu::ref::affine_scan_diag(a.data<double>(), b.data<double>(), h0p, r.data<double>(), O,
                                     Tn, C, rev);
          // Log space on positive terms (a in (0, 1)) against the two-pass reference.
          cpu::ref::log_affine_scan_diag(la.data<double>(), lb.data<double>(), h0p,
                                         lr.data<double>(), O, Tn, C, rev);
          for (int threads : {1, 2, 3})
            for (auto split : {cpu::TimeSplit::never, cpu::TimeSplit::always}) {
              // NaN: an element a kernel leaves unwritten fails.
              Tensor h = Tensor::full(b.shape(), nan, DType::f64);
              const cpu::ScanWalk w{false, rev, threads, split};
              cpu::affine_scan_diag(a.data<double>(), b.data<double>(), h0p, h.data<double>(), O,
                                    Tn, C, w);
              const std::string where =
                  fmt::format("T={} O={} C={} rev={} h0={} threads={} split={}", Tn, O, C, rev,
                              with_h0, threads, int(split));
              EXPECT_TRUE(all_close(where, "h", h, r, Tol{1e-12, 1e-11}));
              h = Tensor::full(b.shape(), nan, DType::f64);
              cpu::log_affine_scan_diag(la.data<double>(), lb.data<double>(), h0p, h.data<double>(),
                                        O, Tn, C, w);
              EXPECT_TRUE(all_close(where + " log", "lh", h, lr, Tol{1e-9, 1e-9}));
            }
        }
    }
}

TEST(ScanAffine, MatrixKernelMatchesReference) {
  std::mt19937_64 rng(9);
  for (int64_t Tn : {1, 2, 3, 7, 1000})
    for (int64_t d : {1, 2, 9})
      for (bool rev : {false, true})
        for (int threads : {1, 2, 3})
          for (auto split : {cpu::TimeSplit::never, cpu::TimeSplit::always}) {
            const int64_t O = 2;
            const Tensor A =
                div(random_tensor({O, Tn, d, d}, DType::f64, rng), std::sqrt(double(d)));
            const Tensor b = random_tensor({O, Tn, d}, DType::f64, rng);
            const Tensor h0 = random_tensor({O, d}, DType::f64, rng);
            Tensor h = Tensor::empty(b.shape(), DType::f64),
                   r = Tensor::empty(b.shape(), DType::f64);
            cpu::affine_scan_matrix(A.data<double>(), b.data<double>(), h0.data<double>(),
                                    h.data<double>(), O, Tn, d,
                                    cpu::ScanWalk{false, rev, threads, split});
            cpu::ref::affine_scan_matrix(A.data<double>(), b.data<double>(), h0.data<double>(),
                                         r.data<double>(), O, Tn, d, rev);
            EXPECT_TRUE(all_close(fmt::format("T={} d={} rev={} threads={} split={}", Tn, d, rev,
                                              threads, int(split)),
                                  "h", h, r, Tol{1e-9, 1e-9}));
          }
}

// The seed's formulation: x_t^T = x_0~^T W~_1^T ... W~_t^T with W~ = [[W^T, 0], [b^T, 1]],
// computed here with the matmul scan, as an oracle for the matrix affine scan.
Tensor augmented_oracle(const Tensor& A, const Tensor& b, const Tensor& h0) {
  const int64_t Tn = A.size(0), d = A.size(1);
  Tensor W = Tensor::zeros({Tn, d + 1, d + 1}, DType::f64);
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) W.set({t, j, i}, A.item({t, i, j}));
      W.set({t, d, i}, b.item({t, i}));
    }
    W.set({t, d, d}, 1.0);
  }
  const Tensor cum = prefix_scan(W, 0, ScanOp::matmul);
  Tensor x0 = Tensor::zeros({1, d + 1}, DType::f64);
  for (int64_t i = 0; i < d; ++i) x0.set({0, i}, h0.item({i}));
  x0.set({0, d}, 1.0);
  return matmul(x0, cum).squeeze(1).slice(1, 0, d).contiguous();
}

TEST(ScanAffine, FormsAgreeWithEachOtherAndTheAugmentedMatrixOracle) {
  std::mt19937_64 rng(10);
  const int64_t Tn = 300, d = 5;
  const Tensor A = div(random_tensor({Tn, d, d}, DType::f64, rng), std::sqrt(double(d)));
  const Tensor b = random_tensor({Tn, d}, DType::f64, rng);
  const Tensor h0 = random_tensor({d}, DType::f64, rng);
  const Tensor h = affine_scan(A, b, 0, h0);
  EXPECT_TRUE(
      all_close("matrix vs augmented", "h", h, augmented_oracle(A, b, h0), Tol{1e-9, 1e-9}));
  // Diagonal matrices give the diagonal form.
  const Tensor a = mul(random_tensor({Tn, d}, DType::f64, rng), 0.9);
  Tensor D = Tensor::zeros({Tn, d, d}, DType::f64);
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t i = 0; i < d; ++i) D.set({t, i, i}, a.item({t, i}));
  EXPECT_TRUE(all_close("diag vs matrix", "h", affine_scan(a, b, 0, h0), affine_scan(D, b, 0, h0),
                        Tol{1e-12, 1e-12}));
  // Log space equals linear space on positive terms, and survives products that underflow.
  const Tensor pa = mul(sigmoid(a), 0.999), pb = positive(b), ph0 = positive(h0);
  AffineScanOptions lg;
  lg.log_space = true;
  EXPECT_TRUE(all_close("log vs linear", "h", affine_scan(pa, pb, 0, ph0, lg),
                        affine_scan(pa, pb, 0, ph0), Tol{1e-12, 1e-11}));
  const Tensor tiny = Tensor::full({4000, 1}, 0.5, DType::f32);  // 0.5^4000 underflows
  const Tensor one = Tensor::full({4000, 1}, 1.0, DType::f32);
  const Tensor lh = log_affine_scan(log(tiny), log(one), 0);
  EXPECT_NEAR(lh.item({3999, 0}), std::log(2.0), 1e-5);  // h -> 1 / (1 - 0.5) = 2
}

TEST(ScanAffine, LayoutsOfThePublicApi) {
  // Time in the middle: b (N, T, d) with dim 1, a (N, T, d, d); also time first with a batch
  // dimension after it (T, N, C) for the diagonal form.
  std::mt19937_64 rng(11);
  const Tensor A = div(random_tensor({3, 20, 4, 4}, DType::f64, rng), 2.0);
  const Tensor b = random_tensor({3, 20, 4}, DType::f64, rng);
  const Tensor h0 = random_tensor({3, 4}, DType::f64, rng);
  const Tensor h = affine_scan(A, b, 1, h0);
  for (int64_t n = 0; n < 3; ++n)
    EXPECT_TRUE(all_close("n=" + std::to_string(n), "h", h.select(0, n).contiguous(),
                          augmented_oracle(A.select(0, n).contiguous(), b.select(0, n).contiguous(),
                                           h0.select(0, n).contiguous()),
                          Tol{1e-10, 1e-10}));
  const Tensor At = A.permute({1, 0, 2, 3}), bt = b.permute({1, 0, 2});
  EXPECT_TRUE(all_close("time first", "h", affine_scan(At, bt, 0, h0),
                        h.permute({1, 0, 2}).contiguous(), Tol{1e-12, 1e-12}));
}

// f64 finite differences of L = sum(h * w) for a random w.
template <typename F>
Tensor numeric_grad(const Tensor& x, F loss) {
  Tensor g = Tensor::empty(x.shape(), DType::f64);
  Tensor xc = x.clone();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = xc.data<double>()[i], e = 1e-6;
    xc.data<double>()[i] = v + e;
    const double up = loss(xc);
    xc.data<double>()[i] = v - e;
    const double down = loss(xc);
    xc.data<double>()[i] = v;
    g.data<double>()[i] = (up - down) / (2 * e);
  }
  return g;
}

double dot(const Tensor& a, const Tensor& b) {
  const Tensor p = mul(a, b).contiguous();
  double s = 0;
  for (int64_t i = 0; i < p.numel(); ++i) s += p.data<double>()[i];
  return s;
}

TEST(ScanAffine, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(12);
  for (bool matrix : {false, true})
    for (bool rev : {false, true})
      for (bool log_space : {false, true})
        for (bool with_h0 : {false, true}) {
          if (matrix && log_space) continue;
          const Shape bs{2, 6, 3};
          const Shape as = matrix ? Shape{2, 6, 3, 3} : bs;
          Tensor a = mul(random_tensor(as, DType::f64, rng), 0.5);
          if (log_space) a = sigmoid(a);
          Tensor b = random_tensor(bs, DType::f64, rng);
          if (log_space) b = positive(b);
          Tensor h0 = with_h0 ? random_tensor({2, 3}, DType::f64, rng) : Tensor();
          if (log_space && with_h0) h0 = positive(h0);
          const Tensor w = random_tensor(bs, DType::f64, rng);
          AffineScanOptions o;
          o.reverse = rev;
          o.log_space = log_space;
          const int64_t dim = 1;
          const Tensor h = affine_scan(a, b, dim, h0, o);
          const AffineScanGrads g = affine_scan_backward(a, h0, h, w, dim, o);
          const std::string where =
              fmt::format("matrix={} rev={} log={} h0={}", matrix, rev, log_space, with_h0);
          const Tol tol{1e-7, 1e-6};
          EXPECT_TRUE(all_close(
              where, "da", g.da,
              numeric_grad(a,
                           [&](const Tensor& v) { return dot(affine_scan(v, b, dim, h0, o), w); }),
              tol));
          EXPECT_TRUE(all_close(
              where, "db", g.db,
              numeric_grad(b,
                           [&](const Tensor& v) { return dot(affine_scan(a, v, dim, h0, o), w); }),
              tol));
          if (with_h0) {
            EXPECT_TRUE(all_close(
                where, "dh0", g.dh0,
                numeric_grad(h0,
                             [&](const Tensor& v) { return dot(affine_scan(a, b, dim, v, o), w); }),
                tol));
          } else {
            EXPECT_FALSE(g.dh0.defined());
          }
        }
}

// ---- the reference switch and errors ------------------------------------------------------

TEST(Scan, ReferenceSwitchGivesTheSameResults) {
  std::mt19937_64 rng(13);
  const Tensor x = random_tensor({5, 333}, DType::f32, rng);
  const Tensor opt = prefix_scan(x, 1, ScanOp::logaddexp);
  set_reference_kernels(true);
  const Tensor ref = prefix_scan(x, 1, ScanOp::logaddexp);
  set_reference_kernels(false);
  EXPECT_TRUE(all_close("logaddexp", "y", opt, ref, Tol{1e-5, 1e-5}));
}

void expect_error(const std::function<void()>& f, const std::string& piece) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << piece << "'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(piece));
  }
}

TEST(Scan, ErrorsNameWhatWasWrong) {
  const Tensor x = Tensor::zeros({4, 3}, DType::f32);
  expect_error([&] { prefix_scan(x, 2, ScanOp::sum); },
               "dim 2 out of range for a tensor of rank 2");
  expect_error([&] { prefix_scan(x, -3, ScanOp::sum); }, "expected -2..1");
  expect_error([&] { prefix_scan(Tensor::zeros({4}, DType::i64), 0, ScanOp::sum); },
               "expected f32 or f64");
  expect_error([&] { prefix_scan(x, 0, ScanOp::matmul); }, "matmul scans need x of shape");
  expect_error(
      [&] {
        prefix_scan(Tensor::zeros({4, 3, 2}, DType::f32), 0, ScanOp::matmul);
      },
      "square matrices");
  expect_error(
      [&] {
        prefix_scan(Tensor::zeros({4, 3, 3}, DType::f32), 1, ScanOp::matmul);
      },
      "is a matrix dimension");
  ScanOptions ex;
  ex.exclusive = true;
  expect_error(
      [&] {
        prefix_scan(Tensor::zeros({4, 3, 3}, DType::f32), 0, ScanOp::matmul, ex);
      },
      "inclusive only");
  expect_error([&] { reduce_scan(Tensor::zeros({0, 3}, DType::f32), 0, ScanOp::sum); }, "length 0");
  expect_error([&] { parse_scan_op("cumsum"); }, "expected one of sum, prod");
  // Affine: shapes, dtypes, log space.
  const Tensor b = Tensor::zeros({5, 2}, DType::f32);
  expect_error(
      [&] {
        affine_scan(Tensor::zeros({5, 3}, DType::f32), b, 0);
      },
      "expected a of b's shape");
  expect_error([&] { affine_scan(Tensor::zeros({5, 2}, DType::f64), b, 0); }, "dtype");
  expect_error([&] { affine_scan(b, b, 0, Tensor::zeros({3}, DType::f32)); },
               "h0 has shape (3,); expected (2,)");
  expect_error([&] { affine_scan(Tensor::zeros({5, 2, 2}, DType::f32), b, 1); }, "state dimension");
  AffineScanOptions lg;
  lg.log_space = true;
  Tensor bad = Tensor::full({5, 2}, 1.0, DType::f32);
  bad.set({3, 1}, -0.5);
  expect_error(
      [&] {
        affine_scan(bad, Tensor::full({5, 2}, 1.0, DType::f32), 0, {}, lg);
      },
      "a[3, 1] = -0.5");
  expect_error(
      [&] {
        affine_scan(Tensor::full({5, 2, 2}, 1.0, DType::f32), b, 0, {}, lg);
      },
      "diagonal form");
  expect_error([&] { ScanProblem::parse("t0"); }, "sizes must be >= 1");
  expect_error([&] { ScanProblem::parse("x5"); }, "scan descriptor 'x5' is malformed");
  EXPECT_EQ(ScanProblem::parse("n8t4096c1536").descriptor(), "n8t4096c1536");
  EXPECT_EQ(ScanProblem::parse("t8192d64").d, 64);
}

// ---- golden files from PyTorch (tests/reference/gen_scan_golden.py) ------------------------

namespace golden {

const std::string kDir = std::string(GRUX_GOLDEN_DIR) + "/scan";

struct File {
  std::map<std::string, Tensor> t;
  nlohmann::json config;
  DType dtype;
};

File load(const std::string& name) {
  SafeTensors st = read_safetensors(kDir + "/" + name);
  File f;
  f.t = std::move(st.tensors);
  f.config = nlohmann::json::parse(st.metadata.at("config"));
  f.dtype = name.find("_f32") != std::string::npos ? DType::f32 : DType::f64;
  return f;
}

// PyTorch's f32 results are f64 results rounded once; ours accumulate in f32.
Tol golden_tol(DType dt, int64_t T) {
  return dt == DType::f32 ? Tol{2e-6 * std::sqrt(double(T) + 1) + 1e-6, 1e-5} : Tol{1e-12, 1e-11};
}

class ScanGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ScanGolden, MatchesPyTorch) {
  const std::string name = GetParam();
  const File f = load(name);
  const std::string kind = f.config.at("kind");
  for (bool use_ref : {false, true}) {
    set_reference_kernels(use_ref);
    const std::string where = name + (use_ref ? " (reference kernels)" : "");
    if (kind == "elementwise" || kind == "matmul") {
      const Tensor& x = f.t.at("x");
      const int64_t dim = f.config.value("dim", 0);
      const std::string opname = f.config.value("op", "matmul");
      const ScanOp op = opname == "cumsum"         ? ScanOp::sum
                        : opname == "cumprod"      ? ScanOp::prod
                        : opname == "cummax"       ? ScanOp::max
                        : opname == "cummin"       ? ScanOp::min
                        : opname == "logcumsumexp" ? ScanOp::logaddexp
                                                   : ScanOp::matmul;
      const Tol tol = golden_tol(f.dtype, x.size(dim));
      for (bool rev : {false, true})
        for (bool excl : {false, true}) {
          const std::string key =
              std::string(rev ? "reverse_" : "") + (excl ? "exclusive" : "inclusive");
          if (!f.t.count(key)) continue;
          ScanOptions o;
          o.reverse = rev;
          o.exclusive = excl;
          const Tensor y = prefix_scan(x, dim, op, o);
          if (op == ScanOp::matmul) {
            // Products shrink along t: compare each relative to its own size.
            const Tensor e = f.t.at(key);
            for (int64_t t = 0; t < x.size(0); ++t) {
              const double scale = test::max_abs(e.select(0, t)) + 1e-300;
              EXPECT_TRUE(all_close(where + " t=" + std::to_string(t), key,
                                    div(y.select(0, t), scale), div(e.select(0, t), scale), tol));
            }
          } else {
            EXPECT_TRUE(all_close(where, key, y, f.t.at(key), tol));
          }
        }
      if (f.t.count("total")) {
        const Tensor e = f.t.at("total");
        const double scale = test::max_abs(e) + 1e-300;
        EXPECT_TRUE(all_close(where, "total", div(reduce_scan(x, 0, ScanOp::matmul), scale),
                              div(e, scale), tol));
      }
    } else {
      const Tensor& a = f.t.at("a");
      const Tensor& b = f.t.at("b");
      const Tensor h0 = f.t.count("h0") ? f.t.at("h0") : Tensor();
      AffineScanOptions o;
      o.log_space = kind == "affine_log";
      const Tol tol = golden_tol(f.dtype, a.size(0));
      const Tensor h = affine_scan(a, b, 0, h0, o);
      EXPECT_TRUE(all_close(where, "h", h, f.t.at("h"), tol));
      if (f.t.count("dh")) {
        const AffineScanGrads g = affine_scan_backward(a, h0, h, f.t.at("dh"), 0, o);
        EXPECT_TRUE(all_close(where, "da", g.da, f.t.at("da"), tol));
        EXPECT_TRUE(all_close(where, "db", g.db, f.t.at("db"), tol));
        EXPECT_TRUE(all_close(where, "dh0", g.dh0, f.t.at("dh0"), tol));
      }
    }
  }
  set_reference_kernels(false);
}

INSTANTIATE_TEST_SUITE_P(Files, ScanGolden,
                         ::testing::ValuesIn(test::golden_files(kDir, {"cum", "logcumsumexp",
                                                                       "matmul", "affine"})),
                         test::golden_case_name);

TEST(ScanGoldenFiles, AreThere) {
  EXPECT_GE(test::golden_files(kDir, {"cum", "logcumsumexp", "matmul", "affine"}).size(), 50u);
}

}  // namespace golden

}  // namespace
}  // namespace grux::test_scan
