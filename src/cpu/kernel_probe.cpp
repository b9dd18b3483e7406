// The packed GEMM, the real-time kernel's latencies and the thread team's handoff, run for the
// measuring side (cpu/kernel_probe.h).
#include "cpu/kernel_probe.h"

#include <hwy/aligned_allocator.h>

#include <new>

#include "core/thread_team.h"
#include "cpu/gemm_lowp.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "grux/error.h"

namespace grux::probe {

struct PackedGemm::Impl {
  DType dtype;
  int64_t n;
  hwy::AlignedFreeUniquePtr<uint8_t[]> storage;  // the packed W^T (Highway's alignment)
  cpu::PackedB<float> f;
  cpu::PackedB<double> d;
  // `bytes` of storage for the packed operand, as T*.
  template <typename T>
  T* allocate(int64_t bytes) {
    storage = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(bytes));
    if (!storage) throw std::bad_alloc();
    return reinterpret_cast<T*>(storage.get());
  }
};

// W (N x K row-major) read as B = W^T (K x N): B(k, n) = w[k + n * K] (stride_k 1, stride_n K).
PackedGemm::PackedGemm(DType dtype, Precision precision, int64_t n, const void* b)
    : impl_(std::make_unique<Impl>()) {
  if (n < 1 || !b) throw Error("probe::PackedGemm: n >= 1 and a W operand expected");
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error("probe::PackedGemm: dtype f32 or f64 expected");
  if (dtype == DType::f64 && precision != Precision::f32)
    throw Error("probe::PackedGemm: bf16 and int8 products take f32 operands");
  impl_->dtype = dtype;
  impl_->n = n;
  if (dtype == DType::f64) {
    const int64_t panel = 3 * cpu::kUnit<double>;
    double* dst = impl_->allocate<double>(cpu::packed_size<double>(n, n, panel) * 8);
    impl_->d = cpu::pack_b_for_target<double>(n, n, panel, static_cast<const double*>(b), 1, n,
                                              nullptr, nullptr, dst);
  } else if (precision == Precision::f32) {
    const int64_t panel = 3 * cpu::kUnit<float>;
    float* dst = impl_->allocate<float>(cpu::packed_size<float>(n, n, panel) * 4);
    impl_->f = cpu::pack_b_for_target<float>(n, n, panel, static_cast<const float*>(b), 1, n,
                                             nullptr, nullptr, dst);
  } else {
    const int64_t panel = 3 * cpu::kUnit<float>;
    void* dst = impl_->allocate<uint8_t>(cpu::packed_lowp_bytes(precision, n, n, panel));
    impl_->f = cpu::pack_b_lowp(precision, n, n, panel, static_cast<const float*>(b), 1, n, nullptr,
                                nullptr, dst);
  }
}

PackedGemm::~PackedGemm() = default;

void PackedGemm::run(const void* a, void* c) const {
  const int64_t n = impl_->n;
  if (impl_->dtype == DType::f64)
    cpu::gemm_packed_parallel<double>(n, static_cast<const double*>(a), n, false, impl_->d, nullptr,
                                      false, static_cast<double*>(c), n);
  else
    cpu::gemm_packed_parallel<float>(n, static_cast<const float*>(a), n, false, impl_->f, nullptr,
                                     false, static_cast<float*>(c), n);
}

StreamLatencies stream_latencies() {
  const cpu::StreamLatencies lat = cpu::measure_stream_latencies();
  return {lat.fma_ns, lat.sigmoid_ns, lat.tanh_ns};
}

double handoff_round_trip_ns(int threads) {
  return threads < 2 ? 0 : grux::handoff_round_trip_ns(calling_thread_team(threads));
}

}  // namespace grux::probe
