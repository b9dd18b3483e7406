// Row-invariant packed GEMM with Highway SIMD: register-blocked micro-kernels of MR rows x
// NP panels of S units, K split into L1-sized chunks without changing any element's FMA chain.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm_packed.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
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
// of at most kKc (a transposed A, copied chunk by chunk, in longer ones:
// TransposedChunkLength), so that a chunk of A's rows stays in L2 while every panel passes
// (GemmPanelsChunked) and a panel's chunk stays near L1. Partial sums pass between chunks
// through C exactly (they are already rounded to T), so chunking does not change results.
// A smaller op(A) stays in L2 whole, and there chunks only cost: the recurrent product of W3
// (M 64, K 512) unchunked runs 3% faster alone and 5% faster between the gates (one thread,
// Intel Xeon, 2 MiB L2).
constexpr int64_t kKc = 256;
// K in equal chunks of at most `most`.
inline int64_t EqualChunks(int64_t K, int64_t most) {
  const int64_t chunks = (K + most - 1) / most;
  return chunks <= 1 ? K : (K + chunks - 1) / chunks;
}
template <typename T>
int64_t ChunkLength(int64_t M, int64_t K) {
  if (M * K * int64_t(sizeof(T)) <= l2_cache_bytes() / 2) return K;
  return EqualChunks(K, kKc);
}
// The chunks of a transposed A copied k-major (GemmPanelsChunked): as long as the copy (M x kc)
// takes at most a quarter of the L2, and at least kKc. Every chunk ends with C written and the
// next begins by reading it back, and every micro-tile pays its start and its end once per
// chunk: fewer, longer chunks pay both less often. W4's weight gradients on a 2-core Xeon
// (2 MiB L2, 96-row tiles): dW_hh (M 1536, K 6400, N 512) 258 -> 285 GFLOP/s with chunks of
// 1280 instead of 256. A copy too large for the L2 loses more than that (M 1536 on one
// thread: 116 GFLOP/s with chunks of 256, 61 with chunks of 1600).
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
  const APlain& block() const { return *this; }
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
// `grux bench gru t32n16i2048h2048 --threads 1` (W_hh 50 MB), 0 / 16 / 24 / 32 / 64 rows:
// about 183 / 176 / 164 / 164 / 176 ms (three runs each).
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
  constexpr int64_t P = S * kUnit<T>;          // columns per panel
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
  // sequence: megabytes) otherwise misses at every store. W3's input projection on two
  // threads: 19 -> 17.5 ms (16.2 with C in cache). Short loops do not hide the fetch.
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
// instead of 5 x 6 + 2 (forward 5% faster, n8c16h64w64d32k3); GRU-shaped products measured
// the same within noise.
constexpr int kMaxMr = 8;

