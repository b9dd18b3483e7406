// Streaming GRU and LSTM: feed frames or chunks, keep the state between calls. One stream core
// (ops::StreamCore) for both cells: the frames' layout, the workspace sized once, the
// real-time kernels' path (cpu/gru_stream.h, cpu/lstm_stream.h) and the engine's (each chunk
// runs the same layer kernels as a whole-sequence forward, so results are bit-identical to
// it), the head and the state; the cell is a parameter of it. GruStream and LstmStream are
// its public faces.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "core/visibility.h"
#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "cpu/lstm_stream.h"
#include "grux/gru.h"
#include "grux/lstm.h"
#include "ops/gru_layer.h"
#include "ops/lstm_layer.h"

namespace grux {

namespace {
// Where a call's frames are: t frames of N x I, by element strides (time, batch, feature).
struct Frames {
  int64_t t = 0, st_t = 0, st_n = 0, st_i = 0;
  bool chunk = false;  // a time axis was given
};
}  // namespace

namespace ops {

// Everything a stream of either cell holds and does. The GRU's layers are in `gru`, the LSTM's
// in `lstm` (the other is empty).
struct GRUX_INTERNAL StreamCore {
  enum class Cell { gru, lstm };
  Cell cell = Cell::gru;
  const char* op = "gru stream";  // the messages' prefix
  // Copies of what the stream reads: no pointer to the model, which may move or go away.
  GruConfig gru_config;                // the GRU's form (the GRU's cell only)
  int64_t I = 0, H = 0, P = 0, L = 0;  // input, hidden, state (h) width, layers
  bool batch_first = false;
  DType dtype = DType::f32;
  int64_t N = 1;  // batch (1 internally when unbatched)
  bool unbatched = false;
  Tensor state;            // h: (L, N, P)
  Tensor cstate;           // the LSTM's c: (L, N, H); undefined for the GRU
  int64_t capacity = 0;    // frames the workspace holds: longer calls run in blocks of it
  std::vector<Tensor> hs;  // per layer (capacity * N, P): that layer's outputs
  Tensor xp, g, aux, gh;   // workspace (GRU: g, aux, gh; LSTM: g holds the gates, aux m)
  Tensor reorder;          // (capacity * N, P): outputs on their way to a strided `out`
  // Per layer, weights packed once at construction (one of them, by cell and dtype).
  std::vector<ops::PackedLayer<float>> gru_f32;
  std::vector<ops::PackedLayer<double>> gru_f64;
  std::vector<ops::LstmPackedLayer<float>> lstm_f32;
  std::vector<ops::LstmPackedLayer<double>> lstm_f64;
  template <typename T>
  const auto& gru_packed() const {
    if constexpr (sizeof(T) == 4)
      return gru_f32;
    else
      return gru_f64;
  }
  template <typename T>
  const auto& lstm_packed() const {
    if constexpr (sizeof(T) == 4)
      return lstm_f32;
    else
      return lstm_f64;
  }
  // The real-time kernels run f32 streams of one sequence, hidden sizes up to kFastMaxHidden
  // (an LSTM without a projection), on the calling thread; everything else runs the engine's
  // layer kernels.
  static constexpr int64_t kFastMaxHidden = cpu::kStreamMaxHidden;
  bool fast = false;
  std::vector<cpu::StreamLayer> fast_layers;
  hwy::AlignedFreeUniquePtr<float[]> fast_scratch;
  // Per layer: the state padded to the kernel's Hp (what the kernel reads and updates;
  // `state` only holds what reset() set), the kernel's second buffer and, for the LSTM, c.
  hwy::AlignedFreeUniquePtr<float[]> fast_state;
  // Frames since the state was set: the real-time kernel's step0, and the engine's (whose
  // recurrent products read the weights in an order that follows the step,
  // ops::gru_layer_forward).
  int64_t steps = 0;
  int64_t fast_stride() const { return (cell == Cell::lstm ? 3 : 2) * fast_layers[0].Hp; }
  float* fast_h(int64_t l) const { return fast_state.get() + l * fast_stride(); }
  float* fast_c(int64_t l) const { return fast_h(l) + 2 * fast_layers[0].Hp; }
  // state (and cstate) -> fast_state (fast path only).
  void state_to_fast() {
    std::memset(fast_state.get(), 0, L * fast_stride() * sizeof(float));
    for (int64_t l = 0; l < L; ++l) {
      std::memcpy(fast_h(l), state.data<float>() + l * P, P * sizeof(float));
      if (cell == Cell::lstm)
        std::memcpy(fast_c(l), cstate.data<float>() + l * H, H * sizeof(float));
    }
  }

