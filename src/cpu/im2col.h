// Convolution as GEMM: image-to-columns (im2col) and its adjoint (col2im), and the conv2d
// forward / backward built on GEMMs per image, pixel block and group.
#pragma once

#include <cstdint>

#include "cpu/conv_geom.h"

namespace grux::cpu {

// col (C*KH*KW, p1 - p0) <- output pixels [p0, p1) of one image x (C, H, W): row (c, kh, kw),
// column p - p0 for output pixel p = oh*OW + ow holds x[c, oh*SH - PH + kh*DH,
// ow*SW - PW + kw*DW], or 0 where that falls in the padding.
template <typename T>
void im2col(const ConvGeom& g, const T* x, int64_t p0, int64_t p1, T* col);

// x (C, H, W) += the adjoint of im2col over pixels [p0, p1) applied to col: every column
// entry is added back to the input pixel it was read from (padding entries are dropped).
template <typename T>
void col2im(const ConvGeom& g, const T* col, int64_t p0, int64_t p1, T* x);

// How the work is split. Images are dealt to min(N, threads) threads; each thread has its own
// buffers and runs single-threaded GEMMs. Everything but the thread count is a function of the
// geometry alone, so the result is the same bits on any thread count.
//   shifted (stride 1): grux's packed GEMM reads shifted views of the (padded) image, packed
//     block by block; grad_input is the convolution of dy with the transposed, flipped
//     filters (see im2col.cpp). No column matrix for the forward and grad_input.
//   otherwise: an image's output pixels are taken `block` at a time through im2col, so that
//     the block's columns stay in cache between im2col and the GEMM that reads them.
struct Im2colPlan {
  int threads = 1;
  bool shifted = false;
  int64_t block = 1;  // output pixels per column block (strided convolutions)
};
Im2colPlan im2col_plan(const ConvGeom& g, int threads);

// Workspace (elements of T) that conv2d_forward_im2col / conv2d_backward_im2col need.
int64_t im2col_workspace_size(const ConvGeom& g, const Im2colPlan& plan, bool backward);

// y (N, D, OH, OW) = x (N, C, H, W) conv w (D, C/G, KH, KW) + b (D); b may be null.
// Per image n, pixel block B and group: y_n,g[:, B] = w_g (D/G, Kg) * col_n,g[:, B] (col read in
// place from the image when plan.shifted).
template <typename T>
void conv2d_forward_im2col(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                           const Im2colPlan& plan);

// Gradients of sum(y * dy), each overwritten, any may be null:
//   dw_g (D/G, Kg) = sum over n and blocks B of dy_n,g[:, B] * col_n,g[:, B]^T
//   dx_n = col2im(w_g^T * dy_n,g) (strided), or the convolution of dy_n with w transposed and
//     flipped (plan.shifted)
//   db[d] = sum over n, oh, ow of dy.
// dw is summed over a fixed partition of the batch (at most kWeightChunks chunks, each
// summed in order, then the chunks in order): the same bits on any thread count.
template <typename T>
void conv2d_backward_im2col(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                            T* db, T* work, const Im2colPlan& plan);

constexpr int64_t kWeightChunks = 16;

}  // namespace grux::cpu
