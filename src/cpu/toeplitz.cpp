// The Toeplitz formulation of conv2d: build the filter's matrix, then the convolution of the
// whole batch is one GEMM (forward), its transpose (grad_input), an outer product (grad_weight).
// The GEMMs (cpu/gemm.h) give the same bits on any thread count.
#include "cpu/toeplitz.h"

#include <algorithm>
#include <cstring>

#include "cpu/gemm.h"

namespace grux::cpu {

int64_t toeplitz_rows(const ConvGeom& g) {
  return g.D * g.OH * g.OW;
}
int64_t toeplitz_cols(const ConvGeom& g) {
  return g.C * (g.H + 2 * g.PH) * (g.W + 2 * g.PW);
}
int64_t toeplitz_workspace_size(const ConvGeom& g) {
  return toeplitz_rows(g) * toeplitz_cols(g) + g.N * toeplitz_cols(g);
}

namespace {

// Visits every non-zero entry of the matrix: fn(row, col, weight index). Rows and columns as
// in toeplitz.h; the loops run over output pixels and filter taps, one filter (d, c) at a time.
template <typename Fn>
void for_each_tap(const ConvGeom& g, int64_t d, Fn fn) {
  const int64_t HP = g.H + 2 * g.PH, WP = g.W + 2 * g.PW, Cg = g.Cg();
  const int64_t c0 = (d / g.Dg()) * Cg;
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.SH + kh * g.DH;  // padded coordinates: always inside
        for (int64_t ow = 0; ow < g.OW; ++ow)
          for (int64_t kw = 0; kw < g.KW; ++kw) {
            const int64_t iw = ow * g.SW + kw * g.DW;
            fn((d * g.OH + oh) * g.OW + ow, ((c0 + c) * HP + ih) * WP + iw,
               ((d * Cg + c) * g.KH + kh) * g.KW + kw);
          }
      }
}

}  // namespace

template <typename T>
void toeplitz_build(const ConvGeom& g, const T* w, T* mat) {
  const int64_t K = toeplitz_cols(g), rows_per_d = g.OH * g.OW;
#pragma omp parallel for schedule(static)
  for (int64_t d = 0; d < g.D; ++d) {
    std::fill(mat + d * rows_per_d * K, mat + (d + 1) * rows_per_d * K, T(0));
    for_each_tap(g, d, [&](int64_t r, int64_t c, int64_t wi) { mat[r * K + c] = w[wi]; });
  }
}

template <typename T>
void pad_images(const ConvGeom& g, const T* x, T* xpad) {
  const int64_t HP = g.H + 2 * g.PH, WP = g.W + 2 * g.PW;
#pragma omp parallel for schedule(static) if (g.N * g.C > 1)
  for (int64_t nc = 0; nc < g.N * g.C; ++nc) {
    T* dst = xpad + nc * HP * WP;
    std::fill(dst, dst + HP * WP, T(0));
    for (int64_t h = 0; h < g.H; ++h)
      std::memcpy(dst + (h + g.PH) * WP + g.PW, x + (nc * g.H + h) * g.W, g.W * sizeof(T));
  }
}

template <typename T>
void crop_images(const ConvGeom& g, const T* xpad, T* x) {
  const int64_t HP = g.H + 2 * g.PH, WP = g.W + 2 * g.PW;
#pragma omp parallel for schedule(static) if (g.N * g.C > 1)
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t h = 0; h < g.H; ++h)
      std::memcpy(x + (nc * g.H + h) * g.W, xpad + nc * HP * WP + (h + g.PH) * WP + g.PW,
                  g.W * sizeof(T));
}

template <typename T>
void conv2d_forward_toeplitz(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work) {
  const int64_t R = toeplitz_rows(g), K = toeplitz_cols(g), P = g.out_pixels();
  T* mat = work;
  T* xpad = work + R * K;
  toeplitz_build(g, w, mat);
  pad_images(g, x, xpad);
  // Each image is a vector of length K; the batch is N such rows: Y = Xpad M^T.
  gemm<T>(false, true, g.N, R, K, xpad, K, mat, K, nullptr, false, y, R);
  if (b)
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t d = 0; d < g.D; ++d)
        for (int64_t i = 0; i < P; ++i) y[(n * g.D + d) * P + i] += b[d];
}

template <typename T>
void conv2d_backward_toeplitz(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                              T* db, T* work) {
  const int64_t R = toeplitz_rows(g), K = toeplitz_cols(g), P = g.out_pixels();
  T* mat = work;  // first dM (when dw is wanted), then M (when dx is)
  T* xpad = work + R * K;
  if (dw) {
    pad_images(g, x, xpad);
    gemm<T>(true, false, R, K, g.N, dy, R, xpad, K, nullptr, false, mat, K);  // dM = dY^T Xpad
    std::fill(dw, dw + g.D * g.Kg(), T(0));
    // Filters d own disjoint rows and weights: parallel over d, each gathers its own taps.
#pragma omp parallel for schedule(static)
    for (int64_t d = 0; d < g.D; ++d)
      for_each_tap(g, d, [&](int64_t r, int64_t c, int64_t wi) { dw[wi] += mat[r * K + c]; });
  }
  if (dx) {
    toeplitz_build(g, w, mat);
    gemm<T>(false, false, g.N, K, R, dy, R, mat, K, nullptr, false, xpad, K);  // dXpad = dY M
    crop_images(g, xpad, dx);
  }
  if (db)
    for (int64_t d = 0; d < g.D; ++d) {
      T s = 0;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t i = 0; i < P; ++i) s += dy[(n * g.D + d) * P + i];
      db[d] = s;
    }
}

#define GRUX_INSTANTIATE(T)                                                                        \
  template void toeplitz_build<T>(const ConvGeom&, const T*, T*);                                  \
  template void pad_images<T>(const ConvGeom&, const T*, T*);                                      \
  template void crop_images<T>(const ConvGeom&, const T*, T*);                                     \
  template void conv2d_forward_toeplitz<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*); \
  template void conv2d_backward_toeplitz<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*, \
                                            T*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu
