// The GRU operator (nn.GRU semantics): validates a problem at the API boundary and runs the
// stack driver (ops/recurrent_stack.h) with the GRU's cell (ops/gru_layer.h's GruLayerCell).
// Also weights I/O by state_dict keys and GruCell (a one-step, one-layer GRU).
#include "grux/gru.h"

#include <fmt/format.h>
#include <hwy/aligned_allocator.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>

#include "core/descriptor.h"
#include "core/thread_team.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "grux/io.h"
#include "ops/gru_layer.h"
#include "ops/recurrent.h"
#include "ops/recurrent_stack.h"
#include "ops/step_buffer.h"
#include "ops/threads_option.h"

namespace grux {

using ops::SeqLayout;

int64_t GruConfig::layer_input_size(int64_t layer) const {
  return layer == 0 ? input_size : directions() * hidden_size;
}

void GruConfig::validate() const {
  if (input_size < 1) throw Error(fmt::format("gru: input_size is {}, expected >= 1", input_size));
  if (hidden_size < 1)
    throw Error(fmt::format("gru: hidden_size is {}, expected >= 1", hidden_size));
  if (num_layers < 1) throw Error(fmt::format("gru: num_layers is {}, expected >= 1", num_layers));
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw Error(fmt::format("gru: dropout is {}, expected 0 <= dropout < 1", dropout));
}

std::string gru_key(const char* what, int64_t layer, int64_t direction) {
  return fmt::format("{}_l{}{}", what, layer, direction == 1 ? "_reverse" : "");
}

GruProblem GruProblem::parse(const std::string& text) {
  const ops::SeqDescriptor d = ops::parse_seq_descriptor(
      text, "problem descriptor",
      "l{L}d{D}t{T}n{N}i{I}h{H}, e.g. l1d1t100n64i256h512; l and d may be omitted", 2,
      "expected d1 or d2");
  GruProblem p;
  p.num_layers = d.L, p.bidirectional = d.D == 2, p.T = d.T, p.N = d.N, p.input_size = d.I,
  p.hidden_size = d.H;
  return p;
}

std::string GruProblem::descriptor() const {
  return fmt::format("l{}d{}t{}n{}i{}h{}", num_layers, directions(), T, N, input_size, hidden_size);
}

double GruProblem::gemm_flops() const {
  const int64_t D = directions(), H = hidden_size;
  double f = 0;
  for (int64_t l = 0; l < num_layers; ++l)
    f += D * 2.0 * static_cast<double>(rows()) * 3 * H * (layer_input_size(l) + H);
  return f;
}

GruCellProblem GruCellProblem::parse(const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'n'}, {'i'}, {'h'}}, "GRUCell problem descriptor", "n{N}i{I}h{H}, e.g. n1i256h256");
  GruCellProblem p;
  p.N = d.get('n'), p.I = d.get('i'), p.H = d.get('h');
  for (auto [name, v] : {std::pair{"n", p.N}, {"i", p.I}, {"h", p.H}})
    if (v < 1)
      throw Error(
          fmt::format("GRUCell problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  return p;
}

std::string GruCellProblem::descriptor() const {
  return fmt::format("n{}i{}h{}", N, I, H);
}

GruTape::GruTape() = default;
GruTape::~GruTape() = default;
GruTape::GruTape(GruTape&&) noexcept = default;
GruTape& GruTape::operator=(GruTape&&) noexcept = default;
bool GruTape::empty() const {
  return data_ == nullptr;
}

// What backward needs from forward_train: the stack driver's tape with the GRU's cell.
struct GruTapeData : ops::StackTape<ops::GruLayerCell> {};

namespace {

// ---- The stack driver with the GRU's cell --------------------------------------------

ops::SeqSpec seq_spec(const GruConfig& c, DType dtype) {
  return {"gru", c.input_size, c.hidden_size, c.num_layers * c.directions(), c.batch_first, dtype};
}

ops::StackInput normalize(const GruConfig& c, DType dtype, const Tensor& input, const Tensor& h0,
                          const Tensor& lengths) {
  return ops::normalize_stack(seq_spec(c, dtype), 0, input, h0, Tensor(), lengths);
}

ops::StackShape stack_shape(const GruConfig& c) {
  return {c.num_layers, c.directions(), c.input_size, c.hidden_size, c.dropout};
}

template <typename T>
ops::GruLayerCell<T> layer_cell(const GruConfig& c) {
  return {ops::gru_kernels<T>(), c};
}

// `prepacked`: the weights as pack_layer packed them (GruInference), or null to pack `weights`
// here, in `precision` (forward_train in bf16). `tape`: forward_train's.
template <typename T>
GruOutput forward_impl(const GruConfig& c, const std::vector<GruLayerWeights>& weights,
                       const ops::StackInput& p, bool training, uint64_t seed, GruTapeData* tape,
                       const std::vector<ops::PackedLayer<T>>* prepacked = nullptr,
                       Precision precision = Precision::f32, BatchShare share = {}) {
  ops::StackResult r =
      ops::stack_forward<T>(layer_cell<T>(c), stack_shape(c), p, &weights, prepacked, precision,
                            training, seed, share, tape ? &tape->record<T>() : nullptr);
  r.to_caller(c.batch_first, p.unbatched);
  return {r.output, r.h_n};
}

template <typename T>
GruGrads backward_impl(const GruConfig& c, GruTapeData& tape, const Tensor& dout,
                       const Tensor& dhn) {
  ops::StackGrads<GruLayerWeights> g = ops::stack_backward<T>(
      layer_cell<T>(c), stack_shape(c), tape.lay, tape.record<T>(), dout, dhn, Tensor());
  GruGrads grads;
  grads.dweights = std::move(g.dweights);
  grads.dinput = ops::to_caller_layout(g.dinput, c.batch_first, tape.unbatched);
  grads.dh0 = tape.unbatched ? g.dh0.squeeze(1) : g.dh0;
  return grads;
}

}  // namespace

// ---- Gru -------------------------------------------------------------------------------

Gru::Gru(const GruConfig& config, DType dtype, uint64_t seed) : config_(config), dtype_(dtype) {
  config_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(
        fmt::format("gru: dtype {} is not supported (expected f32 or f64)", dtype_name(dtype)));
  weights_ = ops::random_stack_weights<GruLayerWeights>(config_, dtype, seed);
}

Gru::Gru(const GruConfig& config, std::vector<GruLayerWeights> weights) : config_(config) {
  config_.validate();
  set_weights(std::move(weights));
}

Gru::Gru(const Gru& other)
    : config_(other.config_),
      dtype_(other.dtype_),
      weights_(ops::clone_stack_weights(other.config_, other.weights_)) {}

Gru& Gru::operator=(const Gru& other) {
  if (this != &other) *this = Gru(other);
  return *this;
}

void Gru::set_weights(std::vector<GruLayerWeights> weights) {
  const int64_t D = config_.directions();
  if (static_cast<int64_t>(weights.size()) != config_.num_layers * D)
    throw Error(fmt::format("gru: {} weight sets given, expected num_layers * directions = {}",
                            weights.size(), config_.num_layers * D));
  const DType dtype = ops::weights_dtype("gru", gru_key("weight_ih", 0, 0), weights[0].w_ih);
  ops::check_stack_weights("gru", config_, dtype, weights);
  dtype_ = dtype;
  weights_ = std::move(weights);
}

Gru Gru::from_state_dict(const std::map<std::string, Tensor>& state, const GruConfig& options) {
  const ops::StackKeys k = ops::read_stack_keys("gru", "nn.GRU", state, 3, false);
  GruConfig c = options;
  c.hidden_size = k.hidden;
  c.input_size = k.input;
  c.num_layers = k.layers;
  c.bidirectional = k.reverse;
  c.bias = k.bias;
  std::vector<GruLayerWeights> weights = ops::read_stack_weights<GruLayerWeights>(
      "gru", c, state,
      fmt::format("a {}-layer {}GRU{}", c.num_layers, c.bidirectional ? "bidirectional " : "",
                  c.bias ? "" : " without bias"));
  return Gru(c, std::move(weights));
}

std::map<std::string, Tensor> Gru::state_dict() const {
  return ops::stack_state_dict(config_, weights_);
}

std::map<std::string, Tensor> GruGrads::state_dict(const GruConfig& c) const {
  return ops::stack_state_dict(c, dweights);
}

GruOutput Gru::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                       int threads) const {
  ops::ThreadsScope scope("gru", threads);
  const ops::StackInput p = normalize(config_, dtype_, input, h0, lengths);
  return ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, false, 0, nullptr);
  });
}

