// One GRU layer-direction walked over time, forward and backward side by side: the input
// projection of all steps as one GEMM, the per-step cell run by a team of threads that each
// own a share of the hidden units, and the weight gradients as one GEMM each.
#include "ops/gru_layer.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

namespace grux::ops {

template <typename T>
PackedLayer<T> pack_layer(const GruLayerWeights& w, GruForm form, bool backward,
                          Precision precision) {
  // bf16 packs the transposed operands of backward too (bf16 training); int8 is inference.
  GRUX_ASSERT(precision == Precision::f32 ||
              (std::is_same_v<T, float> && (!backward || precision == Precision::bf16)));
  constexpr int64_t U = cpu::kUnit<T>;
  PackedLayer<T> P;
  const int64_t H = w.w_hh.size(1), in = w.w_ih.size(1);
  P.H = H, P.in = in, P.form = form;
  P.map3.resize(3 * H);
  P.map2.resize(2 * H);
  for (int64_t j = 0; j < H; ++j)
    for (int64_t q = 0; q < 3; ++q) {
      P.map3[cpu::gate_col3<T>(H, q, j)] = q * H + j;
      if (q < 2) P.map2[cpu::gate_col2<T>(H, q, j)] = q * H + j;
    }
  const bool rb = form == GruForm::reset_before;
  // Logical operands (K x N) and where their elements come from.
  using Spec = PackSpec<T>;
  const T* wih = w.w_ih.data<T>();
  const T* whh = w.w_hh.data<T>();
  const T* whn = whh + 2 * H * H;
  std::vector<Spec> specs{{&P.ih, in, 3 * H, 3 * U, wih, 1, in, nullptr, P.map3.data()}};
  if (!rb) {
    specs.push_back({&P.hh, H, 3 * H, 3 * U, whh, 1, H, nullptr, P.map3.data()});
  } else {
    specs.push_back({&P.hh, H, 2 * H, 2 * U, whh, 1, H, nullptr, P.map2.data()});
    specs.push_back({&P.hn, H, H, U, whn, 1, H, nullptr, nullptr});
  }
  if (backward) {
    // dL/dx's panels need not hold whole units (f32: the low precisions pack in 3 units).
    const int64_t panel = precision == Precision::f32 ? cpu::gemm_panel_for<T>(in) : 3 * U;
    specs.push_back({&P.ih_t, 3 * H, in, panel, wih, in, 1, P.map3.data(), nullptr});
    if (!rb) {
      specs.push_back({&P.hh_t, 3 * H, H, U, whh, H, 1, P.map3.data(), nullptr});
    } else {
      specs.push_back({&P.hh_t, 2 * H, H, U, whh, H, 1, P.map2.data(), nullptr});
      specs.push_back({&P.hn_t, H, H, U, whn, H, 1, nullptr, nullptr});
    }
  }
  P.storage = pack_operands<T>(specs, precision);
  if (w.b_ih.defined()) {
    P.b_ih.resize(3 * H);
    P.b_hh.resize(3 * H);
    for (int64_t c = 0; c < 3 * H; ++c) {
      P.b_ih[c] = w.b_ih.data<T>()[P.map3[c]];
      P.b_hh[c] = w.b_hh.data<T>()[P.map3[c]];
    }
  }
  return P;
}

template <typename T>
void gru_layer_forward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                       const T* xp, const T* h0s, T* g, T* aux, T* hs, T* gh, ThreadTeam* team,
                       int max_threads, const DenseIo<T>* io, int64_t step0) {
  const int64_t H = P.H;
  const T* b_ih = P.b_ih.empty() ? nullptr : P.b_ih.data();
  const WalkShape w{H, H, P.in, 3 * H, 1, aux != nullptr};
  walk_layer_forward<T>(k, P.ih, b_ih, w, lay, xp, h0s, g, hs, team, max_threads, io, step0,
                        [&](const TeamShare& me, int64_t s, int64_t o, const T* h_prev, int64_t ldh,
                            T* h, bool sync_end, int64_t index) {
                          gru_cell_forward(k, P, me, lay.bs[s], h_prev, g + o * 3 * H, gh,
                                           aux ? aux + o * H : nullptr, h, ldh, sync_end, index);
                        });
}

