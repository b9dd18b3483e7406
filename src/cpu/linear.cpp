// Linear-layer kernels: the three products of nn.Linear through grux's GEMM, and the bias
// gradient as a deterministic blocked column sum. Contracts in cpu/linear.h.
#include "cpu/linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm.h"

namespace grux::cpu {

template <typename T>
void linear_forward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                    const T* w, int64_t ldw, bool trans_w, const T* b, T* y) {
  if (M == 0 || O == 0) return;
  // y = x op(W)^T + b: W^T is I x O; stored row-major as O x I it is the transposed operand.
  gemm<T>(trans_x, !trans_w, M, O, I, x, ldx, w, ldw, b, false, y, O);
}

template <typename T>
void column_sums(int64_t M, int64_t O, const T* dy, int64_t lddy, T* db) {
  if (O == 0) return;
  const int64_t blocks = (M + kColumnSumBlock - 1) / kColumnSumBlock;
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1) * O), 0.0);
  // Fixed blocks, not per-thread chunks: each block's sum is the same whoever computes it.
#pragma omp parallel for schedule(static) if (M * O > (1 << 16))
  for (int64_t k = 0; k < blocks; ++k) {
    double* acc = partial.data() + k * O;
    const int64_t m1 = std::min(M, (k + 1) * kColumnSumBlock);
    for (int64_t m = k * kColumnSumBlock; m < m1; ++m) {
      const T* row = dy + m * lddy;
      for (int64_t o = 0; o < O; ++o) acc[o] += static_cast<double>(row[o]);
    }
  }
  for (int64_t o = 0; o < O; ++o) {
    double s = 0;
    for (int64_t k = 0; k < blocks; ++k) s += partial[k * O + o];
    db[o] = static_cast<T>(s);
  }
}

template <typename T>
void linear_backward(int64_t M, int64_t I, int64_t O, const T* x, int64_t ldx, bool trans_x,
                     const T* w, int64_t ldw, bool trans_w, const T* dy, int64_t lddy, T* dx, T* dw,
                     T* db) {
  // dx (M x I) = dy (M x O) W (O x I); W stored column-major is the transposed operand.
  if (dx != nullptr) gemm<T>(false, trans_w, M, I, O, dy, lddy, w, ldw, nullptr, false, dx, I);
  // dw (O x I) = dy^T (O x M) x (M x I).
  if (dw != nullptr) gemm<T>(true, trans_x, O, I, M, dy, lddy, x, ldx, nullptr, false, dw, I);
  if (db != nullptr) column_sums<T>(M, O, dy, lddy, db);
}

#define GRUX_LINEAR_INSTANTIATE(T)                                                               \
  template void linear_forward<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*,  \
                                  int64_t, bool, const T*, T*);                                  \
  template void linear_backward<T>(int64_t, int64_t, int64_t, const T*, int64_t, bool, const T*, \
                                   int64_t, bool, const T*, int64_t, T*, T*, T*);                \
  template void column_sums<T>(int64_t, int64_t, const T*, int64_t, T*);
GRUX_LINEAR_INSTANTIATE(float)
GRUX_LINEAR_INSTANTIATE(double)
#undef GRUX_LINEAR_INSTANTIATE

}  // namespace grux::cpu
