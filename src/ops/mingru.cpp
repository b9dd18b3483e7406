// The minGRU stack driver (Feng et al. 2024, "Were RNNs All We Needed?"): validates a
// problem, then per layer runs one GEMM for both projections of all T*N rows, a fused
// pointwise pass to the scan coefficients, and a scan over time; backward mirrors it with a
// reverse scan. Also weights I/O by state_dict keys.
//
// Sizes: T steps, N batch, I input, H hidden, L layers; rows = T * N (time-major, row
// r = t * N + n); C = N * H channels of the time scan (one sequence of T steps).
#include "grux/mingru.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <regex>

#include "cpu/elementwise.h"
#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/mingru_gates.h"
#include "cpu/ref/gemm_ref.h"
#include "cpu/ref/mingru_gates_ref.h"
#include "cpu/ref/scan_ref.h"
#include "cpu/scan.h"
#include "grux/runtime.h"
#include "ops/mingru_internal.h"
#include "ops/recurrent.h"
#include "ops/threads_option.h"

namespace grux {

int64_t MinGruConfig::layer_input_size(int64_t layer) const {
  return layer == 0 ? input_size : hidden_size;
}

void MinGruConfig::validate() const {
  if (input_size < 1)
    throw Error(fmt::format("mingru: input_size is {}, expected >= 1", input_size));
  if (hidden_size < 1)
    throw Error(fmt::format("mingru: hidden_size is {}, expected >= 1", hidden_size));
  if (num_layers < 1)
    throw Error(fmt::format("mingru: num_layers is {}, expected >= 1", num_layers));
}

MinGruProblem MinGruProblem::parse(const std::string& text) {
  const ops::SeqDescriptor d =
      ops::parse_seq_descriptor(text, "minGRU problem descriptor",
                                "l{L}t{T}n{N}i{I}h{H}, e.g. l2t4096n8i256h256; l may be omitted", 1,
                                "minGRU is unidirectional: d1 or no d");
  MinGruProblem p;
  p.num_layers = d.L, p.T = d.T, p.N = d.N, p.input_size = d.I, p.hidden_size = d.H;
  return p;
}

std::string MinGruProblem::descriptor() const {
  return fmt::format("l{}t{}n{}i{}h{}", num_layers, T, N, input_size, hidden_size);
}

std::string mingru_key(const char* what, int64_t layer) {
  return fmt::format("{}_l{}", what, layer);
}

MinGruTape::MinGruTape() = default;
MinGruTape::~MinGruTape() = default;
MinGruTape::MinGruTape(MinGruTape&&) noexcept = default;
MinGruTape& MinGruTape::operator=(MinGruTape&&) noexcept = default;
bool MinGruTape::empty() const {
  return data_ == nullptr;
}

// What backward needs from forward_train.
struct MinGruTapeData {
  int64_t T = 0, N = 0;
  std::vector<int64_t> len;  // empty: all T
  bool unbatched = false;
  DType dtype = DType::f32;
  Shape h0_shape;              // of the caller's h0 (h_n's shape when no h0 was given)
  std::vector<Tensor> inputs;  // per layer, (rows, in_k) contiguous
  std::vector<Tensor> k;       // per layer, (rows, 2H): x W^T without bias
  std::vector<Tensor> states;  // per layer, (rows, H): h_t, 0 on padding
  std::vector<Tensor> h0;      // per layer, (N, H) linear initial state; undefined: zeros
  Tensor h0_raw;               // (L, N, H) as given, for g'(h0) in log space; or undefined
};

namespace {

// ---- Weights -------------------------------------------------------------------------

void check_layer_weights(const MinGruConfig& c, DType dtype, const MinGruLayerWeights& w,
                         int64_t l) {
  const int64_t H = c.hidden_size;
  ops::check_weight("mingru", mingru_key("weight", l), w.weight, {2 * H, c.layer_input_size(l)},
                    dtype);
  if (c.bias)
    ops::check_weight("mingru", mingru_key("bias", l), w.bias, {2 * H}, dtype);
  else if (w.bias.defined())
    throw Error(fmt::format("mingru: layer {} has a bias but bias is false", l));
}

// ---- Problem normalization -----------------------------------------------------------

using Problem = ops::SeqInput;  // len: empty also when every length is T

ops::SeqSpec seq_spec(const MinGruConfig& c, DType dtype) {
  return {"mingru", c.input_size, c.hidden_size, c.num_layers, c.batch_first, dtype};
}

Problem normalize(const MinGruConfig& c, DType dtype, const Tensor& input, const Tensor& h0,
                  const Tensor& lengths) {
  Problem p = ops::normalize_input(seq_spec(c, dtype), input, h0, lengths);
  const int64_t T = p.x.size(0);
  // No padding: the kernels skip the per-row test.
  if (std::all_of(p.len.begin(), p.len.end(), [T](int64_t n) { return n == T; })) p.len.clear();
  return p;
}

using ops::to_caller_layout;

// ---- Kernels -----------------------------------------------------------------------------

// The kernels of one call: optimized, or the reference twins when the switch is on.
template <typename T>
struct Kernels {
  bool ref = reference_kernels();
  int threads = omp_get_max_threads();

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
            int64_t ldb, T* C, int64_t ldc) const {
    (ref ? cpu::ref::gemm<T> : cpu::gemm<T>)(ta, tb, M, N, K, A, lda, B, ldb, nullptr, false, C,
                                             ldc);
  }
  // h (1, T, C) = the scan of h_t = a_t h_{t-1} + b_t (reverse: h_t = a_t h_{t+1} + b_t) on
  // `team` threads (1: the calling thread alone, straight through time).
  void scan(const T* a, const T* b, const T* h0, T* h, int64_t Tn, int64_t C, bool reverse,
            int team) const {
    if (ref)
      cpu::ref::affine_scan_diag<T>(a, b, h0, h, 1, Tn, C, reverse);
    else
      cpu::affine_scan_diag<T>(a, b, h0, h, 1, Tn, C, walk(reverse, team));
  }
  void log_scan(const T* la, const T* lb, const T* lh0, T* lh, int64_t Tn, int64_t C,
                int team) const {
    if (ref)
      cpu::ref::log_affine_scan_diag<T>(la, lb, lh0, lh, 1, Tn, C, false);
    else
      cpu::log_affine_scan_diag<T>(la, lb, lh0, lh, 1, Tn, C, walk(false, team));
  }
  static cpu::ScanWalk walk(bool reverse, int team) {
    return {false, reverse, team, team == 1 ? cpu::TimeSplit::never : cpu::TimeSplit::automatic};
  }
  // Waking a team costs microseconds (far more on a busy machine): small problems run on one.
  int team_for(int64_t elements) const { return elements >= (1 << 15) ? threads : 1; }
  // Runs fn(r0, r1) over rows [0, rows) in blocks shared by the threads.
  template <typename Fn>
  void for_rows(int64_t rows, int64_t H, Fn fn) const {
    const int64_t block = std::max<int64_t>(1, 8192 / H);
    const int64_t blocks = (rows + block - 1) / block;
    const int team = team_for(rows * H);
#pragma omp parallel for schedule(static) num_threads(team) if (blocks > 1 && team > 1)
    for (int64_t i = 0; i < blocks; ++i) fn(i * block, std::min(rows, (i + 1) * block));
  }
  void coeffs(bool log_space, int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
              const int64_t* len, const T* kp, const T* bias, T* a, T* b) const {
    if (log_space)
      (ref ? cpu::ref::mingru_forward_log_coeffs<T>
           : cpu::mingru_forward_log_coeffs<T>)(r0, r1, t0, N, H, len, kp, bias, a, b);
    else
      (ref ? cpu::ref::mingru_forward_coeffs<T>
           : cpu::mingru_forward_coeffs<T>)(r0, r1, t0, N, H, len, kp, bias, a, b);
  }
};

// The state before t = 0 in linear space: g(h0) in log space (g(0) = 0.5 without h0).
template <typename T>
T g_of(T v) {
  return v >= 0 ? v + T(0.5) : T(1) / (T(1) + std::exp(-v));
}
template <typename T>
T dg_of(T v) {
  const T s = T(1) / (T(1) + std::exp(-v));
  return v >= 0 ? T(1) : s * (T(1) - s);
}

// ---- Forward -------------------------------------------------------------------------

std::atomic<int64_t> g_chunk_bytes{0};

// Panel width of the split forward's packed weights: two SIMD units (a share's 2u columns
// are a whole number of panels except at H's tail).
template <typename T>
constexpr int64_t kPanel = 2 * cpu::kUnit<T>;

// One layer, every row at once: one GEMM for both projections of all T*N rows, the
// coefficients, then the scan over time of all N*H channels (the scan kernel splits time
// over the threads when there are few channels). Used when training (backward reads the
// projections k, rows x 2H) and when H is too small to share among the threads.
//   x (rows x in), h0l (N x H: h0, or log h0 in log space; null: zeros), k (rows x 2H),
//   a, b (rows x H) scratch, out (rows x H).
template <typename T>
void layer_forward_whole(const Kernels<T>& kn, const MinGruConfig& c, const T* x, int64_t in,
                         const MinGruLayerWeights& w, const int64_t* len, int64_t T_, int64_t N,
                         const T* h0l, T* k, T* a, T* b, T* out) {
  const int64_t H = c.hidden_size, rows = T_ * N, C = N * H;
  const T* bias = w.bias.defined() ? w.bias.data<T>() : nullptr;
  kn.gemm(false, true, rows, 2 * H, in, x, in, w.weight.data<T>(), in, k, 2 * H);
  kn.for_rows(rows, H, [&](int64_t r0, int64_t r1) {
    kn.coeffs(c.log_space, r0, r1, 0, N, H, len, k, bias, a, b);
  });
  const int team = kn.team_for(rows * H);
  if (c.log_space) {
    kn.log_scan(a, b, h0l, out, T_, C, team);
    kn.for_rows(rows, H, [&](int64_t r0, int64_t r1) {
      cpu::unary_contiguous<T>(cpu::UnaryOp::exp, (r1 - r0) * H, out + r0 * H, out + r0 * H);
    });
  } else {
    kn.scan(a, b, h0l, out, T_, C, false, team);
  }
}

// Elements of one share's workspace in layer_forward_split: packed weights (in x 2um), a
// chunk's projections (Tc*N x 2um), coefficients and states (3 x Tc*N x um), the carry
// (N x um) and the bias (2um).
template <typename T>
int64_t split_area(int64_t in, int64_t um, int64_t Tc, int64_t N) {
  return cpu::packed_size<T>(in, 2 * um, kPanel<T>) + Tc * N * 5 * um + N * um + 2 * um;
}

// One layer with the hidden units split over the team: share p owns units [j0, j1) of every
// sequence (u = j1 - j0, whole SIMD blocks) and walks time in chunks on its own: its slice
// of the chunk's projections (the chunk's rows times its 2u weight rows, packed once, bias
// included), the coefficients, and the scan of its N*u channels from the state its previous
// chunk ended in. No thread ever waits for another, and a chunk's projections and
// coefficients stay in its thread's cache.
//   x, h0l, out as in layer_forward_whole; work: `team` areas of split_area(...) elements;
//   Tc: steps per chunk.
template <typename T>
void layer_forward_split(const Kernels<T>& kn, int team, const MinGruConfig& c, const T* x,
                         int64_t in, const MinGruLayerWeights& w, const int64_t* len, int64_t T_,
                         int64_t N, const T* h0l, T* work, int64_t area, int64_t Tc, T* out) {
  const int64_t H = c.hidden_size, U = cpu::kUnit<T>, blocks = (H + U - 1) / U;
  const int64_t um = (blocks + team - 1) / team * U;
  const T* W = w.weight.data<T>();
  const T* bias = w.bias.defined() ? w.bias.data<T>() : nullptr;
  // Share p of `team`: units [j0, j1), workspace area p. A team smaller than asked for (a
  // nested call) takes several shares per thread.
  auto share = [&](int64_t p) {
    const int64_t j0 = std::min(H, p * blocks / team * U);
    const int64_t j1 = std::min(H, (p + 1) * blocks / team * U);
    const int64_t u = j1 - j0, Cu = N * u, Rc = Tc * N;
    if (u == 0) return;
    T* packed = work + p * area;
    T* kp = packed + cpu::packed_size<T>(in, 2 * um, kPanel<T>);
    T *a = kp + Rc * 2 * um, *b = a + Rc * um, *h = b + Rc * um, *carry = h + Rc * um;
    T* bp = carry + N * um;
    // This share's weights as the packed (in x 2u) operand [W_z rows j0..j1 | W_h rows
    // j0..j1]^T, its bias likewise, and its initial state.
    std::vector<int64_t> rows_of(2 * u);
    for (int64_t j = 0; j < u; ++j) rows_of[j] = j0 + j, rows_of[u + j] = H + j0 + j;
    const cpu::PackedB<T> B =
        cpu::pack_b_for_target<T>(in, 2 * u, kPanel<T>, W, 1, in, nullptr, rows_of.data(), packed);
    if (bias)
      for (int64_t j = 0; j < 2 * u; ++j) bp[j] = bias[rows_of[j]];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < u; ++j) carry[n * u + j] = h0l ? h0l[n * H + j0 + j] : T(0);
    for (int64_t t0 = 0; t0 < T_; t0 += Tc) {
      const int64_t steps = std::min(Tc, T_ - t0), R = steps * N;
      // 1. Projections of the chunk's rows onto this share's units: rows [z(u) | v(u)].
      (kn.ref ? cpu::ref::gemm_packed<T> : cpu::gemm_packed<T>)(R, x + t0 * N * in, in, false, B,
                                                                bias ? bp : nullptr, false, kp,
                                                                2 * u, 0, B.panels(), 0);
      // 2. Coefficients, 3. the scan of this share's channels from its carry.
      kn.coeffs(c.log_space, 0, R, t0, N, u, len, kp, nullptr, a, b);
      if (c.log_space)
        kn.log_scan(a, b, carry, h, steps, Cu, 1);
      else
        kn.scan(a, b, carry, h, steps, Cu, false, 1);
      std::memcpy(carry, h + (R - N) * u, Cu * sizeof(T));
      if (c.log_space) cpu::unary_contiguous<T>(cpu::UnaryOp::exp, R * u, h, h);
      // 4. Into this share's columns of the output rows.
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(out + (t0 * N + r) * H + j0, h + r * u, u * sizeof(T));
    }
  };
#pragma omp parallel num_threads(team) if (team > 1)
  for (int64_t p = omp_get_thread_num(); p < team; p += omp_get_num_threads()) share(p);
}

