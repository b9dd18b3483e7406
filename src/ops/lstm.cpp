// The LSTM operator (nn.LSTM semantics): validates a problem at the API boundary and runs the
// stack driver (ops/recurrent_stack.h) with the LSTM's cell (ops/lstm_layer.h's
// LstmLayerCell). Also weights I/O by state_dict keys and LstmCell (a one-step, one-layer
// LSTM).
#include "grux/lstm.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>

#include "core/descriptor.h"
#include "cpu/lstm_stream.h"
#include "ops/lstm_layer.h"
#include "ops/recurrent.h"
#include "ops/recurrent_stack.h"
#include "ops/step_buffer.h"
#include "ops/threads_option.h"

namespace grux {

using ops::SeqLayout;

int64_t LstmConfig::layer_input_size(int64_t layer) const {
  return layer == 0 ? input_size : directions() * output_size();
}

void LstmConfig::validate() const {
  if (input_size < 1) throw Error(fmt::format("lstm: input_size is {}, expected >= 1", input_size));
  if (hidden_size < 1)
    throw Error(fmt::format("lstm: hidden_size is {}, expected >= 1", hidden_size));
  if (num_layers < 1) throw Error(fmt::format("lstm: num_layers is {}, expected >= 1", num_layers));
  if (proj_size < 0 || proj_size >= hidden_size)
    throw Error(
        fmt::format("lstm: proj_size is {}, expected 0 (none) or 1 <= proj_size < hidden_size = {}",
                    proj_size, hidden_size));
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw Error(fmt::format("lstm: dropout is {}, expected 0 <= dropout < 1", dropout));
}

LstmProblem LstmProblem::parse(const std::string& text) {
  const char* form =
      "l{L}d{D}t{T}n{N}i{I}h{H}[p{P}], e.g. l1d1t100n64i256h512; l, d and p may be omitted";
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'l', true, false, 6}, {'d', true, false, 6}, {'t'}, {'n'}, {'i'}, {'h'}, {'p', true}},
      "problem descriptor", form);
  LstmProblem p;
  p.num_layers = d.get('l', 1), p.T = d.get('t'), p.N = d.get('n'), p.input_size = d.get('i'),
  p.hidden_size = d.get('h'), p.proj_size = d.get('p', 0);
  const int64_t D = d.get('d', 1);
  if (D < 1 || D > 2)
    throw Error(fmt::format("problem descriptor '{}': d{} (expected d1 or d2)", text, D));
  p.bidirectional = D == 2;
  for (auto [name, v] : {std::pair{"l", p.num_layers},
                         {"t", p.T},
                         {"n", p.N},
                         {"i", p.input_size},
                         {"h", p.hidden_size}})
    if (v < 1)
      throw Error(fmt::format("problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  if (d.has('p') && (p.proj_size < 1 || p.proj_size >= p.hidden_size))
    throw Error(fmt::format("problem descriptor '{}': p{} (expected 1 <= p < h = {})", text,
                            p.proj_size, p.hidden_size));
  return p;
}

std::string LstmProblem::descriptor() const {
  return fmt::format("l{}d{}t{}n{}i{}h{}{}", num_layers, directions(), T, N, input_size,
                     hidden_size, proj_size > 0 ? fmt::format("p{}", proj_size) : std::string());
}

LstmCellProblem LstmCellProblem::parse(const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'n'}, {'i'}, {'h'}}, "LSTMCell problem descriptor", "n{N}i{I}h{H}, e.g. n1i256h256");
  LstmCellProblem p;
  p.N = d.get('n'), p.I = d.get('i'), p.H = d.get('h');
  for (auto [name, v] : {std::pair{"n", p.N}, {"i", p.I}, {"h", p.H}})
    if (v < 1)
      throw Error(
          fmt::format("LSTMCell problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  return p;
}

std::string LstmCellProblem::descriptor() const {
  return fmt::format("n{}i{}h{}", N, I, H);
}

double LstmProblem::gemm_flops() const {
  const int64_t D = directions(), H = hidden_size, P = output_size();
  double f = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    f += D * 2.0 * static_cast<double>(rows()) * 4 * H * (layer_input_size(l) + P);
    if (proj_size > 0) f += D * 2.0 * static_cast<double>(rows()) * H * P;
  }
  return f;
}

std::string lstm_key(const char* what, int64_t layer, int64_t direction) {
  return gru_key(what, layer, direction);
}

