// The C API's way into a GruStream's real-time path: its model adds a Linear head and a
// residual to the GRU, and on that path the head runs inside the kernel's step, on h' while
// it is in registers (cpu/gru_stream.h), instead of as a product after the stream.
#pragma once

#include <cstdint>

#include "core/visibility.h"
#include "cpu/gru_stream.h"
#include "grux/gru.h"

namespace grux {

struct GRUX_INTERNAL GruStreamAccess {
  // Whether s runs the real-time kernel (one f32 sequence on the calling thread).
  static bool fast(const GruStream& s);
  // For a stream that does (checked by the caller): in (frames, I) and out (frames, O)
  // contiguous, out = head(gru(in)) (+ in with residual), head null: out = gru(in) (+ in).
  // Allocates nothing.
  static void process_head(GruStream& s, const float* in, float* out, int64_t frames,
                           const cpu::StreamHead* head, bool residual);
};

}  // namespace grux
