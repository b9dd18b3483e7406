// Reduction kernels: an odometer over the outer dimensions and two inner loops, one for a
// reduced innermost dimension (fold a row into one slot held in a register) and one for a
// kept innermost dimension (fold a row into a row of slots, which vectorises for sums).
#include "cpu/reduce.h"

#include <type_traits>
#include <vector>

#include "grux/error.h"

namespace grux::cpu {

namespace {

// Calls row(src_offset, out_offset, index_offset) once per innermost row, in row-major order.
template <typename Row>
void for_each_reduce_row(int64_t rank, const int64_t* shape, const int64_t* src_strides,
                         const int64_t* out_strides, const int64_t* index_strides, Row row) {
  const int64_t outer_rank = rank - 1;
  std::vector<int64_t> index(outer_rank, 0);
  int64_t src_off = 0, out_off = 0, idx_off = 0;
  while (true) {
    row(src_off, out_off, idx_off);
    int64_t d = outer_rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        src_off += src_strides[d];
        out_off += out_strides[d];
        idx_off += index_strides[d];
        break;
      }
      index[d] = 0;
      src_off -= src_strides[d] * (shape[d] - 1);
      out_off -= out_strides[d] * (shape[d] - 1);
      idx_off -= index_strides[d] * (shape[d] - 1);
    }
    if (d < 0) return;
  }
}

template <typename Acc, typename T>
inline Acc accumulate(Acc acc, T v) {
  if constexpr (std::is_integral_v<Acc>)
    return static_cast<Acc>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
  else
    return acc + static_cast<Acc>(v);
}

// NaN beats every number (and the first NaN stays, since NaN is never "better" than NaN);
// ties keep the earlier element.
template <typename T>
inline bool better(bool is_max, T v, T cur) {
  if (v != v) return cur == cur;
  return is_max ? v > cur : v < cur;
}

}  // namespace

template <typename T, typename Acc>
void reduce_sum(int64_t rank, const int64_t* shape, const T* src, const int64_t* src_strides,
                Acc* acc, const int64_t* out_strides) {
  GRUX_ASSERT(rank >= 1);
  const int64_t n = shape[rank - 1];
  const int64_t ss = src_strides[rank - 1], os = out_strides[rank - 1];
  std::vector<int64_t> no_index(rank, 0);
  for_each_reduce_row(rank, shape, src_strides, out_strides, no_index.data(),
                      [&](int64_t so, int64_t oo, int64_t) {
                        const T* sp = src + so;
                        if (os == 0) {
                          Acc s = acc[oo];
                          if (ss == 1)
                            for (int64_t i = 0; i < n; ++i) s = accumulate(s, sp[i]);
                          else
                            for (int64_t i = 0; i < n; ++i) s = accumulate(s, sp[i * ss]);
                          acc[oo] = s;
                        } else {
                          Acc* ap = acc + oo;
                          for (int64_t i = 0; i < n; ++i)
                            ap[i * os] = accumulate(ap[i * os], sp[i * ss]);
                        }
                      });
}

template <typename T>
void reduce_extremum(bool is_max, int64_t rank, const int64_t* shape, const T* src,
                     const int64_t* src_strides, T* best, int64_t* best_index,
                     const int64_t* out_strides, const int64_t* index_strides) {
  GRUX_ASSERT(rank >= 1);
  const int64_t n = shape[rank - 1];
  const int64_t ss = src_strides[rank - 1], os = out_strides[rank - 1];
  const int64_t is = index_strides[rank - 1];
  for_each_reduce_row(rank, shape, src_strides, out_strides, index_strides,
                      [&](int64_t so, int64_t oo, int64_t io) {
                        const T* sp = src + so;
                        if (os == 0) {
                          T b = best[oo];
                          int64_t bi = best_index ? best_index[oo] : 0;
                          for (int64_t i = 0; i < n; ++i) {
                            const T v = sp[i * ss];
                            if (better(is_max, v, b)) b = v, bi = io + i * is;
                          }
                          best[oo] = b;
                          if (best_index) best_index[oo] = bi;
                        } else {
                          for (int64_t i = 0; i < n; ++i) {
                            const T v = sp[i * ss];
                            T& b = best[oo + i * os];
                            if (better(is_max, v, b)) {
                              b = v;
                              if (best_index) best_index[oo + i * os] = io + i * is;
                            }
                          }
                        }
                      });
}

template void reduce_sum<float, double>(int64_t, const int64_t*, const float*, const int64_t*,
                                        double*, const int64_t*);
template void reduce_sum<double, double>(int64_t, const int64_t*, const double*, const int64_t*,
                                         double*, const int64_t*);
template void reduce_sum<int64_t, int64_t>(int64_t, const int64_t*, const int64_t*, const int64_t*,
                                           int64_t*, const int64_t*);
template void reduce_extremum<float>(bool, int64_t, const int64_t*, const float*, const int64_t*,
                                     float*, int64_t*, const int64_t*, const int64_t*);
template void reduce_extremum<double>(bool, int64_t, const int64_t*, const double*, const int64_t*,
                                      double*, int64_t*, const int64_t*, const int64_t*);
template void reduce_extremum<int64_t>(bool, int64_t, const int64_t*, const int64_t*,
                                       const int64_t*, int64_t*, int64_t*, const int64_t*,
                                       const int64_t*);

}  // namespace grux::cpu
