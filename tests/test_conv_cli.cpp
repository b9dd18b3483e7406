// The `grux conv2d` / `grux conv1d` CLI and `grux bench conv2d` end to end: golden round trips
// through files, and every bad-input path: one line on stderr, exit code 2 (3 for a bench
// result that fails its check).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace grux::test_conv_cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using test::CliRun;
using test::expect_user_error;
using test::grux_cli;
using test::slurp;

std::string golden(const std::string& c, const char* what) {
  return std::string(GRUX_GOLDEN_DIR) + "/conv/" + c + "/" + what + ".npy";
}

// Tolerance of a golden comparison: f32 results of reductions of a few hundred terms.
test::Tol tol_of(const std::string& c) {
  return c.find("_f32") != std::string::npos ? test::Tol{1e-4, 1e-4} : test::Tol{1e-10, 1e-10};
}

struct RoundTrip {
  const char* golden;
  const char* command;  // conv2d or conv1d
  const char* options;  // as in gen_conv_golden.py's case
  bool bias;
};

class ConvCliGolden : public ::testing::TestWithParam<std::tuple<RoundTrip, const char*>> {};

TEST_P(ConvCliGolden, WritesWhatPyTorchComputed) {
  const RoundTrip& k = std::get<0>(GetParam());
  const std::string algo = std::get<1>(GetParam());
  test::TempDir tmp;
  std::string args = std::string(k.command) + " --input " + golden(k.golden, "input") +
                     " --weight " + golden(k.golden, "weight") + " --grad-output " +
                     golden(k.golden, "grad_output") + " " + k.options + " --algo " + algo +
                     " --out " + tmp.path + "/out";
  if (k.bias) args += " --bias " + golden(k.golden, "bias");
  const CliRun r = grux_cli(tmp.path, args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  for (const char* t : {"output", "grad_input", "grad_weight", "grad_bias"}) {
    const std::string got = tmp.path + "/out/" + t + ".npy";
    if (std::string(t) == "grad_bias" && !k.bias) {
      EXPECT_FALSE(fs::exists(got));
      continue;
    }
    EXPECT_TRUE(test::all_close(std::string(k.golden) + " " + algo, t, read_npy(got),
                                read_npy(golden(k.golden, t)), tol_of(k.golden)));
  }
}

const RoundTrip kRoundTrips[] = {
    {"c2_basic_f32", "conv2d", "", true},
    {"c2_k5x2_f64", "conv2d", "--stride 2,1 --padding 1,0", true},
    {"c2_mixed_f64", "conv2d", "--stride 2,3 --padding 1,2 --dilation 2,1 --groups 2", false},
    {"c2_depthwise_f32", "conv2d", "--padding 1 --groups 3", true},
    {"c1_mixed_f64", "conv1d", "--stride 2 --padding 2 --dilation 2 --groups 2", false},
};

INSTANTIATE_TEST_SUITE_P(Golden, ConvCliGolden,
                         ::testing::Combine(::testing::ValuesIn(kRoundTrips),
                                            ::testing::Values("loops", "im2col", "toeplitz")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).golden) + "_" +
                                  std::get<1>(info.param);
                         });

TEST(ConvCli, ForwardOnlyWritesNoGradients) {
  test::TempDir tmp;
  const CliRun r = grux_cli(tmp.path, "conv2d --input " + golden("c2_pad1_f32", "input") +
                                          " --weight " + golden("c2_pad1_f32", "weight") +
                                          " --padding 1 --out " + tmp.path + "/out");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp.path + "/out/output.npy"));
  EXPECT_FALSE(fs::exists(tmp.path + "/out/grad_input.npy"));
  // Without the bias the output differs from PyTorch's (which had one) by exactly the bias.
  const Tensor y = read_npy(tmp.path + "/out/output.npy");
  const Tensor want = read_npy(golden("c2_pad1_f32", "output"));
  const Tensor b = read_npy(golden("c2_pad1_f32", "bias"));
  EXPECT_NEAR(want.item({1, 2, 3, 4}) - y.item({1, 2, 3, 4}), b.item({2}), 1e-5);
}

