// The process-wide switches of grux/runtime.h: reference kernels, and the SIMD target the
// Highway-dispatched kernels run on (both readable from the environment at start-up).
#include "grux/runtime.h"

#include <fmt/format.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "grux/error.h"

namespace grux {

namespace {

bool reference_from_env() {
  const char* v = std::getenv("GRUX_REFERENCE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}
bool g_reference = reference_from_env();

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// The targets compiled into this build (HWY_TARGETS of this translation unit, which the whole
// library shares) that the CPU supports, best (lowest bit) first. Computed on first use, which
// comes before any restriction (set_simd_target asks for it first).
const std::vector<int64_t>& available_targets() {
  static const std::vector<int64_t> targets = [] {
    std::vector<int64_t> out;
    for (int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1)
      out.push_back(t & ~(t - 1));
    return out;
  }();
  return targets;
}

void restrict_to(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);  // 0 restores the CPU's own set
}

std::string names(const std::vector<int64_t>& targets) {
  std::string s;
  for (int64_t t : targets) s += (s.empty() ? "" : ", ") + std::string(hwy::TargetName(t));
  return s;
}

bool simd_from_env() {
  const char* v = std::getenv("GRUX_SIMD_TARGET");
  if (v == nullptr || *v == '\0') return false;
  try {
    set_simd_target(v);
  } catch (const Error& e) {
    std::fprintf(stderr, "grux: GRUX_SIMD_TARGET ignored: %s\n", e.what());
  }
  return true;
}
const bool g_simd_from_env = simd_from_env();

}  // namespace

void set_reference_kernels(bool on) {
  g_reference = on;
}
bool reference_kernels() {
  return g_reference;
}

std::vector<std::string> simd_targets() {
  std::vector<std::string> out;
  for (int64_t t : available_targets()) out.emplace_back(hwy::TargetName(t));
  return out;
}

std::string simd_target() {
  const int64_t t = hwy::SupportedTargets() & HWY_TARGETS;
  return t == 0 ? std::string(hwy::TargetName(HWY_STATIC_TARGET)) : hwy::TargetName(t & ~(t - 1));
}

void set_simd_target(const std::string& name) {
  const std::vector<int64_t>& targets = available_targets();
  if (name.empty()) return restrict_to(0);
  for (int64_t t : targets)
    if (upper(name) == upper(hwy::TargetName(t))) return restrict_to(t);
  throw Error(
      fmt::format("SIMD target '{}' is not one this build and CPU can run (expected one of: {})",
                  name, names(targets)));
}

}  // namespace grux
