// A barrier for the threads of one parallel region that synchronize every time step: spins
// (the step is microseconds long, a sleeping barrier costs about as much), and yields the
// core after a while so that an oversubscribed machine still makes progress (unless told to
// spin only: the barrier of a real-time stream's team, which never yields).
#pragma once

#include <atomic>
#include <thread>

namespace grux {

class SpinBarrier {
 public:
  // Every thread of a team of `threads` calls wait(); none returns before all have arrived.
  // reset() must not race with wait() (call it before the team starts, or from one thread
  // followed by another synchronization).
  void reset(int threads, bool spin_only = false) {
    threads_ = threads;
    spin_only_ = spin_only;
    count_.store(0, std::memory_order_relaxed);
  }
  void wait() {
    if (threads_ <= 1) return;
    const unsigned gen = generation_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; generation_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spin_only_ || spins < 4000) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  int threads_ = 1;
  bool spin_only_ = false;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
};

}  // namespace grux
