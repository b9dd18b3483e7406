// Scan kernels: element-wise combines, diagonal affine (linear and log space), matrix affine
// and cumulative matrix products, with two ways to use the threads.
//
// Sizes: O independent sequences, T steps (Tn in code), C channels per step.
//
// Every kernel is one "recurrence" R: an element E per (t, c) loaded from the inputs, a state
// S per channel (the output), apply(S, E) -> S, compose(E1, E2) -> E (E1 then E2, so that
// apply(apply(s, e1), e2) == apply(s, compose(e1, e2))), and the initial state.
//  * Parallel over sequences: when O * channel blocks covers the team, each block is scanned
//    by one thread, straight through time (n combines, one read and one write per element).
//  * Parallel over time (few sequences): time is cut into super-blocks sized so that a
//    thread's share stays in its L2; in each, every thread (1) folds its K segments into
//    totals (reading from memory), (2) after one barrier, combines the totals before it into
//    its carries, (3) scans its segments from the carries (reading its share again, now from
//    L2). Memory traffic is that of a copy; combines are 2n + O(P K); and with K segments
//    scanned interleaved, K independent dependency chains hide the combine's latency when
//    there are few channels.
#include "cpu/scan.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/spin_barrier.h"
#include "cpu/gemm.h"

namespace grux::cpu {

namespace {

constexpr int64_t kChannelBlock = 512;      // channels per work unit, sequence-parallel path
constexpr int64_t kShareBytes = 256 << 10;  // bytes of input per thread and super-block
constexpr int64_t kOneChannelChains = 8;    // segments per thread with fewer than 16 channels

template <typename T>
inline T log_add_exp(T a, T b) {
  const T hi = std::max(a, b), lo = std::min(a, b);
  // -inf with -inf, or +inf with +inf: the sum is that infinity (the formula gives NaN).
  if (hi == lo && std::isinf(hi)) return hi;
  if (std::isnan(a) || std::isnan(b)) return a + b;
  return hi + std::log1p(std::exp(lo - hi));
}

template <typename T>
struct Elementwise {
  using E = T;
  ScanKind kind;
  const T* x;
  int64_t Tn, C;
  bool reverse;
  int64_t row(int64_t t) const { return (reverse ? Tn - 1 - t : t) * C; }
  E load(int64_t t, int64_t c) const { return x[row(t) + c]; }
  E at(int64_t i) const { return x[i]; }
  static T identity(ScanKind k) {
    switch (k) {
      case ScanKind::sum:
        return T(-0.0);
      case ScanKind::prod:
        return T(1);
      case ScanKind::max:
      case ScanKind::logaddexp:
        return -std::numeric_limits<T>::infinity();
      case ScanKind::min:
        return std::numeric_limits<T>::infinity();
    }
    return T(0);
  }
  T init(int64_t) const { return identity(kind); }
};

// One combine per kind as its own type so each inner loop is a separate, vectorizable loop.
template <typename T, ScanKind K>
struct ElementwiseOf : Elementwise<T> {
  static T combine(T acc, T v) {
    if constexpr (K == ScanKind::sum) return acc + v;
    if constexpr (K == ScanKind::prod) return acc * v;
    if constexpr (K == ScanKind::max) return (v >= acc || v != v) ? v : acc;
    if constexpr (K == ScanKind::min) return (v <= acc || v != v) ? v : acc;
    if constexpr (K == ScanKind::logaddexp) return log_add_exp(acc, v);
  }
  static T apply(T s, T e) { return combine(s, e); }
  static T compose(T e1, T e2) { return combine(e1, e2); }
  static T none() { return Elementwise<T>::identity(K); }
};

// h_t = a_t h_{t-1} + b_t: E = (a, b); composing (a1, b1) then (a2, b2) = (a2 a1, a2 b1 + b2).
template <typename T>
struct AffineDiag {
  struct E {
    T a, b;
  };
  const T *a, *b, *h0;
  int64_t Tn, C;
  bool reverse;
  int64_t row(int64_t t) const { return (reverse ? Tn - 1 - t : t) * C; }
  E load(int64_t t, int64_t c) const { return at(row(t) + c); }
  E at(int64_t i) const { return {a[i], b[i]}; }
  T init(int64_t c) const { return h0 ? h0[c] : T(0); }
  static T apply(T h, E e) { return e.a * h + e.b; }
  static E compose(E e1, E e2) { return {e2.a * e1.a, e2.a * e1.b + e2.b}; }
  static E none() { return {T(1), T(0)}; }
};

// The same in log space: lh_t = logaddexp(la_t + lh_{t-1}, lb_t).
template <typename T>
struct LogAffineDiag {
  struct E {
    T la, lb;
  };
  const T *la, *lb, *lh0;
  int64_t Tn, C;
  bool reverse;
  int64_t row(int64_t t) const { return (reverse ? Tn - 1 - t : t) * C; }
  E load(int64_t t, int64_t c) const { return at(row(t) + c); }
  E at(int64_t i) const { return {la[i], lb[i]}; }
  T init(int64_t c) const { return lh0 ? lh0[c] : -std::numeric_limits<T>::infinity(); }
  static T apply(T lh, E e) { return log_add_exp(e.la + lh, e.lb); }
  static E compose(E e1, E e2) { return {e1.la + e2.la, log_add_exp(e2.la + e1.lb, e2.lb)}; }
  static E none() { return {T(0), -std::numeric_limits<T>::infinity()}; }
};

// One thread scans channels [c0, c1) of one sequence straight through time.
template <bool Exclusive, typename R, typename T>
void scan_block(const R& r, T* y, int64_t c0, int64_t c1) {
  const int64_t W = c1 - c0;
  std::vector<T> s(W);
  for (int64_t c = 0; c < W; ++c) s[c] = r.init(c0 + c);
  T* __restrict st = s.data();
  for (int64_t t = 0; t < r.Tn; ++t) {
    const int64_t base = r.row(t) + c0;  // input and output share the layout
    T* __restrict yt = y + base;
    for (int64_t c = 0; c < W; ++c) {
      const auto e = r.at(base + c);
      if constexpr (Exclusive) {
        yt[c] = st[c];
        st[c] = R::apply(st[c], e);
      } else {
        st[c] = R::apply(st[c], e);
        yt[c] = st[c];
      }
    }
  }
}

// All threads of the calling parallel region scan one sequence (all C channels), time split
// into super-blocks of P * K segments (see the top of the file). `totals` has room for
// 2 * P * K * C elements, shared by the team; `streams` (input arrays) sizes a super-block.
// kC > 0 fixes the channel count (and K) at compile time, so that the one-channel case keeps
// its K chains in registers.
template <bool Exclusive, int64_t kC, typename R, typename T>
void scan_chunked(const R& r, T* y, typename R::E* totals, int64_t K_, int streams,
                  SpinBarrier& barrier) {
  using E = typename R::E;
  const int64_t P = omp_get_num_threads(), p = omp_get_thread_num();
  const int64_t C = kC > 0 ? kC : r.C, K = kC > 0 ? kOneChannelChains : K_;
  const int64_t Tn = r.Tn, S = P * K;
  const int64_t share_steps = std::max<int64_t>(K, kShareBytes / int64_t(sizeof(T) * streams * C));
  const int64_t block_steps = share_steps * P;
  // Every thread keeps its own copy of the running state; all compute it in the same order,
  // so the copies are identical. Accumulators are thread-private (the shared totals are
  // written once per segment: no false sharing); with one channel they are small local
  // arrays the compiler keeps in registers.
  std::vector<T> state(C), carry_heap(kC > 0 ? 0 : size_t(K * C));
  std::vector<E> acc_heap(kC > 0 ? 0 : size_t(K * C));
  std::vector<int64_t> lo(K), hi(K);
  for (int64_t c = 0; c < C; ++c) state[c] = r.init(c);
  E acc_local[kC > 0 ? kOneChannelChains * kC : 1];
  T carry_local[kC > 0 ? kOneChannelChains * kC : 1];
  E* __restrict ac = kC > 0 ? acc_local : acc_heap.data();
  T* __restrict st = kC > 0 ? carry_local : carry_heap.data();
  // Step i of my K segments (k in [k0, k1)): fold into ac, or scan from st into y.
  auto fold_step = [&](int64_t i, int64_t k) {
    const int64_t base = r.row(lo[k] + i);
    for (int64_t c = 0; c < C; ++c) ac[k * C + c] = R::compose(ac[k * C + c], r.at(base + c));
  };
  auto scan_step = [&](int64_t i, int64_t k) {
    const int64_t base = r.row(lo[k] + i);
    T* __restrict yt = y + base;
    for (int64_t c = 0; c < C; ++c) {
      const auto e = r.at(base + c);
      T& sk = st[k * C + c];
      if constexpr (Exclusive) {
        yt[c] = sk;
        sk = R::apply(sk, e);
      } else {
        sk = R::apply(sk, e);
        yt[c] = sk;
      }
    }
  };
  for (int64_t t0 = 0, it = 0; t0 < Tn; t0 += block_steps, ++it) {
    const int64_t len = std::min(block_steps, Tn - t0);
    E* tot = totals + (it & 1) * S * C;
    int64_t steps = 0, common = len;
    for (int64_t k = 0; k < K; ++k) {
      lo[k] = t0 + (p * K + k) * len / S;
      hi[k] = t0 + (p * K + k + 1) * len / S;
      steps = std::max(steps, hi[k] - lo[k]);
      common = std::min(common, hi[k] - lo[k]);
    }
    // (1) Fold my K segments into their totals, the K chains interleaved (segment lengths
    // differ by at most one: the last step is done only where it exists).
    for (int64_t q = 0; q < K * C; ++q) ac[q] = R::none();
    for (int64_t i = 0; i < common; ++i)
      for (int64_t k = 0; k < K; ++k) fold_step(i, k);
    for (int64_t i = common; i < steps; ++i)
      for (int64_t k = 0; k < K; ++k)
        if (lo[k] + i < hi[k]) fold_step(i, k);
    std::copy(ac, ac + K * C, tot + p * K * C);
    barrier.wait();
    // (2) Carries: the state entering each of my segments; then the state after the block.
    for (int64_t c = 0; c < C; ++c) {
      T cur = state[c];
      for (int64_t j = 0; j < S; ++j) {
        if (j >= p * K && j < (p + 1) * K) st[(j - p * K) * C + c] = cur;
        cur = R::apply(cur, tot[j * C + c]);
      }
      state[c] = cur;
    }
    // (3) Scan my segments from their carries, the K chains interleaved.
    for (int64_t i = 0; i < common; ++i)
      for (int64_t k = 0; k < K; ++k) scan_step(i, k);
    for (int64_t i = common; i < steps; ++i)
      for (int64_t k = 0; k < K; ++k)
        if (lo[k] + i < hi[k]) scan_step(i, k);
  }
}

// Runs recurrence make(o) for every sequence o, choosing how to use the threads.
template <bool Exclusive, typename Make, typename T>
void run_recurrence(Make make, T* y, int64_t O, int64_t Tn, int64_t C, const ScanWalk& walk,
                    int streams) {
  using R = decltype(make(int64_t(0)));
  if (O == 0 || Tn == 0 || C == 0) return;
  const int threads = std::max(1, walk.threads);
  // Whole rows per unit when the sequences alone keep the team busy (longer contiguous
  // streams); otherwise channel blocks too.
  const int64_t blocks = O >= 2 * threads ? 1 : (C + kChannelBlock - 1) / kChannelBlock;
  const int64_t units = O * blocks;
  bool by_time = (units < threads && Tn >= 4 * threads) || (C < 16 && O < 2 * threads && Tn >= 256);
  if (walk.split == TimeSplit::always) by_time = true;
  if (walk.split == TimeSplit::never) by_time = false;
  if (!by_time) {
    const int64_t cb = (C + blocks - 1) / blocks;
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1 && units > 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t o = u / blocks, c0 = (u % blocks) * cb, c1 = std::min(C, c0 + cb);
      scan_block<Exclusive>(make(o), y + o * Tn * C, c0, c1);
    }
    return;
  }
  const int64_t K = C >= 16 ? 1 : kOneChannelChains;
  std::vector<typename R::E> totals(size_t(2 * threads * K * C));
  for (int64_t o = 0; o < O; ++o) {
    const R r = make(o);
    T* yo = y + o * Tn * C;
    SpinBarrier barrier;  // yields after a short spin (see core/spin_barrier.h)
#pragma omp parallel num_threads(threads)
    {
#pragma omp single
      barrier.reset(omp_get_num_threads());
      if (C == 1)
        scan_chunked<Exclusive, 1>(r, yo, totals.data(), K, streams, barrier);
      else
        scan_chunked<Exclusive, 0>(r, yo, totals.data(), K, streams, barrier);
    }
  }
}

template <bool Exclusive, typename T>
void scan_elementwise_as(ScanKind kind, const T* x, T* y, int64_t O, int64_t Tn, int64_t C,
                         const ScanWalk& walk) {
  auto run = [&](auto tag) {
    using R = typename decltype(tag)::type;
    auto make = [&](int64_t o) {
      R r;
      r.kind = kind;
      r.x = x + o * Tn * C;
      r.Tn = Tn;
      r.C = C;
      r.reverse = walk.reverse;
      return r;
    };
    run_recurrence<Exclusive>(make, y, O, Tn, C, walk, 1);
  };
  switch (kind) {
    case ScanKind::sum:
      return run(std::type_identity<ElementwiseOf<T, ScanKind::sum>>{});
    case ScanKind::prod:
      return run(std::type_identity<ElementwiseOf<T, ScanKind::prod>>{});
    case ScanKind::max:
      return run(std::type_identity<ElementwiseOf<T, ScanKind::max>>{});
    case ScanKind::min:
      return run(std::type_identity<ElementwiseOf<T, ScanKind::min>>{});
    case ScanKind::logaddexp:
      return run(std::type_identity<ElementwiseOf<T, ScanKind::logaddexp>>{});
  }
}

}  // namespace

