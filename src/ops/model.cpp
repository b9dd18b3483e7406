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
#include <optional>
#include <vector>

#include "grux/error.h"
#include "grux/lstm.h"

namespace grux {

namespace {

// Frames a stage handles at once: the buffers between stages hold this many frames of the batch.
// 64 frames of the widest layer are a few kilobytes for the real-time sizes (H <= 128).
constexpr int64_t kBlockFrames = 64;

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

}  // namespace

struct Model::Impl {
  ModelSpec spec;
  struct Stage {
    int64_t in = 0, out = 0;
    std::optional<Gru> gru;  // a stack: one of the two
    std::optional<Lstm> lstm;
    Tensor h0, c0;  // (L, H): the stack's stored initial state, or undefined (zeros)
    std::optional<GruStreamHead> head;
    const ModelLayer* layer = nullptr;  // otherwise: one layer on the calling thread
  };
  std::vector<Stage> stages;
  int64_t widest = 0;  // features of the widest stage output (the buffers' row)

  explicit Impl(ModelSpec s) : spec(std::move(s)) {
    spec.validate();
    const std::vector<ModelLayer>& ls = spec.layers;
    widest = spec.input_size;
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
          st.out = ls[k].out_size;
          ++k;
        }
      }
      widest = std::max(widest, st.out);
      stages.push_back(std::move(st));
    }
  }
};

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

Model load_model(const std::string& path) {
  return Model(read_model(path));
}

struct ModelStream::Impl {
  std::shared_ptr<const Model::Impl> model;
  int64_t N = 0;
  struct Running {
    std::optional<GruStream> gru;
    std::optional<LstmStream> lstm;
    Tensor h0, c0;  // (L, N, H) for reset(), or undefined (zeros)
  };
  std::vector<Running> run;  // one per stage (empty for a layer on the calling thread)
  std::vector<float> buf[2];

  Impl(const Model& m, int64_t batch, Precision precision, int threads) : model(m.impl_), N(batch) {
    if (batch < 1)
      throw Error(fmt::format("model stream: batch is {}, expected at least 1", batch));
    const auto per_sequence = [&](const Tensor& s) {  // (L, H) -> (L, N, H)
      if (!s.defined()) return Tensor();
      Tensor t = Tensor::empty({s.size(0), N, s.size(1)}, DType::f32);
      for (int64_t n = 0; n < N; ++n) t.select(1, n).copy_from(s);
      return t;
    };
    for (const Model::Impl::Stage& st : model->stages) {
      Running r;
      r.h0 = per_sequence(st.h0);
      r.c0 = per_sequence(st.c0);
      if (st.gru) {
        r.gru.emplace(*st.gru, N, r.h0, precision, threads);
        if (st.head) r.gru->set_head(*st.head);
      } else if (st.lstm) {
        r.lstm.emplace(*st.lstm, N, r.h0, r.c0, precision, threads);
        if (st.head) r.lstm->set_head(*st.head);
      }
      run.push_back(std::move(r));
    }
    for (auto& b : buf) b.assign(size_t(kBlockFrames * N * model->widest), 0.f);
  }

  void process(const float* in, float* out, int64_t frames) {
    const ModelSpec& spec = model->spec;
    const int64_t I = spec.input_size, O = spec.output_size();
    const size_t S = model->stages.size();
    for (int64_t t0 = 0; t0 < frames; t0 += kBlockFrames) {
      const int64_t t = std::min(kBlockFrames, frames - t0);
      const float* x = in + t0 * N * I;
      float* y = out + t0 * N * O;
      if (S == 0) std::memcpy(y, x, size_t(t * N * I) * sizeof(float));
      const float* src = x;
      for (size_t s = 0; s < S; ++s) {
        float* dst = s + 1 == S ? y : buf[s % 2].data();
        const Model::Impl::Stage& st = model->stages[s];
        if (run[s].gru) {
          run[s].gru->process(src, dst, t);
        } else if (run[s].lstm) {
          run[s].lstm->process(src, dst, t);
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
    : impl_(std::make_unique<Impl>(model, batch, precision, threads)) {}
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
    if (r.gru) r.gru->reset(r.h0);
    if (r.lstm) r.lstm->reset(r.h0, r.c0);
  }
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

Tensor Model::process(const Tensor& x, int threads) const {
  if (x.dtype() != DType::f32)
    throw Error(fmt::format("model: input is {}, expected f32", dtype_name(x.dtype())));
  if ((x.dim() != 2 && x.dim() != 3) || x.size(x.dim() - 1) != input_size())
    throw Error(fmt::format("model: input has shape {}, expected (T, {}) or (T, N, {})",
                            shape_str(x.shape()), input_size(), input_size()));
  const int64_t N = x.dim() == 3 ? x.size(1) : 1;
  if (N < 1) throw Error("model: input has a batch of 0 sequences, expected at least 1");
  ModelStream s(*this, N, Precision::f32, threads);
  return s.step(x);
}

}  // namespace grux
