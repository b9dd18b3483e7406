// The GRU stack driver (nn.GRU semantics): validates a problem at the API boundary, lays out
// packed sequences, walks layers x directions, applies dropout, and runs backward in
// mirror order. Also weights I/O by state_dict keys and GruCell (a one-step, one-layer GRU).
#include "grux/gru.h"

#include <fmt/format.h>
#include <hwy/aligned_allocator.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <type_traits>

#include "core/descriptor.h"
#include "core/thread_team.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "grux/io.h"
#include "ops/gru_layer.h"
#include "ops/recurrent.h"
#include "ops/recurrent_stack.h"
#include "ops/threads_option.h"

namespace grux {

using ops::SeqLayout;

const char* gru_form_name(GruForm f) {
  return f == GruForm::linear_before_reset ? "linear_before_reset" : "reset_before";
}

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

// What backward needs from forward_train.
struct GruTapeData {
  SeqLayout lay;
  Shape input_shape, h0_shape;  // as the caller gave them (h0_shape: of h_n when no h0)
  bool unbatched = false;
  DType dtype = DType::f32;
  std::vector<Tensor> layer_inputs;  // per layer, (T, N, in) time-major (views allowed)
  std::vector<Tensor> masks;         // per layer below the top: dropout scale or undefined
  // Per layer * D + direction, packed buffers. states: the initial state (N rows, sorted
  // order) followed by every step's state (rows).
  std::vector<Tensor> states, g, aux;
  // Per layer * D + direction, the weights as forward_train packed them, with the transposed
  // operands backward needs: packed once per training step instead of twice.
  std::vector<ops::PackedLayer<float>> packed_f32;
  std::vector<ops::PackedLayer<double>> packed_f64;
  template <typename T>
  std::vector<ops::PackedLayer<T>>& packed() {
    if constexpr (std::is_same_v<T, float>)
      return packed_f32;
    else
      return packed_f64;
  }
  template <typename T>
  const std::vector<ops::PackedLayer<T>>& packed() const {
    return const_cast<GruTapeData*>(this)->packed<T>();
  }
};

namespace {

// ---- Weights -------------------------------------------------------------------------

void check_layer_weights(const GruConfig& c, DType dtype, const GruLayerWeights& w, int64_t l,
                         int64_t d) {
  const int64_t H = c.hidden_size, in = c.layer_input_size(l);
  ops::check_weight("gru", gru_key("weight_ih", l, d), w.w_ih, {3 * H, in}, dtype);
  ops::check_weight("gru", gru_key("weight_hh", l, d), w.w_hh, {3 * H, H}, dtype);
  if (c.bias) {
    ops::check_weight("gru", gru_key("bias_ih", l, d), w.b_ih, {3 * H}, dtype);
    ops::check_weight("gru", gru_key("bias_hh", l, d), w.b_hh, {3 * H}, dtype);
  } else if (w.b_ih.defined() || w.b_hh.defined()) {
    throw Error(fmt::format("gru: layer {} has biases but bias is false", l));
  }
}

// ---- Problem normalization -----------------------------------------------------------

// The caller's tensors as time-major views, plus the sequence layout.
struct Problem {
  Tensor x;   // (T, N, I)
  Tensor h0;  // (L*D, N, H) or undefined
  SeqLayout lay;
  bool unbatched = false;
};

ops::SeqSpec seq_spec(const GruConfig& c, DType dtype) {
  return {"gru", c.input_size, c.hidden_size, c.num_layers * c.directions(), c.batch_first, dtype};
}

Problem normalize(const GruConfig& c, DType dtype, const Tensor& input, const Tensor& h0,
                  const Tensor& lengths) {
  ops::SeqInput in = ops::normalize_input(seq_spec(c, dtype), input, h0, lengths);
  Problem p;
  p.x = in.x;
  p.h0 = in.h0;
  p.unbatched = in.unbatched;
  p.lay = ops::make_seq_layout(p.x.size(0), p.x.size(1), in.len.empty() ? nullptr : in.len.data());
  return p;
}

using ops::add_sorted_rows;
using ops::gather_packed;
using ops::last_row;
using ops::scatter_packed;
using ops::to_caller_layout;

// ---- Forward -------------------------------------------------------------------------

// `prepacked`: the weights as pack_layer packed them (GruInference), or null to pack them here.
// `precision`: of the products, when packing here (forward_train in bf16).
template <typename T>
GruOutput forward_impl(const GruConfig& c, const std::vector<GruLayerWeights>& weights,
                       const Problem& p, bool training, uint64_t seed, GruTapeData* tape,
                       const std::vector<ops::PackedLayer<T>>* prepacked = nullptr,
                       Precision precision = Precision::f32, BatchShare share = {}) {
  const auto k = ops::gru_kernels<T>();
  const SeqLayout& lay = p.lay;
  const int64_t L = c.num_layers, D = c.directions(), H = c.hidden_size, N = lay.N, T_ = lay.T;
  const int64_t rows = lay.rows();
  const DType dt = dtype_of<T>();
  Tensor h_n = Tensor::zeros({L * D, N, H}, dt);
  Tensor gh = Tensor::empty({N, 3 * H}, dt);
  std::mt19937_64 rng(seed);
  Tensor layer_in = p.x;
  // Inference on sequences of one length: nothing is sorted, so each direction reads its
  // input rows where they are (when they are evenly spaced) and writes its states straight
  // into its columns of the layer's output (ops::DenseIo): no copy in or out (W5: 7% of the
  // time). Training keeps the packed buffers, which the tape holds for backward.
  const bool one_length = lay.time_major();
  const bool dense = tape == nullptr && one_length;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = c.layer_input_size(l);
    // Every row is written below (valid ones copied, padding ones zeroed), by direction.
    Tensor out = Tensor::empty({T_, N, D * H}, dt);
    const bool even = layer_in.stride(2) == 1 && layer_in.stride(0) == N * layer_in.stride(1);
    const bool in_place = dense && even;
    // Training over one direction and one length: the packed rows are the time-major rows,
    // so the input is read in place too (the states still go to the packed buffer the tape
    // keeps).
    const bool train_in_place = tape != nullptr && one_length && D == 1 && even;
    Tensor xp = in_place || train_in_place ? Tensor() : Tensor::empty({rows, in}, dt);
    // Dense: copied once, in time order, for both directions.
    if (dense && !in_place) gather_packed<T>(lay, 0, layer_in, 0, in, xp.data<T>());
    for (int d = 0; d < D; ++d) {
      const int64_t ld = l * D + d;
      if (!dense && !train_in_place) gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      // The initial state (N rows, sorted order) and then every step's state (rows); dense:
      // the initial state alone, its rows D H apart as the output's.
      const int64_t ldh0 = dense ? D * H : H;
      Tensor states = dense ? Tensor::empty({N, ldh0}, dt) : Tensor::empty({N + rows, H}, dt);
      T* h0s = states.data<T>();
      T* hs = dense ? nullptr : h0s + N * H;
      // Where the time loop reads its input and writes its states in place, if anywhere:
      // dense, the (gathered or caller's) input and the output's columns; training in place,
      // the caller's input and the packed states the tape keeps.
      const ops::DenseIo<T> io =
          dense ? ops::DenseIo<T>{in_place ? layer_in.data<T>() : xp.data<T>(),
                                  in_place ? layer_in.stride(1) : in, out.data<T>() + d * H, D * H,
                                  d == 1}
                : ops::DenseIo<T>{layer_in.data<T>(), layer_in.stride(1), hs, H, false};
      const ops::DenseIo<T>* io_used = dense || train_in_place ? &io : nullptr;
      std::memset(h0s, 0, N * ldh0 * sizeof(T));
      if (p.h0.defined()) add_sorted_rows<T>(lay, p.h0.select(0, ld), h0s, false, ldh0);
      // aux: hn for backward (linear-before-reset; inference writes neither it nor the gates'
      // values back into g) or r * h_prev (reset-before, its second product reads it).
      const bool need_aux = tape != nullptr || c.form == GruForm::reset_before;
      Tensor g = Tensor::empty({rows, 3 * H}, dt);
      Tensor aux = need_aux ? Tensor::empty({rows, H}, dt) : Tensor();
      ops::PackedLayer<T> packed_here;
      if (!prepacked)
        packed_here = ops::pack_layer<T>(weights[ld], c.form, tape != nullptr, precision);
      const ops::PackedLayer<T>& P = prepacked ? (*prepacked)[ld] : packed_here;
      // Threads split the batch rather than the units (at least 8 rows each) where the
      // recurrent weights fit in half of each core's L2, or all the layer's weights in three
      // L2s: each thread's state rows stay its own (no barrier a step, no read of what the
      // other core just wrote), though each thread reads all the weights every step, from
      // L3 where they do not fit its L2. Rows are independent: the same bits. Both rules
      // from the batch split timed against the units' on two threads with 1 MiB of L2 each:
      // about 10% less time up to 2.3 MB of weights a layer (W5, W3 in bf16 and int8), 6% at
      // 3 MB, none from 3 to 7.4 MB, up to 13% more at H 1024 (6-24 MB).
      const auto bytes = [&](const cpu::PackedB<T>& b) {
        return b.K * b.N * (b.i8 ? 1 : b.bf16 ? 2 : int64_t(sizeof(T)));
      };
      const int64_t hh_bytes = bytes(P.hh) + bytes(P.hn), all_bytes = hh_bytes + bytes(P.ih);
      const int64_t l2 = cpu::l2_cache_bytes();
      const int nt = std::min<int64_t>(omp_get_max_threads(), N / 8);
      if (dense && nt > 1 && !omp_in_parallel() && (hh_bytes <= l2 / 2 || all_bytes <= 3 * l2)) {
        // Part t: rows [n0, n1) of every step; its g, aux and gh are the rows of the whole
        // batch's buffers from T n0 (g, aux) and n0 (gh) on. Nothing allocated in the region.
        std::vector<ops::SeqLayout> parts(nt);
        for (int t = 0; t < nt; ++t)
          parts[t] = ops::make_seq_layout(T_, (t + 1) * N / nt - t * N / nt, nullptr);
#pragma omp parallel num_threads(nt)
        for (int t = omp_get_thread_num(); t < nt; t += omp_get_num_threads()) {
          const int64_t n0 = t * N / nt;
          ops::DenseIo<T> io_t = io;
          io_t.x = io.x + n0 * io.ldx;
          io_t.h = io.h + n0 * io.ldh;
          io_t.x_step = N * io.ldx;
          io_t.h_step = N * io.ldh;
          ops::gru_layer_forward<T>(k, P, parts[t], nullptr, h0s + n0 * ldh0,
                                    g.data<T>() + T_ * n0 * 3 * H,
                                    need_aux ? aux.data<T>() + T_ * n0 * H : nullptr, nullptr,
                                    gh.data<T>() + n0 * 3 * H, nullptr, 1, &io_t);
        }
      } else {
        ops::gru_layer_forward<T>(k, P, lay, xp.defined() ? xp.data<T>() : nullptr, h0s,
                                  g.data<T>(), need_aux ? aux.data<T>() : nullptr, hs, gh.data<T>(),
                                  nullptr, 0, io_used);
      }
      if (!dense) scatter_packed<T>(lay, d, hs, H, out.data<T>(), D * H, d * H, false);
      for (int64_t j = 0; j < N; ++j) {
        // Dense: sequence j's last state is at time T - 1 (forward) or 0 (reverse).
        const T* last =
            dense ? io.h + ((d == 0 ? T_ - 1 : 0) * N + j) * io.ldh : hs + last_row(lay, j) * H;
        std::memcpy(h_n.data<T>() + (ld * N + lay.perm[j]) * H, last, H * sizeof(T));
      }
      if (tape) {
        tape->states[ld] = states;
        tape->g[ld] = g;
        tape->aux[ld] = aux;
        tape->packed<T>()[ld] = std::move(packed_here);
      }
    }
    if (tape) tape->layer_inputs[l] = layer_in;
    if (training && c.dropout > 0 && l + 1 < L) {
      Tensor mask = ops::apply_dropout<T>(out, c.dropout, rng, share);
      if (tape) tape->masks[l] = mask;
    }
    layer_in = out;
  }
  return {layer_in, h_n};
}

// ---- Backward ------------------------------------------------------------------------

template <typename T>
GruGrads backward_impl(const GruConfig& c, const std::vector<GruLayerWeights>& weights,
                       const GruTapeData& tape, const Tensor& dout, const Tensor& dhn) {
  const auto k = ops::gru_kernels<T>();
  const SeqLayout& lay = tape.lay;
  const int64_t L = c.num_layers, D = c.directions(), H = c.hidden_size, N = lay.N, T_ = lay.T;
  const int64_t rows = lay.rows();
  const DType dt = dtype_of<T>();
  GruGrads grads;
  grads.dweights.resize(L * D);
  Tensor dh0 = Tensor::zeros({L * D, N, H}, dt);
  Tensor dyp = Tensor::empty({rows, H}, dt), dh0s = Tensor::empty({N, H}, dt);
  Tensor d_above = dout;  // dL/d(output of layer l), (T, N, D*H) time-major, or undefined
  // One direction over sequences of one length: the packed rows are the time-major rows, so
  // dL/dx is written straight into dL/d(layer input) and a contiguous layer input is read in
  // place (no copy of either; the same values).
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
        gather_packed<T>(lay, d, d_above, d * H, H, dy);
      else
        std::memset(dy, 0, rows * H * sizeof(T));
      if (dhn.defined()) add_sorted_rows<T>(lay, dhn.select(0, ld), dy, true);
      if (!x_in_place) gather_packed<T>(lay, d, layer_in, 0, in, xp.data<T>());
      GruLayerWeights& dw = grads.dweights[ld];
      dw.w_ih = Tensor::empty({3 * H, in}, dt);
      dw.w_hh = Tensor::empty({3 * H, H}, dt);
      if (c.bias) {
        dw.b_ih = Tensor::empty({3 * H}, dt);
        dw.b_hh = Tensor::empty({3 * H}, dt);
      }
      const ops::PackedLayer<T>& P = tape.packed<T>()[ld];
      ops::gru_layer_backward<T>(k, P, lay, x_rows, tape.states[ld].data<T>(), tape.g[ld].data<T>(),
                                 tape.aux[ld].data<T>(), dy, dx_rows, dw, dh0s.data<T>());
      if (!direct) scatter_packed<T>(lay, d, dxp.data<T>(), in, dlayer_in.data<T>(), in, 0, true);
      for (int64_t j = 0; j < N; ++j)
        std::memcpy(dh0.data<T>() + (ld * N + lay.perm[j]) * H, dh0s.data<T>() + j * H,
                    H * sizeof(T));
    }
    if (l > 0 && tape.masks[l - 1].defined()) {
      T* g = dlayer_in.data<T>();
      const T* m = tape.masks[l - 1].data<T>();
      for (int64_t i = 0; i < dlayer_in.numel(); ++i) g[i] *= m[i];
    }
    d_above = dlayer_in;
  }
  grads.dinput = to_caller_layout(d_above, c.batch_first, tape.unbatched);
  grads.dh0 = tape.unbatched ? dh0.squeeze(1) : dh0;
  return grads;
}

}  // namespace