// ---- GruInference ----------------------------------------------------------------------

struct GruInference::Impl {
  GruConfig config;
  DType dtype;
  Precision precision;
  // Per layer * D + direction, packed once (one of the two, by dtype).
  std::vector<ops::PackedLayer<float>> packed_f32;
  std::vector<ops::PackedLayer<double>> packed_f64;
};

GruInference::GruInference(const Gru& gru, Precision precision) : impl_(std::make_unique<Impl>()) {
  ops::check_precision("gru inference", gru.dtype(), precision);
  impl_->config = gru.config();
  impl_->dtype = gru.dtype();
  impl_->precision = precision;
  for (const GruLayerWeights& w : gru.weights()) {
    if (gru.dtype() == DType::f32)
      impl_->packed_f32.push_back(ops::pack_layer<float>(w, gru.config().form, false, precision));
    else
      impl_->packed_f64.push_back(ops::pack_layer<double>(w, gru.config().form, false));
  }
}
GruInference::~GruInference() = default;
Precision GruInference::precision() const {
  return impl_->precision;
}
GruInference::GruInference(GruInference&&) noexcept = default;
GruInference& GruInference::operator=(GruInference&&) noexcept = default;

GruOutput GruInference::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                                int threads) const {
  ops::ThreadsScope scope("gru", threads);
  const GruConfig& c = impl_->config;
  const ops::StackInput p = normalize(c, impl_->dtype, input, h0, lengths);
  // The weights themselves are not read: only their packed copies.
  return impl_->dtype == DType::f32
             ? forward_impl<float>(c, {}, p, false, 0, nullptr, &impl_->packed_f32)
             : forward_impl<double>(c, {}, p, false, 0, nullptr, &impl_->packed_f64);
}

