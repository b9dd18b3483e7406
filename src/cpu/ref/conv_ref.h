// Reference convolution kernels: the direct loop nest straight from the definition (the
// seed's seven loops), never optimized. The oracle for tests and ConvAlgo::loops.
#pragma once

#include "cpu/conv_geom.h"

namespace grux::cpu::ref {

// y (N, D, OH, OW) = conv(x (N, C, H, W), w (D, C/G, KH, KW)) + b (D); b may be null.
// Sums in double.
template <typename T>
void conv2d_forward_ref(const ConvGeom& g, const T* x, const T* w, const T* b, T* y);

// Gradients of sum(y * dy): dx (N, C, H, W), dw (D, C/G, KH, KW), db (D), each overwritten;
// any of them may be null (not computed). dy (N, D, OH, OW). Sums in double.
template <typename T>
void conv2d_backward_ref(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                         T* db);

}  // namespace grux::cpu::ref
