// Machine profiles for the cost model's roofline: the rates `grux calibrate` measures per
// thread count, the link between ranks, where profiles are kept, the preset for an
// uncalibrated machine, and overrides from the command line.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// A network link between ranks as the collectives see it: a fixed cost per message and the
// bandwidth of one rank's port (each direction).
struct LinkModel {
  std::string name;       // "10 Gbit/s", "local (grux calibrate)", ...
  double latency_us = 0;  // per message
  double gbit_s = 0;      // per rank and direction
};

// Rates measured on one machine at one thread count.
struct ThreadProfile {
  double sgemm_gflops = 0, dgemm_gflops = 0;  // best large square GEMM (BLAS or grux's own)
  // grux's bf16 and int8 packed GEMMs (cpu/gemm_lowp.h) on a large square product, in GFLOP/s
  // of the same 2 M N K; 0 (profiles from before them) predicts those phases at sgemm's rate.
  double bf16_gflops = 0, int8_gflops = 0;
  double blas_sgemm_gflops = 0, blas_dgemm_gflops = 0;
  double memcpy_gbps = 0;  // large copy: (bytes read + bytes written) per second
  // Read bandwidth (GB/s, all threads together) with each thread re-reading its own buffer
  // of the given size: the rate of the cache level (or memory) that holds such a buffer.
  std::vector<std::pair<double, double>> read_gbps;  // (bytes per thread, GB/s), by size
  // The rate at which the GRU's recurrence at batch 1 streams W_hh when each thread holds the
  // given size of it (GB/s of all threads, by size; whole steps, fixed costs included): grux's
  // kernels read weights in context more slowly than a plain read loop does. Weight passes
  // are predicted at this rate (at read_gbps when it is empty), as compute is predicted at
  // grux's own GEMM rate; the per-step term then only adds what a streaming-API call costs
  // beyond a step (stream_step_us - step_us), since whole steps are already in the rate.
  std::vector<std::pair<double, double>> stream_gbps;
  // Fixed cost of one sequential step of a GRU (microseconds): a tiny problem whose compute
  // and traffic are negligible, timed per step. `step_us` for whole-sequence runs,
  // `stream_step_us` for one frame through the streaming API.
  double step_us = 0, stream_step_us = 0;
  // The fraction of the GEMM peak that grux's GRU forward reaches in context (its gates,
  // weight packing and per-step barriers included), measured on a mid-size problem that is
  // none of the standard workloads (l1t50n48i192h384). Phases marked `gru_kernel` compute at
  // this fraction of the peak, as weight passes stream at `stream_gbps`; 0 (older profiles,
  // the preset) computes them at the peak.
  double gru_gemm_efficiency = 0;
  // The same in bf16 and int8: the fraction of bf16_gflops / int8_gflops that the GRU forward
  // reaches in that precision on the same problem (its conversions of the input rows
  // included). 0 (older profiles): gru_gemm_efficiency stands for them.
  double bf16_gru_efficiency = 0, int8_gru_efficiency = 0;
};

struct MachineProfile {
  std::string source;   // the file it was read from, or "preset"
  std::string machine;  // CPU model name
  std::string created;  // ISO date of the calibration
  std::map<int, ThreadProfile> threads;
  // The link between ranks that `mpirun -np K grux calibrate` measured (gbit_s 0: none).
  LinkModel link;

  // The rates at `threads`: the measured entry, or interpolated linearly in the thread count
  // between the nearest measured ones (clamped at the ends). Throws if there is none.
  ThreadProfile at(int threads) const;
  std::string to_json() const;
  // Throws grux::Error naming `what` and the problem.
  static MachineProfile from_json(const std::string& text, const std::string& what);
  // A conservative stand-in for an uncalibrated machine (documented in docs/cost_model.md).
  static MachineProfile preset(int max_threads);
};

// Where profiles live: $GRUX_PROFILE if set, else $XDG_CONFIG_HOME/grux/profile.json, else
// $HOME/.config/grux/profile.json.
std::string default_profile_path();
// Reads `path` ("" means default_profile_path()); when the default file does not exist,
// returns the preset (source "preset"). A given path that does not exist is an error.
MachineProfile load_profile(const std::string& path);

// Overrides given on the command line (0 = keep the profile's value).
struct ProfileOverrides {
  double peak_gflops = 0;  // GEMM peak for the problem's dtype
  double mem_gbps = 0;     // memory bandwidth (copy rate and the largest buffers)
  double cache_gbps = 0;   // a flat cache-resident read bandwidth for every buffer size
  double step_us = 0;      // per-step overhead (both kinds)
};
void apply_overrides(MachineProfile& profile, const ProfileOverrides& o, DType dtype);

// Read bandwidth (GB/s) for buffers of `bytes_per_thread` with `threads` threads:
// interpolated in log(size) between measured sizes, clamped at the ends; bandwidth_at does
// the same on any (bytes, GB/s) curve, such as ThreadProfile::stream_gbps.
double read_bandwidth_at(const ThreadProfile& t, double bytes_per_thread);
double bandwidth_at(const std::vector<std::pair<double, double>>& curve, double bytes_per_thread);

}  // namespace GRUX_API
