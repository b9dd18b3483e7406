// `grux cost`: the analytic cost of one problem (counts, memory, traffic, roofline
// prediction) as a table, CSV, JSON or Markdown; `grux cost sweep` over a grid of problems.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "grux/cost.h"
#include "grux/io.h"
#include "grux/sweep.h"

namespace grux::cli {

namespace {

struct CostArgs {
  std::string op, descriptor, mode = "seed", dtype = "f32", format = "table", lengths,
      precision = "f32";
  bool train = false, no_bias = false, reset_before = false;
  // The roofline prediction.
  std::string profile;
  int threads = 0;
  ProfileOverrides overrides;
};

DType parse_cost_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "f64") return DType::f64;
  throw Error(fmt::format("--dtype {} (expected f32 or f64)", s));
}

std::vector<CountMode> parse_modes(const std::string& s) {
  if (s == "all") return {CountMode::seed, CountMode::gemm, CountMode::mac};
  try {
    return {parse_count_mode(s)};
  } catch (const Error&) {
    throw Error(fmt::format("--mode {} (expected seed, gemm, mac or all)", s));
  }
}

CostOptions options_of(const CostArgs& a) {
  CostOptions o;
  o.bias = !a.no_bias;
  o.form = a.reset_before ? GruForm::reset_before : GruForm::linear_before_reset;
  o.dtype = parse_cost_dtype(a.dtype);
  o.precision = parse_precision(a.precision);
  o.lengths = a.lengths;
  return o;
}

MachineProfile profile_of(const CostArgs& a, DType dtype) {
  MachineProfile p = load_profile(a.profile);
  apply_overrides(p, a.overrides, dtype);
  return p;
}

std::string profile_label(const CostArgs& a) {
  const MachineProfile p = profile_of(a, parse_cost_dtype(a.dtype));
  if (p.source.rfind("preset", 0) == 0)
    return fmt::format("the {} (no profile at {}; run grux calibrate)", p.source,
                       default_profile_path());
  return p.source;
}

Prediction predict_for(const CostReport& r, const CostArgs& a, DType dtype, bool train) {
  if (a.threads < 0) throw Error(fmt::format("--threads {} (expected >= 1)", a.threads));
  const int threads = a.threads == 0 ? omp_get_num_procs() : a.threads;
  return predict(train ? r.training_phases : r.inference_phases, dtype, profile_of(a, dtype),
                 threads, r.op == "gru_stream" && !train);
}

void run_cost(const CostArgs& a) {
  if (a.op.empty() || a.descriptor.empty())
    throw Error("grux cost: expected OP DESCRIPTOR (e.g. grux cost gru l1d1t100n64i256h512)");
  CostView view;
  view.modes = parse_modes(a.mode);
  view.train = a.train;
  const CostFormat format = parse_cost_format(a.format);
  const CostOptions options = options_of(a);
  if (options.precision == Precision::int8 && a.train)
    throw Error("--precision int8 is for inference; --train takes f32 or bf16");
  const CostReport r = cost_of(a.op, a.descriptor, options);
  const Prediction inference = predict_for(r, a, options.dtype, false);
  const Prediction training = predict_for(r, a, options.dtype, true);
  view.inference = &inference;
  view.training = &training;
  view.profile = profile_label(a);
  fmt::print("{}", format_cost(r, view, format));
}

void add_profile_options(CLI::App* c, std::string& profile, int& threads, ProfileOverrides& o) {
  c->add_option("--profile", profile,
                "machine profile for the prediction (default: grux calibrate's; the preset if "
                "there is none)");
  c->add_option("--threads", threads, "threads of the predicted run (default: all cores)");
  c->add_option("--peak-gflops", o.peak_gflops,
                "override the GEMM peak (GFLOP/s; also the rate of the GRU's GEMMs)");
  c->add_option("--mem-gbps", o.mem_gbps, "override the memory bandwidth (GB/s)");
  c->add_option("--cache-gbps", o.cache_gbps, "override the cache-resident read bandwidth (GB/s)");
  c->add_option("--step-us", o.step_us, "override the per-step cost of a GRU (microseconds)");
}

std::string op_list() {
  std::string s;
  for (const CostOp& op : cost_ops())
    s += fmt::format("\n  {:<14} {:<42} {}", op.name, op.syntax, op.what);
  return s;
}

struct SweepArgs {
  CostArgs base;  // operator, options, profile (descriptor unused)
  std::string fixed, format, out, bench, plotly;
  std::vector<std::string> vary;
};