GruOutput Gru::forward_train(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                             GruTape& tape, uint64_t dropout_seed, Precision precision,
                             BatchShare share, int threads) const {
  ops::ThreadsScope scope("gru", threads);
  if (precision == Precision::int8)
    throw Error("gru forward_train: precision int8 is for inference; train in f32 or bf16");
  ops::check_precision("gru forward_train", dtype_, precision);
  const ops::StackInput p = normalize(config_, dtype_, input, h0, lengths);
  if (share.of != 0 && !(share.first >= 0 && share.of > 0 && share.first + p.lay.N <= share.of))
    throw Error(fmt::format(
        "gru forward_train: the batch's {} streams as streams {}.. of {} (expected 0 <= first "
        "and first + {} <= of)",
        p.lay.N, share.first, share.of, p.lay.N));
  auto data = std::make_unique<GruTapeData>();
  data->lay = p.lay;
  data->unbatched = p.unbatched;
  data->dtype = dtype_;
  GruOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, true, dropout_seed, data.get(), nullptr,
                                     precision, share);
  });
  data->h_n_shape = r.h_n.shape();
  tape.data_ = std::move(data);
  return r;
}

GruGrads Gru::backward(const GruTape& tape, const Tensor& doutput, const Tensor& dh_n,
                       int threads) const {
  ops::ThreadsScope scope("gru backward", threads);
  if (tape.empty()) throw Error("gru backward: the tape is empty (run forward_train first)");
  GruTapeData& t = *tape.data_;
  if (t.dtype != dtype_)
    throw Error("gru backward: the tape was recorded with weights of another dtype");
  const ops::SeqUpstream u = ops::normalize_upstream(
      seq_spec(config_, dtype_), t.lay.T, t.lay.N, t.unbatched,
      config_.directions() * config_.hidden_size, t.h_n_shape, doutput, dh_n);
  return ops::dispatch_float(
      dtype_, [&](auto x) { return backward_impl<decltype(x)>(config_, t, u.doutput, u.dh_n); });
}

// ---- GruCell: a one-layer GRU run for one step ----------------------------------------

namespace {
GruConfig cell_config(int64_t I, int64_t H, bool bias, GruForm form) {
  GruConfig c;
  c.input_size = I;
  c.hidden_size = H;
  c.bias = bias;
  c.form = form;
  return c;
}
std::map<std::string, Tensor> cell_keys_to_gru(const std::map<std::string, Tensor>& s) {
  std::map<std::string, Tensor> out;
  for (const auto& [key, t] : s) {
    if (key != "weight_ih" && key != "weight_hh" && key != "bias_ih" && key != "bias_hh")
      throw Error(
          fmt::format("gru cell weights: unexpected key '{}' (expected weight_ih, "
                      "weight_hh, bias_ih, bias_hh)",
                      key));
    out[key + "_l0"] = t;
  }
  return out;
}
}  // namespace

GruCell::GruCell(int64_t input_size, int64_t hidden_size, bool bias, GruForm form, DType dtype,
                 uint64_t seed)
    : GruCell(input_size, hidden_size, form,
              Gru(cell_config(input_size, hidden_size, bias, form), dtype, seed).weights()[0]) {}

// A cell's weights packed once: the real-time kernel's layout (f32) and the engine's.
struct GruCellPlan {
  std::optional<GruInference> engine;
  cpu::StreamLayer fast;  // f32 only
  // f32 linear-before-reset cells whose weights take more than a quarter of the L2
  // (weights_exceed_l2): the units in parts of 4 or more unit groups, one part a thread
  // (cell_step_parts); empty where the units make fewer than two such parts.
  std::vector<cpu::StreamLayer> parts;
  // The threads that share a step of the parts (cell_step_parts), started at the first such
  // step and kept while the plan lives: an OpenMP region a step would cost 0.4-0.5 us (an
  // eighth of a step at I 64 H 256, a quarter at H 128). One caller at a time: a
  // caller that finds it busy, or that runs inside an OpenMP region, takes a region instead.
  mutable std::mutex team_mu;
  mutable std::unique_ptr<ThreadTeam> team;
};

