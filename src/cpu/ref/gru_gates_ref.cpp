// Reference GRU gate kernels, one scalar loop per kernel, straight from the equations:
//   r = s(a_r), z = s(a_z), n = tanh(a_n), h' = (1 - z) n + z h, s(x) = 1 / (1 + e^-x).
#include "cpu/ref/gru_gates_ref.h"

#include <cmath>

namespace grux::cpu::ref {

namespace {
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
T bias(const T* b, int64_t i) {
  return b ? b[i] : T(0);
}
}  // namespace

template <typename T>
void gru_gates_lbr_forward(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                           T* h, T* hn) {
  for (int64_t b = 0; b < B; ++b) {
    T* gr = g + b * 3 * H;
    const T* ghr = gh + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T r = sigmoid(gr[j] + ghr[j] + bias(b_hh, j));
      const T z = sigmoid(gr[H + j] + ghr[H + j] + bias(b_hh, H + j));
      const T hn_j = ghr[2 * H + j] + bias(b_hh, 2 * H + j);
      const T n = std::tanh(gr[2 * H + j] + r * hn_j);
      const T hp = h_prev[b * H + j];
      h[b * H + j] = (T(1) - z) * n + z * hp;
      hn[b * H + j] = hn_j;
      gr[j] = r;
      gr[H + j] = z;
      gr[2 * H + j] = n;
    }
  }
}

template <typename T>
void gru_gates_lbr_backward(int64_t B, int64_t H, const T* g, const T* hn, const T* h_prev,
                            const T* dh, T* dg, T* dgh, T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = b * H + j, k = b * 3 * H + j;
      const T r = g[k], z = g[k + H], n = g[k + 2 * H];
      const T d = dh[i];
      // h' = (1 - z) n + z h: dn = d (1 - z), dz = d (h - n), dh = d z.
      const T dn = d * (T(1) - z) * (T(1) - n * n);
      const T dz = d * (h_prev[i] - n) * z * (T(1) - z);
      const T dr = dn * hn[i] * r * (T(1) - r);
      dg[k] = dr;
      dg[k + H] = dz;
      dg[k + 2 * H] = dn;
      dgh[k] = dr;
      dgh[k + H] = dz;
      dgh[k + 2 * H] = dn * r;
      dh_prev[i] = d * z;
    }
  }
}

template <typename T>
void gru_gates_rb_forward_rz(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh,
                             const T* h_prev, T* rh) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t k = b * 3 * H + j;
      const T r = sigmoid(g[k] + gh[k] + bias(b_hh, j));
      const T z = sigmoid(g[k + H] + gh[k + H] + bias(b_hh, H + j));
      g[k] = r;
      g[k + H] = z;
      rh[b * H + j] = r * h_prev[b * H + j];
    }
  }
}

template <typename T>
void gru_gates_rb_forward_n(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                            T* h) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t k = b * 3 * H + j;
      const T n = std::tanh(g[k + 2 * H] + gh[k + 2 * H] + bias(b_hh, 2 * H + j));
      const T z = g[k + H];
      h[b * H + j] = (T(1) - z) * n + z * h_prev[b * H + j];
      g[k + 2 * H] = n;
    }
  }
}

template <typename T>
void gru_gates_rb_backward_zn(int64_t B, int64_t H, const T* g, const T* h_prev, const T* dh, T* dg,
                              T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = b * H + j, k = b * 3 * H + j;
      const T z = g[k + H], n = g[k + 2 * H], d = dh[i];
      dg[k + H] = d * (h_prev[i] - n) * z * (T(1) - z);
      dg[k + 2 * H] = d * (T(1) - z) * (T(1) - n * n);
      dh_prev[i] = d * z;
    }
  }
}

template <typename T>
void gru_gates_rb_backward_r(int64_t B, int64_t H, const T* g, const T* h_prev, const T* drh, T* dg,
                             T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = b * H + j, k = b * 3 * H + j;
      const T r = g[k];
      dg[k] = drh[i] * h_prev[i] * r * (T(1) - r);
      dh_prev[i] += drh[i] * r;
    }
  }
}

#define GRUX_INSTANTIATE(T)                                                                        \
  template void gru_gates_lbr_forward<T>(int64_t, int64_t, T*, const T*, const T*, const T*, T*,   \
                                         T*);                                                      \
  template void gru_gates_lbr_backward<T>(int64_t, int64_t, const T*, const T*, const T*,          \
                                          const T*, T*, T*, T*);                                   \
  template void gru_gates_rb_forward_rz<T>(int64_t, int64_t, T*, const T*, const T*, const T*,     \
                                           T*);                                                    \
  template void gru_gates_rb_forward_n<T>(int64_t, int64_t, T*, const T*, const T*, const T*, T*); \
  template void gru_gates_rb_backward_zn<T>(int64_t, int64_t, const T*, const T*, const T*, T*,    \
                                            T*);                                                   \
  template void gru_gates_rb_backward_r<T>(int64_t, int64_t, const T*, const T*, const T*, T*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu::ref
