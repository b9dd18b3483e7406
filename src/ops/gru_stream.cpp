// Streaming GRU: feed frames or chunks, keep the state between calls. Each chunk runs the
// same layer kernels as a whole-sequence forward, so results are bit-identical to it.
#include "cpu/gru_stream.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "core/visibility.h"
#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "grux/gru.h"
#include "ops/gru_layer.h"

namespace grux {

namespace {
// Where a call's frames are: t frames of N x I, by element strides (time, batch, feature).
struct Frames {
  int64_t t = 0, st_t = 0, st_n = 0, st_i = 0;
  bool chunk = false;  // a time axis was given
};
}  // namespace

// Hidden: the class it belongs to is exported, its implementation is not (test_package.sh).
struct GRUX_INTERNAL GruStream::Impl {
  // Copies of what the stream reads: no pointer to the Gru, which may move or go away.
  GruConfig config;
  DType dtype = DType::f32;
  int64_t N;  // batch (1 internally when unbatched)
  bool unbatched;
  Tensor state;            // (L, N, H)
  int64_t capacity = 0;    // frames the workspace holds: longer calls run in blocks of it
  std::vector<Tensor> hs;  // per layer (capacity * N, H): that layer's outputs
  Tensor xp, g, aux, gh;   // workspace
  Tensor reorder;          // (capacity * N, H): outputs on their way to a strided `out`
  // Per layer, weights packed once at construction (one of the two, by dtype).
  std::vector<ops::PackedLayer<float>> packed_f32;
  std::vector<ops::PackedLayer<double>> packed_f64;
  template <typename T>
  const std::vector<ops::PackedLayer<T>>& packed() const {
    if constexpr (sizeof(T) == 4)
      return packed_f32;
    else
      return packed_f64;
  }
  // The real-time kernel (cpu/gru_stream.h) runs f32 streams of one sequence, hidden sizes up
  // to kFastMaxHidden, on the calling thread; everything else runs the engine's layer kernels.
  static constexpr int64_t kFastMaxHidden = 256;
  bool fast = false;
  std::vector<cpu::StreamLayer> fast_layers;
  hwy::AlignedFreeUniquePtr<float[]> fast_scratch;
  // Per layer, 2 Hp floats: the state padded to the kernel's Hp (what the kernel reads and
  // updates; `state` only holds what reset() set) and the kernel's second buffer.
  hwy::AlignedFreeUniquePtr<float[]> fast_state;
  // Frames since the state was set: the real-time kernel's step0, and the engine's (whose
  // recurrent products read the weights in an order that follows the step,
  // ops::gru_layer_forward).
  int64_t steps = 0;
  float* fast_h(int64_t l) const { return fast_state.get() + l * 2 * fast_layers[0].Hp; }
  // state -> fast_state (fast path only).
  void state_to_fast() {
    const int64_t H = config.hidden_size, Hp = fast_layers[0].Hp;
    std::memset(fast_state.get(), 0, config.num_layers * 2 * Hp * sizeof(float));
    for (int64_t l = 0; l < config.num_layers; ++l)
      std::memcpy(fast_h(l), state.data<float>() + l * H, H * sizeof(float));
  }
  static bool fast_path(const Gru& gru, int64_t N, int threads, Precision precision) {
    return gru.dtype() == DType::f32 && precision == Precision::f32 && N == 1 && threads <= 1 &&
           gru.config().hidden_size <= kFastMaxHidden;
  }
  void pack_fast(const Gru& gru) {
    const bool rb = gru.config().form == GruForm::reset_before;
    for (const GruLayerWeights& w : gru.weights())
      fast_layers.push_back(
          cpu::gru_stream_pack(w.w_ih.size(1), w.w_hh.size(1), rb,
                               w.w_ih.contiguous().data<float>(), w.w_hh.contiguous().data<float>(),
                               w.b_ih.defined() ? w.b_ih.contiguous().data<float>() : nullptr,
                               w.b_hh.defined() ? w.b_hh.contiguous().data<float>() : nullptr));
  }

