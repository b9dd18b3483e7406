// Convolution: conv1d and conv2d (PyTorch F.conv1d / F.conv2d semantics), forward and backward,
// f32 and f64, by three algorithms that agree: direct loops, im2col + GEMM, Toeplitz matrix.
//
// Sizes: N batch, C input channels, H x W input (L for 1-d), D output channels (filters),
// KH x KW kernel, G groups, OH x OW output. Layouts are NCHW / NCL; weight (D, C/G, KH, KW).
//   OH = (H + 2*PH - DH*(KH-1) - 1) / SH + 1   (PH padding, DH dilation, SH stride; W alike)
// Output channel d reads the input channels of its group: g = d / (D/G), channels
// [g*C/G, (g+1)*C/G). y[n,d,oh,ow] = b[d] + sum_{c,kh,kw} w[d,c,kh,kw] *
//   x[n, g*C/G + c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW]   (zero outside the input).
#pragma once

#include <cstdint>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// loops: the direct loop nest (the reference; slow, for checking and teaching).
// im2col: convolution as one GEMM per image and group (fast; default). Stride 1 reads the
//   column matrix in place from the padded image (grux's packed GEMM); strided convolutions
//   copy it out block by block (image-to-columns) for a GEMM.
// toeplitz: the filter unrolled into a (doubly block) Toeplitz matrix, one GEMM per call;
//   for teaching and small problems; refuses when the matrix exceeds kToeplitzMaxBytes.
enum class ConvAlgo { loops, im2col, toeplitz };
const char* conv_algo_name(ConvAlgo a);  // "loops", "im2col", "toeplitz"
// Throws grux::Error naming `text` and the accepted names.
ConvAlgo parse_conv_algo(const std::string& text);

// Largest Toeplitz matrix (bytes, per matrix) the toeplitz algorithm builds. Backward builds
// two of this size (the matrix and its gradient).
constexpr int64_t kToeplitzMaxBytes = int64_t(256) << 20;

// A (height, width) pair; an integer converts to both (the scalar convenience):
// `o.stride = 2;` or `o.stride = {2, 1};`.
struct Pair2 {
  int64_t h = 0, w = 0;
  Pair2(int64_t v = 0) : h(v), w(v) {}  // NOLINT: implicit on purpose
  Pair2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool operator==(const Pair2&) const = default;
};

struct Conv2dOptions {
  Pair2 stride = 1, padding = 0, dilation = 1;
  int64_t groups = 1;
  ConvAlgo algo = ConvAlgo::im2col;
  int threads = 0;  // 0: grux chooses (OpenMP's setting); k >= 1: at most k (docs/api.md)
};

struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  ConvAlgo algo = ConvAlgo::im2col;
  int threads = 0;
};

// Gradients of a convolution. dbias is undefined when the convolution had no bias.
struct ConvGrads {
  Tensor dinput, dweight, dbias;
};

// conv2d forward.
//   input (N, C, H, W), or (C, H, W) unbatched; weight (D, C/G, KH, KW); bias (D) or undefined.
//   Returns (N, D, OH, OW), or (D, OH, OW) unbatched. f32 or f64, all the same dtype.
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                      const Conv2dOptions& options = {});
// conv2d backward: gradients of sum(output * doutput).
//   input and weight as given to the forward; doutput has conv2d_forward's output shape;
//   `bias`: whether the forward had a bias. Returns dinput like input, dweight like weight,
//   and dbias (D) when `bias`.
ConvGrads conv2d_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                          bool bias, const Conv2dOptions& options = {});

// conv1d forward: input (N, C, L) or (C, L) unbatched; weight (D, C/G, K); bias (D) or
// undefined. Returns (N, D, OL) or (D, OL). Computed as conv2d with H = KH = 1.
Tensor conv1d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                      const Conv1dOptions& options = {});
// conv1d backward, as conv2d_backward.
ConvGrads conv1d_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                          bool bias, const Conv1dOptions& options = {});

// One conv2d problem: what the benchmark, the cost model and the CLI read.
// Descriptor: n{N}c{C}h{H}w{W}d{D}k{K}[s{S}][p{P}][r{R}][g{G}], e.g. "n8c16h64w64d32k3" or
// "n8c64h56w56d64k3p1": kernel K, stride S, zero padding P, dilation R ("rate"), groups G;
// s, p, r, g default to 1, 0, 1, 1 and appear in this order when given. Each of k, s, p, r
// may give the height's and the width's values apart, as k3x5 (KH 3, KW 5). `bias` is not in
// the descriptor (the cost model's --no-bias sets it).
struct ConvProblem {
  int64_t N = 0, C = 0, H = 0, W = 0, D = 0;
  Pair2 kernel = 0, stride = 1, padding = 0, dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::f32;

  // Throws grux::Error naming the descriptor and what was expected (also for sizes that
  // cannot form a convolution: C or D not divisible by G, a dilated kernel larger than the
  // padded input).
  static ConvProblem parse(const std::string& descriptor);
  std::string descriptor() const;  // the short form: s, p, r, g only when not the default
  Conv2dOptions options(ConvAlgo algo) const;
  int64_t OH() const;
  int64_t OW() const;
  // Multiply-add flops of the forward: 2 * N * D * OH * OW * (C/G) * KH * KW. Training
  // (forward + grad_input + grad_weight) is 3x this.
  double flops() const;
};

// One conv1d problem: what the cost model and the CLI read; the 1-d twin of ConvProblem.
// Descriptor: n{N}c{C}l{L}d{D}k{K}[s{S}][p{P}][r{R}][g{G}], e.g. "n8c16l128d32k3".
struct Conv1dProblem {
  int64_t N = 0, C = 0, L = 0, D = 0, K = 0, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
  DType dtype = DType::f32;

  // Throws grux::Error naming the descriptor and what was expected.
  static Conv1dProblem parse(const std::string& descriptor);
  std::string descriptor() const;
  Conv1dOptions options(ConvAlgo algo) const;
  int64_t OL() const;
};

}  // namespace GRUX_API
