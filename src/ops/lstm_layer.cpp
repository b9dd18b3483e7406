// One LSTM layer-direction walked over time, forward and backward side by side: the input
// projection and the walk over time shared with the GRU (ops/recurrent_layer.h), the LSTM's
// step (recurrent GEMM, fused gates, projection) by a team of threads that each own a share
// of the hidden units, and the weight gradients as one GEMM each.
#include "ops/lstm_layer.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

namespace grux::ops {

template <typename T>
LstmPackedLayer<T> pack_lstm_layer(const LstmLayerWeights& w, bool backward, Precision precision) {
  // bf16 packs the transposed operands of backward too (bf16 training); int8 is inference.
  GRUX_ASSERT(precision == Precision::f32 ||
              (std::is_same_v<T, float> && (!backward || precision == Precision::bf16)));
  constexpr int64_t U = cpu::kUnit<T>;
  LstmPackedLayer<T> P;
  const int64_t H = w.w_ih.size(0) / 4, in = w.w_ih.size(1), Pw = w.w_hh.size(1);
  P.H = H, P.P = Pw, P.in = in, P.proj = w.w_hr.defined();
  P.map4.resize(4 * H);
  for (int64_t j = 0; j < H; ++j)
    for (int64_t q = 0; q < 4; ++q) P.map4[cpu::gate_col4<T>(H, q, j)] = q * H + j;
  // Logical operands (K x N) and where their elements come from.
  using Spec = PackSpec<T>;
  const T* wih = w.w_ih.data<T>();
  const T* whh = w.w_hh.data<T>();
  const T* whr = P.proj ? w.w_hr.data<T>() : nullptr;
  std::vector<Spec> specs{{&P.ih, in, 4 * H, 2 * U, wih, 1, in, nullptr, P.map4.data()},
                          {&P.hh, Pw, 4 * H, 2 * U, whh, 1, Pw, nullptr, P.map4.data()}};
  if (P.proj) specs.push_back({&P.hr, H, Pw, U, whr, 1, H, nullptr, nullptr});
  if (backward) {
    // dL/dx's panels need not hold whole units (f32; the low precisions pack in 2 units, as
    // the forward operands).
    const int64_t panel = precision == Precision::f32 ? cpu::gemm_panel_for<T>(in) : 2 * U;
    specs.push_back({&P.ih_t, 4 * H, in, panel, wih, in, 1, P.map4.data(), nullptr});
    specs.push_back({&P.hh_t, 4 * H, Pw, U, whh, Pw, 1, P.map4.data(), nullptr});
    if (P.proj) specs.push_back({&P.hr_t, Pw, H, U, whr, H, 1, nullptr, nullptr});
  }
  P.storage = pack_operands<T>(specs, precision);
  if (w.b_ih.defined()) {
    P.b_ih.resize(4 * H);
    P.b_hh.resize(4 * H);
    for (int64_t c = 0; c < 4 * H; ++c) {
      P.b_ih[c] = w.b_ih.data<T>()[P.map4[c]];
      P.b_hh[c] = w.b_hh.data<T>()[P.map4[c]];
    }
  }
  return P;
}

template <typename T>
void lstm_layer_forward(const LstmKernels<T>& k, const LstmPackedLayer<T>& P, const SeqLayout& lay,
                        const T* xp, const T* h0s, T* a, T* hs, T* cs, T* m, bool training,
                        ThreadTeam* team, int max_threads, const DenseIo<T>* io, int64_t step0) {
  const int64_t H = P.H, G = 4 * H, N = lay.N;
  const T* b_ih = P.b_ih.empty() ? nullptr : P.b_ih.data();
  const T* b_hh = P.b_hh.empty() ? nullptr : P.b_hh.data();
  const WalkShape w{H, P.P, P.in, G, 2, training};
  walk_layer_forward<T>(
      k, P.ih, b_ih, w, lay, xp, h0s, a, hs, team, max_threads, io, step0,
      [&](const TeamShare& me, int64_t s, int64_t o, const T* h_prev, int64_t ldh, T* h,
          bool sync_end, int64_t index) {
        const int64_t B = lay.bs[s];
        T* as = a + o * G;
        // 1. a += h_prev W_hh^T + b_hh for my units (a holds x W_ih^T + b_ih).
        k.gemm(B, h_prev, ldh, false, P.hh, b_hh, true, as, G, 2 * me.b0,
               std::min(2 * me.b1, P.hh.panels()), index);
        // 2. The gates and c' of my units; m = o tanh(c') straight into h without a projection.
        const T* c_prev = training ? (s == 0 ? cs : cs + (N + lay.off[s - 1]) * H) : cs;
        T* c = training ? cs + (N + o) * H : cs;
        T* mo = P.proj ? (training ? m + o * H : m) : h;
        k.forward(B, H, me.b0, me.b1, as, c_prev, c, mo, P.proj ? H : ldh, training);
        // 3. (every unit's m ready) h = m W_hr^T, my share of its panels.
        if (P.proj) {
          me.sync();
          const int64_t np = P.hr.panels();
          k.gemm(B, mo, H, false, P.hr, nullptr, false, h, ldh, me.p0(np), me.p1(np), index);
        }
        if (sync_end) me.sync();
      });
}

template <typename T>
void lstm_layer_backward(const LstmKernels<T>& k, const LstmPackedLayer<T>& P, const SeqLayout& lay,
                         const T* xp, const T* states, const T* a, const T* cs, const T* m, T* dyp,
                         T* dc, T* dxp, LstmLayerWeights& dw, T* dh0s) {
  constexpr int64_t U = cpu::kUnit<T>;
  const int64_t H = P.H, Pw = P.P, G = 4 * H, N = lay.N, rows = lay.rows(), in = P.in;
  const DType dt = dtype_of<T>();
  Tensor da = Tensor::empty({rows, G}, dt);
  Tensor carry = Tensor::empty({2, N, Pw}, dt);
  Tensor dm = Tensor::empty({P.proj ? N : 0, H}, dt);
  const bool bias = dw.b_ih.defined();
  Tensor bsum = Tensor::zeros({bias ? G : 0}, dt);
  T* da_sum = bias ? bsum.data<T>() : nullptr;
  // 1. Walk time backwards. dL/dh of step s = gradient from above + carry from step s + 1;
  //    dL/dc is carried in place in dc (a sequence's row is untouched after its last step
  //    until the step is reached, so it still holds its dL/dc_n then).
  run_team(nullptr, H, U, 0, [&](const TeamShare& me) {
    T* dh_next = carry.data<T>();           // dL/dh_prev produced by step s + 1
    T* dh_prev = carry.data<T>() + N * Pw;  // produced by step s
    // My share of the state's columns: my units without a projection, else my share of the
    // one-unit panels of hh_t (whose output is the state).
    const int64_t np = P.hh_t.panels();
    const int64_t q0 = P.proj ? me.p0(np) : me.b0, q1 = P.proj ? me.p1(np) : me.b1;
    for (int64_t s = lay.S - 1; s >= 0; --s) {
      const int64_t o = lay.off[s], B = lay.bs[s];
      const bool last = s + 1 == lay.S;  // no carry into the last step
      const int64_t next_rows = last ? 0 : lay.bs[s + 1];
      const T* c_prev = s == 0 ? cs : cs + (N + lay.off[s - 1]) * H;
      const T* c = cs + (N + o) * H;
      T* dy = dyp + o * Pw;
      if (!P.proj) {
        k.backward(B, H, me.b0, me.b1, a + o * G, c, c_prev, dy, last ? nullptr : dh_next,
                   next_rows, dc, da.data<T>() + o * G, da_sum);
      } else {
        // dh = dy + carry (my columns; the whole dh is dW_hr's operand afterwards), then
        // (all of dh ready) dm = dh W_hr for my units.
        const int64_t j0 = q0 * U, j1 = std::min(Pw, q1 * U);
        for (int64_t r = 0; r < next_rows; ++r)
          for (int64_t j = j0; j < j1; ++j) dy[r * Pw + j] += dh_next[r * Pw + j];
        me.sync();
        k.gemm(B, dy, Pw, false, P.hr_t, nullptr, false, dm.data<T>(), H, me.b0, me.b1);
        k.backward(B, H, me.b0, me.b1, a + o * G, c, c_prev, dm.data<T>(), nullptr, 0, dc,
                   da.data<T>() + o * G, da_sum);
      }
      // (all of da ready) dh_prev = da W_hh, my columns.
      me.sync();
      k.gemm(B, da.data<T>() + o * G, G, false, P.hh_t, nullptr, false, dh_prev, Pw, q0, q1);
      std::swap(dh_next, dh_prev);
    }
  });
  std::memcpy(dh0s, carry.data<T>() + (lay.S % 2 == 1 ? N * Pw : 0), N * Pw * sizeof(T));
  // 2. The previous state of every packed row (the right operand of dW_hh), as rows of
  //    `states`: step 0 reads h0s, step s the states of step s - 1.
  std::vector<int64_t> hprev_rows(rows);
  for (int64_t s = 0; s < lay.S; ++s)
    for (int64_t j = 0; j < lay.bs[s]; ++j)
      hprev_rows[lay.off[s] + j] = s == 0 ? j : N + lay.off[s - 1] + j;
  // 3. Weight gradients, each one GEMM over all steps (rows in gate-interleaved order, then
  //    put back in PyTorch's order), and the input gradient.
  Tensor tmp = Tensor::empty({G, std::max(in, Pw)}, dt);
  T* t = tmp.data<T>();
  const bool bf16 = P.ih.bf16 != nullptr;  // bf16 training: the products' operands in bf16
  gradient_gemm<T>(k, bf16, rows, G, da.data<T>(), G, in, xp, t);
  unpermute_rows(G, in, t, P.map4.data(), dw.w_ih.data<T>());
  gradient_gemm<T>(k, bf16, rows, G, da.data<T>(), G, Pw, states, t, hprev_rows.data());
  unpermute_rows(G, Pw, t, P.map4.data(), dw.w_hh.data<T>());
  if (P.proj) gradient_gemm<T>(k, bf16, rows, Pw, dyp, Pw, H, m, dw.w_hr.data<T>());
  if (bias)
    for (int64_t c = 0; c < G; ++c)
      dw.b_ih.data<T>()[P.map4[c]] = dw.b_hh.data<T>()[P.map4[c]] = da_sum[c];
  k.gemm_all(rows, da.data<T>(), G, false, P.ih_t, nullptr, false, dxp, in);
}

#define GRUX_INSTANTIATE(T)                                                                       \
  template LstmPackedLayer<T> pack_lstm_layer<T>(const LstmLayerWeights&, bool, Precision);       \
  template void lstm_layer_forward<T>(const LstmKernels<T>&, const LstmPackedLayer<T>&,           \
                                      const SeqLayout&, const T*, const T*, T*, T*, T*, T*, bool, \
                                      ThreadTeam*, int, const DenseIo<T>*, int64_t);              \
  template void lstm_layer_backward<T>(const LstmKernels<T>&, const LstmPackedLayer<T>&,          \
                                       const SeqLayout&, const T*, const T*, const T*, const T*,  \
                                       const T*, T*, T*, T*, LstmLayerWeights&, T*);
GRUX_INSTANTIATE(float)
GRUX_INSTANTIATE(double)
#undef GRUX_INSTANTIATE

}  // namespace grux::ops
