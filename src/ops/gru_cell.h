// The GRU cell level: one time step of one layer and direction = the recurrent GEMM(s) plus
// the fused gate kernel, forward and backward. Used by the sequence driver, GruCell, GruStream.
//
// B active rows, H hidden size. w_hh (3H x H) row-major, gate blocks r, z, n.
// g (B x 3H) holds the input projection x W_ih^T + b_ih on entry to forward and the gate
// activations r, z, n on return. gh (B x 3H) is scratch. aux (B x H) receives what backward
// needs besides g: hn = W_hn h + b_hn (linear-before-reset) or rh = r * h (reset-before).
#pragma once

#include <cstdint>

#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_gates.h"
#include "cpu/ref/gemm_ref.h"
#include "cpu/ref/gru_gates_ref.h"
#include "grux/gru.h"
#include "grux/runtime.h"

namespace grux::ops {

// The kernels one run uses: optimized, or the reference twins when the switch is on.
template <typename T>
struct GruKernels {
  bool reference;
  decltype(&cpu::gemm<T>) gemm;
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
    return {true,
            &cpu::ref::gemm<T>,
            &cpu::ref::gru_gates_lbr_forward<T>,
            &cpu::ref::gru_gates_lbr_backward<T>,
            &cpu::ref::gru_gates_rb_forward_rz<T>,
            &cpu::ref::gru_gates_rb_forward_n<T>,
            &cpu::ref::gru_gates_rb_backward_zn<T>,
            &cpu::ref::gru_gates_rb_backward_r<T>};
  return {false,
          &cpu::gemm<T>,
          &cpu::gru_gates_lbr_forward<T>,
          &cpu::gru_gates_lbr_backward<T>,
          &cpu::gru_gates_rb_forward_rz<T>,
          &cpu::gru_gates_rb_forward_n<T>,
          &cpu::gru_gates_rb_backward_zn<T>,
          &cpu::gru_gates_rb_backward_r<T>};
}

// The input projection g (rows x 3H) = x W_ih^T + b_ih, for all rows at once. The optimized
// path uses the row-invariant packed GEMM (w_ih_packed from cpu::pack_weights_nt), so a
// row's result does not depend on how many rows are projected together.
template <typename T>
void gru_input_projection(const GruKernels<T>& k, int64_t rows, int64_t H, int64_t in, const T* x,
                          const T* w_ih, const T* w_ih_packed, const T* b_ih, T* g) {
  const int64_t G = 3 * H;
  if (!k.reference) return cpu::gemm_nt_packed<T>(rows, G, in, x, in, w_ih_packed, b_ih, g, G);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < G; ++c) g[r * G + c] = b_ih ? b_ih[c] : T(0);
  k.gemm(false, true, rows, G, in, T(1), x, in, w_ih, in, T(1), g, G);
}

// One forward step: h = cell(g, h_prev). b_hh may be null (no bias).
template <typename T>
void gru_cell_forward(const GruKernels<T>& k, GruForm form, int64_t B, int64_t H, const T* w_hh,
                      const T* b_hh, const T* h_prev, T* g, T* gh, T* aux, T* h) {
  if (form == GruForm::linear_before_reset) {
    // 1. gh = h_prev W_hh^T (all three blocks). 2. gates.
    k.gemm(false, true, B, 3 * H, H, T(1), h_prev, H, w_hh, H, T(0), gh, 3 * H);
    k.lbr_forward(B, H, g, gh, b_hh, h_prev, h, aux);
  } else {
    // 1. gh[r, z] = h_prev W_h{r,z}^T. 2. r, z and rh = r * h_prev.
    // 3. gh[n] = rh W_hn^T. 4. n and h.
    k.gemm(false, true, B, 2 * H, H, T(1), h_prev, H, w_hh, H, T(0), gh, 3 * H);
    k.rb_forward_rz(B, H, g, gh, b_hh, h_prev, aux);
    k.gemm(false, true, B, H, H, T(1), aux, H, w_hh + 2 * H * H, H, T(0), gh + 2 * H, 3 * H);
    k.rb_forward_n(B, H, g, gh, b_hh, h_prev, h);
  }
}

// One backward step given dh = dL/dh (B x H). Writes dg (B x 3H, input side), dgh (B x 3H,
// recurrent side; may alias dg for reset-before) and dh_prev = dL/dh_prev (B x H).
// drh (B x H) is scratch for reset-before.
template <typename T>
void gru_cell_backward(const GruKernels<T>& k, GruForm form, int64_t B, int64_t H, const T* w_hh,
                       const T* h_prev, const T* g, const T* aux, const T* dh, T* dg, T* dgh,
                       T* drh, T* dh_prev) {
  if (form == GruForm::linear_before_reset) {
    // 1. pointwise. 2. dh_prev += dgh W_hh.
    k.lbr_backward(B, H, g, aux, h_prev, dh, dg, dgh, dh_prev);
    k.gemm(false, false, B, H, 3 * H, T(1), dgh, 3 * H, w_hh, H, T(1), dh_prev, H);
  } else {
    // 1. dz, dn and dh_prev = dh z. 2. drh = dn W_hn. 3. dr, dh_prev += drh r.
    // 4. dh_prev += [dr dz] W_h{r,z}.
    k.rb_backward_zn(B, H, g, h_prev, dh, dg, dh_prev);
    k.gemm(false, false, B, H, H, T(1), dg + 2 * H, 3 * H, w_hh + 2 * H * H, H, T(0), drh, H);
    k.rb_backward_r(B, H, g, h_prev, drh, dg, dh_prev);
    k.gemm(false, false, B, H, 2 * H, T(1), dg, 3 * H, w_hh, H, T(1), dh_prev, H);
  }
}

}  // namespace grux::ops
