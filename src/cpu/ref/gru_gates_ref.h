// Reference GRU gate kernels: scalar loops written straight from the equations, with
// std::exp / std::tanh. Same contracts and layouts as the optimized kernels (cpu/gru_gates.h).
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void gru_gates_lbr_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* gh,
                           const T* b_hh, const T* h_prev, T* h, T* hn, int64_t ldh);
template <typename T>
void gru_gates_lbr_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g, const T* hn,
                            const T* h_prev, const T* dh, const T* dh_next, int64_t next_rows,
                            T* dg, T* dgh, T* dgh_all, T* dh_prev, T* dg_sum = nullptr,
                            T* dgh_sum = nullptr);
template <typename T>
void gru_gates_rb_forward_rz(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghrz,
                             const T* b_hh, const T* h_prev, T* rh, int64_t ldh);
template <typename T>
void gru_gates_rb_forward_n(int64_t B, int64_t H, int64_t b0, int64_t b1, T* g, const T* ghn,
                            const T* b_hh, const T* h_prev, T* h, int64_t ldh);
template <typename T>
void gru_gates_rb_backward_zn(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                              const T* h_prev, const T* dh, T* dg, T* dn, T* dh_prev);
template <typename T>
void gru_gates_rb_backward_r(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* g,
                             const T* h_prev, const T* drh, T* dg, T* drz, T* dh_prev);

}  // namespace grux::cpu::ref
