// The machine profile (JSON on disk, the preset, command-line overrides) and the roofline
// prediction: max(compute, traffic) for each phase (kernel) of a run, summed, plus the
// per-step cost of sequential steps. docs/cost_model.md explains the choices.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cost/cost_util.h"
#include "grux/io.h"

namespace grux {
namespace {

constexpr const char* kFormat = "grux-profile-1";

ThreadProfile lerp(const ThreadProfile& a, const ThreadProfile& b, double t) {
  auto mix = [t](double x, double y) { return x + (y - x) * t; };
  ThreadProfile r;
  r.sgemm_gflops = mix(a.sgemm_gflops, b.sgemm_gflops);
  r.dgemm_gflops = mix(a.dgemm_gflops, b.dgemm_gflops);
  r.blas_sgemm_gflops = mix(a.blas_sgemm_gflops, b.blas_sgemm_gflops);
  r.blas_dgemm_gflops = mix(a.blas_dgemm_gflops, b.blas_dgemm_gflops);
  if (a.bf16_gflops > 0 && b.bf16_gflops > 0) r.bf16_gflops = mix(a.bf16_gflops, b.bf16_gflops);
  if (a.int8_gflops > 0 && b.int8_gflops > 0) r.int8_gflops = mix(a.int8_gflops, b.int8_gflops);
  r.memcpy_gbps = mix(a.memcpy_gbps, b.memcpy_gbps);
  r.step_us = mix(a.step_us, b.step_us);
  r.stream_step_us = mix(a.stream_step_us, b.stream_step_us);
  if (a.gru_gemm_efficiency > 0 && b.gru_gemm_efficiency > 0)
    r.gru_gemm_efficiency = mix(a.gru_gemm_efficiency, b.gru_gemm_efficiency);
  if (a.bf16_gru_efficiency > 0 && b.bf16_gru_efficiency > 0)
    r.bf16_gru_efficiency = mix(a.bf16_gru_efficiency, b.bf16_gru_efficiency);
  if (a.int8_gru_efficiency > 0 && b.int8_gru_efficiency > 0)
    r.int8_gru_efficiency = mix(a.int8_gru_efficiency, b.int8_gru_efficiency);
  // The bandwidth curves may be sampled at different sizes: sample both at a's sizes.
  for (const auto& [bytes, gbps] : a.read_gbps)
    r.read_gbps.push_back({bytes, mix(gbps, read_bandwidth_at(b, bytes))});
  if (!a.stream_gbps.empty() && !b.stream_gbps.empty())
    for (const auto& [bytes, gbps] : a.stream_gbps)
      r.stream_gbps.push_back({bytes, mix(gbps, bandwidth_at(b.stream_gbps, bytes))});
  return r;
}

double positive(const nlohmann::json& j, const char* key, const std::string& what) {
  if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() >= 0) ||
      !std::isfinite(j[key].get<double>()))
    throw Error(fmt::format("{}: '{}' is missing or not a non-negative number", what, key));
  return j[key].get<double>();
}

// An optional number (0 when absent): blas_*_gflops.
double optional_positive(const nlohmann::json& j, const char* key, const std::string& what) {
  return j.contains(key) ? positive(j, key, what) : 0.0;
}

// An optional string (`fallback` when absent): machine, created, the link's name.
std::string optional_text(const nlohmann::json& j, const char* key, const std::string& what,
                          const char* fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string()) throw Error(fmt::format("{}: '{}' is not a string", what, key));
  return j[key].get<std::string>();
}

// A bandwidth curve: [bytes, GB/s] pairs, both finite and > 0, sorted by size.
std::vector<std::pair<double, double>> curve(const nlohmann::json& a, const char* key,
                                             const std::string& what) {
  if (!a.is_array())
    throw Error(fmt::format("{}: '{}' must be an array of [bytes, GB/s]", what, key));
  std::vector<std::pair<double, double>> c;
  for (const auto& pt : a) {
    const auto ok = [&](size_t k) {
      return pt[k].is_number() && pt[k].get<double>() > 0 && std::isfinite(pt[k].get<double>());
    };
    if (!pt.is_array() || pt.size() != 2 || !ok(0) || !ok(1))
      throw Error(fmt::format("{}: '{}' entries must be [bytes > 0, GB/s > 0]", what, key));
    c.push_back({pt[0].get<double>(), pt[1].get<double>()});
  }
  std::sort(c.begin(), c.end());
  return c;
}

}  // namespace

