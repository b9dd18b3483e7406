// Training utilities of grux/optim.h: gradient-norm clipping, the Adam / AdamW and SGD
// optimizers (torch.optim's update rules; elementwise kernels in cpu/optim.h) with
// checkpointable state, and the warm-up + cosine learning-rate schedule.
#include "grux/optim.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <numbers>
#include <set>

#include "cpu/optim.h"
#include "ops/nn_util.h"

namespace grux {

namespace {

// Every parameter: a unique name, value and grad defined, f32 or f64, same shape and dtype,
// both contiguous, on the CPU.
// Loading state needs the values only: a model restored from a checkpoint has no gradients yet.
void check_params(const char* op, const std::vector<Parameter>& params, bool need_grad = true) {
  std::set<std::string> names;
  for (const Parameter& p : params) {
    if (!names.insert(p.name).second)
      throw Error(
          fmt::format("{}: parameter name '{}' appears twice (expected unique names)", op, p.name));
    const std::string v = "parameter '" + p.name + "' value", g = "parameter '" + p.name + "' grad";
    ops::check_float_cpu(op, v.c_str(), p.value);
    if (!need_grad && !p.grad.defined()) {
      if (!p.value.is_contiguous())
        throw Error(
            fmt::format("{}: parameter '{}' has a non-contiguous value (expected "
                        "contiguous)",
                        op, p.name));
      continue;
    }
    ops::check_float_cpu(op, g.c_str(), p.grad);
    check_same_dtype(op, v.c_str(), p.value, g.c_str(), p.grad);
    check_shape(op, g.c_str(), p.grad, p.value.shape());
    if (!p.value.is_contiguous() || !p.grad.is_contiguous())
      throw Error(fmt::format("{}: parameter '{}' has a non-contiguous {} (expected contiguous)",
                              op, p.name, p.value.is_contiguous() ? "grad" : "value"));
  }
}

void check_lr(const char* op, double lr) {
  if (!(std::isfinite(lr) && lr >= 0))
    throw Error(fmt::format("{}: lr is {}, expected a finite value >= 0", op, lr));
}

// Per-parameter state tensors (named slots, shaped like the parameter), the step count, and
// the checkpoint logic shared by Adam and SGD.
class StatefulOptimizer : public Optimizer {
 public:
  StatefulOptimizer(const char* name, std::vector<std::string> slots)
      : name_(name), slots_(std::move(slots)) {}
  int64_t steps() const override { return steps_; }
  const char* name() const override { return name_; }

  std::map<std::string, Tensor> state_dict() const override {
    std::map<std::string, Tensor> out;
    for (const auto& [key, t] : state_) out[key] = t.clone();
    out["step"] = Tensor::from_vector<int64_t>({1}, {steps_});
    return out;
  }

  void load_state_dict(const std::map<std::string, Tensor>& state,
                       const std::vector<Parameter>& params) override {
    check_params(name_, params, /*need_grad=*/false);
    auto it = state.find("step");
    if (it == state.end()) throw Error(fmt::format("{}: state has no key 'step'", name_));
    check_dtype(name_, "state 'step'", it->second, DType::i64);
    check_shape(name_, "state 'step'", it->second, {1});
    const int64_t steps = it->second.data<int64_t>()[0];
    if (steps < 0) throw Error(fmt::format("{}: state 'step' is {}, expected >= 0", name_, steps));
    std::set<std::string> expected{"step"};
    for (const Parameter& p : params)
      for (const std::string& s : slots_) expected.insert(slot_key(p, s));
    for (const auto& [key, t] : state)
      if (!expected.count(key))
        throw Error(
            fmt::format("{}: state has unexpected key '{}' (expected <parameter>.<{}> "
                        "for the given parameters, and 'step')",
                        name_, key, fmt::join(slots_, "|")));
    // A fresh optimizer's state (never stepped) holds no slots; anything else holds all.
    const bool fresh = steps == 0 && state.size() == 1;
    std::map<std::string, Tensor> next;
    if (!fresh) {
      for (const Parameter& p : params)
        for (const std::string& s : slots_) {
          const std::string key = slot_key(p, s);
          auto kt = state.find(key);
          if (kt == state.end()) throw Error(fmt::format("{}: state has no key '{}'", name_, key));
          const std::string what = "state '" + key + "'";
          check_defined(name_, what.c_str(), kt->second);
          check_dtype(name_, what.c_str(), kt->second, p.value.dtype());
          check_shape(name_, what.c_str(), kt->second, p.value.shape());
          if (kt->second.device() != Device::cpu())
            throw Error(fmt::format("{}: {} is on {}, expected cpu", name_, what,
                                    kt->second.device().str()));
          next[key] = kt->second.clone();
        }
    }
    // Everything checked: commit.
    state_ = std::move(next);
    steps_ = steps;
  }

  void step(std::vector<Parameter>& params, double lr) override {
    check_lr(name_, lr);
    check_params(name_, params);
    // The same parameters at every step: state already there must match them exactly.
    if (!state_.empty()) {
      if (state_.size() != params.size() * slots_.size())
        throw Error(
            fmt::format("{}: step got {} parameters, expected the {} the state was made "
                        "for",
                        name_, params.size(), state_.size() / slots_.size()));
      for (const Parameter& p : params)
        for (const std::string& s : slots_) {
          auto it = state_.find(slot_key(p, s));
          if (it == state_.end())
            throw Error(
                fmt::format("{}: parameter '{}' has no optimizer state (expected the "
                            "same parameters at every step)",
                            name_, p.name));
          if (it->second.shape() != p.value.shape() || it->second.dtype() != p.value.dtype())
            throw Error(fmt::format("{}: parameter '{}' is {} {}, but its optimizer state is {} {}",
                                    name_, p.name, dtype_name(p.value.dtype()),
                                    shape_str(p.value.shape()), dtype_name(it->second.dtype()),
                                    shape_str(it->second.shape())));
        }
    } else {
      for (const Parameter& p : params)
        for (const std::string& s : slots_)
          state_[slot_key(p, s)] = Tensor::zeros(p.value.shape(), p.value.dtype());
    }
    update(params, lr);
    ++steps_;
  }

 protected:
  // One step for every parameter; steps() is still the count before this step.
  virtual void update(std::vector<Parameter>& params, double lr) = 0;
  static std::string slot_key(const Parameter& p, const std::string& slot) {
    return p.name + "." + slot;
  }
  Tensor& slot(const Parameter& p, const std::string& s) { return state_.at(slot_key(p, s)); }

  const char* name_;
  std::vector<std::string> slots_;
  std::map<std::string, Tensor> state_;
  int64_t steps_ = 0;
};

class Adam final : public StatefulOptimizer {
 public:
  explicit Adam(const AdamOptions& o)
      : StatefulOptimizer(o.decoupled ? "adamw" : "adam", {"exp_avg", "exp_avg_sq"}), o_(o) {}

 private:
  void update(std::vector<Parameter>& params, double lr) override {
    // Scalars as torch computes them in Python (double), from the 1-based step t.
    const double t = static_cast<double>(steps_ + 1);
    const double bias_correction1 = 1 - std::pow(o_.beta1, t);
    const double bias_correction2 = 1 - std::pow(o_.beta2, t);
    cpu::AdamStep s;
    s.beta1 = o_.beta1;
    s.beta2 = o_.beta2;
    s.eps = o_.eps;
    s.weight_decay = o_.decoupled ? 0.0 : o_.weight_decay;
    s.decay_factor = o_.decoupled ? 1 - lr * o_.weight_decay : 1.0;
    s.bias_correction2_sqrt = std::sqrt(bias_correction2);
    s.step_size = lr / bias_correction1;
    for (Parameter& p : params) {
      Tensor &m = slot(p, "exp_avg"), &v = slot(p, "exp_avg_sq");
      const int64_t n = p.value.numel();
      if (p.value.dtype() == DType::f32)
        cpu::adam_update<float>(n, s, p.value.data<float>(), p.grad.data<float>(), m.data<float>(),
                                v.data<float>());
      else
        cpu::adam_update<double>(n, s, p.value.data<double>(), p.grad.data<double>(),
                                 m.data<double>(), v.data<double>());
    }
  }
  AdamOptions o_;
};

class Sgd final : public StatefulOptimizer {
 public:
  explicit Sgd(const SgdOptions& o)
      : StatefulOptimizer("sgd", o.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                                 : std::vector<std::string>{}),
        o_(o) {}

