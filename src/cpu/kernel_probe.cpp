// The packed GEMM, the real-time kernel's latencies and the thread team's handoff, run for the
// measuring side (cpu/kernel_probe.h).
#include "cpu/kernel_probe.h"

#include <cstdlib>
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
  void* storage = nullptr;  // the packed W^T, 64-byte aligned
  cpu::PackedB<float> f;
  cpu::PackedB<double> d;
  ~Impl() { std::free(storage); }
};

namespace {

void* aligned_bytes(int64_t bytes) {
  const size_t size = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, size == 0 ? 64 : size);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

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
    impl_->storage = aligned_bytes(cpu::packed_size<double>(n, n, panel) * 8);
    impl_->d =
        cpu::pack_b_for_target<double>(n, n, panel, static_cast<const double*>(b), 1, n, nullptr,
                                       nullptr, static_cast<double*>(impl_->storage));
  } else if (precision == Precision::f32) {
    const int64_t panel = 3 * cpu::kUnit<float>;
    impl_->storage = aligned_bytes(cpu::packed_size<float>(n, n, panel) * 4);
    impl_->f = cpu::pack_b_for_target<float>(n, n, panel, static_cast<const float*>(b), 1, n,
                                             nullptr, nullptr, static_cast<float*>(impl_->storage));
  } else {
    const int64_t panel = 3 * cpu::kUnit<float>;
    impl_->storage = aligned_bytes(cpu::packed_lowp_bytes(precision, n, n, panel));
    impl_->f = cpu::pack_b_lowp(precision, n, n, panel, static_cast<const float*>(b), 1, n, nullptr,
                                nullptr, impl_->storage);
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
