// Embedding kernels on raw pointers: the row gather of the forward pass and the
// deterministic scatter-add of the backward pass.
#pragma once

#include <cstdint>

namespace grux::cpu {

// Sizes: N ids (positions), V vocabulary rows, E embedding width.

// y (N x E, contiguous) row p = table row ids[p]. table: V x E, row stride ldt (>= E).
// ids: N values, each already checked to be in [0, V).
template <typename T>
void embedding_forward(int64_t N, int64_t E, const int64_t* ids, const T* table, int64_t ldt, T* y);

// dtable (V x E, contiguous) = 0, then row ids[p] += dy row p for p = 0..N-1 in that order.
// dy: N x E contiguous. Threads split the columns, so every row's additions happen in
// position order whatever the thread count: the bits never depend on it.
template <typename T>
void embedding_backward(int64_t N, int64_t V, int64_t E, const int64_t* ids, const T* dy,
                        T* dtable);

}  // namespace grux::cpu