  // The whole workspace, sized once at construction: up to kMaxBlock frames, fewer when a
  // frame's buffers are large (a block of about kBlockBytes at most). Blocks give the same
  // bits as one long chunk (every product is row-invariant), so any call is split into them
  // and no call allocates.
  static constexpr int64_t kMaxBlock = 512;
  static constexpr int64_t kBlockBytes = int64_t(8) << 20;
  static constexpr int64_t kFastBlockBytes = int64_t(64) << 10;
  int64_t gates() const { return cell == Cell::lstm ? 4 : 3; }
  void allocate_workspace() {
    if (fast) {
      // Blocks whose input projections (3 or 4 Hp floats a frame) fit in about 64 KiB.
      const int64_t Hp = fast_layers[0].Hp;
      capacity = std::clamp<int64_t>(kFastBlockBytes / (gates() * Hp * 4), 1, kMaxBlock);
      int64_t scratch = 0;
      for (const auto& fl : fast_layers)
        scratch = std::max(scratch, cell == Cell::lstm ? cpu::lstm_stream_scratch(fl, capacity)
                                                       : cpu::gru_stream_scratch(fl, capacity));
      fast_scratch = hwy::AllocateAligned<float>(static_cast<size_t>(scratch));
      fast_state = hwy::AllocateAligned<float>(static_cast<size_t>(L * fast_stride()));
      if (!fast_scratch || !fast_state)
        throw Error(fmt::format("{}: out of memory for the workspace", op));
      xp = Tensor::empty({capacity, I}, dtype);
      reorder = Tensor::empty({capacity, P}, dtype);
      hs.assign(L - 1, Tensor());  // the top layer writes the caller's output
      for (auto& h : hs) h = Tensor::empty({capacity, P}, dtype);
      one_top = {nullptr, P};  // h itself, until set_head
      one_layer = &fast_layers[L - 1], one_state = fast_h(L - 1), one_scratch = fast_scratch.get();
      return;
    }
    const int64_t G = gates() * H;
    const int64_t frame_bytes =
        N * (I + G + H + L * P + P) * static_cast<int64_t>(dtype_size(dtype));
    capacity = std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(frame_bytes, 1), 1, kMaxBlock);
    const int64_t rows = capacity * N;
    xp = Tensor::empty({rows, I}, dtype);
    g = Tensor::empty({rows, G}, dtype);
    if (cell == Cell::gru) {
      // Reset-before's second product reads r * h_prev from aux; linear-before-reset needs none.
      if (gru_config.form == GruForm::reset_before) aux = Tensor::empty({rows, H}, dtype);
      gh = Tensor::empty({N, G}, dtype);
    } else if (P != H) {
      aux = Tensor::empty({N, H}, dtype);  // the projection's m = o tanh(c) of a step
    }
    reorder = Tensor::empty({rows, P}, dtype);
    hs.assign(L, Tensor());
    for (auto& h : hs) h = Tensor::empty({rows, P}, dtype);
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
    std::vector<float> w, bias;  // (O, P) row-major, (O) or empty; w empty: no layer
    cpu::StreamHead fast{};      // the real-time kernel's copy of the layer
    Tensor packed;               // batch > 1: W^T packed once, as cpu::gemm packs it
    cpu::PackedB<float> pb{};
    int64_t block = 0;             // frames a block of the engine's path runs
    std::vector<float> model_out;  // (block, N, P): the model's outputs of a block
    std::vector<float> in, out;    // step_into's frames and outputs, capacity frames
  };
  std::optional<Head> head;
  int64_t out_size() const { return head ? head->O : P; }
  void run_head(const float* in, float* out, int64_t frames);
  void set_head(const GruStreamHead& head);

