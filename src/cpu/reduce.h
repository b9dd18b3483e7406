// Reduction kernels (sum, max / min with the position of the extremum) on raw pointers. The
// input is walked once in row-major order and each element folded into its output slot.
#pragma once

#include <cstdint>

namespace grux::cpu {

// Shared contract. The input has `rank` >= 1 dimensions `shape` (every size >= 1), element
// (i0, ..., ik) at src[sum i_d * src_strides[d]]. Its output slot is
// out_offset = sum i_d * out_strides[d]; reduced dimensions have out_strides[d] == 0.
// Elements are visited in row-major order of the input index, so within one output slot they
// arrive in increasing position along the reduced dimensions.

// acc[out_offset] += src[...]. Acc is double for f32 and f64 inputs (see tensor_ops.cpp for
// why) and int64_t for i64 (wrapping on overflow). acc must be initialised by the caller.
template <typename T, typename Acc>
void reduce_sum(int64_t rank, const int64_t* shape, const T* src, const int64_t* src_strides,
                Acc* acc, const int64_t* out_strides);

// best[out_offset] = max (or min when !is_max) of the elements of its slot; a NaN wins over
// every number and the first NaN is kept. If best_index is not null it receives, for each
// slot, sum i_d * index_strides[d] of the element kept (the first one among equals).
// best must be initialised by the caller to the identity (-inf / +inf, or the i64 limits),
// best_index to 0.
template <typename T>
void reduce_extremum(bool is_max, int64_t rank, const int64_t* shape, const T* src,
                     const int64_t* src_strides, T* best, int64_t* best_index,
                     const int64_t* out_strides, const int64_t* index_strides);

}  // namespace grux::cpu
