// GEMM kernels against the reference triple loop at tile edges: rows around the micro-kernel
// height and the few-row path, columns around the panel width (1, 2, 3 units), K around the
// L1 chunk, B large enough to be prefetched; transposed A and B, bias, accumulate, index maps.
// And the invariance of every GEMM grux computes with: a row's result is bit-identical alone or
// in any batch, with any split of the panels and on any thread count.
#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <omp.h>

#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/ref/gemm_ref.h"
#include "test_util.h"

namespace grux::test_gemm {
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
  return 2.0 * (K + 2) * std::numeric_limits<T>::epsilon();
}

struct Shape3 {
  int64_t M, N, K;
};

template <typename T>
void check_packed(Shape3 s, int64_t units, bool trans_a, bool bias, bool accumulate, bool maps,
                  std::mt19937_64& rng) {
  const int64_t M = s.M, N = s.N, K = s.K, panel = units * cpu::kUnit<T>;
  const std::string where = "M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + " panel=" + std::to_string(panel) +
                            (trans_a ? " trans_a" : "") + (bias ? " bias" : "") +
                            (accumulate ? " accumulate" : "") + (maps ? " maps" : "");
  // A: op(A) is M x K. src: a (K2 x N2) matrix read through maps (reversed orders).
  auto A = random_vec<T>(M * K, rng), src = random_vec<T>(K * N, rng), b = random_vec<T>(N, rng);
  const int64_t lda = trans_a ? M : K;
  std::vector<int64_t> kmap(K), nmap(N);
  for (int64_t k = 0; k < K; ++k) kmap[k] = K - 1 - k;
  for (int64_t n = 0; n < N; ++n) nmap[n] = N - 1 - n;
  Tensor packed = Tensor::empty({cpu::packed_size<T>(K, N, panel)}, dtype_of<T>());
  cpu::pack_b<T>(K, N, panel, src.data(), N, 1, maps ? kmap.data() : nullptr,
                 maps ? nmap.data() : nullptr, packed.data<T>());
  const cpu::PackedB<T> B{K, N, panel, packed.data<T>()};
  auto C0 = random_vec<T>(M * N, rng);
  std::vector<T> C = C0, R = C0;
  cpu::gemm_packed<T>(M, A.data(), lda, trans_a, B, bias ? b.data() : nullptr, accumulate, C.data(),
                      N, 0, B.panels());
  // Reference on the logical operand, unpacked by hand.
  std::vector<T> logical(K * N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      logical[k * N + n] = src[(maps ? kmap[k] : k) * N + (maps ? nmap[n] : n)];
  cpu::ref::gemm<T>(trans_a, false, M, N, K, A.data(), lda, logical.data(), N,
                    bias ? b.data() : nullptr, accumulate, R.data(), N);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C[i], R[i], gemm_tol<T>(K)) << where << " at row " << i / N << " col " << i % N;
  // The packed reference twin agrees too.
  std::vector<T> RP = C0;
  cpu::ref::gemm_packed<T>(M, A.data(), lda, trans_a, B, bias ? b.data() : nullptr, accumulate,
                           RP.data(), N, 0, B.panels());
  for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C[i], RP[i], gemm_tol<T>(K)) << where;
  // The same B packed in blocks of one unit (PackedB::sub: the layout of 16-register
  // targets) gives the same bits, and the packed reference twin reads that layout too.
  if (panel > cpu::kUnit<T>) {
    Tensor blocked = Tensor::empty({cpu::packed_size<T>(K, N, panel)}, dtype_of<T>());
    cpu::pack_b<T>(K, N, panel, src.data(), N, 1, maps ? kmap.data() : nullptr,
                   maps ? nmap.data() : nullptr, blocked.data<T>(), cpu::kUnit<T>);
    const cpu::PackedB<T> BB{K, N, panel, blocked.data<T>(), cpu::kUnit<T>};
    std::vector<T> CB = C0, RB = C0;
    cpu::gemm_packed<T>(M, A.data(), lda, trans_a, BB, bias ? b.data() : nullptr, accumulate,
                        CB.data(), N, 0, BB.panels());
    cpu::ref::gemm_packed<T>(M, A.data(), lda, trans_a, BB, bias ? b.data() : nullptr, accumulate,
                             RB.data(), N, 0, BB.panels());
    for (int64_t i = 0; i < M * N; ++i) {
      ASSERT_EQ(CB[i], C[i]) << where << " in blocks of a unit, at " << i;
      ASSERT_EQ(RB[i], RP[i]) << where << " reference in blocks of a unit, at " << i;
    }
  }
  if (trans_a) return;
  // Row invariance: every row computed alone, panel by panel, gives the same bits.
  for (int64_t m = 0; m < M; ++m) {
    std::vector<T> row(C0.begin() + m * N, C0.begin() + (m + 1) * N);
    for (int64_t p = 0; p < B.panels(); ++p)
      cpu::gemm_packed<T>(1, A.data() + m * K, K, false, B, bias ? b.data() : nullptr, accumulate,
                          row.data(), N, p, p + 1);
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(row[n], C[m * N + n]) << where << ": row " << m << " alone differs at col " << n;
  }
}

