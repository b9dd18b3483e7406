// The training loop's state and checkpoints for the character-level language model, plus
// the loss-curve writers (SVG and CSV).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "grux/io.h"
#include "grux/train.h"

namespace grux {

namespace {

constexpr const char* kFormat = "grux-charlm-1";
constexpr int64_t kValStreams = 64;

std::unique_ptr<Optimizer> make_optimizer(const TrainOptions& o) {
  if (o.optimizer == "adam" || o.optimizer == "adamw") {
    AdamOptions a;
    a.weight_decay = o.weight_decay;
    a.decoupled = o.optimizer == "adamw";
    return make_adam(a);
  }
  SgdOptions s;
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  return make_sgd(s);
}

LrSchedule make_schedule(const TrainOptions& o) {
  LrSchedule s;
  s.base_lr = o.lr;
  s.min_lr = o.min_lr;
  s.warmup_steps = o.warmup;
  s.total_steps = o.steps;
  return s;
}

// Dropout masks differ per step but are reproducible from the run's seed.
uint64_t dropout_seed(uint64_t seed, int64_t step) {
  return seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) * 0xBF58476D1CE4E5B9ull + 1;
}

std::string xml_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '<':
        r += "&lt;";
        break;
      case '>':
        r += "&gt;";
        break;
      case '&':
        r += "&amp;";
        break;
      case '"':
        r += "&quot;";
        break;
      default:
        r += c;
    }
  }
  return r;
}

// Streams [first, first + count) of a state (L, N, H), as (L, count, H).
Tensor streams_of(const Tensor& h, int64_t first, int64_t count) {
  const int64_t L = h.size(0), N = h.size(1), row = h.size(2) * dtype_size(h.dtype());
  Tensor r = Tensor::empty({L, count, h.size(2)}, h.dtype());
  const char* src = static_cast<const char*>(h.raw_data());
  char* dst = static_cast<char*>(r.raw_data());
  for (int64_t l = 0; l < L; ++l)
    std::memcpy(dst + l * count * row, src + (l * N + first) * row, count * row);
  return r;
}

// FNV-1a of the parameters' bytes: the same model on every rank, or not.
std::string weights_hash(const std::vector<Parameter>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Parameter& p : params) {
    const Tensor v = p.value.contiguous();
    const auto* b = static_cast<const unsigned char*>(v.raw_data());
    for (size_t i = 0, n = v.numel() * dtype_size(v.dtype()); i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("{:016x}", h);
}

}  // namespace

uint64_t text_hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// ---- Options -------------------------------------------------------------------------

void TrainOptions::validate() const {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) throw Error(fmt::format("--{} is {}, expected {}..{}", name, v, lo, hi));
  };
  range("batch", batch, 1, 1 << 16);
  range("window", window, 1, 1 << 16);
  range("steps", steps, 1, int64_t(1) << 40);
  range("warmup", warmup, 0, int64_t(1) << 40);
  range("eval-every", eval_every, 1, int64_t(1) << 40);
  if (optimizer != "adam" && optimizer != "adamw" && optimizer != "sgd")
    throw Error(fmt::format("--optimizer {} (expected adam, adamw or sgd)", optimizer));
  if (!(lr > 0 && std::isfinite(lr))) throw Error(fmt::format("--lr is {}, expected > 0", lr));
  if (!(min_lr >= 0 && min_lr <= lr))
    throw Error(fmt::format("--min-lr is {}, expected 0 <= min-lr <= lr ({})", min_lr, lr));
  if (!(weight_decay >= 0 && std::isfinite(weight_decay)))
    throw Error(fmt::format("--weight-decay is {}, expected >= 0", weight_decay));
  if (!(momentum >= 0 && momentum < 1))
    throw Error(fmt::format("--momentum is {}, expected 0 <= momentum < 1", momentum));
  if (!(clip >= 0 && std::isfinite(clip)))
    throw Error(fmt::format("--clip is {}, expected >= 0 (0 disables clipping)", clip));
  if (!(val_fraction >= 0 && val_fraction < 1))
    throw Error(fmt::format("--val-fraction is {}, expected 0 <= fraction < 1", val_fraction));
  if (precision == Precision::int8)
    throw Error(
        "--precision int8 is for inference (grux generate, grux model eval); train in "
        "f32 or bf16");
  if (precision == Precision::bf16 && model.dtype != DType::f32)
    throw Error(
        fmt::format("--precision bf16 trains an f32 model, not {}", dtype_name(model.dtype)));
  model.validate();
}