ThreadProfile MachineProfile::at(int threads) const {
  if (this->threads.empty()) throw Error(fmt::format("profile {} has no measurements", source));
  auto it = this->threads.lower_bound(threads);
  if (it != this->threads.end() && it->first == threads) return it->second;
  if (it == this->threads.begin()) return it->second;
  if (it == this->threads.end()) return std::prev(it)->second;
  const auto lo = std::prev(it);
  return lerp(lo->second, it->second, double(threads - lo->first) / double(it->first - lo->first));
}

std::string MachineProfile::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["machine"] = machine;
  j["created"] = created;
  j["units"] = {{"gemm", "GFLOP/s"},
                {"bandwidth", "GB/s (1e9 bytes)"},
                {"read_gbps", "[bytes per thread, GB/s of all threads]"},
                {"step", "microseconds"},
                {"gru_gemm_efficiency", "fraction of the GEMM peak"},
                {"bf16_gru_efficiency", "fraction of bf16_gflops"},
                {"int8_gru_efficiency", "fraction of int8_gflops"}};
  for (const auto& [k, t] : threads) {
    nlohmann::ordered_json e;
    e["sgemm_gflops"] = t.sgemm_gflops;
    e["dgemm_gflops"] = t.dgemm_gflops;
    e["blas_sgemm_gflops"] = t.blas_sgemm_gflops;
    e["blas_dgemm_gflops"] = t.blas_dgemm_gflops;
    if (t.bf16_gflops > 0) e["bf16_gflops"] = t.bf16_gflops;
    if (t.int8_gflops > 0) e["int8_gflops"] = t.int8_gflops;
    e["memcpy_gbps"] = t.memcpy_gbps;
    e["step_us"] = t.step_us;
    e["stream_step_us"] = t.stream_step_us;
    if (t.gru_gemm_efficiency > 0) e["gru_gemm_efficiency"] = t.gru_gemm_efficiency;
    if (t.bf16_gru_efficiency > 0) e["bf16_gru_efficiency"] = t.bf16_gru_efficiency;
    if (t.int8_gru_efficiency > 0) e["int8_gru_efficiency"] = t.int8_gru_efficiency;
    e["read_gbps"] = nlohmann::json::array();
    for (const auto& [bytes, gbps] : t.read_gbps) e["read_gbps"].push_back({bytes, gbps});
    e["stream_gbps"] = nlohmann::json::array();
    for (const auto& [bytes, gbps] : t.stream_gbps) e["stream_gbps"].push_back({bytes, gbps});
    j["threads"][std::to_string(k)] = e;
  }
  if (link.gbit_s > 0)
    j["link"] = {{"name", link.name}, {"latency_us", link.latency_us}, {"gbit_s", link.gbit_s}};
  return j.dump(1) + "\n";
}

MachineProfile MachineProfile::from_json(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a JSON profile ({})", what, e.what()));
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    throw Error(
        fmt::format("{}: not a grux profile (expected \"format\": \"{}\"; write one with "
                    "grux calibrate)",
                    what, kFormat));
  MachineProfile p;
  p.source = what;
  p.machine = optional_text(j, "machine", what, "");
  p.created = optional_text(j, "created", what, "");
  if (!j.contains("threads") || !j["threads"].is_object() || j["threads"].empty())
    throw Error(fmt::format("{}: no \"threads\" entries", what));
  for (const auto& [key, e] : j["threads"].items()) {
    const std::string w = fmt::format("{} (threads {})", what, key);
    char* end = nullptr;
    const long k = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos || *end != '\0' ||
        k < 1 || k > 4096)
      throw Error(fmt::format("{}: thread count '{}' is not an integer in [1, 4096]", what, key));
    if (p.threads.count(static_cast<int>(k)))
      throw Error(fmt::format("{}: thread count {} appears twice", what, k));
    if (!e.is_object()) throw Error(fmt::format("{}: expected an object", w));
    ThreadProfile t;
    t.sgemm_gflops = positive(e, "sgemm_gflops", w);
    t.dgemm_gflops = positive(e, "dgemm_gflops", w);
    t.blas_sgemm_gflops = optional_positive(e, "blas_sgemm_gflops", w);
    t.blas_dgemm_gflops = optional_positive(e, "blas_dgemm_gflops", w);
    // Optional (profiles from before the low-precision kernels have neither).
    if (e.contains("bf16_gflops")) t.bf16_gflops = positive(e, "bf16_gflops", w);
    if (e.contains("int8_gflops")) t.int8_gflops = positive(e, "int8_gflops", w);
    t.memcpy_gbps = positive(e, "memcpy_gbps", w);
    t.step_us = positive(e, "step_us", w);
    t.stream_step_us = positive(e, "stream_step_us", w);
    // Optional: without them, the GEMM peak (and gru_gemm_efficiency for bf16 and int8).
    for (auto [key, field] : {std::pair{"gru_gemm_efficiency", &t.gru_gemm_efficiency},
                              {"bf16_gru_efficiency", &t.bf16_gru_efficiency},
                              {"int8_gru_efficiency", &t.int8_gru_efficiency}}) {
      if (!e.contains(key)) continue;
      *field = positive(e, key, w);
      if (*field > 1)
        throw Error(fmt::format("{}: '{}' {} (expected a fraction in [0, 1])", w, key, *field));
    }
    if (!e.contains("read_gbps") || !e["read_gbps"].is_array() || e["read_gbps"].empty())
      throw Error(fmt::format("{}: 'read_gbps' must be a non-empty array of [bytes, GB/s]", w));
    t.read_gbps = curve(e["read_gbps"], "read_gbps", w);
    if (e.contains("stream_gbps"))  // optional: without it, weights stream at read_gbps
      t.stream_gbps = curve(e["stream_gbps"], "stream_gbps", w);
    if (!(t.sgemm_gflops > 0 && t.dgemm_gflops > 0 && t.memcpy_gbps > 0))
      throw Error(fmt::format("{}: GEMM peaks and memcpy bandwidth must be > 0", w));
    p.threads[static_cast<int>(k)] = t;
  }
  // Optional: the link between ranks (mpirun -np K grux calibrate).
  if (j.contains("link")) {
    const auto& l = j["link"];
    const std::string w = what + " (link)";
    if (!l.is_object()) throw Error(fmt::format("{}: expected an object", w));
    p.link.name = optional_text(l, "name", w, "measured");
    p.link.latency_us = positive(l, "latency_us", w);
    p.link.gbit_s = positive(l, "gbit_s", w);
    if (!(p.link.gbit_s > 0)) throw Error(fmt::format("{}: 'gbit_s' must be > 0", w));
  }
  return p;
}