TEST(GemmPacked, MatchesReferenceAtTileEdgesF32) {
  std::mt19937_64 rng(1);
  for (int64_t units : {1, 2, 3})
    for (Shape3 s : {Shape3{1, 17, 5},
                     {2, 200, 33},
                     {3, 48, 1},
                     {5, 49, 191},
                     {6, 96, 192},
                     {7, 95, 193},
                     {8, 48, 144},
                     {9, 33, 32},
                     {13, 16, 300},
                     {15, 47, 2},
                     {17, 64, 257},
                     {97, 100, 64},
                     // B over 512 KB: the first row block prefetches it (streamed from L3).
                     {20, 400, 520}})
      for (bool ta : {false, true})
        check_packed<float>(s, units, ta, (s.M + units) % 2 == 0, s.K % 2 == 1, units == 3, rng);
}

TEST(GemmPacked, MatchesReferenceAtTileEdgesF64) {
  std::mt19937_64 rng(2);
  for (int64_t units : {1, 3})
    for (Shape3 s : {Shape3{1, 9, 3}, {2, 100, 200}, {6, 24, 31}, {7, 25, 400}, {50, 8, 9}})
      for (bool ta : {false, true})
        check_packed<double>(s, units, ta, s.M % 2 == 0, s.K % 2 == 0, units == 1, rng);
}

// K is chunked only where op(A) is larger than half the L2 (the size the OS reports): there, a
// chunked product (the whole A) still gives every row the bits it gets alone (unchunked),
// with and without the old C kept aside (accumulate), one and three units per panel.
// K 520: three chunks of kKc (whole panels in registers, AVX-512); K 4200: three of kWindowKc
// (panels in windows, AVX2 and below), each kernel's K whole at the other size.
TEST(GemmPacked, ChunkedAlongKOnlyChangesTheBlockingNotTheBits) {
  std::mt19937_64 rng(4);
  for (const int64_t K : {520, 4200}) {
    const int64_t M = cpu::l2_cache_bytes() / 2 / (K * int64_t(sizeof(float))) + 9;
    for (int64_t units : {1, 3})
      for (bool accumulate : {false, true})
        check_packed<float>({M, 49, K}, units, false, true, accumulate, false, rng);
  }
}

// Where a panel is computed in windows (16-register targets), the row blocks pass each window
// of B in groups of rows whose chunk of A takes half the L2, and with more rows in a group than
// columns in a call, the groups run outermost, each against every panel: more rows than one
// group (K 520, whole: groups of about L2 / 4160 rows) give the reference's values, the bits of
// B packed in blocks of a unit, and (A untransposed) every row the bits it gets alone;
// transposed (copied back to rows) or not, with and without the old C.
TEST(GemmPacked, RowGroupsOfTheWindowsKeepTheBits) {
  std::mt19937_64 rng(7);
  const int64_t K = 520;
  const int64_t M = cpu::l2_cache_bytes() / 2 / (174 * int64_t(sizeof(float))) + 40;
  for (bool accumulate : {false, true})
    for (bool ta : {false, true})
      check_packed<float>({M, 49, K}, 3, ta, true, accumulate, false, rng);
}