template <typename T>
void scan_elementwise(ScanKind kind, const T* x, T* y, int64_t O, int64_t Tn, int64_t C,
                      const ScanWalk& walk) {
  if (kind == ScanKind::sum && C == 1 && !walk.exclusive && !walk.reverse &&
      walk.split != TimeSplit::never && O < 2 * walk.threads && Tn >= 4096) {
    for (int64_t o = 0; o < O; ++o)
      sum_scan_contiguous(x + o * Tn, y + o * Tn, Tn, std::max(1, walk.threads), kShareBytes);
    return;
  }
  if (walk.exclusive)
    scan_elementwise_as<true>(kind, x, y, O, Tn, C, walk);
  else
    scan_elementwise_as<false>(kind, x, y, O, Tn, C, walk);
}

template <typename T>
void affine_scan_diag(const T* a, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t C,
                      const ScanWalk& walk) {
  auto make = [&](int64_t o) {
    AffineDiag<T> r;
    r.a = a + o * Tn * C;
    r.b = b + o * Tn * C;
    r.h0 = h0 ? h0 + o * C : nullptr;
    r.Tn = Tn;
    r.C = C;
    r.reverse = walk.reverse;
    return r;
  };
  run_recurrence<false>(make, h, O, Tn, C, walk, 2);
}

