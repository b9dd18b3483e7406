// The sizes of one 2-D convolution as the kernels see them (raw numbers, no tensors), shared by
// the loop, im2col and Toeplitz kernels. conv1d arrives here as H = KH = 1.
#pragma once

#include <cstdint>

namespace grux::cpu {

// N images of C channels, H x W; D filters of C/G channels, KH x KW; output OH x OW.
// SH SW stride, PH PW zero padding, DH DW dilation, G groups. Layouts: x (N, C, H, W),
// w (D, C/G, KH, KW), y (N, D, OH, OW), all contiguous. The driver has validated it all.
struct ConvGeom {
  int64_t N, C, H, W, D, KH, KW;
  int64_t SH, SW, PH, PW, DH, DW, G;
  int64_t OH, OW;

  int64_t Cg() const { return C / G; }
  int64_t Dg() const { return D / G; }
  // Rows of one group's column matrix (and row length of its weight): (C/G) * KH * KW.
  int64_t Kg() const { return Cg() * KH * KW; }
  int64_t out_pixels() const { return OH * OW; }
  int64_t in_pixels() const { return H * W; }
  // A 1x1 kernel with stride 1 and no padding reads the image as it is: no columns needed.
  bool pointwise() const { return KH == 1 && KW == 1 && SH == 1 && SW == 1 && PH == 0 && PW == 0; }
};

}  // namespace grux::cpu