TEST(GemmPacked, PanelForPadsLeastPreferringTwoUnitsThenThree) {
  constexpr int64_t U = cpu::kUnit<float>;
  EXPECT_EQ(cpu::gemm_panel_for<float>(256), 2 * U);  // W4's dW_ih: not 3 units (288 columns)
  EXPECT_EQ(cpu::gemm_panel_for<float>(512), 2 * U);  // a tie with 1 unit
  EXPECT_EQ(cpu::gemm_panel_for<float>(144), 3 * U);
  EXPECT_EQ(cpu::gemm_panel_for<float>(U), U);
  for (int64_t N = 1; N <= 20 * U; ++N) {
    const int64_t p = cpu::gemm_panel_for<float>(N);
    const int64_t padded = cpu::packed_size<float>(1, N, p);
    for (int64_t q : {U, 2 * U, 3 * U}) {
      EXPECT_LE(padded, cpu::packed_size<float>(1, N, q)) << "N " << N << " panel " << p;
      if (q != p && padded == cpu::packed_size<float>(1, N, q)) {  // a tie: 2 units, then 3
        EXPECT_TRUE(p == 2 * U || (p == 3 * U && q == U)) << "N " << N << " panel " << p;
      }
    }
  }
}

// A transposed op(A) larger than half the L2 (the weight gradients' dL/dg^T) is copied chunk by
// chunk of K (k-major, or back to rows where panels are taken in windows) before the panels
// read it: every row still gets the bits it gets alone (one row of op(A), read in place,
// unchunked), and the bits of the same op(A) stored untransposed. One, two and three units per
// panel, with and without bias; with the old C added (accumulate: that path keeps K whole and
// reads A in place).
void check_transposed_chunks(int64_t K, std::mt19937_64& rng) {
  const int64_t N = 53;
  const int64_t M = cpu::l2_cache_bytes() / 2 / (K * int64_t(sizeof(float))) + 13;
  auto A = random_vec<float>(K * M, rng), src = random_vec<float>(K * N, rng);
  auto b = random_vec<float>(N, rng);
  std::vector<float> At(M * K);  // op(A) row-major
  for (int64_t k = 0; k < K; ++k)
    for (int64_t m = 0; m < M; ++m) At[m * K + k] = A[k * M + m];
  for (int64_t units : {1, 2, 3}) {
    const int64_t panel = units * cpu::kUnit<float>;
    Tensor packed = Tensor::empty({cpu::packed_size<float>(K, N, panel)}, DType::f32);
    cpu::pack_b<float>(K, N, panel, src.data(), N, 1, nullptr, nullptr, packed.data<float>());
    const cpu::PackedB<float> B{K, N, panel, packed.data<float>()};
    for (bool bias : {false, true})
      for (bool accumulate : {false, true}) {
        const std::string where = "panel " + std::to_string(panel) + (bias ? " bias" : "") +
                                  (accumulate ? " accumulate" : "");
        const auto C0 = random_vec<float>(M * N, rng);
        std::vector<float> C = C0, plain = C0;
        const float* bp = bias ? b.data() : nullptr;
        cpu::gemm_packed<float>(M, A.data(), M, true, B, bp, accumulate, C.data(), N, 0,
                                B.panels());
        cpu::gemm_packed<float>(M, At.data(), K, false, B, bp, accumulate, plain.data(), N, 0,
                                B.panels());
        ASSERT_EQ(C, plain) << where << ": transposed and plain op(A) differ";
        for (int64_t m = 0; m < M; m += 7) {
          std::vector<float> row(C0.begin() + m * N, C0.begin() + (m + 1) * N);
          cpu::gemm_packed<float>(1, A.data() + m, M, true, B, bp, accumulate, row.data(), N, 0,
                                  B.panels());
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(row[n], C[m * N + n]) << where << ": row " << m << " alone, col " << n;
        }
        std::vector<float> R = C0;
        cpu::ref::gemm<float>(true, false, M, N, K, A.data(), M, src.data(), N, bp, accumulate,
                              R.data(), N);
        for (int64_t i = 0; i < M * N; ++i)
          ASSERT_NEAR(C[i], R[i], gemm_tol<float>(K)) << where << " at " << i;
      }
  }
}

// K 520 and 4200: one chunk and three where the kernels take panels in windows (copied back to
// rows), several at both where they hold whole panels (copied k-major).
TEST(GemmPacked, ChunkedTransposedAIsCopiedChunkByChunkWithTheSameBits) {
  std::mt19937_64 rng(5);
  for (const int64_t K : {520, 4200}) check_transposed_chunks(K, rng);
}

