// Problem descriptors: a letter and a number per size, in a fixed order, such as the GRU's
// l2d1t100n64i256h512 or conv's n8c16h64w64d32k3x5s2p1. One parser for every problem's parse()
// and for the cost model's sweeps (which read any descriptor's letters).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

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

}  // namespace grux::detail
