// The bf16 and int8 packed GEMMs (cpu/gemm_lowp.h): the rounding and quantization rules,
// the kernels (AVX-512 where the CPU has it, and the portable ones) against their reference
// twin at tile edges (rows around the block heights, columns around 1-3 units and panel
// groups, K around pairs, quads and the 256-element chunk), row invariance (a row alone, any
// panel split, 1 or 2 threads: the same bits), and the error against the exact f32 product
// within what the precision allows.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm_lowp.h"
#include "cpu/ref/gemm_ref.h"
#include "grux/error.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_gemm_lowp {
namespace {

using cpu::from_bf16;
using cpu::to_bf16;

float bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(to_bf16(bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(to_bf16(bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(to_bf16(-2.5f), 0xc020);
  EXPECT_EQ(to_bf16(bits(0x7f7fffff)), 0x7f80);  // the largest float rounds to infinity
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(to_bf16(bits(0x00000001)), 0x0000);  // subnormals flush to zero, keeping the sign
  EXPECT_EQ(to_bf16(bits(0x80400000)), 0x8000);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(bits(0x7f800001)))));  // a NaN that would round to inf
  EXPECT_EQ(from_bf16(0x3f80), 1.0f);
}

TEST(Int8, RowQuantizationKeepsZeroAndSpansTheRow) {
  const cpu::RowQuant q = cpu::row_quant(-1.0f, 3.0f);
  EXPECT_FLOAT_EQ(q.scale, 4.0f / 255);
  EXPECT_EQ(q.zero, 64);  // rint(1 * 255 / 4) = rint(63.75)
  EXPECT_EQ(cpu::quantize(0.0f, q), 64);
  EXPECT_EQ(cpu::quantize(3.0f, q), 255);
  EXPECT_EQ(cpu::quantize(-1.0f, q), 0);
  EXPECT_EQ(cpu::quantize(100.0f, q), 255);              // clamped
  const cpu::RowQuant pos = cpu::row_quant(0.0f, 2.0f);  // all >= 0: zero point 0
  EXPECT_EQ(pos.zero, 0);
  const cpu::RowQuant none = cpu::row_quant(0.0f, 0.0f);  // a row of zeros
  EXPECT_EQ(none.scale, 1.0f);
  EXPECT_EQ(cpu::quantize(0.0f, none), 0);
}

std::vector<float> random_vec(int64_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(u(rng));
  return v;
}

struct Packed {
  std::vector<uint8_t> bytes;
  cpu::PackedB<float> B;
};
// B = W^T for W (N x K) row-major, as the GRU packs its weights (optionally through maps).
Packed pack(Precision p, int64_t K, int64_t N, int64_t panel, const std::vector<float>& W,
            bool maps) {
  std::vector<int64_t> kmap(K), nmap(N);
  for (int64_t k = 0; k < K; ++k) kmap[k] = K - 1 - k;
  for (int64_t n = 0; n < N; ++n) nmap[n] = N - 1 - n;
  Packed out;
  out.bytes.resize(cpu::packed_lowp_bytes(p, K, N, panel) + 64);
  void* dst = out.bytes.data() + (64 - reinterpret_cast<uintptr_t>(out.bytes.data()) % 64) % 64;
  out.B = cpu::pack_b_lowp(p, K, N, panel, W.data(), 1, K, maps ? kmap.data() : nullptr,
                           maps ? nmap.data() : nullptr, dst);
  return out;
}

// Runs with the portable kernels (a SIMD target below AVX-512) for its lifetime, when `on`.
struct PortableScope {
  std::string saved = simd_target();
  explicit PortableScope(bool on) {
    const std::string below = test::target_below_avx512();
    if (on && !below.empty()) set_simd_target(below);
  }
  ~PortableScope() { set_simd_target(saved); }
};

struct Shape3 {
  int64_t M, N, K;
};

void check(Precision prec, Shape3 s, int64_t units, bool bias, bool accumulate, bool maps,
           std::mt19937_64& rng) {
  const int64_t M = s.M, N = s.N, K = s.K, panel = 16 * units;
  const std::string where = std::string(precision_name(prec)) + " on " + cpu::lowp_kernel(prec) +
                            " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + " panel=" + std::to_string(panel) +
                            (bias ? " bias" : "") + (accumulate ? " accumulate" : "") +
                            (maps ? " maps" : "");
  // Rows of A with a shifted range (the asymmetric zero point is not always 128).
  auto A = random_vec(M * K, rng, -0.5, 1.5), W = random_vec(N * K, rng), b = random_vec(N, rng);
  const Packed P = pack(prec, K, N, panel, W, maps);
  auto C0 = random_vec(M * N, rng);
  std::vector<float> R = C0;
  cpu::ref::gemm_packed<float>(M, A.data(), K, false, P.B, bias ? b.data() : nullptr, accumulate,
                               R.data(), N, 0, P.B.panels());
  // Steps of a recurrence read B in different orders (one row: int8 a rotation of the panels,
  // bf16 backwards on odd steps); each step's result is the product, and the same bits as
  // step 0's (int8) or as those of the steps of its parity (bf16, whose sums follow the order).
  std::vector<float> by_step[2];
  for (int64_t step : {0, 1, 2, 7}) {
    const std::string at = where + " step " + std::to_string(step);
    std::vector<float> C = C0;
    cpu::gemm_packed<float>(M, A.data(), K, false, P.B, bias ? b.data() : nullptr, accumulate,
                            C.data(), N, 0, P.B.panels(), step);
    // bf16: f32 sums of K exact products (|a b| <= 1.5); int8: exact integer sums, two
    // roundings.
    const double tol = prec == Precision::bf16 ? 4.0 * (K + 2) * 1.5 * 6e-8 : 0;
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_NEAR(C[i], R[i], tol + 1e-6 * (2 + std::fabs(R[i])))
          << at << " at row " << i / N << " col " << i % N;
    std::vector<float>& same = by_step[prec == Precision::bf16 ? step % 2 : 0];
    if (same.empty()) same = C;
    ASSERT_EQ(C, same) << at << ": not the bits of an earlier step";
    // Row invariance: each row alone, all panels at once and panel by panel, the same bits.
    for (int64_t m = 0; m < M; m += std::max<int64_t>(1, M / 3)) {
      std::vector<float> row(C0.begin() + m * N, C0.begin() + (m + 1) * N), whole = row;
      cpu::gemm_packed<float>(1, A.data() + m * K, K, false, P.B, bias ? b.data() : nullptr,
                              accumulate, whole.data(), N, 0, P.B.panels(), step);
      for (int64_t p = 0; p < P.B.panels(); ++p)
        cpu::gemm_packed<float>(1, A.data() + m * K, K, false, P.B, bias ? b.data() : nullptr,
                                accumulate, row.data(), N, p, p + 1, step);
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(whole[n], C[m * N + n]) << at << ": row " << m << " alone differs at col " << n;
        ASSERT_EQ(row[n], C[m * N + n]) << at << ": row " << m << " by panels differs at col " << n;
      }
    }
  }
  // (With a few terms both orders can round alike.)
  if (prec == Precision::bf16 && K >= 64) {
    EXPECT_NE(by_step[0], by_step[1]) << where;
  }
}

