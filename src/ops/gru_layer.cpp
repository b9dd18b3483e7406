// One GRU layer-direction walked over time, forward and backward side by side: the input
// projection of all steps as one GEMM, the per-step cell run by a team of threads that each
// own a share of the hidden units, and the weight gradients as one GEMM each.
#include "ops/gru_layer.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

namespace grux::ops {

SeqLayout make_seq_layout(int64_t T, int64_t N, const int64_t* lengths) {
  SeqLayout lay;
  lay.T = T;
  lay.N = N;
  lay.len.assign(N, T);
  if (lengths) lay.len.assign(lengths, lengths + N);
  lay.perm.resize(N);
  std::iota(lay.perm.begin(), lay.perm.end(), 0);
  std::stable_sort(lay.perm.begin(), lay.perm.end(),
                   [&](int64_t a, int64_t b) { return lay.len[a] > lay.len[b]; });
  lay.S = N > 0 ? lay.len[lay.perm[0]] : 0;
  lay.bs.assign(lay.S, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < lay.len[n]; ++s) ++lay.bs[s];
  lay.off.assign(lay.S + 1, 0);
  for (int64_t s = 0; s < lay.S; ++s) lay.off[s + 1] = lay.off[s] + lay.bs[s];
  return lay;
}

int gru_team_size(int64_t H, int64_t unit) {
  const int64_t blocks = (H + unit - 1) / unit;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, omp_get_max_threads()));
}

TeamShare team_share(int64_t H, int64_t unit, int tid, int threads, SpinBarrier* barrier) {
  const int64_t blocks = (H + unit - 1) / unit;
  return {tid * blocks / threads, (tid + 1) * blocks / threads, barrier};
}

namespace {
// Runs body(me) on a team of threads that split one layer-direction's hidden units, with a
// spinning barrier sized to the team OpenMP actually gives (one thread when nested in a
// caller's parallel region), or on `persistent` when it is given and of the right size.
template <typename Body>
void run_team(ThreadTeam* persistent, int64_t H, int64_t unit, int max_threads, Body body) {
  int team = gru_team_size(H, unit);
  if (max_threads > 0) team = std::min(team, max_threads);
  SpinBarrier barrier;
  barrier.reset(team, persistent && persistent->spins());  // a real-time team's never yields
  if (team == 1) {  // no OpenMP region: even one of one thread allocates and costs microseconds
    body(team_share(H, unit, 0, 1, &barrier));
    return;
  }
  if (persistent && persistent->size() == team && team > 1 && !omp_in_parallel()) {
    auto job = [&](int member) { body(team_share(H, unit, member, team, &barrier)); };
    persistent->run(job);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    if (omp_get_num_threads() != team) {
#pragma omp single
      barrier.reset(omp_get_num_threads());
    }
    body(team_share(H, unit, omp_get_thread_num(), omp_get_num_threads(), &barrier));
  }
}
}  // namespace

