// The GEMM-based conv2d forward and backward: for stride 1 on shifted views of the image (grux's
// packed GEMM reads the column matrix in place), otherwise through im2col / col2im and cpu::gemm.
// Rows of the column matrix are ordered (c, kh, kw), so a group's rows are contiguous and each
// group is one GEMM.
#include "cpu/im2col.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"

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

// ---- Strided convolutions: column blocks and GEMMs -------------------------------------

namespace {

// Output pixels per column block: up to 4 MiB of f32 columns (L3-resident), 256..4096 pixels;
// fewer, larger GEMM calls amortise the GEMM's per-call packing.
int64_t column_block(const ConvGeom& g) {
  const int64_t bytes_per_pixel = g.C * g.KH * g.KW * 4;
  const int64_t block =
      std::clamp<int64_t>((int64_t(4) << 20) / bytes_per_pixel / 16 * 16, 256, 4096);
  return std::min(block, g.out_pixels());
}

template <typename T>
void forward_columns(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                     const Im2colPlan& plan) {
  const int64_t C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg(), P = g.out_pixels();
  const int64_t col_size = C * g.KH * g.KW * plan.block;
  // One image: the bias, then block by block the columns and per group
  // y_n,g[:, B] += w_g * col_g (beta = 1 onto the bias).
  auto image = [&](int64_t n, T* col) {
    const T* xn = x + n * C * g.in_pixels();
    T* yn = y + n * D * P;
    for (int64_t d = 0; d < D; ++d) std::fill(yn + d * P, yn + (d + 1) * P, b ? b[d] : T(0));
    for (int64_t p0 = 0; p0 < P; p0 += plan.block) {
      const int64_t p1 = std::min(P, p0 + plan.block), pb = p1 - p0;
      im2col(g, xn, p0, p1, col);
      for (int64_t gr = 0; gr < G; ++gr)
        gemm<T>(false, false, Dg, pb, Kg, w + gr * Dg * Kg, Kg, col + gr * Kg * pb, pb, nullptr,
                true, yn + gr * Dg * P + p0, P);
    }
  };
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
  for (int64_t n = 0; n < g.N; ++n) image(n, work + omp_get_thread_num() * col_size);
}

// Images [first, last) of chunk p when N images are split into P near-equal chunks.
int64_t image_chunk_begin(int64_t p, int64_t N, int64_t P) {
  return p * N / P;
}

// dw from the chunks' partial sums, always added in chunk order (the same bits on any thread
// count); partials (chunks, G, Kg, Dg) when transposed (the shifted path), else (chunks, D, Kg).
template <typename T>
void sum_weight_partials(const ConvGeom& g, const T* partials, int64_t chunks, bool transposed,
                         T* dw, int threads) {
  const int64_t WN = g.D * g.Kg(), Kg = g.Kg(), Dg = g.Dg();
  // Walk the partials in memory order (j); dw index i = (gr * Dg + d) * Kg + r.
#pragma omp parallel for schedule(static) num_threads(threads) if (WN * chunks > (1 << 20))
  for (int64_t j = 0; j < WN; ++j) {
    int64_t i = j;
    if (transposed) {  // j = (gr * Kg + r) * Dg + d
      const int64_t grr = j / Dg, d = j % Dg, gr = grr / Kg, r = grr % Kg;
      i = (gr * Dg + d) * Kg + r;
    }
    T s = partials[j];
    for (int64_t p = 1; p < chunks; ++p) s += partials[p * WN + j];
    dw[i] = s;
  }
}

template <typename T>
void backward_columns(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db,
                      T* work, const Im2colPlan& plan) {
  const int64_t N = g.N, C = g.C, D = g.D, G = g.G, Dg = g.Dg(), Kg = g.Kg();
  const int64_t P = g.out_pixels(), HW = g.in_pixels();
  const int64_t col_size = C * g.KH * g.KW * plan.block;
  const int64_t chunks = std::min(N, kWeightChunks);
  T* partials = work + plan.threads * col_size;  // (chunks, D, Kg)

  // One image, block by block: the dw partial of its chunk (from the block's columns), then
  // dx through dcol in the same buffer (the columns are not needed once the weight GEMM has
  // read them).
  auto image = [&](int64_t n, bool first_in_chunk, T* part, T* col) {
    const T* xn = x + n * C * HW;
    const T* dyn = dy + n * D * P;
    T* dxn = dx ? dx + n * C * HW : nullptr;
    if (dxn) std::fill(dxn, dxn + C * HW, T(0));
    for (int64_t p0 = 0; p0 < P; p0 += plan.block) {
      const int64_t p1 = std::min(P, p0 + plan.block), pb = p1 - p0;
      if (dw) {
        im2col(g, xn, p0, p1, col);
        const bool accumulate = !(first_in_chunk && p0 == 0);
        for (int64_t gr = 0; gr < G; ++gr)
          gemm<T>(false, true, Dg, Kg, pb, dyn + gr * Dg * P + p0, P, col + gr * Kg * pb, pb,
                  nullptr, accumulate, part + gr * Dg * Kg, Kg);
      }
      if (dxn) {
        for (int64_t gr = 0; gr < G; ++gr)
          gemm<T>(true, false, Kg, pb, Dg, w + gr * Dg * Kg, Kg, dyn + gr * Dg * P + p0, P, nullptr,
                  false, col + gr * Kg * pb, pb);
        col2im(g, col, p0, p1, dxn);
      }
    }
  };
  // Chunks are dealt to threads; the chunk -> images map depends on N only.
#pragma omp parallel for schedule(static) num_threads(plan.threads) if (plan.threads > 1)
  for (int64_t p = 0; p < chunks; ++p) {
    T* col = work + omp_get_thread_num() * col_size;
    const int64_t n0 = image_chunk_begin(p, N, chunks), n1 = image_chunk_begin(p + 1, N, chunks);
    for (int64_t n = n0; n < n1; ++n) image(n, n == n0, partials + p * D * Kg, col);
  }

  if (dw) sum_weight_partials(g, partials, chunks, false, dw, plan.threads);
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

}  // namespace

// ---- Stride 1: GEMMs on shifted views of the image ---------------------------------------
//
// With stride 1, output pixel (oh, ow) reads xp[c, oh + kh*DH, ow + kw*DW] of the zero-padded
// image xp (C, Hp, Wp). Number the output pixels "wide", q = oh*Wp + ow with ow in [0, Wp):
// the columns ow >= OW are junk, computed and dropped. Then row (c, kh, kw) of the column
// matrix is xp_c itself shifted by kh*DH*Wp + kw*DW: a contiguous run, which grux's packed
// GEMM reads in place (gemm_b_rows). No column matrix is written.
//
// grad_input is a stride-1 convolution too: dxp[c, q] = sum over (d, kh, kw) of
// w[d, c, kh, kw] * dyw[d, q - kh*DH*Wp - kw*DW], where dyw is dy in the same wide numbering
// with zero junk columns and (KH-1)*DH zero rows above and below: the same GEMM with the
// filters transposed to (C/G, D/G*KH*KW); no col2im. grad_weight^T (Kg, D/G) += col (Kg,
// pixels) * dyw^T (pixels, D/G), col's rows read in place from xp (gemm_a_rows); the zero
// junk columns of dyw make the junk pixels add nothing.

namespace {

// Everything the shifted path derives from the geometry: sizes of the wide views, blocks
// and the per-thread workspace (elements, each piece a multiple of 64 bytes).
struct Shifted {
  int64_t Hp, Wp, HWp;  // padded image
  int64_t Q;            // wide output pixels: (OH-1)*Wp + OW
  int64_t eh;           // zero rows of dyw above and below dy: (KH-1)*DH
  int64_t margin;       // zeros before dyw's first channel (reads reach (KW-1)*DW before it)
  int64_t chan;         // channel stride of dyw: (OH + 2 eh) * Wp
  int64_t panel;        // gemm_b_rows's panel: it reads up to panel - 1 elements past a run
  int64_t dpanel;       // packed panel width of dyw^T's D/G columns
  int64_t KX;           // rows of the grad_input GEMM: D/G*KH*KW
  int64_t fwd_block, dx_block, dw_block;  // wide pixels per GEMM call
  bool padded;
  // Per-thread workspace pieces.
  int64_t xp, out, dyw, dyt, per_thread_fwd, per_thread_bwd;
};

int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

template <typename T>
Shifted shifted_layout(const ConvGeom& g) {
  Shifted s{};
  s.Hp = g.H + 2 * g.PH, s.Wp = g.W + 2 * g.PW, s.HWp = s.Hp * s.Wp;
  s.Q = (g.OH - 1) * s.Wp + g.OW;
  s.eh = (g.KH - 1) * g.DH;
  s.margin = round16((g.KW - 1) * g.DW);
  s.chan = (g.OH + 2 * s.eh) * s.Wp;
  s.panel = 3 * kUnit<T>;
  // The widest panel (of 1..3 units) that pads D/G least.
  const int64_t Dg = g.Dg();
  s.dpanel = kUnit<T>;
  for (int64_t u = 3; u >= 1; --u)
    if ((Dg + u * kUnit<T> - 1) / (u * kUnit<T>)*u <= (Dg + kUnit<T> - 1) / kUnit<T>) {
      s.dpanel = u * kUnit<T>;
      break;
    }
  s.KX = Dg * g.KH * g.KW;
  // Output blocks (rows x pixels) of up to 64 KiB, 1..16 panels: they stay in L1/L2 until
  // copied out.
  auto block = [&](int64_t rows) {
    const int64_t b = (int64_t(64) << 10) / (rows * int64_t(sizeof(T))) / s.panel * s.panel;
    return std::clamp<int64_t>(b, s.panel, 16 * s.panel);
  };
  s.fwd_block = block(Dg);
  s.dx_block = block(g.Cg());
  // The weight gradient's GEMM reduces over the block's pixels: its B (pixels x D/G, packed)
  // up to 128 KiB, 256..1024 pixels.
  s.dw_block = std::clamp<int64_t>(
      (int64_t(128) << 10) / (round16(Dg) * int64_t(sizeof(T))) / 16 * 16, 256, 1024);
  s.padded = g.PH > 0 || g.PW > 0;
  s.xp = round16(g.C * s.HWp + s.panel);
  s.out = round16(std::max(Dg * s.fwd_block, g.Cg() * s.dx_block));
  s.dyw = round16(s.margin + g.D * s.chan + s.panel);
  s.dyt = round16(packed_size<T>(s.dw_block, Dg, s.dpanel));
  s.per_thread_fwd = s.xp + s.out;
  s.per_thread_bwd = s.xp + s.out + s.dyw + s.dyt;
  return s;
}

// Zeroes what surrounds the interiors of `planes` planes (stride apart, rows of Wp): all but
// columns [c0, c0 + cols) of rows [r0, r0 + rows) of each, which the images overwrite.
template <typename T>
void clear_frame(T* p, int64_t planes, int64_t stride, int64_t Wp, int64_t r0, int64_t rows,
                 int64_t c0, int64_t cols) {
  for (int64_t c = 0; c < planes; ++c) {
    T* plane = p + c * stride;
    int64_t from = 0;  // the next element not yet zeroed or covered
    for (int64_t i = r0; i < r0 + rows; ++i) {
      std::fill(plane + from, plane + i * Wp + c0, T(0));
      from = i * Wp + c0 + cols;
    }
    std::fill(plane + from, plane + stride, T(0));
  }
}

// Zeroes xp's border and the slack past its end that gemm_b_rows reads (once per thread).
template <typename T>
void clear_padded_image(const ConvGeom& g, const Shifted& s, T* xp) {
  if (s.padded) clear_frame(xp, g.C, s.HWp, s.Wp, g.PH, g.H, g.PW, g.W);
  std::fill(xp + g.C * s.HWp, xp + s.xp, T(0));
}

// The image as the GEMMs read it, (C, Hp, Wp): x_n itself where it has no padding and the
// GEMM may read past its end (`overread`: gemm_b_rows reads up to a panel past its last
// row, which is still inside the batch except after the last image), else x_n copied into
// the interior of xp.
template <typename T>
const T* padded_image(const ConvGeom& g, const Shifted& s, const T* x, int64_t n, bool overread,
                      T* xp) {
  const T* xn = x + n * g.C * g.in_pixels();
  if (!s.padded && (!overread || n + 1 < g.N)) return xn;
  if (!s.padded) {
    std::memcpy(xp, xn, g.C * s.HWp * sizeof(T));
    return xp;
  }
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t h = 0; h < g.H; ++h)
      std::memcpy(xp + c * s.HWp + (h + g.PH) * s.Wp + g.PW, xn + (c * g.H + h) * g.W,
                  g.W * sizeof(T));
  return xp;
}

// dst[r, i, j] = src[r, q - q0] (+ bias[r]) for the dense pixels (i, j) < (rows, cols) whose
// wide pixel q = (i + i0)*Wp + j + j0 lies in [q0, q0 + n): a block of GEMM output (R rows,
// row stride n) back to the dense layout (channel stride rows*cols).
template <typename T>
void unwiden(const T* src, int64_t R, int64_t q0, int64_t n, int64_t Wp, int64_t i0, int64_t j0,
             int64_t rows, int64_t cols, const T* bias, T* dst) {
  const int64_t ia = std::max<int64_t>(0, q0 / Wp - i0);
  const int64_t ib = std::min(rows, (q0 + n - 1) / Wp - i0 + 1);
  for (int64_t r = 0; r < R; ++r) {
    const T* s = src + r * n;
    T* d = dst + r * rows * cols;
    const T add = bias ? bias[r] : T(0);
    for (int64_t i = ia; i < ib; ++i) {
      const int64_t base = (i + i0) * Wp + j0 - q0;  // s[base + j] is pixel (i, j)
      const int64_t ja = std::max<int64_t>(0, -base), jb = std::min(cols, n - base);
      T* di = d + i * cols;
      if (bias)
        for (int64_t j = ja; j < jb; ++j) di[j] = s[base + j] + add;
      else if (jb > ja)
        std::memcpy(di + ja, s + base + ja, (jb - ja) * sizeof(T));
    }
  }
}

// Row starts of a group's column matrix in xp (rows (c, kh, kw)), relative to the pixel.
std::vector<int64_t> column_offsets(const ConvGeom& g, const Shifted& s) {
  std::vector<int64_t> offs(g.Kg());
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw)
        offs[(c * g.KH + kh) * g.KW + kw] = c * s.HWp + kh * g.DH * s.Wp + kw * g.DW;
  return offs;
}

