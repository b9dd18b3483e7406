// The per-call `threads` option every operator takes (docs/api.md): 0 keeps OpenMP's setting
// (all cores unless OMP_NUM_THREADS says otherwise), k >= 1 runs the call's parallel regions
// on at most k threads.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include "grux/error.h"

namespace grux::ops {

// Sets the calling thread's OpenMP thread count for the scope of one call and restores it
// after. omp_set_num_threads changes the calling thread's setting only: calls on other
// threads are not affected. Throws grux::Error naming `op` when threads < 0.
class ThreadsScope {
 public:
  ThreadsScope(const char* op, int threads) {
    if (threads < 0)
      throw Error(fmt::format("{}: threads is {}, expected 0 (grux chooses) or >= 1", op, threads));
    if (threads > 0) {
      saved_ = omp_get_max_threads();
      omp_set_num_threads(threads);
    }
  }
  ~ThreadsScope() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace grux::ops
