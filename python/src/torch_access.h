// The C interface between grux._grux and grux._torch_access, the optional module that reads
// torch tensors through libtorch's C++ API instead of their Python attributes (a frame's
// dtype, device, shape, contiguity and data pointer: about 0.35 us per tensor through
// attributes, tens of ns here). _grux loads it the first time it meets torch, once torch is
// imported; without it (not built, or built for another torch) everything takes the
// attribute path, with the same results.
#pragma once

#include <Python.h>

#include <cstdint>

namespace grux_py {

// Bumped whenever the structs below change: a module of another ABI is not used.
constexpr int kTorchAccessAbi = 3;
constexpr int kTorchViewMaxDims = 8;

struct TorchView {
  void* data = nullptr;
  int dtype = -1;  // 0 float32, 1 float64, 2 int64, -1 another
  int ndim = 0;
  int64_t shape[kTorchViewMaxDims] = {};
  int64_t strides[kTorchViewMaxDims] = {};  // in elements
  bool cpu = false, contiguous = false, requires_grad = false;
};

struct TorchAccess {
  int abi;
  // 1 and *v filled for a strided torch.Tensor of at most kTorchViewMaxDims dimensions whose
  // storage can be read (its type exactly torch.Tensor: subclasses may override attributes
  // in Python, so they are read through them); 0 otherwise, with no Python error set.
  int (*view)(PyObject* o, TorchView* v);
  // A new contiguous CPU tensor (a new reference) of dtype 0 or 1 and the given shape, its
  // memory in *data; null (no Python error set) when it cannot be made.
  PyObject* (*empty)(int dtype, int ndim, const int64_t* shape, void** data);
  // 1 with the data pointer and the version counter (what in-place writes bump) of a
  // torch.Tensor or nn.Parameter; 0 otherwise.
  int (*stamp)(PyObject* o, void** data, int64_t* version);
  // 1 where autograd records operations on this thread (torch.is_grad_enabled()), else 0.
  int (*grad_enabled)();
  // 1 while torch.jit.trace runs on this thread (nn.Module.__call__ then calls _slow_forward).
  int (*tracing)();
};

}  // namespace grux_py