LstmTape::LstmTape() = default;
LstmTape::~LstmTape() = default;
LstmTape::LstmTape(LstmTape&&) noexcept = default;
LstmTape& LstmTape::operator=(LstmTape&&) noexcept = default;
bool LstmTape::empty() const {
  return data_ == nullptr;
}

// What backward needs from forward_train: the stack driver's tape with the LSTM's cell.
struct LstmTapeData : ops::StackTape<ops::LstmLayerCell> {};

namespace {

// ---- The stack driver with the LSTM's cell -------------------------------------------

ops::SeqSpec seq_spec(const LstmConfig& c, DType dtype) {
  return {"lstm",        c.input_size, c.output_size(), c.num_layers * c.directions(),
          c.batch_first, dtype};
}

ops::StackInput normalize(const LstmConfig& c, DType dtype, const Tensor& input, const Tensor& h0,
                          const Tensor& c0, const Tensor& lengths) {
  return ops::normalize_stack(seq_spec(c, dtype), c.hidden_size, input, h0, c0, lengths);
}

ops::StackShape stack_shape(const LstmConfig& c) {
  return {c.num_layers, c.directions(), c.input_size, c.output_size(), c.dropout};
}

template <typename T>
ops::LstmLayerCell<T> layer_cell(const LstmConfig& c) {
  return {ops::lstm_kernels<T>(), c};
}

// `packed` (inference): the layers packed beforehand (LstmInference), else packed here, in
// `precision` (forward_train in bf16).
template <typename T>
LstmOutput forward_impl(const LstmConfig& c, const std::vector<LstmLayerWeights>& weights,
                        const ops::StackInput& p, bool training, uint64_t seed, LstmTapeData* tape,
                        BatchShare share = {},
                        const std::vector<ops::LstmPackedLayer<T>>* packed = nullptr,
                        Precision precision = Precision::f32) {
  ops::StackResult r =
      ops::stack_forward<T>(layer_cell<T>(c), stack_shape(c), p, &weights, packed, precision,
                            training, seed, share, tape ? &tape->record<T>() : nullptr);
  r.to_caller(c.batch_first, p.unbatched);
  return {r.output, r.h_n, r.c_n};
}

template <typename T>
LstmGrads backward_impl(const LstmConfig& c, LstmTapeData& tape, const Tensor& dout,
                        const Tensor& dhn, const Tensor& dcn) {
  ops::StackGrads<LstmLayerWeights> g = ops::stack_backward<T>(
      layer_cell<T>(c), stack_shape(c), tape.lay, tape.record<T>(), dout, dhn, dcn);
  LstmGrads grads;
  grads.dweights = std::move(g.dweights);
  grads.dinput = ops::to_caller_layout(g.dinput, c.batch_first, tape.unbatched);
  grads.dh0 = tape.unbatched ? g.dh0.squeeze(1) : g.dh0;
  grads.dc0 = tape.unbatched ? g.dc0.squeeze(1) : g.dc0;
  return grads;
}

}  // namespace

// ---- Lstm ------------------------------------------------------------------------------

Lstm::Lstm(const LstmConfig& config, DType dtype, uint64_t seed) : config_(config), dtype_(dtype) {
  config_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(
        fmt::format("lstm: dtype {} is not supported (expected f32 or f64)", dtype_name(dtype)));
  weights_ = ops::random_stack_weights<LstmLayerWeights>(config_, dtype, seed);
}

Lstm::Lstm(const LstmConfig& config, std::vector<LstmLayerWeights> weights) : config_(config) {
  config_.validate();
  set_weights(std::move(weights));
}

Lstm::Lstm(const Lstm& other)
    : config_(other.config_),
      dtype_(other.dtype_),
      weights_(ops::clone_stack_weights(other.config_, other.weights_)) {}

Lstm& Lstm::operator=(const Lstm& other) {
  if (this != &other) *this = Lstm(other);
  return *this;
}

void Lstm::set_weights(std::vector<LstmLayerWeights> weights) {
  const int64_t D = config_.directions();
  if (static_cast<int64_t>(weights.size()) != config_.num_layers * D)
    throw Error(fmt::format("lstm: {} weight sets given, expected num_layers * directions = {}",
                            weights.size(), config_.num_layers * D));
  const DType dtype = ops::weights_dtype("lstm", lstm_key("weight_ih", 0, 0), weights[0].w_ih);
  ops::check_stack_weights("lstm", config_, dtype, weights);
  dtype_ = dtype;
  weights_ = std::move(weights);
}