std::string TrainOptions::to_json() const {
  nlohmann::json j{{"batch", batch},
                   {"window", window},
                   {"steps", steps},
                   {"optimizer", optimizer},
                   {"lr", lr},
                   {"min_lr", min_lr},
                   {"warmup", warmup},
                   {"weight_decay", weight_decay},
                   {"momentum", momentum},
                   {"clip", clip},
                   {"val_fraction", val_fraction},
                   {"eval_every", eval_every},
                   {"seed", seed},
                   {"precision", precision_name(precision)}};
  return j.dump();
}

TrainOptions TrainOptions::from_json(const std::string& text, const CharLmConfig& model) {
  TrainOptions o;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    o.batch = j.at("batch").get<int64_t>();
    o.window = j.at("window").get<int64_t>();
    o.steps = j.at("steps").get<int64_t>();
    o.optimizer = j.at("optimizer").get<std::string>();
    o.lr = j.at("lr").get<double>();
    o.min_lr = j.at("min_lr").get<double>();
    o.warmup = j.at("warmup").get<int64_t>();
    o.weight_decay = j.at("weight_decay").get<double>();
    o.momentum = j.at("momentum").get<double>();
    o.clip = j.at("clip").get<double>();
    o.val_fraction = j.at("val_fraction").get<double>();
    o.eval_every = j.at("eval_every").get<int64_t>();
    o.seed = j.at("seed").get<uint64_t>();
    // A checkpoint without a precision trained in f32.
    if (j.contains("precision"))
      o.precision = parse_precision(j.at("precision").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("training options are malformed: {}", e.what()));
  }
  o.model = model;
  o.validate();
  return o;
}

// ---- Trainer -------------------------------------------------------------------------

Communicator& Trainer::communicator() const {
  static SingleProcess one;
  return comm_ ? *comm_ : one;
}

void Trainer::setup(const std::string& text) {
  const Communicator& comm = communicator();
  if (options_.batch % comm.size() != 0)
    throw Error(
        fmt::format("--batch {} is not divisible by the {} processes (each takes as many streams)",
                    options_.batch, comm.size()));
  local_ = options_.batch / comm.size();
  first_ = comm.rank() * local_;
  std::vector<int64_t> ids = vocab_.encode(text, "training text");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t n_val = static_cast<int64_t>(std::floor(n * options_.val_fraction));
  std::vector<int64_t> val_ids(ids.end() - n_val, ids.end());
  ids.resize(n - n_val);
  train_ = std::make_unique<TextBatches>(std::move(ids), options_.batch, options_.window);
  if (n_val > 0) {
    // Validation is forward-only: it runs as many streams as fit, up to kValStreams (wider
    // batches make it faster), independent of the training batch.
    const int64_t streams = std::min(kValStreams, n_val / (options_.window + 1));
    if (streams < 1)
      throw Error(fmt::format(
          "the validation part ({} characters, --val-fraction {}) is shorter than one window "
          "of {} + 1 characters (use a longer text, a larger --val-fraction or 0)",
          n_val, options_.val_fraction, options_.window));
    val_ = std::make_unique<TextBatches>(std::move(val_ids), streams, options_.window);
  }
  schedule_ = make_schedule(options_);
}

