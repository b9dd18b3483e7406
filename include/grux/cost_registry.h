// The cost model's operators by name, as the CLI, the sweep and the Python package reach
// them: each operator's descriptor syntax and options, and the report of one descriptor.
#pragma once

#include <string>
#include <vector>

#include "grux/cost.h"
#include "grux/export.h"

namespace grux GRUX_API {

// Options that are not part of a descriptor string.
struct CostOptions {
  bool bias = true;
  GruForm form = GruForm::linear_before_reset;
  DType dtype = DType::f32;
  Precision precision = Precision::f32;  // gru, gru_stream: the products' precision
  std::string lengths;  // gru, lstm, mingru: SequenceShape::set_lengths specification, "" for all T
};

struct CostOp {
  std::string name;      // "gru"
  std::string what;      // one line for help texts
  std::string syntax;    // "l{L}d{D}t{T}n{N}i{I}h{H}"
  std::string example;   // the default problem of a sweep
  std::string letters;   // the descriptor's letters in order: "ldtnih"
  std::string optional;  // letters that may be omitted: "ld"
  bool has_bias, has_form, has_lengths;
  CostReport (*compute)(const std::string& descriptor, const CostOptions& options);
};
const std::vector<CostOp>& cost_ops();
// Whether `op` is fed one frame per call (gru_stream, lstm_stream): its prediction takes the
// streaming API's per-step cost (predict's `stream`).
bool is_stream_op(const std::string& op);
// Throws grux::Error naming `name` and the known operators.
const CostOp& find_cost_op(const std::string& name);
// Parses `descriptor` for `op`, applies `options` and computes the report. Options the
// operator does not have (e.g. lengths for linear) are errors naming the option.
CostReport cost_of(const std::string& op, const std::string& descriptor,
                   const CostOptions& options);

}  // namespace GRUX_API
