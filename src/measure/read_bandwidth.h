// A read pass over memory with full-width SIMD loads: what a kernel that streams its
// weights from a given cache level can at best achieve. Used by `grux bench` for its bound.
#pragma once

#include <cstdint>

namespace grux::measure {

// Sums n floats (data 64-byte aligned), from the first to the last or, with reverse, from the
// last to the first; the sum keeps the reads from being optimized away.
float read_sum(const float* data, int64_t n, bool reverse = false);

}  // namespace grux::measure