// Row blocks for a thread's many rows: a multiple of 8 up to 96, the most that fit beside the
// panels in 7/8 of the L2, or 96 where the panels alone do not fit.
TEST(GemmPacked, RowBlockFitsBesideThePanelsInL2) {
  const int64_t l2 = cpu::l2_cache_bytes(), K = 256, panel = 3 * cpu::kUnit<float>;
  const int64_t max_panels = 2 * l2 / (K * panel * 4) + 2;
  bool some_fewer = false;
  for (int64_t p = 1; p <= max_panels; ++p) {
    const cpu::PackedB<float> B{K, p * panel, panel, nullptr};
    const int64_t rb = cpu::gemm_row_block(B, 0, p, K, 4);
    const int64_t b_bytes = p * panel * K * 4, per_row = (K + p * panel) * 4;
    const int64_t room = l2 / 8 * 7 - b_bytes;
    ASSERT_TRUE(rb % 8 == 0 && rb >= 8 && rb <= 96) << p << " panels: " << rb << " rows";
    if (room < 8 * per_row) {
      EXPECT_EQ(rb, 96) << p << " panels: B alone does not fit, so B streams: most rows";
    } else {
      EXPECT_LE(rb * per_row, room) << p << " panels: " << rb << " rows do not fit";
      EXPECT_TRUE(rb == 96 || (rb + 8) * per_row > room) << p << " panels: " << rb << " rows";
      some_fewer |= rb < 96;
    }
  }
  EXPECT_TRUE(some_fewer) << "no panel count between fitting easily and not at all";
}

// One and two threads, op(A) plain and transposed, small and larger than half the L2 (where
// one thread, too, takes the rows in blocks, and a transposed A is copied in chunks of K).
TEST(GemmPacked, ParallelEqualsSerialBitwise) {
  std::mt19937_64 rng(3);
  const int64_t K = 400, panel = 3 * cpu::kUnit<float>;
  const int64_t big = cpu::l2_cache_bytes() / 2 / (K * int64_t(sizeof(float))) + 37;
  for (const int64_t M : {int64_t(500), big})
    for (const int64_t N : {int64_t(300), int64_t(53)}) {
      auto A = random_vec<float>(M * K, rng), W = random_vec<float>(N * K, rng);
      Tensor packed = Tensor::empty({cpu::packed_size<float>(K, N, panel)}, DType::f32);
      cpu::pack_b<float>(K, N, panel, W.data(), 1, K, nullptr, nullptr, packed.data<float>());
      const cpu::PackedB<float> B{K, N, panel, packed.data<float>()};
      for (bool ta : {false, true}) {
        const int64_t lda = ta ? M : K;  // the same values read as op(A) = A or (A^T)^T
        std::vector<float> Ao(M * K);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k) Ao[ta ? k * M + m : m * K + k] = A[m * K + k];
        std::vector<float> serial(M * N);
        cpu::gemm_packed<float>(M, Ao.data(), lda, ta, B, nullptr, false, serial.data(), N, 0,
                                B.panels());
        const int before = omp_get_max_threads();
        for (int threads : {1, 2}) {
          std::vector<float> parallel(M * N);
          omp_set_num_threads(threads);
          cpu::gemm_packed_parallel<float>(M, Ao.data(), lda, ta, B, nullptr, false,
                                           parallel.data(), N);
          omp_set_num_threads(before);
          EXPECT_EQ(serial, parallel)
              << "M " << M << " N " << N << " transposed " << ta << ", " << threads << " threads";
        }
      }
    }
}

// pack_b with each source column contiguous along k (W^T, the transposing path, 4 x 4 tiles in
// registers): every packed element, at K and N around the tile and the panel, with a column map.
template <typename T>
void check_pack_transposed(int64_t K, int64_t N, int64_t units, bool map, std::mt19937_64& rng) {
  const int64_t panel = units * cpu::kUnit<T>;
  auto W = random_vec<T>(N * K, rng);  // (N x K): column n of B is row n of W
  std::vector<int64_t> nmap(N);
  for (int64_t n = 0; n < N; ++n) nmap[n] = N - 1 - n;
  std::vector<T> packed(cpu::packed_size<T>(K, N, panel), T(-7));
  cpu::pack_b<T>(K, N, panel, W.data(), 1, K, nullptr, map ? nmap.data() : nullptr, packed.data());
  for (int64_t p = 0; p * panel < N; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < panel; ++j) {
        const int64_t n = p * panel + j;
        const T want = n < N ? W[(map ? nmap[n] : n) * K + k] : T(0);
        ASSERT_EQ(packed[(p * K + k) * panel + j], want)
            << "K=" << K << " N=" << N << " panel=" << panel << (map ? " map" : "") << " k=" << k
            << " n=" << n;
      }
}

