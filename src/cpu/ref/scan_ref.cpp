// Reference scans: the recurrences of cpu/scan.h as plain sequential loops.
#include "cpu/ref/scan_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace grux::cpu::ref {

namespace {

inline int64_t step_at(int64_t t, int64_t Tn, bool reverse) {
  return reverse ? Tn - 1 - t : t;
}

template <typename T>
T log_add_exp(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == b && std::isinf(a)) return a;
  // log(e^a + e^b) with an infinite term: +inf dominates, -inf adds nothing.
  if (std::isinf(a)) return a > 0 ? a : b;
  if (std::isinf(b)) return b > 0 ? b : a;
  const T m = a > b ? a : b;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

template <typename T>
T identity(ScanKind kind) {
  const T inf = std::numeric_limits<T>::infinity();
  switch (kind) {
    case ScanKind::sum:
      return T(-0.0);
    case ScanKind::prod:
      return T(1);
    case ScanKind::max:
      return -inf;
    case ScanKind::min:
      return inf;
    case ScanKind::logaddexp:
      return -inf;
  }
  return T(0);
}

template <typename T>
T combine(ScanKind kind, T acc, T v) {
  switch (kind) {
    case ScanKind::sum:
      return acc + v;
    case ScanKind::prod:
      return acc * v;
    case ScanKind::max:
      return std::isnan(acc) ? acc : (std::isnan(v) || v >= acc) ? v : acc;
    case ScanKind::min:
      return std::isnan(acc) ? acc : (std::isnan(v) || v <= acc) ? v : acc;
    case ScanKind::logaddexp:
      return log_add_exp(acc, v);
  }
  return acc;
}

}  // namespace

template <typename T>
void scan_elementwise(ScanKind kind, const T* x, T* y, int64_t O, int64_t Tn, int64_t C,
                      bool exclusive, bool reverse) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      T acc = identity<T>(kind);
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t i = (o * Tn + step_at(t, Tn, reverse)) * C + c;
        if (exclusive) y[i] = acc;
        acc = combine(kind, acc, x[i]);
        if (!exclusive) y[i] = acc;
      }
    }
}

template <typename T>
void affine_scan_diag(const T* a, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t C,
                      bool reverse) {
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      T state = h0 ? h0[o * C + c] : T(0);
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t i = (o * Tn + step_at(t, Tn, reverse)) * C + c;
        state = a[i] * state + b[i];
        h[i] = state;
      }
    }
}

template <typename T>
void log_affine_scan_diag(const T* la, const T* lb, const T* lh0, T* lh, int64_t O, int64_t Tn,
                          int64_t C, bool reverse) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      T A = 0;                              // cumulative sum of la
      T acc = lh0 ? lh0[o * C + c] : ninf;  // cumulative logsumexp of lb_s - A_s (h0 at s=-1)
      for (int64_t t = 0; t < Tn; ++t) {
        const int64_t i = (o * Tn + step_at(t, Tn, reverse)) * C + c;
        A += la[i];
        acc = log_add_exp(acc, lb[i] - A);
        lh[i] = A + acc;
      }
    }
}

template <typename T>
void affine_scan_matrix(const T* A, const T* b, const T* h0, T* h, int64_t O, int64_t Tn, int64_t d,
                        bool reverse) {
  std::vector<T> state(d), next(d);
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t i = 0; i < d; ++i) state[i] = h0 ? h0[o * d + i] : T(0);
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t s = o * Tn + step_at(t, Tn, reverse);
      for (int64_t i = 0; i < d; ++i) {
        T acc = b[s * d + i];
        for (int64_t j = 0; j < d; ++j) acc += A[(s * d + i) * d + j] * state[j];
        next[i] = acc;
      }
      state = next;
      std::copy(state.begin(), state.end(), h + s * d);
    }
  }
}

template <typename T>
void matmul_scan(const T* x, T* y, int64_t O, int64_t Tn, int64_t d, bool reverse) {
  const int64_t dd = d * d;
  std::vector<T> acc(dd), next(dd);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t t = 0; t < Tn; ++t) {
      const T* m = x + (o * Tn + step_at(t, Tn, reverse)) * dd;
      if (t == 0) {
        std::copy(m, m + dd, acc.begin());
      } else {
        // Forward: acc <- acc m. Reversed: acc <- m acc (y_t = x_t x_{t+1} ... x_{T-1}).
        const T* L = reverse ? m : acc.data();
        const T* R = reverse ? acc.data() : m;
        for (int64_t i = 0; i < d; ++i)
          for (int64_t j = 0; j < d; ++j) {
            T s = 0;
            for (int64_t k = 0; k < d; ++k) s += L[i * d + k] * R[k * d + j];
            next[i * d + j] = s;
          }
        acc = next;
      }
      std::copy(acc.begin(), acc.end(), y + (o * Tn + step_at(t, Tn, reverse)) * dd);
    }
}

#define GRUX_SCAN_REF_INSTANTIATE(T)                                                               \
  template void scan_elementwise<T>(ScanKind, const T*, T*, int64_t, int64_t, int64_t, bool,       \
                                    bool);                                                         \
  template void affine_scan_diag<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                    bool);                                                         \
  template void log_affine_scan_diag<T>(const T*, const T*, const T*, T*, int64_t, int64_t,        \
                                        int64_t, bool);                                            \
  template void affine_scan_matrix<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                      bool);                                                       \
  template void matmul_scan<T>(const T*, T*, int64_t, int64_t, int64_t, bool);
GRUX_SCAN_REF_INSTANTIATE(float)
GRUX_SCAN_REF_INSTANTIATE(double)
#undef GRUX_SCAN_REF_INSTANTIATE

}  // namespace grux::cpu::ref
