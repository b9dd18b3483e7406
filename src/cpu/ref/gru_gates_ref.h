// Reference GRU gate kernels: scalar loops written straight from the equations, with
// std::exp / std::tanh. Same contracts as the optimized kernels in cpu/gru_gates.h.
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void gru_gates_lbr_forward(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                           T* h, T* hn);
template <typename T>
void gru_gates_lbr_backward(int64_t B, int64_t H, const T* g, const T* hn, const T* h_prev,
                            const T* dh, T* dg, T* dgh, T* dh_prev);
template <typename T>
void gru_gates_rb_forward_rz(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh,
                             const T* h_prev, T* rh);
template <typename T>
void gru_gates_rb_forward_n(int64_t B, int64_t H, T* g, const T* gh, const T* b_hh, const T* h_prev,
                            T* h);
template <typename T>
void gru_gates_rb_backward_zn(int64_t B, int64_t H, const T* g, const T* h_prev, const T* dh, T* dg,
                              T* dh_prev);
template <typename T>
void gru_gates_rb_backward_r(int64_t B, int64_t H, const T* g, const T* h_prev, const T* drh, T* dg,
                             T* dh_prev);

}  // namespace grux::cpu::ref
