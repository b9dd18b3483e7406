// `grux demo`: the main job for now. Runs the example GRU shipped in data/example on its
// example input, checks the result against PyTorch's, and prints a summary and the time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "grux/gru.h"
#include "grux/io.h"

namespace grux::cli {

namespace {

struct DemoArgs {
  std::string data_dir;
  int reps = 20;
};

void run_demo(const DemoArgs& a) {
  if (a.reps < 1) throw Error(fmt::format("--reps is {}, expected >= 1", a.reps));
  const std::string dir = a.data_dir + "/example";
  const SafeTensors st = read_safetensors(dir + "/gru.safetensors");
  Gru gru = Gru::from_state_dict(st.tensors);
  const Tensor x = read_npy(dir + "/input.npy");
  const Tensor expected = read_npy(dir + "/expected_output.npy");
  const GruConfig& c = gru.config();
  fmt::print(
      "grux demo: example GRU ({} layer{}, input {}, hidden {}, {}, {}) on input {} (T, N, I)\n",
      c.num_layers, c.num_layers > 1 ? "s" : "", c.input_size, c.hidden_size,
      c.bidirectional ? "bidirectional" : "unidirectional", dtype_name(gru.dtype()),
      shape_str(x.shape()));

  GruOutput y = gru.forward(x);  // warm-up, and the result we report
  std::vector<double> ms;
  for (int i = 0; i < a.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    GruOutput r = gru.forward(x);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());

  double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
  const int64_t n = y.output.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = y.output.at_flat(i);
    sum += v, sq += v * v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const double mean = sum / n, sd = std::sqrt(std::max(0.0, sq / n - mean * mean));
  fmt::print("output {}: mean {:.5f}, std {:.5f}, min {:.5f}, max {:.5f}; h_n {}\n",
             shape_str(y.output.shape()), mean, sd, lo, hi, shape_str(y.h_n.shape()));
  const double diff = max_abs_diff(y.output, expected);
  fmt::print("matches PyTorch's output for this input: max |difference| = {:.2e} ({})\n", diff,
             diff <= 1e-5 ? "ok" : "MISMATCH");
  // GEMM flops of the forward: 2 * N * T * 3H * (in + H) per layer and direction.
  const int64_t T = x.size(0), N = x.size(1), H = c.hidden_size;
  double flops = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    flops += c.directions() * 2.0 * N * T * 3 * H * (c.layer_input_size(l) + H);
  const double med = ms[ms.size() / 2];
  fmt::print("time: median {:.3f} ms over {} runs (min {:.3f} ms), {:.2f} GFLOP/s\n", med, a.reps,
             ms.front(), flops / (med * 1e6));
  if (diff > 1e-5) throw Error("demo output does not match PyTorch's expected output");
}

}  // namespace

Action add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  a->data_dir = default_data_dir();
  CLI::App* c = app.add_subcommand(
      "demo",
      "Run the example GRU (data/example/gru.safetensors) on its example input, compare with "
      "PyTorch's output stored beside it, and print a summary and the time taken.");
  c->add_option(
       "--data", a->data_dir,
       "data folder (default: $GRUX_DATA_DIR, else PREFIX/share/grux for an installed grux, "
       "else the source tree's data/)")
      ->capture_default_str();
  c->add_option("--reps", a->reps, "timed runs (the median is printed)")->capture_default_str();
  return [a] { run_demo(*a); };
}

}  // namespace grux::cli
