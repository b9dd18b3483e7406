// The sequential model's driver (grux/model.h): the spec's layers become stages, run block by
// block of frames. Consecutive recurrent layers of one cell, width, form and bias presence are
// one stack (a Gru or an Lstm run by its stream, stored initial states as h0 and c0); a dense
// layer right after a stack is the stream's head (inside the real-time kernel's step); every
// other layer (dense, activation, prelu, batch norm) runs frame by frame on the calling thread
// between the streams, on buffers sized when the stream is made.
#include "grux/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grux/error.h"
#include "grux/lstm.h"

namespace grux {

namespace {

// Frames a stage handles at once: the buffers between stages hold this many frames of the batch.
// 64 frames of the widest layer are a few kilobytes for the real-time sizes (H <= 128).
constexpr int64_t kBlockFrames = 64;
// Each buffer between stages holds at most this many floats (1 MiB): wide layers or large
// batches take fewer frames a block (the bits do not depend on it).
constexpr int64_t kBufferFloats = int64_t(1) << 18;
// A batch runs one real-time stream per sequence where the stack allows the real-time kernel
// (f32, the calling thread, up to kRealTimeMaxHidden units) and that is faster than the
// batched layer kernels: up to kPerSequenceMax sequences, or any number of stacks of at most
// kPerSequenceHidden units. Per sequence, against a stream of the whole batch, on an AVX-512
// core: LSTMs of 12 and 40 0.96-0.99x at batch 2-8 and 0.65-0.76x at 16 and 32 (the batched
// kernels' 1.5-1.9x at batch 2-4 before); an LSTM of 96 the same at batch 2-8, but 1.23x at
// 16 and 32, where the batch's shared weight reads win.
constexpr int64_t kPerSequenceMax = 8;
constexpr int64_t kPerSequenceHidden = 40;
constexpr int64_t kRealTimeMaxHidden = 256;
// Sample-rate correction keeps a ring of ratio + 1 states a layer: 768 kHz for a 48 kHz model
// at most.
constexpr double kMaxRateRatio = 16;

// One layer run on the calling thread: y (rows x out) from x (rows x in).
void run_layer(const ModelLayer& l, const float* x, float* y, int64_t rows) {
  const int64_t I = l.in_size, O = l.out_size;
  switch (l.kind) {
    case ModelLayer::Kind::dense: {
      const float* W = l.weight.data<float>();
      const float* b = l.bias.defined() ? l.bias.data<float>() : nullptr;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < O; ++o) {
          float s = 0;
          for (int64_t i = 0; i < I; ++i) s += W[o * I + i] * x[r * I + i];
          y[r * O + o] = b ? s + b[o] : s;
        }
      return;
    }
    case ModelLayer::Kind::activation:
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * I;
        float* yr = y + r * O;
        switch (l.activation) {
          case ModelLayer::Activation::tanh:
            for (int64_t i = 0; i < I; ++i) yr[i] = std::tanh(xr[i]);
            break;
          case ModelLayer::Activation::relu:
            for (int64_t i = 0; i < I; ++i) yr[i] = xr[i] > 0 ? xr[i] : 0.f;
            break;
          case ModelLayer::Activation::sigmoid:
            for (int64_t i = 0; i < I; ++i) yr[i] = 1.f / (1.f + std::exp(-xr[i]));
            break;
          case ModelLayer::Activation::elu:
            for (int64_t i = 0; i < I; ++i) yr[i] = xr[i] > 0 ? xr[i] : std::expm1(xr[i]);
            break;
          case ModelLayer::Activation::softmax: {
            float m = xr[0];
            for (int64_t i = 1; i < I; ++i) m = std::max(m, xr[i]);
            float s = 0;
            for (int64_t i = 0; i < I; ++i) s += (yr[i] = std::exp(xr[i] - m));
            for (int64_t i = 0; i < I; ++i) yr[i] /= s;
            break;
          }
        }
      }
      return;
    case ModelLayer::Kind::prelu: {
      const float* a = l.weight.data<float>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < I; ++i) {
          const float v = x[r * I + i];
          y[r * I + i] = v >= 0 ? v : a[i] * v;
        }
      return;
    }
    case ModelLayer::Kind::batchnorm: {
      const float *m = l.mean.data<float>(), *s = l.weight.data<float>(), *b = l.bias.data<float>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < I; ++i) y[r * I + i] = (x[r * I + i] - m[i]) * s[i] + b[i];
      return;
    }
    case ModelLayer::Kind::gru:
    case ModelLayer::Kind::lstm:
      break;
  }
  GRUX_ASSERT(false);
}

