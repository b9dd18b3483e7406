// The one-channel cumulative sum (cpu/scan.h's sum_scan_contiguous) with Highway SIMD,
// dynamic dispatch; its own file because the per-target compilation wraps the whole file.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scan_sum.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "core/spin_barrier.h"
#include "cpu/scan.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The cumulative sum of one contiguous sequence (one channel, forward, inclusive), the
// bandwidth-bound case: the same three phases, with 128-bit vectors at the compile target
// (SSE2 on x86-64: no dispatch needed for a memory-bound loop). A vector's prefix is formed in
// the register (two shifted adds for 4 floats), J sub-pieces per thread are scanned
// interleaved to hide the carry's latency, and y is written with streaming stores when
// aligned, so that it costs no read-for-ownership: the traffic is that of memcpy.
#if HWY_TARGET == HWY_SCALAR
// No 128-bit vectors on this target: a plain running sum (one thread).
template <typename T>
void SumScanContiguous(const T* x, T* y, int64_t n, int, int64_t) {
  T s = T(0);
  for (int64_t t = 0; t < n; ++t) y[t] = s += x[t];
}
#else
template <typename T>
void SumScanContiguous(const T* x, T* y, int64_t n, int threads, int64_t share_bytes) {
  const hn::Full128<T> d;
  constexpr int64_t L = 16 / sizeof(T), J = 4, kAlign = 64 / sizeof(T);
  const int64_t share =
      std::max<int64_t>(1, (share_bytes / int64_t(sizeof(T))) / (J * kAlign)) * (J * kAlign);
  const bool stream = reinterpret_cast<uintptr_t>(y) % 16 == 0;
  std::vector<T> totals(static_cast<size_t>(2 * threads * J));
  auto prefix = [&](hn::Vec<hn::Full128<T> > v) {
    v = hn::Add(v, hn::ShiftLeftLanes<1>(d, v));
    if constexpr (L == 4) v = hn::Add(v, hn::ShiftLeftLanes<2>(d, v));
    return v;
  };
  // A barrier that yields the core after a short spin: the team meets once per super-block,
  // and spinning on a busy machine would starve the thread being waited for.
  SpinBarrier barrier;
#pragma omp parallel num_threads(threads)
  {
    const int64_t P = omp_get_num_threads(), p = omp_get_thread_num(), S = P * J;
#pragma omp single
    barrier.reset(int(P));
    const int64_t block = share * P;
    T state = T(0);
    int64_t lo[J], hi[J];
    for (int64_t t0 = 0, it = 0; t0 < n; t0 += block, ++it) {
      const int64_t len = std::min(block, n - t0);
      T* tot = totals.data() + (it & 1) * S;
      // Sub-piece boundaries on 64-byte multiples; the very last piece takes the remainder.
      auto bound = [&](int64_t j) {
        return j == S ? t0 + len : t0 + (j * len / S) / kAlign * kAlign;
      };
      int64_t vecs = INT64_MAX;
      for (int64_t j = 0; j < J; ++j) {
        lo[j] = bound(p * J + j);
        hi[j] = bound(p * J + j + 1);
        vecs = std::min(vecs, (hi[j] - lo[j]) / L);
      }
      // (1) Totals of my sub-pieces.
      for (int64_t j = 0; j < J; ++j) {
        auto a0 = hn::Zero(d), a1 = hn::Zero(d);
        int64_t t = lo[j];
        for (; t + 2 * L <= hi[j]; t += 2 * L) {
          a0 = hn::Add(a0, hn::LoadU(d, x + t));
          a1 = hn::Add(a1, hn::LoadU(d, x + t + L));
        }
        T sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
        for (; t < hi[j]; ++t) sum += x[t];
        tot[p * J + j] = sum;
      }
      barrier.wait();
      // (2) Carries into my sub-pieces, and the state after the block (same order everywhere).
      T carry[J];
      T cur = state;
      for (int64_t j = 0; j < S; ++j) {
        if (j >= p * J && j < (p + 1) * J) carry[j - p * J] = cur;
        cur += tot[j];
      }
      state = cur;
      // (3) Scan: the J sub-pieces interleaved, a vector at a time; then each one's tail.
      hn::Vec<hn::Full128<T> > c[J];
      for (int64_t j = 0; j < J; ++j) c[j] = hn::Set(d, carry[j]);
      for (int64_t i = 0; i < vecs; ++i)
        for (int64_t j = 0; j < J; ++j) {
          const int64_t t = lo[j] + i * L;
          const auto v = hn::Add(prefix(hn::LoadU(d, x + t)), c[j]);
          c[j] = hn::Broadcast<L - 1>(v);
          if (stream)
            hn::Stream(v, d, y + t);
          else
            hn::StoreU(v, d, y + t);
        }
      for (int64_t j = 0; j < J; ++j) {
        T s = hn::GetLane(c[j]);
        for (int64_t t = lo[j] + vecs * L; t < hi[j]; ++t) y[t] = s += x[t];
      }
    }
    hwy::FlushStream();
  }
}

#endif

void SumScanF32(const float* x, float* y, int64_t n, int threads, int64_t share_bytes) {
  SumScanContiguous(x, y, n, threads, share_bytes);
}
void SumScanF64(const double* x, double* y, int64_t n, int threads, int64_t share_bytes) {
  SumScanContiguous(x, y, n, threads, share_bytes);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(SumScanF32);
HWY_EXPORT(SumScanF64);

template <>
void sum_scan_contiguous<float>(const float* x, float* y, int64_t n, int threads,
                                int64_t share_bytes) {
  HWY_DYNAMIC_DISPATCH(SumScanF32)(x, y, n, threads, share_bytes);
}
template <>
void sum_scan_contiguous<double>(const double* x, double* y, int64_t n, int threads,
                                 int64_t share_bytes) {
  HWY_DYNAMIC_DISPATCH(SumScanF64)(x, y, n, threads, share_bytes);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
