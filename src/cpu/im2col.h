// Convolution as GEMM: image-to-columns (im2col) and its adjoint (col2im), and the conv2d
// forward / backward built on them with one BLAS GEMM per image and group.
#pragma once

#include <cstdint>

#include "cpu/conv_geom.h"

namespace grux::cpu {

// col (C*KH*KW, OH*OW) <- one image x (C, H, W): row (c, kh, kw), column (oh, ow) holds
// x[c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW], or 0 where that falls in the padding.
// `parallel`: split the channels over OpenMP threads (call from outside a parallel region).
template <typename T>
void im2col(const ConvGeom& g, const T* x, T* col, bool parallel);

// x (C, H, W) += the adjoint of im2col applied to col (C*KH*KW, OH*OW): every column entry
// is added back to the input pixel it was read from (padding entries are dropped).
template <typename T>
void col2im(const ConvGeom& g, const T* col, T* x, bool parallel);

// How the work is split over `threads` threads:
//   batch_parallel: images are dealt to threads; each thread has its own column buffer and
//     runs its GEMMs single-threaded.
//   otherwise: images one after another, im2col / col2im and the GEMMs' tiles threaded
//     inside (for N small).
// Every GEMM is cut into the same fixed tiles either way (gemm_tiled.h), so the result is the
// same bits on any thread count.
struct Im2colPlan {
  int threads = 1;
  bool batch_parallel = true;
};
// The split the driver uses: batch-parallel when every thread gets an image (see im2col.cpp).
Im2colPlan im2col_plan(const ConvGeom& g, int threads);

// Workspace (elements of T) that conv2d_forward_im2col / conv2d_backward_im2col need.
int64_t im2col_workspace_size(const ConvGeom& g, const Im2colPlan& plan, bool backward);

// y (N, D, OH, OW) = x (N, C, H, W) conv w (D, C/G, KH, KW) + b (D); b may be null.
// Per image n and group: y_n,g (D/G, OH*OW) = w_g (D/G, Kg) * col_n,g (Kg, OH*OW).
template <typename T>
void conv2d_forward_im2col(const ConvGeom& g, const T* x, const T* w, const T* b, T* y, T* work,
                           const Im2colPlan& plan);

// Gradients of sum(y * dy), each overwritten, any may be null:
//   dw_g (D/G, Kg) = sum_n dy_n,g (D/G, OH*OW) * col_n,g^T
//   dcol_n,g (Kg, OH*OW) = w_g^T * dy_n,g, then dx_n = col2im(dcol_n)
//   db[d] = sum over n, oh, ow of dy.
// The result does not depend on the thread count: dw is summed over a fixed partition of the
// batch (at most kWeightChunks chunks, each summed in order, then the chunks in order).
template <typename T>
void conv2d_backward_im2col(const ConvGeom& g, const T* dy, const T* x, const T* w, T* dx, T* dw,
                            T* db, T* work, const Im2colPlan& plan);

constexpr int64_t kWeightChunks = 16;

}  // namespace grux::cpu
