// Internal-invariant failure handler and the process-wide reference-kernel switch.
// User errors are grux::Error (include/grux/error.h); this file handles the other tier.
#include "grux/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "grux/runtime.h"

namespace grux {

[[noreturn]] void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "grux: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  std::abort();
}

namespace {
bool reference_from_env() {
  const char* v = std::getenv("GRUX_REFERENCE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}
bool g_reference = reference_from_env();
}  // namespace

void set_reference_kernels(bool on) {
  g_reference = on;
}
bool reference_kernels() {
  return g_reference;
}

}  // namespace grux