namespace {
// Whether a cell's weights (3H (I + H) floats) take more than quarters/4 of this core's L2.
bool weights_exceed_l2(int64_t I, int64_t H, int64_t quarters) {
  return 3 * H * (I + H) * int64_t(sizeof(float)) > cpu::l2_cache_bytes() / 4 * quarters;
}

std::shared_ptr<const GruCellPlan> plan_cell(int64_t I, int64_t H, GruForm form,
                                             const GruLayerWeights& w) {
  auto plan = std::make_shared<GruCellPlan>();
  plan->engine.emplace(Gru(cell_config(I, H, w.b_ih.defined(), form), {w}));
  if (w.w_ih.dtype() == DType::f32) {
    const Tensor wih = w.w_ih.contiguous(), whh = w.w_hh.contiguous();
    const Tensor bih = w.b_ih.defined() ? w.b_ih.contiguous() : Tensor();
    const Tensor bhh = w.b_hh.defined() ? w.b_hh.contiguous() : Tensor();
    plan->fast = cpu::gru_stream_pack(
        I, H, form == GruForm::reset_before, wih.data<float>(), whh.data<float>(),
        bih.defined() ? bih.data<float>() : nullptr, bhh.defined() ? bhh.data<float>() : nullptr);
    // Parts for the threads a call may take (one a processor, at least 2), each of 4 or more
    // unit groups (then the same bits as `fast`, cpu/gru_stream.h).
    const int64_t V = plan->fast.V, G = plan->fast.Hp / V;
    const int64_t n = std::min<int64_t>(std::max(2, omp_get_num_procs()), G / 4);
    if (form == GruForm::linear_before_reset && weights_exceed_l2(I, H, 1) && n >= 2)
      for (int64_t p = 0; p < n; ++p) {
        const int64_t g0 = G * p / n, g1 = G * (p + 1) / n;
        plan->parts.push_back(cpu::gru_stream_pack_part(
            I, H, g0 * V, std::min(H, g1 * V) - g0 * V, wih.data<float>(), whh.data<float>(),
            bih.defined() ? bih.data<float>() : nullptr,
            bhh.defined() ? bhh.data<float>() : nullptr));
      }
  }
  return plan;
}
}  // namespace

GruCell::GruCell(int64_t input_size, int64_t hidden_size, GruForm form, GruLayerWeights w)
    : input_size_(input_size),
      hidden_size_(hidden_size),
      form_(form),
      w_(std::move(w)),
      plan_(plan_cell(input_size, hidden_size, form, w_)) {}

void GruCell::set_weights(GruLayerWeights weights) {
  if (weights.b_ih.defined() != w_.b_ih.defined())
    throw Error(fmt::format("gru cell: set_weights {} biases, the cell {}",
                            weights.b_ih.defined() ? "given" : "without",
                            w_.b_ih.defined() ? "has them" : "has none"));
  if (weights.w_ih.defined() && weights.w_ih.dtype() != w_.w_ih.dtype())
    throw Error(fmt::format("gru cell: set_weights given {} weights, the cell's are {}",
                            dtype_name(weights.w_ih.dtype()), dtype_name(w_.w_ih.dtype())));
  // Checked (shapes, dtypes, contiguity) as a one-layer Gru's.
  Gru g(cell_config(input_size_, hidden_size_, w_.b_ih.defined(), form_), {std::move(weights)});
  w_ = g.weights()[0];
  plan_ = plan_cell(input_size_, hidden_size_, form_, w_);
}

GruCell::GruCell(GruCell&&) noexcept = default;
GruCell& GruCell::operator=(GruCell&&) noexcept = default;
GruCell::~GruCell() = default;

GruCell GruCell::from_state_dict(const std::map<std::string, Tensor>& state, GruForm form) {
  GruConfig options;
  options.form = form;
  Gru g = Gru::from_state_dict(cell_keys_to_gru(state), options);
  if (g.config().num_layers != 1 || g.config().bidirectional)
    throw Error("gru cell weights: expected the keys of one cell");
  return GruCell(g.config().input_size, g.config().hidden_size, form, g.weights()[0]);
}

GruCell::GruCell(const GruCell& other)
    : input_size_(other.input_size_),
      hidden_size_(other.hidden_size_),
      form_(other.form_),
      w_(other.w_) {
  for (Tensor* t : {&w_.w_ih, &w_.w_hh, &w_.b_ih, &w_.b_hh})
    if (t->defined()) *t = t->clone();
  plan_ = other.plan_;  // immutable, packed from equal weights
}

GruCell& GruCell::operator=(const GruCell& other) {
  if (this != &other) *this = GruCell(other);
  return *this;
}

std::map<std::string, Tensor> GruCell::state_dict() const {
  std::map<std::string, Tensor> out{{"weight_ih", w_.w_ih}, {"weight_hh", w_.w_hh}};
  if (w_.b_ih.defined()) out["bias_ih"] = w_.b_ih;
  if (w_.b_hh.defined()) out["bias_hh"] = w_.b_hh;
  return out;
}