// The layout packers choose follows the SIMD target in use: whole panels where a vector is
// 64 bytes (AVX-512: a micro-kernel holds a panel's width), blocks of a unit below that.
TEST(PackB, SubPanelFollowsTheTargetsVectorWidth) {
#if !HWY_ARCH_X86
  GTEST_SKIP() << "x86 targets only";
#endif
  // x86 targets better than AVX2 (lower bits) are the AVX-512 ones.
  const int64_t t = cpu::simd_target_bit();
  const bool wide = t < HWY_AVX2;
  EXPECT_EQ(cpu::gemm_sub_panel<float>(), wide ? 0 : cpu::kUnit<float>) << hwy::TargetName(t);
  EXPECT_EQ(cpu::gemm_sub_panel<double>(), wide ? 0 : cpu::kUnit<double>) << hwy::TargetName(t);
}

// pack_b in blocks (PackedB::sub): panel p's block b is K x sub row-major, after the blocks
// before it; both packing paths (columns contiguous along k, and rows with maps).
TEST(PackB, BlocksOfAUnitHoldTheLogicalOperand) {
  std::mt19937_64 rng(6);
  constexpr int64_t U = cpu::kUnit<float>;
  for (int64_t K : {1, 5, 17})
    for (int64_t N : {15, 48, 100})
      for (int64_t units : {2, 3})
        for (bool transposed : {false, true}) {
          const int64_t panel = units * U;
          auto src = random_vec<float>(N * K, rng);
          std::vector<int64_t> kmap(K);
          for (int64_t k = 0; k < K; ++k) kmap[k] = K - 1 - k;
          // B(k, n) = src[n * K + k] (transposed path) or src[kmap[k] * N + n] (rows).
          std::vector<float> packed(cpu::packed_size<float>(K, N, panel), -7.f);
          if (transposed)
            cpu::pack_b<float>(K, N, panel, src.data(), 1, K, nullptr, nullptr, packed.data(), U);
          else
            cpu::pack_b<float>(K, N, panel, src.data(), N, 1, kmap.data(), nullptr, packed.data(),
                               U);
          for (int64_t n = 0; n < (N + panel - 1) / panel * panel; ++n)
            for (int64_t k = 0; k < K; ++k) {
              const int64_t p = n / panel, j = n % panel;
              const float want = n >= N ? 0.f : transposed ? src[n * K + k] : src[kmap[k] * N + n];
              ASSERT_EQ(packed[p * K * panel + j / U * K * U + k * U + j % U], want)
                  << "K=" << K << " N=" << N << " panel=" << panel
                  << (transposed ? " transposed" : "") << " k=" << k << " n=" << n;
            }
        }
}

TEST(PackB, TransposedMatchesLogicalOperand) {
  std::mt19937_64 rng(5);
  for (int64_t K : {1, 3, 4, 5, 8, 17})
    for (int64_t N : {1, 15, 16, 33, 50})
      for (int64_t units : {1, 2, 3}) {
        check_pack_transposed<float>(K, N, units, (K + N) % 2 == 0, rng);
        check_pack_transposed<double>(K, N, units, (K + N) % 2 == 1, rng);
      }
}

