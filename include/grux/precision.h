// The arithmetic an inference product runs in: f32 (the model's own), bf16 or int8.
//   bf16: weights stored in bfloat16 (rounded to nearest even), each product's input row
//     rounded to bf16 as it is read; products of bf16 pairs accumulate in f32.
//   int8: weights quantized symmetrically per output channel (per gate row) to [-127, 127];
//     each product's input quantized per row, asymmetrically to [0, 255] (PyTorch's dynamic
//     quantization, per row instead of per tensor); int32 accumulation.
// Either way the hidden state, the gates and the outputs stay f32. docs/precision.md has the
// measured errors against f32.
#pragma once

#include <string>

#include "grux/export.h"

namespace grux GRUX_API {

enum class Precision { f32, bf16, int8 };

// "f32", "bf16", "int8".
const char* precision_name(Precision p);
// The inverse of precision_name; throws grux::Error naming `name` and the three names.
Precision parse_precision(const std::string& name);
// The instructions precision p's products run on in this process: "avx512_bf16" or
// "avx512_vnni" where the CPU has them (and the SIMD target is AVX-512, see runtime.h),
// otherwise "portable" (plain C++: correct everywhere, slower than f32). f32: "f32".
std::string precision_kernel(Precision p);

// Whether bf16 and int8 may run on the portable kernels (the default). Switched off (or by the
// environment variable GRUX_LOWP_PORTABLE=0 at start-up), asking for a precision whose
// instructions this CPU or the SIMD target lacks is an error of one line -- GruInference,
// GruStream, Gru::forward_train and what is built on them -- instead of a run slower than f32.
void set_portable_precision(bool allowed);
bool portable_precision();

}  // namespace GRUX_API
