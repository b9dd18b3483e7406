// The packed GEMM's kernels (gemm_packed.cpp for f32, gemm_packed_f64.cpp for f64; two
// translation units so that a build compiles them side by side: together they are most of a
// Release build's compile time). A Highway "-inl" header: included once per SIMD
// target by a file that includes hwy/foreach_target.h (the guard below flips with
// HWY_TARGET_TOGGLE).
#if defined(GRUX_CPU_GEMM_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GRUX_CPU_GEMM_PACKED_INL_H_
#undef GRUX_CPU_GEMM_PACKED_INL_H_
#else
#define GRUX_CPU_GEMM_PACKED_INL_H_
#endif

#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

#include "cpu/gemm_packed.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A product whose op(A) (M x K) is larger than half the L2 is processed in equal chunks of K
// of at most kKc (kWindowKc where the kernels take a panel in windows; a transposed A, copied
// chunk by chunk, in longer ones: TransposedChunkLength), so that a chunk of A's rows stays in
// L2 while every panel passes (GemmPanelsChunked) and a panel's chunk stays near L1. Partial
// sums pass between chunks through C exactly (they are already rounded to T), so chunking does
// not change results. A smaller op(A) stays in L2 whole, and there chunks only cost: the
// recurrent product of W3 (M 64, K 512) runs 3% faster unchunked alone and 5% faster between
// the gates.
constexpr int64_t kKc = 256;
// Where a micro-kernel takes a panel in windows of two vectors (AVX2 and below: WindowVectors),
// a window's chunk of B is one contiguous block of 64 bytes a k, which streams from L2 at the
// FMAs' rate, and each chunk boundary costs a pass of partial sums through C and rows of A
// read in runs too short for the prefetchers (a kKc chunk of a row is 16 lines). On an AVX2
// core with a 512 KiB L2, f32 at one thread: 1536^3 at 0.73x OpenBLAS's rate in chunks of 256,
// 0.96x unchunked; K 4096 and 8192 as fast in chunks of 2048 as unchunked, a third slower in
// chunks of 256-512.
constexpr int64_t kWindowKc = 2048;
constexpr bool kWindowed = HWY_MAX_BYTES < 64;  // WindowsPanels() of this target
// K in equal chunks of at most `most`.
inline int64_t EqualChunks(int64_t K, int64_t most) {
  const int64_t chunks = (K + most - 1) / most;
  return chunks <= 1 ? K : (K + chunks - 1) / chunks;
}
template <typename T>
int64_t ChunkLength(int64_t M, int64_t K) {
  if (M * K * int64_t(sizeof(T)) <= l2_cache_bytes() / 2) return K;
  return EqualChunks(K, kWindowed ? kWindowKc : kKc);
}
// The chunks of a transposed A copied k-major (GemmPanelsChunked): as long as the copy (M x kc)
// takes at most a quarter of the L2, and at least kKc. Every chunk ends with C written and the
// next begins by reading it back, and every micro-tile pays its start and its end once per
// chunk: fewer, longer chunks pay both less often (W4's dW_hh, M 1536, K 6400, N 512, with a
// 2 MiB L2: about 10% faster in chunks of 1280 than of 256). A copy too large for the L2 loses
// more than that (M 1536 on one thread: half the rate in chunks of 1600).
template <typename T>
int64_t TransposedChunkLength(int64_t M, int64_t K) {
  const int64_t fit = l2_cache_bytes() / 4 / (std::max<int64_t>(M, 1) * int64_t(sizeof(T)));
  return EqualChunks(K, std::max(kKc, fit));
}

// ---- Operands ----------------------------------------------------------------------------
// The micro-kernel reads op(A) one element at a time (broadcast) and B one vector at a time,
// through these. A: plain (row stride lda, or transposed) or a table of row starts; B: the
// packed panels, or a table of row starts (rows of some other array read in place).

template <bool TA, typename T>
struct APlain {
  const T* A;
  int64_t lda;
  APlain from_row(int64_t m) const { return {TA ? A + m : A + m * lda, lda}; }
  template <int MR>
  const APlain& block() const {
    return *this;
  }
  T at(int r, int64_t k) const { return TA ? A[k * lda + r] : A[r * lda + k]; }
};

