// Convolution as one matrix product with a (doubly block) Toeplitz matrix built from the
// filter: the matrix maps the flattened zero-padded input of all channels to the output.
#pragma once

#include <cstdint>

#include "cpu/conv_geom.h"

namespace grux::cpu {

// The matrix M has rows (d, oh, ow) — D*OH*OW of them — and columns (c, ih, iw) over the
// padded input: C*HP*WP with HP = H + 2*PH, WP = W + 2*PW. Block (d, c) is the doubly block
// Toeplitz matrix of filter w[d, c]: within it, block (oh, ih) is the Toeplitz matrix of
// filter row kh where ih = oh*SH + kh*DH (zero otherwise). Blocks of (d, c) in different
// groups are zero.
int64_t toeplitz_rows(const ConvGeom& g);
int64_t toeplitz_cols(const ConvGeom& g);

// mat (rows x cols) <- the Toeplitz matrix of w (D, C/G, KH, KW).
template <typename T>
void toeplitz_build(const ConvGeom& g, const T* w, T* mat);

// xpad (N, C, HP, WP) <- x (N, C, H, W) with zero borders; crop is its adjoint (the interior).
template <typename T>
void pad_images(const ConvGeom& g, const T* x, T* xpad);
template <typename T>
void crop_images(const ConvGeom& g, const T* xpad, T* x);

// Workspace (elements): one matrix (M, and in backward later dM in the same place) + xpad.
int64_t toeplitz_workspace_size(const ConvGeom& g);

// y (N, D*OH*OW) = xpad (N, C*HP*WP) * M^T, plus b (may be null).
template <typename T>
void conv2d_forward_toeplitz(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work);

// Gradients of sum(y * dy), each overwritten, any may be null:
//   dxpad (N, C*HP*WP) = dy (N, D*OH*OW) * M, then cropped into dx;
//   dM (rows x cols) = dy^T * xpad — the gradient with respect to every matrix entry — and
//   dw[d, c, kh, kw] = the sum of dM over the entries where M holds w[d, c, kh, kw] (the
//   matrix ties those entries to one weight, so their gradients add up);
//   db[d] = sum of dy over n, oh, ow.
template <typename T>
void conv2d_backward_toeplitz(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                              T* db, T* work);

}  // namespace grux::cpu