// Vectors of a panel group (NVT of them) one micro-kernel computes, with kRegs vector registers:
// MR x W accumulators + W operands + 1 broadcast. All of them when that leaves at least 4 rows
// (1 for a product of one or two rows, `few`); otherwise a window: 2 vectors (AVX2's 16
// registers: 6 rows x 16 columns), or for few rows the widest that holds two rows. AVX2 ran
// every product as 1-row blocks of a whole panel before (6 accumulators, 6 loads per 6 FMAs):
// W3 f32 on a 2-core Zen 3 took 294 ms against oneDNN's 128.
constexpr int WindowVectors(int nvt, int regs, bool few) {
  if ((regs - nvt - 1) / nvt >= (few ? 1 : 4)) return nvt;
  int w = 1;
  for (int v = 1; v <= nvt; ++v)
    if (nvt % v == 0 && (few ? 3 * v + 1 <= regs : v <= 2)) w = v;
  return w;
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
  // time down (it was most of the build's).
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
    // of it). Before, with the row block outermost, every block read the windows of B from L2 (a
    // 48-column panel's chunk is 48 KB): 64 bytes a k, where A's rows now bring 24. One thread on a
    // 2-core Zen 3 (32 KiB L1, 512 KiB L2), three interleaved rounds: M 1536 K 1536 N 1536 84 -> 89
    // GFLOP/s, W3's input projection (M 6400, K 256, N 1536) 89.6 -> 93.2, M 1536 K 6400 N 512 81.7
    // -> 85.3 (OpenBLAS 90-94); two threads 1.03-1.06x. The same chains in the same order: the same
    // bits. (With the old C kept aside across chunks, blocks keep the order below.)
    const int64_t group = std::max<int64_t>(
        kMr, l2_cache_bytes() / 2 / (std::max<int64_t>(kc, 1) * int64_t(sizeof(T))) / kMr * kMr);
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
// panels then read in sequence: A^T B of W4's dW_hh (M 1536, K 6400, N 512) on two threads
// 211-218 -> 250-261 GFLOP/s (W4 training 1.055x). The same values in the same order: the
// same bits.
template <int S, class AOp, class BOp, typename T>
void GemmPanelsChunked(int64_t M, int64_t K, int64_t N, const AOp& a, const BOp& b,
                       const T* bias, bool accumulate, T* C, int64_t ldc, int64_t p0,
                       int64_t p1) {
  const int64_t kc = ChunkLength<T>(M, K);
  if (accumulate || kc == K || M < 12)
    return GemmPanels<S>(M, K, N, a, b, bias, accumulate, C, ldc, p0, p1, 0, K, kc);
  if constexpr (std::is_same_v<AOp, APlain<true, T>>) {
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

void GemmBRowsF32(int64_t M, int64_t K, int64_t N, const float* A, int64_t lda,
                  const float* base, const int64_t* offsets, float* C, int64_t ldc) {
  GemmBRows(M, K, N, A, lda, base, offsets, C, ldc);
}
void GemmBRowsF64(int64_t M, int64_t K, int64_t N, const double* A, int64_t lda,
                  const double* base, const int64_t* offsets, double* C, int64_t ldc) {
  GemmBRows(M, K, N, A, lda, base, offsets, C, ldc);
}
void GemmARowsF32(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const float* base,
                  const int64_t* offsets, const float* packed, bool accumulate, float* C,
                  int64_t ldc) {
  GemmARows(M, K, N, panel, sub, base, offsets, packed, accumulate, C, ldc);
}
void GemmARowsF64(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const double* base,
                  const int64_t* offsets, const double* packed, bool accumulate, double* C,
                  int64_t ldc) {
  GemmARows(M, K, N, panel, sub, base, offsets, packed, accumulate, C, ldc);
}

void GemmPackedF32(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const float* A,
                   int64_t lda, bool ta, const float* packed, const float* bias, bool acc, float* C,
                   int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, sub, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}
void GemmPackedF64(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const double* A,
                   int64_t lda, bool ta, const double* packed, const double* bias, bool acc,
                   double* C, int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, sub, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}

// One panel of pack_b when each source column is contiguous along k (col[j]: where column j
// of the panel starts, -1 past N): 128-bit tiles of 4 k x 4 columns (2 x 2 in f64) are
// transposed in registers, instead of one scalar store per element.
template <typename T>
void PackPanelTransposed(int64_t K, int64_t panel, const int64_t* col, const T* src, T* out) {
#if HWY_TARGET == HWY_SCALAR
  constexpr int64_t V = 1;
#else
  const hn::FixedTag<T, 16 / sizeof(T)> d;
  constexpr int64_t V = 16 / sizeof(T);  // tile side
#endif
  int64_t k = 0;
  for (; V > 1 && k + V <= K; k += V) {
#if HWY_TARGET != HWY_SCALAR
    for (int64_t j = 0; j < panel; j += V) {
      T* o = out + k * panel + j;
      if (col[j + V - 1] < 0) {  // columns past N (at the end of the last panel)
        for (int64_t t = 0; t < V; ++t)
          for (int64_t u = 0; u < V; ++u) o[t * panel + u] = col[j + u] < 0 ? T(0) : src[col[j + u] + k + t];
        continue;
      }
      if constexpr (V == 4) {
        const auto r0 = hn::LoadU(d, src + col[j] + k), r1 = hn::LoadU(d, src + col[j + 1] + k);
        const auto r2 = hn::LoadU(d, src + col[j + 2] + k), r3 = hn::LoadU(d, src + col[j + 3] + k);
        const hn::Repartition<uint64_t, decltype(d)> d64;
        const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d, r0, r1));  // k0: c0 c1, k1: c0 c1
        const auto t1 = hn::BitCast(d64, hn::InterleaveLower(d, r2, r3));  // k0: c2 c3, k1: c2 c3
        const auto t2 = hn::BitCast(d64, hn::InterleaveUpper(d, r0, r1));  // k2, k3: c0 c1
        const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d, r2, r3));
        hn::Store(hn::BitCast(d, hn::InterleaveLower(d64, t0, t1)), d, o);
        hn::Store(hn::BitCast(d, hn::InterleaveUpper(d64, t0, t1)), d, o + panel);
        hn::Store(hn::BitCast(d, hn::InterleaveLower(d64, t2, t3)), d, o + 2 * panel);
        hn::Store(hn::BitCast(d, hn::InterleaveUpper(d64, t2, t3)), d, o + 3 * panel);
      } else {
        const auto r0 = hn::LoadU(d, src + col[j] + k), r1 = hn::LoadU(d, src + col[j + 1] + k);
        hn::Store(hn::InterleaveLower(d, r0, r1), d, o);
        hn::Store(hn::InterleaveUpper(d, r0, r1), d, o + panel);
      }
    }
#endif
  }
  for (; k < K; ++k)
    for (int64_t j = 0; j < panel; ++j) out[k * panel + j] = col[j] < 0 ? T(0) : src[col[j] + k];
}
void PackPanelTransposedF32(int64_t K, int64_t panel, const int64_t* col, const float* src,
                            float* out) {
  PackPanelTransposed(K, panel, col, src, out);
}
void PackPanelTransposedF64(int64_t K, int64_t panel, const int64_t* col, const double* src,
                            double* out) {
  PackPanelTransposed(K, panel, col, src, out);
}