TEST(ConvCli, HelpDocumentsTheOptions) {
  test::TempDir tmp;
  const CliRun r = grux_cli(tmp.path, "conv2d --help");
  EXPECT_EQ(r.code, 0);
  for (const char* p : {"--stride", "--padding", "--dilation", "--groups", "--algo", "toeplitz",
                        "--grad-output", "grad_bias.npy"})
    EXPECT_THAT(r.out, HasSubstr(p));
  const CliRun b = grux_cli(tmp.path, "bench conv2d --help");
  EXPECT_EQ(b.code, 0);
  EXPECT_THAT(b.out, HasSubstr("n{N}c{C}h{H}w{W}d{D}k{K}[s{S}][p{P}][r{R}][g{G}]"));
}

// Bad inputs, starting from a valid problem and breaking one thing at a time.
class ConvCliBad : public ::testing::Test {
 protected:
  test::TempDir tmp;
  const std::string c = "c2_basic_f32";
  std::string x = golden(c, "input"), w = golden(c, "weight"), b = golden(c, "bias");
  std::string dy = golden(c, "grad_output");
  std::string args(const std::string& extra = "") const {
    return "conv2d --input " + x + " --weight " + w + " --bias " + b + " --grad-output " + dy +
           " --out " + tmp.path + "/out " + extra;
  }
  std::string put(const char* name, const Tensor& t) {
    const std::string p = tmp.path + "/" + name;
    write_npy(p, t);
    return p;
  }
};

TEST_F(ConvCliBad, ValidBaselineSucceeds) {
  EXPECT_EQ(grux_cli(tmp.path, args()).code, 0);
}

TEST_F(ConvCliBad, Files) {
  x = tmp.path + "/missing.npy";
  expect_user_error(grux_cli(tmp.path, args()), {"missing.npy"});
  x = tmp.path + "/trunc.npy";
  std::ofstream(x, std::ios::binary) << slurp(golden(c, "input")).substr(0, 100);
  expect_user_error(grux_cli(tmp.path, args()), {"trunc.npy"});
}

TEST_F(ConvCliBad, DtypesAndShapes) {
  w = put("w64.npy", read_npy(w).to(DType::f64));
  expect_user_error(grux_cli(tmp.path, args()), {"w64.npy", "f64", "f32"});
  w = put("w_bad.npy", Tensor::zeros({4, 2, 3, 3}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args()), {"weight", "(4, 2, 3, 3)", "C/groups = 3"});
  w = golden(c, "weight");
  b = put("b_bad.npy", Tensor::zeros({3}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args()), {"bias", "(3,)", "(4,)"});
  b = golden(c, "bias");
  dy = put("dy_bad.npy", Tensor::zeros({2, 4, 5, 4}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args()),
                    {"dy_bad.npy: --grad-output has shape (2, 4, 5, 4), expected the output's "
                     "(2, 4, 5, 3)"});
  dy = golden(c, "grad_output");
  x = put("x_i64.npy", Tensor::zeros({2, 3, 7, 5}, DType::i64));
  expect_user_error(grux_cli(tmp.path, args()), {"x_i64.npy", "i64", "f32 or f64"});
  x = put("x_rank2.npy", Tensor::zeros({7, 5}, DType::f32));
  expect_user_error(grux_cli(tmp.path, args()), {"input", "(7, 5)", "(N, C, H, W)"});
}

TEST_F(ConvCliBad, Options) {
  expect_user_error(grux_cli(tmp.path, args("--stride 2x1")), {"--stride '2x1'", "H,W"});
  expect_user_error(grux_cli(tmp.path, args("--padding 1,2,3")), {"--padding '1,2,3'"});
  expect_user_error(grux_cli(tmp.path, args("--stride 0")), {"stride is (0, 0)", ">= 1"});
  expect_user_error(grux_cli(tmp.path, args("--dilation 1,0")), {"dilation is (1, 0)"});
  expect_user_error(grux_cli(tmp.path, args("--padding -1")), {"padding is (-1, -1)", ">= 0"});
  expect_user_error(grux_cli(tmp.path, args("--groups 2")), {"C = 3", "groups = 2"});
  expect_user_error(grux_cli(tmp.path, args("--groups x")), {"--groups"});
  expect_user_error(grux_cli(tmp.path, args("--algo fft")), {"'fft'", "loops, im2col or toeplitz"});
  expect_user_error(grux_cli(tmp.path, args("--dilation 4")), {"larger than the padded input"});
  expect_user_error(grux_cli(tmp.path, args("--bogus")), {"--bogus"});
  expect_user_error(grux_cli(tmp.path, "conv2d --input " + x), {"--weight"});
  expect_user_error(grux_cli(tmp.path, "conv1d --input " + x + " --weight " + w +
                                           " --stride 1,2 --out " + tmp.path),
                    {"--stride '1,2'", "an integer"});
}

TEST_F(ConvCliBad, ToeplitzTooLarge) {
  x = put("big.npy", Tensor::zeros({1, 64, 56, 56}, DType::f32));
  w = put("big_w.npy", Tensor::zeros({64, 64, 3, 3}, DType::f32));
  const CliRun r = grux_cli(tmp.path, "conv2d --input " + x + " --weight " + w +
                                          " --padding 1 --algo toeplitz --out " + tmp.path);
  expect_user_error(r, {"toeplitz", "MiB", "256 MiB limit"});
}

// ---- grux bench conv2d ---------------------------------------------------------------------

nlohmann::json bench_line(const CliRun& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(ConvBench, PrintsOneCheckedJsonLine) {
  test::TempDir tmp;
  for (const char* algo : {"im2col", "toeplitz", "loops"}) {
    const nlohmann::json j = bench_line(grux_cli(
        tmp.path,
        std::string("bench conv2d n3c4h9w8d6k3p1g2 --train --reps 2 --threads 2 --algo ") + algo));
    EXPECT_EQ(j["op"], "conv2d");
    EXPECT_EQ(j["problem"], "n3c4h9w8d6k3p1g2");
    EXPECT_EQ(j["algo"], algo);
    EXPECT_EQ(j["mode"], "train");
    EXPECT_EQ(j["threads"], 2);
    EXPECT_EQ(j["dtype"], "f32");
    EXPECT_EQ(j["reps"], 2);
    EXPECT_EQ(j["checked"], std::string(algo) == "loops" ? "reference" : "full");
    for (const char* k : {"median_ms", "min_ms"}) EXPECT_GT(j[k].get<double>(), 0) << k;
    EXPECT_GE(j["gflops"].get<double>(), 0);  // printed with 2 decimals: may round to 0
  }
  const nlohmann::json f =
      bench_line(grux_cli(tmp.path, "bench conv2d n2c3h8w8d4k1 --dtype f64 --reps 1"));
  EXPECT_EQ(f["mode"], "forward");
  EXPECT_EQ(f["dtype"], "f64");
}

TEST(ConvBench, LargeProblemsAreCheckedOnOneImage) {
  test::TempDir tmp;
  const nlohmann::json j = bench_line(
      grux_cli(tmp.path, "bench conv2d n4c3h10w10d4k3 --train --reps 1 --full-check-flops 1000"));
  EXPECT_EQ(j["checked"], "batch1");
}

TEST(ConvBench, WrongResultsAndBadArguments) {
  test::TempDir tmp;
  CliRun r = grux_cli(tmp.path, "bench conv2d n2c3h8w8d4k3 --inject-mismatch --reps 1");
  expect_user_error(r, {"differs from the reference", "no time reported"}, 3);
  EXPECT_EQ(r.out, "");
  r = grux_cli(tmp.path,
               "bench conv2d n4c3h10w10d4k3 --train --inject-mismatch --full-check-flops 1000");
  expect_user_error(r, {"image 0", "differs"}, 3);
  expect_user_error(grux_cli(tmp.path, "bench conv2d n2c3h8w8k3"), {"'n2c3h8w8k3'", "malformed"});
  expect_user_error(grux_cli(tmp.path, "bench conv2d n2c3h8w8d4k3g2"), {"multiples of g2"});
  expect_user_error(grux_cli(tmp.path, "bench conv2d n2c3h8w8d4k3 --algo fast"), {"'fast'"});
  expect_user_error(grux_cli(tmp.path, "bench conv2d n1c64h56w56d64k3p1 --algo toeplitz"),
                    {"toeplitz", "256 MiB limit"});
}

}  // namespace
}  // namespace grux::test_conv_cli
