// grux/precision.h: the names of the precisions and which kernels run them here.
#include "grux/precision.h"

#include <fmt/format.h>

#include "cpu/gemm_lowp.h"
#include "grux/error.h"
#include "grux/tensor.h"

namespace grux {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::bf16: return "bf16";
    case Precision::int8: return "int8";
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

namespace ops {
void check_precision(const char* who, DType dtype, Precision p) {
  if (p != Precision::f32 && dtype != DType::f32)
    throw Error(fmt::format("{}: precision {} takes an f32 GRU; this one is {}", who,
                            precision_name(p), dtype_name(dtype)));
}
}  // namespace ops

}  // namespace grux
