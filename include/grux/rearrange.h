// einops-style rearrange: permute, merge and split dimensions from a pattern string such as
// "b c h w -> b (h w) c". Returns a view of the input when its strides allow, else a copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// rearrange(t, pattern, axes_lengths) with einops' grammar:
//   pattern      = left "->" right
//   side         = { axis | "(" { axis } ")" | "1" | "..." }
//   axis         = a name [A-Za-z_][A-Za-z0-9_]*
// Each top-level entry of the left side matches one dimension of t, in order ("..." matches
// any number of them, including none). A parenthesised group on the left splits that
// dimension into its axes (row-major): the axes' sizes multiply to the dimension's size, and
// all but at most one of them must be given in axes_lengths (the last one is inferred). A
// group on the right merges its axes into one dimension. "1" or "()" is a dimension of size
// 1 (on the left it must match a size-1 dimension; on the right it is inserted). Every named
// axis appears exactly once on each side; "..." appears on both sides or neither and may sit
// inside a group on the right ("b ... -> b (...)" flattens).
//   t: shape matching the left side  ->  shape of the right side, same dtype and device.
// Examples: "b c h w -> b (h w) c"; "b (h w) c -> b h w c" with {{"h", 4}};
// "h w -> 1 1 h w"; "... h w -> ... w h".
// The result shares storage with t when the permuted, merged layout can be expressed with
// strides (always for pure permutations, splits and unit axes); otherwise it is a contiguous
// copy. A bad pattern, or one that does not fit t's shape, throws grux::Error naming the
// pattern and the problem.
Tensor rearrange(const Tensor& t, const std::string& pattern,
                 const std::map<std::string, int64_t>& axes_lengths = {});

}  // namespace GRUX_API