template <typename T>
void log_affine_scan_diag(const T* la, const T* lb, const T* lh0, T* lh, int64_t O, int64_t Tn,
                          int64_t C, const ScanWalk& walk) {
  auto make = [&](int64_t o) {
    LogAffineDiag<T> r;
    r.la = la + o * Tn * C;
    r.lb = lb + o * Tn * C;
    r.lh0 = lh0 ? lh0 + o * C : nullptr;
    r.Tn = Tn;
    r.C = C;
    r.reverse = walk.reverse;
    return r;
  };
  run_recurrence<false>(make, lh, O, Tn, C, walk, 2);
}

namespace {

// Chunks for the compute-bound matrix scans on P threads: P + 1 chunks; thread 0 scans chunks
// 0 and 1 one after the other while thread p >= 1 first folds chunk p into its total, then
// scans chunk p + 1 from the carry. Each thread does two chunks' work: time 2n / (P + 1).
inline int64_t chunk_begin(int64_t j, int64_t Tn, int64_t P) {
  return j * Tn / (P + 1);
}

// Step t of a walk, in memory order.
inline int64_t at(int64_t t, int64_t Tn, bool reverse) {
  return reverse ? Tn - 1 - t : t;
}

// C (d x d) = A B, all d x d row-major. Up to 8 x 8 a loop with d known at compile time (row m
// of C as axpys over B's rows, unrolled and vectorized by the compiler): one product costs
// tens of nanoseconds, less than packing B for the GEMM. Its rounding (a product, then a sum,
// in k order) is the same on every machine; larger d goes to cpu::gemm.
template <int D, typename T>
void matmul_fixed(const T* A, const T* B, T* C) {
  for (int m = 0; m < D; ++m) {
    T c[D] = {};
    for (int k = 0; k < D; ++k)
      for (int n = 0; n < D; ++n) c[n] += A[m * D + k] * B[k * D + n];
    for (int n = 0; n < D; ++n) C[m * D + n] = c[n];
  }
}
template <typename T>
void matmul_dd(int64_t d, const T* A, const T* B, T* C) {
  switch (d) {
    case 1:
      return matmul_fixed<1>(A, B, C);
    case 2:
      return matmul_fixed<2>(A, B, C);
    case 3:
      return matmul_fixed<3>(A, B, C);
    case 4:
      return matmul_fixed<4>(A, B, C);
    case 5:
      return matmul_fixed<5>(A, B, C);
    case 6:
      return matmul_fixed<6>(A, B, C);
    case 7:
      return matmul_fixed<7>(A, B, C);
    case 8:
      return matmul_fixed<8>(A, B, C);
    default:
      return gemm<T>(false, false, d, d, d, A, d, B, d, nullptr, false, C, d);
  }
}

template <typename T>
struct MatmulChain {
  const T* x;
  T* y;
  int64_t Tn, d;
  bool reverse;
  const T* xt(int64_t t) const { return x + at(t, Tn, reverse) * d * d; }
  T* yt(int64_t t) const { return y + at(t, Tn, reverse) * d * d; }
  // dst = acc "then" m: acc @ m walking forward, m @ acc walking backward (so that reversed
  // walks give y_t = x_t x_{t+1} ... x_{T-1}).
  void combine(const T* acc, const T* m, T* dst) const {
    const int64_t dd = d;
    if (reverse)
      matmul_dd<T>(dd, m, acc, dst);
    else
      matmul_dd<T>(dd, acc, m, dst);
  }
  // y over steps [t0, t1) starting from carry (null: the first step is copied).
  void scan(int64_t t0, int64_t t1, const T* carry) const {
    for (int64_t t = t0; t < t1; ++t) {
      const T* prev = t == t0 ? carry : yt(t - 1);
      if (!prev)
        std::memcpy(yt(t), xt(t), sizeof(T) * d * d);
      else
        combine(prev, xt(t), yt(t));
    }
  }
  // total = product over [t0, t1) (t1 > t0), using scratch of d*d.
  void fold(int64_t t0, int64_t t1, T* total, T* scratch) const {
    std::memcpy(total, xt(t0), sizeof(T) * d * d);
    for (int64_t t = t0 + 1; t < t1; ++t) {
      combine(total, xt(t), scratch);
      std::memcpy(total, scratch, sizeof(T) * d * d);
    }
  }
};

}  // namespace