// A recurrent layer as ONNX's GRU and LSTM equations have it, every option of ModelLayer
// (directions, reverse, clip, peepholes, input_forget), on the whole sequence: x (T, N, I),
// len[n] <= T frames of sequence n, h0 and c0 (D, N, H) -> y (T, N, D H) with zeros past each
// sequence's end, and the final states hn, cn (D, N, H): zeros for a sequence of no frames,
// as ONNX Runtime gives. The plain loops of the equations, for the options the engine's kernels
// do not have.
void recurrent_equations(const ModelLayer& l, const float* x, int64_t T, int64_t N,
                         const std::vector<int64_t>& len, const float* h0, const float* c0,
                         float* y, float* hn, float* cn) {
  const bool lstm = l.kind == ModelLayer::Kind::lstm;
  const int64_t D = l.directions, H = l.hidden_size(), I = l.in_size, G = (lstm ? 4 : 3) * H;
  const float clip = l.clip;
  const auto bound = [clip](float v) { return clip > 0 ? std::clamp(v, -clip, clip) : v; };
  const auto sigmoid = [](float v) { return 1.f / (1.f + std::exp(-v)); };
  std::fill(y, y + T * N * D * H, 0.f);
  const size_t g_size = static_cast<size_t>(G), h_size = static_cast<size_t>(H);
  std::vector<float> gi(g_size), gh(g_size), h(h_size), c(h_size), rh(h_size), hnew(h_size);
  for (int64_t d = 0; d < D; ++d) {
    const float* W = l.w_ih.data<float>() + d * G * I;
    const float* R = l.w_hh.data<float>() + d * G * H;
    const float* bi = l.b_ih.defined() ? l.b_ih.data<float>() + d * G : nullptr;
    const float* bh = l.b_hh.defined() ? l.b_hh.data<float>() + d * G : nullptr;
    const float* P = l.peephole.defined() ? l.peephole.data<float>() + d * 3 * H : nullptr;
    const bool backward = d == 1 || l.reverse;
    for (int64_t n = 0; n < N; ++n) {
      std::copy(h0 + (d * N + n) * H, h0 + (d * N + n + 1) * H, h.begin());
      if (lstm) std::copy(c0 + (d * N + n) * H, c0 + (d * N + n + 1) * H, c.begin());
      for (int64_t s = 0; s < len[n]; ++s) {
        const int64_t t = backward ? len[n] - 1 - s : s;
        const float* xt = x + (t * N + n) * I;
        for (int64_t g = 0; g < G; ++g) {
          float a = bi ? bi[g] : 0.f, b = bh ? bh[g] : 0.f;
          for (int64_t i = 0; i < I; ++i) a += W[g * I + i] * xt[i];
          for (int64_t j = 0; j < H; ++j) b += R[g * H + j] * h[j];
          gi[g] = a, gh[g] = b;
        }
        if (!lstm) {  // r, z, n
          for (int64_t j = 0; j < H; ++j) rh[j] = sigmoid(bound(gi[j] + gh[j])) * h[j];
          for (int64_t j = 0; j < H; ++j) {
            const float r = sigmoid(bound(gi[j] + gh[j]));
            const float z = sigmoid(bound(gi[H + j] + gh[H + j]));
            float hn_pre;
            if (l.form == GruForm::linear_before_reset) {
              hn_pre = gi[2 * H + j] + r * gh[2 * H + j];
            } else {  // R_n (r h) + b_hn
              hn_pre = gi[2 * H + j] + (bh ? bh[2 * H + j] : 0.f);
              for (int64_t k = 0; k < H; ++k) hn_pre += R[(2 * H + j) * H + k] * rh[k];
            }
            const float cand = std::tanh(bound(hn_pre));
            hnew[j] = (1 - z) * cand + z * h[j];
          }
          h.swap(hnew);
        } else {  // i, f, g, o
          for (int64_t j = 0; j < H; ++j) {
            const float cj = c[j];
            const float i = sigmoid(bound(gi[j] + gh[j] + (P ? P[j] * cj : 0.f)));
            const float f = l.input_forget
                                ? 1 - i
                                : sigmoid(bound(gi[H + j] + gh[H + j] + (P ? P[H + j] * cj : 0.f)));
            const float g = std::tanh(bound(gi[2 * H + j] + gh[2 * H + j]));
            c[j] = f * cj + i * g;
            const float o =
                sigmoid(bound(gi[3 * H + j] + gh[3 * H + j] + (P ? P[2 * H + j] * c[j] : 0.f)));
            h[j] = o * std::tanh(c[j]);
          }
        }
        std::copy(h.begin(), h.end(), y + (t * N + n) * D * H + d * H);
      }
      if (len[n] == 0) std::fill(h.begin(), h.end(), 0.f), std::fill(c.begin(), c.end(), 0.f);
      std::copy(h.begin(), h.end(), hn + (d * N + n) * H);
      if (lstm) std::copy(c.begin(), c.end(), cn + (d * N + n) * H);
    }
  }
}

}  // namespace

struct Model::Impl {
  ModelSpec spec;
  // A layer needs the whole sequence (ModelSpec::whole_sequence_only): process() runs the
  // model layer by layer over all of it, the recurrent layers on the engine's operators (one
  // layer each, both directions) or, with options the operators lack, on their equations.
  std::string whole;
  struct WholeLayer {
    std::optional<Gru> gru;  // the operator of a recurrent layer, or neither: the equations
    std::optional<Lstm> lstm;
  };
  std::vector<WholeLayer> whole_layers;  // one per spec layer
  struct Final {
    Tensor h, c;  // (D, N, H)
  };
  // x (T, N, I) -> (T, N, O); each recurrent layer's final states into `finals`.
  Tensor run_whole(const Tensor& x, int threads, std::vector<Final>* finals) const;
  struct Stage {
    int64_t in = 0, out = 0;
    std::optional<Gru> gru;  // a stack: one of the two
    std::optional<Lstm> lstm;
    Tensor h0, c0;  // (L, H): the stack's stored initial state, or undefined (zeros)
    std::optional<GruStreamHead> head;
    size_t first = 0, last = 0;              // a stack's layers [first, last) of the spec
    const ModelLayer* head_layer = nullptr;  // the dense layer that is its head
    const ModelLayer* layer = nullptr;       // otherwise: one layer on the calling thread
  };
  std::vector<Stage> stages;
  int64_t widest = 0;  // features of the widest stage output (the buffers' row)

