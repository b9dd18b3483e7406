// Sweeps of the cost model over a grid of problems, and their CSV, JSON and HTML renderings
// (grux cost --sweep). Part of libgrux_tools (CMake target grux::tools).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grux/cost.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/export.h"

namespace grux GRUX_API {

// ---- Sweeps ------------------------------------------------------------------------------

// One varied parameter: a descriptor letter and its values. Range syntax:
//   "n=1..256:x2" (geometric, integer factor >= 2), "h=64..512:+64" (arithmetic),
//   "t=10..13" (step 1), "n=1,3,7" (a list).
struct SweepAxis {
  std::string letter;
  std::vector<int64_t> values;
  // Throws grux::Error naming the text and what was expected.
  static SweepAxis parse(const std::string& text);
};

struct SweepSpec {
  std::string op;
  std::string fixed;  // descriptor the axes modify; "" means the operator's example
  std::vector<SweepAxis> axes;
  CostOptions options;
  CountMode mode = CountMode::seed;
  bool train = false;
};

// A metric of a sweep point: key, human label and unit.
struct SweepMetric {
  std::string key, label, unit;
};

struct SweepResult {
  SweepSpec spec;
  std::string fixed;    // resolved fixed descriptor
  std::string variant;  // the options, as CostReport::variant says them
  std::vector<SweepMetric> metrics;
  std::vector<std::vector<int64_t>> points;                  // per point: the axes' values
  std::vector<std::string> descriptors;                      // per point
  std::vector<std::vector<double>> values;                   // per point: one value per metric
  std::vector<std::string> inference_bound, training_bound;  // per point: compute or traffic
  // Per point, for the roofline chart: (GEMM FLOP per byte moved with the weights cached,
  // GEMM GFLOP/s at the predicted time), inference and training.
  std::vector<std::pair<double, double>> roof_inference, roof_training;
  MachineProfile profile;
  int threads = 1;
};

// Computes every point of the grid (at most 20000 points, up to 3 axes). Letters must be
// letters of the operator's descriptor; the resulting descriptors are parsed by the
// operator's own parser, so an invalid combination is an error naming the descriptor.
SweepResult run_sweep(const SweepSpec& spec, const MachineProfile& profile, int threads);

// Renderers (the CLI writes the strings atomically).
std::string sweep_csv(const SweepResult& r);
std::string sweep_json(const SweepResult& r);
// Measured points for the roofline chart: JSON lines printed by `grux bench gru|conv2d`.
struct MeasuredPoint {
  std::string label;      // "l1d1t100n64i256h512 inference 2t"
  double intensity = 0;   // FLOP per byte (cached model)
  double gflops = 0;      // measured
  bool training = false;  // forward + backward (drawn with the sweep's training phase)
};
std::vector<MeasuredPoint> measured_points(const std::string& bench_jsonl, const std::string& what);
// The self-contained HTML report; `plotly_js` is the plotting library's source, inlined.
std::string sweep_html(const SweepResult& r, const std::vector<MeasuredPoint>& measured,
                       const std::string& plotly_js);

}  // namespace GRUX_API