// A chunk of a transposed A, k0 <= k < k0 + kc, copied k-major: element (r, k) of op(A) at
// P[(k - k0) * ld + r] (GemmPanelsChunked).
template <typename T>
struct AChunkT {
  const T* P;
  int64_t ld, k0;
  AChunkT from_row(int64_t m) const { return {P + m, ld, k0}; }
  template <int MR>
  const AChunkT& block() const {
    return *this;
  }
  T at(int r, int64_t k) const { return P[(k - k0) * ld + r]; }
};

// A chunk of a transposed A, k0 <= k < k0 + kc, copied back to rows: element (r, k) of op(A)
// at P[r * ld + k - k0] (GemmPanelsChunked, windowed targets).
template <typename T>
struct AChunkRows {
  const T* P;
  int64_t ld, k0;
  AChunkRows from_row(int64_t m) const { return {P + m * ld, ld, k0}; }
  template <int MR>
  const AChunkRows& block() const {
    return *this;
  }
  T at(int r, int64_t k) const { return P[r * ld + (k - k0)]; }
};

template <typename T>
struct ARows {
  const T* base;
  const int64_t* offsets;  // row m of A is base + offsets[m]
  ARows from_row(int64_t m) const { return {base, offsets + m}; }
  template <int MR>
  struct Block {
    const T* row[MR];
    T at(int r, int64_t k) const { return row[r][k]; }
  };
  template <int MR>
  Block<MR> block() const {
    Block<MR> b;
    for (int r = 0; r < MR; ++r) b.row[r] = base + offsets[r];
    return b;
  }
};

// How far ahead (in k rows of a panel) the first row block prefetches a B that streams from
// L3 or DRAM: 32 rows of a 3-unit f32 panel are 6 KB, about one DRAM latency of FMAs ahead.
// On `grux bench gru t32n16i2048h2048 --threads 1` (W_hh 50 MB) 24 or 32 rows take about 10%
// less time than none, 7% less than 16 or 64.
constexpr int64_t kPrefetchRows = 32;

// Shortest k loop of a micro-kernel that prefetches its block of C (about one L3 latency of
// FMAs at 8 rows x 3 vectors).
constexpr int64_t kPrefetchCMinK = 32;

// Panel p (P columns) of a packed B at data + p * K * P (64-byte aligned): K x P row-major,
// or (PackedB::sub) blocks of w columns one after another, each K x w row-major.
template <int64_t P, typename T>
struct BPacked {
  const T* data;
  int64_t K;
  int64_t pf = 0;  // software-prefetch this many k rows ahead (0: none)
  int64_t w = P;   // columns per block (P: the whole panel)
  BPacked from_panel(int64_t p) const { return {data + p * K * P, K, pf, w}; }
  BPacked without_prefetch() const { return {data, K, 0, w}; }
  // Column j of panel p (its vector at k row k: load / prefetch): where it starts and its
  // k stride, computed once per micro-kernel call.
  struct Column {
    const T* c;
    int64_t w, pf;
    void prefetch(int64_t k) const {
      if (pf != 0) hwy::Prefetch(c + (k + pf) * w);
    }
    template <class D>
    hn::Vec<D> load(D d, int64_t k) const {
      return hn::Load(d, c + k * w);
    }
  };
  Column column(int p, int64_t j) const {
    return {data + p * K * P + j / w * (K * w) + j % w, w, pf};
  }
};

// B(k, n) = base[offsets[k] + n]: rows read in place, unaligned.
template <int64_t P, typename T>
struct BRows {
  const T* base;
  const int64_t* offsets;
  BRows from_panel(int64_t p) const { return {base + p * P, offsets}; }
  BRows without_prefetch() const { return *this; }
  void prefetch(int, int64_t, int64_t) const {}
  struct Column {
    const T* c;
    const int64_t* offsets;
    void prefetch(int64_t) const {}
    template <class D>
    hn::Vec<D> load(D d, int64_t k) const {
      return hn::LoadU(d, c + offsets[k]);
    }
  };
  Column column(int p, int64_t j) const { return {base + p * P + j, offsets}; }
};

// ---- Kernels -----------------------------------------------------------------------------

