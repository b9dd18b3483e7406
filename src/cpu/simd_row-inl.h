// SIMD helpers the fused gate kernels share (gru_gates.cpp, mingru_gates.cpp): one chunk of a
// row loaded and stored whole or masked at the row's tail, and min / max clamps that keep NaN.
// A Highway "-inl" header: included once per SIMD target by a file that includes
// hwy/foreach_target.h (the guard below flips with HWY_TARGET_TOGGLE).
#if defined(GRUX_CPU_SIMD_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GRUX_CPU_SIMD_ROW_INL_H_
#undef GRUX_CPU_SIMD_ROW_INL_H_
#else
#define GRUX_CPU_SIMD_ROW_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads and stores of one chunk of a row: full vectors, or masked at the row's tail.
template <class D>
struct Chunk {
  using T = hn::TFromD<D>;
  using V = hn::Vec<D>;
  D d;
  bool full;
  int64_t n;  // lanes in this chunk
  hn::Mask<D> mask;
  Chunk(D d_, int64_t remaining)
      : d(d_),
        full(remaining >= static_cast<int64_t>(hn::Lanes(d_))),
        n(std::min<int64_t>(remaining, hn::Lanes(d_))),
        mask(hn::FirstN(d_, static_cast<size_t>(remaining))) {}
  V load(const T* p) const {
    if (full) return hn::LoadU(d, p);
#if HWY_TARGET <= HWY_AVX2
    return hn::MaskedLoad(mask, d, p);  // a true masked load: nothing past the tail is read
#else
    // Before AVX2, Highway's MaskedLoad reads a whole vector and needs an aligned pointer
    // (a row's tail is neither): the tail goes through an aligned copy.
    HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
    std::memcpy(buf, p, n * sizeof(T));
    return hn::Load(d, buf);
#endif
  }
  V load_or_zero(const T* p) const {
    return p ? load(p) : hn::Zero(d);
  }
  void store(V v, T* p) const {
    if (full) return hn::StoreU(v, d, p);
#if HWY_TARGET <= HWY_AVX2
    hn::BlendedStore(v, mask, d, p);  // a true masked store: nothing past the tail is written
#else
    // Elsewhere BlendedStore may load, blend and store the whole vector (NEON's does): it
    // writes the lanes past the tail back, racing with the thread that owns them (the next
    // row's first columns) and writing past the end of the buffer. The tail goes through an
    // aligned copy.
    HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
    hn::Store(v, d, buf);
    std::memcpy(p, buf, n * sizeof(T));
#endif
  }
};

// min(bound, x) and max(bound, x) that give x when it is NaN, so NaN propagates through
// clamps (as in PyTorch) instead of becoming the bound: x86's min / max instructions return
// their second argument then; Highway's scalar and emulated targets return the other one, so
// there the NaN is put back.
template <class V>
HWY_INLINE V MinOrNaN(V bound, V x) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  return hn::Min(bound, x);
#else
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Min(bound, x));
#endif
}
template <class V>
HWY_INLINE V MaxOrNaN(V bound, V x) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  return hn::Max(bound, x);
#else
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Max(bound, x));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace grux
HWY_AFTER_NAMESPACE();

#endif  // GRUX_CPU_SIMD_ROW_INL_H_
