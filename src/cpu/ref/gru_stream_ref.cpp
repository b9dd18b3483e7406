#include "cpu/ref/gru_stream_ref.h"

#include <cmath>
#include <vector>

namespace grux::cpu::ref {

void gru_stream_forward(int64_t I, int64_t H, bool reset_before, const float* w_ih,
                        const float* w_hh, const float* b_ih, const float* b_hh, int64_t t,
                        const float* x, double* h, double* out) {
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> gi(3 * H), gh(3 * H), r(H), rh(H), hn(H);
  for (int64_t f = 0; f < t; ++f) {
    const float* xf = x + f * I;
    for (int64_t row = 0; row < 3 * H; ++row) {
      double a = b_ih ? b_ih[row] : 0.0, c = b_hh ? b_hh[row] : 0.0;
      for (int64_t k = 0; k < I; ++k) a += double(w_ih[row * I + k]) * xf[k];
      for (int64_t k = 0; k < H && (row < 2 * H || !reset_before); ++k)
        c += double(w_hh[row * H + k]) * h[k];
      gi[row] = a, gh[row] = c;
    }
    for (int64_t u = 0; u < H; ++u) {
      r[u] = sigmoid(gi[u] + gh[u]);
      rh[u] = r[u] * h[u];
    }
    for (int64_t u = 0; u < H; ++u) {
      const double z = sigmoid(gi[H + u] + gh[H + u]);
      double n;
      if (!reset_before) {
        n = std::tanh(gi[2 * H + u] + r[u] * gh[2 * H + u]);
      } else {
        double c = b_hh ? b_hh[2 * H + u] : 0.0;
        for (int64_t k = 0; k < H; ++k) c += double(w_hh[(2 * H + u) * H + k]) * rh[k];
        n = std::tanh(gi[2 * H + u] + c);
      }
      hn[u] = (1.0 - z) * n + z * h[u];
    }
    for (int64_t u = 0; u < H; ++u) h[u] = out[f * H + u] = hn[u];
  }
}

}  // namespace grux::cpu::ref
