// Test-only access to Tensor internals. Not part of the public API and not used by the library:
// it exists so that tests can exercise the device checks in a build that has only the CPU.
#pragma once

#include "grux/tensor.h"

namespace grux {

struct TensorTestAccess {
  // A handle to the same CPU storage that claims to live on `device`. Storage refuses to
  // allocate anything but CPU memory in this build, so a tensor "on cuda:0" cannot be made
  // honestly; this relabelled handle allocates nothing on any device and lets tests check that
  // every op rejects mixed devices (and non-CPU tensors) before touching the data.
  static Tensor with_device_tag(const Tensor& t, Device device) {
    Tensor v = t;
    v.device_ = device;
    return v;
  }
};

}  // namespace grux
