// Many processes in the cost model: the language model's training step as one problem, the
// collectives' time on a link (latency per message, bandwidth per rank), and a problem split
// across K ranks as grux splits it (docs/cost_model.md, "Many processes").
#include <fmt/format.h>

#include "core/descriptor.h"
#include "cost_util.h"
#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/error.h"

namespace grux {

namespace {

OpCount plus(const OpCount& a, const OpCount& b) {
  OpCount r;
  r.matmul = a.matmul + b.matmul;
  r.bias = a.bias + b.bias;
  r.elementwise = a.elementwise + b.elementwise;
  r.activation = a.activation + b.activation;
  return r;
}

Traffic plus(const Traffic& a, const Traffic& b) {
  return {a.read + b.read, a.written + b.written};
}

// The letter-number tokens of a descriptor, in order.
std::vector<detail::DescriptorToken> tokens(const std::string& d) {
  auto t = detail::descriptor_tokens(d);
  if (!t) throw Error(fmt::format("'{}' is not a descriptor of letters and numbers", d));
  return *t;
}

}  // namespace

CostReport charlm_cost(const std::string& d, DType dtype) {
  const detail::Descriptor p = detail::Descriptor::parse(
      d, {{'l', false, false, 6}, {'t'}, {'n'}, {'e'}, {'h'}, {'v'}}, "charlm descriptor",
      "l{L}t{T}n{N}e{E}h{H}v{V}, e.g. l1t64n16e64h512v65");
  const int64_t L = p.get('l'), T = p.get('t'), N = p.get('n'), E = p.get('e'), H = p.get('h'),
                V = p.get('v');
  if (L < 1 || T < 1 || N < 1 || E < 1 || H < 1 || V < 1)
    throw Error(fmt::format("charlm descriptor '{}': sizes must be >= 1", d));
  GruProblem g = GruProblem::parse(fmt::format("l{}d1t{}n{}i{}h{}", L, T, N, E, H));
  g.dtype = dtype;
  LinearProblem fc = LinearProblem::parse(fmt::format("b{}i{}o{}", T * N, H, V));
  fc.dtype = dtype;
  const CostReport a = gru_cost(g), b = linear_cost(fc);
  CostReport r;
  r.op = "charlm";
  r.problem = d;
  r.variant = "embedding, GRU (bias, linear_before_reset), linear, Adam";
  r.dtype = dtype;
  for (int k = 0; k < kCountModes; ++k) {
    r.forward[k] = plus(a.forward[k], b.forward[k]);
    r.backward[k] = plus(a.backward[k], b.backward[k]);
  }
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const std::string what = "charlm " + d;
  const cost_detail::wide emb = static_cast<cost_detail::wide>(V) * E;
  r.memory.parameters = cost_detail::narrow(a.memory.parameters + b.memory.parameters + emb, what);
  r.memory.parameter_bytes = r.memory.parameters * es;
  r.memory.gradient_bytes = r.memory.parameter_bytes;
  r.memory.inference_bytes = a.memory.inference_bytes + b.memory.inference_bytes;
  r.memory.training_bytes = a.memory.training_bytes + b.memory.training_bytes;
  r.inference_traffic = {plus(a.inference_traffic.reread, b.inference_traffic.reread),
                         plus(a.inference_traffic.cached, b.inference_traffic.cached)};
  r.training_traffic = {plus(a.training_traffic.reread, b.training_traffic.reread),
                        plus(a.training_traffic.cached, b.training_traffic.cached)};
  r.inference_phases = a.inference_phases;
  r.inference_phases.insert(r.inference_phases.end(), b.inference_phases.begin(),
                            b.inference_phases.end());
  r.training_phases = a.training_phases;
  for (Phase p : b.training_phases) {
    p.name = "linear " + p.name;
    r.training_phases.push_back(p);
  }
  // Adam: value, gradient and both moments read, value and moments written.
  Phase opt;
  opt.name = "optimizer";
  opt.stream_bytes = 7.0 * static_cast<double>(r.memory.parameter_bytes);
  r.training_phases.push_back(opt);
  return r;
}

const std::vector<LinkModel>& network_presets() {
  static const std::vector<LinkModel> presets = {{"10 Gbit/s Ethernet", 25.0, 10.0},
                                                 {"100 Gbit/s RDMA", 3.0, 100.0}};
  return presets;
}

double allreduce_ms(double bytes, int ranks, const LinkModel& link) {
  if (ranks <= 1) return 0;
  GRUX_CHECK(link.gbit_s > 0, "the link has no bandwidth (give --link-gbit-s)");
  const double K = ranks;
  return 2 * (K - 1) * link.latency_us * 1e-3 +
         2 * (K - 1) / K * bytes * 8 / (link.gbit_s * 1e9) * 1e3;
}

double allgather_ms(double bytes, int ranks, const LinkModel& link) {
  if (ranks <= 1) return 0;
  GRUX_CHECK(link.gbit_s > 0, "the link has no bandwidth (give --link-gbit-s)");
  const double K = ranks;
  return (K - 1) * link.latency_us * 1e-3 + (K - 1) * bytes * 8 / (link.gbit_s * 1e9) * 1e3;
}

RankPrediction predict_ranks(const std::string& op, const std::string& descriptor,
                             const CostOptions& options, bool train, int ranks,
                             const LinkModel& link, const MachineProfile& profile, int threads,
                             int per_machine) {
  if (per_machine < 1 || per_machine > ranks)
    throw Error(
        fmt::format("{} ranks per machine of {} (expected 1..{})", per_machine, ranks, ranks));
  if (ranks < 1 || ranks > 65536) throw Error(fmt::format("--ranks {} (expected 1..65536)", ranks));
  const bool scan = op.rfind("scan_", 0) == 0;
  if (!scan && op != "gru" && op != "mingru" && op != "charlm")
    throw Error(
        fmt::format("--ranks: {} does not run on several processes (gru, mingru, charlm "
                    "and the scans do)",
                    op));
  if (scan && train && ranks > 1)
    throw Error("--ranks with --train: the distributed scans have no backward");
  const char letter = scan ? 't' : 'n';
  // The problem each rank runs: the split letter divided by K.
  std::string part;
  bool found = false;
  for (const detail::DescriptorToken& t : tokens(descriptor)) {
    const char c = t.letter;
    const int64_t v = t.value;
    int64_t value = v;
    if (c == letter && !found) {
      found = true;
      if (v % ranks != 0)
        throw Error(
            fmt::format("--ranks {} does not divide {}{} of {} (each rank takes an equal "
                        "share)",
                        ranks, c, v, descriptor));
      value = v / ranks;
    }
    part += fmt::format("{}{}", c, value) + (t.has_second ? fmt::format("x{}", t.second) : "");
  }
  if (!found)
    throw Error(fmt::format("{} {}: no '{}' to split across ranks", op, descriptor, letter));
  const CostReport whole = cost_of(op, descriptor, options), mine = cost_of(op, part, options);
  auto time = [&](std::vector<Phase> phases) {
    return predict(phases, options.dtype, profile, threads).ms;
  };
  RankPrediction r;
  r.ranks = ranks;
  r.per_rank = part;
  // The baseline: one rank with the same threads, or with the machine's (shared machines).
  const double one = predict(train ? whole.training_phases : whole.inference_phases, options.dtype,
                             profile, threads * per_machine)
                         .ms;
  std::vector<Phase> phases = train ? mine.training_phases : mine.inference_phases;
  if (scan && ranks > 1) {
    const ScanProblem s = ScanProblem::parse(descriptor);
    const double es = static_cast<double>(dtype_size(options.dtype));
    double slice = 0;
    if (op == "scan_affine") {
      // Two passes over the chunk (its state from zero, then from the incoming state) and the
      // product of its a; the maps exchanged: a state and an A per chunk.
      const std::vector<Phase> again = phases;
      phases.insert(phases.end(), again.begin(), again.end());
      slice = s.d > 0 ? s.N * (s.d + s.d * s.d) * es : 2 * s.N * s.C * es;
    } else {
      // The chunk's total (one read of it) and the chunk copied behind the carried total.
      Phase extra;
      extra.name = "chunk total and copy";
      const double chunk = s.N * (s.T / ranks) * (s.d > 0 ? s.d * s.d : s.C) * es;
      extra.stream_bytes = 3 * chunk;
      phases.push_back(extra);
      slice = s.N * (s.d > 0 ? s.d * s.d : s.C) * es;
    }
    r.comm_ms = allgather_ms(slice, ranks, link);
  } else if (train && ranks > 1) {
    // The gradients (and the loss) summed; then a few control values (stop, clock).
    r.comm_ms = allreduce_ms(static_cast<double>(whole.memory.gradient_bytes) + 8, ranks, link) +
                allreduce_ms(24, ranks, link);
  }
  // Ranks on one machine run side by side on its threads: together, the work of all of them.
  if (per_machine > 1) {
    std::vector<Phase> together;
    for (int k = 0; k < per_machine; ++k)
      together.insert(together.end(), phases.begin(), phases.end());
    r.compute_ms = predict(together, options.dtype, profile, threads * per_machine).ms;
  } else {
    r.compute_ms = time(phases);
  }
  r.ms = r.compute_ms + r.comm_ms;
  r.speedup = r.ms > 0 ? one / r.ms : 1;
  return r;
}

}  // namespace grux