  void run_block_fast(const float* src, const Frames& f, float* out);
  void run_fast(const float* in, float* out, int64_t frames, const cpu::StreamHead* head = nullptr,
                bool residual = false);
  void run_layers_fast(const float* x, int64_t sx, int64_t t, const cpu::StreamOut& top);
  // t frames (rows of x, stride sx) through every layer below the top; x and sx then name the
  // last of those layers' output (unchanged for one layer).
  void run_lower_layers_fast(const float*& x, int64_t& sx, int64_t t) {
    for (int64_t l = 0; l + 1 < L; ++l) {
      float* dst = hs[l].data<float>();
      const cpu::StreamLayer& fl = fast_layers[l];
      fl.forward(fl, t, steps, x, sx, fast_h(l), {dst, P}, fast_scratch.get());
      x = dst, sx = P;
    }
  }
  // process()'s one-frame call (the real-time caller's): the layers' kernels and nothing else.
  // A call's instructions before the first layer's product wait behind the previous call's
  // last gates in the core's reorder window (cpu/stream_tiles-inl.h's StreamFrames), so each
  // delays the step. So the top layer's kernel, state and scratch are at hand (one load each,
  // not a chain of them before the state's load can start), and its output as the head
  // (set_head) has it, p and res filled per call (res with one_residual): the LSTM at H 8 with
  // a head on AVX2 takes about 66 ns a call here, 68 through the blocks' path, 50 with its
  // kernel called directly (where the rest goes is not known).
  cpu::StreamOut one_top{};
  bool one_residual = false;
  const cpu::StreamLayer* one_layer = nullptr;
  float* one_state = nullptr;
  float* one_scratch = nullptr;
  void run_one_frame(const float* in, float* out) {
    const float* x = in;
    int64_t sx = I;
    run_lower_layers_fast(x, sx, 1);
    cpu::StreamOut top = one_top;
    top.p = out;
    if (one_residual) top.res = in;
    one_layer->forward(*one_layer, 1, steps, x, sx, one_state, top, one_scratch);
    ++steps;
  }
  // The threads that run the frames when threads > 1 was asked for: a team the stream owns,
  // started at construction, whose workers spin between frames (ThreadTeam::Idle::spin).
  // Without it (inside an OpenMP region, or in a child process forked after the stream was
  // made, where the workers do not exist) the caller runs the frames alone: the same bits.
  std::unique_ptr<ThreadTeam> team;
  ThreadTeam* frame_team() const {
    return team && team->usable() && !omp_in_parallel() ? team.get() : nullptr;
  }
  // The team for `threads` (after H and dtype are set): no more members than units of work
  // per step, nor than cores; none for 0 or 1.
  void make_team(int threads) {
    if (threads <= 1) return;
    const int64_t unit = dtype == DType::f32 ? cpu::kUnit<float> : cpu::kUnit<double>;
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const int size = std::min({threads, hw, ops::layer_team_size(H, unit)});
    if (size > 1) team = std::make_unique<ThreadTeam>(size, ThreadTeam::Idle::spin);
  }

  // Runs the frames in blocks of at most `capacity`; out (f.t, N, P) time-major, contiguous.
  template <typename T>
  void run(const T* src, const Frames& f, T* out) {
    for (int64_t s0 = 0; s0 < f.t; s0 += capacity) {
      Frames b = f;
      b.t = std::min(capacity, f.t - s0);
      run_block<T>(src + s0 * f.st_t, b, out + s0 * N * P);
    }
  }

  template <typename T>
  void run_block(const T* src, const Frames& f, T* out) {
    if constexpr (sizeof(T) == 4) {
      if (fast) return run_block_fast(src, f, out);
    }
    const int64_t t = f.t, rows = t * N;
    set_block_length(t);
    // Layer 0 input, packed time-major (row s * N + n).
    T* xpd = xp.data<T>();
    const int64_t st0 = f.st_t, st1 = f.st_n, st2 = f.st_i;
    for (int64_t s = 0; s < t; ++s)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < I; ++i) xpd[(s * N + n) * I + i] = src[s * st0 + n * st1 + i * st2];
    const T* layer_in = xpd;
    ThreadTeam* frames_team = frame_team();
    for (int64_t l = 0; l < L; ++l) {
      T* st = state.data<T>() + l * N * P;
      T* h = hs[l].data<T>();
      if (cell == Cell::gru) {
        ops::gru_layer_forward<T>(ops::gru_kernels<T>(), gru_packed<T>()[l], lay, layer_in, st,
                                  g.data<T>(), aux.defined() ? aux.data<T>() : nullptr, h,
                                  gh.data<T>(), frames_team, frames_team ? frames_team->size() : 1,
                                  nullptr, steps);
      } else {
        // c is updated in place, one row a sequence (every sequence has the block's length).
        ops::lstm_layer_forward<T>(ops::lstm_kernels<T>(), lstm_packed<T>()[l], lay, layer_in, st,
                                   g.data<T>(), h, cstate.data<T>() + l * N * H,
                                   aux.defined() ? aux.data<T>() : nullptr, false, frames_team,
                                   frames_team ? frames_team->size() : 1, nullptr, steps);
      }
      std::memcpy(st, h + (rows - N) * P, N * P * sizeof(T));
      layer_in = h;
    }
    std::memcpy(out, layer_in, rows * P * sizeof(T));
    steps += t;
  }