// Rows MR x W vectors of a group of NP panels, each panel S units wide: the group's vectors
// [v0, v0 + W), vector v at panel v / NV, columns (v % NV) L.. of it (a window of the group
// where registers are too few for all of it, AVX2; W = NP NV otherwise). n_cols counts from
// the group's first column; C, bias and c_old point at it too. acc starts at zero (first
// chunk) or at the partial sums in C; after the last chunk, bias and the saved old C are added.
template <int MR, int W, int NP, int S, class AOp, class BOp, typename T>
HWY_INLINE void MicroKernel(int64_t k0, int64_t k1, bool first, bool last, const AOp& a_op,
                            const BOp& b_op, int64_t v0, int64_t n_cols, const T* bias,
                            const T* c_old, int64_t ld_old, T* C, int64_t ldc) {
  const hn::ScalableTag<T> d;
  constexpr int64_t L = HWY_LANES(T);
  constexpr int64_t P = S * kUnit<T>;            // columns per panel
  constexpr int64_t NV = P / L > 0 ? P / L : 1;  // vectors per panel row
  using Vec = hn::Vec<decltype(d)>;
  constexpr int64_t kVectorsPerLine = std::max<int64_t>(1, 64 / int64_t(sizeof(T)) / L);
  const auto A = a_op.template block<MR>();
  Vec acc[MR][W];
  // Where the window's vectors are in the packed panels.
  typename BOp::Column bc[W];
  for (int w = 0; w < W; ++w)
    bc[w] = b_op.column(static_cast<int>((v0 + w) / NV), (v0 + w) % NV * L);
  const int64_t col0 = v0 * L;
  C += col0;
  if (bias) bias += col0;
  if (c_old) c_old += col0;
  // A full window is loaded and stored as vectors straight from / to C; only a partial one
  // at the end of the last panel goes through tmp (its columns past N must not be touched).
  const int64_t cols = std::min<int64_t>(n_cols - col0, W * L);
  const bool full = cols == W * L;
  HWY_ALIGN T tmp[W * L];
  for (int r = 0; r < MR; ++r) {
    if (first) {
      for (int w = 0; w < W; ++w) acc[r][w] = hn::Zero(d);
    } else if (full) {  // continue the chain from the partial sums stored in C
      for (int w = 0; w < W; ++w) acc[r][w] = hn::LoadU(d, C + r * ldc + w * L);
    } else {
      std::memcpy(tmp, C + r * ldc, cols * sizeof(T));
      std::fill(tmp + cols, tmp + W * L, T(0));
      for (int w = 0; w < W; ++w) acc[r][w] = hn::Load(d, tmp + w * L);
    }
  }
  // The block of C this call stores, requested now (for writing) so that its lines arrive
  // during the k loop: a C written once and not read since (the input projection of a whole
  // sequence: megabytes) otherwise misses at every store (W3's input projection: about 8% less
  // time, half of what a C in cache would save). Short loops do not hide the fetch.
  if (first && k1 - k0 >= kPrefetchCMinK)
    for (int r = 0; r < MR; ++r)
      for (int64_t w = 0; w < W; w += kVectorsPerLine)
        __builtin_prefetch(C + r * ldc + w * L, /*write=*/1, /*locality=*/3);
  for (int64_t k = k0; k < k1; ++k) {
    Vec b[W];
    for (int w = 0; w < W; ++w) {
      if (w % kVectorsPerLine == 0) bc[w].prefetch(k);
      b[w] = bc[w].load(d, k);
    }
    for (int r = 0; r < MR; ++r) {
      const Vec a = hn::Set(d, A.at(r, k));
      for (int w = 0; w < W; ++w) acc[r][w] = hn::MulAdd(a, b[w], acc[r][w]);
    }
  }
  // Bias, then the old C: the same two additions, in the same order, vector or scalar.
  for (int r = 0; r < MR; ++r) {
    T* c = C + r * ldc;
    if (full) {
      for (int w = 0; w < W; ++w) {
        Vec x = acc[r][w];
        if (last && bias) x = hn::Add(x, hn::LoadU(d, bias + w * L));
        if (last && c_old) x = hn::Add(x, hn::LoadU(d, c_old + r * ld_old + w * L));
        hn::StoreU(x, d, c + w * L);
      }
      continue;
    }
    for (int w = 0; w < W; ++w) hn::Store(acc[r][w], d, tmp + w * L);
    if (!last) {
      std::memcpy(c, tmp, cols * sizeof(T));
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      T x = tmp[j];
      if (bias) x += bias[j];
      if (c_old) x += c_old[r * ld_old + j];
      c[j] = x;
    }
  }
}