template <typename T>
MinGruOutput forward_impl(const MinGruConfig& c, const std::vector<MinGruLayerWeights>& weights,
                          const Problem& p, MinGruTapeData* tape) {
  const Kernels<T> kn;
  const int64_t T_ = p.x.size(0), N = p.x.size(1), H = c.hidden_size, L = c.num_layers;
  const int64_t rows = T_ * N, C = N * H;
  const DType dt = dtype_of<T>();
  const int64_t* len = p.len.empty() ? nullptr : p.len.data();
  const bool log_space = c.log_space;
  const int64_t U = cpu::kUnit<T>, blocks = (H + U - 1) / U;
  const int team = kn.team_for(rows * H);
  const bool split = !tape && (team == 1 || blocks >= team);

  // Workspace, planned once. Split: the regrouped weights and, per thread, a chunk's
  // projections, coefficients and states plus its carry (5u values per row; Tc steps sized
  // to stay in a core's cache). Whole: all projections (kept for backward when training)
  // and coefficients. Both: the initial state and the layer outputs (every layer's when
  // training; otherwise two, used in turn).
  Tensor x = p.x.contiguous();
  const int64_t um = (blocks + team - 1) / team * U;  // units of the widest thread share
  const int64_t chunk = g_chunk_bytes.load() > 0 ? g_chunk_bytes.load() : (int64_t(1) << 20);
  const int64_t Tc = std::clamp<int64_t>(chunk / (N * 5 * um * int64_t(sizeof(T))), 1, T_);
  const int64_t area = split_area<T>(std::max(c.input_size, H), um, Tc, N);
  Tensor work, kbuf, a, b;
  if (split) {
    work = Tensor::empty({team * area}, dt);
  } else {
    kbuf = tape ? Tensor() : Tensor::empty({rows, 2 * H}, dt);
    a = Tensor::empty({rows, H}, dt);
    b = Tensor::empty({rows, H}, dt);
  }
  Tensor init = Tensor::empty({N, H}, dt);
  std::vector<Tensor> outs(tape ? L : std::min<int64_t>(L, 2));
  for (auto& o : outs) o = Tensor::empty({T_, N, H}, dt);
  Tensor h_n = Tensor::empty({L, N, H}, dt);

  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t in = c.layer_input_size(l);
    Tensor out = outs[l % outs.size()];
    // The state before t = 0 (log h in log space); null means zeros.
    const T* h0l = nullptr;
    if (p.h0.defined()) {
      Tensor h0c = p.h0.select(0, l).contiguous();
      for (int64_t i = 0; i < C; ++i)
        init.data<T>()[i] = log_space ? std::log(g_of(h0c.data<T>()[i])) : h0c.data<T>()[i];
      h0l = init.data<T>();
    } else if (log_space) {
      std::fill(init.data<T>(), init.data<T>() + C, std::log(T(0.5)));
      h0l = init.data<T>();
    }
    Tensor kl;
    if (split) {
      layer_forward_split<T>(kn, team, c, layer_in.data<T>(), in, weights[l], len, T_, N, h0l,
                             work.data<T>(), area, Tc, out.data<T>());
    } else {
      kl = tape ? Tensor::empty({rows, 2 * H}, dt) : kbuf;
      layer_forward_whole<T>(kn, c, layer_in.data<T>(), in, weights[l], len, T_, N, h0l,
                             kl.data<T>(), a.data<T>(), b.data<T>(), out.data<T>());
    }
    // h_n: the last row holds every sequence's final state (padding holds it); then zero the
    // padding.
    std::memcpy(h_n.data<T>() + l * C, out.data<T>() + (T_ - 1) * C, C * sizeof(T));
    if (len)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = len[n]; t < T_; ++t)
          std::memset(out.data<T>() + (t * N + n) * H, 0, H * sizeof(T));
    if (tape) {
      tape->inputs[l] = layer_in;
      tape->k[l] = kl;
      tape->states[l] = out;
      if (p.h0.defined() && !log_space) {
        tape->h0[l] = p.h0.select(0, l).clone();
      } else if (log_space) {
        Tensor h0lin = Tensor::full({N, H}, 0.5, dt);
        if (p.h0.defined()) {
          Tensor h0c = p.h0.select(0, l).contiguous();
          for (int64_t i = 0; i < C; ++i) h0lin.data<T>()[i] = g_of(h0c.data<T>()[i]);
        }
        tape->h0[l] = h0lin;
      }
    }
    layer_in = out;
  }
  return {layer_in, h_n};
}

