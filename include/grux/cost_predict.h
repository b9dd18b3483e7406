// The roofline prediction: the time of a report's phases on a machine profile, and of one
// problem split across ranks with the collectives it adds on a network link.
#pragma once

#include <string>
#include <vector>

#include "grux/cost.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/export.h"

namespace grux GRUX_API {

struct Prediction {
  int threads = 1;
  double compute_ms = 0;   // GEMM flops at the GEMM peak, all phases
  double traffic_ms = 0;   // weight passes at the bandwidth of their cache level + streams
  double roofline_ms = 0;  // the sum over phases of max(compute, traffic) (one phase: the max)
  double overhead_ms = 0;  // sequential steps x the profile's per-step cost
  double ms = 0;           // roofline_ms + overhead_ms: the predicted time
  std::string bound;       // "compute" or "traffic": the side that limits most of roofline_ms
};
// Predicts the time of `phases` with `threads` threads; `stream` selects the per-step cost of
// the streaming API.
Prediction predict(const std::vector<Phase>& phases, DType dtype, const MachineProfile& profile,
                   int threads, bool stream = false);

// The two networks of the scaling tables: 10 Gbit/s Ethernet (TCP, 25 us per message) and
// 100 Gbit/s (RDMA, 3 us per message); docs/cost_model.md, "Many processes".
const std::vector<LinkModel>& network_presets();
// Summing `bytes` across K ranks as grux does (Communicator::sum: every rank sends and
// receives 2 (K - 1) / K of the bytes, in 2 (K - 1) messages; a ring allreduce moves the same).
double allreduce_ms(double bytes, int ranks, const LinkModel& link);
// Every rank's `bytes` on every rank (all_gather: K - 1 messages in, K - 1 out).
double allgather_ms(double bytes, int ranks, const LinkModel& link);

// One problem on K ranks: a training step (data parallelism: each rank runs 1/K of the batch,
// then the gradients are summed) or a forward; for the scans, each rank scans 1/K of the
// sequence, the ranks exchange their chunks' totals, and each rescans its chunk with them.
struct RankPrediction {
  int ranks = 1;
  std::string per_rank;   // the problem each rank runs ("l1d1t64n8i64h512")
  double compute_ms = 0;  // that problem at the profile's rates, with the rank's threads
  double comm_ms = 0;     // the collectives on `link`
  double ms = 0;          // compute_ms + comm_ms
  double speedup = 1;     // over the same problem on one rank (of the machine's threads)
};
// Which operators split across ranks, and along which letter: the batch (n) of gru, mingru
// and charlm, the time (t) of the scans. K must divide it; throws otherwise, and for other
// operators. `threads`: each rank's. `per_machine`: ranks sharing one machine (its cores and
// memory bandwidth: their work is priced as all of theirs on that machine's threads
// together); 1 for one rank per machine.
RankPrediction predict_ranks(const std::string& op, const std::string& descriptor,
                             const CostOptions& options, bool train, int ranks,
                             const LinkModel& link, const MachineProfile& profile, int threads,
                             int per_machine = 1);

}  // namespace GRUX_API
