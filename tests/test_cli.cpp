// The `grux gru` conformance CLI end to end: files in, files out, compared with PyTorch's
// golden results; and every bad-input path: one line on stderr, exit code 2, no crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grux/dist.h"
#include "grux/gru.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using test::CliRun;
using test::expect_user_error;
using test::grux_cli;
using test::slurp;

SafeTensors golden(const std::string& name) {
  return read_safetensors(std::string(GRUX_GOLDEN_DIR) + "/" + name + ".safetensors");
}

// Writes a golden case's inputs as the CLI's files; returns the CLI arguments.
std::string write_inputs(const SafeTensors& g, const std::string& dir, bool grad_out,
                         bool grad_hn) {
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0) w[k.substr(2)] = v;
  write_safetensors(dir + "/w.safetensors", w);
  std::string args = "gru --weights " + dir + "/w.safetensors --out " + dir + "/out";
  auto put = [&](const char* key, const char* flag) {
    if (!g.tensors.count(key)) return;
    write_npy(dir + "/" + key + ".npy", g.tensors.at(key));
    args += std::string(" ") + flag + " " + dir + "/" + key + ".npy";
  };
  put("input", "--input");
  put("h0", "--h0");
  put("lengths", "--lengths");
  if (grad_out) put("grad_output", "--grad-output");
  if (grad_hn) put("grad_h_n", "--grad-hn");
  return args;
}

struct CliCase {
  const char* golden;
  bool batch_first;
};

class CliGolden : public ::testing::TestWithParam<CliCase> {};

TEST_P(CliGolden, WritesOutputsAndGradientsMatchingPyTorch) {
  const CliCase& k = GetParam();
  test::TempDir tmp;
  const SafeTensors g = golden(k.golden);
  const bool has_dy = g.tensors.count("grad_output"), has_dhn = g.tensors.count("grad_h_n");
  std::string args = write_inputs(g, tmp.path, has_dy, has_dhn);
  if (k.batch_first) args += " --batch-first";
  CliRun r = grux_cli(tmp.path, args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string out = tmp.path + "/out/";
  const test::Tol tol = test::tol_for(g.tensors.at("input").dtype());
  EXPECT_TRUE(test::all_close(k.golden, "output", read_npy(out + "output.npy"),
                              g.tensors.at("output"), tol));
  EXPECT_TRUE(
      test::all_close(k.golden, "h_n", read_npy(out + "h_n.npy"), g.tensors.at("h_n"), tol));
  EXPECT_TRUE(test::all_close(k.golden, "grad_input", read_npy(out + "grad_input.npy"),
                              g.tensors.at("grad.input"), tol));
  EXPECT_EQ(fs::exists(out + "grad_h0.npy"), g.tensors.count("h0") == 1);
  if (g.tensors.count("h0")) {
    EXPECT_TRUE(test::all_close(k.golden, "grad_h0", read_npy(out + "grad_h0.npy"),
                                g.tensors.at("grad.h0"), tol));
  }
  const SafeTensors dw = read_safetensors(out + "grad_weights.safetensors");
  size_t n = 0;
  for (const auto& [key, v] : g.tensors) {
    if (key.rfind("grad.", 0) != 0 || key == "grad.input" || key == "grad.h0") continue;
    ++n;
    ASSERT_TRUE(dw.tensors.count(key.substr(5))) << key;
    EXPECT_TRUE(test::all_close(k.golden, key, dw.tensors.at(key.substr(5)), v, tol));
  }
  EXPECT_EQ(dw.tensors.size(), n);
}

INSTANTIATE_TEST_SUITE_P(Golden, CliGolden,
                         ::testing::Values(CliCase{"gru_l2_bidir_lengths_bf_h0_f64", true},
                                           CliCase{"gru_l2_bidir_lengths_bf_h0_f32", true},
                                           CliCase{"gru_unbatched_l2_bidir_h0_f32", false},
                                           CliCase{"gru_gradhn_bidir_lengths_f64", false},
                                           CliCase{"gru_gradout_bidir_lengths_f32", false},
                                           CliCase{"gru_nobias_bidir_lengths_f64", false}),
                         [](const auto& info) { return std::string(info.param.golden); });

TEST(Cli, ForwardOnlyWritesNoGradients) {
  test::TempDir tmp;
  CliRun r = grux_cli(tmp.path, write_inputs(golden("gru_basic_f32"), tmp.path, false, false));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp.path + "/out/output.npy"));
  EXPECT_TRUE(fs::exists(tmp.path + "/out/h_n.npy"));
  EXPECT_FALSE(fs::exists(tmp.path + "/out/grad_input.npy"));
  EXPECT_FALSE(fs::exists(tmp.path + "/out/grad_weights.safetensors"));
}

