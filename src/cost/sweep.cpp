// Sweeps: the cost model over a grid of problems (up to three varied descriptor letters),
// rendered as CSV or JSON (the HTML report reads the same JSON). Every point's descriptor goes
// through the operator's own parser, so a sweep can only describe problems the operator takes.
#include "grux/sweep.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/descriptor.h"
#include "cost/cost_util.h"

namespace grux {
namespace {

constexpr size_t kMaxAxisValues = 1000;
constexpr size_t kMaxPoints = 20000;
constexpr size_t kMaxAxes = 3;

std::string axis_syntax(const std::string& text) {
  return fmt::format(
      "--vary '{}' is malformed (expected LETTER=LO..HI, LETTER=LO..HI:xF, LETTER=LO..HI:+S "
      "or LETTER=V1,V2,..., e.g. n=1..256:x2; LETTER may be ranks: processes)",
      text);
}

int64_t parse_int(const std::string& s, const std::string& text) {
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos)
    throw Error(axis_syntax(text));
  return std::stoll(s);
}

// The descriptor's letters and numbers, in order ("l1d1t100" -> l=1, d=1, t=100).
std::map<char, int64_t> tokens(const std::string& descriptor) {
  const auto tokens = detail::descriptor_tokens(descriptor);
  if (!tokens)
    throw Error(fmt::format("--fixed '{}' is not a descriptor of letters and numbers", descriptor));
  // A second value ("k3x5") counts as a letter of its own, x, which no operator sweeps.
  std::map<char, int64_t> m;
  for (const detail::DescriptorToken& t : *tokens) {
    m[t.letter] = t.value;
    if (t.has_second) m['x'] = t.second;
  }
  return m;
}

}  // namespace