// Rows per micro-kernel, at most. 8 rather than 6: conv2d's 32-filter GEMMs run as 4 x 8 rows
// instead of 5 x 6 + 2 (n8c16h64w64d32k3's forward 5% faster); GRU-shaped products run the
// same within noise.
constexpr int kMaxMr = 8;

// Vectors of a panel group (NVT of them) one micro-kernel computes, with kRegs vector registers:
// MR x W accumulators + W operands + 1 broadcast. All of them when that leaves at least 4 rows
// (1 for a product of one or two rows, `few`); otherwise a window: 2 vectors (AVX2's 16
// registers: 6 rows x 16 columns), or for few rows the widest that holds two rows: 1-row
// blocks of a whole panel (6 accumulators) would load once per FMA and run at about half the
// rate.
constexpr int WindowVectors(int nvt, int regs, bool few) {
  if ((regs - nvt - 1) / nvt >= (few ? 1 : 4)) return nvt;
  int w = 1;
  for (int v = 1; v <= nvt; ++v)
    if (nvt % v == 0 && (few ? 3 * v + 1 <= regs : v <= 2)) w = v;
  return w;
}

// Rows of A whose chunk of kc columns takes at most half the L2: a group of rows that stays
// there while windows of B pass (RowsTimesPanels, GemmPanels), a multiple of mr (at least mr).
template <typename T>
int64_t WindowGroupRows(int64_t kc, int64_t mr) {
  return std::max<int64_t>(
      mr, l2_cache_bytes() / 2 / (std::max<int64_t>(kc, 1) * int64_t(sizeof(T))) / mr * mr);
}

// Rows [0, M) against NP consecutive panels (or one), for the K chunks that start in
// [kb, ke) (all of them by default); `few`: M is 1 or 2.
template <int NP, int S, bool kFew, class AOp, class BOp, typename T>
void RowsTimesPanels(int64_t M, int64_t K, const AOp& a_op, const BOp& b_op, int64_t n_cols,
                     const T* bias, bool accumulate, T* C, int64_t ldc, int64_t kb, int64_t ke,
                     int64_t kc) {
  constexpr int64_t P = S * kUnit<T>;
  constexpr int64_t L = HWY_LANES(T);
  constexpr int NVT = NP * static_cast<int>(P / L > 0 ? P / L : 1);
  constexpr int kRegs = HWY_MAX_BYTES >= 64 ? 32 : 16;
  constexpr int W = WindowVectors(NVT, kRegs, kFew);
  // A product of few rows has at most two (and no tail kernels are compiled for more).
  constexpr int kMr = std::clamp<int>((kRegs - W - 1) / W, 1, kFew ? 2 : kMaxMr);
  // Accumulating into C across K chunks needs the old C kept aside: rows of up to kMr
  // are saved in a small buffer (C's old values are added after the last chunk).
  const bool chunked = kc < K;
  HWY_ALIGN T saved[kMr * NP * P];
  const int64_t cols = std::min<int64_t>(n_cols, NP * P);
  const BOp b_rest = b_op.without_prefetch();  // rows after the first find B in cache
  // The windows past the last real column (a partial last panel) are skipped.
  const int64_t v_end = std::min<int64_t>(NVT, (cols + L - 1) / L);
  auto rows = [&](auto mr_tag, int64_t m) {
    constexpr int MR = decltype(mr_tag)::value;
    const AOp a = a_op.from_row(m);
    T* c = C + m * ldc;
    const T* old = nullptr;
    int64_t ld_old = ldc;
    if (accumulate) {
      if (chunked) {
        for (int r = 0; r < MR; ++r) std::memcpy(saved + r * cols, c + r * ldc, cols * sizeof(T));
        old = saved;
        ld_old = cols;
      } else {
        old = c;
      }
    }
    for (int64_t k0 = kb; k0 < ke || k0 == 0; k0 += kc) {
      const int64_t k1 = std::min(K, k0 + kc);
      for (int64_t v = 0; v < v_end; v += W)
        MicroKernel<MR, W, NP, S>(k0, k1, k0 == 0, k1 == K, a, m == 0 ? b_op : b_rest, v, cols,
                                  bias, old, ld_old, c, ldc);
      if (K == 0) break;
    }
  };
  // Every row block of [m0, m1) with f (full blocks of kMr, then the last (m1 - m0) % kMr rows as
  // blocks of 4, 2 and 1, at most one each as kMr <= 8): every row gets the same FMA chains
  // whatever block it is in, and three tail kernels instead of seven keep this file's compile
  // time down (it is most of the build's).
  static_assert(kMr <= 8);
  auto each_block = [&](int64_t m0, int64_t m1, auto&& f) {
    int64_t m = m0;
    for (; m + kMr <= m1; m += kMr) f(std::integral_constant<int, kMr>{}, m);
    if constexpr (kMr > 4)
      if (m1 - m >= 4) f(std::integral_constant<int, 4>{}, m), m += 4;
    if constexpr (kMr > 2)
      if (m1 - m >= 2) f(std::integral_constant<int, 2>{}, m), m += 2;
    if constexpr (kMr > 1)
      if (m1 - m >= 1) f(std::integral_constant<int, 1>{}, m);
  };
  if (W < NVT && !(accumulate && chunked)) {
    // Windows: each window's chunk of B (kc x W vectors: 16 KB at kc 256 on AVX2) stays in L1 while
    // the row blocks pass, reading A from L2 (in groups of rows whose chunk of A takes at most half
    // of it). With the row block outermost, every block would read the windows of B from L2 (a
    // 48-column panel's chunk is 48 KB): 64 bytes a k, where A's rows bring 24 (large products
    // 3-6% faster this way). The same chains in the same order: the same bits. (With the old C
    // kept aside across chunks, blocks keep the order below.)
    const int64_t group = WindowGroupRows<T>(kc, kMr);
    for (int64_t g0 = 0; g0 < M; g0 += group) {
      const int64_t g1 = std::min(M, g0 + group);
      for (int64_t k0 = kb; k0 < ke || k0 == 0; k0 += kc) {
        const int64_t k1 = std::min(K, k0 + kc);
        for (int64_t v = 0; v < v_end; v += W)
          each_block(g0, g1, [&](auto mr_tag, int64_t m) {
            constexpr int MR = decltype(mr_tag)::value;
            T* c = C + m * ldc;
            MicroKernel<MR, W, NP, S>(k0, k1, k0 == 0, k1 == K, a_op.from_row(m),
                                      m == g0 ? b_op : b_rest, v, cols, bias,
                                      accumulate ? c : nullptr, ldc, c, ldc);
          });
        if (K == 0) break;
      }
    }
    return;
  }
  each_block(0, M, rows);
}

