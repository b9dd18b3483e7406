// grux/precision.h: the names of the precisions and which kernels run them here.
#include "grux/precision.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cpu/gemm_lowp.h"
#include "grux/error.h"
#include "grux/runtime.h"
#include "grux/tensor.h"
#include "ops/recurrent.h"

namespace grux {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32:
      return "f32";
    case Precision::bf16:
      return "bf16";
    case Precision::int8:
      return "int8";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8})
    if (name == precision_name(p)) return p;
  throw Error(fmt::format("precision '{}': expected f32, bf16 or int8", name));
}

std::string precision_kernel(Precision p) {
  return cpu::lowp_kernel(p);
}

namespace {
bool portable_from_env() {
  const char* v = std::getenv("GRUX_LOWP_PORTABLE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}
std::atomic<bool> g_portable{portable_from_env()};
}  // namespace

void set_portable_precision(bool allowed) {
  g_portable = allowed;
}
bool portable_precision() {
  return g_portable;
}

namespace ops {
void check_precision(const char* who, DType dtype, Precision p, const char* model) {
  if (p != Precision::f32 && dtype != DType::f32)
    throw Error(fmt::format("{}: precision {} takes an f32 {}; this one is {}", who,
                            precision_name(p), model, dtype_name(dtype)));
  if (p != Precision::f32 && !portable_precision() && precision_kernel(p) == "portable")
    throw Error(fmt::format(
        "{}: precision {} needs {} and an AVX-512 SIMD target (this one: {}); the portable "
        "kernels that would run it instead are switched off (GRUX_LOWP_PORTABLE=0)",
        who, precision_name(p), p == Precision::bf16 ? "AVX512_BF16" : "AVX512_VNNI",
        simd_target()));
}
}  // namespace ops

}  // namespace grux