// ---- Backward ------------------------------------------------------------------------

// dout: (T, N, H) time-major (any strides) or undefined; dhn: (L, N, H) or undefined.
template <typename T>
MinGruGrads backward_impl(const MinGruConfig& c, const std::vector<MinGruLayerWeights>& weights,
                          const MinGruTapeData& tape, const Tensor& dout, const Tensor& dhn) {
  const Kernels<T> k;
  const int64_t T_ = tape.T, N = tape.N, H = c.hidden_size, L = c.num_layers;
  const int64_t rows = T_ * N, C = N * H;
  const DType dt = dtype_of<T>();
  const int64_t* len = tape.len.empty() ? nullptr : tape.len.data();

  // Workspace, planned once: the reverse scan's inputs and output, the pre-activation
  // gradients, a column of ones (bias gradients as a GEMM), and dL/d(output of the layer
  // below).
  Tensor e = Tensor::empty({rows, H}, dt), a_next = Tensor::empty({rows, H}, dt);
  Tensor G = Tensor::empty({rows, H}, dt), dk = Tensor::empty({rows, 2 * H}, dt);
  Tensor ones = Tensor::full({rows}, 1.0, dt);
  Tensor dy = L > 1 ? Tensor::empty({rows, H}, dt) : Tensor();
  Tensor dinput = Tensor::empty({T_, N, c.input_size}, dt);
  Tensor dh0 = Tensor::empty({L, N, H}, dt);

  MinGruGrads grads;
  grads.dweights.resize(L);
  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t in = c.layer_input_size(l);
    const MinGruLayerWeights& w = weights[l];
    const T* bias = w.bias.defined() ? w.bias.data<T>() : nullptr;
    const T* kl = tape.k[l].data<T>();
    // 1. e_t = dL/dh_t through this step's output (0 on padding, whose output is the
    //    constant 0) plus, at the last step, dL/dh_n: padding holds the state (a = 1), so
    //    h_n's gradient flows back unchanged to each sequence's last valid step.
    T* ep = e.data<T>();
    const bool have_dy = l < L - 1 || dout.defined();
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t n = 0; n < N; ++n) {
        T* row = ep + (t * N + n) * H;
        if (!have_dy || (len && t >= len[n])) {
          std::memset(row, 0, H * sizeof(T));
        } else if (l < L - 1) {
          std::memcpy(row, dy.data<T>() + (t * N + n) * H, H * sizeof(T));
        } else {
          const T* src = dout.data<T>() + t * dout.stride(0) + n * dout.stride(1);
          for (int64_t j = 0; j < H; ++j) row[j] = src[j * dout.stride(2)];
        }
      }
    if (dhn.defined())
      for (int64_t n = 0; n < N; ++n) {
        const T* src = dhn.data<T>() + l * dhn.stride(0) + n * dhn.stride(1);
        T* row = ep + ((T_ - 1) * N + n) * H;
        for (int64_t j = 0; j < H; ++j) row[j] += src[j * dhn.stride(2)];
      }
    // 2. G_t = e_t + a_{t+1} G_{t+1}: a reverse scan with the next step's decay.
    k.for_rows(rows, H, [&](int64_t r0, int64_t r1) {
      (k.ref
           ? cpu::ref::mingru_backward_decay<T>
           : cpu::mingru_backward_decay<T>)(r0, r1, rows, 0, N, H, len, kl, bias, a_next.data<T>());
    });
    k.scan(a_next.data<T>(), ep, nullptr, G.data<T>(), T_, C, true, k.team_for(rows * H));
    // 3. Chain to the pre-activations, and dh0 = (1 - z_0) G_0 (times g'(h0) in log space).
    const T* h0l = tape.h0[l].defined() ? tape.h0[l].data<T>() : nullptr;
    T* dh0l = dh0.data<T>() + l * C;
    k.for_rows(rows, H, [&](int64_t r0, int64_t r1) {
      (k.ref ? cpu::ref::mingru_backward<T>
             : cpu::mingru_backward<T>)(r0, r1, 0, N, H, len, c.log_space, kl, bias, h0l,
                                        tape.states[l].data<T>(), G.data<T>(), dk.data<T>(), dh0l);
    });
    if (c.log_space && tape.h0_raw.defined()) {
      Tensor h0c = tape.h0_raw.select(0, l).contiguous();
      for (int64_t i = 0; i < C; ++i) dh0l[i] *= dg_of(h0c.data<T>()[i]);
    }
    // 4. Weight gradients dW = dk^T x, db = 1^T dk, and dx = dk W for the layer below.
    MinGruLayerWeights& dw = grads.dweights[l];
    dw.weight = Tensor::empty({2 * H, in}, dt);
    k.gemm(true, false, 2 * H, in, rows, dk.data<T>(), 2 * H, tape.inputs[l].data<T>(), in,
           dw.weight.data<T>(), in);
    if (bias) {
      dw.bias = Tensor::empty({2 * H}, dt);
      k.gemm(false, false, 1, 2 * H, rows, ones.data<T>(), rows, dk.data<T>(), 2 * H,
             dw.bias.data<T>(), 2 * H);
    }
    T* dx = l == 0 ? dinput.data<T>() : dy.data<T>();
    k.gemm(false, false, rows, in, 2 * H, dk.data<T>(), 2 * H, w.weight.data<T>(), in, dx, in);
  }
  grads.dinput = dinput;
  grads.dh0 = dh0;
  return grads;
}

}  // namespace

