// Reference minGRU pointwise kernels: scalar loops straight from the equations, with std::exp
// and std::log. Same contracts and layouts as the optimized kernels (cpu/mingru_gates.h).
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void mingru_forward_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                           const int64_t* len, const T* k, const T* bias, T* a, T* b);
template <typename T>
void mingru_forward_log_coeffs(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H,
                               const int64_t* len, const T* k, const T* bias, T* la, T* lb);
template <typename T>
void mingru_backward_decay(int64_t r0, int64_t r1, int64_t rows, int64_t t0, int64_t N, int64_t H,
                           const int64_t* len, const T* k, const T* bias, T* a_next);
template <typename T>
void mingru_backward(int64_t r0, int64_t r1, int64_t t0, int64_t N, int64_t H, const int64_t* len,
                     bool log_space, const T* k, const T* bias, const T* h0, const T* h, const T* G,
                     T* dk, T* dh0);

}  // namespace grux::cpu::ref