// The plotting library the HTML report inlines: --plotly, else $GRUX_PLOTLY_JS, else the copy
// scripts/install-web-assets.sh puts in the source tree's web/node_modules.
std::string plotly_source(const std::string& given) {
  std::string path = given;
  if (path.empty()) {
    const char* env = std::getenv("GRUX_PLOTLY_JS");
    path = env && *env ? env : GRUX_PLOTLY_JS;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(
        fmt::format("--format html needs plotly.js, and {} is missing: install it with "
                    "'bash scripts/install-web-assets.sh' (or give --plotly FILE)",
                    path));
  return read_file(path, size_t(64) << 20);
}

void run_sweep_command(const SweepArgs& s) {
  const CostArgs& a = s.base;
  if (a.op.empty())
    throw Error("grux cost sweep: expected OP (e.g. grux cost sweep gru --vary n=1..64:x2)");
  if (s.format != "csv" && s.format != "json" && s.format != "html")
    throw Error(fmt::format("--format {} (expected csv, json or html)", s.format));
  if (s.out.empty()) throw Error("grux cost sweep: --out FILE is required");
  SweepSpec spec;
  spec.op = a.op;
  spec.fixed = s.fixed;
  for (const std::string& v : s.vary) spec.axes.push_back(SweepAxis::parse(v));
  spec.options = options_of(a);
  const std::vector<CountMode> modes = parse_modes(a.mode);
  if (modes.size() != 1) throw Error("--mode all is for grux cost; a sweep takes one mode");
  spec.mode = modes[0];
  spec.train = a.train;
  if (a.threads < 0) throw Error(fmt::format("--threads {} (expected >= 1)", a.threads));
  const int threads = a.threads == 0 ? omp_get_num_procs() : a.threads;
  const SweepResult r = run_sweep(spec, profile_of(a, spec.options.dtype), threads);
  std::string text;
  if (s.format == "csv") {
    text = sweep_csv(r);
  } else if (s.format == "json") {
    text = sweep_json(r);
  } else {
    const std::vector<MeasuredPoint> measured =
        s.bench.empty() ? std::vector<MeasuredPoint>{}
                        : measured_points(read_text_file(s.bench, "--bench"), s.bench);
    text = sweep_html(r, measured, plotly_source(s.plotly));
  }
  write_file_atomic(s.out, text);
  fmt::print("wrote {} ({} points)\n", s.out, r.points.size());
}

}  // namespace

Action add_cost_command(CLI::App& app) {
  auto a = std::make_shared<CostArgs>();
  CLI::App* c = app.add_subcommand(
      "cost",
      "Analytic cost of a problem: exact operation counts (modes: seed = every scalar op as "
      "the GRUCell page counts them, gemm = GEMM FLOP, mac = multiply-accumulates), memory, "
      "bytes moved under two cache models, arithmetic intensity. Operators and descriptors:" +
          op_list());
  c->add_option("OP", a->op, "operator (see above)");
  c->add_option("DESCRIPTOR", a->descriptor, "problem, e.g. l1d1t100n64i256h512");
  c->add_option("--mode", a->mode, "seed, gemm, mac, or all (the reconciliation table)")
      ->capture_default_str();
  c->add_flag("--train", a->train, "also the backward pass and the training totals");
  c->add_option("--dtype", a->dtype, "f32 or f64")->capture_default_str();
  c->add_option("--precision", a->precision,
                "gru, gru_stream: f32, bf16 or int8, the products' precision (weight bytes "
                "and GEMM rates; bf16 and int8 take f32)")
      ->capture_default_str();
  c->add_option("--format", a->format, "table, csv, json or md")->capture_default_str();
  c->add_flag("--no-bias", a->no_bias, "gru, gru_stream, gru_cell, linear, mingru: without bias");
  c->add_flag("--reset-before", a->reset_before, "gru, gru_cell: the reset-before form");
  c->add_option("--lengths", a->lengths,
                "gru, mingru: variable lengths, uniform:LO:HI:SEED or an int64 .npy of shape (N,)");
  add_profile_options(c, a->profile, a->threads, a->overrides);

  auto sw = std::make_shared<SweepArgs>();
  CLI::App* w = c->add_subcommand(
      "sweep",
      "The cost model over a grid of problems: each --vary sets one descriptor letter "
      "(LETTER=LO..HI, LO..HI:xF geometric, LO..HI:+S arithmetic, or V1,V2,...); up to three. "
      "CSV and JSON carry every metric with its unit; HTML is a self-contained interactive "
      "report (sliders, plots, heatmap, roofline).");
  w->add_option("OP", sw->base.op, "operator (see grux cost --help)");
  w->add_option("--vary", sw->vary, "LETTER=RANGE, e.g. n=1..256:x2 (repeat for more axes)")
      ->required();
  w->add_option("--fixed", sw->fixed, "the descriptor the axes modify (default: an example)");
  w->add_option("--format", sw->format, "csv, json or html")->required();
  w->add_option("--out", sw->out, "output file (written atomically)")->required();
  w->add_option("--mode", sw->base.mode, "seed, gemm or mac")->capture_default_str();
  w->add_flag("--train", sw->base.train, "also backward and training metrics");
  w->add_option("--dtype", sw->base.dtype, "f32 or f64")->capture_default_str();
  w->add_flag("--no-bias", sw->base.no_bias,
              "without bias (gru, gru_stream, gru_cell, linear, mingru)");
  w->add_flag("--reset-before", sw->base.reset_before, "the reset-before form (gru, gru_cell)");
  w->add_option("--lengths", sw->base.lengths, "gru, mingru: variable lengths, uniform:LO:HI:SEED");
  add_profile_options(w, sw->base.profile, sw->base.threads, sw->base.overrides);
  w->add_option("--bench", sw->bench,
                "html: JSON lines printed by grux bench gru|conv2d, drawn on the roofline chart");
  w->add_option("--plotly", sw->plotly,
                "html: the plotly.js file to inline (default: what scripts/install-web-assets.sh "
                "installs)");
  return [a, w, sw] {
    if (w->parsed())
      run_sweep_command(*sw);
    else
      run_cost(*a);
  };
}

}  // namespace grux::cli