template <typename T>
void matmul_scan(const T* x, T* y, int64_t O, int64_t Tn, int64_t d, const ScanWalk& walk) {
  if (O == 0 || Tn == 0 || d == 0) return;
  const int threads = std::max(1, walk.threads);
  bool by_time = O < threads && Tn >= 4 * threads;
  if (walk.split == TimeSplit::always) by_time = threads > 1 || Tn > 1;
  if (walk.split == TimeSplit::never) by_time = false;
  auto chain = [&](int64_t o) {
    return MatmulChain<T>{x + o * Tn * d * d, y + o * Tn * d * d, Tn, d, walk.reverse};
  };
  if (!by_time) {
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1 && O > 1)
    for (int64_t o = 0; o < O; ++o) chain(o).scan(0, Tn, nullptr);
    return;
  }
  const int64_t P = threads, dd = d * d;
  std::vector<T> totals(size_t(P * dd)), carries(size_t(P * dd)), scratch(size_t(P * dd));
  for (int64_t o = 0; o < O; ++o) {
    const MatmulChain<T> ch = chain(o);
#pragma omp parallel num_threads(threads)
    {
      const int64_t p = omp_get_thread_num(), Pn = omp_get_num_threads();
      // (1) thread 0 scans chunk 0; thread p folds chunk p.
      if (p == 0) {
        ch.scan(0, chunk_begin(1, Tn, Pn), nullptr);
      } else if (chunk_begin(p + 1, Tn, Pn) > chunk_begin(p, Tn, Pn)) {
        ch.fold(chunk_begin(p, Tn, Pn), chunk_begin(p + 1, Tn, Pn), totals.data() + p * dd,
                scratch.data() + p * dd);
      }
#pragma omp barrier
      // (2) carry into chunk p + 1 = y at the end of chunk 0, then chunks 1..p's totals.
      const int64_t e0 = chunk_begin(1, Tn, Pn);
      const T* carry = e0 > 0 ? ch.yt(e0 - 1) : nullptr;
      T* mine = carries.data() + p * dd;
      for (int64_t j = 1; j <= p; ++j) {
        if (chunk_begin(j + 1, Tn, Pn) == chunk_begin(j, Tn, Pn)) continue;
        const T* tot = totals.data() + j * dd;
        if (!carry) {
          std::memcpy(mine, tot, sizeof(T) * dd);
        } else {
          ch.combine(carry, tot, scratch.data() + p * dd);
          std::memcpy(mine, scratch.data() + p * dd, sizeof(T) * dd);
        }
        carry = mine;
      }
      // (3) scan chunk p + 1 from the carry.
      ch.scan(chunk_begin(p + 1, Tn, Pn), chunk_begin(p + 2, Tn, Pn), carry);
    }
  }
}

