// Optimizers, gradient clipping and the learning-rate schedule: torch.optim traces and
// clip_grad_norm_ results from golden/nn (gen_nn_golden.py), hand-computed schedule values,
// checkpoint round trips, and every error path (which must leave the optimizer unchanged).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>

#include "grux/io.h"
#include "grux/optim.h"
#include "test_util.h"

namespace grux::test_optim {
namespace {

const std::string kDir = std::string(GRUX_GOLDEN_DIR) + "/nn";

std::vector<std::string> golden_files(const std::vector<std::string>& prefixes) {
  return test::golden_files(kDir, prefixes);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.raw_data(), bc.raw_data(), ac.numel() * dtype_size(a.dtype())) == 0;
}

bool same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a)
    if (!b.count(k) || !same_bits(t, b.at(k))) return false;
  return true;
}

// The optimizers' tolerances: f64 within 1e-12, f32 within 1e-6 relative.
test::Tol optim_tol(DType t) {
  return t == DType::f32 ? test::Tol{1e-6, 1e-6} : test::Tol{1e-12, 1e-12};
}

std::unique_ptr<Optimizer> make_from(const nlohmann::json& cfg) {
  const auto& o = cfg["options"];
  if (cfg["kind"] == "sgd") {
    SgdOptions s;
    s.momentum = o["momentum"];
    s.dampening = o["dampening"];
    s.weight_decay = o["weight_decay"];
    s.nesterov = o["nesterov"];
    return make_sgd(s);
  }
  AdamOptions a;
  a.beta1 = o["beta1"];
  a.beta2 = o["beta2"];
  a.eps = o["eps"];
  a.weight_decay = o["weight_decay"];
  a.decoupled = cfg["kind"] == "adamw";
  return make_adam(a);
}

// ---- Golden optimizer traces ---------------------------------------------------------------

class OptimGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimGolden, MatchesTorchOptim) {
  const SafeTensors st = read_safetensors(kDir + "/" + GetParam());
  const auto cfg = nlohmann::json::parse(st.metadata.at("config"));
  auto get = [&](const std::string& k) { return st.tensors.at(k); };
  std::unique_ptr<Optimizer> opt = make_from(cfg);
  EXPECT_EQ(std::string(opt->name()), cfg["kind"].get<std::string>());
  std::vector<Parameter> params;
  for (const char* n : {"a", "b"}) {
    const Tensor v = get(std::string("init.") + n).clone();
    params.push_back({n, v, Tensor::zeros(v.shape(), v.dtype())});
  }
  const test::Tol tol = optim_tol(params[0].value.dtype());
  const Tensor lr = get("lr");
  const int64_t steps = cfg["steps"];
  for (int64_t s = 0; s < steps; ++s) {
    for (Parameter& p : params) p.grad.copy_from(get("grad" + std::to_string(s) + "." + p.name));
    opt->step(params, lr.at_flat(s));
    EXPECT_EQ(opt->steps(), s + 1);
    for (const Parameter& p : params)
      EXPECT_TRUE(test::all_close(GetParam() + " step " + std::to_string(s), p.name, p.value,
                                  get("after" + std::to_string(s) + "." + p.name), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(optimPyTorch, OptimGolden,
                         ::testing::ValuesIn(golden_files({"adam", "sgd"})),
                         test::golden_case_name);

// ---- Clipping --------------------------------------------------------------------------------

class ClipGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ClipGolden, MatchesClipGradNorm) {
  const SafeTensors st = read_safetensors(kDir + "/" + GetParam());
  const auto cfg = nlohmann::json::parse(st.metadata.at("config"));
  std::vector<Parameter> params;
  for (int i = 0; i < cfg["count"].get<int>(); ++i) {
    const Tensor g = st.tensors.at("grad" + std::to_string(i)).clone();
    params.push_back({"p" + std::to_string(i), Tensor::zeros(g.shape(), g.dtype()), g});
  }
  const double norm = clip_grad_norm(params, cfg["max_norm"]);
  const bool f32 = cfg["dtype"] == "f32";
  const double expected = st.tensors.at("norm").item();
  // torch accumulates f32 norms in float; grux in double.
  EXPECT_NEAR(norm, expected, (f32 ? 1e-6 : 1e-14) * expected) << GetParam();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(test::all_close(GetParam(), params[i].name, params[i].grad,
                                st.tensors.at("clipped" + std::to_string(i)),
                                optim_tol(params[i].grad.dtype())));
}

INSTANTIATE_TEST_SUITE_P(optimPyTorch, ClipGolden, ::testing::ValuesIn(golden_files({"clip_"})),
                         test::golden_case_name);

TEST(optimClip, HandComputed) {
  // Gradients (3, 4) and (12): norm sqrt(9 + 16 + 144) = 13.
  std::vector<Parameter> params = {
      {"a", Tensor::zeros({2}, DType::f64), Tensor::from_vector<double>({2}, {3, 4})},
      {"b", Tensor::zeros({1}, DType::f64), Tensor::from_vector<double>({1}, {12})}};
  EXPECT_EQ(clip_grad_norm(params, 13.5), 13.0);  // below: unchanged
  EXPECT_EQ(params[0].grad.item({0}), 3.0);
  EXPECT_EQ(clip_grad_norm(params, 6.5), 13.0);  // above: scaled by 6.5 / (13 + 1e-6)
  EXPECT_DOUBLE_EQ(params[1].grad.item({0}), 12 * 6.5 / (13 + 1e-6));
  std::vector<Parameter> none;
  EXPECT_EQ(clip_grad_norm(none, 1.0), 0.0);
}

TEST(optimClip, ThreadCountDoesNotChangeBits) {
  std::mt19937_64 rng(5);
  const Tensor g = test::random_tensor({300001}, DType::f32, rng);
  double norm[2];
  Tensor out[2];
  const int before = omp_get_max_threads();
  for (int k = 0; k < 2; ++k) {
    omp_set_num_threads(k + 1);
    std::vector<Parameter> p = {{"g", Tensor::zeros(g.shape(), g.dtype()), g.clone()}};
    norm[k] = clip_grad_norm(p, 1.0);
    out[k] = p[0].grad;
  }
  omp_set_num_threads(before);
  EXPECT_EQ(norm[0], norm[1]);
  EXPECT_TRUE(same_bits(out[0], out[1]));
}

// ---- Schedule ----------------------------------------------------------------------------------

TEST(optimLrSchedule, MatchesGolden) {
  const SafeTensors st = read_safetensors(kDir + "/schedule.safetensors");
  const auto cfg = nlohmann::json::parse(st.metadata.at("config"));
  ASSERT_EQ(cfg["schedules"].size(), 4u);
  for (const auto& c : cfg["schedules"]) {
    LrSchedule s;
    s.base_lr = c["base_lr"];
    s.warmup_steps = c["warmup_steps"];
    s.total_steps = c["total_steps"];
    s.min_lr = c["min_lr"];
    const Tensor lr = st.tensors.at("lr." + c["name"].get<std::string>());
    for (int64_t k = 0; k < lr.numel(); ++k)
      EXPECT_NEAR(s.at(k), lr.at_flat(k), 1e-15 * s.base_lr) << c["name"] << " step " << k;
  }
}

TEST(optimLrSchedule, HandComputed) {
  LrSchedule s{1.0, 4, 14, 0.1};
  EXPECT_EQ(s.at(0), 0.25);                      // warm-up: (s + 1) / warmup
  EXPECT_EQ(s.at(3), 1.0);                       // last warm-up step reaches base_lr
  EXPECT_EQ(s.at(4), 1.0);                       // cosine starts at base_lr (p = 0)
  EXPECT_NEAR(s.at(9), 0.1 + 0.9 * 0.5, 1e-15);  // p = 1/2
  EXPECT_NEAR(s.at(13), 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * 0.9)) / 2, 1e-15);
  EXPECT_EQ(s.at(14), 0.1);  // s = total: min_lr
  EXPECT_EQ(s.at(1000), 0.1);
  LrSchedule constant{0.5, 2, 0, 0.0};  // total <= 0: no decay
  EXPECT_EQ(constant.at(0), 0.25);
  EXPECT_EQ(constant.at(2), 0.5);
  EXPECT_EQ(constant.at(1000000), 0.5);
  EXPECT_EQ((LrSchedule{0.5, 0, -3, 0.0}.at(7)), 0.5);
  LrSchedule no_warmup{2.0, 0, 10, 0.0};
  EXPECT_EQ(no_warmup.at(0), 2.0);
  EXPECT_NEAR(no_warmup.at(5), 1.0, 1e-15);
  LrSchedule one{1.0, 0, 1, 0.5};  // total - warmup = 1
  EXPECT_EQ(one.at(0), 1.0);
  EXPECT_EQ(one.at(1), 0.5);
  LrSchedule warmup_past_total{1.0, 5, 3, 0.2};
  EXPECT_EQ(warmup_past_total.at(4), 1.0);  // warm-up wins while s < warmup
  EXPECT_EQ(warmup_past_total.at(5), 0.2);  // then s >= total
}

// ---- Checkpoints -----------------------------------------------------------------------------

std::vector<Parameter> fresh_params(DType dt) {
  std::mt19937_64 rng(77);
  std::vector<Parameter> p;
  p.push_back({"fc.weight", test::random_tensor({4, 3}, dt, rng), Tensor::zeros({4, 3}, dt)});
  p.push_back({"fc.bias", test::random_tensor({4}, dt, rng), Tensor::zeros({4}, dt)});
  return p;
}

void set_grads(std::vector<Parameter>& params, int64_t step) {
  std::mt19937_64 rng(1000 + step);
  for (Parameter& p : params)
    p.grad.copy_from(test::random_tensor(p.value.shape(), p.value.dtype(), rng));
}

struct Maker {
  const char* name;
  std::unique_ptr<Optimizer> (*make)();
};
const Maker kMakers[] = {
    {"adam",
     [] {
       return make_adam(AdamOptions{0.9, 0.99, 1e-8, 0.01, false});
     }},
    {"adamw",
     [] {
       return make_adam(AdamOptions{0.9, 0.999, 1e-8, 0.1, true});
     }},
    {"sgd_momentum",
     [] {
       return make_sgd(SgdOptions{0.9, 0.1, 0.01, false});
     }},
    {"sgd_nesterov",
     [] {
       return make_sgd(SgdOptions{0.8, 0.0, 0.0, true});
     }},
    {"sgd_plain", [] { return make_sgd(SgdOptions{}); }},
};

class Checkpoint : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(Checkpoint, ResumedRunIsBitIdentical) {
  const Maker& mk = kMakers[std::get<0>(GetParam())];
  const DType dt = std::get<1>(GetParam());
  const LrSchedule sched{0.05, 2, 6, 0.001};
  // Uninterrupted: 6 steps.
  auto straight = mk.make();
  std::vector<Parameter> a = fresh_params(dt);
  for (int64_t s = 0; s < 6; ++s) {
    set_grads(a, s);
    straight->step(a, sched.at(s));
  }
  // Interrupted after 3 steps: state (through safetensors bytes) and values into a new run.
  auto first = mk.make();
  std::vector<Parameter> b = fresh_params(dt);
  EXPECT_EQ(first->state_dict().size(), 1u);  // only "step" before any step
  for (int64_t s = 0; s < 3; ++s) {
    set_grads(b, s);
    first->step(b, sched.at(s));
  }
  const auto saved = parse_safetensors(serialize_safetensors(first->state_dict()), "checkpoint");
  EXPECT_EQ(saved.tensors.at("step").at_flat(0), 3.0);
  auto resumed = mk.make();
  std::vector<Parameter> c = fresh_params(dt);
  for (size_t i = 0; i < c.size(); ++i) c[i].value.copy_from(b[i].value);
  resumed->load_state_dict(saved.tensors, c);
  EXPECT_EQ(resumed->steps(), 3);
  EXPECT_TRUE(same_state(resumed->state_dict(), first->state_dict()));
  for (int64_t s = 3; s < 6; ++s) {
    set_grads(c, s);
    resumed->step(c, sched.at(resumed->steps()));
  }
  EXPECT_EQ(resumed->steps(), 6);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same_bits(a[i].value, c[i].value)) << mk.name << " " << a[i].name;
  EXPECT_TRUE(same_state(straight->state_dict(), resumed->state_dict())) << mk.name;
}