  void reset(const Tensor& h0, const Tensor& c0);
  Tensor state_copy() const;
  Tensor cell_state_copy() const;
  void step_into(const Tensor& frames, Tensor& out);
  Tensor step(const Tensor& frames);
  template <typename T>
  void process(const T* in, T* out, int64_t frames);
};

// The real-time kernel: t <= capacity frames (rows of x, stride sx) through every layer, the
// top layer writing `top`.
[[gnu::always_inline]] inline void StreamCore::run_layers_fast(const float* x, int64_t sx,
                                                               int64_t t,
                                                               const cpu::StreamOut& top) {
  run_lower_layers_fast(x, sx, t);
  const cpu::StreamLayer& top_layer = fast_layers[L - 1];
  top_layer.forward(top_layer, t, steps, x, sx, fast_h(L - 1), top, fast_scratch.get());
  steps += t;
}

// process()'s path: contiguous frames, in blocks of the workspace, nothing else per call;
// with the head (and residual) applied in the top layer's steps.
[[gnu::always_inline]] inline void StreamCore::run_fast(const float* in, float* out, int64_t frames,
                                                        const cpu::StreamHead* hd, bool residual) {
  const int64_t O = hd ? hd->O : P;
  for (int64_t s0 = 0; s0 < frames; s0 += capacity) {
    const cpu::StreamOut top{out + s0 * O, O, hd, residual ? in + s0 * I : nullptr, I};
    run_layers_fast(in + s0 * I, I, std::min(capacity, frames - s0), top);
  }
}

// A block of step_into()'s frames, whose features may be strided; out (t, P) contiguous.
void StreamCore::run_block_fast(const float* src, const Frames& f, float* out) {
  const int64_t t = f.t;
  const cpu::StreamOut top{out, P};
  if (f.st_i == 1) return run_layers_fast(src, f.st_t, t, top);
  float* xpd = xp.data<float>();  // strided features: gathered into rows
  for (int64_t s = 0; s < t; ++s)
    for (int64_t i = 0; i < I; ++i) xpd[s * I + i] = src[s * f.st_t + i * f.st_i];
  run_layers_fast(xpd, I, t, top);
}

// process()'s path with a head: in (frames, N, I), out (frames, N, O), both contiguous.
[[gnu::always_inline]] inline void StreamCore::run_head(const float* in, float* out,
                                                        int64_t frames) {
  Head& h = *head;
  const int64_t O = h.O;
  if (fast) return run_fast(in, out, frames, h.w.empty() ? nullptr : &h.fast, h.residual);
  if (h.w.empty()) {  // the model's outputs are the stream's, plus the frames
    run<float>(in, Frames{frames, N * I, I, 1, true}, out);
    for (int64_t i = 0; i < frames * N * O; ++i) out[i] = in[i] + out[i];
    return;
  }
  const float* bias = h.bias.empty() ? nullptr : h.bias.data();
  float* y = h.model_out.data();
  for (int64_t f0 = 0; f0 < frames; f0 += h.block) {
    const int64_t f = std::min(h.block, frames - f0), rows = f * N;
    const float* x = in + f0 * N * I;
    float* o = out + f0 * N * O;
    run<float>(x, Frames{f, N * I, I, 1, true}, y);
    // For one sequence, dot products of the head's rows (its own multiply-adds, nothing more);
    // for a batch, linear_forward's product (cpu::gemm packs W^T the same way, then runs this
    // kernel).
    if (N == 1)
      cpu::dense_rows(f, P, O, y, P, h.w.data(), bias, o, O, false);
    else
      cpu::gemm_packed<float>(rows, y, P, false, h.pb, bias, false, o, O, 0, h.pb.panels());
    if (h.residual)
      for (int64_t i = 0; i < rows * O; ++i) o[i] = x[i] + o[i];
  }
}

namespace {
std::vector<float> floats_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}
}  // namespace