template <typename T>
PackedLayer<T> pack_layer(const GruLayerWeights& w, GruForm form, bool backward,
                          Precision precision) {
  // bf16 packs the transposed operands of backward too (bf16 training); int8 is inference.
  GRUX_ASSERT(precision == Precision::f32 ||
              (std::is_same_v<T, float> && (!backward || precision == Precision::bf16)));
  constexpr int64_t U = cpu::kUnit<T>;
  PackedLayer<T> P;
  const int64_t H = w.w_hh.size(1), in = w.w_ih.size(1);
  P.H = H, P.in = in, P.form = form;
  P.map3.resize(3 * H);
  P.map2.resize(2 * H);
  for (int64_t j = 0; j < H; ++j)
    for (int64_t q = 0; q < 3; ++q) {
      P.map3[cpu::gate_col3<T>(H, q, j)] = q * H + j;
      if (q < 2) P.map2[cpu::gate_col2<T>(H, q, j)] = q * H + j;
    }
  const bool rb = form == GruForm::reset_before;
  // Logical operands (K x N) and where their elements come from.
  struct Spec {
    cpu::PackedB<T>* out;
    int64_t K, N, panel;
    const T* src;
    int64_t stride_k, stride_n;
    const int64_t *k_map, *n_map;
  };
  const T* wih = w.w_ih.data<T>();
  const T* whh = w.w_hh.data<T>();
  const T* whn = whh + 2 * H * H;
  std::vector<Spec> specs{{&P.ih, in, 3 * H, 3 * U, wih, 1, in, nullptr, P.map3.data()}};
  if (!rb) {
    specs.push_back({&P.hh, H, 3 * H, 3 * U, whh, 1, H, nullptr, P.map3.data()});
  } else {
    specs.push_back({&P.hh, H, 2 * H, 2 * U, whh, 1, H, nullptr, P.map2.data()});
    specs.push_back({&P.hn, H, H, U, whn, 1, H, nullptr, nullptr});
  }
  if (backward) {
    // dL/dx's panels need not hold whole units (f32: the low precisions pack in 3 units).
    const int64_t panel = precision == Precision::f32 ? cpu::gemm_panel_for<T>(in) : 3 * U;
    specs.push_back({&P.ih_t, 3 * H, in, panel, wih, in, 1, P.map3.data(), nullptr});
    if (!rb) {
      specs.push_back({&P.hh_t, 3 * H, H, U, whh, H, 1, P.map3.data(), nullptr});
    } else {
      specs.push_back({&P.hh_t, 2 * H, H, U, whh, H, 1, P.map2.data(), nullptr});
      specs.push_back({&P.hn_t, H, H, U, whn, H, 1, nullptr, nullptr});
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    if (precision != Precision::f32) {
      // Bytes, each operand 64-byte aligned (packed_lowp_bytes is a multiple of 64).
      int64_t bytes = 0;
      for (const Spec& s : specs) bytes += cpu::packed_lowp_bytes(precision, s.K, s.N, s.panel);
      P.storage = Tensor::empty({bytes / 4}, DType::f32);
      char* dst = static_cast<char*>(P.storage.raw_data());
      for (const Spec& s : specs) {
        *s.out = cpu::pack_b_lowp(precision, s.K, s.N, s.panel, s.src, s.stride_k, s.stride_n,
                                  s.k_map, s.n_map, dst);
        dst += cpu::packed_lowp_bytes(precision, s.K, s.N, s.panel);
      }
      specs.clear();
    }
  }
  int64_t total = 0;
  for (const Spec& s : specs) total += cpu::packed_size<T>(s.K, s.N, s.panel);
  if (!specs.empty()) P.storage = Tensor::empty({total}, dtype_of<T>());
  T* dst = specs.empty() ? nullptr : static_cast<T*>(P.storage.raw_data());
  for (const Spec& s : specs) {
    *s.out = cpu::pack_b_for_target<T>(s.K, s.N, s.panel, s.src, s.stride_k, s.stride_n, s.k_map,
                                       s.n_map, dst);
    dst += cpu::packed_size<T>(s.K, s.N, s.panel);  // each panel row is 64-byte aligned
  }
  if (w.b_ih.defined()) {
    P.b_ih.resize(3 * H);
    P.b_hh.resize(3 * H);
    for (int64_t c = 0; c < 3 * H; ++c) {
      P.b_ih[c] = w.b_ih.data<T>()[P.map3[c]];
      P.b_hh[c] = w.b_hh.data<T>()[P.map3[c]];
    }
  }
  return P;
}

template <typename T>
void gru_layer_forward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                       const T* xp, const T* h0s, T* g, T* aux, T* hs, T* gh, ThreadTeam* team,
                       int max_threads, const DenseIo<T>* io, int64_t step0) {
  const int64_t H = P.H, G = 3 * H, rows = lay.rows(), N = lay.N;
  GRUX_ASSERT(!io || rows == lay.S * N);
  const T* b_ih = P.b_ih.empty() ? nullptr : P.b_ih.data();
  // The input rows of packed row r (consecutive from r for `run` rows), and step s's states.
  const int64_t ldx = io ? io->ldx : P.in, ldh = io ? io->ldh : H;
  const int64_t x_step = io && io->x_step ? io->x_step : N * ldx;
  const int64_t h_step = io && io->h_step ? io->h_step : N * ldh;
  const int64_t run = io && (io->reverse || x_step != N * ldx) ? N : rows;
  const auto x_row = [&](int64_t r) {
    if (!io) return xp + r * P.in;
    const int64_t s = r / N;
    return io->x + (io->reverse ? lay.S - 1 - s : s) * x_step + (r % N) * ldx;
  };
  const auto states = [&](int64_t s) {
    return io ? io->h + (io->reverse ? lay.S - 1 - s : s) * h_step : hs + lay.off[s] * H;
  };
  // Each thread owns a share of the hidden units: its columns of W_ih and W_hh stay hot in
  // its own cache, and its gates need no other thread's projection.
  run_team(team, H, cpu::kUnit<T>, max_threads, [&](const TeamShare& me) {
    // 1. Input projection (for my units): g = xp W_ih^T + b_ih, in row blocks that leave my
    //    panels in L2 from one block to the next, never across a run of consecutive rows.
    const int64_t row_block = cpu::gemm_row_block(P.ih, me.b0, me.b1, P.in, sizeof(T));
    const auto project = [&](int64_t ra, int64_t rb) {
      for (int64_t m0 = ra; m0 < rb;) {
        const int64_t m1 = std::min({m0 + row_block, rb, (m0 / run + 1) * run});
        k.gemm(m1 - m0, x_row(m0), ldx, false, P.ih, b_ih, false, g + m0 * G, G, me.b0, me.b1);
        m0 = m1;
      }
    };
    // 2. The recurrence; the active rows of step s are a prefix of those of step s - 1. Steps
    //    in chunks, each projected just before it runs, whose rows of g take at most a
    //    quarter of the L2 (at least one step): a chunk's g is read back by the gates while
    //    it is still in cache, not from memory. Only this thread reads its units' columns of
    //    g, so no barrier. (W3, 39 MB of g: bf16 and int8 about 10% faster, f32 2%.)
    //    Inference only: training keeps every step's gates in g for the backward pass, and
    //    its step (W4) runs 2-7% slower in chunks.
    const int64_t chunk_rows = aux ? rows : cpu::l2_cache_bytes() / 4 / (G * int64_t(sizeof(T)));
    for (int64_t s0 = 0; s0 < lay.S;) {
      int64_t s1 = s0 + 1;
      while (s1 < lay.S && lay.off[s1 + 1] - lay.off[s0] <= chunk_rows) ++s1;
      project(lay.off[s0], lay.off[s1]);
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t o = lay.off[s];
        const T* h_prev = s == 0 ? h0s : states(s - 1);
        gru_cell_forward(k, P, me, lay.bs[s], h_prev, g + o * G, gh, aux ? aux + o * H : nullptr,
                         states(s), ldh, /*sync_end=*/s + 1 < lay.S, step0 + s);
      }
      s0 = s1;
    }
  });
}

