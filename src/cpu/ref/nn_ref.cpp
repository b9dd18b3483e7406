// Reference kernels for Linear, Embedding and softmax cross-entropy: straight loops over the
// equations, every sum in double, no threads. Contracts in cpu/ref/nn_ref.h.
#include "cpu/ref/nn_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace grux::cpu::ref {

namespace {
// Element (r, c) of a strided operand (see cpu/linear.h).
template <typename T>
double at(const T* p, int64_t ld, bool trans, int64_t r, int64_t c) {
  return static_cast<double>(trans ? p[c * ld + r] : p[r * ld + c]);
}
}  // namespace

template <typename T>
void linear_forward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                    const T* w, int64_t ldw, bool trans_w, const T* b, T* y) {
  // y[m, o] = sum_i x[m, i] w[o, i] + b[o]
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t i = 0; i < I; ++i) s += at(x, ldx, trans_x, m, i) * at(w, ldw, trans_w, o, i);
      if (b != nullptr) s += static_cast<double>(b[o]);
      y[m * O + o] = static_cast<T>(s);
    }
}

template <typename T>
void linear_backward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                     const T* w, int64_t ldw, bool trans_w, const T* dy, int64_t lddy, T* dx, T* dw,
                     T* db) {
  // dx[m, i] = sum_o dy[m, o] w[o, i]
  if (dx != nullptr)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < I; ++i) {
        double s = 0;
        for (int64_t o = 0; o < O; ++o) s += at(dy, lddy, false, m, o) * at(w, ldw, trans_w, o, i);
        dx[m * I + i] = static_cast<T>(s);
      }
  // dw[o, i] = sum_m dy[m, o] x[m, i]
  if (dw != nullptr)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) {
        double s = 0;
        for (int64_t m = 0; m < M; ++m) s += at(dy, lddy, false, m, o) * at(x, ldx, trans_x, m, i);
        dw[o * I + i] = static_cast<T>(s);
      }
  // db[o] = sum_m dy[m, o]
  if (db != nullptr)
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t m = 0; m < M; ++m) s += at(dy, lddy, false, m, o);
      db[o] = static_cast<T>(s);
    }
}

template <typename T>
void embedding_forward(int64_t N, int64_t E, const int64_t* ids, const T* table, int64_t ldt,
                       T* y) {
  for (int64_t p = 0; p < N; ++p)
    for (int64_t e = 0; e < E; ++e) y[p * E + e] = table[ids[p] * ldt + e];
}

template <typename T>
void embedding_backward(int64_t N, int64_t V, int64_t E, const int64_t* ids, const T* dy,
                        T* dtable) {
  // dtable[v, e] = sum over positions p with ids[p] == v of dy[p, e], in position order.
  std::vector<double> acc(static_cast<size_t>(V * E), 0.0);
  for (int64_t p = 0; p < N; ++p)
    for (int64_t e = 0; e < E; ++e) acc[ids[p] * E + e] += static_cast<double>(dy[p * E + e]);
  for (int64_t k = 0; k < V * E; ++k) dtable[k] = static_cast<T>(acc[k]);
}

template <typename T>
void cross_entropy(int64_t M, int64_t V, const T* logits, int64_t ld, const int64_t* targets,
                   double scale, double* row_loss, T* dlogits) {
  for (int64_t m = 0; m < M; ++m) {
    const T* x = logits + m * ld;
    double mx = -HUGE_VAL;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(x[v]));
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - mx);
    const int64_t t = targets[m];
    // -log softmax[t] = log(sum exp(x - mx)) - (x[t] - mx)
    row_loss[m] = std::log(s) - (static_cast<double>(x[t]) - mx);
    if (dlogits != nullptr)
      for (int64_t v = 0; v < V; ++v)
        dlogits[m * V + v] = static_cast<T>(
            (std::exp(static_cast<double>(x[v]) - mx) / s - (v == t ? 1.0 : 0.0)) * scale);
  }
}

#define GRUX_NN_REF_INSTANTIATE(T)                                                               \
  template void linear_forward<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*,  \
                                  int64_t, bool, const T*, T*);                                  \
  template void linear_backward<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*, \
                                   int64_t, bool, const T*, int64_t, T*, T*, T*);                \
  template void embedding_forward<T>(int64_t, int64_t, const int64_t*, const T*, int64_t, T*);   \
  template void embedding_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, T*);  \
  template void cross_entropy<T>(int64_t, int64_t, const T*, int64_t, const int64_t*, double,    \
                                 double*, T*);
GRUX_NN_REF_INSTANTIATE(float)
GRUX_NN_REF_INSTANTIATE(double)
#undef GRUX_NN_REF_INSTANTIATE

}  // namespace grux::cpu::ref
