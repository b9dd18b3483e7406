// Process-wide switches: the reference-kernel switch (debugging and testing) and threads.
#pragma once

namespace grux {

// When on, every operator calls the reference kernels of src/cpu/ref/ (naive loops written
// from the equations) instead of the optimized ones. Also switched on by the environment
// variable GRUX_REFERENCE=1 at start-up.
void set_reference_kernels(bool on);
bool reference_kernels();

}  // namespace grux