namespace {
// out[c] = sum over rows of m[r, c] (rows x C).
template <typename T>
void column_sums(int64_t rows, int64_t C, const T* m, T* out) {
  std::fill(out, out + C, T(0));
  // Threads own column ranges; each column is summed in row order (same result any team).
#pragma omp parallel if (rows * C > (1 << 20))
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t c0 = t * C / nt, c1 = (t + 1) * C / nt;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) out[c] += m[r * C + c];
  }
}

// dst (rows x M, PyTorch row order) row map[c] <- src row c; `stride` the row length.
template <typename T>
void unpermute_rows(int64_t M, int64_t stride, const T* src, const int64_t* map, T* dst) {
  for (int64_t c = 0; c < M; ++c)
    std::memcpy(dst + (map ? map[c] : c) * stride, src + c * stride, stride * sizeof(T));
}

// A^T B over all rows: C (M x N) = A^T (A: rows x M, row stride lda) times B (rows x N;
// row r of B is row b_rows[r] of `B` when b_rows is given).
// With `bf16` (a bf16-trained layer) both operands are rounded to bf16, the sums kept in f32.
template <typename T>
void gradient_gemm(const GruKernels<T>& k, bool bf16, int64_t rows, int64_t M, const T* A,
                   int64_t lda, int64_t N, const T* B, T* C, const int64_t* b_rows = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return k.gemm_at_b_bf16(M, N, rows, A, lda, B, N, b_rows, C, N);
  }
  const int64_t panel = cpu::gemm_panel_for<T>(N);
  Tensor packed = Tensor::empty({cpu::packed_size<T>(rows, N, panel)}, dtype_of<T>());
  k.gemm_all(M, A, lda, true,
             cpu::pack_b_for_target<T>(rows, N, panel, B, N, 1, b_rows, nullptr, packed.data<T>()),
             nullptr, false, C, N);
}
}  // namespace

