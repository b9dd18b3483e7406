// `grux cost` end to end: every output format carries the same numbers with their units, and
// every bad argument is one line on stderr with exit code 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace grux::test_cost_cli {
namespace {

using test::CliRun;
using test::expect_user_error;
using test::grux_cli;

// Every run here sees no calibrated profile unless a test passes --profile: the numbers do not
// depend on the machine's ~/.config.
const bool kHermetic = [] {
  setenv("GRUX_PROFILE", "/nonexistent/grux-test/profile.json", 1);
  return true;
}();
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);) out.push_back(x);
  return out;
}

TEST(CostCli, TableShowsTheSeedExample) {
  test::TempDir tmp;
  const CliRun r = grux_cli(tmp.path, "cost gru_cell n1i256h256");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("forward (ops)"));
  EXPECT_THAT(r.out, HasSubstr("791,808"));
  EXPECT_THAT(r.out, HasSubstr("parameter bytes, f32"));
  EXPECT_THAT(r.out, HasSubstr("weights re-read every step"));
  EXPECT_THAT(r.out, HasSubstr("intensity, inference (ops/byte)"));
}

TEST(CostCli, JsonCarriesUnitsAndTrainingCounts) {
  test::TempDir tmp;
  const CliRun r =
      grux_cli(tmp.path, "cost gru l1d1t100n64i256h512 --train --mode gemm --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["op"], "gru");
  EXPECT_EQ(j["problem"], "l1d1t100n64i256h512");
  EXPECT_EQ(j["counts"]["gemm"]["unit"], "FLOP");
  const int64_t fwd = j["counts"]["gemm"]["forward"]["total"];
  EXPECT_EQ(fwd, 2LL * 6400 * 3 * 512 * (256 + 512));
  EXPECT_EQ(j["counts"]["gemm"]["training_total"].get<int64_t>(), 3 * fwd);
  EXPECT_EQ(j["memory"]["unit"], "bytes");
  EXPECT_EQ(j["memory"]["parameter_bytes"]["f64"].get<int64_t>(),
            2 * j["memory"]["parameter_bytes"]["f32"].get<int64_t>());
  EXPECT_TRUE(j["traffic"]["training"]["cached"].contains("written"));
  EXPECT_EQ(j["intensity"]["gemm"]["unit"], "FLOP/byte");
}

TEST(CostCli, CsvHasUnitsInEveryNumericColumn) {
  test::TempDir tmp;
  const CliRun r = grux_cli(tmp.path, "cost linear b32i256o512 --no-bias --format csv");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 2u);
  const auto head = split(ls[0], ','), row = split(ls[1], ',');
  ASSERT_EQ(head.size(), row.size());
  for (size_t i = 5; i < head.size(); ++i)  // after op, problem, variant, dtype, mode
    EXPECT_TRUE(head[i].ends_with("_ops") || head[i].ends_with("_bytes") ||
                head[i].ends_with("_scalars") || head[i].ends_with("_per_byte") ||
                head[i].ends_with("_ms") || head[i].ends_with("_bound"))
        << head[i];
  const auto at = std::find(head.begin(), head.end(), "forward_total_ops") - head.begin();
  EXPECT_EQ(row[at], std::to_string(32LL * 512 * (2 * 256 - 1)));
}

TEST(CostCli, MarkdownReconciliationTable) {
  test::TempDir tmp;
  const CliRun r = grux_cli(tmp.path, "cost gru_cell n1i256h256 --mode all --format md");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("| forward counts, every mode | seed (ops) | gemm (FLOP) | mac (MAC) |"));
  EXPECT_THAT(r.out, HasSubstr("| total | 791,808 | 786,432 | 393,216 |"));
  EXPECT_THAT(r.out, Not(HasSubstr("backward")));
}

TEST(CostCli, OptionsReachTheModel) {
  test::TempDir tmp;
  auto total = [&](const std::string& args) {
    const CliRun r = grux_cli(tmp.path, "cost " + args + " --format json");
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    return nlohmann::json::parse(r.out)["counts"]["seed"]["forward"]["total"].get<int64_t>();
  };
  EXPECT_EQ(total("gru_cell n1i256h256 --no-bias"), 790272);
  EXPECT_EQ(total("gru_cell n1i256h256 --reset-before"), 791808);
  // Lengths: 64 sequences of 10..100 steps count fewer rows than 64 x 100.
  EXPECT_LT(total("gru l1d1t100n64i128h256 --lengths uniform:10:100:1"),
            total("gru l1d1t100n64i128h256"));
  EXPECT_EQ(total("gru l1d1t100n64i128h256 --lengths uniform:100:100:1"),
            total("gru l1d1t100n64i128h256"));
  const CliRun f64 = grux_cli(tmp.path, "cost linear b2i3o4 --dtype f64 --format json");
  ASSERT_EQ(f64.code, 0) << f64.err;
  EXPECT_EQ(nlohmann::json::parse(f64.out)["dtype"], "f64");
}

TEST(CostCli, BadArgumentsAreOneLineErrors) {
  test::TempDir tmp;
  expect_user_error(grux_cli(tmp.path, "cost rnn n1i2h3"),
                    {"unknown operator 'rnn'", "gru_cell", "lstm_cell"});
  expect_user_error(grux_cli(tmp.path, "cost lstm n1i2h3"), {"malformed", "n1i2h3", "p{P}"});
  expect_user_error(grux_cli(tmp.path, "cost gru l1d1t100n64i256"),
                    {"malformed", "l1d1t100n64i256"});
  expect_user_error(grux_cli(tmp.path, "cost gru l1d1t0n64i256h512"), {"t0", "expected >= 1"});
  expect_user_error(grux_cli(tmp.path, "cost gru_cell n1i0h4"), {"i0", "expected >= 1"});
  expect_user_error(grux_cli(tmp.path, "cost linear b0i1o1"), {"b0"});
  expect_user_error(grux_cli(tmp.path, "cost conv2d n1c3h4w4d2k3g2"), {"multiples of g2"});
  expect_user_error(grux_cli(tmp.path, "cost conv1d n1c1l2d1k5"), {"longer than the padded"});
  expect_user_error(grux_cli(tmp.path, "cost gru_cell n1i2h3 --mode flops"), {"--mode flops"});
  expect_user_error(grux_cli(tmp.path, "cost gru_cell n1i2h3 --format xml"), {"--format xml"});
  expect_user_error(grux_cli(tmp.path, "cost gru_cell n1i2h3 --dtype f16"), {"--dtype f16"});
  expect_user_error(grux_cli(tmp.path, "cost linear b1i2o3 --lengths uniform:1:2:3"),
                    {"linear takes no --lengths"});
  expect_user_error(grux_cli(tmp.path, "cost relu n4 --no-bias"), {"--no-bias"});
  expect_user_error(grux_cli(tmp.path, "cost gru t10n2i3h4 --lengths uniform:5:11:1"),
                    {"--lengths 'uniform:5:11:1'", "T = 10"});
  expect_user_error(grux_cli(tmp.path, "cost gru t10n2i3h4 --lengths uniform:5"), {"malformed"});
  expect_user_error(grux_cli(tmp.path, "cost gru_stream l1d2t10n2i3h4"), {"unidirectional"});
  expect_user_error(grux_cli(tmp.path, "cost gru_cell"), {"expected OP DESCRIPTOR"});
  expect_user_error(grux_cli(tmp.path, "cost"), {"expected OP DESCRIPTOR"});
  expect_user_error(grux_cli(tmp.path, "cost gru l9d2t999999999n999999999i999999999h999999999"),
                    {"does not fit in 64 bits"});
  expect_user_error(grux_cli(tmp.path, "cost scan_matmul t100c4"), {"needs a matrix size d"});
  expect_user_error(grux_cli(tmp.path, "cost scan_sum t100d4"), {"channels c, not d"});
  expect_user_error(grux_cli(tmp.path, "cost mingru l1d2t10n2i3h4"), {"unidirectional"});
}

TEST(CostCli, ScansAndMinGru) {
  test::TempDir tmp;
  const CliRun s = grux_cli(tmp.path, "cost scan_sum t10c3 --train");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("scan_sum t10c3"));
  EXPECT_THAT(s.out, HasSubstr("27"));
  EXPECT_THAT(s.out, HasSubstr("training step"));
  const CliRun m =
      grux_cli(tmp.path, "cost mingru l1t4096n8i256h256 --train --mode gemm --format json");
  ASSERT_EQ(m.code, 0) << m.err;
  const auto j = nlohmann::json::parse(m.out);
  EXPECT_THAT(m.out, HasSubstr("\"op\":\"mingru\""));
  EXPECT_THAT(m.out, HasSubstr(std::to_string(2LL * 4096 * 8 * 512 * 256)));
}

TEST(CostCli, LstmStackStreamAndCell) {
  test::TempDir tmp;
  const CliRun c = grux_cli(tmp.path, "cost lstm_cell n1i256h256 --mode all --format json");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("\"op\":\"lstm_cell\""));
  EXPECT_THAT(c.out, HasSubstr("1056512"));  // NH(8I + 8H + 31), docs/cost_model.md
  const CliRun l = grux_cli(tmp.path,
                            "cost lstm l2d2t200n32i128h256p64 --lengths uniform:10:200:1 --train "
                            "--mode gemm --format csv");
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_THAT(l.out, HasSubstr("lstm,l2d2t200n32i128h256p64"));
  EXPECT_THAT(l.out, HasSubstr("lengths (sum"));
  const CliRun s = grux_cli(tmp.path, "cost lstm_stream l3t48000n1i1h18 --threads 1");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_THAT(s.out, HasSubstr("lstm_stream l3d1t48000n1i1h18"));
  EXPECT_THAT(s.out, HasSubstr("step overhead"));
  expect_user_error(grux_cli(tmp.path, "cost lstm t10n1i2h3 --reset-before"), {"--reset-before"});
  expect_user_error(grux_cli(tmp.path, "cost lstm_stream l1d2t10n1i2h3"), {"unidirectional"});
  const CliRun w = grux_cli(tmp.path,
                            "cost sweep lstm --vary h=8,16 --fixed t10n1i1h8 --format "
                            "csv --out " +
                                tmp.path + "/s.csv");
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_THAT(test::slurp(tmp.path + "/s.csv"), HasSubstr("t10n1i1h16"));
}

TEST(CostCli, PredictionWithThePresetAndWithACalibratedProfile) {
  test::TempDir tmp;
  CliRun r = grux_cli(tmp.path, "cost gru l1d1t100n64i256h512 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the preset (no profile at /nonexistent/grux-test/profile.json; "
                               "run grux calibrate)"));
  EXPECT_THAT(r.out, HasSubstr("predicted (ms)"));
  // A quick calibration at one thread, then predictions from it.
  const std::string prof = tmp.path + "/sub/profile.json";
  r = grux_cli(tmp.path, "calibrate --quick --threads 1 --out " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 thread: sgemm"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + prof));
  const auto pj = nlohmann::json::parse(test::slurp(prof));
  EXPECT_EQ(pj["format"], "grux-profile-1");
  EXPECT_GT(pj["threads"]["1"]["sgemm_gflops"].get<double>(), 0);
  EXPECT_GT(pj["threads"]["1"]["read_gbps"].size(), 1u);
  for (const char* key : {"gru_gemm_efficiency", "bf16_gru_efficiency", "int8_gru_efficiency"}) {
    const double eff = pj["threads"]["1"][key].get<double>();
    EXPECT_GT(eff, 0) << key;
    EXPECT_LE(eff, 1) << key;
  }
  EXPECT_THAT(r.out, HasSubstr("of the GEMM peak (bf16 "));
  const double eff = pj["threads"]["1"]["gru_gemm_efficiency"].get<double>();
  r = grux_cli(tmp.path,
               "cost gru l1d1t100n64i256h512 --train --threads 1 --format json --profile " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prediction"]["profile"], prof);
  EXPECT_EQ(j["prediction"]["threads"], 1);
  for (const char* phase : {"inference", "training"}) {
    const auto& p = j["prediction"][phase];
    EXPECT_GT(p["predicted_ms"].get<double>(), 0) << phase;
    EXPECT_TRUE(p["bound"] == "compute" || p["bound"] == "traffic") << phase;
    // The sum over phases of each phase's max: at least the larger side, at most both.
    EXPECT_GE(p["roofline_ms"].get<double>(),
              std::max(p["compute_ms"].get<double>(), p["traffic_ms"].get<double>()) * (1 - 1e-12));
    EXPECT_LE(p["roofline_ms"].get<double>(),
              (p["compute_ms"].get<double>() + p["traffic_ms"].get<double>()) * (1 + 1e-12));
  }
  // W3's predicted inference compute time from this profile, with more options.
  const auto w3_compute_ms = [&](const std::string& options) {
    const CliRun run =
        grux_cli(tmp.path, "cost gru l1d1t100n64i256h512 --threads 1 --format json " + options +
                               " --profile " + prof);
    EXPECT_EQ(run.code, 0) << run.err;
    return run.code != 0 ? -1.0
                         : nlohmann::json::parse(run.out)["prediction"]["inference"]["compute_ms"]
                               .get<double>();
  };
  // Without overrides the GRU's GEMMs run at the measured fraction of the peak.
  const double peak = pj["threads"]["1"]["sgemm_gflops"].get<double>();
  EXPECT_NEAR(w3_compute_ms(""), 15099.4944 / (peak * eff), 1e-6 * 15099.4944 / (peak * eff));
  // In bf16, at the bf16 rate and the fraction measured in bf16.
  const double bf16 = pj["threads"]["1"]["bf16_gflops"].get<double>() *
                      pj["threads"]["1"]["bf16_gru_efficiency"].get<double>();
  EXPECT_NEAR(w3_compute_ms("--precision bf16"), 15099.4944 / bf16, 1e-6 * 15099.4944 / bf16);
  // Overrides: a GEMM peak of 1 GFLOP/s makes W3 take 15.1 s of compute (the override stands
  // for the GRU's GEMMs too).
  EXPECT_NEAR(w3_compute_ms("--peak-gflops 1"), 15099.4944, 1e-3);
  // grux bench --predict prints predicted next to measured.
  r = grux_cli(tmp.path,
               "bench gru l1d1t20n2i8h16 --reps 1 --threads 1 --predict --profile " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  auto b = nlohmann::json::parse(r.out);
  EXPECT_GT(b["predicted_ms"].get<double>(), 0);
  // The printed times are rounded: the ratio agrees to the rounding of median_ms (4 decimals).
  const double ratio = b["predicted_ms"].get<double>() / b["median_ms"].get<double>();
  EXPECT_NEAR(b["predicted_over_measured"].get<double>(), ratio,
              2e-3 + ratio * 1e-4 / b["median_ms"].get<double>());
  EXPECT_EQ(b["profile"], prof);
  // The cell path's overhead is what a streamed step costs beyond a sequence's step. A quick
  // calibration on a loaded machine may measure those two either way round, so this profile
  // states them: 5 us against 2 us gives 3 us per step, 20 steps, 0.06 ms.
  auto stated = pj;
  stated["threads"]["1"]["step_us"] = 2.0;
  stated["threads"]["1"]["stream_step_us"] = 5.0;
  const std::string stated_prof = tmp.path + "/stated.json";
  std::ofstream(stated_prof) << stated.dump();
  r = grux_cli(tmp.path, "bench gru t20n1i8h16 --cell --reps 1 --threads 1 --predict --profile " +
                             stated_prof);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NEAR(nlohmann::json::parse(r.out)["predicted_overhead_ms"].get<double>(), 0.06, 1e-9);
  r = grux_cli(
      tmp.path,
      "bench conv2d n1c2h8w8d2k3 --train --reps 1 --threads 1 --predict --profile " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  b = nlohmann::json::parse(r.out);
  EXPECT_GT(b["predicted_ms"].get<double>(), 0);
  EXPECT_EQ(b["checked"], "full");
}

TEST(CostCli, ProfileErrors) {
  test::TempDir tmp;
  expect_user_error(grux_cli(tmp.path, "cost gru t1n1i1h1 --profile " + tmp.path + "/missing.json"),
                    {"missing.json"});
  std::ofstream(tmp.path + "/bad.json") << "{\"format\": \"something else\"}";
  expect_user_error(grux_cli(tmp.path, "cost gru t1n1i1h1 --profile " + tmp.path + "/bad.json"),
                    {"bad.json", "not a grux profile"});
  expect_user_error(grux_cli(tmp.path, "bench gru t2n1i1h1 --reps 1 --predict --profile " +
                                           tmp.path + "/bad.json"),
                    {"not a grux profile"});
  expect_user_error(grux_cli(tmp.path, "cost gru t1n1i1h1 --mem-gbps -3"), {"--mem-gbps"});
  expect_user_error(grux_cli(tmp.path, "calibrate --threads 0 --out " + tmp.path + "/p.json"),
                    {"--threads '0'"});
  expect_user_error(grux_cli(tmp.path, "calibrate --threads 1,x --out " + tmp.path + "/p.json"),
                    {"'x'"});
}

TEST(CostCli, SweepCsvAndJson) {
  test::TempDir tmp;
  const std::string csv = tmp.path + "/s.csv", json = tmp.path + "/s.json";
  CliRun r = grux_cli(tmp.path,
                      "cost sweep gru --vary n=1..8:x2 --vary h=64,96 --fixed "
                      "l1d1t10n3i32h16 --format csv --out " +
                          csv);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(8 points)"));
  const auto ls = lines(test::slurp(csv));
  ASSERT_EQ(ls.size(), 9u);
  const auto head = split(ls[0], ',');
  EXPECT_EQ(head[0], "n");
  EXPECT_EQ(head[1], "h");
  EXPECT_EQ(head[2], "descriptor");
  // The last axis varies fastest; every point is the cost of its own descriptor.
  const auto row = split(ls[4], ',');
  EXPECT_EQ(row[0], "2");
  EXPECT_EQ(row[1], "96");
  EXPECT_EQ(row[2], "l1d1t10n2i32h96");
  const auto col = std::find(head.begin(), head.end(), "forward_total_ops") - head.begin();
  const CliRun one = grux_cli(tmp.path, "cost gru l1d1t10n2i32h96 --format json");
  EXPECT_EQ(
      row[col],
      std::to_string(
          nlohmann::json::parse(one.out)["counts"]["seed"]["forward"]["total"].get<int64_t>()));

  r = grux_cli(tmp.path,
               "cost sweep linear --vary b=1..4 --train --mode mac --format json --out " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(test::slurp(json));
  EXPECT_EQ(j["op"], "linear");
  EXPECT_EQ(j["fixed"], "b32i256o512");
  EXPECT_EQ(j["unit"], "MAC");
  EXPECT_EQ(j["axes"][0]["values"], nlohmann::json::parse("[1,2,3,4]"));
  ASSERT_EQ(j["points"].size(), 4u);
  EXPECT_EQ(j["points"][2]["descriptor"], "b3i256o512");
  bool found = false;
  for (size_t m = 0; m < j["metrics"].size(); ++m) {
    EXPECT_FALSE(j["metrics"][m]["unit"].get<std::string>().empty());
    if (j["metrics"][m]["key"] == "training_total_MAC") {
      found = true;
      EXPECT_EQ(j["points"][2]["values"][m].get<double>(), 3.0 * 3 * 256 * 512);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GT(j["profile"]["peak_gflops"].get<double>(), 0);
  // Nothing but the outputs is left in the folder (atomic writes clean up after themselves).
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
    ++files;
  }
  EXPECT_EQ(files, 4u);  // s.csv, s.json, stdout.txt, stderr.txt
}

TEST(CostCli, SweepErrors) {
  test::TempDir tmp;
  const std::string out = " --out " + tmp.path + "/x.csv";
  auto sweep = [&](const std::string& args) { return grux_cli(tmp.path, "cost sweep " + args); };
  expect_user_error(sweep("gru --vary n=1..x --format csv" + out),
                    {"--vary 'n=1..x' is malformed"});
  expect_user_error(sweep("gru --vary n1..4 --format csv" + out), {"malformed"});
  expect_user_error(sweep("gru --vary n=8..4 --format csv" + out), {"LO 8 is above HI 4"});
  expect_user_error(sweep("gru --vary n=1..8:x1 --format csv" + out), {"factor >= 2"});
  expect_user_error(sweep("gru --vary n=1..8:+0 --format csv" + out), {"step must be >= 1"});
  expect_user_error(sweep("gru --vary q=1..4 --format csv" + out), {"no letter 'q'"});
  expect_user_error(sweep("gru --vary n=1..4 --vary n=2..3 --format csv" + out), {"given twice"});
  expect_user_error(sweep("gru --vary n=1..999 --vary h=1..999 --format csv" + out),
                    {"more than 20000 points"});
  expect_user_error(sweep("gru --vary n=0..2 --format csv" + out), {"sweep point", "n0"});
  expect_user_error(sweep("conv2d --vary k=1..9 --fixed n1c1h4w4d1k3 --format csv" + out),
                    {"sweep point n1c1h4w4d1k5", "larger than the padded input"});
  expect_user_error(sweep("gru --vary n=1..2 --fixed l1d1t10 --format csv" + out), {"malformed"});
  expect_user_error(sweep("conv2d --vary k=1..3 --fixed n1c1h8w8d1k3x5 --format csv" + out),
                    {"one value per letter", "'x5'"});
  expect_user_error(sweep("gru --vary n=1..2 --format xml" + out), {"--format xml"});
  expect_user_error(sweep("gru --vary n=1..2 --mode all --format csv" + out), {"--mode all"});
  expect_user_error(sweep("rnn --vary n=1..2 --format csv" + out), {"unknown operator 'rnn'"});
  expect_user_error(
      sweep("gru --vary n=1..2 --format csv --out " + tmp.path + "/no/such/dir/x.csv"),
      {"no/such/dir"});
  expect_user_error(sweep("gru --format csv" + out), {"--vary"});
}

TEST(CostCli, SweepHtmlInlinesTheLibraryAndTheData) {
  test::TempDir tmp;
  // A stand-in for the plotting library, with a closing tag that must not end the script.
  const std::string lib = tmp.path + "/lib.js", html = tmp.path + "/r.html";
  std::ofstream(lib) << "var Plotly = {}; var s = '</script>';";
  const std::string bench = tmp.path + "/bench.jsonl";
  std::ofstream(bench) << "{\"op\":\"gru\",\"problem\":\"l1d1t100n64i128h256_len10-100s1\","
                          "\"mode\":\"inference\",\"threads\":2,\"gflops\":100.5}\n"
                          "{\"op\":\"gemm\",\"problem\":\"m8n8k8\",\"gflops\":1}\n";
  CliRun r = grux_cli(tmp.path,
                      "cost sweep gru_cell --vary n=1..4 --vary h=8,16 --format html "
                      "--plotly " +
                          lib + " --bench " + bench + " --out " + html);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string page = test::slurp(html);
  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(page, HasSubstr("var Plotly = {}; var s = '<\\/script>';"));
  EXPECT_THAT(page, Not(HasSubstr("/*GRUX_PLOTLY_JS*/")));
  EXPECT_THAT(page, Not(HasSubstr("/*GRUX_SWEEP_JSON*/")));
  // The data: 8 points, and the measured run placed with the cost model (the gemm line is the
  // peak itself and is skipped).
  const size_t at = page.find("<script id=\"grux-data\" type=\"application/json\">");
  ASSERT_NE(at, std::string::npos);
  const size_t from = page.find('>', at) + 1, to = page.find("</script>", from);
  const auto j = nlohmann::json::parse(page.substr(from, to - from));
  EXPECT_EQ(j["op"], "gru_cell");
  EXPECT_EQ(j["points"].size(), 8u);
  ASSERT_EQ(j["measured"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["measured"][0]["gflops"].get<double>(), 100.5);
  EXPECT_GT(j["measured"][0]["intensity"].get<double>(), 0);
  EXPECT_EQ(j["points"][0]["roofline"]["inference"].size(), 2u);

  expect_user_error(grux_cli(tmp.path, "cost sweep gru --vary n=1..2 --format html --plotly " +
                                           tmp.path + "/none.js --out " + html),
                    {"needs plotly.js", "none.js", "scripts/install-web-assets.sh"});
  std::ofstream(tmp.path + "/bad.jsonl") << "{\"op\":\"gru\",\"problem\":\"x\",\"gflops\":1}\n";
  expect_user_error(
      grux_cli(tmp.path, "cost sweep gru --vary n=1..2 --format html --plotly " + lib +
                             " --bench " + tmp.path + "/bad.jsonl --out " + html),
      {"bad.jsonl line 1", "malformed"});
  std::ofstream(tmp.path + "/junk.jsonl") << "\nnot json\n";
  expect_user_error(
      grux_cli(tmp.path, "cost sweep gru --vary n=1..2 --format html --plotly " + lib +
                             " --bench " + tmp.path + "/junk.jsonl --out " + html),
      {"junk.jsonl line 2", "not a JSON line"});
}

}  // namespace
}  // namespace grux::test_cost_cli

namespace grux::test_cost_cli {
namespace {

// --ranks: the problem on K ranks on each link, and the scaling table to 64 machines (as far
// as the split dimension divides).
TEST(CostCli, RanksPredictTheStepOnEachLinkAndTheScaling) {
  test::TempDir tmp;
  test::CliRun r =
      test::grux_cli(tmp.path,
                     "cost charlm l1t64n16e64h512v65 --train --ranks 2 --threads 1 --format json "
                     "--link-gbit-s 1 --link-latency-us 100");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& k = j["ranks"];
  EXPECT_EQ(k["ranks"], 2);
  EXPECT_EQ(k["per_rank"], "l1t64n8e64h512v65");
  ASSERT_EQ(k["links"].size(), 3u);  // the given link, then the two presets
  EXPECT_EQ(k["links"][0]["link"], "given");
  // 1 Gbit/s: the gradients (3.7 MB, 2 (K - 1) / K of them each way) take 30 ms, 10x 10 Gbit/s.
  EXPECT_NEAR(k["links"][0]["comm_ms"].get<double>(), 30.0, 0.1);
  EXPECT_GT(k["links"][0]["comm_ms"].get<double>(), 9 * k["links"][1]["comm_ms"].get<double>());
  for (const auto& l : k["links"])
    EXPECT_NEAR(l["ms"].get<double>(), l["compute_ms"].get<double>() + l["comm_ms"].get<double>(),
                1e-9);
  ASSERT_EQ(k["scaling"].size(), 5u);  // 1, 2, 4, 8, 16: the batch of 16 divides no further
  EXPECT_EQ(k["scaling"][4]["ranks"], 16);
  EXPECT_NEAR(k["scaling"][0]["10 Gbit/s Ethernet"]["speedup"].get<double>(), 1.0, 1e-12);
  const CliRun t = test::grux_cli(tmp.path, "cost scan_sum t16777216 --ranks 4");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("on 4 ranks: each runs t4194304"));
  EXPECT_THAT(t.out, HasSubstr("scaling of scan_sum t16777216 to 64 machines"));
  for (const char* bad : {"cost charlm l1t64n16e64h512v65 --train --ranks 3",
                          "cost charlm l1t64n16e64h512v65 --ranks 2 --format csv",
                          "cost linear b8i4o4 --ranks 2", "cost scan_sum t64 --train --ranks 2",
                          "cost gru l1d1t4n4i4h4 --ranks 2 --link-gbit-s -1"}) {
    const CliRun e = test::grux_cli(tmp.path, bad);
    EXPECT_EQ(e.code, 2) << bad;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << bad << ": " << e.err;
  }
}

TEST(CostCli, SweepsOverTheNumberOfRanks) {
  test::TempDir tmp;
  const CliRun r =
      test::grux_cli(tmp.path,
                     "cost sweep charlm --fixed l1t64n64e64h256v65 --vary ranks=1..64:x2 --train "
                     "--format csv --out " +
                         tmp.path + "/s.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string csv = test::slurp(tmp.path + "/s.csv");
  EXPECT_THAT(csv, HasSubstr("ranks,descriptor"));
  EXPECT_THAT(csv, HasSubstr("step_10gbit_ms"));
  EXPECT_THAT(csv, HasSubstr("speedup_100gbit_x"));
  EXPECT_THAT(csv, HasSubstr("\n64,l1t64n64e64h256v65,"));
  const CliRun bad =
      test::grux_cli(tmp.path,
                     "cost sweep charlm --fixed l1t64n64e64h256v65 --vary ranks=3 --train --format "
                     "csv --out " +
                         tmp.path + "/b.csv");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("on 3 ranks"));
}

}  // namespace
}  // namespace grux::test_cost_cli