template <int S, class AOp, class BOp, typename T>
void GemmPanels(int64_t M, int64_t K, int64_t N, const AOp& a, const BOp& b, const T* bias,
                bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1, int64_t kb, int64_t ke,
                int64_t kc) {
  constexpr int64_t P = S * kUnit<T>;
  if constexpr (kWindowed) {
    // Each call of RowsTimesPanels below reads all of A's rows (in groups that stay in L2,
    // WindowGroupRows) against its cols columns of B. With the groups outermost instead, each
    // group's rows are read from beyond L2 once and B once per group: less traffic where a
    // group has more rows than a call has columns, and B, then read again and again, is the
    // smaller operand (more likely to stay in L3). On an AVX2 core with a 512 KiB L2 (B packed
    // once): M 6400, K 256, N 1536 0.53-0.69x OpenBLAS's rate panel by panel, 0.98-1.05x group
    // by group; M 2048, K 4096 (chunks of 2048: groups of 30) 0.88x -> 0.72x; M 512, K 512, N
    // 4096 1.01-1.02x -> 0.68-0.97x. Rows get the same chains in any grouping: the same bits.
    constexpr int64_t cols = (S == 1 ? 3 : S == 2 ? 2 : 1) * P;
    constexpr int64_t kMr = 6;  // every windowed kernel's row block (16 vector registers)
    const int64_t group = WindowGroupRows<T>(kc, kMr);
    if (M > 2 && M > group && group > cols && M >= (p1 - p0) * P) {
      for (int64_t g0 = 0; g0 < M; g0 += group)
        GemmPanels<S>(std::min(group, M - g0), K, N, a.from_row(g0), b, bias, accumulate,
                      C + g0 * ldc, ldc, p0, p1, kb, ke, kc);
      return;
    }
  }
  int64_t p = p0;
  auto run = [&](auto np_tag, auto few_tag) {
    constexpr int NP = decltype(np_tag)::value;
    RowsTimesPanels<NP, S, decltype(few_tag)::value>(M, K, a, b.from_panel(p), N - p * P,
                                                     bias ? bias + p * P : nullptr, accumulate,
                                                     C + p * P, ldc, kb, ke, kc);
  };
  using Few = std::true_type;
  using Many = std::false_type;
  // Few rows, or narrow panels: several panels at once give the FMA pipes enough independent
  // chains (a panel's element chains are the same whichever panels it is grouped with).
  // Only for a plain row-major A (the recurrent products at batch 1 and 2, depthwise
  // convolutions): a transposed or gathered A of one or two rows is rare, and the kernels of
  // many rows compute it too (slower, same bits). Each set of kernels costs compile time.
  if constexpr (std::is_same_v<AOp, APlain<false, T>>) {
    if (M <= 2) {
      // Groups of 4, and the rest as groups of 3 or 2 (4 + 1 as 3 + 2): a lone panel of one
      // row has too few independent chains to hide the FMA latency.
      for (; p + 4 <= p1 && p1 - p != 5; p += 4) run(std::integral_constant<int, 4>{}, Few{});
      if (p + 3 <= p1) run(std::integral_constant<int, 3>{}, Few{}), p += 3;
      if (p + 2 <= p1) run(std::integral_constant<int, 2>{}, Few{}), p += 2;
      for (; p < p1; ++p) run(std::integral_constant<int, 1>{}, Few{});
      return;
    }
  }
  if constexpr (S < 3) {
    constexpr int G = S == 1 ? 3 : 2;
    for (; p + G <= p1; p += G) run(std::integral_constant<int, G>{}, Many{});
  }
  for (; p < p1; ++p) run(std::integral_constant<int, 1>{}, Many{});
}