void check_all(Precision prec, bool portable) {
  PortableScope scope(portable);
  if (portable && cpu::lowp_kernel(prec) != std::string("portable"))
    GTEST_SKIP() << "no SIMD target below AVX-512 to run the portable kernels on";
  std::mt19937_64 rng(prec == Precision::bf16 ? 11 : 12);
  // clang-format off
  for (int64_t units : {1, 2, 3})
    for (Shape3 s : {Shape3{1, 17, 5}, {1, 200, 64}, {1, 600, 255}, {2, 200, 33}, {2, 97, 4},
                     {3, 48, 1}, {5, 49, 191}, {7, 95, 257}, {8, 48, 256}, {9, 33, 3},
                     {13, 16, 300}, {17, 64, 2}, {20, 130, 513},
                     // More rows than one slab of prepared rows takes (at most 32 on AVX-512,
                     // 64 below; fewer as K grows and the L1 shrinks): a slab's last rows and
                     // the next's first.
                     {40, 50, 700}, {70, 20, 64},
                     // Rows longer than the SIMD kernels' buffer (plain C++ then).
                     {3, 40, 16500}})
      check(prec, s, units, (s.M + units) % 2 == 0, s.K % 2 == 1, units != 2, rng);
  // clang-format on
}

TEST(GemmLowp, Bf16MatchesReferenceAtTileEdges) {
  check_all(Precision::bf16, false);
}
TEST(GemmLowp, Int8MatchesReferenceAtTileEdges) {
  check_all(Precision::int8, false);
}
TEST(GemmLowp, Bf16PortableMatchesReference) {
  check_all(Precision::bf16, true);
}
TEST(GemmLowp, Int8PortableMatchesReference) {
  check_all(Precision::int8, true);
}

