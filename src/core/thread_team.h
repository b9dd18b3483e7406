// A persistent team of threads for parallel work too short for OpenMP's fork and join: a
// streaming GRU's frame takes a few microseconds, and an OpenMP parallel region of two
// threads costs about 0.44 us to open and close (12% of a W1 frame).
// The caller is member 0; the other members are threads the team owns. After each job they
// spin for 20 us, then yield the core between checks until 200 us (frames usually come back
// to back), then sleep until the next job, so an idle team does not hold a core.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace grux {

class ThreadTeam {
 public:
  // How idle workers wait for the next job. sleep: as above (spin 20 us, yield until 200 us,
  // then sleep on a condition variable, woken with a mutex and notify_all). spin: they spin
  // (x86 `pause`) on the job counter for the team's whole life, never yielding or sleeping,
  // and run() neither locks nor makes a system call: for real-time streams, whose host gives
  // the workers a core each and the caller's priority.
  enum class Idle { sleep, spin };
  // A team of `size` >= 1 members (size - 1 threads are started). Throws grux::Error when the
  // system cannot start them (no thread is left running then).
  explicit ThreadTeam(int size, Idle idle = Idle::sleep);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // False in a child process forked after the team was made: its workers are the parent's
  // threads, which do not exist there, so run() would wait forever. Such a team must not run;
  // destroying it is safe (it leaks the threads' handles and what they wait on instead of
  // joining them).
  // One relaxed atomic load: no lock, no system call.
  bool usable() const;
  // Idle::spin: jobs should spin-wait too (a SpinBarrier reset with spin_only).
  bool spins() const { return spin_; }

  // Calls job(member) once on every member, 0..size()-1, the caller being member 0; returns
  // when all have returned. The job must not throw. Not reentrant: one caller at a time.
  template <typename Job>
  void run(Job& job) {
    run_erased(&job, [](void* j, int member) { (*static_cast<Job*>(j))(member); });
  }

 private:
  using Fn = void (*)(void*, int);
  void run_erased(void* job, Fn fn);
  void stop_and_join();
  void worker(int member);

  std::vector<std::thread> workers_;
  void* job_ = nullptr;
  Fn fn_ = nullptr;
  bool spin_ = false;                           // Idle::spin
  unsigned generation_ = 0;                     // fork generation at construction
  bool stop_ = false;                           // written before an epoch bump, read after it
  alignas(64) std::atomic<uint32_t> epoch_{0};  // bumped once per job
  alignas(64) std::atomic<int> pending_{0};     // workers still running the current job
  alignas(64) std::atomic<int> sleepers_{0};    // workers asleep (or about to be) on sleep_
  // Where sleeping workers wait. On the heap so that a child after fork() can leak it: a copy
  // of a condition variable that the parent's workers were waiting on cannot be destroyed (its
  // destruction waits for them).
  struct Sleep {
    std::mutex mutex;
    std::condition_variable wake;
  };
  Sleep* sleep_ = new Sleep;
};

// The calling thread's team of `size` members, kept for the thread's lifetime (made anew
// when another size is asked for). One per thread, like OpenMP's thread pools: any number of
// streams stepped from one thread share it, so their workers never pile up spinning.
ThreadTeam& calling_thread_team(int size);

// Round trip of one cache line between members 0 (the caller) and 1 of `team`, in ns: the
// median of 5 rounds of 20000 exchanges; 0 for a team of one. A time step that threads share
// pays about one for its barrier and one for the state it hands over. It depends on where the
// two threads' cores are (on a virtual machine, where the hypervisor puts them: 140 ns or
// 560-600 ns, changing from minute to minute).
double handoff_round_trip_ns(ThreadTeam& team);

}  // namespace grux
