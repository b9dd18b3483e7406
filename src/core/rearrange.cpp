// The rearrange pattern parser and its plan: split the input's dimensions into elementary
// axes (a view), permute them (a view), merge them into the output's dimensions (reshape).
#include "grux/rearrange.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace grux {

namespace {

// One top-level entry of a side: a single dimension of the tensor. `axes` lists the named
// axes inside it (empty for "1" and "()"); an ellipsis entry stands for zero or more
// dimensions, and on the right may sit inside a group (`axes` then holds kEllipsis).
constexpr const char* kEllipsis = "...";
struct Entry {
  std::vector<std::string> axes;
  bool is_ellipsis = false;  // a bare top-level "..."
  bool grouped = false;      // written with parentheses
};

struct Side {
  std::vector<Entry> entries;
  std::vector<std::string> names;  // named axes in order of appearance (kEllipsis included)
  bool has_ellipsis = false;
};

class PatternError {
 public:
  explicit PatternError(const std::string& pattern) : pattern_(pattern) {}
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(
        fmt::format("rearrange '{}': {}", pattern_, fmt::format(f, std::forward<Args>(args)...)));
  }

 private:
  const std::string& pattern_;
};

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

Side parse_side(const std::string& text, const char* which, bool is_left, const PatternError& err) {
  Side side;
  bool in_group = false;
  Entry group;
  size_t i = 0;
  auto add_name = [&](const std::string& name) {
    if (std::find(side.names.begin(), side.names.end(), name) != side.names.end()) {
      if (name == kEllipsis) err.fail("'...' appears twice on the {} side", which);
      err.fail("axis '{}' appears twice on the {} side", name, which);
    }
    side.names.push_back(name);
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t') {
      ++i;
    } else if (c == '(') {
      if (in_group) err.fail("nested parentheses on the {} side", which);
      in_group = true;
      group = Entry{};
      group.grouped = true;
      ++i;
    } else if (c == ')') {
      if (!in_group) err.fail("unbalanced parentheses on the {} side: ')' without '('", which);
      in_group = false;
      side.entries.push_back(group);
      ++i;
    } else if (c == '.') {
      if (text.compare(i, 3, "...") != 0)
        err.fail("'.' on the {} side is not part of an ellipsis '...'", which);
      if (in_group && is_left) err.fail("'...' inside parentheses is only allowed on the right");
      add_name(kEllipsis);
      side.has_ellipsis = true;
      if (in_group) {
        group.axes.push_back(kEllipsis);
      } else {
        Entry e;
        e.is_ellipsis = true;
        side.entries.push_back(e);
      }
      i += 3;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && is_name_char(text[j])) ++j;
      const std::string number = text.substr(i, j - i);
      if (number != "1")
        err.fail("'{}' on the {} side: the only number allowed is 1 (a unit axis)", number, which);
      // A unit axis contributes a factor of 1: nothing inside a group, a size-1 dimension
      // outside one.
      if (!in_group) side.entries.push_back(Entry{});
      i = j;
    } else if (is_name_start(c)) {
      size_t j = i;
      while (j < text.size() && is_name_char(text[j])) ++j;
      const std::string name = text.substr(i, j - i);
      add_name(name);
      if (in_group) {
        group.axes.push_back(name);
      } else {
        Entry e;
        e.axes.push_back(name);
        side.entries.push_back(e);
      }
      i = j;
    } else {
      err.fail("unexpected character '{}' on the {} side", c, which);
    }
  }
  if (in_group) err.fail("unbalanced parentheses on the {} side: '(' is not closed", which);
  return side;
}

std::string group_str(const Entry& e) {
  std::string s = "(";
  for (size_t i = 0; i < e.axes.size(); ++i) s += (i ? " " : "") + e.axes[i];
  return s + ")";
}

}  // namespace

