// Optimizer kernels: elementwise Adam / AdamW and SGD updates following torch.optim's
// arithmetic, and the deterministic sum of squares of gradient clipping. See cpu/optim.h.
#include "cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace grux::cpu {

namespace {
// Elementwise loops go parallel only when a parameter is large enough to pay for the team;
// each element's arithmetic is the same either way.
constexpr int64_t kParallelElements = int64_t(1) << 16;
}  // namespace

template <typename T>
void adam_update(int64_t n, const AdamStep& s, T* p, const T* g, T* m, T* v) {
  // Scalars rounded to T as torch rounds a Python float multiplying a tensor of dtype T.
  const T b1 = static_cast<T>(s.beta1), one_b1 = static_cast<T>(1 - s.beta1);
  const T b2 = static_cast<T>(s.beta2), one_b2 = static_cast<T>(1 - s.beta2);
  const T wd = static_cast<T>(s.weight_decay), decay = static_cast<T>(s.decay_factor);
  const T bc2 = static_cast<T>(s.bias_correction2_sqrt), eps = static_cast<T>(s.eps);
  const T neg_step = static_cast<T>(-s.step_size);
  const bool l2 = s.weight_decay != 0, decoupled = s.decay_factor != 1;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (l2) gi = gi + wd * p[i];
    T pi = p[i];
    if (decoupled) pi = pi * decay;
    const T mi = m[i] * b1 + one_b1 * gi;
    const T vi = v[i] * b2 + one_b2 * gi * gi;
    const T denom = std::sqrt(vi) / bc2 + eps;
    p[i] = pi + neg_step * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename T>
void sgd_update(int64_t n, const SgdStep& s, T* p, const T* g, T* buf) {
  const T wd = static_cast<T>(s.weight_decay), mom = static_cast<T>(s.momentum);
  const T one_damp = static_cast<T>(1 - s.dampening), neg_lr = static_cast<T>(-s.lr);
  const bool l2 = s.weight_decay != 0, momentum = s.momentum != 0;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (l2) d = d + wd * p[i];
    if (momentum) {
      const T b = s.first ? d : buf[i] * mom + one_damp * d;
      buf[i] = b;
      d = s.nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <typename T>
double sum_squares(int64_t n, const T* x) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t k = 0; k < blocks; ++k) {
    // Eight interleaved accumulators: short dependency chains, a fixed combination order.
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t i1 = std::min(n, (k + 1) * kBlock);
    int64_t i = k * kBlock;
    for (; i + 8 <= i1; i += 8)
      for (int j = 0; j < 8; ++j) {
        const double xv = static_cast<double>(x[i + j]);
        acc[j] += xv * xv;
      }
    for (int j = 0; i < i1; ++i, ++j) acc[j] += static_cast<double>(x[i]) * x[i];
    partial[k] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
  double s = 0;
  for (double v : partial) s += v;
  return s;
}

template <typename T>
void scale(int64_t n, double factor, T* x) {
  const T f = static_cast<T>(factor);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * f;
}

#define GRUX_OPTIM_INSTANTIATE(T)                                               \
  template void adam_update<T>(int64_t, const AdamStep&, T*, const T*, T*, T*); \
  template void sgd_update<T>(int64_t, const SgdStep&, T*, const T*, T*);       \
  template double sum_squares<T>(int64_t, const T*);                            \
  template void scale<T>(int64_t, double, T*);
GRUX_OPTIM_INSTANTIATE(float)
GRUX_OPTIM_INSTANTIATE(double)
#undef GRUX_OPTIM_INSTANTIATE

}  // namespace grux::cpu