template <typename T>
void gru_layer_backward(const GruKernels<T>& k, const PackedLayer<T>& P, const SeqLayout& lay,
                        const T* xp, const T* states, const T* g, const T* aux, T* dyp, T* dxp,
                        GruLayerWeights& dw, T* dh0s) {
  constexpr int64_t U = cpu::kUnit<T>;
  const int64_t H = P.H, G = 3 * H, N = lay.N, rows = lay.rows(), in = P.in;
  const bool lbr = P.form == GruForm::linear_before_reset;
  const DType dt = dtype_of<T>();
  const T* h0s = states;
  const T* hs = states + N * H;
  Tensor dg = Tensor::empty({rows, G}, dt);
  // dgh: every step's rows (streamed; the weight gradient's operand), and each step's through
  // the cache into one of two buffers, by the step's parity (the step's dL/dh_prev product
  // reads them at once; the same lines every other step, so they are not fetched from memory
  // before each write). Two: a thread may write step s - 1's rows while the other still
  // multiplies step s's (no barrier between the steps). The carry is added by the gate
  // kernel (no pass of its own over dh: W4's time loop 3% faster, the same bits).
  Tensor dgh = Tensor::empty({lbr ? rows : 0, G}, dt);
  Tensor dgh_step = Tensor::empty({lbr ? 2 * N : 0, G}, dt);
  Tensor dn = Tensor::empty({lbr ? 0 : rows, H}, dt),
         drz = Tensor::empty({lbr ? 0 : rows, 2 * H}, dt);
  Tensor carry = Tensor::empty({2, N, H}, dt), drh = Tensor::empty({N, H}, dt);
  // Linear-before-reset: the bias gradients (column sums of dg and dgh) are summed by the gate
  // kernel as it writes each row, steps from the last, rows in order; each column by the one
  // thread that owns it, so the same bits for any number of threads. (Summing dg and dgh
  // afterwards would read 2 x 39 MB back from memory: about 3% of a W4 training step.)
  const bool bias = dw.b_ih.defined();
  Tensor bsum = Tensor::zeros({lbr && bias ? 2 * G : 0}, dt);
  T* dg_sum = lbr && bias ? bsum.data<T>() : nullptr;
  T* dgh_sum = lbr && bias ? bsum.data<T>() + G : nullptr;
  // 1. Walk time backwards; dL/dh of step s = gradient from above + carry from step s + 1.
  run_team(nullptr, H, U, 0, [&](const TeamShare& me) {
    T* dh_next = carry.data<T>();          // dL/dh_prev produced by step s + 1
    T* dh_prev = carry.data<T>() + N * H;  // produced by step s
    for (int64_t s = lay.S - 1; s >= 0; --s) {
      const int64_t o = lay.off[s], B = lay.bs[s];
      const T* h_prev = s == 0 ? h0s : hs + lay.off[s - 1] * H;
      const bool last = s + 1 == lay.S;  // no carry into the last step
      gru_cell_backward(k, P, me, B, h_prev, g + o * G, aux + o * H, dyp + o * H,
                        last ? nullptr : dh_next, last ? 0 : lay.bs[s + 1], dg.data<T>() + o * G,
                        lbr ? dgh_step.data<T>() + (s % 2) * N * G : nullptr,
                        lbr ? dgh.data<T>() + o * G : nullptr, lbr ? nullptr : dn.data<T>() + o * H,
                        lbr ? nullptr : drz.data<T>() + o * 2 * H, drh.data<T>(), dh_prev, dg_sum,
                        dgh_sum);
      std::swap(dh_next, dh_prev);
    }
  });
  std::memcpy(dh0s, carry.data<T>() + (lay.S % 2 == 1 ? N * H : 0), N * H * sizeof(T));
  // 2. The previous state of every packed row (the right operand of dW_hh), as rows of
  //    `states`: step 0 reads h0s, step s the states of step s - 1.
  std::vector<int64_t> hprev_rows(rows);
  for (int64_t s = 0; s < lay.S; ++s)
    for (int64_t j = 0; j < lay.bs[s]; ++j)
      hprev_rows[lay.off[s] + j] = s == 0 ? j : N + lay.off[s - 1] + j;
  // 3. Weight gradients, each one GEMM over all steps (rows in gate-interleaved order, then
  //    put back in PyTorch's order), and the input gradient.
  Tensor tmp = Tensor::empty({G, std::max(in, H)}, dt);
  T* t = tmp.data<T>();
  const bool bf16 = P.ih.bf16 != nullptr;
  gradient_gemm(k, bf16, rows, G, dg.data<T>(), G, in, xp, t);
  unpermute_rows(G, in, t, P.map3.data(), dw.w_ih.data<T>());
  if (lbr) {
    gradient_gemm(k, bf16, rows, G, dgh.data<T>(), G, H, states, t, hprev_rows.data());
    unpermute_rows(G, H, t, P.map3.data(), dw.w_hh.data<T>());
  } else {
    // Blocks r, z multiply h_prev; block n multiplies rh = r * h_prev (saved in aux).
    gradient_gemm(k, bf16, rows, 2 * H, drz.data<T>(), 2 * H, H, states, t, hprev_rows.data());
    unpermute_rows(2 * H, H, t, P.map2.data(), dw.w_hh.data<T>());
    gradient_gemm(k, bf16, rows, H, dn.data<T>(), H, H, aux, dw.w_hh.data<T>() + 2 * H * H);
  }
  if (bias) {
    // Reset-before: b_hn's gradient is b_in's (both add to the n gate's pre-activation).
    if (!lbr) column_sums(rows, G, dg.data<T>(), t);
    const T* sg = lbr ? dg_sum : t;
    const T* sgh = lbr ? dgh_sum : t;
    for (int64_t c = 0; c < G; ++c) dw.b_ih.data<T>()[P.map3[c]] = sg[c];
    for (int64_t c = 0; c < G; ++c) dw.b_hh.data<T>()[P.map3[c]] = sgh[c];
  }
  k.gemm_all(rows, dg.data<T>(), G, false, P.ih_t, nullptr, false, dxp, in);
}

#define GRUX_INSTANTIATE(T)                                                                     \
  template PackedLayer<T> pack_layer<T>(const GruLayerWeights&, GruForm, bool, Precision);      \
  template void gru_layer_forward<T>(const GruKernels<T>&, const PackedLayer<T>&,               \
                                     const SeqLayout&, const T*, const T*, T*, T*, T*, T*,      \
                                     ThreadTeam*, int, const DenseIo<T>*, int64_t);             \
  template void gru_layer_backward<T>(const GruKernels<T>&, const PackedLayer<T>&,              \
                                      const SeqLayout&, const T*, const T*, const T*, const T*, \
                                      T*, T*, GruLayerWeights&, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::ops