namespace {
// The cell's (x, h) as a one-step sequence for a one-layer GRU: x (1, N, I), h (1, N, H).
struct CellProblem {
  Tensor x, h;
  bool unbatched;
};
CellProblem cell_problem(const Tensor& x, const Tensor& h, int64_t I, int64_t H) {
  check_defined("gru cell", "input", x);
  CellProblem p;
  p.unbatched = x.dim() == 1;
  if (x.dim() != 1 && x.dim() != 2)
    throw Error(fmt::format("gru cell: input has shape {}, expected (N, I) or (I) unbatched",
                            shape_str(x.shape())));
  if (x.size(-1) != I)
    throw Error(fmt::format("gru cell: input has shape {}: feature size {}, expected input_size {}",
                            shape_str(x.shape()), x.size(-1), I));
  p.x = p.unbatched ? x.unsqueeze(0).unsqueeze(0) : x.unsqueeze(0);
  if (h.defined()) {
    const int64_t N = p.x.size(1);
    check_shape("gru cell", "hx", h, p.unbatched ? Shape{H} : Shape{N, H});
    p.h = p.unbatched ? h.unsqueeze(0).unsqueeze(0) : h.unsqueeze(0);
  }
  return p;
}

// One sequence of a contiguous f32 cell (input (1, I) or (I), hx None or the same form, all
// f32 and contiguous): the real-time kernel's step straight from the arguments' memory, with
// no Tensor made but the result (a GRUCell loop's per-call bookkeeping would be most of a
// small model's step: at I 8 H 16 about 8 times a stream's step). Anything else (and every
// error) takes the general path.
bool cell_fast_case(const Tensor& x, const Tensor& h, int64_t I, int64_t H, DType weights) {
  if (weights != DType::f32 || !x.defined() || x.dtype() != DType::f32 || !x.is_contiguous())
    return false;
  if (!(x.dim() == 1 || (x.dim() == 2 && x.size(0) == 1)) || x.size(-1) != I) return false;
  if (!h.defined()) return true;
  return h.dtype() == DType::f32 && h.is_contiguous() && h.dim() == x.dim() && h.size(-1) == H &&
         (h.dim() == 1 || h.size(0) == 1);
}

// Whether a batch-1 f32 step is shared among the threads `threads` allows (0: all cores)
// rather than run by the real-time kernel on the calling thread alone, each thread then
// reading its share of the weights from its own L2: in the plan's parts where it has them
// (weights past a quarter of the L2), on the engine's team where the weights take more than
// 3/4 of it and there are no parts (its call costs about 4 us more). Past a quarter of the
// L2, parts on two threads take up to about half the time of one thread a step (the more, the
// larger H); below it they gain less, and below about 150 KB of weights they lose.
bool cell_shares_step(const GruCellPlan& plan, int64_t I, int64_t H, int threads) {
  const int team = threads > 0 ? threads : omp_get_max_threads();
  return team > 1 && (!plan.parts.empty() || weights_exceed_l2(I, H, 3));
}

using ops::StepBuffer;

// One step of the real-time kernel from x (I floats) and h (H floats, or null: zeros) into
// out (H floats; may be h).
void cell_step_fast(const cpu::StreamLayer& L, int64_t I, int64_t H, const float* x, const float* h,
                    float* out) {
  StepBuffer buf(2 * L.Hp + cpu::gru_stream_scratch(L, 1));
  float* state = buf.get();  // h, padded to the kernel's Hp
  std::memset(state, 0, 2 * L.Hp * sizeof(float));
  if (h != nullptr) std::memcpy(state, h, H * sizeof(float));
  cpu::gru_stream_forward(L, 1, 0, x, I, state, {out, H}, state + 2 * L.Hp);
}

// The same into a new Tensor of shape (H) (unbatched) or (1, H).
Tensor cell_step_fast(const cpu::StreamLayer& L, int64_t I, int64_t H, const float* x,
                      const float* h, bool unbatched) {
  Tensor out = Tensor::empty(unbatched ? Shape{H} : Shape{1, H}, DType::f32);
  cell_step_fast(L, I, H, x, h, out.data<float>());
  return out;
}

// One step of the parts on up to `threads` threads (0: all cores), each part on one thread
// reading its part of the weights: the same bits as cell_step_fast. The whole state, the
// parts' outputs and their scratch in one StepBuffer.
void cell_step_parts(const GruCellPlan& plan, int threads, int64_t H, const float* x,
                     const float* h, float* out) {
  const std::vector<cpu::StreamLayer>& parts = plan.parts;
  const int64_t V = parts[0].V, Hp = (H + V - 1) / V * V;
  if (V != cpu::gru_stream_lanes())
    throw std::logic_error("gru stream kernel: packed for another SIMD target");
  const int64_t n = static_cast<int64_t>(parts.size());
  // Part p's scratch at scratch_at(p), after h and h'.
  const auto scratch_at = [&](int64_t p) {
    int64_t at = 2 * Hp;
    for (int64_t q = 0; q < p; ++q) at += cpu::gru_stream_scratch(parts[q], 1);
    return at;
  };
  StepBuffer step_buf(scratch_at(n));
  float* buf = step_buf.get();
  float* hin = buf;        // h, padded with zeros to Hp
  float* hout = buf + Hp;  // h', part p's units at parts[p].u0
  std::memset(hin, 0, Hp * sizeof(float));
  if (h != nullptr) std::memcpy(hin, h, H * sizeof(float));
  const int team =
      static_cast<int>(std::min<int64_t>(threads > 0 ? threads : omp_get_max_threads(), n));
  const auto part = [&](int64_t p) {
    cpu::gru_stream_part_step(parts[p], x, hin, hout + parts[p].u0, buf + scratch_at(p));
  };
  std::unique_lock<std::mutex> lock(plan.team_mu, std::try_to_lock);
  if (team > 1 && lock.owns_lock() && !omp_in_parallel()) {
    if (!plan.team || !plan.team->usable() || plan.team->size() != team)  // usable: after fork
      plan.team = std::make_unique<ThreadTeam>(team, ThreadTeam::Idle::sleep);
    auto job = [&](int member) {
      for (int64_t p = member; p < n; p += team) part(p);
    };
    plan.team->run(job);
  } else {
    if (lock.owns_lock()) lock.unlock();
#pragma omp parallel for schedule(static) num_threads(team)
    for (int64_t p = 0; p < n; ++p) part(p);
  }
  std::memcpy(out, hout, H * sizeof(float));
}
}  // namespace

