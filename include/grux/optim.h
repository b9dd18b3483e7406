// Training utilities: parameters with gradients, Adam / AdamW and SGD with momentum (PyTorch's
// update rules, so that runs match torch.optim step for step), global-norm gradient
// clipping, and a learning-rate schedule with linear warm-up and cosine decay.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// A trainable tensor and its gradient (same shape and dtype, both contiguous). Names are
// unique; they key the optimizer's state in checkpoints.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
};

// torch.nn.utils.clip_grad_norm_(params, max_norm): the L2 norm of all gradients together
// (accumulated in double); when it exceeds max_norm, every gradient is multiplied by
// max_norm / (norm + 1e-6). Returns the norm before clipping. max_norm must be > 0.
// Precisely as torch: gradients are scaled whenever coef = max_norm / (norm + 1e-6) < 1 (so
// also for norm in (max_norm - 1e-6, max_norm]); a NaN norm makes the gradients NaN.
double clip_grad_norm(std::vector<Parameter>& params, double max_norm);

// An optimizer updates parameters in place from their gradients at a given learning rate
// (the schedule's value for this step), keeping its own per-parameter state.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(std::vector<Parameter>& params, double lr) = 0;
  // Number of step() calls so far.
  virtual int64_t steps() const = 0;
  // State for checkpoints: tensors keyed "<param name>.<slot>" (e.g. "fc.weight.exp_avg")
  // plus "step" (i64 scalar, shape (1,)). load_state_dict checks every key, shape and dtype
  // against `params` and throws grux::Error naming the first mismatch (nothing changes then).
  // Slots: Adam/AdamW "exp_avg", "exp_avg_sq"; SGD "momentum_buffer" (only with momentum).
  // Before the first step the state is {"step": 0} alone, and loading that is accepted (a
  // fresh optimizer); otherwise every slot of every parameter is required and keys for
  // other parameters are rejected. The first step (or a load) fixes the parameter set: later
  // steps must pass parameters with the same names, shapes and dtypes (else grux::Error).
  virtual std::map<std::string, Tensor> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state,
                               const std::vector<Parameter>& params) = 0;
  virtual const char* name() const = 0;  // "adam", "adamw", "sgd"
};

// torch.optim.Adam (decoupled = false: weight_decay adds wd * p to the gradient) or
// torch.optim.AdamW (decoupled = true: p *= 1 - lr * wd before the Adam update).
struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = false;
};
// torch.optim.SGD: d = g + wd * p; with momentum, buf = d on the first step, else
// buf = momentum * buf + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf;
// p -= lr * d.
struct SgdOptions {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
std::unique_ptr<Optimizer> make_adam(const AdamOptions& options);
std::unique_ptr<Optimizer> make_sgd(const SgdOptions& options);

// Learning rate at step s (0-based): base_lr * (s + 1) / warmup_steps during the warm-up,
// then cosine decay from base_lr to min_lr over the remaining steps up to total_steps:
//   p = (s - warmup) / max(1, total - warmup), lr = min_lr + (base_lr - min_lr) * (1 + cos(pi p)) /
//   2
// and min_lr once s >= total_steps. total_steps <= 0 means no decay (constant after warm-up).
// The warm-up takes precedence (s < warmup_steps) even when warmup_steps >= total_steps.
// A negative step or warmup_steps throws grux::Error.
struct LrSchedule {
  double base_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0.0;
  double at(int64_t step) const;
};

}  // namespace GRUX_API
