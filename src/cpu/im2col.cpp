// im2col / col2im and the GEMM-based conv2d forward and backward. Rows of the column matrix
// are ordered (c, kh, kw), so a group's rows are contiguous and each group is one GEMM.
#include "cpu/im2col.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "cpu/gemm_tiled.h"

namespace grux::cpu {

namespace {

// Output columns [lo, hi) whose input column iw = ow*S + off lies in [0, W).
struct Span {
  int64_t lo, hi;
};
Span valid_span(int64_t off, int64_t S, int64_t W, int64_t OW) {
  const int64_t lo = std::min(OW, off >= 0 ? int64_t(0) : (-off + S - 1) / S);
  const int64_t hi = W - off <= 0 ? 0 : std::min(OW, (W - off + S - 1) / S);
  return {lo, std::max(lo, hi)};
}

// Images [first, last) of chunk p when N images are split into P near-equal chunks.
int64_t chunk_begin(int64_t p, int64_t N, int64_t P) {
  return p * N / P;
}

}  // namespace

template <typename T>
void im2col(const ConvGeom& g, const T* x, T* col, bool parallel) {
  const int64_t C = g.C, H = g.H, W = g.W, KH = g.KH, KW = g.KW, OH = g.OH, OW = g.OW;
  const int64_t P = g.out_pixels();
#pragma omp parallel for schedule(static) if (parallel && C > 1)
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        T* row = col + ((c * KH + kh) * KW + kw) * P;
        const int64_t off = kw * g.DW - g.PW;
        const Span s = valid_span(off, g.SW, W, OW);
        for (int64_t oh = 0; oh < OH; ++oh) {
          T* dst = row + oh * OW;
          const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
          if (ih < 0 || ih >= H) {
            std::fill(dst, dst + OW, T(0));
            continue;
          }
          const T* src = x + (c * H + ih) * W + off;
          std::fill(dst, dst + s.lo, T(0));
          if (g.SW == 1)
            std::memcpy(dst + s.lo, src + s.lo, (s.hi - s.lo) * sizeof(T));
          else
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow] = src[ow * g.SW];
          std::fill(dst + s.hi, dst + OW, T(0));
        }
      }
  }
}

template <typename T>
void col2im(const ConvGeom& g, const T* col, T* x, bool parallel) {
  const int64_t C = g.C, H = g.H, W = g.W, KH = g.KH, KW = g.KW, OH = g.OH, OW = g.OW;
  const int64_t P = g.out_pixels();
  // Each channel's plane is written only by its own rows: channels are independent.
#pragma omp parallel for schedule(static) if (parallel && C > 1)
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const T* row = col + ((c * KH + kh) * KW + kw) * P;
        const int64_t off = kw * g.DW - g.PW;
        const Span s = valid_span(off, g.SW, W, OW);
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
          if (ih < 0 || ih >= H) continue;
          const T* src = row + oh * OW;
          T* dst = x + (c * H + ih) * W + off;
          if (g.SW == 1)
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow] += src[ow];
          else
            for (int64_t ow = s.lo; ow < s.hi; ++ow) dst[ow * g.SW] += src[ow];
        }
      }
  }
}

Im2colPlan im2col_plan(const ConvGeom& g, int threads) {
  // Measured (bench_conv, 2 cores): with at least one image per thread, dealing images to
  // threads beats threading inside each GEMM (the per-image GEMMs are thin: D/G rows), and
  // im2col / col2im then run in parallel too. With fewer images than threads, thread inside.
  Im2colPlan p;
  p.threads = std::max(1, threads);
  p.batch_parallel = p.threads == 1 || g.N >= p.threads;
  return p;
}

int64_t im2col_workspace_size(const ConvGeom& g, const Im2colPlan& plan, bool backward) {
  const int64_t slots = plan.batch_parallel ? plan.threads : 1;
  const int64_t col = g.pointwise() ? 0 : g.C * g.KH * g.KW * g.out_pixels();
  int64_t n = slots * col;
  if (backward) n += std::min(g.N, kWeightChunks) * g.D * g.Kg();  // weight-gradient partials
  return n;
}

