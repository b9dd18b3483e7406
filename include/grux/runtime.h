// Process-wide switches: the reference-kernel switch and the SIMD target (debugging, testing,
// and reproducing another machine's results).
#pragma once

#include <string>
#include <vector>

#include "grux/export.h"

namespace grux GRUX_API {

// When on, every operator calls the reference kernels of src/cpu/ref/ (naive loops written
// from the equations) instead of the optimized ones. Also switched on by the environment
// variable GRUX_REFERENCE=1 at start-up.
void set_reference_kernels(bool on);
bool reference_kernels();

// The SIMD instruction set the optimized kernels run on: the best one this build has kernels
// for that the CPU can run ("AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128", ...;
// Highway's names), unless restricted by set_simd_target.
std::string simd_target();
// Every target this build has kernels for that this CPU can run, best first.
std::vector<std::string> simd_targets();
// Runs the kernels on `name` (one of simd_targets(), any case) instead of the best target;
// "" restores the best. Also set at start-up by the environment variable GRUX_SIMD_TARGET (a
// name that is not one of simd_targets() is reported on stderr and ignored). Call it while no
// other thread runs grux kernels. Throws grux::Error naming the targets when `name` is not one.
void set_simd_target(const std::string& name);

}  // namespace GRUX_API