namespace {

// dst = A h + b for one step (A d x d row-major); eight partial sums per row vectorize.
template <typename T>
void affine_step(const T* A, const T* h, const T* b, T* dst, int64_t d) {
  for (int64_t i = 0; i < d; ++i) {
    const T* row = A + i * d;
    T acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
      for (int u = 0; u < 8; ++u) acc[u] += row[j + u] * h[j + u];
    T sum = b ? b[i] : T(0);
    for (int u = 0; u < 8; ++u) sum += acc[u];
    for (; j < d; ++j) sum += row[j] * h[j];
    dst[i] = sum;
  }
}

template <typename T>
struct AffineChain {
  const T *A, *b, *h0;
  T* h;
  int64_t Tn, d;
  bool reverse;
  const T* At(int64_t t) const { return A + at(t, Tn, reverse) * d * d; }
  const T* bt(int64_t t) const { return b + at(t, Tn, reverse) * d; }
  T* ht(int64_t t) const { return h + at(t, Tn, reverse) * d; }
  // h over steps [t0, t1) from state `prev` (null: zeros).
  void scan(int64_t t0, int64_t t1, const T* prev) const {
    for (int64_t t = t0; t < t1; ++t) {
      if (prev)
        affine_step(At(t), prev, bt(t), ht(t), d);
      else
        std::memcpy(ht(t), bt(t), sizeof(T) * d);
      prev = ht(t);
    }
  }
  // The map of steps [t0, t1) as (M, v): h_out = M h_in + v. M is d x d, v is d; scratch 2d^2.
  void fold(int64_t t0, int64_t t1, T* M, T* v, T* scratch) const {
    std::memcpy(M, At(t0), sizeof(T) * d * d);
    std::memcpy(v, bt(t0), sizeof(T) * d);
    for (int64_t t = t0 + 1; t < t1; ++t) {
      // (A_t, b_t) after (M, v): (A_t M, A_t v + b_t).
      matmul_dd<T>(d, At(t), M, scratch);
      std::memcpy(M, scratch, sizeof(T) * d * d);
      affine_step(At(t), v, bt(t), scratch, d);
      std::memcpy(v, scratch, sizeof(T) * d);
    }
  }
};

}  // namespace