// This copy's target (an HWY_* bit): dispatched, it says which target the kernels run on.
int64_t TargetBit() {
  return HWY_TARGET;
}

// Whether this copy's micro-kernels take a panel of more than one unit in windows (fewer
// registers than a panel's vectors need; WindowVectors): gemm_sub_panel.
bool WindowsPanels() {
  return HWY_MAX_BYTES < 64;
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>
#include <unistd.h>

#include <type_traits>

#include "cpu/gemm_lowp.h"
#include "grux/error.h"

namespace grux::cpu {

HWY_EXPORT(GemmPackedF32);
HWY_EXPORT(GemmPackedF64);
HWY_EXPORT(PackPanelTransposedF32);
HWY_EXPORT(PackPanelTransposedF64);
HWY_EXPORT(GemmBRowsF32);
HWY_EXPORT(GemmBRowsF64);
HWY_EXPORT(GemmARowsF32);
HWY_EXPORT(GemmARowsF64);
HWY_EXPORT(TargetBit);
HWY_EXPORT(WindowsPanels);

int64_t simd_target_bit() {
  return HWY_DYNAMIC_DISPATCH(TargetBit)();
}

template <typename T>
int64_t gemm_sub_panel() {
  return HWY_DYNAMIC_DISPATCH(WindowsPanels)() ? kUnit<T> : 0;
}
template int64_t gemm_sub_panel<float>();
template int64_t gemm_sub_panel<double>();

template <>
void gemm_b_rows<float>(int64_t M, const float* A, int64_t lda, int64_t K, int64_t N,
                        const float* b_base, const int64_t* b_offsets, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmBRowsF32)(M, K, N, A, lda, b_base, b_offsets, C, ldc);
}
template <>
void gemm_b_rows<double>(int64_t M, const double* A, int64_t lda, int64_t K, int64_t N,
                         const double* b_base, const int64_t* b_offsets, double* C,
                         int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmBRowsF64)(M, K, N, A, lda, b_base, b_offsets, C, ldc);
}
template <>
void gemm_a_rows<float>(int64_t M, const float* a_base, const int64_t* a_offsets,
                        const PackedB<float>& B, bool accumulate, float* C, int64_t ldc) {
  if (M <= 0 || B.N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmARowsF32)
  (M, B.K, B.N, B.panel, B.sub, a_base, a_offsets, B.data, accumulate, C, ldc);
}
template <>
void gemm_a_rows<double>(int64_t M, const double* a_base, const int64_t* a_offsets,
                         const PackedB<double>& B, bool accumulate, double* C, int64_t ldc) {
  if (M <= 0 || B.N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmARowsF64)
  (M, B.K, B.N, B.panel, B.sub, a_base, a_offsets, B.data, accumulate, C, ldc);
}

