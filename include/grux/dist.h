// Many processes: the group a data-parallel training run or a distributed scan is split
// across. grux's distributed code is written against the abstract Communicator; an MPI one
// comes from MpiSession when grux was built with MPI. Part of libgrux_tools: an embedder of
// the engine alone never links MPI.
//
// Every collective here is called by every rank of the group, in the same order; the results
// are the same bits on every rank, and the same from run to run (sums are added in rank
// order, never in whatever order the network delivers them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grux/cost.h"
#include "grux/cost_profile.h"
#include "grux/error.h"
#include "grux/export.h"
#include "grux/scan.h"
#include "grux/tensor.h"

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
// Throws a CollectiveError on every rank when some rank's `value` differs from rank 0's ("rank R
// has a different WHAT than rank 0: VALUE_R vs VALUE_0", values cut to 80 characters).
void agree_same(Communicator& comm, const std::string& what, const std::string& value);

// ---- Distributed scans -----------------------------------------------------------------
// A sequence split along `dim` across the ranks in rank order: rank r holds the r-th
// contiguous chunk (the chunks may differ in length, or be empty; their other dimensions and
// dtypes must agree, checked). Each call returns this rank's part of the scan of the whole
// sequence, equal to the one-process scan within the scans' tolerances (the order of the
// combines differs). Every rank scans its chunk, the ranks exchange their chunks' totals (one
// slice each), and each combines the totals before it in rank order (after it, with reverse)
// into its chunk's scan. Collective: every rank calls with the same op, dim and options.
Tensor dist_prefix_scan(Communicator& comm, const Tensor& chunk, int64_t dim, ScanOp op,
                        const ScanOptions& opt = {});
// With a callable combine (associative; exclusive needs opt.identity, as prefix_scan).
Tensor dist_prefix_scan(Communicator& comm, const Tensor& chunk, int64_t dim, const ScanFn& op,
                        const ScanOptions& opt = {});
// h_t = a_t h_{t-1} + b_t over the whole sequence (affine_scan's forms: diagonal or matrix,
// linear or log space, forward or reverse). h0 is the state before the sequence's start: read
// on the rank that holds the start (rank 0; the last rank with reverse), ignored elsewhere.
// The ranks exchange their chunks' maps (the product of a, and the state from zero).
Tensor dist_affine_scan(Communicator& comm, const Tensor& a, const Tensor& b, int64_t dim,
                        const Tensor& h0 = {}, const AffineScanOptions& opt = {});

// Writes the parts of one array that the ranks hold, split along `dim` in rank order (each
// rank's `part`; the parts agree on the other dimensions and the dtype), as one .npy at
// `path`, atomically: rank 0 creates a temporary file beside it, every rank writes its part
// there, and rank 0 renames it into place once all have. The folder must be one every rank
// sees (one host, or a file system the hosts share). Collective.
void dist_write_npy(Communicator& comm, const std::string& path, const Tensor& part, int64_t dim);

// The link between the ranks as Communicator::sum sees it: sums of 8 bytes to 64 MiB timed
// (the best of several), latency from the smallest (2 (K - 1) messages), bandwidth from the
// largest, for the cost model (LinkModel, grux cost --ranks). Collective; every rank gets
// rank 0's figures. `quick`: fewer repetitions.
LinkModel measure_link(Communicator& comm, bool quick);

// How many processes the MPI launcher (mpirun, mpiexec, srun) started for this job, read
// from its environment; 0 when this process was not started by one.
int launched_ranks();
// How many of them run on this host (0 when not started by a launcher).
int launched_local_ranks();
// Whether this grux was built with MPI, and which library ("Open MPI v4.1.4, ..."; "" without).
bool mpi_available();
std::string mpi_library();

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

}  // namespace GRUX_API