Tensor GruCell::forward(const Tensor& input, const Tensor& h, int threads) const {
  const DType dt = w_.w_ih.dtype();
  const int64_t H = hidden_size_, I = input_size_;
  // One sequence: the real-time kernel, one step, unless the weights are better shared.
  const bool team = dt == DType::f32 && threads >= 0 && cell_shares_step(*plan_, I, H, threads);
  const bool parts = team && !plan_->parts.empty();  // the real-time kernel shared
  if (threads >= 0 && (!team || parts) && cell_fast_case(input, h, I, H, dt)) {
    if (!parts)
      return cell_step_fast(plan_->fast, I, H, input.data<float>(),
                            h.defined() ? h.data<float>() : nullptr, input.dim() == 1);
    Tensor out = Tensor::empty(input.dim() == 1 ? Shape{H} : Shape{1, H}, DType::f32);
    cell_step_parts(*plan_, threads, H, input.data<float>(),
                    h.defined() ? h.data<float>() : nullptr, out.data<float>());
    return out;
  }
  CellProblem p = cell_problem(input, h, I, H);
  if (threads < 0)
    throw Error(fmt::format("gru cell: threads is {}, expected >= 0 (0: grux chooses)", threads));
  check_same_dtype("gru cell", "weights", w_.w_ih, "input", input);
  if (h.defined()) check_same_dtype("gru cell", "weights", w_.w_ih, "hx", h);
  if (dt == DType::f32 && p.x.size(1) == 1 && (!team || parts)) {  // batch 1, another layout
    const Tensor x = p.x.contiguous(), hc = p.h.defined() ? p.h.contiguous() : Tensor();
    if (!parts)
      return cell_step_fast(plan_->fast, I, H, x.data<float>(),
                            hc.defined() ? hc.data<float>() : nullptr, p.unbatched);
    Tensor out = Tensor::empty(p.unbatched ? Shape{H} : Shape{1, H}, DType::f32);
    cell_step_parts(*plan_, threads, H, x.data<float>(), hc.defined() ? hc.data<float>() : nullptr,
                    out.data<float>());
    return out;
  }
  Tensor h_new = plan_->engine->forward(p.x, p.h, {}, threads).h_n.select(0, 0);
  return p.unbatched ? h_new.select(0, 0) : h_new;
}

