// Reference for the real-time LSTM kernel (cpu/lstm_stream.h): t steps of one layer on one
// sequence, scalar loops straight from nn.LSTM's equations in double, PyTorch-layout weights.
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

// x (t x I), h and c (H each: the state, read and updated), out (t x H); w_ih (4H x I),
// w_hh (4H x H), b_ih, b_hh (4H) or null.
void lstm_stream_forward(int64_t I, int64_t H, const float* w_ih, const float* w_hh,
                         const float* b_ih, const float* b_hh, int64_t t, const float* x, double* h,
                         double* c, double* out);

}  // namespace grux::cpu::ref
