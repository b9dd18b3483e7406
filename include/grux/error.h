// Errors in two tiers: grux::Error for bad user input (a message naming the argument, what
// was expected and what was found), GRUX_ASSERT for broken internal invariants (abort).
#pragma once

#include <stdexcept>
#include <string>

#include "grux/export.h"

namespace grux GRUX_API {

// `message` as one line of printable UTF-8: control characters (a newline too) and bytes that
// are not part of valid UTF-8 written as \xNN, so that whatever bytes a file held cannot break
// a message, a log line or a terminal.
std::string printable_line(const std::string& message);

// Thrown for any bad input: wrong shapes, dtypes, devices, malformed files, bad arguments.
// what() is a single line of printable UTF-8 (printable_line), suitable for printing as-is.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printable_line(message)) {}
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

}  // namespace GRUX_API

// Internal invariant: never fires on user input, only on a grux bug.
#define GRUX_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::grux::assert_fail(#cond, __FILE__, __LINE__))

// User-input check: throws grux::Error with the given message when cond is false.
#define GRUX_CHECK(cond, msg)                \
  do {                                       \
    if (!(cond)) throw ::grux::Error((msg)); \
  } while (0)