// Many rows and a long K without accumulation (the weight-gradient products): K chunks
// outermost, so one chunk of A's rows stays in L2 across all panels. Same FMA chains.
// A transposed A (the weight gradients' dL/dg, rows of 3H) is read M values from every row
// of A, rows 3H apart: a new page at almost every k, which the prefetchers do not follow.
// Each chunk is copied once into a k-major buffer (M kc values, allocated here) that the
// panels then read in sequence (A^T B of W4's dW_hh, M 1536, K 6400, N 512: about a fifth
// faster than reading A in place). Where the kernels take panels in windows, the chunks are
// copied back to rows instead (M x kc, kc up to kWindowKc), read as a plain A (on an AVX2 core
// with a 512 KiB L2, K 6400 at one thread: M 768 0.79 -> 0.93x OpenBLAS's rate, M 256 0.89 ->
// 0.97x). The same values in the same order: the same bits.
template <int S, class AOp, class BOp, typename T>
void GemmPanelsChunked(int64_t M, int64_t K, int64_t N, const AOp& a, const BOp& b, const T* bias,
                       bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1) {
  const int64_t kc = ChunkLength<T>(M, K);
  // The copy back to rows pays where op(A) does not fit in L2 even when K is one chunk.
  constexpr bool kRowCopies = kWindowed && std::is_same_v<AOp, APlain<true, T>>;
  const bool whole = kRowCopies ? M * K * int64_t(sizeof(T)) <= l2_cache_bytes() / 2 : kc == K;
  if (accumulate || whole || M < 12)
    return GemmPanels<S>(M, K, N, a, b, bias, accumulate, C, ldc, p0, p1, 0, K, kc);
  if constexpr (std::is_same_v<AOp, APlain<true, T>>) {
    if constexpr (kRowCopies) {
      const int64_t kt = EqualChunks(K, kWindowKc);
      auto chunk = hwy::AllocateAligned<T>(static_cast<size_t>(M * kt));
      if (!chunk) throw std::bad_alloc();
      for (int64_t k0 = 0; k0 < K; k0 += kt) {
        const int64_t k1 = std::min(K, k0 + kt);
        // Tiles of 32 x 32: each source and destination line used whole while in L1.
        constexpr int64_t kTile = 32;
        for (int64_t kb = k0; kb < k1; kb += kTile)
          for (int64_t mb = 0; mb < M; mb += kTile)
            for (int64_t k = kb; k < std::min(k1, kb + kTile); ++k)
              for (int64_t m = mb; m < std::min(M, mb + kTile); ++m)
                chunk[m * kt + (k - k0)] = a.A[k * a.lda + m];
        GemmPanels<S>(M, K, N, AChunkRows<T>{chunk.get(), kt, k0}, b, bias, false, C, ldc, p0, p1,
                      k0, k0 + 1, kt);
      }
    } else {
      const int64_t kt = TransposedChunkLength<T>(M, K);
      auto chunk = hwy::AllocateAligned<T>(static_cast<size_t>(M * kt));
      if (!chunk) throw std::bad_alloc();
      for (int64_t k0 = 0; k0 < K; k0 += kt) {
        const int64_t k1 = std::min(K, k0 + kt);
        for (int64_t k = k0; k < k1; ++k)
          std::memcpy(chunk.get() + (k - k0) * M, a.A + k * a.lda, M * sizeof(T));
        GemmPanels<S>(M, K, N, AChunkT<T>{chunk.get(), M, k0}, b, bias, false, C, ldc, p0, p1, k0,
                      k0 + 1, kt);
      }
    }
  } else {
    for (int64_t k0 = 0; k0 < K; k0 += kc)
      GemmPanels<S>(M, K, N, a, b, bias, false, C, ldc, p0, p1, k0, k0 + 1, kc);
  }
}

