// Optimizer kernels on raw pointers: the per-element update rules of torch.optim's Adam /
// AdamW and SGD, and the sum of squares / scaling used by gradient-norm clipping.
#pragma once

#include <cstdint>

namespace grux::cpu {

// Sizes: n elements of one parameter (value p, gradient g, state slots), all contiguous.

// Scalars of one Adam step, computed once per step in double (as torch does in Python) and
// rounded to T inside the kernel where torch rounds them (to the tensor's dtype).
struct AdamStep {
  double beta1, beta2, eps;
  double weight_decay;           // L2 (Adam): added to the gradient; 0 for AdamW
  double decay_factor;           // AdamW: p *= decay_factor (= 1 - lr * wd) first; 1 for Adam
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  double step_size;              // lr / (1 - beta1^t)
};
// Per element, in torch's order of operations:
//   g' = g + wd p;  p *= decay;  m = m b1 + (1 - b1) g';  v = v b2 + ((1 - b2) g') g';
//   p += (-step_size m) / (sqrt(v) / sqrt(1 - b2^t) + eps).
// g is not modified.
template <typename T>
void adam_update(int64_t n, const AdamStep& s, T* p, const T* g, T* m, T* v);

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first;  // first step: the momentum buffer starts as d (torch's clone)
};
// Per element: d = g + wd p; with momentum: buf = first ? d : buf momentum + (1 - dampening) d,
// d = nesterov ? d + momentum buf : buf; then p += -lr d. buf is unused (may be null) when
// momentum == 0.
template <typename T>
void sgd_update(int64_t n, const SgdStep& s, T* p, const T* g, T* buf);

// sum_i x_i^2 in double, over fixed blocks combined in order: independent of thread count.
template <typename T>
double sum_squares(int64_t n, const T* x);
// x *= factor (rounded to T).
template <typename T>
void scale(int64_t n, double factor, T* x);

}  // namespace grux::cpu
