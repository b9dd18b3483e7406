// A one-step cell call's state and scratch (GruCell's and LstmCell's fast steps): on the stack
// where they fit in 16 KB (H up to about 580 for one GRU layer), else one heap block (a heap
// block of that size per call costs 40-250 ns).
#pragma once

#include <hwy/aligned_allocator.h>

#include <cstdint>

#include "grux/error.h"

namespace grux::ops {

class StepBuffer {
 public:
  explicit StepBuffer(int64_t floats) {
    if (floats > kStackFloats) {
      heap_ = hwy::AllocateAligned<float>(static_cast<size_t>(floats));
      if (!heap_) throw Error("cell step: out of memory");
    }
  }
  float* get() { return heap_ ? heap_.get() : stack_; }

 private:
  static constexpr int64_t kStackFloats = 4096;
  alignas(64) float stack_[kStackFloats];
  hwy::AlignedFreeUniquePtr<float[]> heap_;
};

}  // namespace grux::ops