template <typename T>
void affine_scan_matrix(const T* A, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t d,
                        const ScanWalk& walk) {
  if (O == 0 || Tn == 0 || d == 0) return;
  const int threads = std::max(1, walk.threads);
  // Composing two steps' maps costs d^3 against d^2 for a step itself: splitting time over P
  // threads pays only when d < P (see docs/scan.md), so by default it is used only then.
  bool by_time = O < threads && Tn >= 4 * threads && d < threads;
  if (walk.split == TimeSplit::always) by_time = true;
  if (walk.split == TimeSplit::never) by_time = false;
  auto chain = [&](int64_t o) {
    return AffineChain<T>{
        A + o * Tn * d * d, b + o * Tn * d, h0 ? h0 + o * d : nullptr, h + o * Tn * d, Tn, d,
        walk.reverse};
  };
  if (!by_time) {
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1 && O > 1)
    for (int64_t o = 0; o < O; ++o) {
      const AffineChain<T> ch = chain(o);
      ch.scan(0, Tn, ch.h0);
    }
    return;
  }
  const int64_t P = threads, dd = d * d;
  std::vector<T> maps(size_t(P * dd)), offs(size_t(P * d)), carries(size_t(P * d)),
      scratch(size_t(P * 2 * dd));
  for (int64_t o = 0; o < O; ++o) {
    const AffineChain<T> ch = chain(o);
#pragma omp parallel num_threads(threads)
    {
      const int64_t p = omp_get_thread_num(), Pn = omp_get_num_threads();
      T* sc = scratch.data() + p * 2 * dd;
      if (p == 0) {
        ch.scan(0, chunk_begin(1, Tn, Pn), ch.h0);
      } else if (chunk_begin(p + 1, Tn, Pn) > chunk_begin(p, Tn, Pn)) {
        ch.fold(chunk_begin(p, Tn, Pn), chunk_begin(p + 1, Tn, Pn), maps.data() + p * dd,
                offs.data() + p * d, sc);
      }
#pragma omp barrier
      const int64_t e0 = chunk_begin(1, Tn, Pn);
      const T* state = e0 > 0 ? ch.ht(e0 - 1) : ch.h0;
      T* mine = carries.data() + p * d;
      for (int64_t j = 1; j <= p; ++j) {
        if (chunk_begin(j + 1, Tn, Pn) == chunk_begin(j, Tn, Pn)) continue;
        // state <- M_j state + v_j (state null means zeros: just v_j).
        if (state)
          affine_step(maps.data() + j * dd, state, offs.data() + j * d, sc, d);
        else
          std::memcpy(sc, offs.data() + j * d, sizeof(T) * d);
        std::memcpy(mine, sc, sizeof(T) * d);
        state = mine;
      }
      ch.scan(chunk_begin(p + 1, Tn, Pn), chunk_begin(p + 2, Tn, Pn), state);
    }
  }
}

#define GRUX_SCAN_INSTANTIATE(T)                                                                   \
  template void scan_elementwise<T>(ScanKind, const T*, T*, int64_t, int64_t, int64_t,             \
                                    const ScanWalk&);                                              \
  template void affine_scan_diag<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                    const ScanWalk&);                                              \
  template void log_affine_scan_diag<T>(const T*, const T*, const T*, T*, int64_t, int64_t,        \
                                        int64_t, const ScanWalk&);                                 \
  template void affine_scan_matrix<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                      const ScanWalk&);                                            \
  template void matmul_scan<T>(const T*, T*, int64_t, int64_t, int64_t, const ScanWalk&);
GRUX_SCAN_INSTANTIATE(float)
GRUX_SCAN_INSTANTIATE(double)
#undef GRUX_SCAN_INSTANTIATE

}  // namespace grux::cpu