TEST(Cli, ResetBeforeMatchesTheApi) {
  test::TempDir tmp;
  const SafeTensors g = golden("gru_l2_bidir_lengths_bf_h0_f64");
  CliRun r =
      grux_cli(tmp.path, write_inputs(g, tmp.path, true, true) + " --batch-first --reset-before");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0) w[k.substr(2)] = v;
  GruConfig o;
  o.batch_first = true;
  o.form = GruForm::reset_before;
  Gru gru = Gru::from_state_dict(w, o);
  GruOutput y = gru.forward(g.tensors.at("input"), g.tensors.at("h0"), g.tensors.at("lengths"));
  EXPECT_EQ(max_abs_diff(read_npy(tmp.path + "/out/output.npy"), y.output), 0.0);
  // And it is not the linear-before-reset answer.
  EXPECT_GT(max_abs_diff(y.output, g.tensors.at("output")), 1e-4);
}

// --precision bf16 / int8: the output is GruInference's at that precision, near PyTorch's f32
// golden output (within the precision's scale) and not equal to it; f64 arrays and gradients
// are refused in one line.
TEST(Cli, PrecisionRunsGruInferenceAtThatPrecision) {
  const SafeTensors g = golden("gru_lengths_h0_f32");
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0) w[k.substr(2)] = v;
  const Gru gru = Gru::from_state_dict(w);
  for (const char* p : {"bf16", "int8"}) {
    test::TempDir tmp;
    CliRun r = grux_cli(tmp.path, write_inputs(g, tmp.path, false, false) + " --precision " + p);
    ASSERT_EQ(r.code, 0) << p << ": " << r.err;
    const Tensor out = read_npy(tmp.path + "/out/output.npy");
    const GruOutput y =
        GruInference(gru, parse_precision(p))
            .forward(g.tensors.at("input"), g.tensors.at("h0"), g.tensors.at("lengths"));
    EXPECT_EQ(max_abs_diff(out, y.output), 0.0) << p;
    EXPECT_EQ(max_abs_diff(read_npy(tmp.path + "/out/h_n.npy"), y.h_n), 0.0) << p;
    const double err = max_abs_diff(out, g.tensors.at("output"));
    EXPECT_LT(err, 0.05) << p;
    EXPECT_GT(err, 1e-6) << p;
  }
  test::TempDir tmp;
  const std::string args = write_inputs(g, tmp.path, false, true);
  expect_user_error(grux_cli(tmp.path, args + " --precision fp8"), {"fp8", "bf16"});
  expect_user_error(grux_cli(tmp.path, args + " --precision int8"),
                    {"--precision int8", "--grad-hn"});
  const SafeTensors g64 = golden("gru_basic_f64");
  test::TempDir tmp64;
  expect_user_error(
      grux_cli(tmp64.path, write_inputs(g64, tmp64.path, false, false) + " --precision bf16"),
      {"float32", "f64"});
}

