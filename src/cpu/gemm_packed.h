// Row-invariant GEMM for projections by a weight matrix packed once: C = A W^T + bias.
// Each output element is bias + (sum over k = 0..K-1 in order, by fused multiply-adds from
// zero), so a row's result is bit-identical however many rows are computed together. This is
// what makes a streamed frame equal to the same frame inside a whole-sequence run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace grux::cpu {

// Columns per packed panel: 128 bytes (32 f32 or 16 f64).
template <typename T>
constexpr int64_t kPanelCols = 128 / sizeof(T);

// Elements of the packed form of a (N x K) weight: ceil(N / panel) * panel * K.
template <typename T>
int64_t packed_weights_size(int64_t N, int64_t K) {
  return (N + kPanelCols<T> - 1) / kPanelCols<T> * kPanelCols<T> * K;
}

// Packs W (N x K, row-major, e.g. weight_ih (3H x I)) into panels of kPanelCols columns,
// each panel K x kPanelCols row-major, the last one zero-padded.
template <typename T>
void pack_weights_nt(int64_t N, int64_t K, const T* W, T* packed);

// C (M x N, row stride ldc) = A (M x K, row stride lda) W^T + bias (N, or null for none),
// with W packed by pack_weights_nt.
template <typename T>
void gemm_nt_packed(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* packed,
                    const T* bias, T* C, int64_t ldc);

}  // namespace grux::cpu