Tensor rearrange(const Tensor& t, const std::string& pattern,
                 const std::map<std::string, int64_t>& axes_lengths) {
  check_defined("rearrange", "t", t);
  const PatternError err(pattern);
  const size_t arrow = pattern.find("->");
  if (arrow == std::string::npos) err.fail("no '->' between the left and the right side");
  if (pattern.find("->", arrow + 2) != std::string::npos) err.fail("more than one '->'");
  const Side left = parse_side(pattern.substr(0, arrow), "left", true, err);
  const Side right = parse_side(pattern.substr(arrow + 2), "right", false, err);

  // Both sides must name the same axes: rearrange only moves elements, it never drops,
  // repeats or invents them.
  for (const std::string& n : right.names)
    if (std::find(left.names.begin(), left.names.end(), n) == left.names.end()) {
      if (n == kEllipsis) err.fail("'...' appears on the right side but not on the left");
      err.fail("axis '{}' appears on the right side but not on the left", n);
    }
  for (const std::string& n : left.names)
    if (std::find(right.names.begin(), right.names.end(), n) == right.names.end()) {
      if (n == kEllipsis) err.fail("'...' appears on the left side but not on the right");
      err.fail("axis '{}' appears on the left side but not on the right", n);
    }
  for (const auto& [name, size] : axes_lengths) {
    if (std::find(left.names.begin(), left.names.end(), name) == left.names.end())
      err.fail("axis '{}' is given a size ({}) but does not appear in the pattern", name, size);
    if (size < 1) err.fail("axis '{}' is given size {}; sizes must be >= 1", name, size);
  }

  // Match the left side's entries to t's dimensions.
  const int64_t fixed = static_cast<int64_t>(left.entries.size()) - (left.has_ellipsis ? 1 : 0);
  if (left.has_ellipsis ? t.dim() < fixed : t.dim() != fixed)
    err.fail("the left side has {}{} dimensions but the input has shape {} (rank {})",
             left.has_ellipsis ? "at least " : "", fixed, shape_str(t.shape()), t.dim());
  const int64_t ellipsis_rank = t.dim() - fixed;

  // Sizes of the elementary axes, in left-side order: the tensor viewed with every group
  // split and every unit dimension dropped.
  std::map<std::string, int64_t> size_of;
  std::vector<std::string> elementary;
  std::vector<std::string> ellipsis_axes;
  Shape elementary_shape;
  int64_t dim = 0;
  for (const Entry& e : left.entries) {
    if (e.is_ellipsis) {
      for (int64_t k = 0; k < ellipsis_rank; ++k, ++dim) {
        const std::string name = fmt::format("...{}", k);
        ellipsis_axes.push_back(name);
        elementary.push_back(name);
        elementary_shape.push_back(t.shape()[dim]);
      }
      continue;
    }
    const int64_t n = t.shape()[dim];
    if (e.axes.empty() && n != 1)
      err.fail("dimension {} is {} in the pattern but has size {}", dim, e.grouped ? "()" : "1", n);
    int64_t known = 1;
    std::vector<std::string> unknown;
    for (const std::string& a : e.axes) {
      auto it = axes_lengths.find(a);
      if (it == axes_lengths.end())
        unknown.push_back(a);
      else
        known *= it->second;
    }
    if (unknown.size() > 1)
      err.fail(
          "cannot infer the sizes of '{}' and '{}' in group {} (dimension {} of size {}): give "
          "all but one of its axes in axes_lengths",
          unknown[0], unknown[1], group_str(e), dim, n);
    if (unknown.size() == 1) {
      if (n % known != 0)
        err.fail("dimension {} of size {} cannot be split as {}: {} is not a multiple of {}", dim,
                 n, group_str(e), n, known);
      size_of[unknown[0]] = n / known;
    } else if (known != n && !e.axes.empty()) {
      if (e.axes.size() == 1)
        err.fail("axis '{}' is given size {} but dimension {} has size {}", e.axes[0], known, dim,
                 n);
      err.fail("group {} has {} elements from the given sizes but dimension {} has size {}",
               group_str(e), known, dim, n);
    }
    for (const std::string& a : e.axes) {
      if (!size_of.count(a)) size_of[a] = axes_lengths.at(a);
      elementary.push_back(a);
      elementary_shape.push_back(size_of[a]);
    }
    ++dim;
  }
  for (size_t k = 0; k < ellipsis_axes.size(); ++k)
    size_of[ellipsis_axes[k]] =
        elementary_shape[std::find(elementary.begin(), elementary.end(), ellipsis_axes[k]) -
                         elementary.begin()];

  // Splitting dimensions and dropping size-1 ones never needs a copy, so this is a view.
  const Tensor split = t.reshape(elementary_shape);

  // Right side: the order of the elementary axes and how they merge.
  std::vector<int64_t> order;
  Shape out_shape;
  auto position = [&](const std::string& name) {
    return static_cast<int64_t>(std::find(elementary.begin(), elementary.end(), name) -
                                elementary.begin());
  };
  for (const Entry& e : right.entries) {
    if (e.is_ellipsis) {
      for (const std::string& a : ellipsis_axes) {
        order.push_back(position(a));
        out_shape.push_back(size_of[a]);
      }
      continue;
    }
    int64_t merged = 1;
    for (const std::string& a : e.axes) {
      if (a == kEllipsis) {
        for (const std::string& ea : ellipsis_axes)
          order.push_back(position(ea)), merged *= size_of[ea];
      } else {
        order.push_back(position(a));
        merged *= size_of[a];
      }
    }
    out_shape.push_back(merged);
  }
  GRUX_ASSERT(order.size() == elementary.size());
  // A merge of axes whose permuted strides are not nested needs a copy; reshape decides.
  return split.permute(order).reshape(out_shape);
}

}  // namespace grux
