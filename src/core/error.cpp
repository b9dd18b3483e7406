// Internal-invariant failure handler. User errors are grux::Error (include/grux/error.h); this
// file handles the other tier.
#include "grux/error.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace grux {

namespace {

// Bytes of the valid UTF-8 sequence starting at s[i] (1-4), or 0 if none starts there: the
// shortest form only, no surrogates, nothing above U+10FFFF.
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = at(i);
  if (b < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b >= 0xc2 && b <= 0xdf) {
    n = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3;
    if (b == 0xe0) lo = 0xa0;  // overlong
    if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4;
    if (b == 0xf0) lo = 0x90;  // overlong
    if (b == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::string printable_line(const std::string& message) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    const unsigned char b = static_cast<unsigned char>(message[i]);
    size_t n = utf8_sequence(message, i);
    // C1 control characters (U+0080-U+009F) are escaped byte by byte too.
    if (n == 2 && b == 0xc2 && static_cast<unsigned char>(message[i + 1]) < 0xa0) n = 0;
    if (n == 0 || b < 0x20 || b == 0x7f) {  // not UTF-8, or a control character
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
      ++i;
    } else {
      out.append(message, i, n);
      i += n;
    }
  }
  return out;
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "grux: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  std::abort();
}

}  // namespace grux