// gemm_b_rows (B's rows read in place at offsets, unaligned, overlapping) and gemm_a_rows (A's
// rows read in place, B packed, accumulate) against the reference on the operands written
// out, at rows around the micro-kernel height, columns around the panel, K around the chunk.
template <typename T>
void check_rows(int64_t M, int64_t N, int64_t K, int64_t units, bool accumulate,
                std::mt19937_64& rng) {
  const std::string where = "M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + " units=" + std::to_string(units) +
                            (accumulate ? " accumulate" : "");
  // Rows start at scattered, overlapping, unaligned places of one source array; gemm_b_rows
  // may read up to a panel past each row.
  const int64_t P = 3 * cpu::kUnit<T>;
  const int64_t span = 3 * (std::max(N, K) + P);
  auto src = random_vec<T>(span + std::max(N, K) + P, rng);
  std::vector<int64_t> offs(std::max(M, K));
  for (size_t i = 0; i < offs.size(); ++i) offs[i] = int64_t(rng() % uint64_t(span));
  auto A = random_vec<T>(M * K, rng);
  std::vector<T> logical_b(K * N), logical_a(M * K);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) logical_b[k * N + n] = src[offs[k] + n];
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) logical_a[m * K + k] = src[offs[m] + k];

  std::vector<T> C(M * N), R(M * N, T(0));
  cpu::gemm_b_rows<T>(M, A.data(), K, K, N, src.data(), offs.data(), C.data(), N);
  cpu::ref::gemm<T>(false, false, M, N, K, A.data(), K, logical_b.data(), N, nullptr, false,
                    R.data(), N);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C[i], R[i], gemm_tol<T>(K)) << "gemm_b_rows " << where << " at " << i;

  const int64_t panel = units * cpu::kUnit<T>;
  auto Bsrc = random_vec<T>(K * N, rng);
  Tensor packed =
      Tensor::empty({std::max<int64_t>(1, cpu::packed_size<T>(K, N, panel))}, dtype_of<T>());
  cpu::pack_b<T>(K, N, panel, Bsrc.data(), N, 1, nullptr, nullptr, packed.data<T>());
  auto C0 = random_vec<T>(M * N, rng);
  C = C0;
  R = C0;
  cpu::gemm_a_rows<T>(M, src.data(), offs.data(), {K, N, panel, packed.data<T>()}, accumulate,
                      C.data(), N);
  cpu::ref::gemm<T>(false, false, M, N, K, logical_a.data(), K, Bsrc.data(), N, nullptr, accumulate,
                    R.data(), N);
  for (int64_t i = 0; i < M * N; ++i)
    ASSERT_NEAR(C[i], R[i], gemm_tol<T>(K)) << "gemm_a_rows " << where << " at " << i;
  // B in blocks of one unit (PackedB::sub): the same bits.
  if (panel > cpu::kUnit<T>) {
    cpu::pack_b<T>(K, N, panel, Bsrc.data(), N, 1, nullptr, nullptr, packed.data<T>(),
                   cpu::kUnit<T>);
    std::vector<T> CB = C0;
    cpu::gemm_a_rows<T>(M, src.data(), offs.data(), {K, N, panel, packed.data<T>(), cpu::kUnit<T>},
                        accumulate, CB.data(), N);
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_EQ(CB[i], C[i]) << "gemm_a_rows in blocks of a unit " << where << " at " << i;
  }
}

TEST(GemmRows, MatchReferenceAtTileEdges) {
  std::mt19937_64 rng(6);
  for (Shape3 s : {Shape3{1, 1, 1},
                   {2, 47, 5},
                   {3, 48, 144},
                   {7, 49, 31},
                   {8, 96, 257},
                   {9, 100, 300},
                   {16, 145, 8},
                   {17, 33, 64}})
    for (int64_t units : {1, 2, 3}) {
      check_rows<float>(s.M, s.N, s.K, units, units != 2, rng);
      check_rows<double>(s.M, s.N, s.K, units, units == 2, rng);
    }
}

// cpu::gemm (op(B) packed per call) against the reference for every transpose combination,
// with bias and accumulate, at the panel-width choices and tails; then its promises: a row's
// bits do not depend on the other rows or the thread count, and equal those of the packed
// kernel the GRU uses. Nothing here goes near the machine's BLAS.
template <typename T>
void check_gemm(Shape3 s, bool ta, bool tb, bool bias, bool accumulate, std::mt19937_64& rng) {
  const int64_t M = s.M, N = s.N, K = s.K;
  const std::string where = "M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + (ta ? " trans_a" : "") +
                            (tb ? " trans_b" : "") + (bias ? " bias" : "") +
                            (accumulate ? " accumulate" : "");
  // Leading dimensions wider than the rows, so strides are exercised.
  const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
  auto A = random_vec<T>((ta ? K : M) * lda, rng), B = random_vec<T>((tb ? N : K) * ldb, rng);
  auto b = random_vec<T>(N, rng), C0 = random_vec<T>(M * ldc, rng);
  std::vector<T> C = C0, R = C0;
  cpu::gemm<T>(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, bias ? b.data() : nullptr, accumulate,
               C.data(), ldc);
  cpu::ref::gemm<T>(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, bias ? b.data() : nullptr,
                    accumulate, R.data(), ldc);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      ASSERT_NEAR(C[m * ldc + n], R[m * ldc + n], gemm_tol<T>(K) * (accumulate ? 2 : 1))
          << where << " at row " << m << " col " << n;
  for (int64_t m = 0; m < M; ++m)  // the padding between rows is never written
    for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(C[m * ldc + n], C0[m * ldc + n]) << where;
  // Row invariance: each row alone gives the same bits as inside the whole product.
  for (int64_t m = 0; m < M; m += std::max<int64_t>(1, M / 4)) {
    std::vector<T> row(C0.begin() + m * ldc, C0.begin() + m * ldc + N);
    cpu::gemm<T>(ta, tb, 1, N, K, ta ? A.data() + m : A.data() + m * lda, lda, B.data(), ldb,
                 bias ? b.data() : nullptr, accumulate, row.data(), N);
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(row[n], C[m * ldc + n]) << where << ": row " << m << " alone differs at col " << n;
  }
}