SweepAxis SweepAxis::parse(const std::string& text) {
  static const std::regex re(R"((ranks|[a-z])=(.+))");
  std::smatch m;
  if (!std::regex_match(text, m, re)) throw Error(axis_syntax(text));
  SweepAxis a;
  a.letter = m[1].str();
  const std::string body = m[2].str();
  const size_t dots = body.find("..");
  if (dots == std::string::npos) {
    size_t start = 0;
    while (true) {
      const size_t comma = body.find(',', start);
      a.values.push_back(parse_int(body.substr(start, comma - start), text));
      if (a.values.size() > kMaxAxisValues)
        throw Error(fmt::format("--vary '{}': more than {} values", text, kMaxAxisValues));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return a;
  }
  const int64_t lo = parse_int(body.substr(0, dots), text);
  std::string rest = body.substr(dots + 2), step = "+1";
  if (const size_t colon = rest.find(':'); colon != std::string::npos)
    step = rest.substr(colon + 1), rest = rest.substr(0, colon);
  const int64_t hi = parse_int(rest, text);
  if (lo > hi) throw Error(fmt::format("--vary '{}': LO {} is above HI {}", text, lo, hi));
  if (step.size() < 2 || (step[0] != 'x' && step[0] != '+')) throw Error(axis_syntax(text));
  const int64_t by = parse_int(step.substr(1), text);
  if (step[0] == 'x' && (by < 2 || lo < 1))
    throw Error(
        fmt::format("--vary '{}': a geometric range needs LO >= 1 and a factor >= 2", text));
  if (step[0] == '+' && by < 1)
    throw Error(fmt::format("--vary '{}': the step must be >= 1", text));
  for (int64_t v = lo; v <= hi; v = step[0] == 'x' ? v * by : v + by) {
    a.values.push_back(v);
    if (a.values.size() > kMaxAxisValues)
      throw Error(fmt::format("--vary '{}': more than {} values", text, kMaxAxisValues));
  }
  return a;
}

SweepResult run_sweep(const SweepSpec& spec, const MachineProfile& profile, int threads) {
  const CostOp& op = find_cost_op(spec.op);
  if (spec.axes.empty()) throw Error("grux cost sweep: give at least one --vary");
  if (spec.axes.size() > kMaxAxes)
    throw Error(
        fmt::format("grux cost sweep: at most {} --vary (got {})", kMaxAxes, spec.axes.size()));
  SweepResult r;
  r.spec = spec;
  r.fixed = spec.fixed.empty() ? op.example : spec.fixed;
  r.profile = profile;
  r.threads = threads;
  (void)cost_of(op.name, r.fixed, spec.options);  // the fixed problem must be valid
  const std::map<char, int64_t> fixed = tokens(r.fixed);
  for (const auto& [letter, value] : fixed)
    if (op.letters.find(letter) == std::string::npos)
      throw Error(
          fmt::format("--fixed '{}': a sweep takes one value per letter of {} ({}); "
                      "'{}{}' is not one",
                      r.fixed, op.name, op.letters, letter, value));
  std::set<std::string> seen;
  size_t points = 1;
  int ranks_axis = -1;  // the axis of process counts, if any (not a descriptor letter)
  for (const SweepAxis& a : spec.axes) {
    if (a.letter == "ranks") {
      if (!seen.insert(a.letter).second) throw Error("--vary ranks is given twice");
      for (int64_t k : a.values)
        if (k < 1 || k > 65536) throw Error(fmt::format("--vary ranks: {} (expected 1..65536)", k));
      ranks_axis = static_cast<int>(&a - spec.axes.data());
      points *= a.values.size();
      continue;
    }
    if (a.letter.size() != 1 || op.letters.find(a.letter) == std::string::npos)
      throw Error(fmt::format("--vary {}: {} descriptors ({}) have no letter '{}'", a.letter,
                              op.name, op.syntax, a.letter));
    if (!seen.insert(a.letter).second)
      throw Error(fmt::format("--vary {} is given twice", a.letter));
    if (a.values.empty()) throw Error(fmt::format("--vary {} has no values", a.letter));
    points *= a.values.size();
    if (points > kMaxPoints)
      throw Error(fmt::format("grux cost sweep: the grid has more than {} points", kMaxPoints));
  }
  CostView view;
  view.modes = {spec.mode};
  view.train = spec.train;
  std::vector<size_t> idx(spec.axes.size(), 0);
  for (size_t p = 0; p < points; ++p) {
    // Row-major over the axes: the last axis varies fastest.
    size_t rem = p;
    for (size_t k = spec.axes.size(); k-- > 0;) {
      idx[k] = rem % spec.axes[k].values.size();
      rem /= spec.axes[k].values.size();
    }
    std::map<char, int64_t> at = fixed;
    std::vector<int64_t> values;
    int ranks = 1;
    for (size_t k = 0; k < spec.axes.size(); ++k) {
      values.push_back(spec.axes[k].values[idx[k]]);
      if (static_cast<int>(k) == ranks_axis)
        ranks = static_cast<int>(spec.axes[k].values[idx[k]]);
      else
        at[spec.axes[k].letter[0]] = spec.axes[k].values[idx[k]];
    }
    std::string d;
    for (char c : op.letters)
      if (at.count(c)) d += fmt::format("{}{}", c, at[c]);
    CostReport rep;
    Prediction inf, trn;
    try {
      rep = cost_of(op.name, d, spec.options);
      inf = predict(rep.inference_phases, spec.options.dtype, profile, threads,
                    is_stream_op(op.name));
      trn = predict(rep.training_phases, spec.options.dtype, profile, threads);
    } catch (const Error& e) {
      throw Error(fmt::format("sweep point {}: {}", d, e.what()));
    }
    view.inference = &inf;
    view.training = &trn;
    std::vector<CostField> f = cost_fields(rep, view);
    // With a ranks axis: the problem on that many ranks, on each preset network.
    if (ranks_axis >= 0) {
      for (const LinkModel& l : network_presets()) {
        const std::string tag = l.gbit_s >= 100 ? "100gbit" : "10gbit";
        RankPrediction rp;
        try {
          rp = predict_ranks(op.name, d, spec.options, spec.train, ranks, l, profile, threads);
        } catch (const Error& e) {
          throw Error(fmt::format("sweep point {} on {} ranks: {}", d, ranks, e.what()));
        }
        f.push_back({"step_" + tag + "_ms",
                     fmt::format("{} over the ranks on {}",
                                 spec.train ? "training step" : "forward", l.name),
                     "ms", rp.ms});
        f.push_back(
            {"exchange_" + tag + "_ms", "exchange between ranks on " + l.name, "ms", rp.comm_ms});
        f.push_back(
            {"speedup_" + tag + "_x", "speedup over one rank on " + l.name, "x", rp.speedup});
      }
    }
    if (r.metrics.empty())
      for (const CostField& x : f) r.metrics.push_back({x.key, x.label, x.unit});
    std::vector<double> row;
    for (const CostField& x : f) row.push_back(x.value);
    r.points.push_back(values);
    r.descriptors.push_back(d);
    r.values.push_back(row);
    r.roof_inference.push_back(
        cost_detail::roof_point(static_cast<double>(rep.fwd(CountMode::gemm).total()),
                                rep.inference_traffic.cached.total(), inf.ms));
    r.roof_training.push_back(
        cost_detail::roof_point(static_cast<double>(rep.training_total(CountMode::gemm)),
                                rep.training_traffic.cached.total(), trn.ms));
    r.inference_bound.push_back(inf.bound);
    r.training_bound.push_back(spec.train ? trn.bound : "");
    if (r.variant.empty()) r.variant = rep.variant;
  }
  return r;
}

std::string sweep_csv(const SweepResult& r) {
  std::string out;
  for (const SweepAxis& a : r.spec.axes) out += a.letter + ",";
  out += "descriptor";
  for (const SweepMetric& m : r.metrics) out += "," + m.key;
  out += ",inference_bound";
  if (r.spec.train) out += ",training_bound";
  out += "\n";
  for (size_t p = 0; p < r.points.size(); ++p) {
    for (int64_t v : r.points[p]) out += fmt::format("{},", v);
    out += r.descriptors[p];
    for (double v : r.values[p]) {
      out += ',';
      out += v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 9e15
                 ? std::to_string(static_cast<int64_t>(v))
                 : fmt::format("{:.6g}", v);
    }
    out += fmt::format(",{}", r.inference_bound[p]);
    if (r.spec.train) out += fmt::format(",{}", r.training_bound[p]);
    out += "\n";
  }
  return out;
}

std::string sweep_json(const SweepResult& r) {
  return cost_detail::sweep_json_value(r).dump() + "\n";
}

nlohmann::ordered_json cost_detail::sweep_json_value(const SweepResult& r) {
  nlohmann::ordered_json j;
  const CostOp& op = find_cost_op(r.spec.op);
  j["op"] = op.name;
  j["what"] = op.what;
  j["syntax"] = op.syntax;
  j["fixed"] = r.fixed;
  j["variant"] = r.variant;
  j["dtype"] = dtype_name(r.spec.options.dtype);
  j["mode"] = count_mode_name(r.spec.mode);
  j["unit"] = count_unit(r.spec.mode);
  j["train"] = r.spec.train;
  j["axes"] = nlohmann::json::array();
  for (const SweepAxis& a : r.spec.axes)
    j["axes"].push_back({{"letter", a.letter}, {"values", a.values}});
  j["metrics"] = nlohmann::json::array();
  for (const SweepMetric& m : r.metrics)
    j["metrics"].push_back({{"key", m.key}, {"label", m.label}, {"unit", m.unit}});
  j["points"] = nlohmann::json::array();
  for (size_t p = 0; p < r.points.size(); ++p) {
    nlohmann::ordered_json pt;
    pt["descriptor"] = r.descriptors[p];
    pt["at"] = r.points[p];
    pt["values"] = r.values[p];
    pt["inference_bound"] = r.inference_bound[p];
    if (r.spec.train) pt["training_bound"] = r.training_bound[p];
    pt["roofline"]["inference"] = {r.roof_inference[p].first, r.roof_inference[p].second};
    if (r.spec.train)
      pt["roofline"]["training"] = {r.roof_training[p].first, r.roof_training[p].second};
    j["points"].push_back(pt);
  }
  // The rates of the roofline chart, at the sweep's thread count.
  const ThreadProfile t = r.profile.at(r.threads);
  nlohmann::ordered_json prof;
  prof["source"] = r.profile.source;
  prof["machine"] = r.profile.machine;
  prof["threads"] = r.threads;
  prof["peak_gflops"] = r.spec.options.dtype == DType::f64 ? t.dgemm_gflops : t.sgemm_gflops;
  prof["memcpy_gbps"] = t.memcpy_gbps;
  prof["read_gbps"] = nlohmann::json::array();
  for (const auto& [bytes, gbps] : t.read_gbps) prof["read_gbps"].push_back({bytes, gbps});
  j["profile"] = prof;
  return j;
}

std::vector<MeasuredPoint> measured_points(const std::string& jsonl, const std::string& what) {
  static const std::regex lengths_re(R"(_len(\d+)-(\d+)s(\d+))");
  std::vector<MeasuredPoint> out;
  size_t start = 0, line_no = 0;
  while (start < jsonl.size()) {
    size_t end = jsonl.find('\n', start);
    if (end == std::string::npos) end = jsonl.size();
    const std::string line = jsonl.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", what, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      throw Error(fmt::format("{}: not a JSON line from grux bench", where));
    }
    if (!j.is_object() || !j.contains("op") || !j.contains("problem") || !j.contains("gflops") ||
        !j["gflops"].is_number() || !j["problem"].is_string())
      throw Error(fmt::format("{}: expected a grux bench line (op, problem, gflops)", where));
    const std::string op = j["op"].get<std::string>(), mode = j.value("mode", "");
    if (op == "gemm") continue;  // the peak itself: no problem to place
    const std::string problem = j["problem"].get<std::string>();
    const DType dtype = j.value("dtype", "f32") == "f64" ? DType::f64 : DType::f32;
    const bool train = mode == "train";
    CostReport rep;
    try {
      if (op == "gru") {
        GruProblem p = GruProblem::parse(problem.substr(0, problem.find('_')));
        p.dtype = dtype;
        p.form = problem.find("_rb") != std::string::npos ? GruForm::reset_before
                                                          : GruForm::linear_before_reset;
        std::smatch m;
        if (std::regex_search(problem, m, lengths_re))
          p.set_lengths(fmt::format("uniform:{}:{}:{}", m[1].str(), m[2].str(), m[3].str()));
        rep = mode == "cell" ? gru_stream_cost(p) : gru_cost(p);
      } else if (op == "lstm") {
        LstmProblem p = LstmProblem::parse(problem.substr(0, problem.find('_')));
        p.dtype = dtype;
        std::smatch m;
        if (std::regex_search(problem, m, lengths_re))
          p.set_lengths(fmt::format("uniform:{}:{}:{}", m[1].str(), m[2].str(), m[3].str()));
        rep = mode == "cell" ? lstm_stream_cost(p) : lstm_cost(p);
      } else if (op == "conv2d") {
        ConvProblem p = ConvProblem::parse(problem);
        p.dtype = dtype;
        rep = conv2d_cost(p);
      } else {
        throw Error(fmt::format("operator '{}' has no cost model here", op));
      }
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", where, e.what()));
    }
    MeasuredPoint pt;
    pt.label = fmt::format("{} {} {} {}t", op, problem, mode, j.value("threads", 0));
    const double flop = static_cast<double>(train ? rep.training_total(CountMode::gemm)
                                                  : rep.fwd(CountMode::gemm).total());
    const int64_t bytes =
        train ? rep.training_traffic.cached.total() : rep.inference_traffic.cached.total();
    pt.intensity = bytes > 0 ? flop / static_cast<double>(bytes) : 0;
    pt.gflops = j["gflops"].get<double>();
    pt.training = train;
    out.push_back(pt);
  }
  return out;
}

}  // namespace grux