// ---- Gru -------------------------------------------------------------------------------

Gru::Gru(const GruConfig& config, DType dtype, uint64_t seed) : config_(config), dtype_(dtype) {
  config_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(
        fmt::format("gru: dtype {} is not supported (expected f32 or f64)", dtype_name(dtype)));
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden_size));
  std::uniform_real_distribution<double> uni(-bound, bound);
  auto draw = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::f64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = uni(rng);
    return t.to(dtype);
  };
  const int64_t H = config_.hidden_size;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (int64_t d = 0; d < config_.directions(); ++d) {
      GruLayerWeights w;
      w.w_ih = draw({3 * H, config_.layer_input_size(l)});
      w.w_hh = draw({3 * H, H});
      if (config_.bias) {
        w.b_ih = draw({3 * H});
        w.b_hh = draw({3 * H});
      }
      weights_.push_back(std::move(w));
    }
  }
}

Gru::Gru(const GruConfig& config, std::vector<GruLayerWeights> weights) : config_(config) {
  config_.validate();
  set_weights(std::move(weights));
}

Gru::Gru(const Gru& other)
    : config_(other.config_), dtype_(other.dtype_), weights_(other.weights_) {
  for (GruLayerWeights& w : weights_)
    for (Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh})
      if (t->defined()) *t = t->clone();
}

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
  for (int64_t l = 0; l < config_.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      GruLayerWeights& w = weights[l * D + d];
      check_layer_weights(config_, dtype, w, l, d);
      for (Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh}) ops::make_contiguous(*t);
    }
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
  ops::StateDictReader reader("gru", state);
  std::vector<GruLayerWeights> weights;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      GruLayerWeights w;
      w.w_ih = reader.get(gru_key("weight_ih", l, d));
      w.w_hh = reader.get(gru_key("weight_hh", l, d));
      if (c.bias) {
        w.b_ih = reader.get(gru_key("bias_ih", l, d));
        w.b_hh = reader.get(gru_key("bias_hh", l, d));
      }
      weights.push_back(std::move(w));
    }
  reader.check_no_other(fmt::format("a {}-layer {}GRU{}", c.num_layers,
                                    c.bidirectional ? "bidirectional " : "",
                                    c.bias ? "" : " without bias"));
  return Gru(c, std::move(weights));
}

std::map<std::string, Tensor> Gru::state_dict() const {
  GruGrads as_grads;
  as_grads.dweights = weights_;
  return as_grads.state_dict(config_);
}

std::map<std::string, Tensor> GruGrads::state_dict(const GruConfig& c) const {
  std::map<std::string, Tensor> out;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int64_t d = 0; d < c.directions(); ++d) {
      const GruLayerWeights& w = dweights.at(l * c.directions() + d);
      out[gru_key("weight_ih", l, d)] = w.w_ih;
      out[gru_key("weight_hh", l, d)] = w.w_hh;
      if (w.b_ih.defined()) out[gru_key("bias_ih", l, d)] = w.b_ih;
      if (w.b_hh.defined()) out[gru_key("bias_hh", l, d)] = w.b_hh;
    }
  return out;
}

GruOutput Gru::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                       int threads) const {
  ops::ThreadsScope scope("gru", threads);
  Problem p = normalize(config_, dtype_, input, h0, lengths);
  GruOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, false, 0, nullptr);
  });
  r.output = to_caller_layout(r.output, config_.batch_first, p.unbatched);
  if (p.unbatched) r.h_n = r.h_n.squeeze(1);
  return r;
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
  Problem p = normalize(c, impl_->dtype, input, h0, lengths);
  // The weights themselves are not read: only their packed copies.
  GruOutput r = impl_->dtype == DType::f32
                    ? forward_impl<float>(c, {}, p, false, 0, nullptr, &impl_->packed_f32)
                    : forward_impl<double>(c, {}, p, false, 0, nullptr, &impl_->packed_f64);
  r.output = to_caller_layout(r.output, c.batch_first, p.unbatched);
  if (p.unbatched) r.h_n = r.h_n.squeeze(1);
  return r;
}