TEST(GemmLowp, KernelIsNamed) {
  EXPECT_STREQ(cpu::lowp_kernel(Precision::f32), "f32");
  const std::string bf = cpu::lowp_kernel(Precision::bf16), i8 = cpu::lowp_kernel(Precision::int8);
  EXPECT_TRUE(bf == "avx512_bf16" || bf == "portable") << bf;
  EXPECT_TRUE(i8 == "avx512_vnni" || i8 == "portable") << i8;
  EXPECT_EQ(precision_kernel(Precision::bf16), bf);
}

// int8 sums are exact integers and the rest the same float operations: the AVX-512 and the
// portable kernels give the same bits.
TEST(GemmLowp, Int8KernelsAgreeBitwise) {
  if (cpu::lowp_kernel(Precision::int8) == std::string("portable"))
    GTEST_SKIP() << "this CPU has no AVX512_VNNI: one kernel only";
  GRUX_SKIP_WITHOUT_TARGET_BELOW_AVX512(test::target_below_avx512());
  std::mt19937_64 rng(16);
  const int64_t M = 11, N = 150, K = 333;
  auto A = random_vec(M * K, rng, -3, 1), W = random_vec(N * K, rng), b = random_vec(N, rng);
  const Packed P = pack(Precision::int8, K, N, 48, W, false);
  std::vector<float> fast(M * N), portable(M * N);
  cpu::gemm_packed<float>(M, A.data(), K, false, P.B, b.data(), false, fast.data(), N, 0,
                          P.B.panels());
  {
    PortableScope scope(true);
    ASSERT_STREQ(cpu::lowp_kernel(Precision::int8), "portable");
    cpu::gemm_packed<float>(M, A.data(), K, false, P.B, b.data(), false, portable.data(), N, 0,
                            P.B.panels());
  }
  EXPECT_EQ(fast, portable);
}

// The kernels below AVX-512 (Highway's on AVX2, SSE4, ..., plain C++ on the scalar target and
// for long rows) do the same operations in the same order: the same bits on every target,
// both precisions, every step parity, and int8 the same as the AVX-512 kernel's too.
// K 3001: rows in several slabs of the kernels' 32 KB buffer (bf16 2 rows a slab, int8 4 and
// a last one of 3).
TEST(GemmLowp, KernelsBelowAvx512AgreeBitwiseOnEveryTarget) {
  std::mt19937_64 rng(17);
  for (const auto [M, N, K] : {std::array<int64_t, 3>{7, 150, 301}, {11, 61, 3001}})
    for (Precision prec : {Precision::bf16, Precision::int8}) {
      auto A = random_vec(M * K, rng, -3, 1), W = random_vec(N * K, rng), b = random_vec(N, rng);
      const Packed P = pack(prec, K, N, 48, W, false);
      for (int64_t step : {0, 1}) {
        std::vector<float> first;
        std::string first_target;
        PortableScope restore(false);
        for (const std::string& t : simd_targets()) {
          set_simd_target(t);
          const std::string kernel = cpu::lowp_kernel(prec);
          if (prec == Precision::bf16 && kernel != "portable") continue;  // vdpbf16ps: its own
          std::vector<float> C(M * N, 0.5f);
          cpu::gemm_packed<float>(M, A.data(), K, false, P.B, b.data(), true, C.data(), N, 0,
                                  P.B.panels(), step);
          if (first.empty()) {
            first = C, first_target = t;
            continue;
          }
          EXPECT_EQ(C, first) << precision_name(prec) << " K " << K << " step " << step << ": " << t
                              << " (" << kernel << ") against " << first_target;
        }
      }
    }
}

