// Reference convolution kernels: seven plain loops over (n, d, oh, ow, c, kh, kw), bounds
// checked per tap, sums in double. Deliberately unoptimized: this is what the others must match.
#include "cpu/ref/conv_ref.h"

#include <cstddef>
#include <vector>

namespace grux::cpu::ref {

template <typename T>
void conv2d_forward_ref(const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t N = g.N, C = g.C, H = g.H, W = g.W, D = g.D, KH = g.KH, KW = g.KW;
  const int64_t OH = g.OH, OW = g.OW, Cg = g.Cg(), Dg = g.Dg();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? double(b[d]) : 0.0;
          const int64_t c0 = (d / Dg) * Cg;  // first input channel of d's group
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
                const int64_t iw = ow * g.SW - g.PW + kw * g.DW;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // zero padding
                acc += double(w[((d * Cg + c) * KH + kh) * KW + kw]) *
                       double(x[((n * C + c0 + c) * H + ih) * W + iw]);
              }
          y[((n * D + d) * OH + oh) * OW + ow] = T(acc);
        }
}

template <typename T>
void conv2d_backward_ref(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                         T* db) {
  const int64_t N = g.N, C = g.C, H = g.H, W = g.W, D = g.D, KH = g.KH, KW = g.KW;
  const int64_t OH = g.OH, OW = g.OW, Cg = g.Cg(), Dg = g.Dg();
  // The same nest as the forward, scattering instead of gathering: every tap that read
  // x[..] with weight w[..] sends dy back to both. Double accumulators, rounded once.
  std::vector<double> gx(dx ? N * C * H * W : 0), gw(dw ? D * Cg * KH * KW : 0), gb(db ? D : 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double go = dy[((n * D + d) * OH + oh) * OW + ow];
          if (db) gb[d] += go;
          const int64_t c0 = (d / Dg) * Cg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
                const int64_t iw = ow * g.SW - g.PW + kw * g.DW;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + c0 + c) * H + ih) * W + iw;
                const int64_t wi = ((d * Cg + c) * KH + kh) * KW + kw;
                if (dx) gx[xi] += go * double(w[wi]);
                if (dw) gw[wi] += go * double(x[xi]);
              }
        }
  for (size_t i = 0; i < gx.size(); ++i) dx[i] = T(gx[i]);
  for (size_t i = 0; i < gw.size(); ++i) dw[i] = T(gw[i]);
  for (size_t i = 0; i < gb.size(); ++i) db[i] = T(gb[i]);
}

template void conv2d_forward_ref<float>(const ConvGeom&, const float*, const float*, const float*,
                                        float*);
template void conv2d_forward_ref<double>(const ConvGeom&, const double*, const double*,
                                         const double*, double*);
template void conv2d_backward_ref<float>(const ConvGeom&, const float*, const float*, const float*,
                                         float*, float*, float*);
template void conv2d_backward_ref<double>(const ConvGeom&, const double*, const double*,
                                          const double*, double*, double*, double*);

}  // namespace grux::cpu::ref
