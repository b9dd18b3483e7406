// The LSTM stack driver (nn.LSTM semantics): validates a problem at the API boundary, lays out
// packed sequences, walks layers x directions with the stack helpers the GRU uses
// (ops/recurrent_stack.h), applies dropout, and runs backward in mirror order. Also weights
// I/O by state_dict keys and LstmCell (a one-step, one-layer LSTM).
#include "grux/lstm.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>

#include "core/descriptor.h"
#include "ops/lstm_layer.h"
#include "ops/recurrent.h"
#include "ops/recurrent_stack.h"
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

// What backward needs from forward_train.
struct LstmTapeData {
  SeqLayout lay;
  Shape h_n_shape, c_n_shape;  // as forward_train returned them
  bool unbatched = false;
  DType dtype = DType::f32;
  std::vector<Tensor> layer_inputs;  // per layer, (T, N, in) time-major (views allowed)
  std::vector<Tensor> masks;         // per layer below the top: dropout scale or undefined
  // Per layer * D + direction, packed buffers: states (h0 then every step's h), a (every
  // step's gate activations), cs (c0 then every step's c), m (o tanh(c), projection only).
  std::vector<Tensor> states, a, cs, m;
  std::vector<ops::LstmPackedLayer<float>> packed_f32;
  std::vector<ops::LstmPackedLayer<double>> packed_f64;
  template <typename T>
  std::vector<ops::LstmPackedLayer<T>>& packed() {
    if constexpr (std::is_same_v<T, float>)
      return packed_f32;
    else
      return packed_f64;
  }
};

