// Row-invariant GEMM with a packed right operand: C = op(A) B (+ bias) (+ C). Every output
// element is the sum over k = 0..K-1, in order, of fused multiply-adds from zero (then the
// bias, then the old C), whatever the number of rows, the tiling or the threads. So a row's
// result never depends on which other rows are computed with it: a streamed frame equals the
// same frame inside a whole sequence, and results do not change with batch or thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/visibility.h"

namespace grux::cpu {

// Columns of one SIMD "unit": 64 bytes (16 f32, 8 f64). Panels are 1, 2 or 3 units wide.
template <typename T>
constexpr int64_t kUnit = 64 / sizeof(T);

// The packed form of a logical K x N operand B: ceil(N / panel) panels, each K x panel
// row-major, the last zero-padded. Columns of C are the packed columns, in order. With
// `sub` (a unit, for a panel wider than that), each panel is instead its sub-column blocks
// one after another, each K x sub row-major (gemm_sub_panel): the same values, in the order
// that kernels of fewer vector registers read them.
//
// For T = float, B may instead be held in low precision (cpu/gemm_lowp.h packs it): `data`
// is null and `bf16` or `i8` points to the panels, with the k rows grouped in pairs (bf16) or
// quads (int8) per column; gemm_packed then runs the low-precision product.
template <typename T>
struct PackedB {
  int64_t K = 0, N = 0, panel = 0;  // panel: columns per panel (a multiple of kUnit<T>)
  const T* data = nullptr;
  int64_t sub = 0;                  // columns per block of a panel (0: the whole panel)
  const uint16_t* bf16 = nullptr;   // ceil(K / 2) pair rows x panel x 2 per panel
  const int8_t* i8 = nullptr;       // ceil(K / 4) quad rows x panel x 4 per panel
  const float* scale = nullptr;     // int8: per packed column, B = scale * i8
  const int32_t* colsum = nullptr;  // int8: per packed column, the sum over k of i8
  int64_t panels() const { return (N + panel - 1) / panel; }
  bool low_precision() const { return bf16 != nullptr || i8 != nullptr; }
};

// Elements needed by pack_b for (K, N, panel).
template <typename T>
int64_t packed_size(int64_t K, int64_t N, int64_t panel) {
  return (N + panel - 1) / panel * panel * K;
}

// The panel width (2, 3 or 1 units) that pads N least, for a product whose panels need not
// hold whole units' gates (the weight gradients, dL/dx). Ties go to 2 units (micro-kernels of
// 6 rows x 64 columns), then 3. Padding is computed for nothing: W4's dW_ih (N 256) in panels
// of 48 uses 16 of its last panel's 48 columns, and takes 10-35% longer than in panels of 32.
template <typename T>
int64_t gemm_panel_for(int64_t N) {
  constexpr int64_t U = kUnit<T>;
  int64_t best = 2 * U;
  for (int64_t p : {3 * U, U})
    if (packed_size<T>(1, N, p) < packed_size<T>(1, N, best)) best = p;
  return best;
}

// Packs the logical operand B(k, n) = src[kk * stride_k + nn * stride_n], where
// kk = k_map ? k_map[k] : k and nn = n_map ? n_map[n] : n, into dst (packed_size elements).
// E.g. W (N x K row-major) used as W^T: stride_k = 1, stride_n = K.
// `sub`: PackedB::sub (0, or a divisor of panel that is a multiple of kUnit<T>).
template <typename T>
void pack_b(int64_t K, int64_t N, int64_t panel, const T* src, int64_t stride_k, int64_t stride_n,
            const int64_t* k_map, const int64_t* n_map, T* dst, int64_t sub = 0);

// The PackedB::sub the current SIMD target's kernels read fastest: 0 where a micro-kernel
// holds a whole panel's width in registers (AVX-512), kUnit<T> where it takes a panel in
// windows of two vectors (16 registers: AVX2 and below), so that each window reads one
// contiguous block instead of a part of every panel row (W3's input projection, M 6400, K 256,
// N 1536, in panels of 48 on AVX2: about 15% faster in blocks of 16 than as whole panels). The
// result is the same either way; a B packed for one target is read correctly on any other.
template <typename T>
int64_t gemm_sub_panel();

// pack_b in the layout the current SIMD target reads fastest (gemm_sub_panel), and the
// PackedB that describes it: what every caller that packs for this process's kernels uses.
template <typename T>
PackedB<T> pack_b_for_target(int64_t K, int64_t N, int64_t panel, const T* src, int64_t stride_k,
                             int64_t stride_n, const int64_t* k_map, const int64_t* n_map, T* dst) {
  const int64_t sub = gemm_sub_panel<T>();
  pack_b<T>(K, N, panel, src, stride_k, stride_n, k_map, n_map, dst, sub);
  return {K, N, panel, dst, sub};
}

// C (M x N, row stride ldc) = op(A) B + bias (N, or null) + (accumulate ? C : 0), for the
// panels [p0, p1) of B only (columns [p0 * panel, min(N, p1 * panel))). op(A) is M x K:
// A[m * lda + k], or A[k * lda + m] with trans_a. Single-threaded: callers split panels.
// `step`: the call's index in a series of products with the same B (a recurrence's time
// steps; 0 otherwise). A B in bf16 or int8 is read in an order that depends on it, so that
// each call begins on what the previous one left in L1 (cpu/gemm_lowp.h). On odd steps bf16
// sums each column's k pairs from the last to the first (its last bits depend on the step's
// parity); int8's sums are exact (the same bits on every step); f32 and f64 ignore it.
template <typename T>
void gemm_packed(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                 const T* bias, bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1,
                 int64_t step = 0);

// Operands read in place from rows of other arrays (convolution on shifted views of an image:
// no column matrix, no packing). Same FMA chains as gemm_packed; single-threaded.
//
// C (M x N) = A B, op(A) = A (M x K, row stride lda), B(k, n) = b_base[b_offsets[k] + n].
// B is taken in panels of 3 * kUnit<T> columns, whole: it reads b_base[b_offsets[k] + n] for
// n up to N rounded up to that panel width (the columns past N are computed and dropped), so
// the caller keeps that much readable past each row.
template <typename T>
GRUX_INTERNAL void gemm_b_rows(int64_t M, const T* A, int64_t lda, int64_t K, int64_t N,
                               const T* b_base, const int64_t* b_offsets, T* C, int64_t ldc);
// C (M x B.N) = A B (+ C when accumulate), A(m, k) = a_base[a_offsets[m] + k] for k < B.K.
template <typename T>
void gemm_a_rows(int64_t M, const T* a_base, const int64_t* a_offsets, const PackedB<T>& B,
                 bool accumulate, T* C, int64_t ldc);

// Asks for the first lines of op(A)'s rows at once, where op(A) is one or two rows not
// transposed (the recurrent products at batch 1 and 2); nothing otherwise. gemm_packed's
// first step (gemm_packed.cpp says why).
template <typename T>
void prefetch_a_rows(int64_t M, const T* A, int64_t lda, bool trans_a, int64_t K);

// The Highway target (an HWY_* bit of hwy/targets.h) the dispatched kernels run on now: the
// best the CPU has, or the one set_simd_target chose. Cheap (an atomic load, no CPUID), for
// kernels outside Highway that follow the same choice.
int64_t simd_target_bit();

// The L2 cache's size (bytes) as the OS reports it for CPU 0; 512 KiB when it does not say.
int64_t l2_cache_bytes();
// The L1 data cache's size (bytes) likewise; 32 KiB when the OS does not say.
int64_t l1d_cache_bytes();

// Rows of A per block for a thread that multiplies many rows (one block after another) by
// the panels [p0, p1) of B, an A of `a_cols` columns of `a_bytes` each and a C of T: the
// most rows, a multiple of 8 up to 96, for which B's panels, a block's rows of A and its
// rows of C fit in 7/8 of the L2 together. The panels are read in a cycle once per block, so
// under least-recently-used replacement they stay in L2 only while all three fit; where the
// panels alone do not, they stream from L3 anyway and 96 rows reuse each read the most.
template <typename T>
int64_t gemm_row_block(const PackedB<T>& B, int64_t p0, int64_t p1, int64_t a_cols,
                       int64_t a_bytes);

// The whole product, split over the OpenMP threads (row blocks x panels). Same result.
template <typename T>
void gemm_packed_parallel(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                          const T* bias, bool accumulate, T* C, int64_t ldc);

}  // namespace grux::cpu
