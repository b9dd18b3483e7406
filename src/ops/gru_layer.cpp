// One GRU layer-direction walked over time, forward and backward side by side: the input
// projection of all steps as one GEMM, the per-step cell, and weight gradients as one GEMM.
#include "ops/gru_layer.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace grux::ops {

SeqLayout make_seq_layout(int64_t T, int64_t N, const int64_t* lengths) {
  SeqLayout lay;
  lay.T = T;
  lay.N = N;
  lay.len.assign(N, T);
  if (lengths) lay.len.assign(lengths, lengths + N);
  lay.perm.resize(N);
  std::iota(lay.perm.begin(), lay.perm.end(), 0);
  std::stable_sort(lay.perm.begin(), lay.perm.end(),
                   [&](int64_t a, int64_t b) { return lay.len[a] > lay.len[b]; });
  lay.S = N > 0 ? lay.len[lay.perm[0]] : 0;
  lay.bs.assign(lay.S, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < lay.len[n]; ++s) ++lay.bs[s];
  lay.off.assign(lay.S + 1, 0);
  for (int64_t s = 0; s < lay.S; ++s) lay.off[s + 1] = lay.off[s] + lay.bs[s];
  return lay;
}

template <typename T>
Tensor pack_layer_weights(const GruLayerWeights& w, LayerWeightPtrs<T>& ptrs) {
  const int64_t G = w.w_ih.size(0), in = w.w_ih.size(1);
  Tensor packed = Tensor::empty({cpu::packed_weights_size<T>(G, in)}, dtype_of<T>());
  cpu::pack_weights_nt<T>(G, in, w.w_ih.data<T>(), packed.data<T>());
  ptrs = {w.w_ih.data<T>(), w.w_hh.data<T>(), w.b_ih.defined() ? w.b_ih.data<T>() : nullptr,
          w.b_hh.defined() ? w.b_hh.data<T>() : nullptr, packed.data<T>()};
  return packed;
}

template <typename T>
void gru_layer_forward(const GruKernels<T>& k, GruForm form, int64_t H, int64_t in,
                       const SeqLayout& lay, const LayerWeightPtrs<T>& w, const T* xp, const T* h0s,
                       T* g, T* aux, T* hs, T* gh) {
  const int64_t rows = lay.rows(), G = 3 * H;
  // 1. Input projection of every step at once: g = xp W_ih^T + b_ih.
  gru_input_projection(k, rows, H, in, xp, w.w_ih, w.w_ih_packed, w.b_ih, g);
  // 2. The recurrence: the active rows of step s are a prefix of those of step s - 1.
  for (int64_t s = 0; s < lay.S; ++s) {
    const int64_t o = lay.off[s];
    const T* h_prev = s == 0 ? h0s : hs + lay.off[s - 1] * H;
    gru_cell_forward(k, form, lay.bs[s], H, w.w_hh, w.b_hh, h_prev, g + o * G, gh, aux + o * H,
                     hs + o * H);
  }
}

namespace {
// out[c] = sum over rows of m[r, c] (rows x C).
template <typename T>
void column_sums(int64_t rows, int64_t C, const T* m, T* out) {
  std::fill(out, out + C, T(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < C; ++c) out[c] += m[r * C + c];
}
}  // namespace

template <typename T>
void gru_layer_backward(const GruKernels<T>& k, GruForm form, int64_t H, int64_t in,
                        const SeqLayout& lay, const LayerWeightPtrs<T>& w, const T* xp,
                        const T* h0s, const T* g, const T* aux, const T* hs, T* dyp, T* dxp,
                        T* dw_ih, T* dw_hh, T* db_ih, T* db_hh, T* dh0s, T* dg, T* dgh, T* hprev,
                        T* carry, T* drh) {
  const int64_t rows = lay.rows(), G = 3 * H, N = lay.N;
  // In the reset-before form the recurrent-side gate gradient equals the input-side one.
  T* dgh_all = form == GruForm::linear_before_reset ? dgh : dg;
  T* dh_next = carry;          // dL/dh_prev produced by step s + 1
  T* dh_prev = carry + N * H;  // produced by step s
  // 1. Walk time backwards; dL/dh of step s = gradient from above + carry from step s + 1.
  for (int64_t s = lay.S - 1; s >= 0; --s) {
    const int64_t o = lay.off[s], B = lay.bs[s];
    T* dh = dyp + o * H;
    if (s + 1 < lay.S)
      for (int64_t i = 0; i < lay.bs[s + 1] * H; ++i) dh[i] += dh_next[i];
    const T* h_prev = s == 0 ? h0s : hs + lay.off[s - 1] * H;
    gru_cell_backward(k, form, B, H, w.w_hh, h_prev, g + o * G, aux + o * H, dh, dg + o * G,
                      dgh_all + o * G, drh, dh_prev);
    std::swap(dh_next, dh_prev);
  }
  std::memcpy(dh0s, dh_next, N * H * sizeof(T));
  // 2. Pack the previous state of every row, the right operand of dW_hh.
  for (int64_t s = 0; s < lay.S; ++s) {
    const T* src = s == 0 ? h0s : hs + lay.off[s - 1] * H;
    std::memcpy(hprev + lay.off[s] * H, src, lay.bs[s] * H * sizeof(T));
  }
  // 3. Weight and input gradients, each one GEMM over all steps.
  k.gemm(true, false, G, in, rows, T(1), dg, G, xp, in, T(0), dw_ih, in);
  if (form == GruForm::linear_before_reset) {
    k.gemm(true, false, G, H, rows, T(1), dgh_all, G, hprev, H, T(0), dw_hh, H);
  } else {
    // Blocks r, z multiply h_prev; block n multiplies rh = r * h_prev (saved in aux).
    k.gemm(true, false, 2 * H, H, rows, T(1), dg, G, hprev, H, T(0), dw_hh, H);
    k.gemm(true, false, H, H, rows, T(1), dg + 2 * H, G, aux, H, T(0), dw_hh + 2 * H * H, H);
  }
  if (db_ih) column_sums(rows, G, dg, db_ih);
  if (db_hh) column_sums(rows, G, dgh_all, db_hh);
  k.gemm(false, false, rows, in, G, T(1), dg, G, w.w_ih, in, T(0), dxp, in);
}

#define GRUX_INSTANTIATE(T)                                                                       \
  template Tensor pack_layer_weights<T>(const GruLayerWeights&, LayerWeightPtrs<T>&);             \
  template void gru_layer_forward<T>(const GruKernels<T>&, GruForm, int64_t, int64_t,             \
                                     const SeqLayout&, const LayerWeightPtrs<T>&, const T*,       \
                                     const T*, T*, T*, T*, T*);                                   \
  template void gru_layer_backward<T>(const GruKernels<T>&, GruForm, int64_t, int64_t,            \
                                      const SeqLayout&, const LayerWeightPtrs<T>&, const T*,      \
                                      const T*, const T*, const T*, const T*, T*, T*, T*, T*, T*, \
                                      T*, T*, T*, T*, T*, T*, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::ops