MachineProfile MachineProfile::preset(int max_threads) {
  // Round numbers for a current x86 server core (AVX2 FMA at about 3 GHz), on the low side so
  // that an uncalibrated prediction errs towards "slower"; see docs/cost_model.md.
  MachineProfile p;
  p.source = "preset";
  p.machine = "not calibrated";
  for (int k : {1, std::max(1, max_threads)}) {
    ThreadProfile t;
    t.sgemm_gflops = 100.0 * k;
    t.dgemm_gflops = 50.0 * k;
    t.memcpy_gbps = 10.0;
    t.read_gbps = {{32.0 * 1024, 100.0 * k},
                   {512.0 * 1024, 50.0 * k},
                   {8.0 * 1024 * 1024, 25.0 * k},
                   {256.0 * 1024 * 1024, 10.0}};
    t.step_us = 1.0;
    t.stream_step_us = 2.0;
    p.threads[k] = t;
  }
  return p;
}

std::string default_profile_path() {
  if (const char* e = std::getenv("GRUX_PROFILE"); e && *e) return e;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    return std::string(x) + "/grux/profile.json";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.config/grux/profile.json";
  return "grux-profile.json";
}

MachineProfile load_profile(const std::string& path) {
  const bool given = !path.empty();
  const std::string p = given ? path : default_profile_path();
  std::error_code ec;
  if (!given && !std::filesystem::exists(p, ec)) {
    return MachineProfile::preset(omp_get_num_procs());
  }
  const std::string text = read_file(p, size_t(1) << 24);
  return MachineProfile::from_json(text, p);
}

void apply_overrides(MachineProfile& profile, const ProfileOverrides& o, DType dtype) {
  for (auto [name, v] : {std::pair{"--peak-gflops", o.peak_gflops},
                         {"--mem-gbps", o.mem_gbps},
                         {"--cache-gbps", o.cache_gbps},
                         {"--step-us", o.step_us}})
    if (v < 0 || !std::isfinite(v))
      throw Error(fmt::format("{} {} (expected a number >= 0; 0 keeps the profile's)", name, v));
  bool any = false;
  for (auto& [k, t] : profile.threads) {
    if (o.peak_gflops > 0) {
      (dtype == DType::f64 ? t.dgemm_gflops : t.sgemm_gflops) = o.peak_gflops, any = true;
      t.gru_gemm_efficiency = 0;  // the given rate stands for the GRU's GEMMs too
    }
    if (o.mem_gbps > 0) {
      t.memcpy_gbps = o.mem_gbps;
      if (!t.read_gbps.empty()) t.read_gbps.back().second = o.mem_gbps;
      if (!t.stream_gbps.empty()) t.stream_gbps.back().second = o.mem_gbps;
      any = true;
    }
    if (o.cache_gbps > 0) {
      // Every cache-resident size; the largest measured size stands for memory.
      const size_t n = t.read_gbps.size() > 1 ? t.read_gbps.size() - 1 : t.read_gbps.size();
      for (size_t i = 0; i < n; ++i) t.read_gbps[i].second = o.cache_gbps;
      t.stream_gbps.clear();  // one flat cache rate stands for the kernel's too
      any = true;
    }
    if (o.step_us > 0) t.step_us = t.stream_step_us = o.step_us, any = true;
  }
  if (any) profile.source += " with overrides";
}

