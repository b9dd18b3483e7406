// Problem descriptors: a letter and a number per size, in a fixed order, such as the GRU's
// l2d1t100n64i256h512 or conv's n8c16h64w64d32k3x5s2p1. One parser for every problem's parse()
// and for the cost model's sweeps (which read any descriptor's letters). Header-only: both
// libgrux and libgrux_tools (the sweeps) parse descriptors, and each keeps its copy hidden.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "grux/error.h"

namespace grux::detail {

// A descriptor's letter-number tokens in order ("l1d1t100" -> l 1, d 1, t 100); `second` is
// the number after an 'x' ("k3x5" -> k 3, second 5), 0 when there is none; `digits` the
// longer of the two numbers as written. nullopt when the text is not made of such tokens
// (empty, another character, a number of more than `max_digits` digits).
struct DescriptorToken {
  char letter = 0;
  int64_t value = 0;
  int64_t second = 0;
  bool has_second = false;
  int digits = 0;
};
std::optional<std::vector<DescriptorToken>> descriptor_tokens(const std::string& text,
                                                              int max_digits = 12);

// One letter of a descriptor's syntax: whether it may be left out, whether it may carry a
// second value ("k3x5": kernel height and width), and the most digits its number may have.
struct DescriptorLetter {
  char letter;
  bool optional = false;
  bool pair = false;
  int max_digits = 9;
};

// The sizes of one descriptor, read against its syntax.
class Descriptor {
 public:
  // Throws grux::Error "{what} '{text}' is malformed (expected {form})" where `text` is not the
  // syntax's letters in order (each given once, the optional ones possibly left out, an 'x'
  // only after a pair letter, no number longer than its letter allows).
  static Descriptor parse(const std::string& text, std::initializer_list<DescriptorLetter> syntax,
                          const std::string& what, const std::string& form);

  bool has(char letter) const;
  // The letter's number, or `dflt` where the descriptor leaves it out.
  int64_t get(char letter, int64_t dflt = 0) const;
  // A pair letter's second number: the one after 'x', else the first, else `dflt`.
  int64_t second(char letter, int64_t dflt = 0) const;

 private:
  std::vector<DescriptorToken> tokens_;
  const DescriptorToken* find(char letter) const;
};

// ---- Implementation -----------------------------------------------------------------------
namespace descriptor_impl {

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Reads the digits at text[at...] into value and raises `digits` to their count; false when
// there are none or more than max_digits (at most 18, which int64 holds).
inline bool read_number(const std::string& text, size_t& at, int max_digits, int64_t& value,
                        int& digits) {
  const size_t start = at;
  while (at < text.size() && is_digit(text[at])) ++at;
  const int n = static_cast<int>(at - start);
  if (n == 0 || n > max_digits || n > 18) return false;
  value = 0;
  for (size_t i = start; i < at; ++i) value = value * 10 + (text[i] - '0');
  digits = std::max(digits, n);
  return true;
}

}  // namespace descriptor_impl

inline std::optional<std::vector<DescriptorToken>> descriptor_tokens(const std::string& text,
                                                                     int max_digits) {
  std::vector<DescriptorToken> tokens;
  size_t at = 0;
  while (at < text.size()) {
    DescriptorToken t;
    t.letter = text[at++];
    if (t.letter < 'a' || t.letter > 'z') return std::nullopt;
    if (!descriptor_impl::read_number(text, at, max_digits, t.value, t.digits)) return std::nullopt;
    if (at < text.size() && text[at] == 'x' && at + 1 < text.size() &&
        descriptor_impl::is_digit(text[at + 1])) {
      ++at;
      if (!descriptor_impl::read_number(text, at, max_digits, t.second, t.digits))
        return std::nullopt;
      t.has_second = true;
    }
    tokens.push_back(t);
  }
  if (tokens.empty()) return std::nullopt;
  return tokens;
}

inline Descriptor Descriptor::parse(const std::string& text,
                                    std::initializer_list<DescriptorLetter> syntax,
                                    const std::string& what, const std::string& form) {
  auto malformed = [&] {
    return Error(fmt::format("{} '{}' is malformed (expected {})", what, text, form));
  };
  const auto tokens = descriptor_tokens(text);
  if (!tokens) throw malformed();
  // Match the tokens to the syntax's letters in order, skipping optional letters left out.
  Descriptor d;
  auto next = syntax.begin();
  for (const DescriptorToken& t : *tokens) {
    while (next != syntax.end() && next->letter != t.letter) {
      if (!next->optional) throw malformed();
      ++next;
    }
    if (next == syntax.end()) throw malformed();
    if (t.has_second && !next->pair) throw malformed();
    if (t.digits > next->max_digits) throw malformed();
    d.tokens_.push_back(t);
    ++next;
  }
  for (; next != syntax.end(); ++next)
    if (!next->optional) throw malformed();
  return d;
}

inline const DescriptorToken* Descriptor::find(char letter) const {
  for (const DescriptorToken& t : tokens_)
    if (t.letter == letter) return &t;
  return nullptr;
}

inline bool Descriptor::has(char letter) const {
  return find(letter) != nullptr;
}

inline int64_t Descriptor::get(char letter, int64_t dflt) const {
  const DescriptorToken* t = find(letter);
  return t ? t->value : dflt;
}

inline int64_t Descriptor::second(char letter, int64_t dflt) const {
  const DescriptorToken* t = find(letter);
  return !t ? dflt : t->has_second ? t->second : t->value;
}

}  // namespace grux::detail