TEST_P(Checkpoint, FreshStateLoadsIntoFreshOptimizer) {
  const Maker& mk = kMakers[std::get<0>(GetParam())];
  const DType dt = std::get<1>(GetParam());
  std::vector<Parameter> a = fresh_params(dt), b = fresh_params(dt);
  auto x = mk.make(), y = mk.make();
  y->load_state_dict(x->state_dict(), b);
  set_grads(a, 0);
  set_grads(b, 0);
  x->step(a, 0.1);
  y->step(b, 0.1);
  EXPECT_TRUE(same_bits(a[0].value, b[0].value));
}

INSTANTIATE_TEST_SUITE_P(optimizers, Checkpoint,
                         ::testing::Combine(::testing::Range(0,
                                                             static_cast<int>(std::size(kMakers))),
                                            ::testing::Values(DType::f32, DType::f64)),
                         [](const auto& info) {
                           return std::string(kMakers[std::get<0>(info.param)].name) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// ---- Errors ------------------------------------------------------------------------------------

#define EXPECT_ERROR(stmt, part)                                                              \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << #stmt << " did not throw";                                             \
    } catch (const Error& e) {                                                                \
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)                          \
          << #stmt << " threw '" << e.what() << "', expected it to contain '" << part << "'"; \
    }                                                                                         \
  } while (0)

