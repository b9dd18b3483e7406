// Low-precision packed GEMMs: C (f32) = A (f32) B + bias (+ C), with B packed
// once in bf16 or int8 (grux/precision.h says what each means) and each row of A converted
// (bf16) or quantized (int8) as it is read. Like gemm_packed, each output element depends on
// its own row of A and column of B only (int8 quantizes per row), never on the tiling, the
// other rows or the threads: a streamed frame equals the same frame inside a sequence.
//
// Kernels: AVX512_BF16 (vdpbf16ps) and AVX512_VNNI (vpdpbusd) where the CPU has them and the
// SIMD target (runtime.h) is AVX-512; Highway kernels on the target in use otherwise (AVX2,
// SSE4, ...: cpu/gemm_lowp_simd.cpp), with plain C++ for rows too long for their buffer.
// cpu/ref/gemm_ref.cpp's gemm_packed reads the same packed operands as the oracle.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/gemm_packed.h"
#include "grux/precision.h"

namespace grux::cpu {

// x rounded to bf16 (nearest, ties to even), as vcvtne2ps2bf16 does it: subnormal inputs
// flush to (signed) zero and NaN stays a quiet NaN.
inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // 0, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// One row's dynamic int8 quantization: q(x) = clamp(rint(x * inv) + zero, 0, 255) and
// x ~ scale * (q - zero), for a row whose values lie in [lo, hi] = [min(0, min x), max(0, max
// x)] (zero stays exact). A row of zeros gets scale 1, zero 0.
struct RowQuant {
  float scale, inv;
  int32_t zero;
};
inline RowQuant row_quant(float lo, float hi) {
  const float range = hi - lo;
  if (!(range > 0)) return {1.0f, 1.0f, 0};
  const float inv = 255.0f / range;
  const float z = std::nearbyint(-lo * inv);
  return {range / 255.0f, inv, static_cast<int32_t>(z < 0 ? 0 : z > 255 ? 255 : z)};
}
inline uint8_t quantize(float x, const RowQuant& q) {
  const float v = std::nearbyint(x * q.inv) + float(q.zero);
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}
// lo and hi of row[0, K).
inline RowQuant row_quant_of(const float* row, int64_t K) {
  float lo = 0, hi = 0;
  for (int64_t k = 0; k < K; ++k) {
    lo = row[k] < lo ? row[k] : lo;
    hi = row[k] > hi ? row[k] : hi;
  }
  return row_quant(lo, hi);
}

// k rows per group of the packed form: 2 (bf16), 4 (int8).
inline int64_t lowp_group(Precision p) {
  return p == Precision::bf16 ? 2 : 4;
}

// Bytes pack_b_lowp writes for (K, N, panel): the panels, and for int8 the scales and column
// sums (each part 64-byte aligned when dst is).
int64_t packed_lowp_bytes(Precision p, int64_t K, int64_t N, int64_t panel);

// Packs B(k, n), addressed as pack_b addresses it (src, strides, maps), into dst (64-byte
// aligned, packed_lowp_bytes long) and returns the PackedB that reads it. bf16: each element
// rounded with to_bf16. int8: column n scaled by scale[n] = max_k |B(k, n)| / 127 and rounded
// to [-127, 127] (a column of zeros: scale 0).
PackedB<float> pack_b_lowp(Precision p, int64_t K, int64_t N, int64_t panel, const float* src,
                           int64_t stride_k, int64_t stride_n, const int64_t* k_map,
                           const int64_t* n_map, void* dst);

// gemm_packed's contract (A not transposed) for a B in low precision; gemm_packed<float>
// calls it when B.low_precision(). Allocates nothing (its row buffers are on the stack).
// `step` (gemm_packed's): one row of A (batch 1) reads every weight once per call, from L2
// where B does not fit in L1. Read in an order that starts on the lines the previous step read
// last, a part of each step's weights comes from L1 (W2, I 128 H 256 at batch 1 on two
// threads: 98 KB of int8 and 196 KB of bf16 weights a thread, against 48 KiB of L1).
void gemm_packed_lowp(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                      const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                      int64_t p1, int64_t step = 0);

// C (M x N, row stride ldc) = A^T B + (accumulate ? C : 0) in bf16: the weight gradients of
// bf16 training. A is K x M (row stride lda), row k of B is B + (b_rows ? b_rows[k] : k) * ldb
// (N long); both are rounded with to_bf16, their products (exact in f32) summed in f32 over
// blocks of K. Splits the rows of C over the OpenMP threads; allocates bf16 copies of A and B
// (2 (M + N) K bytes, rounded up to the tiles).
void gemm_at_b_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, const int64_t* b_rows, bool accumulate, float* C, int64_t ldc);

// gemm_packed_lowp on the Highway SIMD target in use (cpu/gemm_lowp_simd.cpp), for CPUs without
// the AVX-512 instructions: the plain C++ kernels' bits. False (nothing done) where a row of
// A is too long for its stack buffer (K above 8192 in bf16, 16384 in int8).
bool gemm_packed_lowp_simd(int64_t M, const float* A, int64_t lda, const PackedB<float>& B,
                           const float* bias, bool accumulate, float* C, int64_t ldc, int64_t p0,
                           int64_t p1, int64_t step);

// The instructions gemm_packed_lowp runs on now for bf16 or int8 (precision_kernel's answer).
const char* lowp_kernel(Precision p);

}  // namespace grux::cpu