// GRUX_LOWP_PORTABLE=0 in the environment at start-up switches the portable low-precision
// kernels off: on a SIMD target below AVX-512 a bf16 request is one line, exit 2.
TEST(Cli, LowpPortableZeroRefusesThePortableKernels) {
  const std::string below = test::target_below_avx512();
  GRUX_SKIP_WITHOUT_TARGET_BELOW_AVX512(below);
  const SafeTensors g = golden("gru_lengths_h0_f32");
  test::TempDir tmp;
  const std::string args = write_inputs(g, tmp.path, false, false) + " --precision bf16";
  const char* saved = std::getenv("GRUX_SIMD_TARGET");
  const std::string saved_target = saved ? saved : "";
  setenv("GRUX_SIMD_TARGET", below.c_str(), 1);
  ASSERT_EQ(grux_cli(tmp.path, args).code, 0);  // portable kernels allowed by default
  setenv("GRUX_LOWP_PORTABLE", "0", 1);
  expect_user_error(grux_cli(tmp.path, args), {"precision bf16 needs", "GRUX_LOWP_PORTABLE=0"});
  unsetenv("GRUX_LOWP_PORTABLE");
  if (saved)
    setenv("GRUX_SIMD_TARGET", saved_target.c_str(), 1);
  else
    unsetenv("GRUX_SIMD_TARGET");
}

TEST(Cli, InfoNamesThePrecisionKernels) {
  test::TempDir tmp;
  CliRun r = grux_cli(tmp.path, "info");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("precision kernels: bf16 " + precision_kernel(Precision::bf16) +
                               ", int8 " + precision_kernel(Precision::int8)));
  // And whether it can run as many processes.
  EXPECT_THAT(r.out, HasSubstr(mpi_available() ? "mpi: " + mpi_library() + " (mpirun"
                                               : std::string("mpi: no (built without")));
}

TEST(Cli, HelpAndUsageErrors) {
  test::TempDir tmp;
  CliRun help = grux_cli(tmp.path, "gru --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--grad-output"));
  expect_user_error(grux_cli(tmp.path, "gru --input x.npy"), {"--weights"});
  expect_user_error(grux_cli(tmp.path, "gru --weights w --input x --out o --bogus"), {"--bogus"});
  expect_user_error(grux_cli(tmp.path, ""), {"subcommand"});
}

// Bad inputs of every kind, starting from a valid problem and breaking one file at a time.
class CliBadInput : public ::testing::Test {
 protected:
  test::TempDir tmp;
  SafeTensors g = golden("gru_lengths_h0_f32");
  std::string args;
  void SetUp() override { args = write_inputs(g, tmp.path, true, true); }
  std::string p(const char* f) { return tmp.path + "/" + f; }
  void write_raw(const char* f, const std::string& bytes) {
    std::ofstream(p(f), std::ios::binary) << bytes;
  }
};

TEST_F(CliBadInput, ValidBaselineSucceeds) {
  EXPECT_EQ(grux_cli(tmp.path, args).code, 0);
}

TEST_F(CliBadInput, MissingFile) {
  fs::remove(p("input.npy"));
  expect_user_error(grux_cli(tmp.path, args), {"input.npy"});
}

TEST_F(CliBadInput, TruncatedNpy) {
  const std::string bytes = slurp(p("input.npy"));
  write_raw("input.npy", bytes.substr(0, bytes.size() - 7));
  expect_user_error(grux_cli(tmp.path, args), {"input.npy", "truncated"});
  write_raw("input.npy", bytes.substr(0, 20));
  expect_user_error(grux_cli(tmp.path, args), {"input.npy"});
}

TEST_F(CliBadInput, UnsupportedNpyDtype) {
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
  header += std::string(128 - 10 - header.size() - 1, ' ') + "\n";  // data at byte 128
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  write_raw("input.npy", bytes + header + std::string(8, '\0'));
  expect_user_error(grux_cli(tmp.path, args), {"input.npy", "<i4"});
}

TEST_F(CliBadInput, MixedDtypes) {
  write_npy(p("h0.npy"), g.tensors.at("h0").to(DType::f64));
  expect_user_error(grux_cli(tmp.path, args), {"h0.npy", "f64", "mixed"});
  write_npy(p("h0.npy"), g.tensors.at("h0"));
  write_npy(p("input.npy"), g.tensors.at("input").to(DType::f64));
  expect_user_error(grux_cli(tmp.path, args), {"w.safetensors", "mixed"});
}

