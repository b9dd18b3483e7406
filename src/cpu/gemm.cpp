// The general GEMM on grux's own packed kernel: op(B) is packed into panels (into a
// thread-local buffer kept between calls up to kReusedBytes, so that the matmul scans' many
// small products allocate nothing and large ones do not fault in fresh pages on every call),
// then the rows of op(A) run against them on the OpenMP threads.
#include "cpu/gemm.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

#include "cpu/gemm_packed.h"

namespace grux::cpu {

template <typename T>
int64_t gemm_panel_width(int64_t N) {
  int64_t best = 3 * kUnit<T>, best_pad = -1;
  for (int64_t s = 3; s >= 1; --s) {
    const int64_t P = s * kUnit<T>, pad = (N + P - 1) / P * P - N;
    if (best_pad < 0 || pad < best_pad) best = P, best_pad = pad;
  }
  return best;
}

namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedBuffer = std::unique_ptr<std::byte[], AlignedFree>;

AlignedBuffer allocate_aligned(size_t bytes) {
  return AlignedBuffer(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(64))));
}

// Packed operands up to this size reuse one buffer per thread, grown to the largest packed so
// far (at least 1 MiB) and kept; larger ones get their own, freed after the call. A fresh
// buffer's pages fault in as the packing first writes them: a 6400 x 768 f32 B (20 MB) packed
// in 25 ms into a new buffer and in 9 ms into a reused one on an AVX2 KVM guest, where its
// product with 256 rows took 31 ms.
constexpr size_t kReusedBytes = size_t(32) << 20;
constexpr size_t kReusedMinBytes = size_t(1) << 20;

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
          const T* B, int64_t ldb, const T* bias, bool accumulate, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t panel = gemm_panel_width<T>(N);
  const size_t bytes = std::max<size_t>(1, packed_size<T>(K, N, panel) * sizeof(T));
  thread_local AlignedBuffer reused;
  thread_local size_t reused_bytes = 0;
  AlignedBuffer own;
  std::byte* buf;
  if (bytes <= kReusedBytes) {
    if (reused_bytes < bytes) {
      reused.reset(), reused_bytes = 0;  // the old buffer first: the two are never held at once
      const size_t grown = std::max(bytes, kReusedMinBytes);
      reused = allocate_aligned(grown);
      reused_bytes = grown;
    }
    buf = reused.get();
  } else {
    own = allocate_aligned(bytes);
    buf = own.get();
  }
  T* packed = reinterpret_cast<T*>(buf);
  // op(B)(k, n) = B[k * ldb + n], or B[n * ldb + k] when transposed.
  const PackedB<T> pb =
      trans_b ? pack_b_for_target<T>(K, N, panel, B, 1, ldb, nullptr, nullptr, packed)
              : pack_b_for_target<T>(K, N, panel, B, ldb, 1, nullptr, nullptr, packed);
  gemm_packed_parallel<T>(M, A, lda, trans_a, pb, bias, accumulate, C, ldc);
}

#define GRUX_GEMM_INSTANTIATE(T)                                                            \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, const T*, int64_t, const T*, \
                        int64_t, const T*, bool, T*, int64_t);                              \
  template int64_t gemm_panel_width<T>(int64_t);
GRUX_GEMM_INSTANTIATE(float)
GRUX_GEMM_INSTANTIATE(double)
#undef GRUX_GEMM_INSTANTIATE

}  // namespace grux::cpu