template <typename T>
void pack_b(int64_t K, int64_t N, int64_t panel, const T* src, int64_t stride_k, int64_t stride_n,
            const int64_t* k_map, const int64_t* n_map, T* dst, int64_t sub) {
  GRUX_ASSERT(panel > 0 && panel % kUnit<T> == 0 && panel <= 3 * kUnit<T>);
  GRUX_ASSERT(sub >= 0 && sub % kUnit<T> == 0 && (sub == 0 || panel % sub == 0));
  const int64_t panels = (N + panel - 1) / panel;
  const int64_t w = sub > 0 ? sub : panel;  // columns per block
  // One block: K x w row-major at out, column j from source offset col[j] (-1: zero).
  auto pack_block = [&](const int64_t* col, T* out) {
    if (stride_k == 1 && !k_map) {
      // Each source column is contiguous along k (a weight matrix read transposed).
      if constexpr (std::is_same_v<T, float>)
        HWY_DYNAMIC_DISPATCH(PackPanelTransposedF32)(K, w, col, src, out);
      else
        HWY_DYNAMIC_DISPATCH(PackPanelTransposedF64)(K, w, col, src, out);
    } else {
      // Rows of the source; within each unit of the block the columns are usually
      // consecutive (gate-interleaved weights keep units whole; activations are not
      // permuted): copy those units whole.
      constexpr int64_t U = kUnit<T>;
      bool whole_units = true;
      for (int64_t j = 0; j < w && whole_units; ++j)
        whole_units = col[j] >= 0 && col[j] == col[j - j % U] + j % U;
      for (int64_t k = 0; k < K; ++k) {
        const T* row = src + (k_map ? k_map[k] : k) * stride_k;
        T* o = out + k * w;
        if (whole_units) {
          for (int64_t u = 0; u < w; u += U) std::memcpy(o + u, row + col[u], U * sizeof(T));
        } else {
          for (int64_t j = 0; j < w; ++j) o[j] = col[j] < 0 ? T(0) : row[col[j]];
        }
      }
    }
  };
  auto pack_panel = [&](int64_t p) {
    // Source offset of each column of the panel (-1 past N), once per panel.
    int64_t col[3 * kUnit<T>];
    for (int64_t j = 0; j < panel; ++j) {
      const int64_t n = p * panel + j;
      col[j] = n < N ? (n_map ? n_map[n] : n) * stride_n : -1;
    }
    for (int64_t b = 0; b < panel / w; ++b)
      pack_block(col + b * w, dst + p * K * panel + b * K * w);
  };
  // Training packs the weights (and their transposes) every step: this is on the hot path.
  // Small operands (the matmul scans' d x d products) stay out of OpenMP: even a region of
  // one thread costs more than packing them.
  if (K * N > (1 << 16)) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; ++p) pack_panel(p);
  } else {
    for (int64_t p = 0; p < panels; ++p) pack_panel(p);
  }
}
template void pack_b<float>(int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                            const int64_t*, const int64_t*, float*, int64_t);
template void pack_b<double>(int64_t, int64_t, int64_t, const double*, int64_t, int64_t,
                             const int64_t*, const int64_t*, double*, int64_t);

namespace {
// A product of one or two rows reads each row of A a value at a time between the FMAs of a
// whole group of panels, and the out-of-order window holds about one 64-byte line of the row
// ahead. Where the row was just written by another core (the states of a batch-1 step at
// two threads), each line is a transfer between the cores, and they came one after another.
// Asked for at once, before the first FMA, they come together. W2 (I 128, H 256, batch 1) at
// two threads with the cores about 500 ns apart (round trip), three interleaved rounds of a
// measurement build that made the same requests before the cell's product: f32 3.87 -> 3.48
// ms, int8 1.58 -> 1.53; with the cores close, no change beyond the noise.
template <typename T>
void prefetch_rows(int64_t M, const T* A, int64_t lda, bool trans_a, int64_t K) {
  constexpr int64_t kLine = 64 / sizeof(T), kMaxLines = 128;
  if (trans_a || M > 2) return;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < std::min(K, kLine * kMaxLines); k += kLine)
      __builtin_prefetch(A + m * lda + k, 0, 3);
}
}  // namespace

template <>
void gemm_packed<float>(int64_t M, const float* A, int64_t lda, bool trans_a,
                        const PackedB<float>& B, const float* bias, bool accumulate, float* C,
                        int64_t ldc, int64_t p0, int64_t p1, int64_t step) {
  if (M <= 0 || p0 >= p1) return;
  prefetch_rows(M, A, lda, trans_a, B.K);
  if (B.low_precision()) {
    GRUX_ASSERT(!trans_a);
    return gemm_packed_lowp(M, A, lda, B, bias, accumulate, C, ldc, p0, p1, step);
  }
  HWY_DYNAMIC_DISPATCH(GemmPackedF32)
  (M, B.K, B.N, B.panel, B.sub, A, lda, trans_a, B.data, bias, accumulate, C, ldc, p0, p1);
}
template <>
void gemm_packed<double>(int64_t M, const double* A, int64_t lda, bool trans_a,
                         const PackedB<double>& B, const double* bias, bool accumulate, double* C,
                         int64_t ldc, int64_t p0, int64_t p1, int64_t /*step*/) {
  if (M <= 0 || p0 >= p1) return;
  prefetch_rows(M, A, lda, trans_a, B.K);
  HWY_DYNAMIC_DISPATCH(GemmPackedF64)
  (M, B.K, B.N, B.panel, B.sub, A, lda, trans_a, B.data, bias, accumulate, C, ldc, p0, p1);
}

