// Renders one cost report as a terminal table, CSV, JSON or Markdown. Every number carries its
// unit: in a column or row label (table, Markdown), in the key (CSV), or beside it (JSON).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cost/cost_util.h"

namespace grux {
namespace {

std::string commas(int64_t v) {
  std::string s = std::to_string(v), r;
  const size_t start = s[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > start && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return r;
}

// "4,724,736 B (4.51 MiB)"
std::string bytes_text(int64_t b) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = -1;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  if (u < 0) return commas(b) + " B";
  return fmt::format("{} B ({:.2f} {})", commas(b), v, units[u]);
}

double ratio(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

const char* kParts[] = {"matmul", "bias", "elementwise", "activation"};
int64_t part(const OpCount& c, int i) {
  switch (i) {
    case 0:
      return c.matmul;
    case 1:
      return c.bias;
    case 2:
      return c.elementwise;
    default:
      return c.activation;
  }
}

std::string header(const CostReport& r) {
  return fmt::format("{} {} ({}; {})", r.op, r.problem, dtype_name(r.dtype), r.variant);
}

// Rows of the counts table: label, then one cell per (mode, phase) column.
struct Grid {
  std::vector<std::string> columns;
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
};

// One mode: rows are the parts, columns forward (and backward, training). Several modes (the
// reconciliation): one column per mode, for the phase `phase` (0 forward, 1 backward,
// 2 training).
Grid counts_grid(const CostReport& r, const CostView& v, int phase) {
  Grid g;
  auto cell = [&](CountMode m, int ph, int i) -> int64_t {
    const OpCount &f = r.fwd(m), &b = r.bwd(m);
    if (i == 4) return ph == 0 ? f.total() : ph == 1 ? b.total() : r.training_total(m);
    return ph == 0 ? part(f, i) : ph == 1 ? part(b, i) : part(f, i) + part(b, i);
  };
  const char* phases[] = {"forward", "backward", "training"};
  if (v.modes.size() == 1) {
    const CountMode m = v.modes[0];
    for (int ph = 0; ph < (v.train ? 3 : 1); ++ph)
      g.columns.push_back(fmt::format("{} ({})", phases[ph], count_unit(m)));
    for (int i = 0; i <= 4; ++i) {
      std::vector<std::string> cells;
      for (int ph = 0; ph < (v.train ? 3 : 1); ++ph) cells.push_back(commas(cell(m, ph, i)));
      g.rows.push_back({i < 4 ? kParts[i] : "total", cells});
    }
    return g;
  }
  for (CountMode m : v.modes)
    g.columns.push_back(fmt::format("{} ({})", count_mode_name(m), count_unit(m)));
  for (int i = 0; i <= 4; ++i) {
    std::vector<std::string> cells;
    for (CountMode m : v.modes) cells.push_back(commas(cell(m, phase, i)));
    g.rows.push_back({i < 4 ? kParts[i] : "total", cells});
  }
  return g;
}

std::string table_text(const Grid& g, bool markdown, const std::string& corner) {
  std::vector<size_t> width(g.columns.size() + 1, corner.size());
  width[0] = std::max(width[0], size_t(12));
  for (size_t c = 0; c < g.columns.size(); ++c) width[c + 1] = g.columns[c].size();
  for (const auto& [label, cells] : g.rows) {
    width[0] = std::max(width[0], label.size());
    for (size_t c = 0; c < cells.size(); ++c)
      width[c + 1] = std::max(width[c + 1], cells[c].size());
  }
  std::string out;
  if (markdown) {
    out += "| " + corner + " |";
    for (const auto& c : g.columns) out += " " + c + " |";
    out += "\n|---|";
    for (size_t c = 0; c < g.columns.size(); ++c) out += "---:|";
    out += "\n";
    for (const auto& [label, cells] : g.rows) {
      out += "| " + label + " |";
      for (const auto& c : cells) out += " " + c + " |";
      out += "\n";
    }
    return out;
  }
  out += fmt::format("  {:<{}}", corner, width[0]);
  for (size_t c = 0; c < g.columns.size(); ++c)
    out += fmt::format("  {:>{}}", g.columns[c], width[c + 1]);
  out += "\n";
  for (const auto& [label, cells] : g.rows) {
    out += fmt::format("  {:<{}}", label, width[0]);
    for (size_t c = 0; c < cells.size(); ++c)
      out += fmt::format("  {:>{}}", cells[c], width[c + 1]);
    out += "\n";
  }
  return out;
}

Grid memory_grid(const CostReport& r, const CostView& v) {
  const MemoryCost& m = r.memory;
  Grid g;
  g.columns = {"value"};
  g.rows.push_back({"parameters (scalars)", {commas(m.parameters)}});
  g.rows.push_back({"parameter bytes, f32", {bytes_text(m.parameters * 4)}});
  g.rows.push_back({"parameter bytes, f64", {bytes_text(m.parameters * 8)}});
  g.rows.push_back({fmt::format("activations, inference ({})", dtype_name(r.dtype)),
                    {bytes_text(m.inference_bytes)}});
  if (v.train) {
    g.rows.push_back({fmt::format("activations, training ({})", dtype_name(r.dtype)),
                      {bytes_text(m.training_bytes)}});
    g.rows.push_back({"parameter gradients", {bytes_text(m.gradient_bytes)}});
  }
  return g;
}

Grid traffic_grid(const CostReport& r, const CostView& v) {
  Grid g;
  g.columns = {"weights re-read every step", "weights kept in cache"};
  auto add = [&](const char* what, const TrafficCost& t) {
    g.rows.push_back(
        {fmt::format("{} read", what), {bytes_text(t.reread.read), bytes_text(t.cached.read)}});
    g.rows.push_back({fmt::format("{} written", what),
                      {bytes_text(t.reread.written), bytes_text(t.cached.written)}});
  };
  add("inference", r.inference_traffic);
  if (v.train) add("training", r.training_traffic);
  for (CountMode m : v.modes) {
    const std::string u = fmt::format("{}/byte", count_unit(m));
    g.rows.push_back(
        {fmt::format("intensity, inference ({})", u),
         {fmt::format("{:.3f}", ratio(r.fwd(m).total(), r.inference_traffic.reread.total())),
          fmt::format("{:.3f}", ratio(r.fwd(m).total(), r.inference_traffic.cached.total()))}});
    if (v.train)
      g.rows.push_back(
          {fmt::format("intensity, training ({})", u),
           {fmt::format("{:.3f}", ratio(r.training_total(m), r.training_traffic.reread.total())),
            fmt::format("{:.3f}", ratio(r.training_total(m), r.training_traffic.cached.total()))}});
  }
  return g;
}

Grid prediction_grid(const CostView& v) {
  Grid g;
  g.columns = {"compute (ms)", "traffic (ms)",       "roofline (ms)",
               "bound",        "step overhead (ms)", "predicted (ms)"};
  auto add = [&](const char* what, const Prediction* p) {
    if (!p) return;
    g.rows.push_back({what,
                      {fmt::format("{:.4g}", p->compute_ms), fmt::format("{:.4g}", p->traffic_ms),
                       fmt::format("{:.4g}", p->roofline_ms), p->bound,
                       fmt::format("{:.4g}", p->overhead_ms), fmt::format("{:.4g}", p->ms)}});
  };
  add("inference", v.inference);
  if (v.train) add("training step", v.training);
  return g;
}

std::string prediction_note(const CostView& v) {
  const Prediction* p = v.inference ? v.inference : v.training;
  return fmt::format("{} thread{}, rates from {}", p->threads, p->threads == 1 ? "" : "s",
                     v.profile);
}

nlohmann::ordered_json count_json(const OpCount& c) {
  return {{"matmul", c.matmul},
          {"bias", c.bias},
          {"elementwise", c.elementwise},
          {"activation", c.activation},
          {"total", c.total()}};
}

nlohmann::ordered_json prediction_json(const Prediction& p) {
  return {{"compute_ms", p.compute_ms},   {"traffic_ms", p.traffic_ms},
          {"roofline_ms", p.roofline_ms}, {"bound", p.bound},
          {"overhead_ms", p.overhead_ms}, {"predicted_ms", p.ms}};
}

std::string to_json(const CostReport& r, const CostView& v) {
  nlohmann::ordered_json j;
  j["op"] = r.op;
  j["problem"] = r.problem;
  j["variant"] = r.variant;
  j["dtype"] = dtype_name(r.dtype);
  for (CountMode m : v.modes) {
    nlohmann::ordered_json c;
    c["unit"] = count_unit(m);
    c["forward"] = count_json(r.fwd(m));
    if (v.train) {
      c["backward"] = count_json(r.bwd(m));
      c["training_total"] = r.training_total(m);
    }
    j["counts"][count_mode_name(m)] = c;
  }
  const MemoryCost& m = r.memory;
  j["memory"] = {{"unit", "bytes"},
                 {"parameters", m.parameters},
                 {"parameter_bytes", {{"f32", m.parameters * 4}, {"f64", m.parameters * 8}}},
                 {"inference_activation_bytes", m.inference_bytes}};
  if (v.train) {
    j["memory"]["training_activation_bytes"] = m.training_bytes;
    j["memory"]["gradient_bytes"] = m.gradient_bytes;
  }
  auto traffic = [](const TrafficCost& t) {
    return nlohmann::ordered_json{
        {"reread", {{"read", t.reread.read}, {"written", t.reread.written}}},
        {"cached", {{"read", t.cached.read}, {"written", t.cached.written}}}};
  };
  j["traffic"]["unit"] = "bytes";
  j["traffic"]["inference"] = traffic(r.inference_traffic);
  if (v.train) j["traffic"]["training"] = traffic(r.training_traffic);
  for (CountMode mode : v.modes) {
    nlohmann::ordered_json in;
    in["unit"] = fmt::format("{}/byte", count_unit(mode));
    in["inference"] = {{"reread", ratio(r.fwd(mode).total(), r.inference_traffic.reread.total())},
                       {"cached", ratio(r.fwd(mode).total(), r.inference_traffic.cached.total())}};
    if (v.train)
      in["training"] = {
          {"reread", ratio(r.training_total(mode), r.training_traffic.reread.total())},
          {"cached", ratio(r.training_total(mode), r.training_traffic.cached.total())}};
    j["intensity"][count_mode_name(mode)] = in;
  }
  if (v.inference || v.training) {
    nlohmann::ordered_json p;
    p["profile"] = v.profile;
    p["threads"] = (v.inference ? v.inference : v.training)->threads;
    if (v.inference) p["inference"] = prediction_json(*v.inference);
    if (v.train && v.training) p["training"] = prediction_json(*v.training);
    j["prediction"] = p;
  }
  return j.dump() + "\n";
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string number_text(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 9e15)
    return std::to_string(static_cast<int64_t>(v));
  return fmt::format("{:.6g}", v);
}

}  // namespace

CostFormat parse_cost_format(const std::string& text) {
  if (text == "table") return CostFormat::table;
  if (text == "csv") return CostFormat::csv;
  if (text == "json") return CostFormat::json;
  if (text == "md") return CostFormat::md;
  throw Error(fmt::format("--format {} (expected table, csv, json or md)", text));
}

std::vector<CostField> cost_fields(const CostReport& r, const CostView& v) {
  const CountMode m = v.modes.at(0);
  const std::string u = count_unit(m);
  std::vector<CostField> f;
  auto add = [&](std::string key, std::string label, std::string unit, double value) {
    f.push_back({std::move(key), std::move(label), std::move(unit), value});
  };
  auto counts = [&](const char* phase, const OpCount& c) {
    for (int i = 0; i < 4; ++i)
      add(fmt::format("{}_{}_{}", phase, kParts[i], u), fmt::format("{} {}", phase, kParts[i]), u,
          static_cast<double>(part(c, i)));
    add(fmt::format("{}_total_{}", phase, u), fmt::format("{} total", phase), u,
        static_cast<double>(c.total()));
  };
  counts("forward", r.fwd(m));
  if (v.train) {
    counts("backward", r.bwd(m));
    add(fmt::format("training_total_{}", u), "training total", u,
        static_cast<double>(r.training_total(m)));
  }
  const MemoryCost& mem = r.memory;
  add("parameters_scalars", "parameters", "scalars", static_cast<double>(mem.parameters));
  add("parameter_bytes", fmt::format("parameter bytes ({})", dtype_name(r.dtype)), "bytes",
      static_cast<double>(mem.parameter_bytes));
  add("inference_activation_bytes", "activations, inference", "bytes",
      static_cast<double>(mem.inference_bytes));
  if (v.train) {
    add("training_activation_bytes", "activations, training", "bytes",
        static_cast<double>(mem.training_bytes));
    add("gradient_bytes", "parameter gradients", "bytes", static_cast<double>(mem.gradient_bytes));
  }
  auto traffic = [&](const char* phase, const TrafficCost& t, int64_t count) {
    add(fmt::format("{}_read_reread_bytes", phase), fmt::format("{} read, weights re-read", phase),
        "bytes", static_cast<double>(t.reread.read));
    add(fmt::format("{}_written_reread_bytes", phase),
        fmt::format("{} written, weights re-read", phase), "bytes",
        static_cast<double>(t.reread.written));
    add(fmt::format("{}_read_cached_bytes", phase), fmt::format("{} read, weights cached", phase),
        "bytes", static_cast<double>(t.cached.read));
    add(fmt::format("{}_written_cached_bytes", phase),
        fmt::format("{} written, weights cached", phase), "bytes",
        static_cast<double>(t.cached.written));
    const std::string iu = u + "/byte";
    add(fmt::format("{}_intensity_reread_{}_per_byte", phase, u),
        fmt::format("{} intensity, weights re-read", phase), iu, ratio(count, t.reread.total()));
    add(fmt::format("{}_intensity_cached_{}_per_byte", phase, u),
        fmt::format("{} intensity, weights cached", phase), iu, ratio(count, t.cached.total()));
  };
  traffic("inference", r.inference_traffic, r.fwd(m).total());
  if (v.train) traffic("training", r.training_traffic, r.training_total(m));
  auto prediction = [&](const char* phase, const Prediction* p) {
    if (!p) return;
    add(fmt::format("{}_compute_ms", phase), fmt::format("{} compute time", phase), "ms",
        p->compute_ms);
    add(fmt::format("{}_traffic_ms", phase), fmt::format("{} traffic time", phase), "ms",
        p->traffic_ms);
    add(fmt::format("{}_roofline_ms", phase), fmt::format("{} roofline time", phase), "ms",
        p->roofline_ms);
    add(fmt::format("{}_predicted_ms", phase), fmt::format("{} predicted time", phase), "ms",
        p->ms);
  };
  prediction("inference", v.inference);
  if (v.train) prediction("training", v.training);
  return f;
}

std::string format_cost(const CostReport& r, const CostView& v, CostFormat format) {
  switch (format) {
    case CostFormat::json:
      return to_json(r, v);
    case CostFormat::csv: {
      const std::vector<CostField> f = cost_fields(r, v);
      std::string head = "op,problem,variant,dtype,mode", row;
      row = fmt::format("{},{},{},{},{}", r.op, r.problem, csv_quote(r.variant),
                        dtype_name(r.dtype), count_mode_name(v.modes.at(0)));
      for (const CostField& x : f) {
        head += ',';
        head += x.key;
        row += ',';
        row += number_text(x.value);
      }
      auto bound = [&](const char* phase, const Prediction* p) {
        if (p) head += fmt::format(",{}_bound", phase), row += fmt::format(",{}", p->bound);
      };
      bound("inference", v.inference);
      if (v.train) bound("training", v.training);
      return head + "\n" + row + "\n";
    }
    case CostFormat::table:
    case CostFormat::md: {
      const bool md = format == CostFormat::md;
      std::string out;
      const std::string title = header(r);
      out += md ? fmt::format("**{}**\n\n", title) : fmt::format("{}\n", title);
      if (v.modes.size() == 1) {
        const CountMode m = v.modes[0];
        out += table_text(counts_grid(r, v, 0), md,
                          fmt::format("counts, {} mode", count_mode_name(m)));
      } else {
        const char* phases[] = {"forward", "backward", "training"};
        for (int ph = 0; ph < (v.train ? 3 : 1); ++ph) {
          if (ph > 0) out += "\n";
          out += table_text(counts_grid(r, v, ph), md,
                            fmt::format("{} counts, every mode", phases[ph]));
        }
      }
      out += "\n";
      out += table_text(memory_grid(r, v), md, "memory");
      out += "\n";
      out += table_text(traffic_grid(r, v), md, "traffic (bytes)");
      if (v.inference || v.training) {
        out += "\n";
        out += table_text(prediction_grid(v), md, "roofline");
        out += md ? fmt::format("\n{}\n", prediction_note(v))
                  : fmt::format("  ({})\n", prediction_note(v));
      }
      return out;
    }
  }
  return "";
}

}  // namespace grux