namespace {

void check_layer_weights(const LstmConfig& c, DType dtype, const LstmLayerWeights& w, int64_t l,
                         int64_t d) {
  const int64_t H = c.hidden_size, P = c.output_size(), in = c.layer_input_size(l);
  ops::check_weight("lstm", lstm_key("weight_ih", l, d), w.w_ih, {4 * H, in}, dtype);
  ops::check_weight("lstm", lstm_key("weight_hh", l, d), w.w_hh, {4 * H, P}, dtype);
  if (c.bias) {
    ops::check_weight("lstm", lstm_key("bias_ih", l, d), w.b_ih, {4 * H}, dtype);
    ops::check_weight("lstm", lstm_key("bias_hh", l, d), w.b_hh, {4 * H}, dtype);
  } else if (w.b_ih.defined() || w.b_hh.defined()) {
    throw Error(fmt::format("lstm: layer {} has biases but bias is false", l));
  }
  if (c.proj_size > 0)
    ops::check_weight("lstm", lstm_key("weight_hr", l, d), w.w_hr, {P, H}, dtype);
  else if (w.w_hr.defined())
    throw Error(fmt::format("lstm: layer {} has weight_hr but proj_size is 0", l));
}

// The caller's tensors as time-major views, plus the sequence layout.
struct Problem {
  Tensor x;       // (T, N, I)
  Tensor h0, c0;  // (L*D, N, H_out), (L*D, N, H), or undefined
  SeqLayout lay;
  bool unbatched = false;
};

ops::SeqSpec seq_spec(const LstmConfig& c, DType dtype) {
  return {"lstm",        c.input_size, c.output_size(), c.num_layers * c.directions(),
          c.batch_first, dtype};
}

Problem normalize(const LstmConfig& c, DType dtype, const Tensor& input, const Tensor& h0,
                  const Tensor& c0, const Tensor& lengths) {
  ops::SeqInput in = ops::normalize_input(seq_spec(c, dtype), input, h0, lengths);
  Problem p;
  p.x = in.x;
  p.h0 = in.h0;
  p.unbatched = in.unbatched;
  if (c0.defined()) {
    check_same_dtype("lstm", "input", input, "c0", c0);
    check_same_device("lstm", "input", input, "c0", c0);
    const int64_t R = c.num_layers * c.directions(), N = p.x.size(1);
    check_shape("lstm", "c0", c0,
                p.unbatched ? Shape{R, c.hidden_size} : Shape{R, N, c.hidden_size});
    p.c0 = p.unbatched ? c0.unsqueeze(1) : c0;
  }
  p.lay = ops::make_seq_layout(p.x.size(0), p.x.size(1), in.len.empty() ? nullptr : in.len.data());
  return p;
}

// ---- Forward -------------------------------------------------------------------------

template <typename T>
// `packed` (inference): the layers packed beforehand (LstmInference), else packed here.
LstmOutput forward_impl(const LstmConfig& c, const std::vector<LstmLayerWeights>& weights,
                        const Problem& p, bool training, uint64_t seed, LstmTapeData* tape,
                        BatchShare share = {},
                        const std::vector<ops::LstmPackedLayer<T>>* packed = nullptr) {
  const auto k = ops::lstm_kernels<T>();
  const SeqLayout& lay = p.lay;
  const int64_t L = c.num_layers, D = c.directions(), H = c.hidden_size, P = c.output_size();
  const int64_t N = lay.N, T_ = lay.T, rows = lay.rows();
  const DType dt = dtype_of<T>();
  Tensor h_n = Tensor::zeros({L * D, N, P}, dt), c_n = Tensor::zeros({L * D, N, H}, dt);
  std::mt19937_64 rng(seed);
  Tensor layer_in = p.x;
  // Inference on sequences of one length: each direction reads its input rows where they are
  // and writes its states straight into its columns of the layer's output (ops::DenseIo), as
  // the GRU's driver does. Training keeps the packed buffers, which the tape holds.
  const bool one_length = lay.time_major();
  const bool dense = tape == nullptr && one_length;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = c.layer_input_size(l);
    Tensor out = Tensor::empty({T_, N, D * P}, dt);  // every row written below
    const bool even = layer_in.stride(2) == 1 && layer_in.stride(0) == N * layer_in.stride(1);
    const bool in_place = dense && even;
    const bool train_in_place = tape != nullptr && one_length && D == 1 && even;
    Tensor xp = in_place || train_in_place ? Tensor() : Tensor::empty({rows, in}, dt);
    if (dense && !in_place) ops::gather_packed<T>(lay, 0, layer_in, 0, in, xp.data<T>());
    for (int d = 0; d < D; ++d) {
      const int64_t ld = l * D + d;
      if (!dense && !train_in_place) ops::gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      const int64_t ldh0 = dense ? D * P : P;
      Tensor states = dense ? Tensor::empty({N, ldh0}, dt) : Tensor::empty({N + rows, P}, dt);
      T* h0s = states.data<T>();
      T* hs = dense ? nullptr : h0s + N * P;
      const ops::DenseIo<T> io =
          dense ? ops::DenseIo<T>{in_place ? layer_in.data<T>() : xp.data<T>(),
                                  in_place ? layer_in.stride(1) : in, out.data<T>() + d * P, D * P,
                                  d == 1}
                : ops::DenseIo<T>{layer_in.data<T>(), layer_in.stride(1), hs, P, false};
      const ops::DenseIo<T>* io_used = dense || train_in_place ? &io : nullptr;
      std::memset(h0s, 0, N * ldh0 * sizeof(T));
      if (p.h0.defined()) ops::add_sorted_rows<T>(lay, p.h0.select(0, ld), h0s, false, ldh0);
      // c: training keeps c0 and every step's c; inference one row a sequence, in place.
      Tensor cs = Tensor::empty({tape ? N + rows : N, H}, dt);
      std::memset(cs.data<T>(), 0, N * H * sizeof(T));
      if (p.c0.defined()) ops::add_sorted_rows<T>(lay, p.c0.select(0, ld), cs.data<T>());
      Tensor a = Tensor::empty({rows, 4 * H}, dt);
      Tensor m = c.proj_size > 0 ? Tensor::empty({tape ? rows : N, H}, dt) : Tensor();
      ops::LstmPackedLayer<T> own;
      if (!packed) own = ops::pack_lstm_layer<T>(weights[ld], tape != nullptr);
      const ops::LstmPackedLayer<T>& P_ = packed ? (*packed)[ld] : own;
      ops::lstm_layer_forward<T>(k, P_, lay, xp.defined() ? xp.data<T>() : nullptr, h0s,
                                 a.data<T>(), hs, cs.data<T>(), m.defined() ? m.data<T>() : nullptr,
                                 tape != nullptr, nullptr, 0, io_used);
      if (!dense) ops::scatter_packed<T>(lay, d, hs, P, out.data<T>(), D * P, d * P, false);
      for (int64_t j = 0; j < N; ++j) {
        // Dense: sequence j's last state is at time T - 1 (forward) or 0 (reverse).
        const T* last_h = dense ? io.h + ((d == 0 ? T_ - 1 : 0) * N + j) * io.ldh
                                : hs + ops::last_row(lay, j) * P;
        const T* last_c =
            tape ? cs.data<T>() + (N + ops::last_row(lay, j)) * H : cs.data<T>() + j * H;
        std::memcpy(h_n.data<T>() + (ld * N + lay.perm[j]) * P, last_h, P * sizeof(T));
        std::memcpy(c_n.data<T>() + (ld * N + lay.perm[j]) * H, last_c, H * sizeof(T));
      }
      if (tape) {
        tape->states[ld] = states;
        tape->a[ld] = a;
        tape->cs[ld] = cs;
        tape->m[ld] = m;
        tape->packed<T>()[ld] = std::move(own);
      }
    }
    if (tape) tape->layer_inputs[l] = layer_in;
    if (training && c.dropout > 0 && l + 1 < L) {
      Tensor mask = ops::apply_dropout<T>(out, c.dropout, rng, share);
      if (tape) tape->masks[l] = mask;
    }
    layer_in = out;
  }
  return {layer_in, h_n, c_n};
}

