// Rendering one cost report: as a table, CSV, JSON or Markdown, in one or several counting
// conventions, with the roofline predictions when given; and the report's numbers as fields.
#pragma once

#include <string>
#include <vector>

#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/export.h"

namespace grux GRUX_API {

// What to show of a report.
struct CostView {
  std::vector<CountMode> modes{CountMode::seed};  // several: the reconciliation table
  bool train = false;                             // backward and training totals too
  const Prediction* inference = nullptr;          // roofline predictions, when available
  const Prediction* training = nullptr;
  std::string profile;  // where the predictions' rates came from
};

enum class CostFormat { table, csv, json, md };
// Throws grux::Error naming `text` and the accepted names.
CostFormat parse_cost_format(const std::string& text);
std::string format_cost(const CostReport& r, const CostView& view, CostFormat format);

// One number of a report with its unit, as the CSV columns and the sweep's metrics carry it.
// `key` ends with the unit ("forward_total_ops", "parameter_bytes", "predicted_ms").
struct CostField {
  std::string key, label, unit;
  double value = 0;
};
// The fields of one report in one mode (the first of view.modes).
std::vector<CostField> cost_fields(const CostReport& r, const CostView& view);

}  // namespace GRUX_API