void GruCell::forward(const float* input, const float* h, float* h_new, int threads) const {
  const int64_t H = hidden_size_, I = input_size_;
  if (w_.w_ih.dtype() != DType::f32)
    throw Error(fmt::format("gru cell: forward from float pointers takes an f32 cell, not {}",
                            dtype_name(w_.w_ih.dtype())));
  if (input == nullptr || h_new == nullptr)
    throw Error(fmt::format("gru cell: {} is null, expected {} floats",
                            input == nullptr ? "input" : "h_new", input == nullptr ? I : H));
  if (threads < 0)
    throw Error(fmt::format("gru cell: threads is {}, expected >= 0 (0: grux chooses)", threads));
  if (!cell_shares_step(*plan_, I, H, threads))
    return cell_step_fast(plan_->fast, I, H, input, h, h_new);
  if (!plan_->parts.empty()) return cell_step_parts(*plan_, threads, H, input, h, h_new);
  // The team's step reads Tensors: views of the caller's memory, the result copied out.
  const Tensor x = Tensor::from_blob(const_cast<float*>(input), {I}, {1}, DType::f32, nullptr);
  const Tensor hv =
      h ? Tensor::from_blob(const_cast<float*>(h), {H}, {1}, DType::f32, nullptr) : Tensor();
  const Tensor r = forward(x, hv, threads).contiguous();
  std::memcpy(h_new, r.data<float>(), H * sizeof(float));
}

GruCellGrads GruCell::backward(const Tensor& input, const Tensor& h, const Tensor& dh_new,
                               int threads) const {
  CellProblem p = cell_problem(input, h, input_size_, hidden_size_);
  check_defined("gru cell backward", "dh_new", dh_new);
  check_shape("gru cell backward", "dh_new", dh_new,
              p.unbatched ? Shape{hidden_size_} : Shape{p.x.size(1), hidden_size_});
  Gru g(cell_config(input_size_, hidden_size_, w_.b_ih.defined(), form_), {w_});
  GruTape tape;
  g.forward_train(p.x, p.h, {}, tape, 0, Precision::f32, {}, threads);
  Tensor dhn = p.unbatched ? dh_new.unsqueeze(0).unsqueeze(0) : dh_new.unsqueeze(0);
  GruGrads gg = g.backward(tape, {}, dhn, threads);
  GruCellGrads out;
  out.dinput = p.unbatched ? gg.dinput.select(0, 0).select(0, 0) : gg.dinput.select(0, 0);
  out.dh = p.unbatched ? gg.dh0.select(0, 0).select(0, 0) : gg.dh0.select(0, 0);
  out.dweights = gg.dweights[0];
  return out;
}

}  // namespace grux