Lstm Lstm::from_state_dict(const std::map<std::string, Tensor>& state, const LstmConfig& options) {
  const ops::StackKeys k = ops::read_stack_keys("lstm", "nn.LSTM", state, 4, true);
  LstmConfig c = options;
  c.hidden_size = k.hidden;
  c.input_size = k.input;
  c.num_layers = k.layers;
  c.bidirectional = k.reverse;
  c.bias = k.bias;
  c.proj_size = 0;
  if (auto hr = state.find("weight_hr_l0"); hr != state.end()) {
    const Tensor& w = hr->second;
    if (w.dim() != 2 || w.size(1) != c.hidden_size || w.size(0) < 1 || w.size(0) >= c.hidden_size)
      throw Error(fmt::format(
          "lstm weights: 'weight_hr_l0' has shape {}, expected (proj_size, hidden_size = {}) "
          "with 1 <= proj_size < hidden_size",
          shape_str(w.shape()), c.hidden_size));
    c.proj_size = w.size(0);
  }
  std::vector<LstmLayerWeights> weights = ops::read_stack_weights<LstmLayerWeights>(
      "lstm", c, state,
      fmt::format(
          "a {}-layer {}LSTM{}{}", c.num_layers, c.bidirectional ? "bidirectional " : "",
          c.bias ? "" : " without bias",
          c.proj_size > 0 ? fmt::format(" with proj_size {}", c.proj_size) : std::string()));
  return Lstm(c, std::move(weights));
}

std::map<std::string, Tensor> Lstm::state_dict() const {
  return ops::stack_state_dict(config_, weights_);
}

std::map<std::string, Tensor> LstmGrads::state_dict(const LstmConfig& c) const {
  return ops::stack_state_dict(c, dweights);
}

LstmOutput Lstm::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                         const Tensor& lengths, int threads) const {
  ops::ThreadsScope scope("lstm", threads);
  const ops::StackInput p = normalize(config_, dtype_, input, h0, c0, lengths);
  return ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, false, 0, nullptr);
  });
}

struct LstmInference::Impl {
  LstmConfig config;
  DType dtype;
  Precision precision;
  std::vector<LstmLayerWeights> weights;  // for the shapes' checks (shared storage)
  // Per layer * D + direction, packed once (one of the two, by dtype).
  std::vector<ops::LstmPackedLayer<float>> packed_f32;
  std::vector<ops::LstmPackedLayer<double>> packed_f64;
};

LstmInference::LstmInference(const Lstm& lstm, Precision precision)
    : impl_(std::make_unique<Impl>()) {
  ops::check_precision("lstm inference", lstm.dtype(), precision, "LSTM");
  Impl& m = *impl_;
  m.config = lstm.config(), m.dtype = lstm.dtype(), m.precision = precision;
  m.weights = lstm.weights();
  for (const LstmLayerWeights& w : lstm.weights()) {
    if (lstm.dtype() == DType::f32)
      m.packed_f32.push_back(ops::pack_lstm_layer<float>(w, false, precision));
    else
      m.packed_f64.push_back(ops::pack_lstm_layer<double>(w, false));
  }
}
LstmInference::~LstmInference() = default;
LstmInference::LstmInference(LstmInference&&) noexcept = default;
LstmInference& LstmInference::operator=(LstmInference&&) noexcept = default;
Precision LstmInference::precision() const {
  return impl_->precision;
}

LstmOutput LstmInference::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                                  const Tensor& lengths, int threads) const {
  ops::ThreadsScope scope("lstm", threads);
  const Impl& m = *impl_;
  const ops::StackInput p = normalize(m.config, m.dtype, input, h0, c0, lengths);
  return ops::dispatch_float(m.dtype, [&](auto t) {
    using T = decltype(t);
    const auto* packed = [&] {
      if constexpr (std::is_same_v<T, float>)
        return &m.packed_f32;
      else
        return &m.packed_f64;
    }();
    return forward_impl<T>(m.config, m.weights, p, false, 0, nullptr, {}, packed);
  });
}

