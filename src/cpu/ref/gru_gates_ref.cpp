// Reference GRU gate kernels, one scalar loop per kernel, straight from the equations:
//   r = s(a_r), z = s(a_z), n = tanh(a_n), h' = (1 - z) n + z h, s(x) = 1 / (1 + e^-x).
// Gate columns are addressed through gate_col3 / gate_col2 (layout in cpu/gru_gates.h).
#include "cpu/ref/gru_gates_ref.h"

#include <algorithm>
#include <cmath>

#include "cpu/gemm_packed.h"
#include "cpu/gru_gates.h"

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
// Calls fn(j) for every unit j of blocks [b0, b1).
template <typename T, typename Fn>
void for_units(int64_t H, int64_t b0, int64_t b1, Fn fn) {
  for (int64_t j = b0 * kUnit<T>; j < std::min(H, b1 * kUnit<T>); ++j) fn(j);
}
}  // namespace

template <typename T>
void gru_gates_lbr_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* gh,
                           const T* b_hh, const T* h_prev, T* h, T* hn, int64_t ldh) {
  for (int64_t b = 0; b < B; ++b) {
    T* gb = g + b * 3 * H;
    const T* ghb = gh + b * 3 * H;
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t cr = gate_col3<T>(H, 0, j), cz = gate_col3<T>(H, 1, j),
                    cn = gate_col3<T>(H, 2, j);
      const T r = sigmoid(gb[cr] + ghb[cr] + bias(b_hh, cr));
      const T z = sigmoid(gb[cz] + ghb[cz] + bias(b_hh, cz));
      const T hn_j = ghb[cn] + bias(b_hh, cn);
      const T n = std::tanh(gb[cn] + r * hn_j);
      h[b * ldh + j] = (T(1) - z) * n + z * h_prev[b * ldh + j];
      if (!hn) return;  // inference: nothing but h'
      hn[b * H + j] = hn_j;
      gb[cr] = r, gb[cz] = z, gb[cn] = n;
    });
  }
}

template <typename T>
void gru_gates_lbr_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hn,
                            const T* h_prev, const T* dh, const T* dh_next, int64_t next_rows,
                            T* dg, T* dgh, T* dgh_all, T* dh_prev, T* dg_sum, T* dgh_sum) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t o = b * 3 * H;
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t i = b * H + j;
      const int64_t cr = o + gate_col3<T>(H, 0, j), cz = o + gate_col3<T>(H, 1, j),
                    cn = o + gate_col3<T>(H, 2, j);
      // dL/dh' = the gradient from above + the carry from the next step (where it has one).
      const T d = dh_next && b < next_rows ? dh[i] + dh_next[i] : dh[i];
      const T r = g[cr], z = g[cz], n = g[cn];
      // h' = (1 - z) n + z h: dn = d (1 - z), dz = d (h - n), dh = d z.
      const T dn = d * (T(1) - z) * (T(1) - n * n);
      const T dz = d * (h_prev[i] - n) * z * (T(1) - z);
      const T dr = dn * hn[i] * r * (T(1) - r);
      dg[cr] = dr, dg[cz] = dz, dg[cn] = dn;
      dgh[cr] = dr, dgh[cz] = dz, dgh[cn] = dn * r;
      if (dgh_all) dgh_all[cr] = dr, dgh_all[cz] = dz, dgh_all[cn] = dn * r;
      dh_prev[i] = d * z;
      if (dg_sum) {  // the bias gradients: rows added in order
        dg_sum[cr - o] += dr, dg_sum[cz - o] += dz, dg_sum[cn - o] += dn;
        dgh_sum[cr - o] += dr, dgh_sum[cz - o] += dz, dgh_sum[cn - o] += dn * r;
      }
    });
  }
}

template <typename T>
void gru_gates_rb_forward_rz(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghrz,
                             const T* b_hh, const T* h_prev, T* rh, int64_t ldh) {
  for (int64_t b = 0; b < B; ++b) {
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t cr = gate_col3<T>(H, 0, j), cz = gate_col3<T>(H, 1, j);
      const T r =
          sigmoid(g[b * 3 * H + cr] + ghrz[b * 2 * H + gate_col2<T>(H, 0, j)] + bias(b_hh, cr));
      const T z =
          sigmoid(g[b * 3 * H + cz] + ghrz[b * 2 * H + gate_col2<T>(H, 1, j)] + bias(b_hh, cz));
      g[b * 3 * H + cr] = r;
      g[b * 3 * H + cz] = z;
      rh[b * H + j] = r * h_prev[b * ldh + j];
    });
  }
}

template <typename T>
void gru_gates_rb_forward_n(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghn,
                            const T* b_hh, const T* h_prev, T* h, int64_t ldh) {
  for (int64_t b = 0; b < B; ++b) {
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t cz = b * 3 * H + gate_col3<T>(H, 1, j), cn = b * 3 * H + gate_col3<T>(H, 2, j);
      const T n = std::tanh(g[cn] + ghn[b * H + j] + bias(b_hh, cn - b * 3 * H));
      h[b * ldh + j] = (T(1) - g[cz]) * n + g[cz] * h_prev[b * ldh + j];
      g[cn] = n;
    });
  }
}

template <typename T>
void gru_gates_rb_backward_zn(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                              const T* h_prev, const T* dh, T* dg, T* dn, T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t i = b * H + j;
      const int64_t cz = b * 3 * H + gate_col3<T>(H, 1, j), cn = b * 3 * H + gate_col3<T>(H, 2, j);
      const T z = g[cz], n = g[cn], d = dh[i];
      dg[cz] = d * (h_prev[i] - n) * z * (T(1) - z);
      dg[cn] = dn[i] = d * (T(1) - z) * (T(1) - n * n);
      dh_prev[i] = d * z;
    });
  }
}

template <typename T>
void gru_gates_rb_backward_r(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                             const T* h_prev, const T* drh, T* dg, T* drz, T* dh_prev) {
  for (int64_t b = 0; b < B; ++b) {
    for_units<T>(H, b0, b1, [&](int64_t j) {
      const int64_t i = b * H + j;
      const int64_t cr = b * 3 * H + gate_col3<T>(H, 0, j), cz = b * 3 * H + gate_col3<T>(H, 1, j);
      const T r = g[cr];
      dg[cr] = drh[i] * h_prev[i] * r * (T(1) - r);
      drz[b * 2 * H + gate_col2<T>(H, 0, j)] = dg[cr];
      drz[b * 2 * H + gate_col2<T>(H, 1, j)] = dg[cz];
      dh_prev[i] += drh[i] * r;
    });
  }
}

#define GRUX_INSTANTIATE(T)                                                                        \
  template void gru_gates_lbr_forward<T>(int64_t, int64_t, int64_t, int64_t, T*, const T*,         \
                                         const T*, const T*, T*, T*, int64_t);                     \
  template void gru_gates_lbr_backward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*,  \
                                          const T*, const T*, const T*, int64_t, T*, T*, T*, T*,   \
                                          T*, T*);                                                 \
  template void gru_gates_rb_forward_rz<T>(int64_t, int64_t, int64_t, int64_t, T*, const T*,       \
                                           const T*, const T*, T*, int64_t);                       \
  template void gru_gates_rb_forward_n<T>(int64_t, int64_t, int64_t, int64_t, T*, const T*,        \
                                          const T*, const T*, T*, int64_t);                        \
  template void gru_gates_rb_backward_zn<T>(int64_t, int64_t, int64_t, int64_t, const T*,          \
                                            const T*, const T*, T*, T*, T*);                       \
  template void gru_gates_rb_backward_r<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, \
                                           const T*, T*, T*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::cpu::ref