double read_bandwidth_at(const ThreadProfile& t, double bytes) {
  return bandwidth_at(t.read_gbps, bytes);
}

double bandwidth_at(const std::vector<std::pair<double, double>>& c, double bytes) {
  if (c.empty()) return 0;
  if (bytes <= c.front().first) return c.front().second;
  if (bytes >= c.back().first) return c.back().second;
  for (size_t i = 1; i < c.size(); ++i)
    if (bytes <= c[i].first) {
      const double f = std::log(bytes / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
      return c[i - 1].second + f * (c[i].second - c[i - 1].second);
    }
  return c.back().second;
}

Prediction predict(const std::vector<Phase>& phases, DType dtype, const MachineProfile& profile,
                   int threads, bool stream) {
  if (threads < 1) throw Error(fmt::format("--threads {} (expected >= 1)", threads));
  Prediction p;
  p.threads = threads;
  const ThreadProfile all = profile.at(threads);
  // Each phase is one kernel of the run: its own roofline, max(compute, traffic); the run's
  // roofline time is their sum.
  double compute_s = 0, traffic_s = 0, roof_s = 0, compute_bound_s = 0, traffic_bound_s = 0;
  double overhead_s = 0;
  for (const Phase& ph : phases) {
    // A phase whose weights split fewer ways than there are threads runs on that many.
    const int team = static_cast<int>(std::clamp<int64_t>(ph.split, 1, threads));
    const ThreadProfile t = team == threads ? all : profile.at(team);
    double peak = dtype == DType::f64 ? t.dgemm_gflops : t.sgemm_gflops;
    // bf16 and int8 phases at their kernels' measured rate (sgemm's when not measured).
    const double lowp = ph.precision == Precision::bf16   ? t.bf16_gflops
                        : ph.precision == Precision::int8 ? t.int8_gflops
                                                          : 0.0;
    if (lowp > 0) peak = lowp;
    // In context, at the fraction measured for the phase's precision (else f32's).
    const double lowp_eff = lowp <= 0                         ? 0.0
                            : ph.precision == Precision::bf16 ? t.bf16_gru_efficiency
                                                              : t.int8_gru_efficiency;
    const double eff = lowp_eff > 0 ? lowp_eff : t.gru_gemm_efficiency;
    if (ph.gru_kernel && eff > 0) peak *= eff;
    double c = 0, m = 0;
    if (ph.gemm_flops > 0 && peak > 0) c = ph.gemm_flops / (peak * 1e9);
    if (ph.weight_bytes > 0) {
      const double bw =
          bandwidth_at(t.stream_gbps.empty() ? t.read_gbps : t.stream_gbps, ph.weight_bytes / team);
      if (bw > 0) m += ph.weight_bytes * ph.weight_passes / (bw * 1e9);
    }
    if (ph.stream_bytes > 0 && all.memcpy_gbps > 0) m += ph.stream_bytes / (all.memcpy_gbps * 1e9);
    compute_s += c;
    traffic_s += m;
    roof_s += std::max(c, m);
    (c >= m ? compute_bound_s : traffic_bound_s) += std::max(c, m);
    // With the measured recurrence rate, a sequence's step costs are inside the traffic
    // time; only what a call through the streaming API adds is left.
    const double step_us = t.stream_gbps.empty()
                               ? (stream ? t.stream_step_us : t.step_us)
                               : (stream ? std::max(0.0, t.stream_step_us - t.step_us) : 0.0);
    overhead_s += ph.steps * step_us * 1e-6;
  }
  p.compute_ms = compute_s * 1e3;
  p.traffic_ms = traffic_s * 1e3;
  p.roofline_ms = roof_s * 1e3;
  p.bound = compute_bound_s >= traffic_bound_s ? "compute" : "traffic";
  p.overhead_ms = overhead_s * 1e3;
  p.ms = p.roofline_ms + p.overhead_ms;
  return p;
}

}  // namespace grux
