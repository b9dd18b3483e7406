// What every cell's layer (gru_layer.cpp, lstm_layer.cpp) walks time with: the packed sequence
// layout, where a layer reads its input and writes its states in place, the team of threads
// that splits a layer's hidden units, and the GEMM kernels (optimized or reference twins).
//
// Packed layout: sequences are sorted by length, longest first (stable), so that at step s
// the active sequences are a prefix of the sorted order: bs[s] rows starting at packed row
// off[s]. Row (s, j) holds sequence perm[j] at time s (forward direction) or at time
// len - 1 - s (reverse direction: each sequence's valid part, reversed). Work follows the
// sum of lengths, not N * T.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/spin_barrier.h"
#include "core/thread_team.h"
#include "cpu/gemm_lowp.h"
#include "cpu/gemm_packed.h"
#include "cpu/ref/gemm_ref.h"
#include "grux/runtime.h"
#include "grux/tensor.h"

namespace grux::ops {

struct SeqLayout {
  int64_t T = 0, N = 0, S = 0;  // padded length, batch, longest valid length
  std::vector<int64_t> len;     // per original batch index
  std::vector<int64_t> perm;    // sorted position j -> original batch index
  std::vector<int64_t> bs;      // active rows at step s (S entries; bs[0] == N)
  std::vector<int64_t> off;     // first packed row of step s (S + 1 entries)
  int64_t rows() const { return off[S]; }
  // Every sequence of length T and none reordered: packed row s * N + n is (time s, batch n),
  // the time-major row of the caller's (T, N, .) arrays.
  bool time_major() const {
    if (rows() != T * N) return false;
    for (int64_t j = 0; j < N; ++j)
      if (perm[j] != j) return false;
    return true;
  }
  // Time index of packed row (s, j) in direction dir (0 forward, 1 reverse).
  int64_t time(int64_t s, int64_t j, int dir) const { return dir == 0 ? s : len[perm[j]] - 1 - s; }
  // Its inverse: the step of time t of original sequence n (valid when t < len[n]).
  int64_t step(int64_t t, int64_t n, int dir) const { return dir == 0 ? t : len[n] - 1 - t; }
};

// Layout for N sequences of padded length T; `lengths` null means all T. Lengths must
// already be validated (1 <= len <= T).
SeqLayout make_seq_layout(int64_t T, int64_t N, const int64_t* lengths);

// Threads for one layer-direction's time loop: all of OpenMP's, fewer when H has too few
// unit blocks to share.
int layer_team_size(int64_t H, int64_t unit);

// Where a layout whose sequences all have length T (nothing sorted: packed row s * N + n is
// sequence n at step s) reads its input and writes its states in place of xp and hs, with no
// copy before or after: step s, at time t = s (or T - 1 - s with `reverse`), reads its N
// input rows at x + t * N * ldx, ldx apart, and writes its N states at h + t * N * ldh, ldh
// apart (a direction's columns of a bidirectional layer's output). h0s's rows are then ldh
// apart too.
// x_step / h_step: the distance between two times' first rows (0: N rows, N * ldx / N * ldh;
// more for a part of a batch).
template <typename T>
struct DenseIo {
  const T* x;
  int64_t ldx;
  T* h;
  int64_t ldh;
  bool reverse;
  int64_t x_step = 0, h_step = 0;
};

// Who does what in a team of threads over one layer-direction's time loop.
struct TeamShare {
  int64_t b0, b1;        // unit blocks: gates, forward GEMM panels, and the (one-unit) output
                         // panels of the backward dL/dh_prev GEMMs
  SpinBarrier* barrier;  // shared by the team
  int tid = 0, threads = 1;
  void sync() const { barrier->wait(); }
  // This member's share [p0, p1) of `panels` panels of another product (a projection's).
  int64_t p0(int64_t panels) const { return tid * panels / threads; }
  int64_t p1(int64_t panels) const { return (tid + 1) * panels / threads; }
};
TeamShare team_share(int64_t H, int64_t unit, int tid, int threads, SpinBarrier* barrier);

// Runs body(me) on a team of threads that split one layer-direction's hidden units, with a
// spinning barrier sized to the team OpenMP actually gives (one thread when nested in a
// caller's parallel region), or on `persistent` when it is given and of the right size.
// `max_threads` > 0 caps the team (1: the calling thread only, no OpenMP region at all).
template <typename Body>
void run_team(ThreadTeam* persistent, int64_t H, int64_t unit, int max_threads, Body body) {
  int team = layer_team_size(H, unit);
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

// One operand of a layer's packed weights: a logical K x N matrix (panels of `panel` columns)
// and where its elements come from (cpu::pack_b_for_target's and cpu::pack_b_lowp's
// arguments); *out is set to the packed operand.
template <typename T>
struct PackSpec {
  cpu::PackedB<T>* out;
  int64_t K, N, panel;
  const T* src;
  int64_t stride_k, stride_n;
  const int64_t *k_map, *n_map;
};

// Packs every operand into one tensor (returned: it owns the packed data), each 64-byte
// aligned; in bf16 or int8 (T = float) with `precision`, else in T.
template <typename T>
Tensor pack_operands(const std::vector<PackSpec<T>>& specs, Precision precision) {
  if constexpr (std::is_same_v<T, float>) {
    if (precision != Precision::f32) {
      int64_t bytes = 0;  // packed_lowp_bytes is a multiple of 64
      for (const PackSpec<T>& s : specs)
        bytes += cpu::packed_lowp_bytes(precision, s.K, s.N, s.panel);
      Tensor storage = Tensor::empty({bytes / 4}, DType::f32);
      char* dst = static_cast<char*>(storage.raw_data());
      for (const PackSpec<T>& s : specs) {
        *s.out = cpu::pack_b_lowp(precision, s.K, s.N, s.panel, s.src, s.stride_k, s.stride_n,
                                  s.k_map, s.n_map, dst);
        dst += cpu::packed_lowp_bytes(precision, s.K, s.N, s.panel);
      }
      return storage;
    }
  }
  int64_t total = 0;
  for (const PackSpec<T>& s : specs) total += cpu::packed_size<T>(s.K, s.N, s.panel);
  Tensor storage = Tensor::empty({total}, dtype_of<T>());
  T* dst = storage.template data<T>();
  for (const PackSpec<T>& s : specs) {
    *s.out = cpu::pack_b_for_target<T>(s.K, s.N, s.panel, s.src, s.stride_k, s.stride_n, s.k_map,
                                       s.n_map, dst);
    dst += cpu::packed_size<T>(s.K, s.N, s.panel);  // each panel row is 64-byte aligned
  }
  return storage;
}

// The GEMM kernels one run uses: optimized, or the reference twins when the switch is on. The
// cells' kernel sets (GruKernels, LstmKernels) add their gate kernels to these.
template <typename T>
struct GemmKernels {
  bool reference;
  decltype(&cpu::gemm_packed<T>) gemm_fn;
  // cpu::gemm_packed or its twin, for panels [p0, p1) of B.
  void gemm(int64_t M, const T* A, int64_t lda, bool ta, const cpu::PackedB<T>& B, const T* bias,
            bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1, int64_t step = 0) const {
    gemm_fn(M, A, lda, ta, B, bias, accumulate, C, ldc, p0, p1, step);
  }
  // The whole product: split over threads (optimized) or one loop (reference).
  void gemm_all(int64_t M, const T* A, int64_t lda, bool ta, const cpu::PackedB<T>& B,
                const T* bias, bool accumulate, T* C, int64_t ldc) const {
    if (reference)
      cpu::ref::gemm_packed<T>(M, A, lda, ta, B, bias, accumulate, C, ldc, 0, B.panels());
    else
      cpu::gemm_packed_parallel<T>(M, A, lda, ta, B, bias, accumulate, C, ldc);
  }
  // C = A^T B in bf16 (cpu::gemm_at_b_bf16 or its twin): bf16 training's weight gradients.
  void gemm_at_b_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                      int64_t ldb, const int64_t* b_rows, float* C, int64_t ldc) const {
    (reference ? cpu::ref::gemm_at_b_bf16 : cpu::gemm_at_b_bf16)(M, N, K, A, lda, B, ldb, b_rows,
                                                                 false, C, ldc);
  }
};

template <typename T>
GemmKernels<T> gemm_kernels() {
  if (reference_kernels()) return {true, &cpu::ref::gemm_packed<T>};
  return {false, &cpu::gemm_packed<T>};
}

// What walk_layer_forward needs to know of a layer-direction.
struct WalkShape {
  int64_t units;             // H: the hidden units the team splits
  int64_t width;             // columns of a state row: H, or a projection's size
  int64_t in;                // columns of an input row
  int64_t G;                 // gate columns of a row of g
  int64_t panels_per_block;  // panels of the input projection per unit block (GRU 1, LSTM 2)
  bool keep_gates;           // training: g keeps every step's rows (no chunks)
};

// Forward over all steps of one layer-direction, the part every cell shares: the input
// projection g = x W_ih^T + b_ih and the walk over time, on a team of threads that each own
// a share of the units. For each step s, on every member: step(me, s, o, h_prev, ldh, h,
// sync_end, index), with o = lay.off[s] (the step's first packed row: its gates are g + o G),
// h_prev the previous states (h0s at step 0), h where the step writes its states (rows ldh
// apart), sync_end false at the last step (whose region's end synchronizes anyway) and index
// = step0 + s (cpu::gemm_packed's `step`).
//   xp (rows x in): packed input; h0s (N rows): initial states in sorted order; hs (rows x
//   width): every step's states. With `io` (a layout of one length only) xp and hs are not
//   used: io says where the steps' rows are, with the same bits.
template <typename T, typename Step>
void walk_layer_forward(const GemmKernels<T>& k, const cpu::PackedB<T>& ih, const T* b_ih,
                        const WalkShape& w, const SeqLayout& lay, const T* xp, const T* h0s, T* g,
                        T* hs, ThreadTeam* team, int max_threads, const DenseIo<T>* io,
                        int64_t step0, Step step) {
  // The shape in locals: the lambdas below read them on every row and step.
  const int64_t G = w.G, in = w.in, width = w.width, ppb = w.panels_per_block;
  const int64_t rows = lay.rows(), N = lay.N, S = lay.S;
  const int64_t* off = lay.off.data();
  GRUX_ASSERT(!io || rows == S * N);
  // The input rows of packed row r (consecutive from r for `run` rows), and step s's states.
  const int64_t ldx = io ? io->ldx : in, ldh = io ? io->ldh : width;
  const int64_t x_step = io && io->x_step ? io->x_step : N * ldx;
  const int64_t h_step = io && io->h_step ? io->h_step : N * ldh;
  const int64_t run = io && (io->reverse || x_step != N * ldx) ? N : rows;
  const auto x_row = [&](int64_t r) {
    if (!io) return xp + r * in;
    const int64_t s = r / N;
    return io->x + (io->reverse ? S - 1 - s : s) * x_step + (r % N) * ldx;
  };
  const auto states = [&](int64_t s) {
    return io ? io->h + (io->reverse ? S - 1 - s : s) * h_step : hs + off[s] * width;
  };
  // Each thread owns a share of the hidden units: its columns of W_ih and W_hh stay hot in
  // its own cache, and its gates need no other thread's projection.
  const int64_t panels = ih.panels();
  run_team(team, w.units, cpu::kUnit<T>, max_threads, [&](const TeamShare& me) {
    const int64_t p0 = me.b0 * ppb, p1 = std::min(me.b1 * ppb, panels);
    // 1. Input projection (for my units): g = xp W_ih^T + b_ih, in row blocks that leave my
    //    panels in L2 from one block to the next, never across a run of consecutive rows.
    const int64_t row_block = cpu::gemm_row_block(ih, p0, p1, in, sizeof(T));
    const auto project = [&](int64_t ra, int64_t rb) {
      for (int64_t m0 = ra; m0 < rb;) {
        const int64_t m1 = std::min({m0 + row_block, rb, (m0 / run + 1) * run});
        k.gemm(m1 - m0, x_row(m0), ldx, false, ih, b_ih, false, g + m0 * G, G, p0, p1);
        m0 = m1;
      }
    };
    // 2. The recurrence; the active rows of step s are a prefix of those of step s - 1. Steps
    //    in chunks, each projected just before it runs, whose rows of g take at most a
    //    quarter of the L2 (at least one step): a chunk's g is read back by the gates while
    //    it is still in cache, not from memory. Only this thread reads its units' columns of
    //    g, so no barrier. (GRU W3, 39 MB of g: bf16 and int8 about 10% faster, f32 2%.)
    //    Inference only: training keeps every step's gates in g for the backward pass, and
    //    its step (GRU W4) runs 2-7% slower in chunks.
    const int64_t chunk_rows =
        w.keep_gates ? rows : cpu::l2_cache_bytes() / 4 / (G * int64_t(sizeof(T)));
    for (int64_t s0 = 0; s0 < S;) {
      int64_t s1 = s0 + 1;
      while (s1 < S && off[s1 + 1] - off[s0] <= chunk_rows) ++s1;
      project(off[s0], off[s1]);
      for (int64_t s = s0; s < s1; ++s)
        step(me, s, off[s], s == 0 ? h0s : states(s - 1), ldh, states(s), s + 1 < S, step0 + s);
      s0 = s1;
    }
  });
}

// out[c] = sum over rows of m[r, c] (rows x C); each column summed in row order, so the same
// result on any number of threads.
template <typename T>
void column_sums(int64_t rows, int64_t C, const T* m, T* out) {
  std::fill(out, out + C, T(0));
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

// A^T B over all rows: C (M x N) = A^T (A: rows x M, row stride lda) times B (rows x N, row
// stride ldb (0: N); row r of B is row b_rows[r] of `B` when b_rows is given).
// With `bf16` (a bf16-trained layer) both operands are rounded to bf16, the sums kept in f32.
template <typename T>
void gradient_gemm(const GemmKernels<T>& k, bool bf16, int64_t rows, int64_t M, const T* A,
                   int64_t lda, int64_t N, const T* B, T* C, const int64_t* b_rows = nullptr,
                   int64_t ldb = 0) {
  if (ldb == 0) ldb = N;
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return k.gemm_at_b_bf16(M, N, rows, A, lda, B, ldb, b_rows, C, N);
  }
  const int64_t panel = cpu::gemm_panel_for<T>(N);
  Tensor packed = Tensor::empty({cpu::packed_size<T>(rows, N, panel)}, dtype_of<T>());
  k.gemm_all(
      M, A, lda, true,
      cpu::pack_b_for_target<T>(rows, N, panel, B, ldb, 1, b_rows, nullptr, packed.data<T>()),
      nullptr, false, C, N);
}

}  // namespace grux::ops