TEST(optimErrors, LoadStateDictLeavesOptimizerUnchanged) {
  for (const Maker& mk : kMakers) {
    if (std::string(mk.name) == "sgd_plain") continue;  // no per-parameter state
    auto opt = mk.make();
    std::vector<Parameter> p = fresh_params(DType::f64);
    for (int64_t s = 0; s < 2; ++s) {
      set_grads(p, s);
      opt->step(p, 0.01);
    }
    const auto before = opt->state_dict();
    const std::string slot = before.begin()->first;  // e.g. "fc.bias.exp_avg"
    auto expect_rejected = [&](std::map<std::string, Tensor> bad, const std::string& part) {
      EXPECT_ERROR(opt->load_state_dict(bad, p), part);
      EXPECT_TRUE(same_state(opt->state_dict(), before)) << mk.name << ": " << part;
      EXPECT_EQ(opt->steps(), 2);
    };
    auto missing = before;
    missing.erase(slot);
    expect_rejected(missing, "state has no key '" + slot + "'");
    auto no_step = before;
    no_step.erase("step");
    expect_rejected(no_step, "state has no key 'step'");
    auto shape = before;
    shape[slot] = Tensor::zeros({7}, DType::f64);
    expect_rejected(shape, "state '" + slot + "' has shape (7,), expected");
    auto dtype = before;
    dtype[slot] = before.at(slot).to(DType::f32);
    expect_rejected(dtype, "state '" + slot + "' has dtype f32, expected f64");
    auto extra = before;
    extra["fc.other.exp_avg"] = Tensor::zeros({1}, DType::f64);
    expect_rejected(extra, "unexpected key 'fc.other.exp_avg'");
    auto bad_step = before;
    bad_step["step"] = Tensor::from_vector<int64_t>({1}, {-2});
    expect_rejected(bad_step, "state 'step' is -2, expected >= 0");
    auto f_step = before;
    f_step["step"] = Tensor::zeros({1}, DType::f64);
    expect_rejected(f_step, "state 'step' has dtype f64, expected i64");
    // The optimizer still steps exactly as before.
    set_grads(p, 2);
    opt->step(p, 0.01);
    EXPECT_EQ(opt->steps(), 3);
  }
}

