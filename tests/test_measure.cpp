// The measuring side (src/measure, grux::tools): the kernels calibration times through
// cpu/kernel_probe.h compute the product they are timed on, and the BLAS peer, loaded at run
// time, computes sgemm / dgemm or says it is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/kernel_probe.h"
#include "grux/calibrate.h"
#include "grux/error.h"
#include "measure/blas.h"

namespace grux::test_measure {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::vector<T> uniform(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(count);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

// C = A B (n x n, row-major) in long double; with transposed_b, C = A B^T.
template <typename T>
std::vector<long double> product(int64_t n, const std::vector<T>& a, const std::vector<T>& b,
                                 bool transposed_b = false) {
  std::vector<long double> c(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double s = 0;
      for (int64_t k = 0; k < n; ++k)
        s += (long double)a[i * n + k] * (transposed_b ? b[j * n + k] : b[k * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

// The largest |got - want| over the matrix, with the index, for the failure message.
template <typename T>
std::pair<double, int64_t> max_error(const std::vector<T>& got,
                                     const std::vector<long double>& want) {
  double worst = 0;
  int64_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i] - want[i]));
    if (!(e <= worst)) worst = e, at = static_cast<int64_t>(i);
  }
  return {worst, at};
}

// Sides below, at and past the panel (48 f32 / 24 f64 columns) and a prime.
constexpr int64_t kSides[] = {1, 23, 48, 97};

// The probe computes C = A W^T, as the operators compute x W^T.
TEST(Measure, PackedGemmProbeComputesTheProduct) {
  for (int64_t n : kSides) {
    const auto a = uniform<float>(n * n, 1), b = uniform<float>(n * n, 2);
    const auto ad = uniform<double>(n * n, 3), bd = uniform<double>(n * n, 4);
    std::vector<float> c(n * n, NAN);
    std::vector<double> cd(n * n, NAN);
    probe::PackedGemm(DType::f32, Precision::f32, n, b.data()).run(a.data(), c.data());
    probe::PackedGemm(DType::f64, Precision::f32, n, bd.data()).run(ad.data(), cd.data());
    // Operands in [-1, 1]: each sum of n products is off by at most n ulps of n.
    const auto [ef, i] = max_error(c, product(n, a, b, true));
    EXPECT_LE(ef, n * n * 1.2e-7) << "f32 n " << n << " index " << i;
    const auto [ed, j] = max_error(cd, product(n, ad, bd, true));
    EXPECT_LE(ed, n * n * 2.3e-16) << "f64 n " << n << " index " << j;
    // bf16 rounds both operands (8 bits of mantissa: relative 2^-8 each); int8 scales B's
    // columns to 127 steps.
    for (auto [p, tol] :
         {std::pair{Precision::bf16, 2 * 0.0079}, {Precision::int8, 0.0079 + 0.0079}}) {
      std::vector<float> cl(n * n, NAN);
      probe::PackedGemm(DType::f32, p, n, b.data()).run(a.data(), cl.data());
      const auto [el, k] = max_error(cl, product(n, a, b, true));
      EXPECT_LE(el, n * tol) << precision_name(p) << " n " << n << " index " << k;
    }
  }
}

TEST(Measure, PackedGemmProbeRefusesBadArguments) {
  const std::vector<double> b(4, 1.0);
  EXPECT_THROW(probe::PackedGemm(DType::f64, Precision::bf16, 2, b.data()), Error);
  EXPECT_THROW(probe::PackedGemm(DType::i64, Precision::f32, 2, b.data()), Error);
  EXPECT_THROW(probe::PackedGemm(DType::f32, Precision::f32, 0, b.data()), Error);
  EXPECT_THROW(probe::PackedGemm(DType::f32, Precision::f32, 2, nullptr), Error);
}

TEST(Measure, BlasPeerComputesOrSaysItIsMissing) {
  const int64_t n = 29;
  const auto a = uniform<float>(n * n, 5), b = uniform<float>(n * n, 6);
  std::vector<float> c(n * n, NAN);
  if (!measure::blas_available()) {
    EXPECT_EQ(measure::blas_core(), "none");
    try {
      measure::blas_gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(),
                                n);
      ADD_FAILURE() << "blas_gemm without a BLAS did not throw";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("libopenblas"));
    }
    return;
  }
  EXPECT_NE(measure::blas_core(), "none");
  measure::blas_gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  const auto [e, i] = max_error(c, product(n, a, b));
  EXPECT_LE(e, n * n * 1.2e-7) << "index " << i;
  // trans_b: B given as its transpose.
  std::vector<float> bt(n * n);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < n; ++j) bt[j * n + k] = b[k * n + j];
  std::vector<float> c2(n * n, NAN);
  measure::blas_gemm<float>(false, true, n, n, n, 1.f, a.data(), n, bt.data(), n, 0.f, c2.data(),
                            n);
  const auto [e2, i2] = max_error(c2, product(n, a, b));
  EXPECT_LE(e2, n * n * 1.2e-7) << "trans_b index " << i2;
  // K = 0 scales C by beta without calling the BLAS.
  std::vector<float> c3(4, 2.f);
  measure::blas_gemm<float>(false, false, 2, 2, 0, 1.f, a.data(), 1, b.data(), 2, 0.5f, c3.data(),
                            2);
  EXPECT_THAT(c3, ::testing::Each(1.f));
}

TEST(Measure, GemmRatesWithoutOrWithThePeer) {
  const GemmRates r = measure_gemm_rates(DType::f32, 1, 64);
  EXPECT_EQ(r.n, 64);
  EXPECT_GT(r.grux, 0);
  if (measure::blas_available())
    EXPECT_GT(r.blas, 0);
  else
    EXPECT_EQ(r.blas, 0);
  EXPECT_EQ(r.best(), std::max(r.blas, r.grux));
}

}  // namespace
}  // namespace grux::test_measure
