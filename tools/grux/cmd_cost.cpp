// `grux cost`: the analytic cost of one problem (counts, memory, traffic, roofline
// prediction) as a table, CSV, JSON or Markdown; `grux cost sweep` over a grid of problems.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "grux/cost.h"
#include "grux/cost_format.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
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
  // Many processes: the problem split over K ranks, on the measured link or one given.
  int ranks = 0;
  double link_gbit_s = 0, link_latency_us = 25;
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
                 threads, is_stream_op(r.op) && !train);
}

// `--ranks K`: the problem on K ranks over the links that matter (the measured local one, a
// given one, the 10 and 100 Gbit/s presets), and the scaling of the same global problem to 64
// machines on the presets. Table text or a JSON object.
std::string ranks_section(const CostArgs& a, const CostReport& r, const CostOptions& options,
                          CostFormat format) {
  if (a.ranks < 1) throw Error(fmt::format("--ranks {} (expected >= 1)", a.ranks));
  if (a.threads < 0) throw Error(fmt::format("--threads {} (expected >= 1)", a.threads));
  const MachineProfile prof = profile_of(a, options.dtype);
  const int cores = omp_get_num_procs();
  const int threads = a.threads > 0 ? a.threads : cores;
  struct Row {
    LinkModel link;
    int threads;
    int per_machine = 1;  // ranks sharing one machine
  };
  std::vector<Row> links;
  if (a.link_gbit_s > 0) {
    if (!(a.link_latency_us >= 0))
      throw Error(fmt::format("--link-latency-us {} (expected >= 0)", a.link_latency_us));
    links.push_back({{"given", a.link_latency_us, a.link_gbit_s}, threads});
  } else if (a.link_gbit_s < 0) {
    throw Error(fmt::format("--link-gbit-s {} (expected > 0)", a.link_gbit_s));
  }
  // The measured link joins ranks on this machine: they share its cores.
  if (prof.link.gbit_s > 0)
    links.push_back({prof.link, a.threads > 0 ? a.threads : std::max(1, cores / a.ranks), a.ranks});
  for (const LinkModel& l : network_presets()) links.push_back({l, threads});
  std::vector<std::pair<Row, RankPrediction>> at_k;
  for (const Row& row : links)
    at_k.push_back({row, predict_ranks(r.op, r.problem, options, a.train, a.ranks, row.link, prof,
                                       row.threads, row.per_machine)});
  // The scaling table: every power of two up to 64 that divides the split dimension.
  std::vector<int> ks;
  for (int k = 1; k <= 64; k *= 2) {
    try {
      (void)predict_ranks(r.op, r.problem, options, a.train, k, network_presets()[0], prof,
                          threads);
      ks.push_back(k);
    } catch (const Error&) {
      break;
    }
  }
  const double grad_bytes = static_cast<double>(r.memory.gradient_bytes);
  if (format == CostFormat::json) {
    nlohmann::ordered_json j;
    j["ranks"] = a.ranks;
    j["per_rank"] = at_k.front().second.per_rank;
    j["gradient_bytes"] = a.train ? grad_bytes : 0.0;
    for (const auto& [row, p] : at_k)
      j["links"].push_back({{"link", row.link.name},
                            {"latency_us", row.link.latency_us},
                            {"gbit_s", row.link.gbit_s},
                            {"threads_per_rank", row.threads},
                            {"compute_ms", p.compute_ms},
                            {"comm_ms", p.comm_ms},
                            {"ms", p.ms},
                            {"speedup", p.speedup}});
    for (int k : ks) {
      nlohmann::ordered_json e{{"ranks", k}};
      for (const LinkModel& l : network_presets()) {
        const RankPrediction p =
            predict_ranks(r.op, r.problem, options, a.train, k, l, prof, threads);
        e[l.name] = {{"ms", p.ms},
                     {"comm_ms", p.comm_ms},
                     {"speedup", p.speedup},
                     {"efficiency", p.speedup / k}};
      }
      j["scaling"].push_back(e);
    }
    return j.dump();
  }
  std::string t =
      fmt::format("on {} ranks: each runs {}{}\n", a.ranks, at_k.front().second.per_rank,
                  a.train && r.op.rfind("scan_", 0) != 0
                      ? fmt::format(", then the {:.3g} MB of gradients are summed across the ranks",
                                    grad_bytes / 1e6)
                      : "");
  t += fmt::format("  {:<34} {:>7} {:>9} {:>8} {:>13} {:>14} {:>10} {:>8}\n", "link", "Gbit/s",
                   "latency", "threads", "compute (ms)", "exchange (ms)", "step (ms)", "speedup");
  for (const auto& [row, p] : at_k)
    t +=
        fmt::format("  {:<34} {:>7.3g} {:>6.3g} us {:>8} {:>13.4g} {:>14.4g} {:>10.4g} {:>7.2f}x\n",
                    row.link.name, row.link.gbit_s, row.link.latency_us, row.threads, p.compute_ms,
                    p.comm_ms, p.ms, p.speedup);
  t += "  (speedup: over one rank on one machine; the measured link joins ranks on this "
       "machine, which share its cores and memory: its row compares with one rank using all of "
       "them)\n";
  t += fmt::format("\nscaling of {} {} to 64 machines ({} threads each):\n", r.op, r.problem,
                   threads);
  t += fmt::format("  {:>5}  {:<22}", "ranks", "per rank");
  for (const LinkModel& l : network_presets())
    t += fmt::format(" {:>22} {:>8} {:>6}", l.name + " (ms)", "speedup", "eff.");
  t += "\n";
  for (int k : ks) {
    t += fmt::format(
        "  {:>5}  {:<22}", k,
        predict_ranks(r.op, r.problem, options, a.train, k, network_presets()[0], prof, threads)
            .per_rank);
    for (const LinkModel& l : network_presets()) {
      const RankPrediction p =
          predict_ranks(r.op, r.problem, options, a.train, k, l, prof, threads);
      t += fmt::format(" {:>22.4g} {:>7.2f}x {:>5.0f}%", p.ms, p.speedup, 100 * p.speedup / k);
    }
    t += "\n";
  }
  if (ks.empty() || ks.back() < 64)
    t += fmt::format("  (beyond {} ranks the split dimension does not divide evenly)\n",
                     ks.empty() ? 1 : ks.back());
  return t;
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
  if (a.ranks == 0) {
    fmt::print("{}", format_cost(r, view, format));
    return;
  }
  if (format != CostFormat::table && format != CostFormat::json)
    throw Error("--ranks prints a table or JSON (--format table or json)");
  const std::string ranks = ranks_section(a, r, options, format);
  if (format == CostFormat::table) {
    fmt::print("{}\n{}", format_cost(r, view, format), ranks);
  } else {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(format_cost(r, view, format));
    j["ranks"] = nlohmann::ordered_json::parse(ranks);
    fmt::print("{}\n", j.dump());
  }
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
  c->add_flag(
      "--no-bias", a->no_bias,
      "gru, gru_stream, gru_cell, lstm, lstm_stream, lstm_cell, linear, mingru: without bias");
  c->add_flag("--reset-before", a->reset_before, "gru, gru_cell: the reset-before form");
  c->add_option("--ranks", a->ranks,
                "gru, mingru, charlm, scans: the problem split over K processes (the batch, or "
                "the scanned time), with the scaling table to 64 machines");
  c->add_option("--link-gbit-s", a->link_gbit_s,
                "with --ranks: a link of this bandwidth per rank (Gbit/s), besides the measured "
                "one (mpirun -np 2 grux calibrate) and the 10 and 100 Gbit/s presets");
  c->add_option("--link-latency-us", a->link_latency_us, "with --link-gbit-s: per message (us)")
      ->capture_default_str();
  c->add_option(
      "--lengths", a->lengths,
      "gru, lstm, mingru: variable lengths, uniform:LO:HI:SEED or an int64 .npy of shape (N,)");
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
  w->add_flag(
      "--no-bias", sw->base.no_bias,
      "without bias (gru, gru_stream, gru_cell, lstm, lstm_stream, lstm_cell, linear, mingru)");
  w->add_flag("--reset-before", sw->base.reset_before, "the reset-before form (gru, gru_cell)");
  w->add_option("--lengths", sw->base.lengths,
                "gru, lstm, mingru: variable lengths, uniform:LO:HI:SEED");
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
