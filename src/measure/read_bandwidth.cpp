// Read-bandwidth kernel (Highway, dynamic dispatch): four independent vector accumulators so
// that loads, not the add latency, limit the pass.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "measure/read_bandwidth.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// Must come after foreach_target.h.
#include <hwy/highway.h>

#include "measure/read_bandwidth.h"

HWY_BEFORE_NAMESPACE();
namespace grux {
namespace measure {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float ReadSum(const float* data, int64_t n, bool reverse) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  const int64_t full = n / (4 * L) * (4 * L);
  if (!reverse) {
    for (int64_t i = 0; i < full; i += 4 * L) {
      a0 = hn::Add(a0, hn::Load(d, data + i));
      a1 = hn::Add(a1, hn::Load(d, data + i + L));
      a2 = hn::Add(a2, hn::Load(d, data + i + 2 * L));
      a3 = hn::Add(a3, hn::Load(d, data + i + 3 * L));
    }
  } else {
    for (int64_t i = full - 4 * L; i >= 0; i -= 4 * L) {
      a3 = hn::Add(a3, hn::Load(d, data + i + 3 * L));
      a2 = hn::Add(a2, hn::Load(d, data + i + 2 * L));
      a1 = hn::Add(a1, hn::Load(d, data + i + L));
      a0 = hn::Add(a0, hn::Load(d, data + i));
    }
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (int64_t i = full; i < n; ++i) s += data[i];
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace measure
}  // namespace grux
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace grux::measure {
HWY_EXPORT(ReadSum);
float read_sum(const float* data, int64_t n, bool reverse) {
  return HWY_DYNAMIC_DISPATCH(ReadSum)(data, n, reverse);
}
}  // namespace grux::measure
#endif
