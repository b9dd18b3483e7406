// Internal-invariant failure handler. User errors are grux::Error (include/grux/error.h); this
// file handles the other tier.
#include "grux/error.h"

#include <cstdio>
#include <cstdlib>

namespace grux {

[[noreturn]] void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "grux: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  std::abort();
}

}  // namespace grux