TEST_F(CliBadInput, WrongShapes) {
  write_npy(p("h0.npy"), Tensor::zeros({2, 2, 2}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args), {"h0", "(2, 2, 2)"});
  write_npy(p("h0.npy"), g.tensors.at("h0"));
  write_npy(p("grad_output.npy"), Tensor::zeros({1, 2, 3}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args),
                    {"grad_output.npy: --grad-output has shape (1, 2, 3), expected the output's"});
  write_npy(p("grad_output.npy"), g.tensors.at("grad_output"));
  write_npy(p("grad_h_n.npy"), Tensor::zeros({3}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args),
                    {"grad_h_n.npy: --grad-hn has shape (3,), expected h_n's (1, 4, 6)"});
  write_npy(p("grad_h_n.npy"), g.tensors.at("grad_h_n"));
  write_npy(p("input.npy"), Tensor::zeros({2, 3, 4, 5}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args), {"input", "(2, 3, 4, 5)"});
}

TEST_F(CliBadInput, LengthsOutOfRangeOrWrongDtype) {
  const int64_t N = g.tensors.at("lengths").numel();
  Tensor bad = Tensor::full({N}, 99, DType::i64);
  write_npy(p("lengths.npy"), bad);
  expect_user_error(grux_cli(tmp.path, args), {"lengths[0] = 99"});
  write_npy(p("lengths.npy"), Tensor::full({N}, 1, DType::f32));
  expect_user_error(grux_cli(tmp.path, args), {"lengths.npy", "i64"});
}

TEST_F(CliBadInput, MalformedWeights) {
  write_raw("w.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  expect_user_error(grux_cli(tmp.path, args), {"w.safetensors"});
  write_raw("w.safetensors", "");
  expect_user_error(grux_cli(tmp.path, args), {"w.safetensors"});
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0 && k != "w.bias_hh_l0") w[k.substr(2)] = v;
  write_safetensors(p("w.safetensors"), w);
  expect_user_error(grux_cli(tmp.path, args), {"w.safetensors", "bias_hh_l0"});
}

TEST_F(CliBadInput, OutputDirectoryIsAFile) {
  write_raw("out", "x");
  expect_user_error(grux_cli(tmp.path, args), {"out", "directory"});
}

TEST(CliBench, GruPrintsOneCheckedJsonLine) {
  test::TempDir tmp;
  for (const char* extra : {"", " --train", " --reset-before --dtype f64",
                            " --lengths uniform:2:7:3", " --prepacked --lengths uniform:2:7:3"}) {
    CliRun r =
        grux_cli(tmp.path, std::string("bench gru l2d2t7n5i3h17 --threads 1 --reps 2") + extra);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    for (const char* field :
         {"\"op\":\"gru\"", "\"problem\":\"l2d2t7n5i3h17", "\"median_ms\":", "\"min_ms\":",
          "\"gflops\":", "\"pct_of_gemm_peak\":", "\"gemm_peak_n\":", "\"checked\":true"})
      EXPECT_THAT(r.out, HasSubstr(field)) << extra;
    // One thread hands nothing over.
    EXPECT_THAT(r.out, Not(HasSubstr("handoff_ns"))) << extra;
    EXPECT_EQ(r.out.find("\"prepacked\":true") != std::string::npos,
              std::string(extra).find("--prepacked") != std::string::npos)
        << extra;
  }
  // bf16 and int8: checked against the reference twins, with the kernel and the error vs f32.
  int peak_as_f32 = 0;  // runs whose peak printed equal to the f32 GEMM's best rate
  for (const char* extra :
       {" --precision bf16", " --precision bf16 --train --lengths uniform:2:7:3",
        " --precision bf16 --train --reset-before", " --precision int8 --cell",
        " --precision int8 --lengths uniform:2:7:3 --reset-before"}) {
    CliRun r =
        grux_cli(tmp.path, std::string("bench gru l2d1t7n5i3h17 --threads 1 --reps 2") + extra);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.err;
    for (const char* field :
         {"\"precision_kernel\":", "\"max_abs_diff_vs_f32\":", "\"checked\":true"})
      EXPECT_THAT(r.out, HasSubstr(field)) << extra;
    EXPECT_THAT(r.out, HasSubstr(std::string(extra).find("bf16") != std::string::npos
                                     ? "\"precision\":\"bf16\""
                                     : "\"precision\":\"int8\""));
    // The peak is the low-precision GEMM's (its own measurement), not the f32 rates. Where bf16
    // runs at f32's rate (AVX2 widens it to f32) one run's two may print alike; all five not.
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const double peak = j["gemm_peak_gflops"].get<double>();
    if (peak == std::max(j["blas_gflops"].get<double>(), j["grux_gemm_gflops"].get<double>()))
      ++peak_as_f32;
    // Within the printed digits: pct to 0.1, gflops and the peak to 0.01 (a sanitized build
    // runs this tiny problem at a few hundredths of a GFLOP/s).
    const double gflops = j["gflops"].get<double>(), pct = j["pct_of_gemm_peak"].get<double>();
    ASSERT_GT(gflops, 0) << extra;
    EXPECT_NEAR(pct, 100 * gflops / peak, 0.1 + pct * (0.006 / gflops + 0.006 / peak)) << extra;
  }
  EXPECT_LT(peak_as_f32, 5) << "every low-precision run printed the f32 GEMM's rate as its peak";
  CliRun cell = grux_cli(tmp.path, "bench gru t9n2i3h5 --cell --threads 1 --reps 2");
  ASSERT_EQ(cell.code, 0) << cell.err;
  EXPECT_THAT(cell.out, HasSubstr("\"mode\":\"cell\""));
  // One f32 sequence: per-frame figures and the bound, the longest of its three parts.
  CliRun rt = grux_cli(tmp.path, "bench gru t40n1i1h20 --cell --threads 1 --reps 1 --block 4");
  ASSERT_EQ(rt.code, 0) << rt.err;
  const auto field = [&](const std::string& key) {
    const size_t at = rt.out.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key << " in " << rt.out;
    return at == std::string::npos ? -1.0 : std::stod(rt.out.substr(at + key.size() + 3));
  };
  const double chain = field("chain_ns"), work = field("work_ns"), weights = field("weights_ns");
  EXPECT_GT(field("ns_per_frame"), 0);
  EXPECT_GT(field("weights_gbps"), 0);
  for (double part : {chain, work, weights}) EXPECT_GT(part, 0) << rt.out;
  const double bound = std::max({chain, work, weights});
  EXPECT_NEAR(field("bound_ns_per_frame"), bound, 0.051) << rt.out;
  const size_t side = rt.out.find("\"bound_side\":\"");
  ASSERT_NE(side, std::string::npos) << rt.out;
  const std::string name = rt.out.substr(side + 14, rt.out.find('"', side + 14) - side - 14);
  EXPECT_NEAR(field(name + "_ns"), bound, 0.051) << "bound_side " << name << ": " << rt.out;
  // Two threads: the round trip between them, a positive number of ns.
  CliRun two = grux_cli(tmp.path, "bench gru t9n2i3h40 --threads 2 --reps 2");
  ASSERT_EQ(two.code, 0) << two.err;
  const size_t at = two.out.find("\"handoff_ns\":");
  ASSERT_NE(at, std::string::npos) << two.out;
  EXPECT_GT(std::stod(two.out.substr(at + 13)), 0) << two.out;
  CliRun gemm = grux_cli(tmp.path, "bench gemm --threads 1 --reps 1");
  ASSERT_EQ(gemm.code, 0) << gemm.err;
  EXPECT_THAT(gemm.out, HasSubstr("\"op\":\"gemm\""));
}

// A shape: grux's general GEMM and the BLAS on it, medians, spreads and their ratio, every
// transpose and both dtypes (odd sizes: partial panels and row blocks).
TEST(CliBench, GemmShapes) {
  test::TempDir tmp;
  struct Shape {
    const char* name;
    double M, N, K;
  };
  for (const Shape& sh : {Shape{"m37n53k29", 37, 53, 29}, Shape{"m70n17k300ta", 70, 17, 300},
                          Shape{"m5n80k33tb", 5, 80, 33}, Shape{"m13n49k70tatb", 13, 49, 70}})
    for (const char* dtype : {"f32", "f64"}) {
      const std::string shape = sh.name, extra = shape + " " + dtype;
      CliRun r =
          grux_cli(tmp.path, "bench gemm " + shape + " --threads 1 --reps 3 --dtype " + dtype);
      ASSERT_EQ(r.code, 0) << r.err << extra;
      const nlohmann::json j = nlohmann::json::parse(r.out);
      EXPECT_EQ(j["problem"], shape);
      EXPECT_EQ(j["dtype"], dtype);
      EXPECT_EQ(j["checked"], "rows");
      EXPECT_EQ(j["trans_a"], shape.find("ta") != std::string::npos) << extra;
      EXPECT_EQ(j["trans_b"], shape.find("tb") != std::string::npos) << extra;
      const double med = j["median_ms"], lo = j["min_ms"], hi = j["max_ms"];
      EXPECT_GT(lo, 0) << extra;
      EXPECT_LE(lo, med) << extra;
      EXPECT_LE(med, hi) << extra;
      // Times printed to 6 significant digits, the rest to 0.1, 0.01 and 0.001.
      EXPECT_NEAR(j["spread_pct"].get<double>(), 100 * (hi / lo - 1), 0.06 + 1e-3 * hi / lo)
          << extra;
      const double gflops = 2 * sh.M * sh.N * sh.K / (med * 1e6);
      EXPECT_NEAR(j["gflops"].get<double>(), gflops, 0.006 + gflops * 1e-5) << extra;
      const double blas = j["blas_median_ms"];
      if (blas > 0) {
        EXPECT_NEAR(j["vs_blas"].get<double>(), blas / med, 6e-4 + blas / med * 1e-5) << extra;
      } else {
        EXPECT_EQ(j["vs_blas"].get<double>(), 0) << extra;
      }
    }
  CliRun wrong = grux_cli(tmp.path, "bench gemm m9n9k9 --threads 1 --reps 1 --inject-mismatch");
  EXPECT_EQ(wrong.code, 3);
  EXPECT_EQ(wrong.out, "");
  EXPECT_THAT(wrong.err, HasSubstr("reference"));
  for (const char* bad : {"m0n5k5", "m5n5", "m5n5k5tc", "n5m5k5", "m5n5k2000000", "m5n5k5ta2"})
    expect_user_error(grux_cli(tmp.path, std::string("bench gemm ") + bad), {bad});
  expect_user_error(grux_cli(tmp.path, "bench gemm m900000n900000k900000"), {"GiB", "memory"});
}

TEST(CliBench, RefusesToTimeAWrongResult) {
  test::TempDir tmp;
  CliRun r = grux_cli(tmp.path, "bench gru t5n2i3h4 --threads 1 --reps 1 --inject-mismatch");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("differs from the reference"));
}

TEST(CliBench, BadArguments) {
  test::TempDir tmp;
  expect_user_error(grux_cli(tmp.path, "bench gru l1d3t5n2i3h4"), {"d3"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n0i3h4"), {"n0"});
  expect_user_error(grux_cli(tmp.path, "bench gru x100"), {"malformed"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --lengths uniform:1:9:1"), {"T = 5"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --dtype f16"), {"f16"});
  expect_user_error(grux_cli(tmp.path, "bench gru l1d2t5n2i3h4 --cell"), {"unidirectional"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --train --cell"), {"--cell"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --prepacked --train"),
                    {"--prepacked", "--train"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --cell --prepacked"),
                    {"--prepacked", "--cell"});
  expect_user_error(grux_cli(tmp.path, "bench gru t100000n100000i1000h1000"), {"GiB", "memory"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --precision fp16"), {"fp16"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --precision int8 --train"),
                    {"--precision int8", "inference", "--train"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --precision bf16 --train --dtype f64"),
                    {"--precision bf16", "f64"});
  expect_user_error(grux_cli(tmp.path, "bench gru t5n2i3h4 --precision int8 --dtype f64"),
                    {"--precision int8", "f64"});
}

}  // namespace
}  // namespace grux::test_cli
