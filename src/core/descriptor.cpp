// The problem descriptor parser (core/descriptor.h).
#include "core/descriptor.h"

#include <fmt/format.h>

#include <algorithm>

#include "grux/error.h"

namespace grux::detail {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Reads the digits at text[at...] into value and raises `digits` to their count; false when
// there are none or more than max_digits (at most 18, which int64 holds).
bool read_number(const std::string& text, size_t& at, int max_digits, int64_t& value, int& digits) {
  const size_t start = at;
  while (at < text.size() && is_digit(text[at])) ++at;
  const int n = static_cast<int>(at - start);
  if (n == 0 || n > max_digits || n > 18) return false;
  value = 0;
  for (size_t i = start; i < at; ++i) value = value * 10 + (text[i] - '0');
  digits = std::max(digits, n);
  return true;
}

}  // namespace

std::optional<std::vector<DescriptorToken>> descriptor_tokens(const std::string& text,
                                                              int max_digits) {
  std::vector<DescriptorToken> tokens;
  size_t at = 0;
  while (at < text.size()) {
    DescriptorToken t;
    t.letter = text[at++];
    if (t.letter < 'a' || t.letter > 'z') return std::nullopt;
    if (!read_number(text, at, max_digits, t.value, t.digits)) return std::nullopt;
    if (at < text.size() && text[at] == 'x' && at + 1 < text.size() && is_digit(text[at + 1])) {
      ++at;
      if (!read_number(text, at, max_digits, t.second, t.digits)) return std::nullopt;
      t.has_second = true;
    }
    tokens.push_back(t);
  }
  if (tokens.empty()) return std::nullopt;
  return tokens;
}

Descriptor Descriptor::parse(const std::string& text,
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

const DescriptorToken* Descriptor::find(char letter) const {
  for (const DescriptorToken& t : tokens_)
    if (t.letter == letter) return &t;
  return nullptr;
}

bool Descriptor::has(char letter) const {
  return find(letter) != nullptr;
}

int64_t Descriptor::get(char letter, int64_t dflt) const {
  const DescriptorToken* t = find(letter);
  return t ? t->value : dflt;
}

int64_t Descriptor::second(char letter, int64_t dflt) const {
  const DescriptorToken* t = find(letter);
  return !t ? dflt : t->has_second ? t->second : t->value;
}

}  // namespace grux::detail