template <typename T>
void forward_shifted(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                     const Im2colPlan& plan) {
  const Shifted s = shifted_layout<T>(g);
  const int64_t Cg = g.Cg(), Dg = g.Dg(), Kg = g.Kg(), P = g.out_pixels();
  const std::vector<int64_t> offs = column_offsets(g, s);
#pragma omp parallel num_threads(plan.threads) if (plan.threads > 1)
  {
    T* xp = work + omp_get_thread_num() * s.per_thread_fwd;
    T* out = xp + s.xp;
    clear_padded_image(g, s, xp);
    // Images are handed out one at a time: a thread that loses its core to another process
    // leaves its images to the others instead of holding up the barrier. Which thread takes
    // an image does not change its result.
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < g.N; ++n) {
      const T* xs = padded_image(g, s, x, n, true, xp);
      for (int64_t q0 = 0; q0 < s.Q; q0 += s.fwd_block) {
        const int64_t len = std::min(s.fwd_block, s.Q - q0);
        for (int64_t gr = 0; gr < g.G; ++gr) {
          gemm_b_rows<T>(Dg, w + gr * Dg * Kg, Kg, Kg, len, xs + gr * Cg * s.HWp + q0, offs.data(),
                         out, len);
          unwiden(out, Dg, q0, len, s.Wp, 0, 0, g.OH, g.OW, b ? b + gr * Dg : nullptr,
                  y + (n * g.D + gr * Dg) * P);
        }
      }
    }
  }
}

