// Internal knobs of the minGRU driver (src/ops/mingru.cpp) for tests and tuning experiments;
// not part of the public API.
#pragma once

#include <cstdint>

namespace grux::ops {

// Bytes of per-thread workspace per time chunk in the channel-split inference forward; 0
// restores the default (1 MiB). Tests shrink it so that chunk boundaries are crossed.
void set_mingru_chunk_bytes(int64_t bytes);

}  // namespace grux::ops