void StreamCore::set_head(const GruStreamHead& hd) {
  if (dtype != DType::f32)
    throw Error(
        fmt::format("{}: a head needs an f32 stream, this one is {}", op, dtype_name(dtype)));
  int64_t O = P;
  if (hd.weight.defined()) {
    const Tensor& w = hd.weight;
    if (w.dtype() != DType::f32)
      throw Error(fmt::format("{}: head weight is {}, expected f32", op, dtype_name(w.dtype())));
    if (w.dim() != 2 || w.size(1) != P || w.size(0) < 1)
      throw Error(fmt::format("{}: head weight has shape {}, expected (O, {})", op,
                              shape_str(w.shape()), P));
    O = w.size(0);
  }
  if (hd.bias.defined()) {
    if (!hd.weight.defined())
      throw Error(
          fmt::format("{}: a head bias without a head weight (expected both, or neither)", op));
    if (hd.bias.dtype() != DType::f32)
      throw Error(
          fmt::format("{}: head bias is {}, expected f32", op, dtype_name(hd.bias.dtype())));
    check_shape(op, "head bias", hd.bias, Shape{O});
  }
  if (hd.residual && O != I)
    throw Error(
        fmt::format("{}: a residual head adds the input to the output, but the "
                    "input has {} features and the output {}",
                    op, I, O));
  // Built aside, then moved in: a failed set_head leaves the stream as it was.
  Head h;
  h.O = O;
  h.residual = hd.residual;
  if (hd.weight.defined()) h.w = floats_of(hd.weight);
  if (hd.bias.defined()) h.bias = floats_of(hd.bias);
  if (fast) {
    if (!h.w.empty())
      h.fast = cpu::gru_stream_pack_head(O, P, h.w.data(), h.bias.empty() ? nullptr : h.bias.data(),
                                         fast_layers[0].V);
  } else if (!h.w.empty()) {
    // Blocks of about 256 KiB of model outputs: the head's product over a block stays in cache.
    h.block = std::clamp<int64_t>((int64_t(1) << 16) / (N * P), 1, 512);
    h.model_out.resize(h.block * N * P);
    if (N > 1) {  // one sequence runs dot products of the head's rows instead
      const int64_t panel = cpu::gemm_panel_width<float>(O);
      h.packed = Tensor::empty({cpu::packed_size<float>(P, O, panel)}, DType::f32);
      // W (O x P) row-major used as W^T (P x O): stride_k = 1, stride_n = P (cpu::gemm's way).
      h.pb = cpu::pack_b_for_target<float>(P, O, panel, h.w.data(), 1, P, nullptr, nullptr,
                                           h.packed.data<float>());
    }
  }
  h.in.resize(capacity * N * I);
  h.out.resize(capacity * N * O);
  head = std::move(h);
  one_top = {nullptr, O, head->w.empty() ? nullptr : &head->fast, nullptr, I};
  one_residual = head->residual;
}

void StreamCore::reset(const Tensor& h0, const Tensor& c0) {
  const bool lstm = cell == Cell::lstm;
  if (state.defined() && !h0.defined() && !c0.defined()) {  // no allocation, no threads
    std::memset(state.raw_data(), 0, state.numel() * dtype_size(dtype));
    if (lstm) std::memset(cstate.raw_data(), 0, cstate.numel() * dtype_size(dtype));
    steps = 0;
    if (fast) state_to_fast();
    return;
  }
  // States given in the stream's own layout are copied in place, allocating nothing (a model's
  // stored initial state, restored by ModelStream::reset on the audio thread).
  const auto fits = [&](const Tensor& t, int64_t width) {  // compared without making a Shape
    if (!t.defined()) return true;
    const Shape& s = t.shape();
    const bool shape = unbatched ? s.size() == 2 && s[0] == L && s[1] == width
                                 : s.size() == 3 && s[0] == L && s[1] == N && s[2] == width;
    return shape && t.dtype() == dtype && t.is_contiguous() && t.device() == Device::cpu();
  };
  if (state.defined() && fits(h0, P) && (!lstm || fits(c0, H)) && (lstm || !c0.defined())) {
    const auto put = [&](Tensor& s, const Tensor& given) {
      const size_t bytes = s.numel() * dtype_size(dtype);
      if (given.defined())
        std::memcpy(s.raw_data(), given.raw_data(), bytes);
      else
        std::memset(s.raw_data(), 0, bytes);
    };
    put(state, h0);
    if (lstm) put(cstate, c0);
    steps = 0;
    if (fast) state_to_fast();
    return;
  }
  // Checked before anything changes: a failed reset leaves the stream as it was.
  const auto initial = [&](const char* name, const Tensor& given, int64_t width) {
    Tensor s = Tensor::zeros({L, N, width}, dtype);
    if (given.defined()) {
      check_same_dtype(op, "weights", s, name, given);
      check_shape(op, name, given, unbatched ? Shape{L, width} : Shape{L, N, width});
      s.copy_from(unbatched ? given.unsqueeze(1) : given);
    }
    return s;
  };
  Tensor h = initial("h0", h0, P);
  Tensor c = lstm ? initial("c0", c0, H) : Tensor();
  state = h;
  cstate = c;
  steps = 0;
  if (fast) state_to_fast();
}

