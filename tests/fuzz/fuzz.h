// What every fuzzer of tests/fuzz shares: the entry point libFuzzer calls, which hands the
// input's bytes to the fuzzer's own run(), and the check of a refusal's message. Included once,
// by the one source of each fuzzer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "grux/error.h"

namespace grux::fuzz {

// The fuzzer's own (one definition in each source): one input, its bytes.
void run(const std::string& bytes);

// A refusal says why, in one line of printable UTF-8 whatever bytes the input held.
inline void check_message(const std::string& m) {
  if (m.empty() || grux::printable_line(m) != m) __builtin_trap();
}

}  // namespace grux::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grux::fuzz::run(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
