// The packed GEMM's f64 kernels (gemm_packed-inl.h) and their drivers: a translation unit of
// their own, compiled beside gemm_packed.cpp's f32 ones.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm_packed_f64.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include "cpu/gemm_packed-inl.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {

void GemmBRowsF64(int64_t M, int64_t K, int64_t N, const double* A, int64_t lda, const double* base,
                  const int64_t* offsets, double* C, int64_t ldc) {
  GemmBRows(M, K, N, A, lda, base, offsets, C, ldc);
}
void GemmARowsF64(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const double* base,
                  const int64_t* offsets, const double* packed, bool accumulate, double* C,
                  int64_t ldc) {
  GemmARows(M, K, N, panel, sub, base, offsets, packed, accumulate, C, ldc);
}
void GemmPackedF64(int64_t M, int64_t K, int64_t N, int64_t panel, int64_t sub, const double* A,
                   int64_t lda, bool ta, const double* packed, const double* bias, bool acc,
                   double* C, int64_t ldc, int64_t p0, int64_t p1) {
  GemmPacked(M, K, N, panel, sub, A, lda, ta, packed, bias, acc, C, ldc, p0, p1);
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::cpu {

HWY_EXPORT(GemmPackedF64);
HWY_EXPORT(GemmBRowsF64);
HWY_EXPORT(GemmARowsF64);

template <>
void gemm_b_rows<double>(int64_t M, const double* A, int64_t lda, int64_t K, int64_t N,
                         const double* b_base, const int64_t* b_offsets, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmBRowsF64)(M, K, N, A, lda, b_base, b_offsets, C, ldc);
}
template <>
void gemm_a_rows<double>(int64_t M, const double* a_base, const int64_t* a_offsets,
                         const PackedB<double>& B, bool accumulate, double* C, int64_t ldc) {
  if (M <= 0 || B.N <= 0) return;
  HWY_DYNAMIC_DISPATCH(GemmARowsF64)
  (M, B.K, B.N, B.panel, B.sub, a_base, a_offsets, B.data, accumulate, C, ldc);
}
template <>
void gemm_packed<double>(int64_t M, const double* A, int64_t lda, bool trans_a,
                         const PackedB<double>& B, const double* bias, bool accumulate, double* C,
                         int64_t ldc, int64_t p0, int64_t p1, int64_t /*step*/) {
  if (M <= 0 || p0 >= p1) return;
  prefetch_a_rows(M, A, lda, trans_a, B.K);
  HWY_DYNAMIC_DISPATCH(GemmPackedF64)
  (M, B.K, B.N, B.panel, B.sub, A, lda, trans_a, B.data, bias, accumulate, C, ldc, p0, p1);
}

}  // namespace grux::cpu
#endif  // HWY_ONCE
