// Embedding kernels: gather rows of the table (forward) and scatter-add gradient rows into
// the table gradient (backward) in position order. Contracts in cpu/embedding.h.
#include "cpu/embedding.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace grux::cpu {

template <typename T>
void embedding_forward(int64_t N, int64_t E, const int64_t* ids, const T* table, int64_t ldt,
                       T* y) {
#pragma omp parallel for schedule(static) if (N * E > (1 << 16))
  for (int64_t p = 0; p < N; ++p) std::memcpy(y + p * E, table + ids[p] * ldt, E * sizeof(T));
}

template <typename T>
void embedding_backward(int64_t N, int64_t V, int64_t E, const int64_t* ids, const T* dy,
                        T* dtable) {
  std::memset(dtable, 0, static_cast<size_t>(V * E) * sizeof(T));
  if (N == 0 || E == 0) return;
  // Column slices of whole cache lines (64 bytes) so that threads never share a line of
  // dtable; every thread walks all positions in order for its own columns.
  constexpr int64_t kLine = 64 / sizeof(T);
  const int64_t lines = (E + kLine - 1) / kLine;
  const bool parallel = N * E > (1 << 15) && lines > 1;
  const int64_t slices = parallel ? std::min<int64_t>(lines, omp_get_max_threads()) : 1;
#pragma omp parallel for schedule(static, 1) num_threads(slices) if (slices > 1)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t e0 = std::min(E, lines * s / slices * kLine);
    const int64_t e1 = std::min(E, lines * (s + 1) / slices * kLine);
    for (int64_t p = 0; p < N; ++p) {
      const T* src = dy + p * E;
      T* dst = dtable + ids[p] * E;
      for (int64_t e = e0; e < e1; ++e) dst[e] += src[e];
    }
  }
}

template void embedding_forward<float>(int64_t, int64_t, const int64_t*, const float*, int64_t,
                                       float*);
template void embedding_forward<double>(int64_t, int64_t, const int64_t*, const double*, int64_t,
                                        double*);
template void embedding_backward<float>(int64_t, int64_t, int64_t, const int64_t*, const float*,
                                        float*);
template void embedding_backward<double>(int64_t, int64_t, int64_t, const int64_t*, const double*,
                                         double*);

}  // namespace grux::cpu
