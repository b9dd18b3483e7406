// `grux scan` and `grux bench scan` as a user runs them: results written to .npy match the
// library, every bad input is one line on stderr with exit code 2, a wrong benchmark result
// exits with code 3.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "grux/io.h"
#include "grux/scan.h"
#include "grux/tensor_ops.h"
#include "test_util.h"

namespace grux::test_scan_cli {
namespace {

using test::all_close;
using test::CliRun;
using test::expect_user_error;
using test::grux_cli;
using test::random_tensor;
using test::TempDir;
using test::Tol;

TEST(ScanCli, ElementwiseAndMatmulMatchTheLibrary) {
  TempDir dir;
  std::mt19937_64 rng(1);
  const Tensor x = random_tensor({5, 9, 3}, DType::f32, rng);
  write_npy(dir.path + "/x.npy", x);
  for (const char* op : {"sum", "prod", "max", "min", "logaddexp"})
    for (const char* flags : {"", " --exclusive", " --reverse", " --exclusive --reverse"}) {
      const CliRun r =
          grux_cli(dir.path, fmt::format("scan {} --input {}/x.npy --dim -2{} --out {}/y.npy", op,
                                         dir.path, flags, dir.path));
      ASSERT_EQ(r.code, 0) << r.err;
      ScanOptions o;
      o.exclusive = std::string(flags).find("exclusive") != std::string::npos;
      o.reverse = std::string(flags).find("reverse") != std::string::npos;
      EXPECT_TRUE(all_close(std::string(op) + flags, "y", read_npy(dir.path + "/y.npy"),
                            prefix_scan(x, -2, parse_scan_op(op), o), Tol{0, 0}));
    }
  const Tensor m = random_tensor({6, 4, 4}, DType::f64, rng);
  write_npy(dir.path + "/m.npy", m);
  const CliRun r = grux_cli(
      dir.path,
      fmt::format("scan matmul --input {0}/m.npy --dim 0 --reverse --out {0}/y.npy", dir.path));
  ASSERT_EQ(r.code, 0) << r.err;
  ScanOptions o;
  o.reverse = true;
  EXPECT_TRUE(all_close("matmul", "y", read_npy(dir.path + "/y.npy"),
                        prefix_scan(m, 0, ScanOp::matmul, o), Tol{0, 0}));
}

TEST(ScanCli, AffineForms) {
  TempDir dir;
  std::mt19937_64 rng(2);
  const Tensor a = mul(random_tensor({7, 2, 3}, DType::f64, rng), 0.5);
  const Tensor b = random_tensor({7, 2, 3}, DType::f64, rng);
  const Tensor h0 = random_tensor({2, 3}, DType::f64, rng);
  const Tensor A = random_tensor({7, 2, 3, 3}, DType::f64, rng);
  write_npy(dir.path + "/a.npy", a);
  write_npy(dir.path + "/b.npy", b);
  write_npy(dir.path + "/h0.npy", h0);
  write_npy(dir.path + "/A.npy", A);
  CliRun r = grux_cli(dir.path, fmt::format("scan affine --a {0}/a.npy --b {0}/b.npy --h0 "
                                            "{0}/h0.npy --dim 0 --reverse --out {0}/h.npy",
                                            dir.path));
  ASSERT_EQ(r.code, 0) << r.err;
  AffineScanOptions o;
  o.reverse = true;
  EXPECT_TRUE(all_close("diag", "h", read_npy(dir.path + "/h.npy"), affine_scan(a, b, 0, h0, o),
                        Tol{0, 0}));
  r = grux_cli(
      dir.path,
      fmt::format("scan affine --a {0}/A.npy --b {0}/b.npy --dim 0 --out {0}/h.npy", dir.path));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(
      all_close("matrix", "h", read_npy(dir.path + "/h.npy"), affine_scan(A, b, 0), Tol{0, 0}));
  // Log space on positive terms.
  write_npy(dir.path + "/pa.npy", sigmoid(a));
  write_npy(dir.path + "/pb.npy", exp(b));
  r = grux_cli(
      dir.path,
      fmt::format("scan affine --a {0}/pa.npy --b {0}/pb.npy --dim 0 --log-space --out {0}/h.npy",
                  dir.path));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(all_close("log", "h", read_npy(dir.path + "/h.npy"),
                        affine_scan(sigmoid(a), exp(b), 0), Tol{1e-12, 1e-12}));
}

TEST(ScanCli, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  write_npy(dir.path + "/x.npy", Tensor::zeros({4, 3}, DType::f32));
  write_npy(dir.path + "/sq.npy", Tensor::zeros({4, 3, 2}, DType::f32));
  write_npy(dir.path + "/a.npy", Tensor::full({4, 3}, -1.0, DType::f32));
  write_npy(dir.path + "/b.npy", Tensor::full({4, 3}, 1.0, DType::f32));
  write_npy(dir.path + "/b64.npy", Tensor::full({4, 3}, 1.0, DType::f64));
  write_npy(dir.path + "/b5.npy", Tensor::full({5, 3}, 1.0, DType::f32));
  write_npy(dir.path + "/i.npy", Tensor::zeros({4}, DType::i64));
  const std::string d = dir.path;
  expect_user_error(grux_cli(d, "scan sum --input " + d + "/x.npy --dim 2 --out " + d + "/y.npy"),
                    {"dim 2 out of range", "rank 2"});
  expect_user_error(
      grux_cli(d, "scan matmul --input " + d + "/sq.npy --dim 0 --out " + d + "/y.npy"),
      {"square matrices"});
  expect_user_error(grux_cli(d, "scan sum --input " + d + "/i.npy --dim 0 --out " + d + "/y.npy"),
                    {"expected float32 or float64"});
  expect_user_error(
      grux_cli(d, "scan sum --input " + d + "/missing.npy --dim 0 --out " + d + "/y.npy"),
      {"missing.npy"});
  expect_user_error(
      grux_cli(d, "scan cumsum --input " + d + "/x.npy --dim 0 --out " + d + "/y.npy"),
      {"unknown scan op 'cumsum'"});
  expect_user_error(grux_cli(d, "scan affine --a " + d + "/a.npy --b " + d +
                                    "/b5.npy --dim 0 --out " + d + "/y.npy"),
                    {"expected a of b's shape"});
  expect_user_error(grux_cli(d, "scan affine --a " + d + "/a.npy --b " + d +
                                    "/b64.npy --dim 0 --out " + d + "/y.npy"),
                    {"mixed dtypes"});
  expect_user_error(grux_cli(d, "scan affine --a " + d + "/a.npy --b " + d +
                                    "/b.npy --dim 0 --log-space --out " + d + "/y.npy"),
                    {"log space needs a, b and h0 > 0", "a[0, 0] = -1"});
  expect_user_error(
      grux_cli(d, "scan affine --a " + d + "/a.npy --b " + d + "/b.npy --out " + d + "/y.npy"),
      {"--dim is required"});
  expect_user_error(
      grux_cli(d, "scan sum --input " + d + "/x.npy --dim 0 --bogus 1 --out " + d + "/y.npy"),
      {"unexpected arguments: --bogus 1"});
  EXPECT_FALSE(std::ifstream(d + "/y.npy").good()) << "no output may be left behind";
  expect_user_error(grux_cli(d, "bench scan sum x5"), {"scan descriptor 'x5' is malformed"});
  expect_user_error(grux_cli(d, "bench scan matmul t100"), {"needs a matrix size"});
  expect_user_error(grux_cli(d, "bench scan affine t100 --log-space --reps 0"), {"--reps 0"});
}

TEST(ScanCli, BenchPrintsOneCheckedJsonLine) {
  TempDir dir;
  for (const char* args : {"sum t100000", "affine n3t500c40", "affine t300d5", "matmul t50d8",
                           "logaddexp n2t1000c3", "affine t2000c2 --log-space"}) {
    const CliRun r =
        grux_cli(dir.path, std::string("bench scan ") + args + " --reps 2 --threads 2");
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_GT(j.at("median_ms").get<double>(), 0) << args;
    EXPECT_GE(j.at("pct_of_limit").get<double>(), 0) << args;
    EXPECT_GT(j.value("limit_gbps", 0.0) + j.value("limit_gflops", 0.0), 0) << args;
  }
  const CliRun bad = grux_cli(dir.path, "bench scan sum t1000 --reps 1 --inject-mismatch");
  EXPECT_EQ(bad.code, 3) << bad.err;
  EXPECT_THAT(bad.err, ::testing::HasSubstr("reference kernels give"));
}

}  // namespace
}  // namespace grux::test_scan_cli
