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

namespace {

// Calls fn(oh, ow0, ow1, q) for the part of output row oh inside pixels [p0, p1): columns
// [ow0, ow1) of that row, which sit at column q of the block.
template <typename Fn>
void for_each_row_piece(const ConvGeom& g, int64_t p0, int64_t p1, Fn fn) {
  for (int64_t oh = p0 / g.OW; oh * g.OW < p1; ++oh) {
    const int64_t ow0 = std::max<int64_t>(0, p0 - oh * g.OW);
    const int64_t ow1 = std::min(g.OW, p1 - oh * g.OW);
    fn(oh, ow0, ow1, oh * g.OW + ow0 - p0);
  }
}

}  // namespace

template <typename T>
void im2col(const ConvGeom& g, const T* x, int64_t p0, int64_t p1, T* col) {
  const int64_t C = g.C, H = g.H, W = g.W, KH = g.KH, KW = g.KW, ld = p1 - p0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        T* row = col + ((c * KH + kh) * KW + kw) * ld;
        const int64_t off = kw * g.DW - g.PW;
        const Span s = valid_span(off, g.SW, W, g.OW);
        for_each_row_piece(g, p0, p1, [&](int64_t oh, int64_t ow0, int64_t ow1, int64_t q) {
          T* dst = row + q - ow0;  // dst[ow] is column ow of this output row
          const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
          if (ih < 0 || ih >= H) {
            std::fill(dst + ow0, dst + ow1, T(0));
            return;
          }
          const int64_t lo = std::clamp(s.lo, ow0, ow1), hi = std::clamp(s.hi, lo, ow1);
          const T* src = x + (c * H + ih) * W + off;
          std::fill(dst + ow0, dst + lo, T(0));
          if (g.SW == 1)
            std::memcpy(dst + lo, src + lo, (hi - lo) * sizeof(T));
          else
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * g.SW];
          std::fill(dst + hi, dst + ow1, T(0));
        });
      }
}

template <typename T>
void col2im(const ConvGeom& g, const T* col, int64_t p0, int64_t p1, T* x) {
  const int64_t C = g.C, H = g.H, W = g.W, KH = g.KH, KW = g.KW, ld = p1 - p0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const T* row = col + ((c * KH + kh) * KW + kw) * ld;
        const int64_t off = kw * g.DW - g.PW;
        const Span s = valid_span(off, g.SW, W, g.OW);
        for_each_row_piece(g, p0, p1, [&](int64_t oh, int64_t ow0, int64_t ow1, int64_t q) {
          const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
          if (ih < 0 || ih >= H) return;
          const T* src = row + q - ow0;
          T* dst = x + (c * H + ih) * W + off;
          const int64_t lo = std::clamp(s.lo, ow0, ow1), hi = std::clamp(s.hi, lo, ow1);
          if (g.SW == 1)
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] += src[ow];
          else
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow * g.SW] += src[ow];
        });
      }
}

Im2colPlan im2col_plan(const ConvGeom& g, int threads) {
  Im2colPlan p;
  // Measured (bench_conv, 2 shared cores): dealing images to threads beats threading inside
  // each GEMM by far here (the per-image GEMMs are thin, and every extra parallel region
  // waits for a core shared with other work), so a batch of one runs on one thread.
  p.threads = static_cast<int>(std::clamp<int64_t>(g.N, 1, std::max(1, threads)));
  // Up to 4 MiB of f32 columns per block (L3-resident), 256..4096 pixels: fewer, larger GEMM
  // calls amortise the BLAS's per-call packing, which dominated with 1 MiB blocks on thin
  // problems (n8c16h64w64d32k3 forward + backward: 6.4 -> 5.45 ms at 2 threads; the ResNet-like
  // n8c64h56w56d64k3p1 unchanged at 26.8 ms).
  const int64_t bytes_per_pixel = g.C * g.KH * g.KW * 4;
  p.block = std::clamp<int64_t>((int64_t(4) << 20) / bytes_per_pixel / 16 * 16, 256, 4096);
  if (g.pointwise()) p.block = g.out_pixels();  // no columns: the image is read in place
  p.block = std::min(p.block, g.out_pixels());
  return p;
}

int64_t im2col_workspace_size(const ConvGeom& g, const Im2colPlan& plan, bool backward) {
  const int64_t col = g.pointwise() ? 0 : g.C * g.KH * g.KW * plan.block;
  int64_t n = plan.threads * col;
  if (backward) n += std::min(g.N, kWeightChunks) * g.D * g.Kg();  // weight-gradient partials
  return n;
}