TEST(optimErrors, Step) {
  auto opt = make_adam(AdamOptions{});
  std::vector<Parameter> p = fresh_params(DType::f32);
  EXPECT_ERROR(opt->step(p, -1.0), "adam: lr is -1, expected a finite value >= 0");
  EXPECT_ERROR(opt->step(p, std::nan("")), "lr is nan");
  auto bad = p;
  bad[1].grad = Tensor::zeros({5}, DType::f32);
  EXPECT_ERROR(opt->step(bad, 0.1), "parameter 'fc.bias' grad has shape (5,), expected (4,)");
  bad = p;
  bad[1].grad = Tensor::zeros({4}, DType::f64);
  EXPECT_ERROR(opt->step(bad, 0.1), "has dtype f64 but parameter 'fc.bias' value has dtype f32");
  bad = p;
  bad[1].grad = Tensor();
  EXPECT_ERROR(opt->step(bad, 0.1), "parameter 'fc.bias' grad is undefined");
  bad = p;
  bad[1].name = "fc.weight";
  EXPECT_ERROR(opt->step(bad, 0.1), "parameter name 'fc.weight' appears twice");
  bad = p;
  bad[0].value = Tensor::zeros({3, 4}, DType::f32).transpose(0, 1);
  EXPECT_ERROR(opt->step(bad, 0.1), "parameter 'fc.weight' has a non-contiguous value");
  EXPECT_EQ(opt->steps(), 0);
  opt->step(p, 0.1);
  // After the first step the parameter set is fixed.
  bad = p;
  bad[1].name = "fc.b";
  EXPECT_ERROR(opt->step(bad, 0.1), "parameter 'fc.b' has no optimizer state");
  bad = p;
  bad.pop_back();
  EXPECT_ERROR(opt->step(bad, 0.1), "step got 1 parameters, expected the 2");
  EXPECT_EQ(opt->steps(), 1);
}

TEST(optimErrors, Options) {
  EXPECT_ERROR(make_adam(AdamOptions{1.0, 0.999, 1e-8, 0, false}),
               "adam: beta1 is 1, expected 0 <= beta1 < 1");
  EXPECT_ERROR(make_adam(AdamOptions{0.9, -0.1, 1e-8, 0, true}), "adamw: beta2 is -0.1");
  EXPECT_ERROR(make_adam(AdamOptions{0.9, 0.999, -1, 0, false}), "eps is -1");
  EXPECT_ERROR(make_adam(AdamOptions{0.9, 0.999, 1e-8, -0.5, false}), "weight_decay is -0.5");
  EXPECT_ERROR(make_sgd(SgdOptions{-0.9, 0, 0, false}), "sgd: momentum is -0.9");
  EXPECT_ERROR(make_sgd(SgdOptions{0.0, 0, 0, true}), "nesterov with momentum 0");
  EXPECT_ERROR(make_sgd(SgdOptions{0.9, 0.5, 0, true}), "dampening 0.5");
  EXPECT_ERROR(make_sgd(SgdOptions{0.9, 0, -1, false}), "weight_decay is -1");
  std::vector<Parameter> p = fresh_params(DType::f64);
  EXPECT_ERROR(clip_grad_norm(p, 0.0),
               "clip_grad_norm: max_norm is 0, expected a finite value > 0");
  EXPECT_ERROR(clip_grad_norm(p, -1.0), "max_norm is -1");
  p[0].grad = Tensor();
  EXPECT_ERROR(clip_grad_norm(p, 1.0), "parameter 'fc.weight' grad is undefined");
  EXPECT_ERROR(LrSchedule{}.at(-1), "lr schedule: step is -1, expected >= 0");
  EXPECT_ERROR((LrSchedule{1.0, -2, 0, 0}.at(0)), "warmup_steps is -2");
  EXPECT_STREQ(make_adam(AdamOptions{})->name(), "adam");
  EXPECT_STREQ(make_sgd(SgdOptions{})->name(), "sgd");
}

}  // namespace
}  // namespace grux::test_optim