LstmOutput Lstm::forward_train(const Tensor& input, const Tensor& h0, const Tensor& c0,
                               const Tensor& lengths, LstmTape& tape, uint64_t dropout_seed,
                               Precision precision, BatchShare share, int threads) const {
  ops::ThreadsScope scope("lstm", threads);
  if (precision == Precision::int8)
    throw Error("lstm forward_train: precision int8 is for inference; train in f32 or bf16");
  ops::check_precision("lstm forward_train", dtype_, precision, "LSTM");
  const ops::StackInput p = normalize(config_, dtype_, input, h0, c0, lengths);
  if (share.of != 0 && !(share.first >= 0 && share.of > 0 && share.first + p.lay.N <= share.of))
    throw Error(fmt::format(
        "lstm forward_train: the batch's {} streams as streams {}.. of {} (expected 0 <= first "
        "and first + {} <= of)",
        p.lay.N, share.first, share.of, p.lay.N));
  auto data = std::make_unique<LstmTapeData>();
  data->lay = p.lay;
  data->unbatched = p.unbatched;
  data->dtype = dtype_;
  LstmOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, true, dropout_seed, data.get(), share,
                                     nullptr, precision);
  });
  data->h_n_shape = r.h_n.shape();
  data->c_n_shape = r.c_n.shape();
  tape.data_ = std::move(data);
  return r;
}

LstmGrads Lstm::backward(const LstmTape& tape, const Tensor& doutput, const Tensor& dh_n,
                         const Tensor& dc_n, int threads) const {
  ops::ThreadsScope scope("lstm backward", threads);
  if (tape.empty()) throw Error("lstm backward: the tape is empty (run forward_train first)");
  LstmTapeData& t = *tape.data_;
  if (t.dtype != dtype_)
    throw Error("lstm backward: the tape was recorded with weights of another dtype");
  if (!doutput.defined() && !dh_n.defined() && !dc_n.defined())
    throw Error("lstm backward: none of doutput, dh_n, dc_n given (expected at least one)");
  // doutput and dh_n are checked as the GRU's; dc_n likewise, against c_n's shape.
  ops::SeqUpstream u;
  if (doutput.defined() || dh_n.defined())
    u = ops::normalize_upstream(seq_spec(config_, dtype_), t.lay.T, t.lay.N, t.unbatched,
                                config_.directions() * config_.output_size(), t.h_n_shape, doutput,
                                dh_n);
  Tensor dcn;
  if (dc_n.defined()) {
    if (dc_n.dtype() != dtype_)
      throw Error(fmt::format("lstm backward: dc_n has dtype {}, expected {} like the weights",
                              dtype_name(dc_n.dtype()), dtype_name(dtype_)));
    if (dc_n.device() != Device::cpu())
      throw Error(fmt::format("lstm backward: dc_n is on {}, expected cpu", dc_n.device().str()));
    check_shape("lstm backward", "dc_n", dc_n, t.c_n_shape);
    dcn = t.unbatched ? dc_n.unsqueeze(1) : dc_n;
  }
  return ops::dispatch_float(dtype_, [&](auto x) {
    return backward_impl<decltype(x)>(config_, t, u.doutput, u.dh_n, dcn);
  });
}

// ---- LstmCell: a one-layer LSTM run for one step ---------------------------------------

namespace {
LstmConfig cell_config(int64_t I, int64_t H, bool bias) {
  LstmConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.bias = bias;
  return c;
}

// The cell's (x, h, c) as a one-step sequence: x (1, N, I), h and c (1, N, H).
struct CellProblem {
  Tensor x, h, c;
  bool unbatched;
};
CellProblem cell_problem(const Tensor& x, const Tensor& h, const Tensor& c, int64_t I, int64_t H) {
  check_defined("lstm cell", "input", x);
  CellProblem p;
  p.unbatched = x.dim() == 1;
  if (x.dim() != 1 && x.dim() != 2)
    throw Error(fmt::format("lstm cell: input has shape {}, expected (N, I) or (I) unbatched",
                            shape_str(x.shape())));
  if (x.size(-1) != I)
    throw Error(
        fmt::format("lstm cell: input has shape {}: feature size {}, expected input_size {}",
                    shape_str(x.shape()), x.size(-1), I));
  p.x = p.unbatched ? x.unsqueeze(0).unsqueeze(0) : x.unsqueeze(0);
  const Shape state = p.unbatched ? Shape{H} : Shape{p.x.size(1), H};
  const auto lift = [&](const char* name, const Tensor& t) {
    if (!t.defined()) return Tensor();
    check_shape("lstm cell", name, t, state);
    return p.unbatched ? t.unsqueeze(0).unsqueeze(0) : t.unsqueeze(0);
  };
  p.h = lift("hx", h);
  p.c = lift("cx", c);
  return p;
}

Tensor first_step(const Tensor& t, bool unbatched) {
  return unbatched ? t.select(0, 0).select(0, 0) : t.select(0, 0);
}
}  // namespace