  template <typename T>
  std::vector<ops::PackedLayer<T>> pack_all(const Gru& gru, Precision precision) const {
    std::vector<ops::PackedLayer<T>> out;
    for (const GruLayerWeights& w : gru.weights())
      out.push_back(ops::pack_layer<T>(w, gru.config().form, false, precision));
    return out;
  }

  // The whole workspace, sized once at construction: up to kMaxBlock frames, fewer when a
  // frame's buffers are large (a block of about kBlockBytes at most). Blocks give the same
  // bits as one long chunk (every product is row-invariant), so any call is split into them
  // and no call allocates.
  static constexpr int64_t kMaxBlock = 512;
  static constexpr int64_t kBlockBytes = int64_t(8) << 20;
  static constexpr int64_t kFastBlockBytes = int64_t(64) << 10;
  void allocate_workspace() {
    const GruConfig& c = config;
    const int64_t H = c.hidden_size, I = c.input_size, L = c.num_layers;
    if (fast) {
      // Blocks whose input projections (3 Hp floats a frame) fit in about 64 KiB.
      const int64_t Hp = fast_layers[0].Hp;
      capacity = std::clamp<int64_t>(kFastBlockBytes / (3 * Hp * 4), 1, kMaxBlock);
      int64_t scratch = 0;
      for (const auto& fl : fast_layers)
        scratch = std::max(scratch, cpu::gru_stream_scratch(fl, capacity));
      fast_scratch = hwy::AllocateAligned<float>(static_cast<size_t>(scratch));
      fast_state = hwy::AllocateAligned<float>(static_cast<size_t>(L * 2 * Hp));
      if (!fast_scratch || !fast_state) throw Error("gru stream: out of memory for the workspace");
      xp = Tensor::empty({capacity, I}, dtype);
      reorder = Tensor::empty({capacity, H}, dtype);
      hs.assign(L - 1, Tensor());  // the top layer writes the caller's output
      for (auto& h : hs) h = Tensor::empty({capacity, H}, dtype);
      return;
    }
    const int64_t frame_bytes =
        N * (I + 3 * H + H + L * H + H) * static_cast<int64_t>(dtype_size(dtype));
    capacity = std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(frame_bytes, 1), 1, kMaxBlock);
    const int64_t rows = capacity * N;
    const DType dt = dtype;
    xp = Tensor::empty({rows, I}, dt);
    g = Tensor::empty({rows, 3 * H}, dt);
    // Reset-before's second product reads r * h_prev from aux; linear-before-reset needs none.
    if (c.form == GruForm::reset_before) aux = Tensor::empty({rows, H}, dt);
    gh = Tensor::empty({N, 3 * H}, dt);
    reorder = Tensor::empty({rows, H}, dt);
    hs.assign(L, Tensor());
    for (auto& h : hs) h = Tensor::empty({rows, H}, dt);
    // The layout of a block of `capacity` frames, its vectors at full size: shorter blocks
    // rewrite it in place (set_block_length) without allocating.
    lay = ops::make_seq_layout(capacity, N, nullptr);
  }
  // The layout for blocks of t <= capacity frames of N full-length sequences.
  void set_block_length(int64_t t) {
    if (lay.T == t) return;
    lay.T = lay.S = t;
    std::fill(lay.len.begin(), lay.len.end(), t);
    lay.bs.resize(t, N);  // within the capacity reserved at construction: no allocation
    lay.off.resize(t + 1);
    for (int64_t s = 0; s <= t; ++s) lay.off[s] = s * N;
  }

  ops::SeqLayout lay;  // for blocks of lay.T frames

  // The head (set_head; f32 streams only): out = W h + b (+ the frame with residual).
  struct Head {
    int64_t O = 0;  // output features
    bool residual = false;
    std::vector<float> w, bias;  // (O, H) row-major, (O) or empty; w empty: no layer
    cpu::StreamHead fast{};      // the real-time kernel's copy of the layer
    Tensor packed;               // batch > 1: W^T packed once, as cpu::gemm packs it
    cpu::PackedB<float> pb{};
    int64_t block = 0;           // frames a block of the engine's path runs
    std::vector<float> gru_out;  // (block, N, H): the GRU's outputs of a block
    std::vector<float> in, out;  // step_into's frames and outputs, capacity frames
  };
  std::optional<Head> head;
  int64_t out_size() const { return head ? head->O : config.hidden_size; }
  void run_head(const float* in, float* out, int64_t frames);