TEST(Gemm, MatchesReferenceAllTransposes) {
  std::mt19937_64 rng(4);
  for (Shape3 s : {Shape3{1, 1, 1},
                   {2, 7, 3},
                   {7, 9, 11},
                   {8, 16, 256},
                   {9, 17, 257},
                   {33, 47, 64},
                   {40, 96, 100},
                   {3, 130, 513}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm<float>(s, ta, tb, (s.M + ta) % 2 == 0, (s.N + tb) % 2 == 1, rng);
        check_gemm<double>(s, ta, tb, (s.M + tb) % 2 == 1, (s.K + ta) % 2 == 0, rng);
      }
}

TEST(Gemm, KZeroGivesBiasPlusOldC) {
  std::vector<double> C{1, 2}, A, B, bias{10, 20};
  cpu::gemm<double>(false, false, 1, 2, 0, A.data(), 1, B.data(), 2, bias.data(), true, C.data(),
                    2);
  EXPECT_EQ(C, (std::vector<double>{11, 22}));
  cpu::gemm<double>(false, false, 1, 2, 0, A.data(), 1, B.data(), 2, nullptr, false, C.data(), 2);
  EXPECT_EQ(C, (std::vector<double>{0, 0}));
}

TEST(Gemm, PanelWidthPadsLeast) {
  EXPECT_EQ(cpu::gemm_panel_width<float>(48), 48);
  EXPECT_EQ(cpu::gemm_panel_width<float>(64), 32);  // 2 panels of 32, not 48 + 16 of 48
  EXPECT_EQ(cpu::gemm_panel_width<float>(16), 16);
  EXPECT_EQ(cpu::gemm_panel_width<float>(5), 16);
  EXPECT_EQ(cpu::gemm_panel_width<double>(24), 24);
  EXPECT_EQ(cpu::gemm_panel_width<double>(16), 16);
}

// Same bits on 1, 2 and 3 threads, and the same bits as the packed kernel (the GRU's) on the
// same operands: grux computes every product one way.
TEST(Gemm, SameBitsOnAnyThreadCountAndAsPacked) {
  std::mt19937_64 rng(5);
  const int64_t M = 700, N = 260, K = 300;  // large enough to be split over the threads
  auto A = random_vec<float>(M * K, rng), W = random_vec<float>(N * K, rng);
  auto b = random_vec<float>(N, rng);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    out.emplace_back(M * N);
    cpu::gemm<float>(false, true, M, N, K, A.data(), K, W.data(), K, b.data(), false,
                     out.back().data(), N);
  }
  omp_set_num_threads(before);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
  const int64_t panel = 3 * cpu::kUnit<float>;
  Tensor packed = Tensor::empty({cpu::packed_size<float>(K, N, panel)}, DType::f32);
  cpu::pack_b<float>(K, N, panel, W.data(), 1, K, nullptr, nullptr, packed.data<float>());
  std::vector<float> via_packed(M * N);
  cpu::gemm_packed<float>(M, A.data(), K, false, {K, N, panel, packed.data<float>()}, b.data(),
                          false, via_packed.data(), N, 0, (N + panel - 1) / panel);
  EXPECT_EQ(out[0], via_packed);
}

}  // namespace
}  // namespace grux::test_gemm