// A cell's weights packed for the real-time kernel: f32 cells of up to cpu::kStreamMaxHidden
// units (nn.LSTMCell has no projection); none for the others.
struct LstmCellPlan {
  std::optional<cpu::StreamLayer> fast;
};

namespace {
std::shared_ptr<const LstmCellPlan> plan_cell(const Lstm& lstm) {
  auto plan = std::make_shared<LstmCellPlan>();
  const LstmLayerWeights& w = lstm.weights()[0];
  const int64_t H = lstm.config().hidden_size;
  if (lstm.dtype() == DType::f32 && H <= cpu::kStreamMaxHidden)
    plan->fast =
        cpu::lstm_stream_pack(w.w_ih.size(1), H, w.w_ih.data<float>(), w.w_hh.data<float>(),
                              w.b_ih.defined() ? w.b_ih.data<float>() : nullptr,
                              w.b_hh.defined() ? w.b_hh.data<float>() : nullptr);
  return plan;
}
}  // namespace

LstmCell::LstmCell(Lstm lstm) : lstm_(std::move(lstm)), plan_(plan_cell(lstm_)) {}

LstmCell::LstmCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype, uint64_t seed)
    : LstmCell(Lstm(cell_config(input_size, hidden_size, bias), dtype, seed)) {}

LstmCell LstmCell::from_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> keyed;
  for (const auto& [key, t] : state) {
    if (key != "weight_ih" && key != "weight_hh" && key != "bias_ih" && key != "bias_hh")
      throw Error(
          fmt::format("lstm cell weights: unexpected key '{}' (expected weight_ih, "
                      "weight_hh, bias_ih, bias_hh)",
                      key));
    keyed[key + "_l0"] = t;
  }
  return LstmCell(Lstm::from_state_dict(keyed));
}

std::map<std::string, Tensor> LstmCell::state_dict() const {
  const LstmLayerWeights& w = weights();
  std::map<std::string, Tensor> out{{"weight_ih", w.w_ih}, {"weight_hh", w.w_hh}};
  if (w.b_ih.defined()) out["bias_ih"] = w.b_ih;
  if (w.b_hh.defined()) out["bias_hh"] = w.b_hh;
  return out;
}

void LstmCell::set_weights(LstmLayerWeights weights) {
  const LstmLayerWeights& old = this->weights();
  if (weights.b_ih.defined() != old.b_ih.defined())
    throw Error(fmt::format("lstm cell: set_weights {} biases, the cell {}",
                            weights.b_ih.defined() ? "given" : "without",
                            old.b_ih.defined() ? "has them" : "has none"));
  if (weights.w_ih.defined() && weights.w_ih.dtype() != old.w_ih.dtype())
    throw Error(fmt::format("lstm cell: set_weights given {} weights, the cell's are {}",
                            dtype_name(weights.w_ih.dtype()), dtype_name(old.w_ih.dtype())));
  lstm_.set_weights({std::move(weights)});
  plan_ = plan_cell(lstm_);
}

std::pair<Tensor, Tensor> LstmCell::forward(const Tensor& input, const Tensor& h, const Tensor& c,
                                            int threads) const {
  CellProblem p = cell_problem(input, h, c, input_size(), hidden_size());
  if (plan_->fast && p.x.size(1) == 1) {
    // One sequence: the raw step below on the arguments checked as the engine's.
    check_same_dtype("lstm cell", "weights", weights().w_ih, "input", input);
    if (h.defined()) check_same_dtype("lstm cell", "weights", weights().w_ih, "hx", h);
    if (c.defined()) check_same_dtype("lstm cell", "weights", weights().w_ih, "cx", c);
    const int64_t H = hidden_size();
    const Tensor x = p.x.contiguous();
    const Tensor hc = p.h.defined() ? p.h.contiguous() : Tensor();
    const Tensor cc = p.c.defined() ? p.c.contiguous() : Tensor();
    const Shape shape = p.unbatched ? Shape{H} : Shape{1, H};
    Tensor h1 = Tensor::empty(shape, DType::f32), c1 = Tensor::empty(shape, DType::f32);
    forward(x.data<float>(), hc.defined() ? hc.data<float>() : nullptr,
            cc.defined() ? cc.data<float>() : nullptr, h1.data<float>(), c1.data<float>(), threads);
    return {h1, c1};
  }
  LstmOutput r = lstm_.forward(p.x, p.h, p.c, {}, threads);
  return {first_step(r.h_n, p.unbatched), first_step(r.c_n, p.unbatched)};
}

