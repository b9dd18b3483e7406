// Reference for the real-time GRU kernel (cpu/gru_stream.h): t steps of one layer on one
// sequence, scalar loops straight from nn.GRU's equations in double, PyTorch-layout weights.
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

// x (t x I), h (H: the state, read and updated), out (t x H); w_ih (3H x I), w_hh (3H x H),
// b_ih, b_hh (3H) or null. reset_before: n = tanh(W_in x + b_in + W_hn (r h) + b_hn).
void gru_stream_forward(int64_t I, int64_t H, bool reset_before, const float* w_ih,
                        const float* w_hh, const float* b_ih, const float* b_hh, int64_t t,
                        const float* x, double* h, double* out);

}  // namespace grux::cpu::ref
