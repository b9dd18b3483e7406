// GEMM kernels against the reference triple loop at tile edges (rows around the 6-row
// micro-kernel, columns around the 128-byte panel, K from 1 up), and the packed kernel's
// row invariance: a row's result is bit-identical whatever the number of rows.
#include <gtest/gtest.h>

#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/ref/gemm_ref.h"
#include "test_util.h"

namespace grux {
namespace {

template <typename T>
std::vector<T> random_vec(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

// Tolerance from the reduction length: K terms of magnitude <= 1, each rounding by eps.
template <typename T>
double gemm_tol(int64_t K) {
  return 2.0 * K * std::numeric_limits<T>::epsilon();
}

template <typename T>
void check_packed(int64_t M, int64_t N, int64_t K, bool bias, std::mt19937_64& rng) {
  auto A = random_vec<T>(M * K, rng), W = random_vec<T>(N * K, rng), b = random_vec<T>(N, rng);
  Tensor packed = Tensor::empty({cpu::packed_weights_size<T>(N, K)}, dtype_of<T>());
  cpu::pack_weights_nt<T>(N, K, W.data(), packed.data<T>());
  std::vector<T> C(M * N), R(M * N);
  cpu::gemm_nt_packed<T>(M, N, K, A.data(), K, packed.data<T>(), bias ? b.data() : nullptr,
                         C.data(), N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) R[m * N + n] = bias ? b[n] : T(0);
  cpu::ref::gemm<T>(false, true, M, N, K, T(1), A.data(), K, W.data(), K, T(1), R.data(), N);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C[i], R[i], gemm_tol<T>(K) + 1e-30)
        << "M=" << M << " N=" << N << " K=" << K << " bias=" << bias << " at row " << i / N
        << " col " << i % N;
  // Row invariance: each row computed alone gives the same bits.
  for (int64_t m = 0; m < M; m += std::max<int64_t>(1, M / 3)) {
    std::vector<T> row(N);
    cpu::gemm_nt_packed<T>(1, N, K, A.data() + m * K, K, packed.data<T>(),
                           bias ? b.data() : nullptr, row.data(), N);
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(row[n], C[m * N + n])
          << "row " << m << " of M=" << M << " differs alone, col " << n;
  }
}

TEST(GemmPacked, MatchesReferenceAtTileEdgesF32) {
  std::mt19937_64 rng(1);
  for (int64_t M : {1, 5, 6, 7, 13, 96, 97, 200})
    for (int64_t N : {1, 31, 32, 33, 65, 96})
      for (int64_t K : {1, 3, 16, 17, 300}) check_packed<float>(M, N, K, (M + N) % 2 == 0, rng);
}

TEST(GemmPacked, MatchesReferenceAtTileEdgesF64) {
  std::mt19937_64 rng(2);
  for (int64_t M : {1, 6, 7, 97})
    for (int64_t N : {1, 15, 16, 17, 48})
      for (int64_t K : {1, 8, 31, 129}) check_packed<double>(M, N, K, (M + K) % 2 == 0, rng);
}

TEST(GemmPacked, LargeThreadedMatchesReference) {
  std::mt19937_64 rng(3);
  check_packed<float>(1000, 96, 128, true, rng);  // above the threading threshold
}

TEST(Gemm, BlasMatchesReferenceAllTransposes) {
  std::mt19937_64 rng(4);
  const int64_t M = 7, N = 9, K = 11;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto A = random_vec<double>(M * K, rng), B = random_vec<double>(K * N, rng);
      auto C = random_vec<double>(M * N, rng);
      auto R = C;
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      cpu::gemm<double>(ta, tb, M, N, K, 0.5, A.data(), lda, B.data(), ldb, 2.0, C.data(), N);
      cpu::ref::gemm<double>(ta, tb, M, N, K, 0.5, A.data(), lda, B.data(), ldb, 2.0, R.data(), N);
      for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C[i], R[i], 1e-13) << ta << tb << i;
    }
  // K == 0 scales C by beta.
  std::vector<double> C{1, 2}, A, B;
  cpu::gemm<double>(false, false, 1, 2, 0, 1.0, A.data(), 1, B.data(), 2, 3.0, C.data(), 2);
  EXPECT_EQ(C[1], 6.0);
}

}  // namespace
}  // namespace grux