GruOutput Gru::forward_train(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                             GruTape& tape, uint64_t dropout_seed, Precision precision,
                             BatchShare share, int threads) const {
  ops::ThreadsScope scope("gru", threads);
  if (precision == Precision::int8)
    throw Error("gru forward_train: precision int8 is for inference; train in f32 or bf16");
  ops::check_precision("gru forward_train", dtype_, precision);
  Problem p = normalize(config_, dtype_, input, h0, lengths);
  if (share.of != 0 && !(share.first >= 0 && share.of > 0 && share.first + p.lay.N <= share.of))
    throw Error(fmt::format(
        "gru forward_train: the batch's {} streams as streams {}.. of {} (expected 0 <= first "
        "and first + {} <= of)",
        p.lay.N, share.first, share.of, p.lay.N));
  auto data = std::make_unique<GruTapeData>();
  const int64_t LD = config_.num_layers * config_.directions();
  data->lay = p.lay;
  data->input_shape = input.shape();
  data->unbatched = p.unbatched;
  data->dtype = dtype_;
  data->layer_inputs.resize(config_.num_layers);
  data->masks.resize(config_.num_layers);
  data->states.resize(LD);
  data->g.resize(LD);
  data->aux.resize(LD);
  data->packed_f32.resize(dtype_ == DType::f32 ? LD : 0);
  data->packed_f64.resize(dtype_ == DType::f64 ? LD : 0);
  GruOutput r = ops::dispatch_float(dtype_, [&](auto t) {
    return forward_impl<decltype(t)>(config_, weights_, p, true, dropout_seed, data.get(), nullptr,
                                     precision, share);
  });
  data->h0_shape = r.h_n.shape();
  if (p.unbatched) data->h0_shape.erase(data->h0_shape.begin() + 1);
  tape.data_ = std::move(data);
  r.output = to_caller_layout(r.output, config_.batch_first, p.unbatched);
  if (p.unbatched) r.h_n = r.h_n.squeeze(1);
  return r;
}

