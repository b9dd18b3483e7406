// The conv1d problem descriptor (n{N}c{C}l{L}d{D}k{K}[s][p][r][g]): parsing, printing, options.
// Kept apart from conv.cpp (the drivers); the 2-d descriptor lives there.
#include <fmt/format.h>

#include <regex>

#include "grux/conv.h"
#include "grux/error.h"

namespace grux {

Conv1dProblem Conv1dProblem::parse(const std::string& text) {
  static const std::regex re(
      R"(n(\d{1,9})c(\d{1,9})l(\d{1,9})d(\d{1,9})k(\d{1,9})(?:s(\d{1,9}))?(?:p(\d{1,9}))?(?:r(\d{1,9}))?(?:g(\d{1,9}))?)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw Error(fmt::format(
        "conv1d problem descriptor '{}' is malformed (expected "
        "n{{N}}c{{C}}l{{L}}d{{D}}k{{K}}[s{{S}}][p{{P}}][r{{R}}][g{{G}}], e.g. n8c16l128d32k3 "
        "or n1c8l1024d8k3p4r4)",
        text));
  auto num = [&](int i, int64_t dflt) { return m[i].matched ? std::stoll(m[i].str()) : dflt; };
  Conv1dProblem p;
  p.N = num(1, 0), p.C = num(2, 0), p.L = num(3, 0), p.D = num(4, 0), p.K = num(5, 0);
  p.stride = num(6, 1), p.padding = num(7, 0), p.dilation = num(8, 1), p.groups = num(9, 1);
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
