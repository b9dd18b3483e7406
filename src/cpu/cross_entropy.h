// Softmax cross-entropy kernel on raw pointers: one fused pass per row gives the row's loss
// and, optionally, its gradient (softmax - onehot) * scale.
#pragma once

#include <cstdint>

#include "core/visibility.h"

namespace grux::cpu {

// Sizes: M rows, V classes (vocabulary).
// logits: M x V, row stride ld (>= V); targets: M values, each already checked in [0, V).
// For every row m: with mx = max_v logits(m, v) and s = sum_v exp(logits(m, v) - mx) (in
// double),
//   row_loss[m] = log(s) - (logits(m, t) - mx)     (= -log_softmax(logits[m])[t], t = targets[m])
// and, when dlogits is not null, dlogits (M x V, contiguous) row m = (exp(logits(m, :) - mx) / s
// - onehot(t)) * scale. Rows are independent, so results do not depend on the thread count.
template <typename T>
GRUX_INTERNAL void cross_entropy(int64_t M, int64_t V, const T* logits, int64_t ld,
                                 const int64_t* targets, double scale, double* row_loss,
                                 T* dlogits);

}  // namespace grux::cpu