// sum of row[0, n) in a fixed order that vectorizes (16 running sums, then added in order).
template <typename T>
T row_sum(const T* row, int64_t n) {
  T acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += row[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += row[i];
  T sum = 0;
  for (int j = 0; j < 16; ++j) sum += acc[j];
  return sum;
}

template <typename T>
void backward_shifted(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db,
                      T* work, const Im2colPlan& plan) {
  const Shifted s = shifted_layout<T>(g);
  const int64_t N = g.N, C = g.C, D = g.D, Cg = g.Cg(), Dg = g.Dg(), Kg = g.Kg();
  const int64_t P = g.out_pixels(), HW = g.in_pixels(), KHW = g.KH * g.KW;
  const int64_t chunks = std::min(N, kWeightChunks);
  // Shared workspace after the threads' pieces: the transposed filters, then the partials.
  T* wt = work + plan.threads * s.per_thread_bwd;  // (G, Cg, Dg*KH*KW)
  T* partials = wt + round16(D * Kg);              // (chunks, G, Kg, Dg)
  T* db_partials = partials + chunks * D * Kg;     // (chunks, D)
  for (int64_t gr = 0; gr < g.G; ++gr)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t d = 0; d < Dg; ++d)
        for (int64_t k = 0; k < KHW; ++k)
          wt[(gr * Cg + c) * s.KX + d * KHW + k] = w[((gr * Dg + d) * Cg + c) * KHW + k];
  const std::vector<int64_t> offs_x = column_offsets(g, s);
  // Row (d, kh, kw) of grad_input's B: dyw_d shifted back by the tap.
  std::vector<int64_t> offs_dy(s.KX);
  for (int64_t d = 0; d < Dg; ++d)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw)
        offs_dy[(d * g.KH + kh) * g.KW + kw] = d * s.chan - kh * g.DH * s.Wp - kw * g.DW;
  // grad_input's wide pixels: the image's interior rows in xp's numbering.
  const int64_t qx0 = g.PH * s.Wp + g.PW, qx1 = (g.PH + g.H - 1) * s.Wp + g.PW + g.W;

