// What every Communicator shares: agreement checks across ranks, and what the MPI launcher's
// environment says about the job (grux/dist.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "grux/dist.h"
#include "grux/error.h"

namespace grux {

namespace {

std::string cut(const std::string& s) {
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// The first of these variables that holds a positive number; 0 if none does.
int env_count(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long k = std::strtol(v, &end, 10);
    if (*end == '\0' && k > 0 && k < (1 << 24)) return static_cast<int>(k);
  }
  return 0;
}

}  // namespace

void agree_no_error(Communicator& comm, const std::string& error) {
  const std::vector<std::string> all = comm.all_gather(error);
  // The same error everywhere (the same bad setting) needs no rank named.
  if (std::all_of(all.begin(), all.end(), [&](const std::string& e) { return e == all[0]; })) {
    if (!all[0].empty()) throw CollectiveError(all[0]);
    return;
  }
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) throw CollectiveError(fmt::format("rank {}: {}", r, all[r]));
}

void agree_same(Communicator& comm, const std::string& what, const std::string& value) {
  const std::vector<std::string> all = comm.all_gather(value);
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw CollectiveError(fmt::format("rank {} has a different {} than rank 0: {} vs {}", r, what,
                                        cut(all[r]), cut(all[0])));
}

// Open MPI's mpirun, MPICH's and Intel MPI's mpiexec (Hydra) and Slurm's srun.
int launched_ranks() {
  return env_count({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"});
}

int launched_local_ranks() {
  if (launched_ranks() == 0) return 0;
  return env_count({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
}

}  // namespace grux

namespace grux {

LinkModel measure_link(Communicator& comm, bool quick) {
  const int K = comm.size();
  if (K < 2) throw Error("measuring the link needs 2 or more ranks (mpirun -np 2 grux calibrate)");
  std::vector<float> buf;
  // The best time (ms, rank 0's clock) of summing `bytes` across the ranks.
  auto best_ms = [&](size_t bytes) {
    const int64_t n = static_cast<int64_t>(std::max<size_t>(1, bytes / sizeof(float)));
    buf.assign(static_cast<size_t>(n), 1.0f);
    double best = 1e300;
    const int reps = quick ? 5 : 20;
    for (int i = 0; i < reps; ++i) {
      comm.sum(buf.data(), 1);  // start together
      const auto t0 = std::chrono::steady_clock::now();
      comm.sum(buf.data(), n);
      best = std::min(
          best,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    double shared = comm.rank() == 0 ? best : 0;
    comm.sum(&shared, 1);
    return shared;
  };
  const size_t big = quick ? (size_t(16) << 20) : (size_t(64) << 20);
  const double small_ms = best_ms(8), big_ms = best_ms(big);
  LinkModel l;
  l.name = fmt::format("local, {} ranks (grux calibrate)", K);
  l.latency_us = small_ms * 1e3 / (2.0 * (K - 1));
  const double moved = 2.0 * (K - 1) / K * static_cast<double>(big);  // bytes per rank
  l.gbit_s = moved * 8 / (std::max(1e-6, big_ms - small_ms) * 1e-3) / 1e9;
  return l;
}

}  // namespace grux