// ---- MinGru ----------------------------------------------------------------------------

MinGru::MinGru(const MinGruConfig& config, DType dtype, uint64_t seed)
    : config_(config), dtype_(dtype) {
  config_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(
        fmt::format("mingru: dtype {} is not supported (expected f32 or f64)", dtype_name(dtype)));
  std::mt19937_64 rng(seed);
  const int64_t H = config_.hidden_size;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const int64_t in = config_.layer_input_size(l);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    std::uniform_real_distribution<double> uni(-bound, bound);
    auto draw = [&](const Shape& shape) {
      Tensor t = Tensor::empty(shape, DType::f64);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = uni(rng);
      return t.to(dtype);
    };
    MinGruLayerWeights w;
    w.weight = draw({2 * H, in});
    if (config_.bias) w.bias = draw({2 * H});
    weights_.push_back(std::move(w));
  }
}

MinGru::MinGru(const MinGruConfig& config, std::vector<MinGruLayerWeights> weights)
    : config_(config) {
  config_.validate();
  set_weights(std::move(weights));
}

MinGru::MinGru(const MinGru& other)
    : config_(other.config_), dtype_(other.dtype_), weights_(other.weights_) {
  for (MinGruLayerWeights& w : weights_)
    for (Tensor* t : {&w.weight, &w.bias})
      if (t->defined()) *t = t->clone();
}

