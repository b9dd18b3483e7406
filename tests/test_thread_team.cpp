// The persistent thread team that runs a stream's frames: every member runs every job once,
// run() returns only after all have finished, and sleeping workers wake for the next job.
// The spinning barrier of the teams' time steps: nobody passes before everyone arrived.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/sanitizer.h"
#include "core/spin_barrier.h"
#include "core/thread_team.h"
#include "grux/error.h"
#include "test_util.h"

namespace grux::test_thread_team {
namespace {

// Every thread writes its own slot for round i, waits, then reads every other slot: each must
// hold round i (a thread that left early reads i - 1 somewhere), and none may yet hold i + 1
// (a thread that ran ahead) since a second barrier separates the reads from the next
// writes. Teams of 1 to 9 threads, more threads than cores, spin-only and yielding, reset()
// between uses.
TEST(SpinBarrier, NobodyPassesBeforeEveryoneArrivedAtEveryTeamSize) {
  SpinBarrier barrier;
  for (int n : {1, 2, 3, 4, 5, 7, 9}) {
    for (bool spin_only : {false, true}) {
      // More threads than cores: spinning only would wait for the scheduler's time slices.
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      if (spin_only && n > cores) continue;
      barrier.reset(n, spin_only);
      const int rounds = n > cores ? 200 : 2000;
      std::vector<std::atomic<int>> seen(n);
      std::atomic<int> errors{0};
      auto member = [&](int tid) {
        for (int i = 1; i <= rounds; ++i) {
          seen[tid].store(i, std::memory_order_relaxed);
          barrier.wait();
          for (int j = 0; j < n; ++j)
            if (seen[j].load(std::memory_order_relaxed) != i) errors.fetch_add(1);
          barrier.wait();
        }
      };
      std::vector<std::thread> threads;
      for (int t = 1; t < n; ++t) threads.emplace_back(member, t);
      member(0);
      for (auto& t : threads) t.join();
      EXPECT_EQ(errors.load(), 0) << n << " threads, spin_only " << spin_only;
    }
  }
}

TEST(ThreadTeam, EveryMemberRunsEveryJobOnceAndRunWaitsForAll) {
  for (int size : {1, 2, 3}) {
    ThreadTeam team(size);
    ASSERT_EQ(team.size(), size);
    std::vector<int> runs(size, 0);  // plain ints: run() must make the writes visible
    std::vector<std::atomic<int>> calls(size);
    for (int job = 0; job < 2000; ++job) {
      auto body = [&](int member) {
        ASSERT_GE(member, 0);
        ASSERT_LT(member, size);
        // A slow member: run() must still wait for it.
        if (member == size - 1 && job % 97 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(300));
        ++runs[member];
        calls[member].fetch_add(1);
      };
      team.run(body);
      for (int m = 0; m < size; ++m)
        ASSERT_EQ(runs[m], job + 1) << "size " << size << " member " << m;
    }
    for (int m = 0; m < size; ++m) EXPECT_EQ(calls[m].load(), 2000);
  }
}

TEST(ThreadTeam, WorkersThatFellAsleepWakeForTheNextJob) {
  ThreadTeam team(2);
  int ran = 0;
  auto body = [&](int member) {
    if (member == 1) ++ran;
  };
  for (int round = 1; round <= 5; ++round) {
    // Longer than the workers spin: they are asleep when the job comes.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    team.run(body);
    EXPECT_EQ(ran, round);
  }
}

TEST(ThreadTeam, DestructionWakesAndJoinsIdleOrSleepingWorkers) {
  using Clock = std::chrono::steady_clock;
  for (const bool asleep : {false, true}) {
    auto team = std::make_unique<ThreadTeam>(3);
    int ran = 0;
    auto body = [&](int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); };
    team->run(body);
    EXPECT_EQ(ran, 3);
    if (asleep) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto t0 = Clock::now();
    team.reset();  // must not wait for a job or a timeout
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1)) << (asleep ? "asleep" : "spinning");
  }
}

TEST(ThreadTeam, OneTeamPerCallingThreadSharedByItsCallers) {
  ThreadTeam* mine = &calling_thread_team(2);
  EXPECT_EQ(mine->size(), 2);
  EXPECT_EQ(&calling_thread_team(2), mine);  // every stream of this thread uses the same one
  ThreadTeam* other = nullptr;
  std::thread t([&] { other = &calling_thread_team(2); });
  t.join();
  EXPECT_NE(other, mine);
  ThreadTeam& bigger = calling_thread_team(3);  // another size: made anew
  EXPECT_EQ(bigger.size(), 3);
  int ran = 0;
  auto body = [&](int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); };
  bigger.run(body);
  EXPECT_EQ(ran, 3);
}

TEST(ThreadTeam, AChildProcessAfterForkGetsATeamOfItsOwn) {
  ThreadTeam& parent = calling_thread_team(2);
  auto nothing = [](int) {};
  parent.run(nothing);  // the parent's worker exists and has run
  const int code = test::exit_code_in_child(
      [&] {
        int ran = 0;
        auto body = [&](int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); };
        ThreadTeam& child = calling_thread_team(2);
        child.run(body);
        return ran == 2 && &child != &parent ? 0 : 1;
      },
      10);
  EXPECT_EQ(code, 0) << "128 + N: the child was killed by signal N";
  EXPECT_EQ(&calling_thread_team(2), &parent);  // the parent keeps its team
}