template <typename T>
void gru_layer_backward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                        const T* xp, const T* states, const T* g, const T* aux, T* dyp, T* dxp,
                        GruLayerWeights& dw, T* dh0s) {
  constexpr int64_t U = cpu::kUnit<T>;
  const int64_t H = P.H, G = 3 * H, N = lay.N, rows = lay.rows(), in = P.in;
  const bool lbr = P.form == GruForm::linear_before_reset;
  const DType dt = dtype_of<T>();
  const T* h0s = states;
  const T* hs = states + N * H;
  Tensor dg = Tensor::empty({rows, G}, dt);
  // dgh: every step's rows (streamed; the weight gradient's operand), and each step's through
  // the cache into one of two buffers, by the step's parity (the step's dL/dh_prev product
  // reads them at once; the same lines every other step, so they are not fetched from memory
  // before each write). Two: a thread may write step s - 1's rows while the other still
  // multiplies step s's (no barrier between the steps). The carry is added by the gate
  // kernel (no pass of its own over dh: W4's time loop 3% faster, the same bits).
  Tensor dgh = Tensor::empty({lbr ? rows : 0, G}, dt);
  Tensor dgh_step = Tensor::empty({lbr ? 2 * N : 0, G}, dt);
  Tensor dn = Tensor::empty({lbr ? 0 : rows, H}, dt),
         drz = Tensor::empty({lbr ? 0 : rows, 2 * H}, dt);
  Tensor carry = Tensor::empty({2, N, H}, dt), drh = Tensor::empty({N, H}, dt);
  // Linear-before-reset: the bias gradients (column sums of dg and dgh) are summed by the gate
  // kernel as it writes each row, steps from the last, rows in order; each column by the one
  // thread that owns it, so the same bits for any number of threads. (Summing dg and dgh
  // afterwards would read 2 x 39 MB back from memory: about 3% of a W4 training step.)
  const bool bias = dw.b_ih.defined();
  Tensor bsum = Tensor::zeros({lbr && bias ? 2 * G : 0}, dt);
  T* dg_sum = lbr && bias ? bsum.data<T>() : nullptr;
  T* dgh_sum = lbr && bias ? bsum.data<T>() + G : nullptr;
  // 1. Walk time backwards; dL/dh of step s = gradient from above + carry from step s + 1.
  run_team(nullptr, H, U, 0, [&](const TeamShare& me) {
    T* dh_next = carry.data<T>();          // dL/dh_prev produced by step s + 1
    T* dh_prev = carry.data<T>() + N * H;  // produced by step s
    for (int64_t s = lay.S - 1; s >= 0; --s) {
      const int64_t o = lay.off[s], B = lay.bs[s];
      const T* h_prev = s == 0 ? h0s : hs + lay.off[s - 1] * H;
      const bool last = s + 1 == lay.S;  // no carry into the last step
      gru_cell_backward(k, P, me, B, h_prev, g + o * G, aux + o * H, dyp + o * H,
                        last ? nullptr : dh_next, last ? 0 : lay.bs[s + 1], dg.data<T>() + o * G,
                        lbr ? dgh_step.data<T>() + (s % 2) * N * G : nullptr,
                        lbr ? dgh.data<T>() + o * G : nullptr, lbr ? nullptr : dn.data<T>() + o * H,
                        lbr ? nullptr : drz.data<T>() + o * 2 * H, drh.data<T>(), dh_prev, dg_sum,
                        dgh_sum);
      std::swap(dh_next, dh_prev);
    }
  });
  std::memcpy(dh0s, carry.data<T>() + (lay.S % 2 == 1 ? N * H : 0), N * H * sizeof(T));
  // 2. The previous state of every packed row (the right operand of dW_hh), as rows of
  //    `states`: step 0 reads h0s, step s the states of step s - 1.
  std::vector<int64_t> hprev_rows(rows);
  for (int64_t s = 0; s < lay.S; ++s)
    for (int64_t j = 0; j < lay.bs[s]; ++j)
      hprev_rows[lay.off[s] + j] = s == 0 ? j : N + lay.off[s - 1] + j;
  // 3. Weight gradients, each one GEMM over all steps (rows in gate-interleaved order, then
  //    put back in PyTorch's order), and the input gradient.
  Tensor tmp = Tensor::empty({G, std::max(in, H)}, dt);
  T* t = tmp.data<T>();
  const bool bf16 = P.ih.bf16 != nullptr;
  gradient_gemm(k, bf16, rows, G, dg.data<T>(), G, in, xp, t);
  unpermute_rows(G, in, t, P.map3.data(), dw.w_ih.data<T>());
  if (lbr) {
    gradient_gemm(k, bf16, rows, G, dgh.data<T>(), G, H, states, t, hprev_rows.data());
    unpermute_rows(G, H, t, P.map3.data(), dw.w_hh.data<T>());
  } else {
    // Blocks r, z multiply h_prev; block n multiplies rh = r * h_prev (saved in aux).
    gradient_gemm(k, bf16, rows, 2 * H, drz.data<T>(), 2 * H, H, states, t, hprev_rows.data());
    unpermute_rows(2 * H, H, t, P.map2.data(), dw.w_hh.data<T>());
    gradient_gemm(k, bf16, rows, H, dn.data<T>(), H, H, aux, dw.w_hh.data<T>() + 2 * H * H);
  }
  if (bias) {
    // Reset-before: b_hn's gradient is b_in's (both add to the n gate's pre-activation).
    if (!lbr) column_sums(rows, G, dg.data<T>(), t);
    const T* sg = lbr ? dg_sum : t;
    const T* sgh = lbr ? dgh_sum : t;
    for (int64_t c = 0; c < G; ++c) dw.b_ih.data<T>()[P.map3[c]] = sg[c];
    for (int64_t c = 0; c < G; ++c) dw.b_hh.data<T>()[P.map3[c]] = sgh[c];
  }
  k.gemm_all(rows, dg.data<T>(), G, false, P.ih_t, nullptr, false, dxp, in);
}

#define GRUX_INSTANTIATE(T)                                                                     \
  template PackedLayer<T> pack_layer<T>(const GruLayerWeights&, GruForm, bool, Precision);      \
  template void gru_layer_forward<T>(const GruKernels<T>&, const PackedLayer<T>&,               \
                                     const SeqLayout&, const T*, const T*, T*, T*, T*, T*,      \
                                     ThreadTeam*, int, const DenseIo<T>*, int64_t);             \
  template void gru_layer_backward<T>(const GruKernels<T>&, const PackedLayer<T>&,              \
                                      const SeqLayout&, const T*, const T*, const T*, const T*, \
                                      T*, T*, GruLayerWeights&, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::ops
