// Reference LSTM gate kernels, one scalar loop per kernel, straight from the equations:
//   i = s(a_i), f = s(a_f), g = tanh(a_g), o = s(a_o), c' = f c + i g, m = o tanh(c'),
//   s(x) = 1 / (1 + e^-x).
// Gate columns are addressed through gate_col4 (layout in cpu/lstm_gates.h).
#include "cpu/ref/lstm_gates_ref.h"

#include <algorithm>
#include <cmath>

#include "cpu/gemm_packed.h"
#include "cpu/lstm_gates.h"

namespace grux::cpu::ref {

namespace {
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
// Calls fn(j) for every unit j of blocks [b0, b1).
template <typename T, typename Fn>
void for_units(int64_t H, int64_t b0, int64_t b1, Fn fn) {
  for (int64_t j = b0 * kUnit<T>; j < std::min(H, b1 * kUnit<T>); ++j) fn(j);
}
}  // namespace

template <typename T>
void lstm_gates_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* a, const T* c_prev, T* c,
                        T* m, int64_t ldm, bool save) {
  for (int64_t b = 0; b < B; ++b) {
    T* ab = a + b * 4 * H;
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t ci = gate_col4<T>(H, 0, j), cf = gate_col4<T>(H, 1, j),
                    cg = gate_col4<T>(H, 2, j), co = gate_col4<T>(H, 3, j);
      const T i = sigmoid(ab[ci]), f = sigmoid(ab[cf]), g = std::tanh(ab[cg]), o = sigmoid(ab[co]);
      const T cn = f * c_prev[b * H + j] + i * g;
      c[b * H + j] = cn;
      m[b * ldm + j] = o * std::tanh(cn);
      if (save) ab[ci] = i, ab[cf] = f, ab[cg] = g, ab[co] = o;
    });
  }
}

template <typename T>
void lstm_gates_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act, const T* c,
                         const T* c_prev, const T* dm, const T* dm_next, int64_t next_rows, T* dc,
                         T* da, T* da_sum) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t o4 = b * 4 * H;
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t e = b * H + j;
      const int64_t ci = gate_col4<T>(H, 0, j), cf = gate_col4<T>(H, 1, j),
                    cg = gate_col4<T>(H, 2, j), co = gate_col4<T>(H, 3, j);
      const T i = act[o4 + ci], f = act[o4 + cf], g = act[o4 + cg], o = act[o4 + co];
      const T dmv = dm[e] + (dm_next && b < next_rows ? dm_next[e] : T(0));
      const T tc = std::tanh(c[e]);
      const T dcv = dc[e] + dmv * o * (T(1) - tc * tc);  // dL/dc' in all
      dc[e] = dcv * f;                                   // dL/dc_prev
      const T d[4] = {dcv * g * i * (T(1) - i), dcv * c_prev[e] * f * (T(1) - f),
                      dcv * i * (T(1) - g * g), dmv * tc * o * (T(1) - o)};
      const int64_t cols[4] = {ci, cf, cg, co};
      for (int q = 0; q < 4; ++q) {
        da[o4 + cols[q]] = d[q];
        if (da_sum) da_sum[cols[q]] += d[q];
      }
    });
  }
}

#define GRUX_INSTANTIATE(T)                                                                     \
  template void lstm_gates_forward<T>(int64_t, int64_t, int64_t, int64_t, T*, const T*, T*, T*, \
                                      int64_t, bool);                                           \
  template void lstm_gates_backward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*,  \
                                       const T*, const T*, const T*, int64_t, T*, T*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu::ref