#pragma omp parallel num_threads(plan.threads) if (plan.threads > 1)
  {
    T* xp = work + omp_get_thread_num() * s.per_thread_bwd;
    T *out = xp + s.xp, *dyw = out + s.out, *dyt = dyw + s.dyw;
    T* dyw0 = dyw + s.margin + s.eh * s.Wp;  // where dy[0, 0, 0] goes
    // Zero borders, junk columns and slack once; each image overwrites only the interiors.
    if (dw) clear_padded_image(g, s, xp);
    std::fill(dyw, dyw + s.margin, T(0));
    clear_frame(dyw + s.margin, D, s.chan, s.Wp, s.eh, g.OH, int64_t(0), g.OW);
    std::fill(dyw + s.margin + D * s.chan, dyw + s.dyw, T(0));
    // Chunks handed out one at a time (as the forward's images); a chunk's images are summed
    // in order by whichever thread takes it.
#pragma omp for schedule(dynamic, 1)
    for (int64_t p = 0; p < chunks; ++p) {
      const int64_t n0 = image_chunk_begin(p, N, chunks), n1 = image_chunk_begin(p + 1, N, chunks);
      T* part = partials + p * D * Kg;
      T* dbp = db_partials + p * D;
      for (int64_t n = n0; n < n1; ++n) {
        // 1. dy_n into dyw, its sums into the chunk's db.
        const T* dyn = dy + n * D * P;
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t oh = 0; oh < g.OH; ++oh)
            std::memcpy(dyw0 + d * s.chan + oh * s.Wp, dyn + (d * g.OH + oh) * g.OW,
                        g.OW * sizeof(T));
          if (db) dbp[d] = (n == n0 ? T(0) : dbp[d]) + row_sum(dyn + d * P, P);
        }
        // 2. dw^T_g += col_g * dyw_g^T, block by block.
        if (dw) {
          const T* xs = padded_image(g, s, x, n, false, xp);
          for (int64_t q0 = 0; q0 < s.Q; q0 += s.dw_block) {
            const int64_t len = std::min(s.dw_block, s.Q - q0);
            const bool accumulate = !(n == n0 && q0 == 0);
            for (int64_t gr = 0; gr < g.G; ++gr) {
              pack_b<T>(len, Dg, s.dpanel, dyw0 + gr * Dg * s.chan + q0, 1, s.chan, nullptr,
                        nullptr, dyt);
              gemm_a_rows<T>(Kg, xs + gr * Cg * s.HWp + q0, offs_x.data(),
                             PackedB<T>{len, Dg, s.dpanel, dyt}, accumulate, part + gr * Kg * Dg,
                             Dg);
            }
          }
        }
        // 3. dx_n: the transposed, flipped filters over dyw.
        if (dx) {
          for (int64_t q0 = qx0; q0 < qx1; q0 += s.dx_block) {
            const int64_t len = std::min(s.dx_block, qx1 - q0);
            for (int64_t gr = 0; gr < g.G; ++gr) {
              T* dxg = dx + (n * C + gr * Cg) * HW;
              // Without padding the wide pixels are dx's own: the GEMM writes it directly.
              if (!s.padded) {
                gemm_b_rows<T>(Cg, wt + gr * Cg * s.KX, s.KX, s.KX, len,
                               dyw0 + gr * Dg * s.chan + q0, offs_dy.data(), dxg + q0, HW);
                continue;
              }
              gemm_b_rows<T>(Cg, wt + gr * Cg * s.KX, s.KX, s.KX, len, dyw0 + gr * Dg * s.chan + q0,
                             offs_dy.data(), out, len);
              unwiden<T>(out, Cg, q0, len, s.Wp, g.PH, g.PW, g.H, g.W, nullptr, dxg);
            }
          }
        }
      }
    }
  }
  if (dw) sum_weight_partials(g, partials, chunks, true, dw, plan.threads);
  if (db)
    for (int64_t d = 0; d < D; ++d) {
      T sum = db_partials[d];
      for (int64_t p = 1; p < chunks; ++p) sum += db_partials[p * D + d];
      db[d] = sum;
    }
}

}  // namespace