  void run_block_fast(const float* src, const Frames& f, float* out);
  void run_fast(const float* in, float* out, int64_t frames, const cpu::StreamHead* head = nullptr,
                bool residual = false);
  void run_layers_fast(const float* x, int64_t sx, int64_t t, const cpu::StreamOut& top);
  // The threads that run the frames when threads > 1 was asked for: a team the stream owns,
  // started at construction, whose workers spin between frames (ThreadTeam::Idle::spin).
  // Without it (inside an OpenMP region, or in a child process forked after the stream was
  // made, where the workers do not exist) the caller runs the frames alone: the same bits.
  std::unique_ptr<ThreadTeam> team;
  ThreadTeam* frame_team() const {
    return team && team->usable() && !omp_in_parallel() ? team.get() : nullptr;
  }

  // Runs the frames in blocks of at most `capacity`; out (f.t, N, H) time-major, contiguous.
  template <typename T>
  void run(const T* src, const Frames& f, T* out) {
    const int64_t H = config.hidden_size;
    for (int64_t s0 = 0; s0 < f.t; s0 += capacity) {
      Frames b = f;
      b.t = std::min(capacity, f.t - s0);
      run_block<T>(src + s0 * f.st_t, b, out + s0 * N * H);
    }
  }

  template <typename T>
  void run_block(const T* src, const Frames& f, T* out) {
    if constexpr (sizeof(T) == 4) {
      if (fast) return run_block_fast(src, f, out);
    }
    const GruConfig& c = config;
    const int64_t t = f.t, H = c.hidden_size, I = c.input_size, rows = t * N;
    const auto k = ops::gru_kernels<T>();
    set_block_length(t);
    // Layer 0 input, packed time-major (row s * N + n).
    T* xpd = xp.data<T>();
    const int64_t st0 = f.st_t, st1 = f.st_n, st2 = f.st_i;
    for (int64_t s = 0; s < t; ++s)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < I; ++i) xpd[(s * N + n) * I + i] = src[s * st0 + n * st1 + i * st2];
    const T* layer_in = xpd;
    ThreadTeam* frames_team = frame_team();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      T* st = state.data<T>() + l * N * H;
      T* h = hs[l].data<T>();
      ops::gru_layer_forward<T>(k, packed<T>()[l], lay, layer_in, st, g.data<T>(),
                                aux.defined() ? aux.data<T>() : nullptr, h, gh.data<T>(),
                                frames_team, frames_team ? frames_team->size() : 1, nullptr, steps);
      std::memcpy(st, h + (rows - N) * H, N * H * sizeof(T));
      layer_in = h;
    }
    std::memcpy(out, layer_in, rows * H * sizeof(T));
    steps += t;
  }
};

// The real-time kernel: t <= capacity frames (rows of x, stride sx) through every layer, the
// top layer writing `top`.
void GruStream::Impl::run_layers_fast(const float* x, int64_t sx, int64_t t,
                                      const cpu::StreamOut& top) {
  const int64_t H = config.hidden_size, L = config.num_layers;
  for (int64_t l = 0; l + 1 < L; ++l) {
    float* dst = hs[l].data<float>();
    cpu::gru_stream_forward(fast_layers[l], t, steps, x, sx, fast_h(l), {dst, H},
                            fast_scratch.get());
    x = dst, sx = H;
  }
  cpu::gru_stream_forward(fast_layers[L - 1], t, steps, x, sx, fast_h(L - 1), top,
                          fast_scratch.get());
  steps += t;
}