// ---- Backward ------------------------------------------------------------------------

template <typename T>
LstmGrads backward_impl(const LstmConfig& c, LstmTapeData& tape, const Tensor& dout,
                        const Tensor& dhn, const Tensor& dcn) {
  const auto k = ops::lstm_kernels<T>();
  const SeqLayout& lay = tape.lay;
  const int64_t L = c.num_layers, D = c.directions(), H = c.hidden_size, P = c.output_size();
  const int64_t N = lay.N, T_ = lay.T, rows = lay.rows();
  const DType dt = dtype_of<T>();
  LstmGrads grads;
  grads.dweights.resize(L * D);
  Tensor dh0 = Tensor::zeros({L * D, N, P}, dt), dc0 = Tensor::zeros({L * D, N, H}, dt);
  Tensor dyp = Tensor::empty({rows, P}, dt), dh0s = Tensor::empty({N, P}, dt);
  Tensor dc = Tensor::empty({N, H}, dt);
  Tensor d_above = dout;  // dL/d(output of layer l), (T, N, D*P) time-major, or undefined
  // One direction over sequences of one length: the packed rows are the time-major rows (no
  // copy of dL/dx or of a contiguous layer input).
  const bool direct = D == 1 && lay.time_major();
  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t in = c.layer_input_size(l);
    const Tensor& layer_in = tape.layer_inputs[l];
    const bool x_in_place = direct && layer_in.stride(2) == 1 && layer_in.stride(1) == in &&
                            layer_in.stride(0) == N * in;
    Tensor dlayer_in = direct ? Tensor::empty({T_, N, in}, dt) : Tensor::zeros({T_, N, in}, dt);
    Tensor xp = x_in_place ? Tensor() : Tensor::empty({rows, in}, dt);
    Tensor dxp = direct ? Tensor() : Tensor::empty({rows, in}, dt);
    const T* x_rows = x_in_place ? layer_in.data<T>() : xp.data<T>();
    T* dx_rows = direct ? dlayer_in.data<T>() : dxp.data<T>();
    for (int d = 0; d < D; ++d) {
      const int64_t ld = l * D + d;
      T* dy = dyp.data<T>();
      if (d_above.defined())
        ops::gather_packed<T>(lay, d, d_above, d * P, P, dy);
      else
        std::memset(dy, 0, rows * P * sizeof(T));
      if (dhn.defined()) ops::add_sorted_rows<T>(lay, dhn.select(0, ld), dy, true);
      std::memset(dc.data<T>(), 0, N * H * sizeof(T));
      if (dcn.defined()) ops::add_sorted_rows<T>(lay, dcn.select(0, ld), dc.data<T>());
      if (!x_in_place) ops::gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      LstmLayerWeights& dw = grads.dweights[ld];
      dw.w_ih = Tensor::empty({4 * H, in}, dt);
      dw.w_hh = Tensor::empty({4 * H, P}, dt);
      if (c.bias) {
        dw.b_ih = Tensor::empty({4 * H}, dt);
        dw.b_hh = Tensor::empty({4 * H}, dt);
      }
      if (c.proj_size > 0) dw.w_hr = Tensor::empty({P, H}, dt);
      const Tensor& m = tape.m[ld];
      ops::lstm_layer_backward<T>(k, tape.packed<T>()[ld], lay, x_rows, tape.states[ld].data<T>(),
                                  tape.a[ld].data<T>(), tape.cs[ld].data<T>(),
                                  m.defined() ? m.data<T>() : nullptr, dy, dc.data<T>(), dx_rows,
                                  dw, dh0s.data<T>());
      if (!direct)
        ops::scatter_packed<T>(lay, d, dxp.data<T>(), in, dlayer_in.data<T>(), in, 0, true);
      for (int64_t j = 0; j < N; ++j) {
        std::memcpy(dh0.data<T>() + (ld * N + lay.perm[j]) * P, dh0s.data<T>() + j * P,
                    P * sizeof(T));
        std::memcpy(dc0.data<T>() + (ld * N + lay.perm[j]) * H, dc.data<T>() + j * H,
                    H * sizeof(T));
      }
    }
    if (l > 0 && tape.masks[l - 1].defined()) {
      T* g = dlayer_in.data<T>();
      const T* mk = tape.masks[l - 1].data<T>();
      for (int64_t i = 0; i < dlayer_in.numel(); ++i) g[i] *= mk[i];
    }
    d_above = dlayer_in;
  }
  grads.dinput = ops::to_caller_layout(d_above, c.batch_first, tape.unbatched);
  grads.dh0 = tape.unbatched ? dh0.squeeze(1) : dh0;
  grads.dc0 = tape.unbatched ? dc0.squeeze(1) : dc0;
  return grads;
}

