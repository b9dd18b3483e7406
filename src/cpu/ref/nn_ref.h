// Reference kernels for Linear, Embedding and softmax cross-entropy: naive loops in double,
// written from the equations. Same contracts as cpu/linear.h, cpu/embedding.h and
// cpu/cross_entropy.h; the oracles for those kernels and the fallback under the switch.
#pragma once

#include <cstdint>

namespace grux::cpu::ref {

template <typename T>
void linear_forward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                    const T* w, int64_t ldw, bool trans_w, const T* b, T* y);
template <typename T>
void linear_backward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                     const T* w, int64_t ldw, bool trans_w, const T* dy, int64_t lddy, T* dx, T* dw,
                     T* db);

template <typename T>
void embedding_forward(int64_t N, int64_t E, const int64_t* ids, const T* table, int64_t ldt, T* y);
template <typename T>
void embedding_backward(int64_t N, int64_t V, int64_t E, const int64_t* ids, const T* dy,
                        T* dtable);

template <typename T>
void cross_entropy(int64_t M, int64_t V, const T* logits, int64_t ld, const int64_t* targets,
                   double scale, double* row_loss, T* dlogits);

}  // namespace grux::cpu::ref