template <typename T>
void conv2d_forward_im2col(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                           const Im2colPlan& plan) {
  const int64_t C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg(), P = g.out_pixels();
  const int64_t col_size = g.pointwise() ? 0 : C * g.KH * g.KW * plan.block;
  // One image: the bias, then block by block the columns and per group
  // y_n,g[:, B] += w_g * col_g (beta = 1 onto the bias).
  auto image = [&](int64_t n, T* col) {
    const T* xn = x + n * C * g.in_pixels();
    T* yn = y + n * D * P;
    for (int64_t d = 0; d < D; ++d) std::fill(yn + d * P, yn + (d + 1) * P, b ? b[d] : T(0));
    for (int64_t p0 = 0; p0 < P; p0 += plan.block) {
      const int64_t p1 = std::min(P, p0 + plan.block), pb = p1 - p0;
      const T* cols = xn + p0;  // pointwise: the image is its own column matrix (ld P)
      int64_t ld = P;
      if (!g.pointwise()) {
        im2col(g, xn, p0, p1, col);
        cols = col;
        ld = pb;
      }
      for (int64_t gr = 0; gr < G; ++gr)
        gemm_tiled<T>(false, false, Dg, pb, Kg, T(1), w + gr * Dg * Kg, Kg, cols + gr * Kg * ld, ld,
                      T(1), yn + gr * Dg * P + p0, P, false);
    }
  };
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
  for (int64_t n = 0; n < g.N; ++n) image(n, work + omp_get_thread_num() * col_size);
}

template <typename T>
void conv2d_backward_im2col(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                            T* db, T* work, const Im2colPlan& plan) {
  const int64_t N = g.N, C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg();
  const int64_t P = g.out_pixels(), HW = g.in_pixels();
  const int64_t col_size = g.pointwise() ? 0 : C * g.KH * g.KW * plan.block;
  const int64_t chunks = std::min(N, kWeightChunks);
  T* partials = work + plan.threads * col_size;  // (chunks, D, Kg)

  // One image, block by block: the dw partial of its chunk (from the block's columns), then
  // dx through dcol in the same buffer (the columns are not needed once the weight GEMM has
  // read them).
  auto image = [&](int64_t n, bool first_in_chunk, T* part, T* col) {
    const T* xn = x + n * C * HW;
    const T* dyn = dy + n * D * P;
    T* dxn = dx ? dx + n * C * HW : nullptr;
    if (dxn && !g.pointwise()) std::fill(dxn, dxn + C * HW, T(0));
    for (int64_t p0 = 0; p0 < P; p0 += plan.block) {
      const int64_t p1 = std::min(P, p0 + plan.block), pb = p1 - p0;
      if (dw) {
        const T* cols = xn + p0;
        int64_t ld = P;
        if (!g.pointwise()) {
          im2col(g, xn, p0, p1, col);
          cols = col;
          ld = pb;
        }
        const T beta = first_in_chunk && p0 == 0 ? T(0) : T(1);
        for (int64_t gr = 0; gr < G; ++gr)
          gemm_tiled<T>(false, true, Dg, Kg, pb, T(1), dyn + gr * Dg * P + p0, P,
                        cols + gr * Kg * ld, ld, beta, part + gr * Dg * Kg, Kg, false);
      }
      if (dxn) {
        // Pointwise: dx_n is dcol_n itself, written directly by the GEMM.
        T* dcol = g.pointwise() ? dxn + p0 : col;
        const int64_t ld = g.pointwise() ? P : pb;
        for (int64_t gr = 0; gr < G; ++gr)
          gemm_tiled<T>(true, false, Kg, pb, Dg, T(1), w + gr * Dg * Kg, Kg, dyn + gr * Dg * P + p0,
                        P, T(0), dcol + gr * Kg * ld, ld, false);
        if (!g.pointwise()) col2im(g, dcol, p0, p1, dxn);
      }
    }
  };
  // Chunks are dealt to threads; the chunk -> images map depends on N only.
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
  for (int64_t p = 0; p < chunks; ++p) {
    T* col = work + omp_get_thread_num() * col_size;
    const int64_t n0 = chunk_begin(p, N, chunks), n1 = chunk_begin(p + 1, N, chunks);
    for (int64_t n = n0; n < n1; ++n) image(n, n == n0, partials + p * D * Kg, col);
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
  template void im2col<T>(const ConvGeom&, const T*, int64_t, int64_t, T*);                      \
  template void col2im<T>(const ConvGeom&, const T*, int64_t, int64_t, T*);                      \
  template void conv2d_forward_im2col<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*,  \
                                         const Im2colPlan&);                                     \
  template void conv2d_backward_im2col<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*, \
                                          T*, T*, const Im2colPlan&);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu
