// The self-contained HTML report of a sweep: the template (web/report_template.html, built in)
// with the plotting library and the sweep's JSON inlined, so the file works offline.
#include <fmt/format.h>

#include "cost/cost_util.h"
#include "grux/sweep.h"

namespace grux {
namespace cost_detail {
extern const char* const kReportTemplate;
}

namespace {

// Replaces the one occurrence of `marker` in `text`.
void put(std::string& text, const std::string& marker, const std::string& with) {
  const size_t at = text.find(marker);
  GRUX_ASSERT(at != std::string::npos && text.find(marker, at + 1) == std::string::npos);
  text.replace(at, marker.size(), with);
}

// Text placed inside a <script> element must not close it early: "</" becomes "<\/", which
// means the same inside JavaScript strings and regular expressions, and inside JSON strings.
std::string script_safe(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    r += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') r += '\\';
  }
  return r;
}

}  // namespace

std::string sweep_html(const SweepResult& r, const std::vector<MeasuredPoint>& measured,
                       const std::string& plotly_js) {
  nlohmann::ordered_json j = cost_detail::sweep_json_value(r);
  j["measured"] = nlohmann::json::array();
  for (const MeasuredPoint& m : measured)
    j["measured"].push_back({{"label", m.label},
                             {"intensity", m.intensity},
                             {"gflops", m.gflops},
                             {"phase", m.training ? "training" : "inference"}});
  std::string html = cost_detail::kReportTemplate;
  // The data first: the library's text is large and never contains the data's marker.
  put(html, "/*GRUX_SWEEP_JSON*/", script_safe(j.dump()));
  put(html, "/*GRUX_PLOTLY_JS*/", script_safe(plotly_js));
  return html;
}

}  // namespace grux
