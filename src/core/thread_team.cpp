#include "core/thread_team.h"

#include <chrono>

namespace grux {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
// How long an idle worker spins before it sleeps: long enough to catch the next frame of a
// back-to-back stream, short enough not to hold a core that other work needs.
constexpr auto kSpinFor = std::chrono::microseconds(200);
}  // namespace

ThreadTeam::ThreadTeam(int size) {
  for (int m = 1; m < size; ++m) workers_.emplace_back([this, m] { worker(m); });
}

ThreadTeam::~ThreadTeam() {
  stop_ = true;
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  for (std::thread& t : workers_) t.join();
}

void ThreadTeam::run_erased(void* job, Fn fn) {
  job_ = job;
  fn_ = fn;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleepers_ increment: either it sees the new epoch before
  // it sleeps, or this thread sees it asleep and wakes it.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  fn(job, 0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spins < 4000)
      cpu_relax();
    else
      std::this_thread::yield();  // an oversubscribed machine: let the workers run
  }
}

void ThreadTeam::worker(int member) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t e = epoch_.load(std::memory_order_acquire);
    const auto spin_start = std::chrono::steady_clock::now();
    for (int spins = 1; e == seen; ++spins) {
      cpu_relax();
      if (spins % 256 == 0 && std::chrono::steady_clock::now() - spin_start > kSpinFor) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      e = epoch_.load(std::memory_order_acquire);
    }
    seen = e;
    if (stop_) return;
    fn_(job_, member);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace grux
