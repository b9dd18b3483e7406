// The engine's kernels as the measuring side (grux::tools: grux calibrate, grux bench) runs
// them to time them. libgrux exports these so that a shared libgrux_tools reaches the kernels
// themselves; the header is not installed and is not an API.
#pragma once

#include <cstdint>
#include <memory>

#include "grux/export.h"
#include "grux/precision.h"
#include "grux/tensor.h"

namespace grux GRUX_API {
namespace probe {

// C (n x n) = A W^T with grux's packed GEMM, as the operators run x W^T: W packed once, here, in
// the layout the current SIMD target reads, panels of 3 units. dtype f32 or f64; precision f32,
// or bf16 / int8 (f32 operands, W packed in that precision). A, W, C row-major, contiguous.
class PackedGemm {
 public:
  PackedGemm(DType dtype, Precision precision, int64_t n, const void* w);
  ~PackedGemm();
  PackedGemm(const PackedGemm&) = delete;
  PackedGemm& operator=(const PackedGemm&) = delete;
  // One product over the OpenMP threads (row blocks x panels), writing c = a W^T.
  void run(const void* a, void* c) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Latencies (ns) of the real-time kernel's dependency chain: one FMA, one sigmoid and one tanh
// of a vector, each timed as a chain of dependent calls with the kernel's own instructions.
struct StreamLatencies {
  double fma_ns = 0, sigmoid_ns = 0, tanh_ns = 0;
};
StreamLatencies stream_latencies();

// Round trip (ns) of one cache line between the calling thread and a second member of its
// thread team of `threads` (the team a stream stepped from this thread uses); 0 below 2.
double handoff_round_trip_ns(int threads);

}  // namespace probe
}  // namespace GRUX_API