// process()'s path: contiguous frames, in blocks of the workspace, nothing else per call;
// with the C API's head (and residual) applied in the top layer's steps.
void GruStream::Impl::run_fast(const float* in, float* out, int64_t frames,
                               const cpu::StreamHead* head, bool residual) {
  const int64_t I = config.input_size, O = head ? head->O : config.hidden_size;
  for (int64_t s0 = 0; s0 < frames; s0 += capacity) {
    const cpu::StreamOut top{out + s0 * O, O, head, residual ? in + s0 * I : nullptr, I};
    run_layers_fast(in + s0 * I, I, std::min(capacity, frames - s0), top);
  }
}

// A block of step_into()'s frames, whose features may be strided; out (t, H) contiguous.
void GruStream::Impl::run_block_fast(const float* src, const Frames& f, float* out) {
  const int64_t t = f.t, I = config.input_size;
  const cpu::StreamOut top{out, config.hidden_size};
  if (f.st_i == 1) return run_layers_fast(src, f.st_t, t, top);
  float* xpd = xp.data<float>();  // strided features: gathered into rows
  for (int64_t s = 0; s < t; ++s)
    for (int64_t i = 0; i < I; ++i) xpd[s * I + i] = src[s * f.st_t + i * f.st_i];
  run_layers_fast(xpd, I, t, top);
}

// process()'s path with a head: in (frames, N, I), out (frames, N, O), both contiguous.
void GruStream::Impl::run_head(const float* in, float* out, int64_t frames) {
  Head& h = *head;
  const int64_t I = config.input_size, H = config.hidden_size, O = h.O;
  if (fast) return run_fast(in, out, frames, h.w.empty() ? nullptr : &h.fast, h.residual);
  if (h.w.empty()) {  // the GRU's outputs are the stream's, plus the frames
    run<float>(in, Frames{frames, N * I, I, 1, true}, out);
    for (int64_t i = 0; i < frames * N * O; ++i) out[i] = in[i] + out[i];
    return;
  }
  const float* bias = h.bias.empty() ? nullptr : h.bias.data();
  float* y = h.gru_out.data();
  for (int64_t f0 = 0; f0 < frames; f0 += h.block) {
    const int64_t f = std::min(h.block, frames - f0), rows = f * N;
    const float* x = in + f0 * N * I;
    float* o = out + f0 * N * O;
    run<float>(x, Frames{f, N * I, I, 1, true}, y);
    // For one sequence, dot products of the head's rows (its own multiply-adds, nothing more);
    // for a batch, linear_forward's product (cpu::gemm packs W^T the same way, then runs this
    // kernel).
    if (N == 1)
      cpu::dense_rows(f, H, O, y, H, h.w.data(), bias, o, O, false);
    else
      cpu::gemm_packed<float>(rows, y, H, false, h.pb, bias, false, o, O, 0, h.pb.panels());
    if (h.residual)
      for (int64_t i = 0; i < rows * O; ++i) o[i] = x[i] + o[i];
  }
}

GruStream::GruStream(const Gru& gru, int64_t batch, const Tensor& h0, Precision precision,
                     int threads)
    : impl_(new Impl) {
  ops::check_precision("gru stream", gru.dtype(), precision);
  if (gru.config().bidirectional)
    throw Error(
        "gru stream: a bidirectional GRU cannot stream (the reverse direction needs the "
        "whole sequence)");
  if (batch < 0)
    throw Error(fmt::format("gru stream: batch is {}, expected >= 1 or 0 for unbatched", batch));
  if (threads < 0)
    throw Error(fmt::format(
        "gru stream: threads is {}, expected >= 0 (0 or 1: the calling thread only)", threads));
  impl_->config = gru.config();
  impl_->dtype = gru.dtype();
  impl_->unbatched = batch == 0;
  impl_->N = batch == 0 ? 1 : batch;
  impl_->fast = Impl::fast_path(gru, impl_->N, threads, precision);
  if (threads > 1) {
    // No more members than units of work per step, nor than cores.
    const int64_t unit = gru.dtype() == DType::f32 ? cpu::kUnit<float> : cpu::kUnit<double>;
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const int size = std::min({threads, hw, ops::layer_team_size(gru.config().hidden_size, unit)});
    if (size > 1) impl_->team = std::make_unique<ThreadTeam>(size, ThreadTeam::Idle::spin);
  }
  if (impl_->fast)
    impl_->pack_fast(gru);
  else if (gru.dtype() == DType::f32)
    impl_->packed_f32 = impl_->pack_all<float>(gru, precision);
  else
    impl_->packed_f64 = impl_->pack_all<double>(gru, precision);
  impl_->allocate_workspace();
  reset(h0);
}