// A team that a stream or a cell made before fork() has no workers in the child: it says so
// (usable() false) and can be destroyed there without waiting for them, whether they were
// spinning or asleep on the team's condition variable at the fork; a new team works.
TEST(ThreadTeam, ATeamMadeBeforeForkIsUnusableInTheChildAndDestroyedWithoutWaiting) {
  for (const int kind : {0, 1, 2}) {
    const auto idle = kind == 2 ? ThreadTeam::Idle::spin : ThreadTeam::Idle::sleep;
    auto team = std::make_unique<ThreadTeam>(2, idle);
    auto nothing = [](int) {};
    team->run(nothing);
    ASSERT_TRUE(team->usable());
    // Longer than the workers spin and yield: asleep when the process forks.
    if (kind == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int code = test::exit_code_in_child(
        [&] {
          const bool unusable = !team->usable();
          team.reset();  // must neither join the parent's worker nor terminate
          int ran = 0;
          auto body = [&](int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); };
          ThreadTeam fresh(2, idle);
          fresh.run(body);
          return unusable && fresh.usable() && ran == 2 ? 0 : 1;
        },
        10);
    EXPECT_EQ(code, 0) << "kind " << kind << " (128 + N: the child was killed by signal N)";
    EXPECT_TRUE(team->usable());  // the parent's team is untouched
    team->run(nothing);
  }
}

// When the system cannot start the workers (here: the child's address space capped just above
// its size, so no thread stack fits), the team throws grux::Error with one line, having
// stopped the workers it did start, instead of std::system_error.
TEST(ThreadTeam, ThreadsThatCannotStartGiveAGruxError) {
#if GRUX_ASAN || GRUX_TSAN
  GTEST_SKIP() << "the sanitizers need more address space than the cap leaves";
#else
  const int code = test::exit_code_in_child(
      [] {
        // Room for one 8 MiB stack with its guard page, not for many (glibc may reuse a few
        // stacks of the parent's finished threads: the team asks for more).
        if (!test::cap_address_space(12 << 20)) return 3;
        try {
          ThreadTeam team(64);
          return 5;  // 63 threads started: the cap did not hold
        } catch (const Error& e) {
          const std::string what = e.what();
          return what.find("could not start a team of 64 threads") != std::string::npos &&
                         what.find('\n') == std::string::npos
                     ? 0
                     : 6;
        } catch (...) {
          return 7;
        }
      },
      10);
  EXPECT_EQ(code, 0) << "3: the cap could not be set, 5: no error, 6: wrong message, 7: another "
                        "exception, 128 + N: killed by signal N";
#endif
}

TEST(ThreadTeam, HandoffRoundTripIsMeasuredBetweenTwoMembers) {
  ThreadTeam one(1);
  EXPECT_EQ(handoff_round_trip_ns(one), 0);
  // Members 0 and 1 exchange; a third only runs the (empty for it) job, and the team is usable
  // afterwards.
  ThreadTeam three(3);
  const double ns = handoff_round_trip_ns(three);
  EXPECT_GT(ns, 0);
  EXPECT_LT(ns, 1e7);  // 10 ms a round trip would be a hang in all but name
  int ran = 0;
  auto body = [&](int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); };
  three.run(body);
  EXPECT_EQ(ran, 3);
}

// Two races the race detector must see (run by the test below, never on their own): one between
// a team's workers, one between an OpenMP region's threads, which Archer and the suppression of
// libomp's own calls (tests/tsan_suppressions.txt) must not hide.
int g_unguarded = 0;
TEST(ThreadTeam, DISABLED_RaceInATeam) {
  ThreadTeam team(2);
  auto bump = [](int) {
    for (int k = 0; k < 1000; ++k) g_unguarded = g_unguarded + 1;
  };
  team.run(bump);
  EXPECT_GT(g_unguarded, 0);
}
TEST(ThreadTeam, DISABLED_RaceInAnOpenMpRegion) {
#pragma omp parallel num_threads(2)
  for (int k = 0; k < 1000; ++k) g_unguarded = g_unguarded + 1;
  EXPECT_GT(g_unguarded, 0);
}

// Under ThreadSanitizer (scripts/test_tsan.sh), this program run on each race above fails with
// the data race reported in its code: the detector is on and sees what it is there to see.
TEST(ThreadTeam, TheRaceDetectorSeesRaces) {
#if !GRUX_TSAN
  GTEST_SKIP() << "only under ThreadSanitizer";
#else
  for (const std::string race : {"RaceInATeam", "RaceInAnOpenMpRegion"}) {
    const std::string cmd =
        "/proc/" + std::to_string(getpid()) +
        "/exe --gtest_also_run_disabled_tests --gtest_filter=ThreadTeam.DISABLED_" + race + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    EXPECT_NE(pclose(p), 0) << out;
    EXPECT_NE(out.find("SUMMARY: ThreadSanitizer: data race"), std::string::npos) << out;
    EXPECT_NE(out.find("DISABLED_" + race + "_Test::TestBody"), std::string::npos) << out;
  }
#endif
}

}  // namespace
}  // namespace grux::test_thread_team