// Threads split the panels (or the rows): the same bits as one thread.
// A^T B in bf16 (bf16 training's weight gradients) against its twin: shapes around the
// 16-row tiles, 4-row blocks and 48-column panels, odd K (a last pair of one), K longer than
// one block of K (sums carried in C across blocks), a row map for B, accumulate; the same bits
// on 1 and 2 threads (threads split the rows of C, each sums its elements alone).
void check_at_b(bool portable) {
  PortableScope scope(portable);
  if (portable && cpu::lowp_kernel(Precision::bf16) != std::string("portable"))
    GTEST_SKIP() << "no SIMD target below AVX-512 to run the portable kernels on";
  std::mt19937_64 rng(21);
  for (Shape3 s : {Shape3{1, 1, 1},
                   {3, 17, 5},
                   {16, 48, 2},
                   {17, 49, 33},
                   {37, 100, 7},
                   {64, 96, 4001},
                   {5, 130, 12001}}) {
    const int64_t M = s.M, N = s.N, K = s.K, lda = M + 3, ldb = N + 1;
    for (bool maps : {false, true}) {
      const bool accumulate = maps;
      const std::string where = std::string(cpu::lowp_kernel(Precision::bf16)) +
                                " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                " K=" + std::to_string(K) + (maps ? " maps accumulate" : "");
      auto A = random_vec(K * lda, rng), B = random_vec((K + 2) * ldb, rng);
      std::vector<int64_t> rows(K);
      for (int64_t k = 0; k < K; ++k) rows[k] = (k * 7 + 2) % (K + 2);
      const int64_t* map = maps ? rows.data() : nullptr;
      auto C0 = random_vec(M * (N + 2), rng);
      std::vector<float> C = C0, R = C0, C1 = C0;
      cpu::gemm_at_b_bf16(M, N, K, A.data(), lda, B.data(), ldb, map, accumulate, C.data(), N + 2);
      cpu::ref::gemm_at_b_bf16(M, N, K, A.data(), lda, B.data(), ldb, map, accumulate, R.data(),
                               N + 2);
      const double tol = 4.0 * (K + 2) * 6e-8;  // f32 sums of K exact products, |a b| <= 1
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N + 2; ++n) {
          const int64_t i = m * (N + 2) + n;
          if (n >= N) {
            ASSERT_EQ(C[i], C0[i]) << where << ": wrote past column N";
          } else {
            ASSERT_NEAR(C[i], R[i], tol) << where << " at " << m << ", " << n;
          }
        }
      const int before = omp_get_max_threads();
      omp_set_num_threads(1);
      cpu::gemm_at_b_bf16(M, N, K, A.data(), lda, B.data(), ldb, map, accumulate, C1.data(), N + 2);
      omp_set_num_threads(before);
      EXPECT_EQ(C1, C) << where << ": 1 thread vs " << before;
    }
  }
}
TEST(GemmLowp, Bf16AtBMatchesReference) {
  check_at_b(false);
}
TEST(GemmLowp, Bf16AtBPortableMatchesReference) {
  check_at_b(true);
}

TEST(GemmLowp, ParallelEqualsSerialBitwise) {
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    std::mt19937_64 rng(13);
    const int64_t M = 300, N = 300, K = 400, panel = 48;
    auto A = random_vec(M * K, rng), W = random_vec(N * K, rng);
    const Packed P = pack(prec, K, N, panel, W, false);
    std::vector<float> serial(M * N), parallel(M * N);
    cpu::gemm_packed<float>(M, A.data(), K, false, P.B, nullptr, false, serial.data(), N, 0,
                            P.B.panels());
    const int before = omp_get_max_threads();
    omp_set_num_threads(2);
    cpu::gemm_packed_parallel<float>(M, A.data(), K, false, P.B, nullptr, false, parallel.data(),
                                     N);
    omp_set_num_threads(before);
    EXPECT_EQ(serial, parallel) << precision_name(prec);
  }
}

