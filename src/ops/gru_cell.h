// The GRU cell level: one time step of one layer-direction = the recurrent GEMM(s) plus the
// fused gate kernels, forward and backward, for one thread's share of the hidden units.
// Used inside the time loop of gru_layer.cpp (by a team of threads, with barriers here).
//
// B active rows, H hidden size, U = cpu::kUnit<T> units per block. Gate buffers use the
// interleaved layout of cpu/gru_gates.h. A thread owns unit blocks [b0, b1): its gates, the
// matching panels of the forward GEMMs, and the same units' output panels (one unit wide) of
// the backward GEMMs that produce dL/dh_prev.
#pragma once

#include <omp.h>

#include <cstdint>
#include <vector>

#include "cpu/gru_gates.h"
#include "cpu/ref/gru_gates_ref.h"
#include "grux/gru.h"
#include "grux/precision.h"
#include "ops/recurrent_layer.h"

namespace grux::ops {

// The kernels one run uses: optimized, or the reference twins when the switch is on.
template <typename T>
struct GruKernels : GemmKernels<T> {
  decltype(&cpu::gru_gates_lbr_forward<T>) lbr_forward;
  decltype(&cpu::gru_gates_lbr_backward<T>) lbr_backward;
  decltype(&cpu::gru_gates_rb_forward_rz<T>) rb_forward_rz;
  decltype(&cpu::gru_gates_rb_forward_n<T>) rb_forward_n;
  decltype(&cpu::gru_gates_rb_backward_zn<T>) rb_backward_zn;
  decltype(&cpu::gru_gates_rb_backward_r<T>) rb_backward_r;
};

template <typename T>
GruKernels<T> gru_kernels() {
  if (reference_kernels())
    return {gemm_kernels<T>(),
            &cpu::ref::gru_gates_lbr_forward<T>,
            &cpu::ref::gru_gates_lbr_backward<T>,
            &cpu::ref::gru_gates_rb_forward_rz<T>,
            &cpu::ref::gru_gates_rb_forward_n<T>,
            &cpu::ref::gru_gates_rb_backward_zn<T>,
            &cpu::ref::gru_gates_rb_backward_r<T>};
  return {gemm_kernels<T>(),
          &cpu::gru_gates_lbr_forward<T>,
          &cpu::gru_gates_lbr_backward<T>,
          &cpu::gru_gates_rb_forward_rz<T>,
          &cpu::gru_gates_rb_forward_n<T>,
          &cpu::gru_gates_rb_backward_zn<T>,
          &cpu::gru_gates_rb_backward_r<T>};
}

// One layer-direction's weights packed for the kernels (create once, run many steps).
template <typename T>
struct PackedLayer {
  int64_t H = 0, in = 0;
  GruForm form = GruForm::linear_before_reset;
  cpu::PackedB<T> ih;    // (in x 3H): g = x ih + b_ih, gate columns interleaved
  cpu::PackedB<T> hh;    // forward recurrent: (H x 3H) interleaved; reset-before: (H x 2H) r, z
  cpu::PackedB<T> hn;    // reset-before: (H x H), W_hn^T
  cpu::PackedB<T> ih_t;  // backward: (3H x in), dx = dg ih_t
  cpu::PackedB<T> hh_t;  // backward: (3H x H), dh_prev += dgh hh_t; reset-before (2H x H);
                         // one-unit panels so that threads split them like the units
  cpu::PackedB<T> hn_t;  // backward, reset-before: (H x H), drh = dn hn_t; one-unit panels
  std::vector<T> b_ih, b_hh;        // interleaved (3H); empty without bias
  std::vector<int64_t> map3, map2;  // interleaved column -> PyTorch weight row
  Tensor storage;                   // owns the packed data
};

// Packs one layer-direction; the backward operands only when `backward`. With a precision
// other than f32 (T = float, inference only) the forward operands ih, hh and hn are packed in
// it (cpu/gemm_lowp.h) and every product with them runs in it.
template <typename T>
PackedLayer<T> pack_layer(const GruLayerWeights& w, GruForm form, bool backward,
                          Precision precision = Precision::f32);

// Forward step for this thread's blocks. g (B x 3H) in: input projection, out: r, z, n.
// aux (B x H): hn (linear-before-reset) or rh (reset-before). gh: scratch (B x 3H). h_prev
// and h: B rows ldh apart.
// Ends with a barrier (h complete for every unit on return) unless !sync_end: the last step
// of a parallel region, whose end synchronizes anyway. `step`: the step's index since the
// state was set, which orders the recurrent products' reads (cpu::gemm_packed).
template <typename T>
void gru_cell_forward(const GruKernels<T>& k, const PackedLayer<T>& P, const TeamShare& me,
                      int64_t B, const T* h_prev, T* g, T* gh, T* aux, T* h, int64_t ldh,
                      bool sync_end = true, int64_t step = 0) {
  const int64_t H = P.H;
  const T* b_hh = P.b_hh.empty() ? nullptr : P.b_hh.data();
  if (P.form == GruForm::linear_before_reset) {
    // 1. gh = h_prev W_hh^T for my blocks. 2. gates of my blocks.
    k.gemm(B, h_prev, ldh, false, P.hh, nullptr, false, gh, 3 * H, me.b0, me.b1, step);
    k.lbr_forward(B, H, me.b0, me.b1, g, gh, b_hh, h_prev, h, aux, ldh);
  } else {
    // 1. [r z] pre-activations. 2. r, z, rh = r * h_prev. 3. (all rh ready) gh_n = rh W_hn^T.
    // 4. n and h.
    T* ghrz = gh;
    T* ghn = gh + 2 * H * B;
    k.gemm(B, h_prev, ldh, false, P.hh, nullptr, false, ghrz, 2 * H, me.b0, me.b1, step);
    k.rb_forward_rz(B, H, me.b0, me.b1, g, ghrz, b_hh, h_prev, aux, ldh);
    me.sync();
    k.gemm(B, aux, H, false, P.hn, nullptr, false, ghn, H, me.b0, me.b1, step);
    k.rb_forward_n(B, H, me.b0, me.b1, g, ghn, b_hh, h_prev, h, ldh);
  }
  if (sync_end) me.sync();
}

// Backward step given dh = dL/dh (B x H). Writes dg (B x 3H), the recurrent-side gradient
// (dgh for linear-before-reset; dn (B x H) and drz (B x 2H) for reset-before) and dh_prev
// (B x H), my units' columns (each thread reads and writes only its own columns of dh and
// dh_prev). drh: scratch (B x H).
// Linear-before-reset: dL/dh is dh + dh_next (the next step's dh_prev, its first next_rows
// rows; added by the gate kernel). dgh is a buffer the step's product reads at once; dgh_all
// (or null) keeps every step's copy (cpu::gru_gates_lbr_backward). dg_sum and dgh_sum (3H,
// or null) gain the rows of dg and dgh of my blocks (the bias gradients). No barrier at the
// end: the next step's gates touch only my columns, and a dgh the product of this step does
// not read (the caller alternates two), and they end with the barrier the next product needs.
// Reset-before: dh_next is added into dh (my columns) first; ends with a barrier.
template <typename T>
void gru_cell_backward(const GruKernels<T>& k, const PackedLayer<T>& P, const TeamShare& me,
                       int64_t B, const T* h_prev, const T* g, const T* aux, T* dh,
                       const T* dh_next, int64_t next_rows, T* dg, T* dgh, T* dgh_all, T* dn,
                       T* drz, T* drh, T* dh_prev, T* dg_sum = nullptr, T* dgh_sum = nullptr) {
  const int64_t H = P.H;
  if (P.form == GruForm::linear_before_reset) {
    // 1. pointwise (my blocks). 2. (all dgh ready) dh_prev += dgh W_hh (my output panels).
    k.lbr_backward(B, H, me.b0, me.b1, g, aux, h_prev, dh, dh_next, next_rows, dg, dgh, dgh_all,
                   dh_prev, dg_sum, dgh_sum);
    me.sync();
    k.gemm(B, dgh, 3 * H, false, P.hh_t, nullptr, true, dh_prev, H, me.b0, me.b1);
  } else {
    // 0. dh += dh_next. 1. dz, dn, dh_prev = dh z. 2. drh = dn W_hn. 3. dr, dh_prev += drh r.
    // 4. dh_prev += [dr dz] W_h{r,z}.
    const int64_t j0 = me.b0 * cpu::kUnit<T>, j1 = std::min(H, me.b1 * cpu::kUnit<T>);
    if (dh_next)
      for (int64_t r = 0; r < next_rows; ++r)
        for (int64_t j = j0; j < j1; ++j) dh[r * H + j] += dh_next[r * H + j];
    k.rb_backward_zn(B, H, me.b0, me.b1, g, h_prev, dh, dg, dn, dh_prev);
    me.sync();
    k.gemm(B, dn, H, false, P.hn_t, nullptr, false, drh, H, me.b0, me.b1);
    me.sync();
    k.rb_backward_r(B, H, me.b0, me.b1, g, h_prev, drh, dg, drz, dh_prev);
    me.sync();
    k.gemm(B, drz, 2 * H, false, P.hh_t, nullptr, true, dh_prev, H, me.b0, me.b1);
    me.sync();
  }
}

}  // namespace grux::ops
