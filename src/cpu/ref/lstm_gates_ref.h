// Reference LSTM gate kernels: scalar loops written straight from the equations, with
// std::exp / std::tanh. Same contracts and layouts as the optimized kernels (cpu/lstm_gates.h).
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void lstm_gates_forward(int64_t B, int64_t H, int64_t b0, int64_t b1, T* a, const T* c_prev, T* c,
                        T* m, int64_t ldm, bool save);
template <typename T>
void lstm_gates_backward(int64_t B, int64_t H, int64_t b0, int64_t b1, const T* act, const T* c,
                         const T* c_prev, const T* dm, const T* dm_next, int64_t next_rows, T* dc,
                         T* da, T* da_sum);

}  // namespace grux::cpu::ref