// Against the exact product of the f32 operands: within the precision's own bound, per element.
//   bf16: each factor rounded to 8 significant bits: |error| <= sum |a b| (2 * 2^-8 + 2^-16)
//   int8: a off by at most scale_a / 2, b by at most scale_b / 2 (round to nearest).
TEST(GemmLowp, ErrorAgainstExactProductWithinThePrecisionsBound) {
  std::mt19937_64 rng(14);
  const int64_t M = 5, N = 70, K = 300;
  auto A = random_vec(M * K, rng, -2, 3), W = random_vec(N * K, rng, -0.3, 0.3);
  for (Precision prec : {Precision::bf16, Precision::int8}) {
    const Packed P = pack(prec, K, N, 48, W, false);
    std::vector<float> C(M * N);
    cpu::gemm_packed<float>(M, A.data(), K, false, P.B, nullptr, false, C.data(), N, 0,
                            P.B.panels());
    double worst = 0;
    for (int64_t m = 0; m < M; ++m) {
      float lo = 0, hi = 0;
      for (int64_t k = 0; k < K; ++k)
        lo = std::min(lo, A[m * K + k]), hi = std::max(hi, A[m * K + k]);
      const double sa = (hi - lo) / 255.0;
      for (int64_t n = 0; n < N; ++n) {
        double exact = 0, abs_sum = 0, amax_b = 0, sum_a = 0, sum_b = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double a = A[m * K + k], w = W[n * K + k];
          exact += a * w;
          abs_sum += std::fabs(a * w);
          amax_b = std::max(amax_b, std::fabs(w));
          sum_a += std::fabs(a);
          sum_b += std::fabs(w);
        }
        const double bound = prec == Precision::bf16 ? abs_sum * (2.0 / 256 + 1.0 / 65536) + 1e-5
                                                     : sum_b * sa / 2 + sum_a * amax_b / 127 / 2 +
                                                           K * sa * amax_b / 127 / 4 + 1e-5;
        const double err = std::fabs(C[m * N + n] - exact);
        ASSERT_LE(err, bound) << precision_name(prec) << " row " << m << " col " << n;
        worst = std::max(worst, err / abs_sum);
      }
    }
    // And not exact either: the product really ran in low precision.
    EXPECT_GT(worst, 1e-6) << precision_name(prec);
  }
}

TEST(GemmLowp, Int8ColumnOfZerosAndRowOfZerosGiveTheBias) {
  const int64_t K = 40, N = 20, M = 2;
  std::mt19937_64 rng(15);
  auto W = random_vec(N * K, rng);
  for (int64_t k = 0; k < K; ++k) W[3 * K + k] = 0;  // column 3 of B is zero
  auto A = random_vec(M * K, rng);
  for (int64_t k = 0; k < K; ++k) A[K + k] = 0;  // row 1 of A is zero
  auto b = random_vec(N, rng);
  const Packed P = pack(Precision::int8, K, N, 16, W, false);
  EXPECT_EQ(P.B.scale[3], 0.0f);
  EXPECT_EQ(P.B.colsum[3], 0);
  std::vector<float> C(M * N);
  cpu::gemm_packed<float>(M, A.data(), K, false, P.B, b.data(), false, C.data(), N, 0,
                          P.B.panels());
  EXPECT_EQ(C[3], b[3]);
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(C[N + n], b[n]) << n;
}

TEST(GemmLowp, Int8RefusesSumsLongerThanInt32Holds) {
  const int64_t K = 70000;
  std::vector<float> W(K, 1.0f);
  try {
    pack(Precision::int8, K, 1, 16, W, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("70000"), std::string::npos) << e.what();
  }
}

TEST(Precision, NamesParse) {
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8})
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  try {
    parse_precision("fp16");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "precision 'fp16': expected f32, bf16 or int8");
  }
}

}  // namespace
}  // namespace grux::test_gemm_lowp
