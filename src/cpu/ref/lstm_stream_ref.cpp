// Reference for the real-time LSTM kernel: i, f, o = s(a), g = tanh(a), c' = f c + i g,
// h' = o tanh(c'), with a = W_ih x + b_ih + W_hh h + b_hh, all in double.
#include "cpu/ref/lstm_stream_ref.h"

#include <cmath>
#include <vector>

namespace grux::cpu::ref {

void lstm_stream_forward(int64_t I, int64_t H, const float* w_ih, const float* w_hh,
                         const float* b_ih, const float* b_hh, int64_t t, const float* x, double* h,
                         double* c, double* out) {
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> a(4 * H);
  for (int64_t f = 0; f < t; ++f) {
    const float* xf = x + f * I;
    for (int64_t row = 0; row < 4 * H; ++row) {
      double v = (b_ih ? b_ih[row] : 0.0) + (b_hh ? b_hh[row] : 0.0);
      for (int64_t k = 0; k < I; ++k) v += double(w_ih[row * I + k]) * xf[k];
      for (int64_t k = 0; k < H; ++k) v += double(w_hh[row * H + k]) * h[k];
      a[row] = v;
    }
    for (int64_t u = 0; u < H; ++u) {
      const double i = sigmoid(a[u]), fg = sigmoid(a[H + u]), g = std::tanh(a[2 * H + u]),
                   o = sigmoid(a[3 * H + u]);
      c[u] = fg * c[u] + i * g;
      h[u] = out[f * H + u] = o * std::tanh(c[u]);
    }
  }
}

}  // namespace grux::cpu::ref