GruGrads Gru::backward(const GruTape& tape, const Tensor& doutput, const Tensor& dh_n,
                       int threads) const {
  ops::ThreadsScope scope("gru backward", threads);
  if (tape.empty()) throw Error("gru backward: the tape is empty (run forward_train first)");
  const GruTapeData& t = *tape.data_;
  if (t.dtype != dtype_)
    throw Error("gru backward: the tape was recorded with weights of another dtype");
  const ops::SeqUpstream u = ops::normalize_upstream(
      seq_spec(config_, dtype_), t.lay.T, t.lay.N, t.unbatched,
      config_.directions() * config_.hidden_size, t.h0_shape, doutput, dh_n);
  return ops::dispatch_float(dtype_, [&](auto x) {
    return backward_impl<decltype(x)>(config_, weights_, t, u.doutput, u.dh_n);
  });
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

// A cell step's state and scratch: on the stack where they fit in 16 KB (H up to about 580
// for one layer), else one heap block (a heap block of that size per call costs 40-250 ns).
class StepBuffer {
 public:
  explicit StepBuffer(int64_t floats) {
    if (floats > kStackFloats) {
      heap_ = hwy::AllocateAligned<float>(static_cast<size_t>(floats));
      if (!heap_) throw Error("gru cell: out of memory");
    }
  }
  float* get() { return heap_ ? heap_.get() : stack_; }

 private:
  static constexpr int64_t kStackFloats = 4096;
  alignas(64) float stack_[kStackFloats];
  hwy::AlignedFreeUniquePtr<float[]> heap_;
};

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