template <typename T>
void conv2d_forward_im2col(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                           const Im2colPlan& plan) {
  const int64_t C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg(), P = g.out_pixels();
  const int64_t col_size = g.pointwise() ? 0 : C * g.KH * g.KW * P;
  // One image: columns, then per group y_n,g = w_g * col_g, onto the bias (beta = 1).
  auto image = [&](int64_t n, T* col, bool inner_parallel) {
    const T* xn = x + n * C * g.in_pixels();
    T* yn = y + n * D * P;
    if (g.pointwise())
      col = const_cast<T*>(xn);  // the image is its own column matrix; read only
    else
      im2col(g, xn, col, inner_parallel);
    for (int64_t d = 0; d < D; ++d) std::fill(yn + d * P, yn + (d + 1) * P, b ? b[d] : T(0));
    for (int64_t gr = 0; gr < G; ++gr)
      gemm_tiled<T>(false, false, Dg, P, Kg, T(1), w + gr * Dg * Kg, Kg, col + gr * Kg * P, P, T(1),
                    yn + gr * Dg * P, P, inner_parallel);
  };
  if (plan.batch_parallel) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
    for (int64_t n = 0; n < g.N; ++n) image(n, work + omp_get_thread_num() * col_size, false);
  } else {
    for (int64_t n = 0; n < g.N; ++n) image(n, work, true);
  }
}

template <typename T>
void conv2d_backward_im2col(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                            T* db, T* work, const Im2colPlan& plan) {
  const int64_t N = g.N, C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg();
  const int64_t P = g.out_pixels(), HW = g.in_pixels();
  const int64_t col_size = g.pointwise() ? 0 : C * g.KH * g.KW * P;
  const int64_t slots = plan.batch_parallel ? plan.threads : 1;
  const int64_t chunks = std::min(N, kWeightChunks);
  T* partials = work + slots * col_size;  // (chunks, D, Kg)

  // One image: dw partial of its chunk (from the columns), then dx through dcol (reusing the
  // same buffer: the columns are no longer needed once the weight GEMM has read them).
  auto image = [&](int64_t n, bool first_in_chunk, T* part, T* col, bool inner_parallel) {
    const T* xn = x + n * C * HW;
    const T* dyn = dy + n * D * P;
    if (dw) {
      const T* cols = xn;
      if (!g.pointwise()) {
        im2col(g, xn, col, inner_parallel);
        cols = col;
      }
      for (int64_t gr = 0; gr < G; ++gr)
        gemm_tiled<T>(false, true, Dg, Kg, P, T(1), dyn + gr * Dg * P, P, cols + gr * Kg * P, P,
                      first_in_chunk ? T(0) : T(1), part + gr * Dg * Kg, Kg, inner_parallel);
    }
    if (dx) {
      T* dxn = dx + n * C * HW;
      // Pointwise: dx_n is dcol_n itself, written directly by the GEMM.
      T* dcol = g.pointwise() ? dxn : col;
      for (int64_t gr = 0; gr < G; ++gr)
        gemm_tiled<T>(true, false, Kg, P, Dg, T(1), w + gr * Dg * Kg, Kg, dyn + gr * Dg * P, P,
                      T(0), dcol + gr * Kg * P, P, inner_parallel);
      if (!g.pointwise()) {
        std::fill(dxn, dxn + C * HW, T(0));
        col2im(g, dcol, dxn, inner_parallel);
      }
    }
  };
  auto chunk = [&](int64_t p, T* col, bool inner_parallel) {
    const int64_t n0 = chunk_begin(p, N, chunks), n1 = chunk_begin(p + 1, N, chunks);
    for (int64_t n = n0; n < n1; ++n) image(n, n == n0, partials + p * D * Kg, col, inner_parallel);
  };
  if (plan.batch_parallel) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
    for (int64_t p = 0; p < chunks; ++p) chunk(p, work + omp_get_thread_num() * col_size, false);
  } else {
    for (int64_t p = 0; p < chunks; ++p) chunk(p, work, true);
  }

  if (dw) {
    // The chunks' partial sums, always added in chunk order (same result on any thread count).
    const int64_t WN = D * Kg;
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (WN > 4096)
    for (int64_t i = 0; i < WN; ++i) {
      T s = partials[i];
      for (int64_t p = 1; p < chunks; ++p) s += partials[p * WN + i];
      dw[i] = s;
    }
  }
  if (db) {
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (N * D * P > 65536)
    for (int64_t d = 0; d < D; ++d) {
      T s = 0;
      for (int64_t n = 0; n < N; ++n) {
        const T* row = dy + (n * D + d) * P;
        for (int64_t i = 0; i < P; ++i) s += row[i];
      }
      db[d] = s;
    }
  }
}

#define GRUX_INSTANTIATE(T)                                                                      \
  template void im2col<T>(const ConvGeom&, const T*, T*, bool);                                  \
  template void col2im<T>(const ConvGeom&, const T*, T*, bool);                                  \
  template void conv2d_forward_im2col<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*,  \
                                         const Im2colPlan&);                                     \
  template void conv2d_backward_im2col<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*, \
                                          T*, T*, const Im2colPlan&);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu
