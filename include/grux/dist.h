// Many processes: the group a data-parallel training run or a distributed scan is split
// across. grux's distributed code is written against the abstract Communicator; an MPI one
// comes from MpiSession when grux was built with MPI (README, section Many machines). Part of
// libgrux_tools: an embedder of the engine alone never links MPI.
//
// Every collective here is called by every rank of the group, in the same order; the results
// are the same bits on every rank, and the same from run to run (sums are added in rank
// order, never in whatever order the network delivers them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grux/error.h"
#include "grux/export.h"

namespace grux GRUX_API {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  // Every rank's `mine` (any length, may differ by rank), in rank order, on every rank.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  // Element-wise sums over the ranks of `n` values each rank holds (the same n everywhere),
  // added in rank order: ((v_0 + v_1) + v_2) + ...; the result replaces `data` on every rank.
  virtual void sum(float* data, int64_t n) = 0;
  virtual void sum(double* data, int64_t n) = 0;
};

// The group of one process: sums leave the values as they are.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather(const std::string& mine) override { return {mine}; }
  void sum(float*, int64_t) override {}
  void sum(double*, int64_t) override {}
};

// An error every rank of a group throws alike (each knows the others throw it too): the
// processes can end in order, each with one line, instead of one aborting the job.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// Throws the same CollectiveError on every rank when any rank's `error` is not empty: the
// error, when every rank has it, else "rank R: error" of the lowest rank with one; returns on
// every rank otherwise. How one rank's bad input
// (a file it cannot read) stops all of them with one line each, none left waiting.
void agree_no_error(Communicator& comm, const std::string& error);
// Throws a CollectiveError on every rank when some rank's `value` differs from rank 0's ("rank R has a
// different WHAT than rank 0: VALUE_R vs VALUE_0", values cut to 80 characters).
void agree_same(Communicator& comm, const std::string& what, const std::string& value);

// How many processes the MPI launcher (mpirun, mpiexec, srun) started for this job, read
// from its environment; 0 when this process was not started by one.
int launched_ranks();
// How many of them run on this host (0 when not started by a launcher).
int launched_local_ranks();
// Whether this grux was built with MPI.
bool mpi_available();

// MPI for this process, from construction to destruction (MPI_Init_thread, funneled: only
// the thread that made the session calls MPI; MPI_Finalize). At most one per process. Throws
// grux::Error when grux was built without MPI.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  // MPI_COMM_WORLD.
  Communicator& world() { return *world_; }
  // Ends every process of the job with `code` (MPI_Abort): for an error only this rank saw,
  // which would otherwise leave the others waiting for it forever.
  [[noreturn]] void abort(int code);

 private:
  std::unique_ptr<Communicator> world_;
};

}  // namespace grux
