// Softmax cross-entropy with Highway SIMD (dynamic dispatch): per row a vector max, a vector
// exp written straight into the gradient row, a double-precision sum, then one scaling pass.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/cross_entropy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/cross_entropy.h"
#include "grux/error.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of n values in double with 8 interleaved accumulators combined in a fixed order:
// deterministic, and short dependency chains.
template <typename T>
HWY_INLINE double SumDouble(const T* p, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t v = 0;
  for (; v + 8 <= n; v += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(p[v + k]);
  for (int k = 0; v < n; ++v, ++k) acc[k] += static_cast<double>(p[v]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename T>
void CrossEntropyRows(int64_t M, int64_t V, const T* logits, int64_t ld, const int64_t* targets,
                      double scale, double* row_loss, T* dlogits) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(T);
  GRUX_ASSERT(L <= static_cast<int64_t>(kMaxLanes));
  const bool parallel = M > 1 && M * V > (1 << 14);
#pragma omp parallel if (parallel)
  {
    // Without a gradient output the exponentials still need a row of scratch.
    std::vector<T> scratch(dlogits == nullptr ? static_cast<size_t>(V) : 0);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      const T* x = logits + m * ld;
      T* e = dlogits != nullptr ? dlogits + m * V : scratch.data();
      // 1. Row maximum (exact, so order does not matter).
      T mx = -HUGE_VAL;
      int64_t v = 0;
      if (V >= L) {
        auto vmax = hn::LoadU(d, x);
        for (v = L; v + L <= V; v += L) vmax = hn::Max(vmax, hn::LoadU(d, x + v));
        mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
      }
      for (; v < V; ++v) mx = std::max(mx, x[v]);
      // 2. e = exp(x - mx) <= 1: no overflow whatever the logits' magnitude.
      const auto vmx = hn::Set(d, mx);
      for (v = 0; v + L <= V; v += L)
        hn::StoreU(hn::Exp(d, hn::Sub(hn::LoadU(d, x + v), vmx)), d, e + v);
      if (v < V) {
        // The tail goes through a full-width buffer: no load or store past the row on any
        // target (masked loads and stores may touch whole vectors on older ones).
        HWY_ALIGN T buf[kMaxLanes];
        const int64_t r = V - v;
        std::copy(x + v, x + V, buf);
        std::fill(buf + r, buf + L, mx);
        hn::Store(hn::Exp(d, hn::Sub(hn::Load(d, buf), vmx)), d, buf);
        std::copy(buf, buf + r, e + v);
      }
      // 3. Loss from the double sum.
      const double s = SumDouble(e, V);
      const int64_t t = targets[m];
      row_loss[m] = std::log(s) - (static_cast<double>(x[t]) - static_cast<double>(mx));
      // 4. Gradient: softmax * scale, minus scale at the target.
      if (dlogits != nullptr) {
        const auto f = hn::Set(d, static_cast<T>(scale / s));
        for (v = 0; v + L <= V; v += L) hn::StoreU(hn::Mul(hn::LoadU(d, e + v), f), d, e + v);
        for (; v < V; ++v) e[v] = e[v] * static_cast<T>(scale / s);
        e[t] -= static_cast<T>(scale);
      }
    }
  }
}

void CrossEntropyF32(int64_t M, int64_t V, const float* logits, int64_t ld, const int64_t* t,
                     double scale, double* row_loss, float* dlogits) {
  CrossEntropyRows(M, V, logits, ld, t, scale, row_loss, dlogits);
}
void CrossEntropyF64(int64_t M, int64_t V, const double* logits, int64_t ld, const int64_t* t,
                     double scale, double* row_loss, double* dlogits) {
  CrossEntropyRows(M, V, logits, ld, t, scale, row_loss, dlogits);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(CrossEntropyF32);
HWY_EXPORT(CrossEntropyF64);

template <>
void cross_entropy<float>(int64_t M, int64_t V, const float* logits, int64_t ld,
                          const int64_t* targets, double scale, double* row_loss, float* dlogits) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyF32)(M, V, logits, ld, targets, scale, row_loss, dlogits);
}
template <>
void cross_entropy<double>(int64_t M, int64_t V, const double* logits, int64_t ld,
                           const int64_t* targets, double scale, double* row_loss,
                           double* dlogits) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyF64)(M, V, logits, ld, targets, scale, row_loss, dlogits);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
