// Measurements of this machine (grux calibrate, grux bench): GEMM rates, bandwidths, per-step
// costs, and the calibration that writes a MachineProfile for the cost model (grux/cost.h).
// Part of grux::tools (libgrux_tools), not of the engine. OpenBLAS, where the build found it,
// is timed here as a peer; no operator uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "grux/cost.h"
#include "grux/cost_profile.h"
#include "grux/export.h"

namespace grux GRUX_API {

// ---- Measurements (grux calibrate, grux bench) ----------------------------------------------

// Large square GEMM rates (GFLOP/s) at the current thread count: the BLAS (sgemm / dgemm; 0 in
// a build without OpenBLAS) and grux's packed GEMM (what the GRU uses); n x n x n, the best of
// `reps` runs.
struct GemmRates {
  int64_t n = 0;
  double blas = 0, grux = 0;
  double best() const { return blas > grux ? blas : grux; }
};
// n = 0: the side peak_side chooses from a probe of grux's GEMM at side 192 (what `grux bench
// gru` measures its peak with).
GemmRates measure_gemm_rates(DType dtype, int reps, int64_t n = 1536);
// GFLOP/s of grux's packed GEMM with B in bf16 or int8 (the low-precision GRU's products,
// cpu/gemm_lowp.h) at the current thread count: n x n x n, the best of `reps` runs; n = 0 as
// above, with `n_used` (if given) set to the side measured.
double measure_lowp_gemm_rate(Precision precision, int reps, int64_t n = 1536,
                              int64_t* n_used = nullptr);
// The side of a peak's square products: 1536, halved while one product would take more than
// half a second at `probe_gflops` (the rate at side 192), and at least 192. Slow code (the
// scalar target, the portable low-precision kernels, a sanitized build: 1-5 GFLOP/s) would
// otherwise spend tens of seconds on the reference of a benchmark that takes one.
int64_t peak_side(double probe_gflops);
// GB/s of `threads` threads together, each re-reading its own buffer of `bytes_per_thread`
// (at least 16 KiB; first touched by its reader): the rate of the cache level holding such a
// buffer. `alternate`: each pass in the other direction (the real-time kernel's order: what
// was read last is read first).
double measure_read_bandwidth(int64_t bytes_per_thread, int threads, double bytes_to_read = 4e8,
                              bool alternate = false);
// Round trip of one cache line between two threads of the team that a `threads`-thread GRU
// stream would use (the calling thread's, src/core/thread_team.h), in ns; 0 when threads < 2.
// A time step shared by threads pays about one for its barrier and one for the state it hands
// over, so the batch-1 rows at 2 threads move with it (it depends on where the host places
// the cores).
double measure_handoff_ns(int threads);
// GB/s at which the GRU's batch-1 recurrence streams its recurrent weights when each of
// `threads` threads holds about `bytes_per_thread` of them: W_hh bytes per step time (the
// step's barrier and gate pass included).
double measure_recurrence_stream(int64_t bytes_per_thread, int threads, double bytes_to_read = 2e8);
// GEMM GFLOP/s that grux's GRU forward reaches in context (gates, packing and barriers
// included) on l1t50n48i192h384 (l1t20n16i64h128 when `quick`) with the current threads;
// with bf16 or int8, GruInference's forward in that precision (weights converted beforehand).
double measure_gru_gflops(bool quick = false, Precision precision = Precision::f32);
// GB/s (bytes read + bytes written) of `threads` threads copying `bytes` with memcpy.
double measure_memcpy_bandwidth(int64_t bytes, int threads, int reps = 3);
// Microseconds per step that a tiny GRU (N = 1, I = 16, H = 16 per thread) takes beyond its
// roofline time with `threads` threads, in whole-sequence runs and through the streaming
// API. Uses `rates` (already measured at `threads`) for that roofline.
std::pair<double, double> measure_step_overhead(const ThreadProfile& rates, int threads,
                                                int steps = 2000);

// What a real-time stream's frame (batch 1, f32, one thread) cannot beat on this machine:
// the longest of its dependency chain, its arithmetic and its weights' reads. Per layer and
// frame, the chain runs from the state h to h': a product (1 FMA), a sum of H terms as a tree
// (ceil(log2 H) adds), the input projection's add, sigmoid(r), r (W_hn h + b_hn) + gx_n
// (1 FMA), tanh, and (1 - z) n + z h (2 operations); the layers of a stack overlap (layer
// l + 1 works on frame t while layer l works on frame t + 1), so the stack's chain is one
// layer's. The work is the products' FMAs at `peak_gflops` (a measured single-thread GEMM
// rate). A step also reads every layer's weights once: when they outgrow the L1 cache, that
// read, at the rate measured here for as many bytes, can take longer than both. Latencies are
// measured here with the kernel's own instructions.
struct StreamBound {
  double fma_ns = 0, sigmoid_ns = 0, tanh_ns = 0;  // measured latencies
  double chain_ns = 0, work_ns = 0;                // per frame
  // Per frame: the step's weights (W_ih and W_hh of every layer) read once at the rate this
  // machine reads that many bytes, passes alternating forward and backward as the kernel's do.
  double weights_ns = 0;
  double weights_gbps = 0;
  double ns() const { return std::max({chain_ns, work_ns, weights_ns}); }
  const char* side() const {
    return ns() == chain_ns ? "chain" : ns() == work_ns ? "work" : "weights";
  }
};
StreamBound measure_stream_bound(const GruProblem& p, double peak_gflops);
// The same for an LSTM stream (unidirectional, batch 1). A layer's chain from h to h': the
// product and its tree as the GRU's, the input projection's add, the gates' sigmoid and tanh
// side by side (the longer of the two), c' = f c + i g (2 operations), tanh(c'), o tanh(c')
// (1), and with a projection its product and tree over H. The weights: 4H (I_l + P) floats a
// layer, and P H more with a projection (P: its size, or H).
StreamBound measure_stream_bound(const LstmProblem& p, double peak_gflops);

// Measures this machine at each thread count (grux calibrate); sets OpenMP's and the BLAS's
// thread counts while measuring and restores them after. `quick` shortens every measurement
// (for tests; noisier numbers). Every measurement is repeated over `rounds` rounds and keeps
// its best: on a shared machine other work only ever makes a rate look lower.
MachineProfile calibrate(const std::vector<int>& thread_counts, bool quick = false, int rounds = 1);

}  // namespace GRUX_API