Trainer::Trainer(const TrainOptions& options, const std::string& text,
                 const std::map<std::string, Tensor>* initial, Communicator* comm)
    : comm_(comm), options_(options) {
  std::string error;
  try {
    vocab_ = Vocab::from_text(text);
    options_.model.vocab = vocab_.size();
    options_.validate();
    text_hash_ = text_hash(text);
    setup(text);
    model_ = initial ? std::make_unique<CharLm>(options_.model, *initial)
                     : std::make_unique<CharLm>(options_.model, options_.seed);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(communicator(), error);
  check_same_run();
  optimizer_ = make_optimizer(options_);
  h_ = Tensor::zeros({options_.model.state_rows(), local_, options_.model.hidden},
                     options_.model.dtype);
}

void Trainer::check_same_run() const {
  Communicator& comm = communicator();
  if (comm.size() == 1) return;
  agree_same(comm, "training text (hash)", fmt::format("{:016x}", text_hash_));
  agree_same(comm, "settings", options_.to_json() + " " + options_.model.to_json());
  agree_same(comm, "step", std::to_string(step_));
  agree_same(comm, "model weights (hash)", weights_hash(model_->parameters()));
}

void Trainer::sum_gradients(double& loss) {
  Communicator& comm = communicator();
  const int K = comm.size();
  if (K == 1) return;
  std::vector<Parameter>& params = model_->parameters();
  auto run = [&](auto* tag, auto& flat) {
    using T = std::remove_pointer_t<decltype(tag)>;
    size_t n = 0;
    for (const Parameter& p : params) n += p.grad.numel();
    flat.resize(n);
    size_t at = 0;
    for (const Parameter& p : params) {
      GRUX_ASSERT(p.grad.is_contiguous() && p.grad.dtype() == dtype_of<T>());
      std::memcpy(flat.data() + at, p.grad.data<T>(), p.grad.numel() * sizeof(T));
      at += p.grad.numel();
    }
    comm.sum(flat.data(), static_cast<int64_t>(n));
    at = 0;
    for (Parameter& p : params) {
      T* g = p.grad.data<T>();
      for (int64_t i = 0; i < p.grad.numel(); ++i) g[i] = flat[at + i] / static_cast<T>(K);
      at += p.grad.numel();
    }
  };
  if (options_.model.dtype == DType::f32)
    run(static_cast<float*>(nullptr), flat_f32_);
  else
    run(static_cast<double*>(nullptr), flat_f64_);
  comm.sum(&loss, 1);
  loss /= K;
}

StepStats Trainer::step() {
  GRUX_ASSERT(!done());
  // The window cursor wraps around the training part; each pass starts from a zero state.
  const int64_t w = step_ % train_->windows();
  if (w == 0) h_.fill(0.0);
  train_->window(w, ids_, targets_, first_, local_);
  StepStats s;
  s.step = step_ + 1;
  s.tokens = options_.batch * options_.window;
  s.loss = model_->forward_backward(ids_, targets_, h_, true, dropout_seed(options_.seed, step_),
                                    options_.precision, BatchShare{first_, options_.batch});
  sum_gradients(s.loss);
  std::vector<Parameter>& params = model_->parameters();
  s.grad_norm = options_.clip > 0 ? clip_grad_norm(params, options_.clip) : 0.0;
  s.lr = schedule_.at(step_);
  optimizer_->step(params, s.lr);
  ++step_;
  history_.train_loss.push_back(s.loss);
  return s;
}

void Trainer::plan_steps(int64_t total) {
  GRUX_ASSERT(step_ <= options_.warmup + 1);
  if (total < std::max<int64_t>(step_, 1))
    throw Error(
        fmt::format("planned steps {} (expected >= {})", total, std::max<int64_t>(step_, 1)));
  options_.steps = total;
  schedule_ = make_schedule(options_);
}

double Trainer::validation_loss(Precision precision) {
  if (!val_) throw Error("no validation part (--val-fraction is 0)");
  const CharLmConfig& c = options_.model;
  // f32 runs the training forward (what evaluate() has always recorded); the other
  // precisions an inference plan with the weights converted once.
  std::optional<GruInference> gru_plan;
  std::optional<LstmInference> lstm_plan;
  if (precision != Precision::f32 && c.lstm()) lstm_plan.emplace(model_->lstm(), precision);
  if (precision != Precision::f32 && !c.lstm()) gru_plan.emplace(model_->gru(), precision);
  // With K ranks, rank r takes streams [S r / K, S (r + 1) / K) of the S validation streams
  // (some may take none), and the ranks add up their tokens' losses.
  Communicator& comm = communicator();
  const int64_t S = val_->batch(), K = comm.size(), r = comm.rank();
  const int64_t first = S * r / K, count = S * (r + 1) / K - first;
  Tensor h = Tensor::zeros({c.state_rows(), count, c.hidden}, c.dtype);
  Tensor ids, targets;
  double sum = 0;
  for (int64_t w = 0; w < val_->windows() && count > 0; ++w) {
    val_->window(w, ids, targets, first, count);
    const double loss = gru_plan    ? model_->loss(ids, targets, h, *gru_plan)
                        : lstm_plan ? model_->loss(ids, targets, h, *lstm_plan)
                                    : model_->forward_backward(ids, targets, h, false);
    sum += K == 1 ? loss : loss * static_cast<double>(count);
  }
  if (K == 1) return sum / static_cast<double>(val_->windows());
  comm.sum(&sum, 1);
  return sum / static_cast<double>(S * val_->windows());
}

double Trainer::evaluate() {
  const double loss = validation_loss(Precision::f32);
  if (history_.val_step.empty() || history_.val_step.back() != step_) {
    history_.val_step.push_back(step_);
    history_.val_loss.push_back(loss);
  }
  return loss;
}

void Trainer::save_checkpoint(const std::string& path) const {
  Communicator& comm = communicator();
  // The carried state of every rank's streams, in stream order: the whole run's.
  Tensor h = h_;
  if (comm.size() > 1) {
    const size_t bytes = h_.numel() * dtype_size(h_.dtype());
    const std::vector<std::string> parts =
        comm.all_gather(std::string(static_cast<const char*>(h_.raw_data()), bytes));
    const int64_t L = h_.size(0), H = h_.size(2), N = options_.batch;
    const size_t row = H * dtype_size(h_.dtype());
    h = Tensor::empty({L, N, H}, h_.dtype());
    char* dst = static_cast<char*>(h.raw_data());
    for (size_t r = 0; r < parts.size(); ++r) {
      GRUX_ASSERT(parts[r].size() == bytes);
      for (int64_t l = 0; l < L; ++l)
        std::memcpy(dst + (l * N + static_cast<int64_t>(r) * local_) * row,
                    parts[r].data() + l * local_ * row, local_ * row);
    }
  }
  std::string error;
  if (comm.rank() == 0) {
    try {
      write_checkpoint(path, h);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_no_error(comm, error);
}

void Trainer::write_checkpoint(const std::string& path, const Tensor& h) const {
  std::map<std::string, Tensor> t;
  for (const auto& [name, v] : model_->state_dict()) t["model." + name] = v;
  for (const auto& [name, v] : optimizer_->state_dict()) t["optim." + name] = v;
  t["state.h"] = h;
  t["history.train_loss"] = Tensor::from_vector<double>(
      {static_cast<int64_t>(history_.train_loss.size())}, history_.train_loss);
  t["history.val_step"] = Tensor::from_vector<int64_t>(
      {static_cast<int64_t>(history_.val_step.size())}, history_.val_step);
  t["history.val_loss"] = Tensor::from_vector<double>(
      {static_cast<int64_t>(history_.val_loss.size())}, history_.val_loss);
  std::map<std::string, std::string> meta{
      {"format", kFormat},
      {"model", options_.model.to_json()},
      {"train", options_.to_json()},
      {"optimizer", optimizer_->name()},
      {"vocab", vocab_.to_utf8()},
      {"step", std::to_string(step_)},
      {"text_hash", fmt::format("{:016x}", text_hash_)},
  };
  write_safetensors(path, t, meta);
}

namespace {

// A checkpoint's metadata value; a missing key means the file is not a grux checkpoint.
const std::string& checkpoint_meta(const SafeTensors& ck, const std::string& path,
                                   const char* key) {
  auto it = ck.metadata.find(key);
  if (it == ck.metadata.end())
    throw Error(
        fmt::format("checkpoint {}: missing metadata '{}' (not a grux training "
                    "checkpoint?)",
                    path, key));
  return it->second;
}

SafeTensors read_checkpoint(const std::string& path) {
  SafeTensors ck = read_safetensors(path);
  const std::string& format = checkpoint_meta(ck, path, "format");
  if (format != kFormat)
    throw Error(fmt::format("checkpoint {}: format '{}', expected '{}'", path, format, kFormat));
  return ck;
}

std::map<std::string, Tensor> with_prefix(const SafeTensors& ck, const std::string& prefix) {
  std::map<std::string, Tensor> r;
  for (const auto& [k, v] : ck.tensors)
    if (k.rfind(prefix, 0) == 0) r[k.substr(prefix.size())] = v;
  return r;
}

int64_t parse_step(const std::string& step) {
  if (step.empty() || step.size() > 15 || step.find_first_not_of("0123456789") != step.npos)
    throw Error(fmt::format("step '{}' is not a number", step));
  return std::stoll(step);
}

}  // namespace

TrainedModel load_trained_model(const std::string& path) {
  SafeTensors ck = read_checkpoint(path);
  auto meta = [&](const char* key) -> const std::string& { return checkpoint_meta(ck, path, key); };
  TrainedModel m;
  try {
    const CharLmConfig model = CharLmConfig::from_json(meta("model"));
    m.options = TrainOptions::from_json(meta("train"), model);
    m.vocab = Vocab::from_utf8(meta("vocab"));
    if (m.vocab.size() != model.vocab)
      throw Error(fmt::format("vocabulary has {} characters but the model expects {}",
                              m.vocab.size(), model.vocab));
    m.model = std::make_unique<CharLm>(model, with_prefix(ck, "model."));
    m.step = parse_step(meta("step"));
    auto vl = ck.tensors.find("history.val_loss");
    if (vl != ck.tensors.end() && vl->second.dtype() == DType::f64 && vl->second.dim() == 1)
      m.val_loss.assign(vl->second.data<double>(), vl->second.data<double>() + vl->second.numel());
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {}: {}", path, e.what()));
  }
  return m;
}

Trainer Trainer::resume(const std::string& path, const std::string& text, Communicator* comm) {
  Trainer tr;
  tr.comm_ = comm;
  std::string error;
  try {
    tr.load_checkpoint(path, text);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(tr.communicator(), error);
  tr.check_same_run();
  return tr;
}

void Trainer::load_checkpoint(const std::string& path, const std::string& text) {
  SafeTensors ck = read_checkpoint(path);
  auto meta = [&](const char* key) -> const std::string& { return checkpoint_meta(ck, path, key); };
  Trainer& tr = *this;
  try {
    const CharLmConfig model = CharLmConfig::from_json(meta("model"));
    tr.options_ = TrainOptions::from_json(meta("train"), model);
    tr.vocab_ = Vocab::from_utf8(meta("vocab"));
    if (tr.vocab_.size() != model.vocab)
      throw Error(fmt::format("vocabulary has {} characters but the model expects {}",
                              tr.vocab_.size(), model.vocab));
    const std::string hash = fmt::format("{:016x}", text_hash(text));
    if (hash != meta("text_hash"))
      throw Error(
          fmt::format("it was trained on other data (text hash {} vs {} of the given "
                      "text)",
                      meta("text_hash"), hash));
    tr.text_hash_ = text_hash(text);
    tr.setup(text);
    tr.model_ = std::make_unique<CharLm>(model, with_prefix(ck, "model."));
    tr.optimizer_ = make_optimizer(tr.options_);
    tr.optimizer_->load_state_dict(with_prefix(ck, "optim."), tr.model_->parameters());
    tr.step_ = parse_step(meta("step"));
    if (tr.optimizer_->steps() != tr.step_)
      throw Error(fmt::format("optimizer state is at step {}, the checkpoint at step {}",
                              tr.optimizer_->steps(), tr.step_));
    auto get = [&](const char* key, DType dtype, const Shape* shape) -> const Tensor& {
      auto it = ck.tensors.find(key);
      if (it == ck.tensors.end()) throw Error(fmt::format("missing tensor '{}'", key));
      if (it->second.dtype() != dtype)
        throw Error(fmt::format("tensor '{}' has dtype {}, expected {}", key,
                                dtype_name(it->second.dtype()), dtype_name(dtype)));
      if (shape && it->second.shape() != *shape)
        throw Error(fmt::format("tensor '{}' has shape {}, expected {}", key,
                                shape_str(it->second.shape()), shape_str(*shape)));
      if (!shape && it->second.dim() != 1)
        throw Error(fmt::format("tensor '{}' has shape {}, expected one dimension", key,
                                shape_str(it->second.shape())));
      return it->second;
    };
    const Shape h_shape{model.state_rows(), tr.options_.batch, model.hidden};
    tr.h_ = streams_of(get("state.h", model.dtype, &h_shape), tr.first_, tr.local_);
    const Shape loss_shape{tr.step_};
    const Tensor& tl = get("history.train_loss", DType::f64, &loss_shape);
    tr.history_.train_loss.assign(tl.data<double>(), tl.data<double>() + tl.numel());
    const Tensor& vs = get("history.val_step", DType::i64, nullptr);
    const Shape vs_shape = vs.shape();
    const Tensor& vl = get("history.val_loss", DType::f64, &vs_shape);
    tr.history_.val_step.assign(vs.data<int64_t>(), vs.data<int64_t>() + vs.numel());
    tr.history_.val_loss.assign(vl.data<double>(), vl.data<double>() + vl.numel());
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

// ---- Loss curve ----------------------------------------------------------------------

std::string loss_curve_csv(const Trainer::History& h) {
  std::string s = "step,train_loss,val_loss\n";
  size_t v = 0;
  for (size_t i = 0; i < h.train_loss.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i) + 1;
    std::string val;
    while (v < h.val_step.size() && h.val_step[v] < step) ++v;
    if (v < h.val_step.size() && h.val_step[v] == step) val = fmt::format("{:.6f}", h.val_loss[v]);
    s += fmt::format("{},{:.6f},{}\n", step, h.train_loss[i], val);
  }
  return s;
}

std::string loss_curve_svg(const Trainer::History& h, const std::string& title) {
  const double W = 720, H = 420, left = 60, right = 20, top = 40, bottom = 50;
  const size_t n = h.train_loss.size();
  // Exponential moving average: per-step losses are noisy; the trend is what matters.
  std::vector<double> smooth(n);
  double ema = n ? h.train_loss[0] : 0;
  for (size_t i = 0; i < n; ++i) smooth[i] = ema = 0.95 * ema + 0.05 * h.train_loss[i];
  double lo = 1e300, hi = -1e300;
  for (double v : h.train_loss) lo = std::min(lo, v), hi = std::max(hi, v);
  for (double v : h.val_loss) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  lo = std::max(0.0, lo - 0.05 * (hi - lo));
  const double xmax = std::max<double>(1, static_cast<double>(n));
  auto X = [&](double step) { return left + (W - left - right) * step / xmax; };
  auto Y = [&](double loss) { return top + (H - top - bottom) * (1 - (loss - lo) / (hi - lo)); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      W, H, left, xml_escape(title));
  // Axes with five ticks each.
  s += fmt::format("<path d=\"M{} {}V{}H{}\" stroke=\"black\" fill=\"none\"/>\n", left, top,
                   H - bottom, W - right);
  for (int k = 0; k <= 4; ++k) {
    const double loss = lo + (hi - lo) * k / 4, step = xmax * k / 4;
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.2f}</text>\n<text x=\"{:.1f}\" "
        "y=\"{:.1f}\" text-anchor=\"middle\">{:.0f}</text>\n",
        left - 6, Y(loss) + 4, loss, X(step), H - bottom + 18, step);
  }
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step</text>\n<text x=\"14\" "
      "y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" text-anchor=\"middle\">loss (nats per "
      "character)</text>\n",
      (W + left) / 2, H - 12, (H + top) / 2, (H + top) / 2);
  auto polyline = [&](const std::vector<double>& xs, const std::vector<double>& ys,
                      const char* style) {
    std::string pts;
    for (size_t i = 0; i < xs.size(); ++i) pts += fmt::format("{:.1f},{:.1f} ", X(xs[i]), Y(ys[i]));
    return fmt::format("<polyline points=\"{}\" fill=\"none\" {}/>\n", pts, style);
  };
  std::vector<double> steps(n);
  for (size_t i = 0; i < n; ++i) steps[i] = static_cast<double>(i + 1);
  s += polyline(steps, h.train_loss, "stroke=\"#9ecae1\" stroke-width=\"0.8\"");
  s += polyline(steps, smooth, "stroke=\"#08519c\" stroke-width=\"2\"");
  std::vector<double> vx(h.val_step.begin(), h.val_step.end());
  s += polyline(vx, h.val_loss, "stroke=\"#d94801\" stroke-width=\"2\"");
  for (size_t i = 0; i < vx.size(); ++i)
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#d94801\"/>\n", X(vx[i]),
                     Y(h.val_loss[i]));
  s += fmt::format(
      "<text x=\"{0}\" y=\"{1}\" fill=\"#08519c\">training (smoothed)</text>\n<text x=\"{0}\" "
      "y=\"{2}\" fill=\"#d94801\">validation</text>\n</svg>\n",
      W - right - 150, top + 12, top + 28);
  return s;
}

}  // namespace grux
