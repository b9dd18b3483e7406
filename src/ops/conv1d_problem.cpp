// The conv1d problem descriptor (n{N}c{C}l{L}d{D}k{K}[s][p][r][g]): parsing, printing, options.
// Kept apart from conv.cpp (the drivers); the 2-d descriptor lives there.
#include <fmt/format.h>

#include "core/descriptor.h"
#include "grux/conv.h"
#include "grux/error.h"

namespace grux {

Conv1dProblem Conv1dProblem::parse(const std::string& text) {
  const detail::Descriptor d = detail::Descriptor::parse(
      text, {{'n'}, {'c'}, {'l'}, {'d'}, {'k'}, {'s', true}, {'p', true}, {'r', true}, {'g', true}},
      "conv1d problem descriptor",
      "n{N}c{C}l{L}d{D}k{K}[s{S}][p{P}][r{R}][g{G}], e.g. n8c16l128d32k3 or n1c8l1024d8k3p4r4");
  Conv1dProblem p;
  p.N = d.get('n'), p.C = d.get('c'), p.L = d.get('l'), p.D = d.get('d'), p.K = d.get('k');
  p.stride = d.get('s', 1), p.padding = d.get('p', 0), p.dilation = d.get('r', 1);
  p.groups = d.get('g', 1);
  for (auto [name, v] : {std::pair{"n", p.N},
                         {"c", p.C},
                         {"l", p.L},
                         {"d", p.D},
                         {"k", p.K},
                         {"s", p.stride},
                         {"r", p.dilation},
                         {"g", p.groups}})
    if (v < 1)
      throw Error(
          fmt::format("conv1d problem descriptor '{}': {}{} (expected >= 1)", text, name, v));
  if (p.C % p.groups != 0 || p.D % p.groups != 0)
    throw Error(fmt::format("conv1d problem descriptor '{}': c{} and d{} must be multiples of g{}",
                            text, p.C, p.D, p.groups));
  if (p.dilation * (p.K - 1) + 1 > p.L + 2 * p.padding)
    throw Error(fmt::format(
        "conv1d problem descriptor '{}': kernel k{}{} spans {}, longer than the padded input ({})",
        text, p.K, p.dilation == 1 ? "" : fmt::format(" dilated r{}", p.dilation),
        p.dilation * (p.K - 1) + 1, p.L + 2 * p.padding));
  return p;
}

std::string Conv1dProblem::descriptor() const {
  std::string s = fmt::format("n{}c{}l{}d{}k{}", N, C, L, D, K);
  if (stride != 1) s += fmt::format("s{}", stride);
  if (padding != 0) s += fmt::format("p{}", padding);
  if (dilation != 1) s += fmt::format("r{}", dilation);
  if (groups != 1) s += fmt::format("g{}", groups);
  return s;
}

Conv1dOptions Conv1dProblem::options(ConvAlgo algo) const {
  Conv1dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.dilation = dilation;
  o.groups = groups;
  o.algo = algo;
  return o;
}

int64_t Conv1dProblem::OL() const {
  return (L + 2 * padding - dilation * (K - 1) - 1) / stride + 1;
}

}  // namespace grux
