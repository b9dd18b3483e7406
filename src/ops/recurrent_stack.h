// The layer-stack level every recurrent driver (gru.cpp, lstm.cpp) shares: moving rows between
// the caller's time-major (T, N, C) arrays and a layer's packed rows (ops/recurrent_layer.h),
// the state rows of h0 / h_n in sorted order, and dropout between layers.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "grux/gru.h"
#include "ops/recurrent_layer.h"

namespace grux::ops {

// Both copies below walk the (time, sequence) pairs time step by time step, the steps dealt
// to the threads in turn (schedule(static, 1)): with lengths, early steps hold more valid rows
// than late ones, and contiguous blocks of steps would leave one thread most of the work.
// pos[n]: sorted position of sequence n; packed row of (t, n) = off[s] + pos[n], s the step.
inline std::vector<int64_t> sorted_positions(const SeqLayout& lay) {
  std::vector<int64_t> pos(lay.N);
  for (int64_t j = 0; j < lay.N; ++j) pos[lay.perm[j]] = j;
  return pos;
}

// dst (rows x C) <- src (T, N, >= c0 + C) columns [c0, c0 + C), in packed order of `dir`.
template <typename T>
void gather_packed(const SeqLayout& lay, int dir, const Tensor& src, int64_t c0, int64_t C,
                   T* dst) {
  const T* base = src.data<T>();
  const int64_t st0 = src.stride(0), st1 = src.stride(1), st2 = src.stride(2);
  const std::vector<int64_t> pos = sorted_positions(lay);
#pragma omp parallel for schedule(static, 1) if (lay.rows() * C > (1 << 17))
  for (int64_t t = 0; t < lay.S; ++t) {
    for (int64_t n = 0; n < lay.N; ++n) {
      if (t >= lay.len[n]) continue;
      const T* p = base + t * st0 + n * st1 + c0 * st2;
      T* q = dst + (lay.off[lay.step(t, n, dir)] + pos[n]) * C;
      if (st2 == 1)
        std::memcpy(q, p, C * sizeof(T));
      else
        for (int64_t c = 0; c < C; ++c) q[c] = p[c * st2];
    }
  }
}

// dst (T, N, CC) contiguous, columns [c0, c0 + C) <- (or +=) src (rows x C) packed. Without
// `accumulate`, the padding rows' columns (t >= len[n]) are set to zero.
template <typename T>
void scatter_packed(const SeqLayout& lay, int dir, const T* src, int64_t C, T* dst, int64_t CC,
                    int64_t c0, bool accumulate) {
  const std::vector<int64_t> pos = sorted_positions(lay);
#pragma omp parallel for schedule(static, 1) if (lay.T * lay.N * C > (1 << 17))
  for (int64_t t = 0; t < lay.T; ++t) {
    for (int64_t n = 0; n < lay.N; ++n) {
      T* q = dst + (t * lay.N + n) * CC + c0;
      if (t >= lay.len[n]) {
        if (!accumulate) std::memset(q, 0, C * sizeof(T));
        continue;
      }
      const T* p = src + (lay.off[lay.step(t, n, dir)] + pos[n]) * C;
      if (accumulate)
        for (int64_t c = 0; c < C; ++c) q[c] += p[c];
      else
        std::memcpy(q, p, C * sizeof(T));
    }
  }
}

// Packed row of sequence perm[j]'s last valid step (the same in both directions).
inline int64_t last_row(const SeqLayout& lay, int64_t j) {
  return lay.off[lay.len[lay.perm[j]] - 1] + j;
}

// For each sorted position j: dst row += src (N, H) row perm[j]. dst rows are consecutive
// (N rows, ld apart; 0: H), or, with at_last_step, each sequence's last packed row of a
// (rows x H) buffer.
template <typename T>
void add_sorted_rows(const SeqLayout& lay, const Tensor& src, T* dst, bool at_last_step = false,
                     int64_t ld = 0) {
  const T* base = src.data<T>();
  const int64_t H = src.size(1), s0 = src.stride(0), s1 = src.stride(1);
  if (ld == 0) ld = H;
  for (int64_t j = 0; j < lay.N; ++j) {
    const T* p = base + lay.perm[j] * s0;
    T* q = dst + (at_last_step ? last_row(lay, j) * H : j * ld);
    for (int64_t h = 0; h < H; ++h) q[h] += p[h * s1];
  }
}

// Inverted dropout on a layer's output (T, N, C) in place: keeps each element with
// probability 1 - p and scales kept ones by 1 / (1 - p). The draws run over the whole batch
// (T, share.of, C) in order and this batch keeps its share's (BatchShare), so K processes
// drop what one would. Returns the mask (scale or 0 per element) for backward.
template <typename T>
Tensor apply_dropout(Tensor& out, double p, std::mt19937_64& rng, BatchShare share) {
  const int64_t T_ = out.size(0), N = out.size(1), row = out.size(2);
  Tensor mask = Tensor::empty(out.shape(), out.dtype());
  std::bernoulli_distribution keep(1.0 - p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const int64_t all = share.of > 0 ? share.of : N;
  T* m = mask.data<T>();
  T* o = out.data<T>();
  for (int64_t t = 0; t < T_; ++t)
    for (int64_t n = 0; n < all; ++n) {
      const int64_t j = n - share.first;
      if (j < 0 || j >= N) {
        for (int64_t e = 0; e < row; ++e) keep(rng);
        continue;
      }
      const int64_t i0 = (t * N + j) * row;
      for (int64_t e = 0; e < row; ++e) {
        m[i0 + e] = keep(rng) ? scale : T(0);
        o[i0 + e] *= m[i0 + e];
      }
    }
  return mask;
}

}  // namespace grux::ops
