// Reference GEMM: C = op(A) op(B) (+ bias) (+ C) by the definition, each element a sum over
// k in order, accumulated in double. Never tuned beyond loop order: op(B) is copied to
// double (K x N) so the inner loop is a contiguous axpy (fast enough to check full-size
// benchmark problems in seconds).
#include "cpu/ref/gemm_ref.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cpu/gemm_lowp.h"
#include "grux/error.h"

namespace grux::cpu::ref {

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, const T* bias, bool accumulate, T* C, int64_t ldc) {
  std::vector<double> b(K * N), acc(N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) b[k * N + n] = tb ? B[n * ldb + k] : B[k * ldb + n];
  for (int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double a = ta ? A[k * lda + m] : A[m * lda + k];
      const double* bk = b.data() + k * N;
      for (int64_t n = 0; n < N; ++n) acc[n] += a * bk[n];
    }
    for (int64_t n = 0; n < N; ++n) {
      T& c = C[m * ldc + n];
      const double v = acc[n] + (bias ? double(bias[n]) : 0.0);
      c = static_cast<T>(accumulate ? v + double(c) : v);
    }
  }
}

namespace {
// B in bf16 or int8 (cpu/gemm_lowp.h), from the same rounded or quantized values the kernels
// use: C = sum over k of bf16(a) b (bf16), or scale_a scale_b sum over k of (qa - zero) qb
// (int8), in double, then + bias (+ C).
void lowp_packed(int64_t M, const float* A, int64_t lda, const PackedB<float>& B, const float* bias,
                 bool accumulate, float* C, int64_t ldc, int64_t p0, int64_t p1) {
  const bool int8 = B.i8 != nullptr;
  const int64_t g = int8 ? 4 : 2, rows = (B.K + g - 1) / g, P = B.panel;
  // B(k, n): element k % g of group k / g, column n % P of panel n / P.
  auto b_at = [&](int64_t k, int64_t n) {
    const int64_t at = ((n / P * rows + k / g) * P + n % P) * g + k % g;
    return int8 ? double(B.i8[at]) : double(from_bf16(B.bf16[at]));
  };
  for (int64_t m = 0; m < M; ++m) {
    const float* a = A + m * lda;
    const RowQuant rq = row_quant_of(a, B.K);
    for (int64_t n = p0 * P; n < std::min(B.N, p1 * P); ++n) {
      double acc = 0;
      for (int64_t k = 0; k < B.K; ++k) {
        const double ak = int8 ? double(quantize(a[k], rq)) - rq.zero : from_bf16(to_bf16(a[k]));
        acc += ak * b_at(k, n);
      }
      if (int8) acc *= double(rq.scale) * double(B.scale[n]);
      double v = acc + (bias ? double(bias[n]) : 0.0);
      float& c = C[m * ldc + n];
      c = static_cast<float>(accumulate ? v + double(c) : v);
    }
  }
}
}  // namespace

void gemm_at_b_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, const int64_t* b_rows, bool accumulate, float* C, int64_t ldc) {
  // Sums over k in double of bf16(A(k, m)) bf16(B(k, n)), in axpy order.
  std::vector<double> acc(N);
  for (int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double a = from_bf16(to_bf16(A[k * lda + m]));
      const float* b = B + (b_rows ? b_rows[k] : k) * ldb;
      for (int64_t n = 0; n < N; ++n) acc[n] += a * from_bf16(to_bf16(b[n]));
    }
    for (int64_t n = 0; n < N; ++n) {
      float& c = C[m * ldc + n];
      c = static_cast<float>(accumulate ? acc[n] + double(c) : acc[n]);
    }
  }
}

template <typename T>
void gemm_packed(int64_t M, const T* A, int64_t lda, bool trans_a, const PackedB<T>& B,
                 const T* bias, bool accumulate, T* C, int64_t ldc, int64_t p0, int64_t p1,
                 int64_t /*step*/) {
  if constexpr (std::is_same_v<T, float>) {
    if (B.low_precision()) {
      GRUX_ASSERT(!trans_a);
      return lowp_packed(M, A, lda, B, bias, accumulate, C, ldc, p0, p1);
    }
  }
  // Per panel, each row's sums run over k in order in double (axpy order so it vectorizes).
  // Element (k, j) of a panel: row-major K x panel, or in blocks of w columns (PackedB::sub).
  std::vector<double> acc(B.panel);
  const int64_t w = B.sub > 0 ? B.sub : B.panel;
  for (int64_t p = p0; p < std::min(p1, B.panels()); ++p) {
    const T* panel = B.data + p * B.K * B.panel;
    const int64_t n0 = p * B.panel, cols = std::min(B.panel, B.N - n0);
    for (int64_t m = 0; m < M; ++m) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < B.K; ++k) {
        const double a = trans_a ? A[k * lda + m] : A[m * lda + k];
        for (int64_t j = 0; j < B.panel; ++j)
          acc[j] += a * double(panel[j / w * (B.K * w) + k * w + j % w]);
      }
      for (int64_t j = 0; j < cols; ++j) {
        double v = acc[j] + (bias ? double(bias[n0 + j]) : 0.0);
        T& c = C[m * ldc + n0 + j];
        c = static_cast<T>(accumulate ? v + double(c) : v);
      }
    }
  }
}

template void gemm_packed<float>(int64_t, const float*, int64_t, bool, const PackedB<float>&,
                                 const float*, bool, float*, int64_t, int64_t, int64_t, int64_t);
template void gemm_packed<double>(int64_t, const double*, int64_t, bool, const PackedB<double>&,
                                  const double*, bool, double*, int64_t, int64_t, int64_t, int64_t);

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, const float*, bool, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, const double*, bool, double*, int64_t);

}  // namespace grux::cpu::ref