GruStream::~GruStream() = default;
GruStream::GruStream(GruStream&&) noexcept = default;
GruStream& GruStream::operator=(GruStream&&) noexcept = default;

namespace {
std::vector<float> floats_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}
}  // namespace

void GruStream::set_head(const GruStreamHead& head) {
  Impl& m = *impl_;
  const int64_t H = m.config.hidden_size, I = m.config.input_size;
  if (m.dtype != DType::f32)
    throw Error(
        fmt::format("gru stream: a head needs an f32 stream, this one is {}", dtype_name(m.dtype)));
  int64_t O = H;
  if (head.weight.defined()) {
    const Tensor& w = head.weight;
    if (w.dtype() != DType::f32)
      throw Error(
          fmt::format("gru stream: head weight is {}, expected f32", dtype_name(w.dtype())));
    if (w.dim() != 2 || w.size(1) != H || w.size(0) < 1)
      throw Error(fmt::format("gru stream: head weight has shape {}, expected (O, {})",
                              shape_str(w.shape()), H));
    O = w.size(0);
  }
  if (head.bias.defined()) {
    if (!head.weight.defined())
      throw Error("gru stream: a head bias without a head weight (expected both, or neither)");
    if (head.bias.dtype() != DType::f32)
      throw Error(
          fmt::format("gru stream: head bias is {}, expected f32", dtype_name(head.bias.dtype())));
    check_shape("gru stream", "head bias", head.bias, Shape{O});
  }
  if (head.residual && O != I)
    throw Error(
        fmt::format("gru stream: a residual head adds the input to the output, but the "
                    "input has {} features and the output {}",
                    I, O));
  // Built aside, then moved in: a failed set_head leaves the stream as it was.
  Impl::Head h;
  h.O = O;
  h.residual = head.residual;
  if (head.weight.defined()) h.w = floats_of(head.weight);
  if (head.bias.defined()) h.bias = floats_of(head.bias);
  if (m.fast) {
    if (!h.w.empty())
      h.fast =
          cpu::gru_stream_pack_head(O, H, h.w.data(), h.bias.empty() ? nullptr : h.bias.data());
  } else if (!h.w.empty()) {
    // Blocks of about 256 KiB of GRU outputs: the head's product over a block stays in cache.
    h.block = std::clamp<int64_t>((int64_t(1) << 16) / (m.N * H), 1, 512);
    h.gru_out.resize(h.block * m.N * H);
    if (m.N > 1) {  // one sequence runs dot products of the head's rows instead
      const int64_t panel = cpu::gemm_panel_width<float>(O);
      h.packed = Tensor::empty({cpu::packed_size<float>(H, O, panel)}, DType::f32);
      // W (O x H) row-major used as W^T (H x O): stride_k = 1, stride_n = H (cpu::gemm's way).
      h.pb = cpu::pack_b_for_target<float>(H, O, panel, h.w.data(), 1, H, nullptr, nullptr,
                                           h.packed.data<float>());
    }
  }
  h.in.resize(m.capacity * m.N * I);
  h.out.resize(m.capacity * m.N * O);
  m.head = std::move(h);
}

int64_t GruStream::output_size() const {
  return impl_->out_size();
}

void GruStream::reset(const Tensor& h0) {
  const GruConfig& c = impl_->config;
  const int64_t L = c.num_layers, N = impl_->N, H = c.hidden_size;
  if (impl_->state.defined() && !h0.defined()) {  // no allocation, no threads
    std::memset(impl_->state.raw_data(), 0, impl_->state.numel() * dtype_size(impl_->dtype));
    impl_->steps = 0;
    if (impl_->fast) impl_->state_to_fast();
    return;
  }
  Tensor s = Tensor::zeros({L, N, H}, impl_->dtype);
  if (h0.defined()) {
    check_same_dtype("gru stream", "weights", s, "h0", h0);
    check_shape("gru stream", "h0", h0, impl_->unbatched ? Shape{L, H} : Shape{L, N, H});
    s.copy_from(impl_->unbatched ? h0.unsqueeze(1) : h0);
  }
  impl_->state = s;
  impl_->steps = 0;
  if (impl_->fast) impl_->state_to_fast();
}