  explicit Impl(ModelSpec s) : spec(std::move(s)) {
    spec.validate();
    const std::vector<ModelLayer>& ls = spec.layers;
    widest = spec.input_size;
    whole = spec.whole_sequence_only();
    if (!whole.empty()) {
      for (const ModelLayer& l : ls) {
        WholeLayer w;
        if (l.recurrent() && l.clip == 0 && !l.peephole.defined() && !l.input_forget) {
          const int64_t D = l.directions;
          const auto dir = [D](const Tensor& t, int64_t d) {
            return !t.defined() || D == 1 ? t : t.select(0, d).contiguous();
          };
          if (l.kind == ModelLayer::Kind::gru) {
            GruConfig c;
            c.input_size = l.in_size, c.hidden_size = l.hidden_size(), c.bias = l.b_ih.defined();
            c.bidirectional = D == 2, c.form = l.form;
            std::vector<GruLayerWeights> ws;
            for (int64_t d = 0; d < D; ++d)
              ws.push_back({dir(l.w_ih, d), dir(l.w_hh, d), dir(l.b_ih, d), dir(l.b_hh, d)});
            w.gru.emplace(c, std::move(ws));
          } else {
            LstmConfig c;
            c.input_size = l.in_size, c.hidden_size = l.hidden_size(), c.bias = l.b_ih.defined();
            c.bidirectional = D == 2;
            std::vector<LstmLayerWeights> ws;
            for (int64_t d = 0; d < D; ++d)
              ws.push_back(
                  {dir(l.w_ih, d), dir(l.w_hh, d), dir(l.b_ih, d), dir(l.b_hh, d), Tensor()});
            w.lstm.emplace(c, std::move(ws));
          }
        }
        whole_layers.push_back(std::move(w));
      }
      return;
    }
    for (size_t k = 0; k < ls.size();) {
      Stage st;
      st.in = ls[k].in_size;
      if (!ls[k].recurrent()) {
        st.layer = &ls[k];
        st.out = ls[k].out_size;
        ++k;
      } else {
        size_t e = k + 1;  // the stack [k, e)
        const auto joins = [&](const ModelLayer& a, const ModelLayer& b) {
          return a.kind == b.kind && a.out_size == b.out_size && b.in_size == a.out_size &&
                 a.form == b.form && a.b_ih.defined() == b.b_ih.defined();
        };
        while (e < ls.size() && joins(ls[k], ls[e])) ++e;
        const ModelLayer& first = ls[k];
        const int64_t L = int64_t(e - k), H = first.out_size;
        const bool bias = first.b_ih.defined();
        bool stored_h = false, stored_c = false;
        for (size_t i = k; i < e; ++i)
          stored_h |= ls[i].h0.defined(), stored_c |= ls[i].c0.defined();
        if (stored_h) st.h0 = Tensor::zeros({L, H}, DType::f32);
        if (stored_c) st.c0 = Tensor::zeros({L, H}, DType::f32);
        for (size_t i = k; i < e; ++i) {
          if (ls[i].h0.defined()) st.h0.select(0, int64_t(i - k)).copy_from(ls[i].h0);
          if (ls[i].c0.defined()) st.c0.select(0, int64_t(i - k)).copy_from(ls[i].c0);
        }
        st.first = k;
        st.last = e;
        if (first.kind == ModelLayer::Kind::gru) {
          GruConfig c;
          c.input_size = first.in_size;
          c.hidden_size = H;
          c.num_layers = L;
          c.bias = bias;
          c.form = first.form;
          std::vector<GruLayerWeights> w;
          for (size_t i = k; i < e; ++i)
            w.push_back({ls[i].w_ih, ls[i].w_hh, ls[i].b_ih, ls[i].b_hh});
          st.gru.emplace(c, std::move(w));
        } else {
          LstmConfig c;
          c.input_size = first.in_size;
          c.hidden_size = H;
          c.num_layers = L;
          c.bias = bias;
          std::vector<LstmLayerWeights> w;
          for (size_t i = k; i < e; ++i)
            w.push_back({ls[i].w_ih, ls[i].w_hh, ls[i].b_ih, ls[i].b_hh, Tensor()});
          st.lstm.emplace(c, std::move(w));
        }
        st.out = H;
        k = e;
        if (k < ls.size() && ls[k].kind == ModelLayer::Kind::dense) {  // the stream's head
          GruStreamHead head;
          head.weight = ls[k].weight;
          head.bias = ls[k].bias;
          st.head = head;
          st.head_layer = &ls[k];
          st.out = ls[k].out_size;
          ++k;
        }
      }
      widest = std::max(widest, st.out);
      stages.push_back(std::move(st));
    }
  }
};

Tensor Model::Impl::run_whole(const Tensor& x, int threads, std::vector<Final>* finals) const {
  const int64_t T = x.size(0), N = x.size(1);
  const int64_t bound = spec.bound_batch();
  if (bound != 0 && bound != N)
    throw Error(
        fmt::format("model: the sequence lengths or initial states it was read with are for a "
                    "batch of {}, the input has {} sequences",
                    bound, N));
  Tensor cur = x.contiguous();
  if (finals) finals->assign(spec.layers.size(), Final{});
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const ModelLayer& l = spec.layers[k];
    Tensor y = Tensor::zeros({T, N, l.out_size}, DType::f32);
    if (!l.recurrent()) {
      run_layer(l, cur.data<float>(), y.data<float>(), T * N);
      cur = y;
      continue;
    }
    const bool lstm = l.kind == ModelLayer::Kind::lstm;
    const int64_t D = l.directions, H = l.hidden_size();
    std::vector<int64_t> len(size_t(N), T);
    bool shorter = false, empty = false;
    if (l.lengths.defined())
      for (int64_t n = 0; n < N; ++n) {
        len[n] = l.lengths.data<int64_t>()[n];
        if (len[n] > T)
          throw Error(fmt::format(
              "model: layer {} ({}): sequence {} has length {}, but the input has {} frames", k,
              l.kind_name(), n, len[n], T));
        shorter |= len[n] < T, empty |= len[n] == 0;
      }
    // The initial states as (D, N, H): one for every sequence broadcast, or one each.
    const auto start = [&](const Tensor& s) {
      Tensor t = Tensor::zeros({D, N, H}, DType::f32);
      if (!s.defined()) return t;
      const bool each = s.dim() == (D == 2 ? 3 : 2);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t n = 0; n < N; ++n)
          std::memcpy(t.data<float>() + (d * N + n) * H,
                      s.data<float>() + (d * (each ? N : 1) + (each ? n : 0)) * H,
                      size_t(H) * sizeof(float));
      return t;
    };
    const Tensor h0 = start(l.h0), c0 = lstm ? start(l.c0) : Tensor();
    Tensor hn = h0.clone(), cn = lstm ? c0.clone() : Tensor();
    const WholeLayer& w = whole_layers[k];
    if (T == 0) {  // every sequence has no frames: zero states, as below
      hn = Tensor::zeros({D, N, H}, DType::f32);
      if (lstm) cn = Tensor::zeros({D, N, H}, DType::f32);
    } else if (!w.gru && !w.lstm) {
      recurrent_equations(l, cur.data<float>(), T, N, len, h0.data<float>(),
                          lstm ? c0.data<float>() : nullptr, y.data<float>(), hn.data<float>(),
                          lstm ? cn.data<float>() : nullptr);
    } else {
      // The operator takes lengths of 1..T: a sequence of none runs one frame, whose output
      // and states are then put back to zeros (as ONNX Runtime gives). A reverse layer runs
      // forward on each sequence's frames reversed (within its length) and its output is
      // reversed back.
      std::vector<int64_t> run_len = len;
      for (int64_t& v : run_len) v = std::max<int64_t>(v, 1);
      const int64_t I = l.in_size;
      const auto flip = [&](const Tensor& a, int64_t F) {
        Tensor b = Tensor::zeros({T, N, F}, DType::f32);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t t = 0; t < run_len[n]; ++t)
            std::memcpy(b.data<float>() + (t * N + n) * F,
                        a.data<float>() + ((run_len[n] - 1 - t) * N + n) * F,
                        size_t(F) * sizeof(float));
        return b;
      };
      const Tensor in = l.reverse ? flip(cur, I) : cur;
      Tensor lengths;
      if (shorter) {
        lengths = Tensor::empty({N}, DType::i64);
        std::copy(run_len.begin(), run_len.end(), lengths.data<int64_t>());
      }
      const bool given = l.h0.defined() || l.c0.defined();
      Tensor out;
      if (w.gru) {
        GruOutput o = w.gru->forward(in, given ? h0 : Tensor(), lengths, threads);
        out = o.output, hn = o.h_n.contiguous();
      } else {
        LstmOutput o =
            w.lstm->forward(in, given ? h0 : Tensor(), given ? c0 : Tensor(), lengths, threads);
        out = o.output, hn = o.h_n.contiguous(), cn = o.c_n.contiguous();
      }
      y = l.reverse ? flip(out.contiguous(), D * H) : out.contiguous();
      if (empty)
        for (int64_t n = 0; n < N; ++n) {
          if (len[n] != 0) continue;
          for (int64_t t = 0; t < T; ++t)
            std::fill_n(y.data<float>() + (t * N + n) * D * H, D * H, 0.f);
          for (int64_t d = 0; d < D; ++d) {
            std::fill_n(hn.data<float>() + (d * N + n) * H, H, 0.f);
            if (lstm) std::fill_n(cn.data<float>() + (d * N + n) * H, H, 0.f);
          }
        }
    }
    if (finals) (*finals)[k] = Final{hn, cn};
    cur = y;
  }
  if (spec.skip > 0) {
    const int64_t I = spec.input_size, O = spec.output_size();
    const float* xs = x.contiguous().data<float>();
    float* ys = cur.data<float>();
    for (int64_t r = 0; r < T * N; ++r)
      for (int64_t o = 0; o < spec.skip; ++o) ys[r * O + o] += xs[r * I + o];
  }
  return cur;
}

Model::Model(ModelSpec spec) : impl_(std::make_shared<const Impl>(std::move(spec))) {}
Model::~Model() = default;
Model::Model(const Model&) = default;
Model& Model::operator=(const Model&) = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelSpec& Model::spec() const {
  return impl_->spec;
}
int64_t Model::input_size() const {
  return impl_->spec.input_size;
}
int64_t Model::output_size() const {
  return impl_->spec.output_size();
}

SampleRateCorrection parse_sample_rate_correction(const std::string& name) {
  if (name == "lin_interp") return SampleRateCorrection::lin_interp;
  if (name == "no_interp") return SampleRateCorrection::no_interp;
  if (name == "none") return SampleRateCorrection::none;
  throw Error(fmt::format(
      "sample-rate correction \"{}\", expected \"lin_interp\", \"no_interp\" or \"none\"", name));
}

Model load_model(const std::string& path) {
  return Model(read_model(path));
}

// One recurrent layer under sample-rate correction (ModelStreamOptions): a cell stepped from raw
// memory with the state fed back from `delay` frames before, as RTNeural's GRULayerT and
// LSTMLayerT with prepare(): each step writes its new h (and c) at slot `slot` of a ring of
// slot + 1 states per sequence, reads the layer's output out of the ring (no_interp: slot 0;
// lin_interp: a slot 0 + b slot 1, a the delay's fraction, b = 1 - a), feeds that back, and
// shifts the ring by one.
struct Corrected {
  std::optional<GruCell> gru;  // one of the two
  std::optional<LstmCell> lstm;
  int64_t H = 0, N = 0, slot = 0;
  bool interp = false;
  float a = 0, b = 1;
  std::vector<float> ring_h, ring_c;                                // N x (slot + 1) x H
  std::vector<float> fb_h, fb_c;                                    // N x H: the output, fed back
  std::vector<float> start_h, start_c, start_ring_h, start_ring_c;  // what reset() restores

  Corrected(const ModelLayer& l, int64_t batch, double delay, bool lin) : H(l.out_size), N(batch) {
    std::map<std::string, Tensor> w{{"weight_ih", l.w_ih}, {"weight_hh", l.w_hh}};
    if (l.b_ih.defined()) w["bias_ih"] = l.b_ih, w["bias_hh"] = l.b_hh;
    if (l.kind == ModelLayer::Kind::gru)
      gru.emplace(GruCell::from_state_dict(w, l.form));
    else
      lstm.emplace(LstmCell::from_state_dict(w));
    interp = lin;
    if (lin) {
      const double frac = delay - std::floor(delay);
      a = float(frac), b = float(1 - frac);
      slot = int64_t(std::ceil(delay)) - int64_t(std::ceil(frac));
    } else {
      slot = int64_t(delay) - 1;
    }
    const size_t ring = size_t(N * (slot + 1) * H);
    ring_h.assign(ring, 0.f), ring_c.assign(lstm ? ring : 0, 0.f);
    fb_h.assign(size_t(N * H), 0.f), fb_c.assign(lstm ? size_t(N * H) : 0, 0.f);
    // A stored initial state: fed back first, and the ring as if it had held still.
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < H; ++i) {
        const float h = l.h0.defined() ? l.h0.data<float>()[i] : 0.f;
        const float c = l.c0.defined() ? l.c0.data<float>()[i] : 0.f;
        fb_h[size_t(n * H + i)] = h;
        if (lstm) fb_c[size_t(n * H + i)] = c;
        for (int64_t j = 0; j <= slot; ++j) {
          ring_h[size_t((n * (slot + 1) + j) * H + i)] = h;
          if (lstm) ring_c[size_t((n * (slot + 1) + j) * H + i)] = c;
        }
      }
    }
    keep_start();
  }
  void keep_start() {
    start_h = fb_h, start_c = fb_c, start_ring_h = ring_h, start_ring_c = ring_c;
  }
  void reset() {
    std::copy(start_h.begin(), start_h.end(), fb_h.begin());
    std::copy(start_c.begin(), start_c.end(), fb_c.begin());
    std::copy(start_ring_h.begin(), start_ring_h.end(), ring_h.begin());
    std::copy(start_ring_c.begin(), start_ring_c.end(), ring_c.begin());
  }
  // One frame of sequence n: x (in floats) -> the layer's output (H floats, fb_h's row n).
  const float* step(int64_t n, const float* x) {
    float* rh = ring_h.data() + n * (slot + 1) * H;
    float* fh = fb_h.data() + n * H;
    if (gru) {
      gru->forward(x, fh, rh + slot * H);
    } else {
      float* rc = ring_c.data() + n * (slot + 1) * H;
      float* fc = fb_c.data() + n * H;
      lstm->forward(x, fh, fc, rh + slot * H, rc + slot * H);
      read_and_shift(rc, fc);
    }
    read_and_shift(rh, fh);
    return fh;
  }
  void read_and_shift(float* ring, float* out) const {
    if (interp && slot >= 1) {
      for (int64_t i = 0; i < H; ++i) out[i] = a * ring[i] + b * ring[H + i];
    } else {
      std::memcpy(out, ring, size_t(H) * sizeof(float));
    }
    std::memmove(ring, ring + H, size_t(slot * H) * sizeof(float));
  }
};

struct ModelStream::Impl {
  std::shared_ptr<const Model::Impl> model;
  int64_t N = 0;
  double ratio = 1;
  // A stack: one stream of the batch, or (per_sequence) one stream of one sequence for each.
  struct Running {
    std::vector<GruStream> gru;  // one of the two
    std::vector<LstmStream> lstm;
    bool per_sequence = false;
    std::vector<Tensor> h0, c0;        // each stream's start, for reset() (undefined: zeros)
    std::vector<Corrected> corrected;  // or, under sample-rate correction, its layers
    size_t streams() const { return gru.size() + lstm.size(); }
  };
  std::vector<Running> run;  // one per stage (empty for a layer on the calling thread)
  std::vector<float> buf[2];
  std::vector<float> seq_in, seq_out;  // one sequence's block, per_sequence stages
  int64_t block = kBlockFrames;        // frames a block

  Impl(const Model& m, int64_t batch, const ModelStreamOptions& o) : model(m.impl_), N(batch) {
    if (batch < 1)
      throw Error(fmt::format("model stream: batch is {}, expected at least 1", batch));
    const ModelSpec& spec = model->spec;
    if (!model->whole.empty())
      throw Error(fmt::format(
          "model stream: {}, which needs the whole sequence before its outputs: run the model "
          "on whole sequences (Model::process, run_graph; grux model run)",
          model->whole));
    if (o.sample_rate < 0 || !std::isfinite(o.sample_rate) || o.trained_rate < 0 ||
        !std::isfinite(o.trained_rate))
      throw Error(
          fmt::format("model stream: sample_rate {} and trained_rate {}, expected rates in "
                      "Hz (0: the model's own)",
                      o.sample_rate, o.trained_rate));
    const double trained = spec.sample_rate > 0 ? spec.sample_rate
                           : o.trained_rate > 0 ? o.trained_rate
                                                : 48000;
    if (o.sample_rate > 0 && o.sample_rate != trained && o.correction != SampleRateCorrection::none)
      ratio = o.sample_rate / trained;
    if (ratio > kMaxRateRatio)
      throw Error(fmt::format(
          "model stream: sample_rate {} Hz is {} times the model's {} Hz; sample-rate correction "
          "takes ratios up to {}",
          o.sample_rate, ratio, trained, kMaxRateRatio));
    if (ratio < 1)
      throw Error(fmt::format(
          "model stream: sample_rate {} Hz is below the model's {} Hz; sample-rate correction "
          "delays the recurrent state, so it runs a model at its rate or above",
          o.sample_rate, trained));
    const bool correct = ratio != 1;
    if (correct && o.correction == SampleRateCorrection::no_interp && ratio != std::floor(ratio))
      throw Error(fmt::format(
          "model stream: {} Hz is {} times the model's {} Hz; no_interp needs a whole ratio "
          "(lin_interp takes any)",
          o.sample_rate, ratio, trained));
    if (correct && o.precision != Precision::f32)
      throw Error(fmt::format("model stream: sample-rate correction runs f32, not {}",
                              precision_name(o.precision)));
    if (o.warmup_frames < 0)
      throw Error(fmt::format("model stream: warmup_frames is {}, expected >= 0", o.warmup_frames));
    block = std::clamp<int64_t>(kBufferFloats / (N * model->widest), 1, kBlockFrames);
    for (const Model::Impl::Stage& st : model->stages) {
      Running r;
      if (correct && !st.layer) {
        for (size_t k = st.first; k < st.last; ++k)
          r.corrected.emplace_back(spec.layers[k], N, ratio,
                                   o.correction == SampleRateCorrection::lin_interp);
      } else if (!st.layer) {
        // One real-time stream per sequence where that is faster (kPerSequenceMax).
        const int64_t H = spec.layers[st.first].out_size;
        r.per_sequence = N > 1 && (N <= kPerSequenceMax || H <= kPerSequenceHidden) &&
                         H <= kRealTimeMaxHidden && o.precision == Precision::f32 && o.threads <= 1;
        const int64_t streams = r.per_sequence ? N : 1, batch = r.per_sequence ? 1 : N;
        const auto start = [&](const Tensor& s) {  // (L, H) -> (L, batch, H)
          if (!s.defined()) return Tensor();
          Tensor t = Tensor::empty({s.size(0), batch, s.size(1)}, DType::f32);
          for (int64_t n = 0; n < batch; ++n) t.select(1, n).copy_from(s);
          return t;
        };
        for (int64_t k = 0; k < streams; ++k) {
          r.h0.push_back(start(st.h0));
          r.c0.push_back(start(st.c0));
          if (st.gru) {
            r.gru.emplace_back(*st.gru, batch, r.h0.back(), o.precision, o.threads);
            if (st.head) r.gru.back().set_head(*st.head);
          } else {
            r.lstm.emplace_back(*st.lstm, batch, r.h0.back(), r.c0.back(), o.precision, o.threads);
            if (st.head) r.lstm.back().set_head(*st.head);
          }
        }
        if (r.per_sequence) {
          seq_in.resize(std::max(seq_in.size(), size_t(block * st.in)));
          seq_out.resize(std::max(seq_out.size(), size_t(block * st.out)));
        }
      }
      run.push_back(std::move(r));
    }
    for (auto& b : buf) b.assign(size_t(block * N * model->widest), 0.f);
    if (o.warmup_frames > 0) warm_up(o.warmup_frames);
  }

  // The state of spec layer `layer`: (N, H).
  Tensor state(int64_t layer, bool cell) const {
    const ModelSpec& spec = model->spec;
    if (layer < 0 || layer >= int64_t(spec.layers.size()) || !spec.layers[layer].recurrent())
      throw Error(
          fmt::format("model stream: layer {} is not one of the model's recurrent layers", layer));
    if (cell && spec.layers[layer].kind != ModelLayer::Kind::lstm)
      throw Error(fmt::format("model stream: layer {} is a GRU, which has no cell state", layer));
    for (size_t s = 0; s < model->stages.size(); ++s) {
      const Model::Impl::Stage& st = model->stages[s];
      if (st.layer || size_t(layer) < st.first || size_t(layer) >= st.last) continue;
      const Running& r = run[s];
      if (!r.corrected.empty())
        throw Error("model stream: states are not kept apart under sample-rate correction");
      const int64_t H = spec.layers[layer].out_size, k = layer - int64_t(st.first);
      Tensor out = Tensor::empty({N, H}, DType::f32);
      for (size_t q = 0; q < r.streams(); ++q) {
        // (L, batch, H) of this stream: one sequence each (per_sequence) or the whole batch.
        const Tensor t =
            r.gru.empty() ? (cell ? r.lstm[q].cell_state() : r.lstm[q].state()) : r.gru[q].state();
        const Tensor mine = t.select(0, k).contiguous();
        const int64_t rows = r.per_sequence ? 1 : N;
        std::copy_n(mine.data<float>(), rows * H, out.data<float>() + int64_t(q) * rows * H);
      }
      return out;
    }
    GRUX_ASSERT(false);
  }

  // Runs `frames` frames of zeros, then keeps the state they leave as the one reset() restores.
  void warm_up(int64_t frames) {
    const ModelSpec& spec = model->spec;
    const std::vector<float> zeros(size_t(block * N * spec.input_size), 0.f);
    std::vector<float> out(size_t(block * N * spec.output_size()));
    for (int64_t t = 0; t < frames; t += block)
      process(zeros.data(), out.data(), std::min(block, frames - t));
    for (Running& r : run) {
      for (size_t k = 0; k < r.gru.size(); ++k) r.h0[k] = r.gru[k].state();
      for (size_t k = 0; k < r.lstm.size(); ++k)
        r.h0[k] = r.lstm[k].state(), r.c0[k] = r.lstm[k].cell_state();
      for (Corrected& c : r.corrected) c.keep_start();
    }
  }

  // A stage under sample-rate correction: every frame of every sequence through its layers one
  // step at a time, then the head.
  void run_corrected(Running& r, const Model::Impl::Stage& st, const float* src, float* dst,
                     int64_t t) {
    const int64_t H = r.corrected.back().H;
    for (int64_t f = 0; f < t; ++f)
      for (int64_t n = 0; n < N; ++n) {
        const float* x = src + (f * N + n) * st.in;
        for (Corrected& c : r.corrected) x = c.step(n, x);
        float* y = dst + (f * N + n) * st.out;
        if (st.head_layer)
          run_layer(*st.head_layer, x, y, 1);
        else
          std::memcpy(y, x, size_t(H) * sizeof(float));
      }
  }

  // A stack of one stream per sequence: each sequence's frames gathered, run, scattered.
  void run_per_sequence(Running& r, const Model::Impl::Stage& st, const float* src, float* dst,
                        int64_t t) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t f = 0; f < t; ++f)
        std::memcpy(seq_in.data() + f * st.in, src + (f * N + n) * st.in,
                    size_t(st.in) * sizeof(float));
      if (!r.gru.empty())
        r.gru[size_t(n)].process(seq_in.data(), seq_out.data(), t);
      else
        r.lstm[size_t(n)].process(seq_in.data(), seq_out.data(), t);
      for (int64_t f = 0; f < t; ++f)
        std::memcpy(dst + (f * N + n) * st.out, seq_out.data() + f * st.out,
                    size_t(st.out) * sizeof(float));
    }
  }

  void process(const float* in, float* out, int64_t frames) {
    const ModelSpec& spec = model->spec;
    const int64_t I = spec.input_size, O = spec.output_size();
    const size_t S = model->stages.size();
    for (int64_t t0 = 0; t0 < frames; t0 += block) {
      const int64_t t = std::min(block, frames - t0);
      const float* x = in + t0 * N * I;
      float* y = out + t0 * N * O;
      if (S == 0) std::memcpy(y, x, size_t(t * N * I) * sizeof(float));
      const float* src = x;
      for (size_t s = 0; s < S; ++s) {
        float* dst = s + 1 == S ? y : buf[s % 2].data();
        const Model::Impl::Stage& st = model->stages[s];
        if (run[s].per_sequence) {
          run_per_sequence(run[s], st, src, dst, t);
        } else if (!run[s].gru.empty()) {
          run[s].gru[0].process(src, dst, t);
        } else if (!run[s].lstm.empty()) {
          run[s].lstm[0].process(src, dst, t);
        } else if (!run[s].corrected.empty()) {
          run_corrected(run[s], st, src, dst, t);
        } else {
          run_layer(*st.layer, src, dst, t * N);
        }
        src = dst;
      }
      if (spec.skip > 0)
        for (int64_t r = 0; r < t * N; ++r)
          for (int64_t o = 0; o < spec.skip; ++o) y[r * O + o] += x[r * I + o];
    }
  }
};

ModelStream::ModelStream(const Model& model, int64_t batch, Precision precision, int threads)
    : ModelStream(model, batch, ModelStreamOptions{precision, threads}) {}
ModelStream::ModelStream(const Model& model, int64_t batch, const ModelStreamOptions& options)
    : impl_(std::make_unique<Impl>(model, batch, options)) {}
ModelStream::~ModelStream() = default;
ModelStream::ModelStream(ModelStream&&) noexcept = default;
ModelStream& ModelStream::operator=(ModelStream&&) noexcept = default;

void ModelStream::process(const float* in, float* out, int64_t frames) {
  if (frames < 0) throw Error(fmt::format("model stream: frames is {}, expected >= 0", frames));
  if (frames > 0 && (!in || !out)) throw Error("model stream: in or out is null");
  impl_->process(in, out, frames);
}

Tensor ModelStream::step(const Tensor& frames) {
  const int64_t I = input_size(), N = impl_->N;
  if (frames.dtype() != DType::f32)
    throw Error(
        fmt::format("model stream: frames are {}, expected f32", dtype_name(frames.dtype())));
  const bool batched = frames.dim() == 3;
  if (!(batched && frames.size(1) == N && frames.size(2) == I) &&
      !(frames.dim() == 2 && N == 1 && frames.size(1) == I))
    throw Error(fmt::format("model stream: frames have shape {}, expected (t, {}, {}){}",
                            shape_str(frames.shape()), N, I,
                            N == 1 ? fmt::format(" or (t, {})", I) : std::string()));
  const Tensor x = frames.contiguous();
  const int64_t t = frames.size(0);
  Tensor y = batched ? Tensor::empty({t, N, output_size()}, DType::f32)
                     : Tensor::empty({t, output_size()}, DType::f32);
  impl_->process(x.data<float>(), y.data<float>(), t);
  return y;
}

void ModelStream::reset() {
  for (Impl::Running& r : impl_->run) {
    for (size_t k = 0; k < r.gru.size(); ++k) r.gru[k].reset(r.h0[k]);
    for (size_t k = 0; k < r.lstm.size(); ++k) r.lstm[k].reset(r.h0[k], r.c0[k]);
    for (Corrected& c : r.corrected) c.reset();
  }
}

double ModelStream::rate_ratio() const {
  return impl_->ratio;
}

int64_t ModelStream::batch() const {
  return impl_->N;
}
int64_t ModelStream::input_size() const {
  return impl_->model->spec.input_size;
}
int64_t ModelStream::output_size() const {
  return impl_->model->spec.output_size();
}

Tensor ModelStream::hidden_state(int64_t layer) const {
  return impl_->state(layer, false);
}
Tensor ModelStream::cell_state(int64_t layer) const {
  return impl_->state(layer, true);
}

