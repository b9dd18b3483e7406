// Reference minGRU pointwise kernels (Feng et al. 2024), one scalar loop each, written from
//   z = s(k_z), h~ = v or g(v), h_t = (1 - z) h_{t-1} + z h~,  s(x) = 1 / (1 + e^-x),
//   g(v) = v + 0.5 (v >= 0) or s(v) (v < 0).
#include "cpu/ref/mingru_gates_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace grux::cpu::ref {

namespace {
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
// softplus(x) = log(1 + e^x), written so that neither branch overflows.
template <typename T>
T softplus(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T>
T g(T v) {
  return v >= 0 ? v + T(0.5) : sigmoid(v);
}
template <typename T>
T log_g(T v) {
  return v >= 0 ? std::log(v + T(0.5)) : -softplus(-v);
}
template <typename T>
T dg(T v) {
  return v >= 0 ? T(1) : sigmoid(v) * (T(1) - sigmoid(v));
}
bool padding(int64_t r, int64_t t0, int64_t N, const int64_t* len) {
  return len && t0 + r / N >= len[r % N];
}
template <typename T>
T bias_at(const T* b, int64_t i) {
  return b ? b[i] : T(0);
}
}  // namespace

template <typename T>
void mingru_forward_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                           const int64_t* len, const T* k, const T* bias, T* a, T* b) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < H; ++j) {
      if (padding(r, t0, N, len)) {
        a[r * H + j] = 1, b[r * H + j] = 0;
        continue;
      }
      const T z = sigmoid(k[r * 2 * H + j] + bias_at(bias, j));
      const T v = k[r * 2 * H + H + j] + bias_at(bias, H + j);
      a[r * H + j] = T(1) - z;
      b[r * H + j] = z * v;
    }
}

template <typename T>
void mingru_forward_log_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                               const int64_t* len, const T* k, const T* bias, T* la, T* lb) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < H; ++j) {
      if (padding(r, t0, N, len)) {
        la[r * H + j] = 0, lb[r * H + j] = -std::numeric_limits<T>::infinity();
        continue;
      }
      const T kz = k[r * 2 * H + j] + bias_at(bias, j);
      const T v = k[r * 2 * H + H + j] + bias_at(bias, H + j);
      // log(1 - s(x)) = -softplus(x), log s(x) = -softplus(-x).
      la[r * H + j] = -softplus(kz);
      lb[r * H + j] = -softplus(-kz) + log_g(v);
    }
}

template <typename T>
void mingru_backward_decay(int64_t r0, int64_t r1, int64_t rows, int64_t t0, int64_t N, int64_t H,
                           const int64_t* len, const T* k, const T* bias, T* a_next) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < H; ++j) {
      const int64_t rn = r + N;
      a_next[r * H + j] = rn >= rows ? T(0)
                          : padding(rn, t0, N, len)
                              ? T(1)
                              : T(1) - sigmoid(k[rn * 2 * H + j] + bias_at(bias, j));
    }
}

template <typename T>
void mingru_backward(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,
                     bool log_space, const T* k, const T* bias, const T* h0, const T* h, const T* G,
                     T* dk, T* dh0) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < H; ++j) {
      if (padding(r, t0, N, len)) {
        dk[r * 2 * H + j] = dk[r * 2 * H + H + j] = 0;
        continue;
      }
      const T z = sigmoid(k[r * 2 * H + j] + bias_at(bias, j));
      const T v = k[r * 2 * H + H + j] + bias_at(bias, H + j);
      const T cand = log_space ? g(v) : v;
      const T dcand = log_space ? dg(v) : T(1);
      const T h_prev = r < N ? (h0 ? h0[r * H + j] : T(0)) : h[(r - N) * H + j];
      const T G_ = G[r * H + j];
      // h_t = (1 - z) h_prev + z h~: dz = G (h~ - h_prev), dh~ = G z, dh_prev = G (1 - z).
      dk[r * 2 * H + j] = G_ * (cand - h_prev) * z * (T(1) - z);
      dk[r * 2 * H + H + j] = G_ * z * dcand;
      if (r < N && dh0) dh0[r * H + j] = G_ * (T(1) - z);
    }
}

#define GRUX_INSTANTIATE(T)                                                                     \
  template void mingru_forward_coeffs<T>(int64_t, int64_t, int64_t, int64_t, int64_t,           \
                                         const int64_t*, const T*, const T*, T*, T*);           \
  template void mingru_forward_log_coeffs<T>(int64_t, int64_t, int64_t, int64_t, int64_t,       \
                                             const int64_t*, const T*, const T*, T*, T*);       \
  template void mingru_backward_decay<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,  \
                                         const int64_t*, const T*, const T*, T*);               \
  template void mingru_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, const int64_t*, \
                                   bool, const T*, const T*, const T*, const T*, const T*, T*,  \
                                   T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu::ref