// ---- Plan and entry points -----------------------------------------------------------------

Im2colPlan im2col_plan(const ConvGeom& g, int threads) {
  Im2colPlan p;
  // Measured (bench_conv, 2 shared cores): dealing images to threads beats threading inside
  // each GEMM by far here (the per-image GEMMs are thin, and every extra parallel region
  // waits for a core shared with other work), so a batch of one runs on one thread.
  p.threads = static_cast<int>(std::clamp<int64_t>(g.N, 1, std::max(1, threads)));
  p.shifted = g.SH == 1 && g.SW == 1;
  p.block = p.shifted ? 0 : column_block(g);
  return p;
}

int64_t im2col_workspace_size(const ConvGeom& g, const Im2colPlan& plan, bool backward) {
  const int64_t chunks = std::min(g.N, kWeightChunks);
  if (plan.shifted) {
    // Both dtypes' layouts are sized in elements; take the larger (f32's panels are wider).
    const Shifted s = shifted_layout<float>(g), s64 = shifted_layout<double>(g);
    if (!backward) return plan.threads * std::max(s.per_thread_fwd, s64.per_thread_fwd);
    return plan.threads * std::max(s.per_thread_bwd, s64.per_thread_bwd) + round16(g.D * g.Kg()) +
           chunks * g.D * g.Kg() + chunks * g.D;
  }
  int64_t n = plan.threads * g.C * g.KH * g.KW * plan.block;
  if (backward) n += chunks * g.D * g.Kg();  // weight-gradient partials
  return n;
}

template <typename T>
void conv2d_forward_im2col(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                           const Im2colPlan& plan) {
  if (plan.shifted)
    forward_shifted(g, x, w, b, y, work, plan);
  else
    forward_columns(g, x, w, b, y, work, plan);
}

template <typename T>
void conv2d_backward_im2col(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                            T* db, T* work, const Im2colPlan& plan) {
  if (plan.shifted)
    backward_shifted(g, dy, x, w, dx, dw, db, work, plan);
  else
    backward_columns(g, dy, x, w, dx, dw, db, work, plan);
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