void squeeze_unbatched(LstmOutput& r, const LstmConfig& c, bool unbatched) {
  r.output = ops::to_caller_layout(r.output, c.batch_first, unbatched);
  if (unbatched) {
    r.h_n = r.h_n.squeeze(1);
    r.c_n = r.c_n.squeeze(1);
  }
}

}  // namespace

// ---- Lstm ------------------------------------------------------------------------------

Lstm::Lstm(const LstmConfig& config, DType dtype, uint64_t seed) : config_(config), dtype_(dtype) {
  config_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(
        fmt::format("lstm: dtype {} is not supported (expected f32 or f64)", dtype_name(dtype)));
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
  std::uniform_real_distribution<double> uni(-bound, bound);
  auto draw = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::f64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = uni(rng);
    return t.to(dtype);
  };
  const int64_t H = config_.hidden_size, P = config_.output_size();
  for (int64_t l = 0; l < config_.num_layers; ++l)
    for (int64_t d = 0; d < config_.directions(); ++d) {
      LstmLayerWeights w;
      w.w_ih = draw({4 * H, config_.layer_input_size(l)});
      w.w_hh = draw({4 * H, P});
      if (config_.bias) {
        w.b_ih = draw({4 * H});
        w.b_hh = draw({4 * H});
      }
      if (config_.proj_size > 0) w.w_hr = draw({P, H});
      weights_.push_back(std::move(w));
    }
}

Lstm::Lstm(const LstmConfig& config, std::vector<LstmLayerWeights> weights) : config_(config) {
  config_.validate();
  set_weights(std::move(weights));
}

Lstm::Lstm(const Lstm& other)
    : config_(other.config_), dtype_(other.dtype_), weights_(other.weights_) {
  for (LstmLayerWeights& w : weights_)
    for (Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh, &w.w_hr})
      if (t->defined()) *t = t->clone();
}

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
  for (int64_t l = 0; l < config_.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      LstmLayerWeights& w = weights[l * D + d];
      check_layer_weights(config_, dtype, w, l, d);
      for (Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh, &w.w_hr}) ops::make_contiguous(*t);
    }
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
  ops::StateDictReader reader("lstm", state);
  std::vector<LstmLayerWeights> weights;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      LstmLayerWeights w;
      w.w_ih = reader.get(lstm_key("weight_ih", l, d));
      w.w_hh = reader.get(lstm_key("weight_hh", l, d));
      if (c.bias) {
        w.b_ih = reader.get(lstm_key("bias_ih", l, d));
        w.b_hh = reader.get(lstm_key("bias_hh", l, d));
      }
      if (c.proj_size > 0) w.w_hr = reader.get(lstm_key("weight_hr", l, d));
      weights.push_back(std::move(w));
    }
  reader.check_no_other(fmt::format(
      "a {}-layer {}LSTM{}{}", c.num_layers, c.bidirectional ? "bidirectional " : "",
      c.bias ? "" : " without bias",
      c.proj_size > 0 ? fmt::format(" with proj_size {}", c.proj_size) : std::string()));
  return Lstm(c, std::move(weights));
}