Tensor GruStream::state() const {
  Tensor s = impl_->state.clone();
  if (impl_->fast) {  // the kernel's padded copy is the current one
    const int64_t H = impl_->config.hidden_size;
    for (int64_t l = 0; l < impl_->config.num_layers; ++l)
      std::memcpy(s.data<float>() + l * H, impl_->fast_h(l), H * sizeof(float));
  }
  return impl_->unbatched ? s.squeeze(1) : s;
}

namespace {
// The frames' layout, checked: one frame (N, I) — (I) unbatched — or a chunk (t, N, I) —
// (N, t, I) with batch_first, (t, I) unbatched. Real-time callers call this per frame, so it
// builds no tensors.
Frames frames_layout(const Tensor& f, const GruConfig& c, bool unbatched, int64_t N) {
  const int64_t I = c.input_size;
  const Shape& sh = f.shape();
  const Shape& st = f.strides();
  Frames r;
  bool ok = false;
  if (unbatched) {
    if (f.dim() == 1) r = {1, 0, 0, st[0], false}, ok = sh[0] == I;
    if (f.dim() == 2) r = {sh[0], st[0], 0, st[1], true}, ok = sh[1] == I;
  } else {
    if (f.dim() == 2) r = {1, 0, st[0], st[1], false}, ok = sh[0] == N && sh[1] == I;
    if (f.dim() == 3 && c.batch_first)
      r = {sh[1], st[1], st[0], st[2], true}, ok = sh[0] == N && sh[2] == I;
    if (f.dim() == 3 && !c.batch_first)
      r = {sh[0], st[0], st[1], st[2], true}, ok = sh[1] == N && sh[2] == I;
  }
  if (!ok || r.t < 1) {
    const std::string want = unbatched       ? fmt::format("({}) or (t, {})", I, I)
                             : c.batch_first ? fmt::format("({}, {}) or ({}, t, {})", N, I, N, I)
                                             : fmt::format("({}, {}) or (t, {}, {})", N, I, N, I);
    throw Error(fmt::format("gru stream: frames have shape {}, expected {} with t >= 1",
                            shape_str(sh), want));
  }
  return r;
}

// The output's shape for these frames, in the caller's layout (up to three sizes).
struct OutShape {
  int64_t size[3];
  int dim;
  bool matches(const Tensor& t) const {
    if (t.dim() != dim) return false;
    for (int i = 0; i < dim; ++i)
      if (t.shape()[i] != size[i]) return false;
    return true;
  }
  Shape shape() const { return Shape(size, size + dim); }
};
// H: the features of an output frame (the head's O when there is one).
OutShape out_shape(const Frames& f, const GruConfig& c, bool unbatched, int64_t N, int64_t H) {
  if (unbatched) return f.chunk ? OutShape{{f.t, H, 0}, 2} : OutShape{{H, 0, 0}, 1};
  if (!f.chunk) return {{N, H, 0}, 2};
  return c.batch_first ? OutShape{{N, f.t, H}, 3} : OutShape{{f.t, N, H}, 3};
}
}  // namespace