 private:
  void update(std::vector<Parameter>& params, double lr) override {
    const cpu::SgdStep s{lr, o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, steps_ == 0};
    for (Parameter& p : params) {
      const bool mom = o_.momentum != 0;
      const int64_t n = p.value.numel();
      if (p.value.dtype() == DType::f32)
        cpu::sgd_update<float>(n, s, p.value.data<float>(), p.grad.data<float>(),
                               mom ? slot(p, "momentum_buffer").data<float>() : nullptr);
      else
        cpu::sgd_update<double>(n, s, p.value.data<double>(), p.grad.data<double>(),
                                mom ? slot(p, "momentum_buffer").data<double>() : nullptr);
    }
  }
  SgdOptions o_;
};

}  // namespace

double clip_grad_norm(std::vector<Parameter>& params, double max_norm) {
  const char* op = "clip_grad_norm";
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw Error(fmt::format("{}: max_norm is {}, expected a finite value > 0", op, max_norm));
  for (const Parameter& p : params) {
    const std::string g = "parameter '" + p.name + "' grad";
    ops::check_float_cpu(op, g.c_str(), p.grad);
    if (!p.grad.is_contiguous())
      throw Error(fmt::format("{}: {} is not contiguous (expected contiguous)", op, g));
  }
  double sum = 0;
  for (const Parameter& p : params)
    sum += p.grad.dtype() == DType::f32 ? cpu::sum_squares(p.grad.numel(), p.grad.data<float>())
                                        : cpu::sum_squares(p.grad.numel(), p.grad.data<double>());
  const double norm = std::sqrt(sum);
  // torch multiplies by min(1, coef) unconditionally; multiplying by 1 changes nothing, and a
  // NaN coefficient (NaN norm) propagates into the gradients as it does there.
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef >= 1.0))
    for (Parameter& p : params) {
      if (p.grad.dtype() == DType::f32)
        cpu::scale(p.grad.numel(), coef, p.grad.data<float>());
      else
        cpu::scale(p.grad.numel(), coef, p.grad.data<double>());
    }
  return norm;
}

std::unique_ptr<Optimizer> make_adam(const AdamOptions& o) {
  const char* op = o.decoupled ? "adamw" : "adam";
  if (!(o.beta1 >= 0 && o.beta1 < 1))
    throw Error(fmt::format("{}: beta1 is {}, expected 0 <= beta1 < 1", op, o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1))
    throw Error(fmt::format("{}: beta2 is {}, expected 0 <= beta2 < 1", op, o.beta2));
  if (!(o.eps >= 0 && std::isfinite(o.eps)))
    throw Error(fmt::format("{}: eps is {}, expected a finite value >= 0", op, o.eps));
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay)))
    throw Error(
        fmt::format("{}: weight_decay is {}, expected a finite value >= 0", op, o.weight_decay));
  return std::make_unique<Adam>(o);
}

std::unique_ptr<Optimizer> make_sgd(const SgdOptions& o) {
  const char* op = "sgd";
  if (!(o.momentum >= 0 && std::isfinite(o.momentum)))
    throw Error(fmt::format("{}: momentum is {}, expected a finite value >= 0", op, o.momentum));
  if (!std::isfinite(o.dampening))
    throw Error(fmt::format("{}: dampening is {}, expected a finite value", op, o.dampening));
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay)))
    throw Error(
        fmt::format("{}: weight_decay is {}, expected a finite value >= 0", op, o.weight_decay));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw Error(
        fmt::format("{}: nesterov with momentum {} and dampening {}, expected momentum > "
                    "0 and dampening 0 (as torch.optim.SGD)",
                    op, o.momentum, o.dampening));
  return std::make_unique<Sgd>(o);
}

double LrSchedule::at(int64_t step) const {
  if (step < 0) throw Error(fmt::format("lr schedule: step is {}, expected >= 0", step));
  if (warmup_steps < 0)
    throw Error(fmt::format("lr schedule: warmup_steps is {}, expected >= 0", warmup_steps));
  if (step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (total_steps <= 0) return base_lr;
  if (step >= total_steps) return min_lr;
  const double p = static_cast<double>(step - warmup_steps) /
                   static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  return min_lr + (base_lr - min_lr) * (1 + std::cos(std::numbers::pi * p)) / 2;
}

}  // namespace grux