Tensor Model::process(const Tensor& x, int threads) const {
  if (x.dtype() != DType::f32)
    throw Error(fmt::format("model: input is {}, expected f32", dtype_name(x.dtype())));
  if ((x.dim() != 2 && x.dim() != 3) || x.size(x.dim() - 1) != input_size())
    throw Error(fmt::format("model: input has shape {}, expected (T, {}) or (T, N, {})",
                            shape_str(x.shape()), input_size(), input_size()));
  const int64_t N = x.dim() == 3 ? x.size(1) : 1;
  if (N < 1) throw Error("model: input has a batch of 0 sequences, expected at least 1");
  if (!impl_->whole.empty()) {
    const Tensor y = impl_->run_whole(x.reshape({x.size(0), N, input_size()}), threads, nullptr);
    return x.dim() == 3 ? y : y.reshape({x.size(0), output_size()});
  }
  ModelStream s(*this, N, Precision::f32, threads);
  return s.step(x);
}

}  // namespace grux

namespace grux {
namespace {

// `t`, whose axes are named by `have` (a letter each), laid out as `want` names them: the
// letters of `have` permuted, axes of size 1 ('1') inserted, an axis `want` lacks dropped (it
// must have size 1).
Tensor arrange(Tensor t, std::string have, const std::string& want, const std::string& what) {
  for (size_t d = have.size(); d-- > 0;)
    if (want.find(have[d]) == std::string::npos) {
      if (t.size(int64_t(d)) != 1)
        throw Error(fmt::format("{}: axis {} has {} entries, but the output has no such axis", what,
                                have[d], t.size(int64_t(d))));
      t = t.select(int64_t(d), 0);
      have.erase(d, 1);
    }
  std::vector<int64_t> order;
  Shape shape;
  for (char c : want) {
    const size_t d = c == '1' ? std::string::npos : have.find(c);
    if (d == std::string::npos) {
      shape.push_back(1);
    } else {
      order.push_back(int64_t(d));
      shape.push_back(t.size(int64_t(d)));
    }
  }
  return t.permute(order).contiguous().reshape(shape);
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> run_graph(const Model& model, const Tensor& x,
                                                      int threads) {
  const ModelSpec& spec = model.spec();
  const ModelGraph& g = spec.graph;
  if (g.input.empty())
    throw Error("model: not read from a graph (ONNX), so it has no named outputs");
  const std::string& ax = g.input_axes;
  const std::string where = fmt::format("model: input \"{}\"", g.input);
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw Error(fmt::format("{} is {}, expected f32 or f64", where, dtype_name(x.dtype())));
  if (x.dim() != int64_t(ax.size()))
    throw Error(fmt::format("{} has shape {}, expected {} axes ({})", where, shape_str(x.shape()),
                            ax.size(), ax));
  const int64_t I = x.size(int64_t(ax.find('F')));
  if (I != spec.input_size)
    throw Error(fmt::format("{} has {} features, expected {}", where, I, spec.input_size));
  Tensor frames = arrange(x, ax, "TNF", where).to(DType::f32);
  const int64_t T = frames.size(0), N = frames.size(1);
  if (N < 1) throw Error(fmt::format("{} has a batch of 0 sequences, expected at least 1", where));
  // The whole-sequence path keeps every layer's final states; a stream keeps its own.
  const bool whole = !model.impl_->whole.empty();
  std::vector<Model::Impl::Final> finals;
  std::optional<ModelStream> stream;
  Tensor y;  // (T, N, O)
  if (whole) {
    y = model.impl_->run_whole(frames.contiguous(), threads, &finals);
  } else {
    stream.emplace(model, N, Precision::f32, threads);
    y = stream->step(frames);
  }
  // Frames whose axes split a bidirectional layer's features into its two directions ('D').
  const auto frames_as = [&](const Tensor& t, std::string have, const std::string& want,
                             const std::string& what) {
    if (want.find('D') == std::string::npos) return arrange(t, have, want, what);
    Shape s = t.shape();
    const int64_t F = s.back();
    s.back() = 2, s.push_back(F / 2);
    return arrange(t.contiguous().reshape(s), have.substr(0, have.size() - 1) + "DF", want, what);
  };
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ModelGraphOutput& o : g.outputs) {
    const std::string what = fmt::format("model: output \"{}\"", o.name);
    Tensor t;
    switch (o.what) {
      case ModelGraphOutput::What::frames:
        t = frames_as(y, "TNF", o.axes, what);
        break;
      case ModelGraphOutput::What::last_frame:
        if (T == 0) throw Error(fmt::format("{} is the last frame, and the input has none", what));
        t = frames_as(y.select(0, T - 1), "NF", o.axes, what);
        break;
      case ModelGraphOutput::What::hidden:
      case ModelGraphOutput::What::cell: {
        const bool cell = o.what == ModelGraphOutput::What::cell;
        const int64_t L = int64_t(o.layers.size());
        const int64_t H = spec.layers[o.layers[0]].hidden_size();
        Tensor s = Tensor::empty({L, N, H}, DType::f32);
        for (int64_t k = 0; k < L; ++k) {
          const int64_t layer = o.layers[k], d = o.directions.empty() ? 0 : o.directions[k];
          if (whole) {
            const Model::Impl::Final& f = finals[layer];
            s.select(0, k).copy_from((cell ? f.c : f.h).select(0, d));
          } else {
            s.select(0, k).copy_from(cell ? stream->cell_state(layer)
                                          : stream->hidden_state(layer));
          }
        }
        // The stacked axis: 'L', or the 'D' or '1' of one layer's states.
        std::string want = o.axes;
        if (want.find('L') == std::string::npos) {
          const size_t at = want.find_first_of(L == 2 ? "D" : "1D");
          if (at != std::string::npos) want[at] = 'L';
        }
        t = arrange(s, "LNF", want, what);
        break;
      }
    }
    if (x.dtype() == DType::f64) t = t.to(DType::f64);
    out.emplace_back(o.name, std::move(t));
  }
  return out;
}

}  // namespace grux
