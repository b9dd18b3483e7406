// F.cross_entropy driver (reduction 'mean'): validates logits and targets at the API
// boundary, runs the fused per-row kernel (cpu/cross_entropy.h) or its reference twin, and
// reduces the per-row losses in a fixed order, so the loss never depends on the thread count.
#include "cpu/cross_entropy.h"

#include <fmt/format.h>

#include <vector>

#include "cpu/ref/nn_ref.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "ops/nn_util.h"
#include "ops/threads_option.h"

namespace grux {

namespace {

template <typename T>
CrossEntropy run(const Tensor& logits, const Tensor& targets, bool want_grad) {
  const int64_t M = logits.size(0), V = logits.size(1);
  const auto lo = ops::row_major_operand<T>(logits);
  CrossEntropy r;
  if (want_grad) r.dlogits = Tensor::empty({M, V}, dtype_of<T>());
  std::vector<double> row_loss(static_cast<size_t>(M));
  auto kernel = reference_kernels() ? &cpu::ref::cross_entropy<T> : &cpu::cross_entropy<T>;
  kernel(M, V, lo.data, lo.ld, targets.data<int64_t>(), 1.0 / static_cast<double>(M),
         row_loss.data(), want_grad ? r.dlogits.data<T>() : nullptr);
  double sum = 0;
  for (double l : row_loss) sum += l;
  r.loss = sum / static_cast<double>(M);
  return r;
}

}  // namespace

CrossEntropy cross_entropy(const Tensor& logits, const Tensor& targets, bool want_grad,
                           int threads) {
  const char* op = "cross_entropy";
  ops::ThreadsScope scope(op, threads);
  ops::check_float_cpu(op, "logits", logits);
  ops::check_dim(op, "logits", logits, 2, "(M, V)");
  const int64_t M = logits.size(0), V = logits.size(1);
  if (M < 1 || V < 1)
    throw Error(fmt::format("{}: logits has shape {}, expected at least one row and one class", op,
                            shape_str(logits.shape())));
  check_defined(op, "targets", targets);
  check_same_device(op, "logits", logits, "targets", targets);
  check_dtype(op, "targets", targets, DType::i64);
  check_shape(op, "targets", targets, {M});
  const Tensor t = targets.contiguous();
  const int64_t* p = t.data<int64_t>();
  for (int64_t m = 0; m < M; ++m)
    if (p[m] < 0 || p[m] >= V)
      throw Error(fmt::format("{}: targets[{}] = {} is out of range (expected 0 <= target < {})",
                              op, m, p[m], V));
  return logits.dtype() == DType::f32 ? run<float>(logits, t, want_grad)
                                      : run<double>(logits, t, want_grad);
}

}  // namespace grux