Tensor StreamCore::state_copy() const {
  Tensor s = state.clone();
  if (fast)  // the kernel's padded copy is the current one
    for (int64_t l = 0; l < L; ++l)
      std::memcpy(s.data<float>() + l * P, fast_h(l), P * sizeof(float));
  return unbatched ? s.squeeze(1) : s;
}

Tensor StreamCore::cell_state_copy() const {
  Tensor s = cstate.clone();
  if (fast)
    for (int64_t l = 0; l < L; ++l)
      std::memcpy(s.data<float>() + l * H, fast_c(l), H * sizeof(float));
  return unbatched ? s.squeeze(1) : s;
}

namespace {
// The frames' layout, checked: one frame (N, I) — (I) unbatched — or a chunk (t, N, I) —
// (N, t, I) with batch_first, (t, I) unbatched. Real-time callers call this per frame, so it
// builds no tensors.
Frames frames_layout(const StreamCore& m, const Tensor& f) {
  const int64_t I = m.I, N = m.N;
  const Shape& sh = f.shape();
  const Shape& st = f.strides();
  Frames r;
  bool ok = false;
  if (m.unbatched) {
    if (f.dim() == 1) r = {1, 0, 0, st[0], false}, ok = sh[0] == I;
    if (f.dim() == 2) r = {sh[0], st[0], 0, st[1], true}, ok = sh[1] == I;
  } else {
    if (f.dim() == 2) r = {1, 0, st[0], st[1], false}, ok = sh[0] == N && sh[1] == I;
    if (f.dim() == 3 && m.batch_first)
      r = {sh[1], st[1], st[0], st[2], true}, ok = sh[0] == N && sh[2] == I;
    if (f.dim() == 3 && !m.batch_first)
      r = {sh[0], st[0], st[1], st[2], true}, ok = sh[1] == N && sh[2] == I;
  }
  if (!ok || r.t < 1) {
    const std::string want = m.unbatched     ? fmt::format("({}) or (t, {})", I, I)
                             : m.batch_first ? fmt::format("({}, {}) or ({}, t, {})", N, I, N, I)
                                             : fmt::format("({}, {}) or (t, {}, {})", N, I, N, I);
    throw Error(fmt::format("{}: frames have shape {}, expected {} with t >= 1", m.op,
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
OutShape out_shape(const StreamCore& m, const Frames& f) {
  const int64_t O = m.out_size(), N = m.N;
  if (m.unbatched) return f.chunk ? OutShape{{f.t, O, 0}, 2} : OutShape{{O, 0, 0}, 1};
  if (!f.chunk) return {{N, O, 0}, 2};
  return m.batch_first ? OutShape{{N, f.t, O}, 3} : OutShape{{f.t, N, O}, 3};
}
}  // namespace

void StreamCore::step_into(const Tensor& frames, Tensor& out) {
  // Real-time callers call this per frame: nothing here builds a Tensor or a shape.
  check_defined(op, "frames", frames);
  check_same_dtype(op, "weights", state, "frames", frames);
  const Frames f = frames_layout(*this, frames);
  const OutShape want = out_shape(*this, f);
  check_defined(op, "out", out);
  check_same_dtype(op, "frames", frames, "out", out);
  if (!want.matches(out)) check_shape(op, "out", out, want.shape());
  // Results go to out directly when its layout is time-major and contiguous; otherwise block
  // by block through `reorder`, then element by element into out's strides. With a head, each
  // block's frames are first gathered into rows (as process() reads them) and run as
  // process() runs them: the same bits.
  const bool direct = out.is_contiguous() && !(f.chunk && batch_first && !unbatched);
  const int64_t O = out_size();
  // out's strides per (time, batch, unit), as the frames' are per (time, batch, feature).
  const Shape& os = out.strides();
  int64_t ot = 0, on = 0, oh = os[out.dim() - 1];
  if (unbatched) {
    ot = f.chunk ? os[0] : 0;
  } else if (!f.chunk) {
    on = os[0];
  } else {
    ot = batch_first ? os[1] : os[0], on = batch_first ? os[0] : os[1];
  }
  auto go = [&]<typename T>(T*) {
    const T* src = frames.data<T>();
    const bool with_head = sizeof(T) == 4 && head;
    if (direct && !with_head) return run<T>(src, f, out.data<T>());
    T* o = out.data<T>();
    T* tmp = with_head ? reinterpret_cast<T*>(head->out.data()) : reorder.data<T>();
    for (int64_t s0 = 0; s0 < f.t; s0 += capacity) {
      Frames b = f;
      b.t = std::min(capacity, f.t - s0);
      if constexpr (sizeof(T) == 4) {
        if (with_head) {
          float* x = head->in.data();
          for (int64_t s = 0; s < b.t; ++s)
            for (int64_t n = 0; n < N; ++n)
              for (int64_t i = 0; i < I; ++i)
                x[(s * N + n) * I + i] = src[(s0 + s) * f.st_t + n * f.st_n + i * f.st_i];
          run_head(x, direct ? o + s0 * N * O : tmp, b.t);
          if (direct) continue;
        }
      }
      if (!with_head) run_block<T>(src + s0 * f.st_t, b, tmp);
      for (int64_t s = 0; s < b.t; ++s)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t u = 0; u < O; ++u)
            o[(s0 + s) * ot + n * on + u * oh] = tmp[(s * N + n) * O + u];
    }
  };
  if (dtype == DType::f32)
    go(static_cast<float*>(nullptr));
  else
    go(static_cast<double*>(nullptr));
}

Tensor StreamCore::step(const Tensor& frames) {
  check_defined(op, "frames", frames);
  Tensor out = Tensor::empty(out_shape(*this, frames_layout(*this, frames)).shape(), dtype);
  step_into(frames, out);
  return out;
}

template <typename T>
void StreamCore::process(const T* in, T* out, int64_t frames) {
  if (dtype != dtype_of<T>())
    throw Error(fmt::format("{}: process called with {} frames, the weights are {}", op,
                            dtype_name(dtype_of<T>()), dtype_name(dtype)));
  if (frames < 0) throw Error(fmt::format("{}: frames is {}, expected >= 0", op, frames));
  if (frames == 0) return;
  if (!in || !out) throw Error(fmt::format("{}: process given a null pointer for in or out", op));
  if constexpr (sizeof(T) == 4) {
    if (fast && frames == 1) return run_one_frame(in, out);
    if (head) return run_head(in, out, frames);
    if (fast) return run_fast(in, out, frames);
  }
  run<T>(in, Frames{frames, N * I, I, 1, true}, out);
}

namespace {
// The checks every stream makes of its construction arguments.
void check_stream_args(const char* op, const char* model, bool bidirectional, int64_t batch,
                       int threads) {
  if (bidirectional)
    throw Error(fmt::format(
        "{}: a bidirectional {} cannot stream (the reverse direction needs the whole sequence)", op,
        model));
  if (batch < 0)
    throw Error(fmt::format("{}: batch is {}, expected >= 1 or 0 for unbatched", op, batch));
  if (threads < 0)
    throw Error(fmt::format("{}: threads is {}, expected >= 0 (0 or 1: the calling thread only)",
                            op, threads));
}
}  // namespace

}  // namespace ops

// ---- GruStream ---------------------------------------------------------------------------

// Hidden: the class it belongs to is exported, its implementation is not (test_package.sh).
struct GRUX_INTERNAL GruStream::Impl : ops::StreamCore {};

GruStream::GruStream(const Gru& gru, int64_t batch, const Tensor& h0, Precision precision,
                     int threads)
    : impl_(new Impl) {
  ops::check_precision("gru stream", gru.dtype(), precision);
  ops::check_stream_args("gru stream", "GRU", gru.config().bidirectional, batch, threads);
  Impl& m = *impl_;
  const GruConfig& c = gru.config();
  m.cell = ops::StreamCore::Cell::gru;
  m.op = "gru stream";
  m.gru_config = c;
  m.I = c.input_size, m.H = m.P = c.hidden_size, m.L = c.num_layers;
  m.batch_first = c.batch_first;
  m.dtype = gru.dtype();
  m.unbatched = batch == 0;
  m.N = batch == 0 ? 1 : batch;
  m.fast = gru.dtype() == DType::f32 && precision == Precision::f32 && m.N == 1 && threads <= 1 &&
           c.hidden_size <= ops::StreamCore::kFastMaxHidden;
  m.make_team(threads);
  const bool rb = c.form == GruForm::reset_before;
  for (const GruLayerWeights& w : gru.weights()) {
    if (m.fast)
      m.fast_layers.push_back(
          cpu::gru_stream_pack(w.w_ih.size(1), w.w_hh.size(1), rb,
                               w.w_ih.contiguous().data<float>(), w.w_hh.contiguous().data<float>(),
                               w.b_ih.defined() ? w.b_ih.contiguous().data<float>() : nullptr,
                               w.b_hh.defined() ? w.b_hh.contiguous().data<float>() : nullptr));
    else if (gru.dtype() == DType::f32)
      m.gru_f32.push_back(ops::pack_layer<float>(w, c.form, false, precision));
    else
      m.gru_f64.push_back(ops::pack_layer<double>(w, c.form, false, precision));
  }
  m.allocate_workspace();
  m.reset(h0, {});
}

GruStream::~GruStream() = default;
GruStream::GruStream(GruStream&&) noexcept = default;
GruStream& GruStream::operator=(GruStream&&) noexcept = default;
void GruStream::set_head(const GruStreamHead& head) {
  impl_->set_head(head);
}
int64_t GruStream::output_size() const {
  return impl_->out_size();
}
void GruStream::reset(const Tensor& h0) {
  impl_->reset(h0, {});
}
Tensor GruStream::state() const {
  return impl_->state_copy();
}
void GruStream::step_into(const Tensor& frames, Tensor& out) {
  impl_->step_into(frames, out);
}
Tensor GruStream::step(const Tensor& frames) {
  return impl_->step(frames);
}
template <typename T>
void GruStream::process(const T* in, T* out, int64_t frames) {
  impl_->process<T>(in, out, frames);
}
template void GruStream::process<float>(const float*, float*, int64_t);
template void GruStream::process<double>(const double*, double*, int64_t);

// ---- LstmStream --------------------------------------------------------------------------

struct GRUX_INTERNAL LstmStream::Impl : ops::StreamCore {};

LstmStream::LstmStream(const Lstm& lstm, int64_t batch, const Tensor& h0, const Tensor& c0,
                       int threads)
    : LstmStream(lstm, batch, h0, c0, Precision::f32, threads) {}

LstmStream::LstmStream(const Lstm& lstm, int64_t batch, const Tensor& h0, const Tensor& c0,
                       Precision precision, int threads)
    : impl_(new Impl) {
  const LstmConfig& c = lstm.config();
  ops::check_precision("lstm stream", lstm.dtype(), precision, "LSTM");
  ops::check_stream_args("lstm stream", "LSTM", c.bidirectional, batch, threads);
  Impl& m = *impl_;
  m.cell = ops::StreamCore::Cell::lstm;
  m.op = "lstm stream";
  m.I = c.input_size, m.H = c.hidden_size, m.P = c.output_size(), m.L = c.num_layers;
  m.batch_first = c.batch_first;
  m.dtype = lstm.dtype();
  m.unbatched = batch == 0;
  m.N = batch == 0 ? 1 : batch;
  m.fast = lstm.dtype() == DType::f32 && precision == Precision::f32 && m.N == 1 && threads <= 1 &&
           c.proj_size == 0 && c.hidden_size <= ops::StreamCore::kFastMaxHidden;
  m.make_team(threads);
  for (const LstmLayerWeights& w : lstm.weights()) {
    if (m.fast)
      m.fast_layers.push_back(
          cpu::lstm_stream_pack(w.w_ih.size(1), c.hidden_size, w.w_ih.contiguous().data<float>(),
                                w.w_hh.contiguous().data<float>(),
                                w.b_ih.defined() ? w.b_ih.contiguous().data<float>() : nullptr,
                                w.b_hh.defined() ? w.b_hh.contiguous().data<float>() : nullptr));
    else if (lstm.dtype() == DType::f32)
      m.lstm_f32.push_back(ops::pack_lstm_layer<float>(w, false, precision));
    else
      m.lstm_f64.push_back(ops::pack_lstm_layer<double>(w, false));
  }
  m.allocate_workspace();
  m.reset(h0, c0);
}

LstmStream::~LstmStream() = default;
LstmStream::LstmStream(LstmStream&&) noexcept = default;
LstmStream& LstmStream::operator=(LstmStream&&) noexcept = default;
void LstmStream::set_head(const GruStreamHead& head) {
  impl_->set_head(head);
}
int64_t LstmStream::output_size() const {
  return impl_->out_size();
}
void LstmStream::reset(const Tensor& h0, const Tensor& c0) {
  impl_->reset(h0, c0);
}
Tensor LstmStream::state() const {
  return impl_->state_copy();
}
Tensor LstmStream::cell_state() const {
  return impl_->cell_state_copy();
}
void LstmStream::step_into(const Tensor& frames, Tensor& out) {
  impl_->step_into(frames, out);
}
Tensor LstmStream::step(const Tensor& frames) {
  return impl_->step(frames);
}
template <typename T>
void LstmStream::process(const T* in, T* out, int64_t frames) {
  impl_->process<T>(in, out, frames);
}
template void LstmStream::process<float>(const float*, float*, int64_t);
template void LstmStream::process<double>(const double*, double*, int64_t);

}  // namespace grux