void GruStream::step_into(const Tensor& frames, Tensor& out) {
  // Real-time callers call this per frame: nothing here builds a Tensor or a shape.
  check_defined("gru stream", "frames", frames);
  check_same_dtype("gru stream", "weights", impl_->state, "frames", frames);
  const GruConfig& c = impl_->config;
  const Frames f = frames_layout(frames, c, impl_->unbatched, impl_->N);
  const OutShape want = out_shape(f, c, impl_->unbatched, impl_->N, impl_->out_size());
  check_defined("gru stream", "out", out);
  check_same_dtype("gru stream", "frames", frames, "out", out);
  if (!want.matches(out)) check_shape("gru stream", "out", out, want.shape());
  // Results go to out directly when its layout is time-major and contiguous; otherwise block
  // by block through `reorder`, then element by element into out's strides. With a head, each
  // block's frames are first gathered into rows (as process() reads them) and run as
  // process() runs them: the same bits.
  const bool direct = out.is_contiguous() && !(f.chunk && c.batch_first && !impl_->unbatched);
  const int64_t N = impl_->N, H = impl_->out_size(), I = c.input_size;
  // out's strides per (time, batch, unit), as the frames' are per (time, batch, feature).
  const Shape& os = out.strides();
  int64_t ot = 0, on = 0, oh = os[out.dim() - 1];
  if (impl_->unbatched) {
    ot = f.chunk ? os[0] : 0;
  } else if (!f.chunk) {
    on = os[0];
  } else {
    ot = c.batch_first ? os[1] : os[0], on = c.batch_first ? os[0] : os[1];
  }
  auto go = [&]<typename T>(T*) {
    const T* src = frames.data<T>();
    const bool head = sizeof(T) == 4 && impl_->head;
    if (direct && !head) return impl_->run<T>(src, f, out.data<T>());
    T* o = out.data<T>();
    T* tmp = head ? reinterpret_cast<T*>(impl_->head->out.data()) : impl_->reorder.data<T>();
    for (int64_t s0 = 0; s0 < f.t; s0 += impl_->capacity) {
      Frames b = f;
      b.t = std::min(impl_->capacity, f.t - s0);
      if constexpr (sizeof(T) == 4) {
        if (head) {
          float* x = impl_->head->in.data();
          for (int64_t s = 0; s < b.t; ++s)
            for (int64_t n = 0; n < N; ++n)
              for (int64_t i = 0; i < I; ++i)
                x[(s * N + n) * I + i] = src[(s0 + s) * f.st_t + n * f.st_n + i * f.st_i];
          impl_->run_head(x, direct ? o + s0 * N * H : tmp, b.t);
          if (direct) continue;
        }
      }
      if (!head) impl_->run_block<T>(src + s0 * f.st_t, b, tmp);
      for (int64_t s = 0; s < b.t; ++s)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t u = 0; u < H; ++u)
            o[(s0 + s) * ot + n * on + u * oh] = tmp[(s * N + n) * H + u];
    }
  };
  if (impl_->dtype == DType::f32)
    go(static_cast<float*>(nullptr));
  else
    go(static_cast<double*>(nullptr));
}

Tensor GruStream::step(const Tensor& frames) {
  check_defined("gru stream", "frames", frames);
  const GruConfig& c = impl_->config;
  const Frames f = frames_layout(frames, c, impl_->unbatched, impl_->N);
  Tensor out = Tensor::empty(out_shape(f, c, impl_->unbatched, impl_->N, impl_->out_size()).shape(),
                             impl_->dtype);
  step_into(frames, out);
  return out;
}

template <typename T>
void GruStream::process(const T* in, T* out, int64_t frames) {
  if (impl_->dtype != dtype_of<T>())
    throw Error(fmt::format("gru stream: process called with {} frames, the weights are {}",
                            dtype_name(dtype_of<T>()), dtype_name(impl_->dtype)));
  if (frames < 0) throw Error(fmt::format("gru stream: frames is {}, expected >= 0", frames));
  if (frames == 0) return;
  if (!in || !out) throw Error("gru stream: process given a null pointer for in or out");
  const int64_t N = impl_->N, I = impl_->config.input_size;
  if constexpr (sizeof(T) == 4) {
    if (impl_->head) return impl_->run_head(in, out, frames);
    if (impl_->fast) return impl_->run_fast(in, out, frames);
  }
  impl_->run<T>(in, Frames{frames, N * I, I, 1, true}, out);
}
template void GruStream::process<float>(const float*, float*, int64_t);
template void GruStream::process<double>(const double*, double*, int64_t);

}  // namespace grux
