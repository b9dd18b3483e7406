// Helpers shared by the cost model's files: exact wide-integer counting that refuses to
// overflow, and the per-mode count builders.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "grux/cost.h"
#include "grux/cost_format.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/error.h"

namespace grux {
struct SweepResult;  // grux/sweep.h (libgrux_tools)
}  // namespace grux

namespace grux::cost_detail {

// Counts are formed in 128-bit integers (no product of a few 63-bit sizes can wrap) and
// narrowed once at the end, where a result beyond int64 is reported instead of wrapped.
using wide = __int128;

inline int64_t narrow(wide v, const std::string& what) {
  if (v < 0 || v > static_cast<wide>(std::numeric_limits<int64_t>::max()))
    throw Error(fmt::format("{}: the count does not fit in 64 bits (problem too large)", what));
  return static_cast<int64_t>(v);
}

// Refuses, before any counting, a problem whose counts could overflow even the 128-bit
// intermediates (`estimate`, in floating point, bounds every count and byte total of the report
// from above). Problems that pass are counted exactly and then narrowed, where a result beyond
// 63 bits is refused with the same message.
inline void check_countable(double estimate, const std::string& what) {
  if (!(estimate < 1e30))
    throw Error(fmt::format("{}: the count does not fit in 64 bits (problem too large)", what));
}

// A problem's sequence lengths, when it has them: one per sequence, each in [1, T].
template <typename Problem>  // GruProblem or MinGruProblem
void check_lengths(const char* op, const Problem& p) {
  if (p.lengths.empty()) return;
  if (static_cast<int64_t>(p.lengths.size()) != p.N)
    throw Error(fmt::format("{} {}: {} lengths for n{} sequences", op, p.descriptor(),
                            p.lengths.size(), p.N));
  for (int64_t v : p.lengths)
    if (v < 1 || v > p.T)
      throw Error(fmt::format("{} {}: length {} outside [1, T = {}]", op, p.descriptor(), v, p.T));
}

// An OpCount being built, in wide integers.
struct WideCount {
  wide matmul = 0, bias = 0, elementwise = 0, activation = 0;
  WideCount& operator+=(const WideCount& o) {
    matmul += o.matmul, bias += o.bias, elementwise += o.elementwise, activation += o.activation;
    return *this;
  }
  OpCount narrow(const std::string& what) const {
    OpCount c;
    c.matmul = cost_detail::narrow(matmul, what);
    c.bias = cost_detail::narrow(bias, what);
    c.elementwise = cost_detail::narrow(elementwise, what);
    c.activation = cost_detail::narrow(activation, what);
    (void)c.total();  // throws if the sum overflows
    return c;
  }
};

// Counts of one op in every mode, being built.
struct WideCounts {
  WideCount fwd[kCountModes], bwd[kCountModes];
  WideCounts& operator+=(const WideCounts& o) {
    for (int m = 0; m < kCountModes; ++m) fwd[m] += o.fwd[m], bwd[m] += o.bwd[m];
    return *this;
  }
  void store(CostReport& r) const {
    for (int m = 0; m < kCountModes; ++m) {
      r.forward[m] = fwd[m].narrow(r.op + " " + r.problem);
      r.backward[m] = bwd[m].narrow(r.op + " " + r.problem);
    }
  }
};

constexpr int kSeed = static_cast<int>(CountMode::seed);
constexpr int kGemm = static_cast<int>(CountMode::gemm);
constexpr int kMac = static_cast<int>(CountMode::mac);

// `dots` dot products of length `k` in every mode: seed k multiplies + (k - 1) adds, gemm 2k,
// mac k. Adds the result to the matmul part of `c[0..2]`.
inline void add_dots(WideCount* c, wide dots, wide k) {
  c[kSeed].matmul += dots * (2 * k - 1);
  c[kGemm].matmul += dots * 2 * k;
  c[kMac].matmul += dots * k;
}

// Seed-mode ops per element of the activations and their derivatives (dy * f'(x)).
constexpr int kSigmoidOps = 3;      // exp, +, /
constexpr int kTanhOps = 7;         // four exps, -, +, /
constexpr int kReluOps = 1;         // max
constexpr int kSigmoidGradOps = 3;  // dy * s * (1 - s): -, x, x
constexpr int kTanhGradOps = 3;     // dy * (1 - t * t): x, -, x
constexpr int kReluGradOps = 1;     // select dy where x > 0
// GELU (erf form) 0.5 x (1 + erf(x / sqrt 2)): /, erf, +, x, x. Its derivative
// dy (Phi(x) + x phi(x)) recomputes Phi (4: /, erf, +, x) and phi = exp(-x^2 / 2) / sqrt(2 pi)
// (4: x, x, exp, x), then x phi, +, dy x (3).
constexpr int kGeluOps = 5;
constexpr int kGeluGradOps = 11;
// SiLU x sigmoid(x): the sigmoid and a multiply. Its derivative dy s (1 + x (1 - s))
// recomputes s (3), then -, x, +, x, x.
constexpr int kSiluOps = 4;
constexpr int kSiluGradOps = 8;
// Leaky ReLU x > 0 ? x : a x: x, select; derivative: dy or a dy: x, select.
constexpr int kLeakyReluOps = 2;
constexpr int kLeakyReluGradOps = 2;

// The sweep as a JSON value (sweep_json prints it; the HTML report embeds it).
nlohmann::ordered_json sweep_json_value(const SweepResult& r);

// The roofline chart's coordinates of a run: (GEMM FLOP per byte moved with the weights
// cached, GEMM GFLOP/s at `ms`).
inline std::pair<double, double> roof_point(double gemm_flop, int64_t cached_bytes, double ms) {
  return {cached_bytes > 0 ? gemm_flop / static_cast<double>(cached_bytes) : 0.0,
          ms > 0 ? gemm_flop / (ms * 1e6) : 0.0};
}

}  // namespace grux::cost_detail