int64_t l1d_cache_bytes() {
  static const int64_t bytes = [] {
    const long s = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return s > 0 ? int64_t(s) : int64_t(32) << 10;
  }();
  return bytes;
}

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    const long s = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return s > 0 ? int64_t(s) : int64_t(512) << 10;
  }();
  return bytes;
}

// Measured (one thread, Intel Xeon with a 2 MiB L2): the input projection of W3 (6400 rows,
// K 256, 32 panels: 1.5 MiB of B) at 96 rows a block 130-135 GFLOP/s, at 48 146-153, at 24
// 146-151.
template <typename T>
int64_t gemm_row_block(const PackedB<T>& B, int64_t p0, int64_t p1, int64_t a_cols,
                       int64_t a_bytes) {
  constexpr int64_t kMaxRows = 96, kStep = 8;
  const int64_t b_elem = B.bf16 ? 2 : B.i8 ? 1 : int64_t(sizeof(T));
  const int64_t cols = std::min(B.N, p1 * B.panel) - p0 * B.panel;
  const int64_t b_bytes = (p1 - p0) * B.panel * B.K * b_elem;
  const int64_t room = l2_cache_bytes() / 8 * 7 - b_bytes;
  const int64_t per_row = std::max<int64_t>(1, a_cols * a_bytes + cols * int64_t(sizeof(T)));
  if (room < kStep * per_row) return kMaxRows;
  return std::min(kMaxRows, room / per_row / kStep * kStep);
}
template int64_t gemm_row_block<float>(const PackedB<float>&, int64_t, int64_t, int64_t, int64_t);
template int64_t gemm_row_block<double>(const PackedB<double>&, int64_t, int64_t, int64_t, int64_t);

template <typename T>
void gemm_packed_parallel(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                          const T* bias, bool accumulate, T* C, int64_t ldc) {
  // Tiles of kRowBlock rows x all panels (gemm_row_block: the panels stay in L2 from one
  // tile to the next). With fewer row blocks than threads, threads split the panels instead.
  const int64_t panels = B.panels();
  const int64_t kRowBlock = gemm_row_block(B, 0, panels, B.K, int64_t(sizeof(T)));
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  const int threads = double(M) * B.N * B.K > 4e6 ? omp_get_max_threads() : 1;
  const bool by_rows = row_blocks >= threads;
  // Row blocks [rb0, rb1).
  const auto blocks = [&](int64_t rb0, int64_t rb1) {
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      const int64_t m0 = rb * kRowBlock, m1 = std::min(M, m0 + kRowBlock);
      gemm_packed<T>(m1 - m0, trans_a ? A + m0 : A + m0 * lda, lda, trans_a, B, bias, accumulate,
                     C + m0 * ldc, ldc, 0, panels);
    }
  };
  if (threads == 1) {  // no OpenMP region at all: it would cost more than a small product
    if (M * B.K * int64_t(sizeof(T)) <= l2_cache_bytes() / 2)
      return gemm_packed<T>(M, A, lda, trans_a, B, bias, accumulate, C, ldc, 0, panels);
    // An op(A) larger than half the L2 in the row blocks threads take (one thread, A^T B of
    // W4's dW_hh: 112 -> 140 GFLOP/s against all 1536 rows at once, whose transposed chunks
    // no longer fit in L2).
    return blocks(0, row_blocks);
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (by_rows) {
      blocks(t * row_blocks / nt, (t + 1) * row_blocks / nt);
    } else {
      gemm_packed<T>(M, A, lda, trans_a, B, bias, accumulate, C, ldc, t * panels / nt,
                     (t + 1) * panels / nt);
    }
  }
}
template void gemm_packed_parallel<float>(int64_t, const float*, int64_t, bool,
                                          const PackedB<float>&, const float*, bool, float*,
                                          int64_t);
template void gemm_packed_parallel<double>(int64_t, const double*, int64_t, bool,
                                           const PackedB<double>&, const double*, bool, double*,
                                           int64_t);

}  // namespace grux::cpu
#endif  // HWY_ONCE