template <typename T>
void GemmPacked(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const T* A,
                int64_t lda, bool trans_a, const T* packed, const T* bias, bool accumulate, T* C,
                int64_t ldc, int64_t p0, int64_t p1) {
  const int S = static_cast<int>(panel / kUnit<T>);
  // Panels too big to stay in L2 between calls (half of a 1 MB L2) stream from L3 or DRAM
  // every time; the first row block prefetches them kPrefetchRows k rows ahead.
  const bool streamed = (p1 - p0) * K * panel * int64_t(sizeof(T)) > (512 << 10);
  const int64_t pf = streamed ? kPrefetchRows : 0;
#define GRUX_GEMM_CASE(s)                                                                          \
  if (S == s) {                                                                                    \
    const BPacked<s * kUnit<T>, T> b{packed, K, pf, sub > 0 ? sub : s * kUnit<T>};                 \
    if (trans_a)                                                                                   \
      GemmPanelsChunked<s>(M, K, N, APlain<true, T>{A, lda}, b, bias, accumulate, C, ldc, p0, p1); \
    else                                                                                           \
      GemmPanelsChunked<s>(M, K, N, APlain<false, T>{A, lda}, b, bias, accumulate, C, ldc, p0,     \
                           p1);                                                                    \
    return;                                                                                        \
  }
  GRUX_GEMM_CASE(1)
  GRUX_GEMM_CASE(2)
  GRUX_GEMM_CASE(3)
#undef GRUX_GEMM_CASE
}

// B's rows read in place: panels of 3 units (the convolutions' pixel dimension).
template <typename T>
void GemmBRows(int64_t M, int64_t K, int64_t N, const T* A, int64_t lda, const T* base,
               const int64_t* offsets, T* C, int64_t ldc) {
  constexpr int64_t P = 3 * kUnit<T>;
  GemmPanelsChunked<3>(M, K, N, APlain<false, T>{A, lda}, BRows<P, T>{base, offsets},
                       static_cast<const T*>(nullptr), false, C, ldc, 0, (N + P - 1) / P);
}

// A's rows read in place, B packed.
template <typename T>
void GemmARows(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const T* base,
               const int64_t* offsets, const T* packed, bool accumulate, T* C, int64_t ldc) {
  const int S = static_cast<int>(panel / kUnit<T>);
  const int64_t panels = (N + panel - 1) / panel;
#define GRUX_GEMM_CASE(s)                                                     \
  if (S == s)                                                                 \
    return GemmPanelsChunked<s>(                                              \
        M, K, N, ARows<T>{base, offsets},                                     \
        BPacked<s * kUnit<T>, T>{packed, K, 0, sub > 0 ? sub : s * kUnit<T>}, \
        static_cast<const T*>(nullptr), accumulate, C, ldc, 0, panels);
  GRUX_GEMM_CASE(1)
  GRUX_GEMM_CASE(2)
  GRUX_GEMM_CASE(3)
#undef GRUX_GEMM_CASE
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#endif  // GRUX_CPU_GEMM_PACKED_INL_H_