MinGru& MinGru::operator=(const MinGru& other) {
  if (this != &other) *this = MinGru(other);
  return *this;
}

void MinGru::set_weights(std::vector<MinGruLayerWeights> weights) {
  if (static_cast<int64_t>(weights.size()) != config_.num_layers)
    throw Error(fmt::format("mingru: {} weight sets given, expected num_layers = {}",
                            weights.size(), config_.num_layers));
  const DType dtype = ops::weights_dtype("mingru", mingru_key("weight", 0), weights[0].weight);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    MinGruLayerWeights& w = weights[l];
    check_layer_weights(config_, dtype, w, l);
    ops::make_contiguous(w.weight);
    ops::make_contiguous(w.bias);
  }
  dtype_ = dtype;
  weights_ = std::move(weights);
}

MinGru MinGru::from_state_dict(const std::map<std::string, Tensor>& state,
                               const MinGruConfig& options) {
  static const std::regex key_re(R"((weight|bias)_l(\d+))");
  int64_t max_layer = -1;
  for (const auto& [key, t] : state) {
    std::smatch m;
    if (!std::regex_match(key, m, key_re))
      throw Error(fmt::format(
          "mingru weights: unexpected key '{}' (expected 'weight_l{{k}}' and 'bias_l{{k}}')", key));
    if (m[2].length() > 6)
      throw Error(fmt::format("mingru weights: layer index in '{}' is too large", key));
    max_layer = std::max<int64_t>(max_layer, std::stoll(m[2].str()));
  }
  auto w0 = state.find("weight_l0");
  if (w0 == state.end()) throw Error("mingru weights: missing key 'weight_l0'");
  const Tensor& t0 = w0->second;
  if (t0.dim() != 2 || t0.size(0) % 2 != 0 || t0.size(0) == 0 || t0.size(1) == 0)
    throw Error(fmt::format(
        "mingru weights: 'weight_l0' has shape {}, expected (2*hidden_size, input_size) with "
        "both sizes >= 1",
        shape_str(t0.shape())));
  MinGruConfig c = options;
  c.hidden_size = t0.size(0) / 2;
  c.input_size = t0.size(1);
  c.num_layers = max_layer + 1;
  c.bias = state.count("bias_l0") > 0;
  ops::StateDictReader reader("mingru", state);
  std::vector<MinGruLayerWeights> weights;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    MinGruLayerWeights w;
    w.weight = reader.get(mingru_key("weight", l));
    if (c.bias) w.bias = reader.get(mingru_key("bias", l));
    weights.push_back(std::move(w));
  }
  reader.check_no_other(
      fmt::format("a {}-layer minGRU{}", c.num_layers, c.bias ? "" : " without bias"));
  return MinGru(c, std::move(weights));
}

