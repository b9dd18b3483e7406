#include "core/thread_team.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "grux/error.h"

namespace grux {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
// An idle worker spins (kSpinFor), then yields between checks so that other threads can have
// the core (until kWaitFor), then sleeps: it catches the next frame of a back-to-back stream
// within a microsecond without holding a core that other work needs.
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr auto kWaitFor = std::chrono::microseconds(200);

// Bumped in a child process after fork(): the child has none of the parent's workers, so a
// team made before the fork must not be used (it would wait forever) nor joined.
std::atomic<unsigned> fork_generation{0};

unsigned current_fork_generation() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1); });
    return true;
  }();
  (void)registered;
  return fork_generation.load(std::memory_order_relaxed);
}
}  // namespace

ThreadTeam& calling_thread_team(int size) {
  thread_local std::unique_ptr<ThreadTeam> team;
  if (!team || !team->usable() || team->size() != size)
    team = std::make_unique<ThreadTeam>(size);  // the old one destroyed after
  return *team;
}

ThreadTeam::ThreadTeam(int size, Idle idle)
    : spin_(idle == Idle::spin), generation_(current_fork_generation()) {
  // On failure, the workers already started are stopped and joined before the error leaves.
  const auto abandon = [this] {
    stop_and_join();
    delete sleep_;
  };
  try {
    for (int m = 1; m < size; ++m) workers_.emplace_back([this, m] { worker(m); });
  } catch (const std::system_error& e) {
    const int started = static_cast<int>(workers_.size());
    abandon();
    throw Error("could not start a team of " + std::to_string(size) + " threads (" +
                std::to_string(started) + " worker threads started, then: " + e.what() + ")");
  } catch (...) {
    abandon();
    throw;
  }
}

bool ThreadTeam::usable() const {
  return fork_generation.load(std::memory_order_relaxed) == generation_;
}

ThreadTeam::~ThreadTeam() {
  if (!usable()) {  // a child after fork(): the workers are the parent's (joining them, or
    // destroying the condition variable they sleep on, would wait forever): leak both
    new std::vector<std::thread>(std::move(workers_));
    return;
  }
  stop_and_join();
  delete sleep_;
}

void ThreadTeam::stop_and_join() {
  stop_ = true;
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(sleep_->mutex);
    sleep_->wake.notify_all();
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
  if (!spin_ && sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(sleep_->mutex);
    sleep_->wake.notify_all();
  }
  fn(job, 0);
  for (int spins = 0; pending_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spin_ || spins < 4000)
      cpu_relax();
    else
      std::this_thread::yield();  // an oversubscribed machine: let the workers run
  }
}

void ThreadTeam::worker(int member) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t e = epoch_.load(std::memory_order_acquire);
    const auto idle_since = std::chrono::steady_clock::now();
    bool yielding = false;
    for (int spins = 1; e == seen; ++spins) {
      if (spin_) {  // never yields or sleeps
        cpu_relax();
        e = epoch_.load(std::memory_order_acquire);
        continue;
      }
      if (yielding)
        std::this_thread::yield();
      else
        cpu_relax();
      if (yielding || spins % 64 == 0) {
        const auto idle = std::chrono::steady_clock::now() - idle_since;
        yielding = idle > kSpinFor;
        if (idle > kWaitFor) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          std::unique_lock<std::mutex> lock(sleep_->mutex);
          sleep_->wake.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      e = epoch_.load(std::memory_order_acquire);
    }
    seen = e;
    if (stop_) return;
    fn_(job_, member);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

double handoff_round_trip_ns(ThreadTeam& team) {
  if (team.size() < 2) return 0;
  constexpr int kRounds = 5, kExchanges = 20000;
  struct alignas(64) Line {
    std::atomic<int> value{0};
  };
  std::vector<double> ns;
  for (int round = 0; round < kRounds; ++round) {
    Line ping, pong;
    double elapsed = 0;
    // Each side waits for the other's last write, then answers it; yields after a long spin
    // so that an oversubscribed machine still finishes (and shows in the result).
    auto wait_for = [](const std::atomic<int>& a, int want) {
      for (int spins = 0; a.load(std::memory_order_acquire) != want; ++spins)
        if (spins < 4000)
          cpu_relax();
        else
          std::this_thread::yield();
    };
    auto job = [&](int member) {
      if (member == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 1; i <= kExchanges; ++i) {
          ping.value.store(i, std::memory_order_release);
          wait_for(pong.value, i);
        }
        elapsed =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      } else if (member == 1) {
        for (int i = 1; i <= kExchanges; ++i) {
          wait_for(ping.value, i);
          pong.value.store(i, std::memory_order_release);
        }
      }
    };
    team.run(job);
    ns.push_back(elapsed / kExchanges);
  }
  std::nth_element(ns.begin(), ns.begin() + kRounds / 2, ns.end());
  return ns[kRounds / 2];
}

}  // namespace grux
