// grux._grux: the cost model (cost.h). `cost_ops` lists the operators; `cost_report` computes
// one problem's report and its roofline prediction and returns it as a flat dict whose keys
// are the columns of `grux cost --format csv` (counts and bytes as exact Python ints). The
// Python side (python/grux/_cost.py) adds the argument checks and the module profiler.
#include "grux/cost.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "convert.h"
#include "grux/cost_format.h"
#include "grux/cost_predict.h"
#include "grux/cost_profile.h"
#include "grux/cost_registry.h"
#include "grux/error.h"

namespace py = pybind11;

namespace {

using grux::CostReport;
using grux::CountMode;
using grux::OpCount;
using grux::Prediction;

double ratio(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

// The counts of one phase ("forward", "backward") in the unit `u`: one key per part and the
// total, as cost_fields() names them.
void add_counts(py::dict& d, const char* phase, const std::string& u, const OpCount& c) {
  const std::string p = phase;
  d[py::str(p + "_matmul_" + u)] = c.matmul;
  d[py::str(p + "_bias_" + u)] = c.bias;
  d[py::str(p + "_elementwise_" + u)] = c.elementwise;
  d[py::str(p + "_activation_" + u)] = c.activation;
  d[py::str(p + "_total_" + u)] = c.total();
}

void add_traffic(py::dict& d, const std::string& phase, const grux::TrafficCost& t) {
  d[py::str(phase + "_read_reread_bytes")] = t.reread.read;
  d[py::str(phase + "_written_reread_bytes")] = t.reread.written;
  d[py::str(phase + "_read_cached_bytes")] = t.cached.read;
  d[py::str(phase + "_written_cached_bytes")] = t.cached.written;
}

void add_intensity(py::dict& d, const std::string& phase, const std::string& u, int64_t count,
                   const grux::TrafficCost& t) {
  d[py::str(phase + "_intensity_reread_" + u + "_per_byte")] = ratio(count, t.reread.total());
  d[py::str(phase + "_intensity_cached_" + u + "_per_byte")] = ratio(count, t.cached.total());
}

void add_prediction(py::dict& d, const std::string& phase, const Prediction& p) {
  d[py::str(phase + "_compute_ms")] = p.compute_ms;
  d[py::str(phase + "_traffic_ms")] = p.traffic_ms;
  d[py::str(phase + "_roofline_ms")] = p.roofline_ms;
  d[py::str(phase + "_overhead_ms")] = p.overhead_ms;
  d[py::str(phase + "_predicted_ms")] = p.ms;
  d[py::str(phase + "_bound")] = p.bound;
}

// Where the rates came from, as `grux cost` words it.
std::string profile_label(const grux::MachineProfile& p) {
  if (p.source.rfind("preset", 0) == 0)
    return p.source + " (no profile at " + grux::default_profile_path() + "; run grux calibrate)";
  return p.source;
}

// The report of `op` on `descriptor`. `lengths`: None, a specification string (as --lengths
// takes it) or a sequence of ints (the per-sequence lengths, gru, lstm and mingru only).
CostReport compute(const std::string& op, const std::string& descriptor, const std::string& dtype,
                   bool bias, bool reset_before, const py::object& lengths) {
  grux::CostOptions o;
  o.bias = bias;
  o.form = reset_before ? grux::GruForm::reset_before : grux::GruForm::linear_before_reset;
  o.dtype = grux_py::parse_dtype(dtype);
  if (lengths.is_none() || py::isinstance<py::str>(lengths)) {
    if (!lengths.is_none()) o.lengths = lengths.cast<std::string>();
    return grux::cost_of(op, descriptor, o);
  }
  // Explicit lengths: the registry only takes a specification string, so the operators
  // that have lengths are set up here as the registry does, with the lengths put in place.
  std::vector<int64_t> given;
  try {
    given = lengths.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw grux::Error("lengths: expected None, a specification string or a sequence of ints, got " +
                      std::string(py::str(lengths.get_type().attr("__name__"))));
  }
  grux::find_cost_op(op);  // an unknown operator is reported as such
  if (op == "gru") {
    grux::GruProblem p = grux::GruProblem::parse(descriptor);
    p.bias = o.bias, p.form = o.form, p.dtype = o.dtype, p.lengths = given;
    return grux::gru_cost(p);
  }
  if (op == "lstm") {
    if (o.form != grux::GruForm::linear_before_reset)
      throw grux::Error("lstm takes no --reset-before");
    grux::LstmProblem p = grux::LstmProblem::parse(descriptor);
    p.bias = o.bias, p.dtype = o.dtype, p.lengths = given;
    return grux::lstm_cost(p);
  }
  if (op == "mingru") {
    if (o.form != grux::GruForm::linear_before_reset)
      throw grux::Error("mingru takes no --reset-before");
    grux::MinGruProblem p = grux::MinGruProblem::parse(descriptor);
    p.bias = o.bias, p.dtype = o.dtype, p.lengths = given;
    return grux::mingru_cost(p);
  }
  throw grux::Error(op + " takes no --lengths");
}

}  // namespace

void grux_py::bind_cost(py::module_& m) {
  m.def("cost_ops", [] {
    py::list out;
    for (const grux::CostOp& op : grux::cost_ops()) {
      py::dict d;
      d["name"] = op.name, d["what"] = op.what, d["syntax"] = op.syntax;
      d["example"] = op.example, d["has_bias"] = op.has_bias, d["has_form"] = op.has_form;
      d["has_lengths"] = op.has_lengths;
      out.append(d);
    }
    return out;
  });

  m.def(
      "cost_report",
      [](const std::string& op, const std::string& descriptor,
         const std::vector<std::string>& modes, bool train, const std::string& dtype, bool bias,
         bool reset_before, const py::object& lengths, int threads,
         const std::string& profile_path) {
        std::vector<CountMode> ms;
        for (const std::string& s : modes) ms.push_back(grux::parse_count_mode(s));
        const CostReport r = compute(op, descriptor, dtype, bias, reset_before, lengths);
        const grux::MachineProfile profile = grux::load_profile(profile_path);
        const Prediction inference =
            grux::predict(r.inference_phases, r.dtype, profile, threads, grux::is_stream_op(r.op));

        py::dict d;
        d["op"] = r.op, d["problem"] = r.problem, d["variant"] = r.variant;
        d["dtype"] = std::string(grux::dtype_name(r.dtype));
        for (CountMode mode : ms) {
          const std::string u = grux::count_unit(mode);
          add_counts(d, "forward", u, r.fwd(mode));
          if (train) {
            add_counts(d, "backward", u, r.bwd(mode));
            d[py::str("training_total_" + u)] = r.training_total(mode);
          }
        }
        const grux::MemoryCost& mem = r.memory;
        d["parameters"] = mem.parameters;
        d["parameter_bytes"] = mem.parameter_bytes;
        d["inference_activation_bytes"] = mem.inference_bytes;
        if (train) {
          d["training_activation_bytes"] = mem.training_bytes;
          d["gradient_bytes"] = mem.gradient_bytes;
        }
        add_traffic(d, "inference", r.inference_traffic);
        for (CountMode mode : ms)
          add_intensity(d, "inference", grux::count_unit(mode), r.fwd(mode).total(),
                        r.inference_traffic);
        if (train) {
          add_traffic(d, "training", r.training_traffic);
          for (CountMode mode : ms)
            add_intensity(d, "training", grux::count_unit(mode), r.training_total(mode),
                          r.training_traffic);
        }
        add_prediction(d, "inference", inference);
        if (train)
          add_prediction(d, "training",
                         grux::predict(r.training_phases, r.dtype, profile, threads));
        d["threads"] = threads;
        d["profile"] = profile_label(profile);
        d["profile_machine"] = profile.machine;
        return d;
      },
      py::arg("op"), py::arg("descriptor"), py::arg("modes"), py::arg("train"), py::arg("dtype"),
      py::arg("bias"), py::arg("reset_before"), py::arg("lengths"), py::arg("threads"),
      py::arg("profile_path"));
}