void LstmCell::forward(const float* input, const float* h, const float* c, float* h_new,
                       float* c_new, int threads) const {
  const int64_t I = input_size(), H = hidden_size();
  if (weights().w_ih.dtype() != DType::f32)
    throw Error(fmt::format("lstm cell: forward from float pointers takes an f32 cell, not {}",
                            dtype_name(weights().w_ih.dtype())));
  if (input == nullptr || h_new == nullptr || c_new == nullptr)
    throw Error(fmt::format("lstm cell: {} is null, expected {} floats",
                            input == nullptr   ? "input"
                            : h_new == nullptr ? "h_new"
                                               : "c_new",
                            input == nullptr ? I : H));
  if (threads < 0)
    throw Error(fmt::format("lstm cell: threads is {}, expected >= 0 (0: grux chooses)", threads));
  if (!plan_->fast) {  // the engine's step on views of the caller's memory, copied out
    const auto view = [](const float* p, int64_t n) {
      return p ? Tensor::from_blob(const_cast<float*>(p), {n}, {1}, DType::f32, nullptr) : Tensor();
    };
    const auto [h1, c1] = forward(view(input, I), view(h, H), view(c, H), threads);
    std::memcpy(h_new, h1.contiguous().data<float>(), H * sizeof(float));
    std::memcpy(c_new, c1.contiguous().data<float>(), H * sizeof(float));
    return;
  }
  // One step of the real-time kernel: its state (h, scratch, c, each Hp floats padded with
  // zeros) and scratch in one StepBuffer (on the stack at these sizes).
  const cpu::StreamLayer& L = *plan_->fast;
  const int64_t Hp = L.Hp;
  ops::StepBuffer buf(3 * Hp + cpu::lstm_stream_scratch(L, 1));
  float* state = buf.get();
  std::memset(state, 0, 3 * Hp * sizeof(float));
  if (h) std::memcpy(state, h, H * sizeof(float));
  if (c) std::memcpy(state + 2 * Hp, c, H * sizeof(float));
  cpu::StreamOut out;
  out.p = h_new;
  out.stride = H;
  cpu::lstm_stream_forward(L, 1, 0, input, I, state, out, state + 3 * Hp);
  std::memcpy(c_new, state + 2 * Hp, H * sizeof(float));
}

LstmCellGrads LstmCell::backward(const Tensor& input, const Tensor& h, const Tensor& c,
                                 const Tensor& dh_new, const Tensor& dc_new, int threads) const {
  CellProblem p = cell_problem(input, h, c, input_size(), hidden_size());
  if (!dh_new.defined() && !dc_new.defined())
    throw Error("lstm cell backward: neither dh_new nor dc_new given (expected at least one)");
  const Shape state = p.unbatched ? Shape{hidden_size()} : Shape{p.x.size(1), hidden_size()};
  const auto lift = [&](const char* name, const Tensor& t) {
    if (!t.defined()) return Tensor();
    check_shape("lstm cell backward", name, t, state);
    return p.unbatched ? t.unsqueeze(0).unsqueeze(0) : t.unsqueeze(0);
  };
  const Tensor dh = lift("dh_new", dh_new), dc = lift("dc_new", dc_new);
  LstmTape tape;
  lstm_.forward_train(p.x, p.h, p.c, {}, tape, 0, Precision::f32, {}, threads);
  LstmGrads g = lstm_.backward(tape, {}, dh, dc, threads);
  LstmCellGrads out;
  out.dinput = first_step(g.dinput, p.unbatched);
  out.dh = first_step(g.dh0, p.unbatched);
  out.dc = first_step(g.dc0, p.unbatched);
  out.dweights = g.dweights[0];
  return out;
}

}  // namespace grux
