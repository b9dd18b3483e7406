// `grux calibrate`: measures this machine (GEMM peaks, memcpy and cache-resident bandwidth,
// the per-step cost of a GRU) and saves the profile the cost model's predictions read.
#include <fmt/format.h>
#include <omp.h>

#include <filesystem>
#include <memory>
#include <set>
#include <sstream>

#include "commands.h"
#include "grux/calibrate.h"
#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/io.h"

namespace grux::cli {

namespace {

struct CalibrateArgs {
  std::string out, threads;
  bool quick = false;
  int rounds = 3;
};

std::vector<int> parse_thread_list(const std::string& text) {
  const int all = omp_get_num_procs();
  if (text.empty()) return all == 1 ? std::vector<int>{1} : std::vector<int>{1, all};
  std::set<int> ks;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long k = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || k < 1 || k > 4096)
      throw Error(fmt::format("--threads '{}': '{}' is not a thread count (expected e.g. 1,2)",
                              text, item));
    ks.insert(static_cast<int>(k));
  }
  return {ks.begin(), ks.end()};
}

std::string size_label(double b) {
  if (b >= 1e6) return fmt::format("{:g} MB", b / 1e6);
  return fmt::format("{:g} kB", b / 1e3);
}

// Under mpirun: the link between the ranks, added to the machine's profile (which a plain
// `grux calibrate` wrote first); rank 0 reads and writes it.
void calibrate_link(const CalibrateArgs& a, Communicator& comm) {
  const std::string out = a.out.empty() ? default_profile_path() : a.out;
  std::string error;
  MachineProfile prof;
  if (comm.rank() == 0) {
    try {
      prof = MachineProfile::from_json(read_file(out), out);
    } catch (const Error& e) {
      error = fmt::format(
          "{} (calibrate this machine first with grux calibrate; under mpirun it "
          "adds the link between the ranks to that profile)",
          e.what());
    }
  }
  agree_no_error(comm, error);
  if (comm.rank() == 0)
    fmt::print(stderr, "grux calibrate: the link between {} ranks ({})\n", comm.size(),
               a.quick ? "quick" : "full");
  prof.link = measure_link(comm, a.quick);
  if (comm.rank() == 0) {
    try {
      write_file_atomic(out, prof.to_json());
      fmt::print("link between {} ranks: {:.2f} us per message, {:.1f} Gbit/s per rank\nwrote {}\n",
                 comm.size(), prof.link.latency_us, prof.link.gbit_s, out);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_no_error(comm, error);
}

void run_calibrate(const CalibrateArgs& a) {
  const std::vector<int> ks = parse_thread_list(a.threads);
  const std::string out = a.out.empty() ? default_profile_path() : a.out;
  const int rounds = a.quick ? 1 : a.rounds;
  fmt::print(stderr, "grux calibrate: {} thread count{} x {} round{} ({}); about {} s\n", ks.size(),
             ks.size() == 1 ? "" : "s", rounds, rounds == 1 ? "" : "s", a.quick ? "quick" : "full",
             (a.quick ? 2 : 6) * ks.size() * rounds);
  const MachineProfile prof = calibrate(ks, a.quick, rounds);
  fmt::print("machine: {}\n", prof.machine);
  for (const auto& [k, t] : prof.threads) {
    fmt::print(
        "{} thread{}: sgemm {:.1f} GFLOP/s (BLAS {:.1f}), dgemm {:.1f} GFLOP/s (BLAS {:.1f}), "
        "bf16 {:.1f} and int8 {:.1f} GFLOP/s ({}, {}), memcpy {:.1f} GB/s, GRU step {:.2f} us "
        "(streaming {:.2f} us), GRU forward at {:.0f}% of the GEMM peak (bf16 {:.0f}% and int8 "
        "{:.0f}% of theirs)\n",
        k, k == 1 ? "" : "s", t.sgemm_gflops, t.blas_sgemm_gflops, t.dgemm_gflops,
        t.blas_dgemm_gflops, t.bf16_gflops, t.int8_gflops, precision_kernel(Precision::bf16),
        precision_kernel(Precision::int8), t.memcpy_gbps, t.step_us, t.stream_step_us,
        100 * t.gru_gemm_efficiency, 100 * t.bf16_gru_efficiency, 100 * t.int8_gru_efficiency);
    std::string curve;
    for (const auto& [bytes, gbps] : t.read_gbps)
      curve += fmt::format("{}{} {:.0f}", curve.empty() ? "" : ", ", size_label(bytes), gbps);
    fmt::print("  read GB/s by buffer per thread: {}\n", curve);
    curve.clear();
    for (const auto& [bytes, gbps] : t.stream_gbps)
      curve += fmt::format("{}{} {:.0f}", curve.empty() ? "" : ", ", size_label(bytes), gbps);
    fmt::print("  W_hh streamed by the batch-1 recurrence, GB/s by share per thread: {}\n", curve);
  }
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      throw Error(
          fmt::format("--out {}: cannot create folder {}: {}", out, parent.string(), ec.message()));
  }
  write_file_atomic(out, prof.to_json());
  fmt::print("wrote {}\n", out);
}

}  // namespace

Action add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* c = app.add_subcommand(
      "calibrate",
      "Measure this machine for the cost model's predictions: sgemm and dgemm peaks (the BLAS "
      "and grux's own GEMM), memcpy bandwidth, read bandwidth by buffer size (which cache level "
      "holds what) and the per-step cost of a GRU; saved as a JSON profile that grux cost and "
      "grux bench --predict read. Default location: $GRUX_PROFILE, else "
      "$XDG_CONFIG_HOME/grux/profile.json, else ~/.config/grux/profile.json. Under mpirun "
      "(mpirun -np 2 grux calibrate), measures the link between the ranks instead and adds it "
      "to that profile, for grux cost --ranks.");
  c->add_option("--out", a->out, "where to write the profile (default: the location above)");
  c->add_option("--threads", a->threads,
                "thread counts to measure, comma-separated (default: 1 and all cores)");
  c->add_option("--rounds", a->rounds,
                "repeat every measurement this many times and keep the best (a shared machine "
                "only ever makes a rate look lower)")
      ->capture_default_str();
  c->add_flag("--quick", a->quick, "short measurements in one round (seconds; noisier)");
  return [a] {
    run_launched("grux calibrate", [&](Communicator& comm) {
      if (comm.size() == 1)
        run_calibrate(*a);
      else
        calibrate_link(*a, comm);
    });
  };
}

}  // namespace grux::cli