std::map<std::string, Tensor> Lstm::state_dict() const {
  LstmGrads as_grads;
  as_grads.dweights = weights_;
  return as_grads.state_dict(config_);
}

std::map<std::string, Tensor> LstmGrads::state_dict(const LstmConfig& c) const {
  std::map<std::string, Tensor> out;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      const LstmLayerWeights& w = dweights.at(l * c.directions() + d);
      out[lstm_key("weight_ih", l, d)] = w.w_ih;
      out[lstm_key("weight_hh", l, d)] = w.w_hh;
      if (w.b_ih.defined()) out[lstm_key("bias_ih", l, d)] = w.b_ih;
      if (w.b_hh.defined()) out[lstm_key("bias_hh", l, d)] = w.b_hh;
      if (w.w_hr.defined()) out[lstm_key("weight_hr", l, d)] = w.w_hr;
    }
  return out;
}

LstmOutput Lstm::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                         const Tensor& lengths, int threads) const {
  ops::ThreadsScope scope("lstm", threads);
  Problem p = normalize(config_, dtype_, input, h0, c0, lengths);
  LstmOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, false, 0, nullptr);
  });
  squeeze_unbatched(r, config_, p.unbatched);
  return r;
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
  Problem p = normalize(m.config, m.dtype, input, h0, c0, lengths);
  LstmOutput r = ops::dispatch_float(m.dtype, [&](auto t) {
    using T = decltype(t);
    const auto* packed = [&] {
      if constexpr (std::is_same_v<T, float>)
        return &m.packed_f32;
      else
        return &m.packed_f64;
    }();
    return forward_impl<T>(m.config, m.weights, p, false, 0, nullptr, {}, packed);
  });
  squeeze_unbatched(r, m.config, p.unbatched);
  return r;
}

LstmOutput Lstm::forward_train(const Tensor& input, const Tensor& h0, const Tensor& c0,
                               const Tensor& lengths, LstmTape& tape, uint64_t dropout_seed,
                               Precision precision, BatchShare share, int threads) const {
  ops::ThreadsScope scope("lstm", threads);
  if (precision != Precision::f32)
    throw Error(
        fmt::format("lstm forward_train: precision {} is not available for the LSTM "
                    "(expected f32)",
                    precision_name(precision)));
  Problem p = normalize(config_, dtype_, input, h0, c0, lengths);
  if (share.of != 0 && !(share.first >= 0 && share.of > 0 && share.first + p.lay.N <= share.of))
    throw Error(fmt::format(
        "lstm forward_train: the batch's {} streams as streams {}.. of {} (expected 0 <= first "
        "and first + {} <= of)",
        p.lay.N, share.first, share.of, p.lay.N));
  auto data = std::make_unique<LstmTapeData>();
  const int64_t LD = config_.num_layers * config_.directions();
  data->lay = p.lay;
  data->unbatched = p.unbatched;
  data->dtype = dtype_;
  data->layer_inputs.resize(config_.num_layers);
  data->masks.resize(config_.num_layers);
  for (auto* v : {&data->states, &data->a, &data->cs, &data->m}) v->resize(LD);
  data->packed_f32.resize(dtype_ == DType::f32 ? LD : 0);
  data->packed_f64.resize(dtype_ == DType::f64 ? LD : 0);
  LstmOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, true, dropout_seed, data.get(), share);
  });
  squeeze_unbatched(r, config_, p.unbatched);
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

LstmCell::LstmCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype, uint64_t seed)
    : lstm_(cell_config(input_size, hidden_size, bias), dtype, seed) {}

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
}

std::pair<Tensor, Tensor> LstmCell::forward(const Tensor& input, const Tensor& h, const Tensor& c,
                                            int threads) const {
  CellProblem p = cell_problem(input, h, c, input_size(), hidden_size());
  LstmOutput r = lstm_.forward(p.x, p.h, p.c, {}, threads);
  return {first_step(r.h_n, p.unbatched), first_step(r.c_n, p.unbatched)};
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