std::map<std::string, Tensor> MinGru::state_dict() const {
  MinGruGrads as_grads;
  as_grads.dweights = weights_;
  return as_grads.state_dict(config_);
}

std::map<std::string, Tensor> MinGruGrads::state_dict(const MinGruConfig& c) const {
  std::map<std::string, Tensor> out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const MinGruLayerWeights& w = dweights.at(l);
    out[mingru_key("weight", l)] = w.weight;
    if (w.bias.defined()) out[mingru_key("bias", l)] = w.bias;
  }
  return out;
}

MinGruOutput MinGru::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                             int threads) const {
  ops::ThreadsScope scope("mingru", threads);
  Problem p = normalize(config_, dtype_, input, h0, lengths);
  MinGruOutput r = ops::dispatch_float(
      dtype_, [&](auto t) { return forward_impl<decltype(t)>(config_, weights_, p, nullptr); });
  r.output = to_caller_layout(r.output, config_.batch_first, p.unbatched);
  if (p.unbatched) r.h_n = r.h_n.squeeze(1);
  return r;
}

MinGruOutput MinGru::forward_train(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                                   MinGruTape& tape, int threads) const {
  ops::ThreadsScope scope("mingru", threads);
  Problem p = normalize(config_, dtype_, input, h0, lengths);
  auto data = std::make_unique<MinGruTapeData>();
  const int64_t L = config_.num_layers;
  data->T = p.x.size(0);
  data->N = p.x.size(1);
  data->len = p.len;
  data->unbatched = p.unbatched;
  data->dtype = dtype_;
  data->inputs.resize(L);
  data->k.resize(L);
  data->states.resize(L);
  data->h0.resize(L);
  if (config_.log_space && p.h0.defined()) data->h0_raw = p.h0;
  MinGruOutput r = ops::dispatch_float(
      dtype_, [&](auto t) { return forward_impl<decltype(t)>(config_, weights_, p, data.get()); });
  data->h0_shape = r.h_n.shape();
  if (p.unbatched) data->h0_shape.erase(data->h0_shape.begin() + 1);
  tape.data_ = std::move(data);
  r.output = to_caller_layout(r.output, config_.batch_first, p.unbatched);
  if (p.unbatched) r.h_n = r.h_n.squeeze(1);
  return r;
}

MinGruGrads MinGru::backward(const MinGruTape& tape, const Tensor& doutput, const Tensor& dh_n,
                             int threads) const {
  ops::ThreadsScope scope("mingru backward", threads);
  if (tape.empty()) throw Error("mingru backward: the tape is empty (run forward_train first)");
  const MinGruTapeData& t = *tape.data_;
  if (t.dtype != dtype_)
    throw Error("mingru backward: the tape was recorded with weights of another dtype");
  const ops::SeqUpstream u =
      ops::normalize_upstream(seq_spec(config_, dtype_), t.T, t.N, t.unbatched, config_.hidden_size,
                              t.h0_shape, doutput, dh_n);
  MinGruGrads g = ops::dispatch_float(dtype_, [&](auto x) {
    return backward_impl<decltype(x)>(config_, weights_, t, u.doutput, u.dh_n);
  });
  g.dinput = to_caller_layout(g.dinput, config_.batch_first, t.unbatched);
  if (t.unbatched) g.dh0 = g.dh0.squeeze(1);
  return g;
}

namespace ops {
void set_mingru_chunk_bytes(int64_t bytes) {
  g_chunk_bytes.store(bytes);
}
}  // namespace ops

}  // namespace grux
