// `mpiexec -n 2 grux train` end to end (built when MPI is found): the same losses as one
// process, the same files from run to run, Ctrl-C saves and stops every rank, a rank that
// dies ends the job within seconds with the last checkpoint whole, and a batch the ranks
// cannot share is one line on every rank with nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "grux/io.h"
#include "test_util.h"

namespace grux {
namespace {

// Open MPI refuses to run as root (CI does) and to start more processes than cores unless
// told; other MPI implementations ignore these.
const bool kMpiEnv = [] {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
  return true;
}();

using test::CliRun;
using test::TempDir;
using ::testing::HasSubstr;

// `mpiexec -n 2 grux ARGS` with stdout and stderr captured.
CliRun grux_mpi(const std::string& dir, const std::string& args) {
  const std::string o = dir + "/mpi_stdout.txt", e = dir + "/mpi_stderr.txt";
  const int st = std::system((std::string(GRUX_MPIEXEC) + " -n 2 " + GRUX_CLI + " " + args + " >" +
                              o + " 2>" + e + " </dev/null")
                                 .c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), test::slurp(o), test::slurp(e)};
}

// The columns of loss.csv: train_loss per step, and the validation losses present.
struct Curve {
  std::vector<double> train, val;
};
Curve read_curve(const std::string& path) {
  Curve c;
  std::stringstream ss(test::slurp(path));
  std::string line;
  std::getline(ss, line);  // header
  while (std::getline(ss, line)) {
    const size_t a = line.find(','), b = line.find(',', a + 1);
    c.train.push_back(std::stod(line.substr(a + 1, b - a - 1)));
    if (b + 1 < line.size()) c.val.push_back(std::stod(line.substr(b + 1)));
  }
  return c;
}

const std::string kRun =
    "train --steps 24 --layers 2 --hidden 24 --embed 8 --dropout 0.2 --batch 8 --window 16 "
    "--eval-every 8 --quiet";

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

class DistCliCells : public ::testing::TestWithParam<const char*> {};

// The same run on one process and on two (each half the streams, the gradients summed), a GRU
// model and an LSTM one.
TEST_P(DistCliCells, TwoProcessesTrainAsOneAndRepeatExactly) {
  TempDir tmp;
  const std::string run = kRun + " --cell " + GetParam();
  const CliRun one = test::grux_cli(tmp.path, run + " --out " + tmp.path + "/one");
  ASSERT_EQ(one.code, 0) << one.err;
  const CliRun two = grux_mpi(tmp.path, run + " --out " + tmp.path + "/two");
  ASSERT_EQ(two.code, 0) << two.err;
  // Rank 0 alone prints; the header says how the run is split.
  EXPECT_EQ(count(two.err, "grux train:"), 1u) << two.err;
  EXPECT_THAT(two.err, HasSubstr("2 processes x "));
  const Curve a = read_curve(tmp.path + "/one/loss.csv");
  const Curve b = read_curve(tmp.path + "/two/loss.csv");
  ASSERT_EQ(a.train.size(), 24u);
  ASSERT_EQ(b.train.size(), 24u);
  ASSERT_EQ(b.val.size(), a.val.size());
  // loss.csv prints 6 decimals.
  for (size_t i = 0; i < a.train.size(); ++i)
    EXPECT_NEAR(b.train[i], a.train[i], 1e-4 * a.train[i] + 1e-6) << "step " << i + 1;
  for (size_t i = 0; i < a.val.size(); ++i)
    EXPECT_NEAR(b.val[i], a.val[i], 1e-4 * a.val[i] + 1e-6) << "validation " << i;
  const CliRun again = grux_mpi(tmp.path, run + " --out " + tmp.path + "/again");
  ASSERT_EQ(again.code, 0) << again.err;
  const std::string ck = test::slurp(tmp.path + "/two/checkpoint.safetensors");
  EXPECT_FALSE(ck.empty());
  EXPECT_TRUE(ck == test::slurp(tmp.path + "/again/checkpoint.safetensors"))
      << "two 2-process runs wrote different checkpoints";
}

INSTANTIATE_TEST_SUITE_P(Cells, DistCliCells, ::testing::Values("gru", "lstm"));

// Starts `mpiexec -n 2 grux ARGS` in the background; returns when `file` exists (or 60 s).
void start_mpi(const std::string& dir, const std::string& args, const std::string& file) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "(" + string.
  std::string cmd = "(";
  cmd += GRUX_MPIEXEC;
  cmd += " -n 2 " + std::string(GRUX_CLI) + " " + args + " >" + dir + "/bg_stdout.txt 2>" + dir +
         "/bg_stderr.txt </dev/null; echo $? >" + dir + "/bg_rc.txt) &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (int i = 0; i < 600 && !std::filesystem::exists(file); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(std::filesystem::exists(file)) << test::slurp(dir + "/bg_stderr.txt");
}

// Waits for the background job's exit code; -1 after `seconds`.
int wait_mpi(const std::string& dir, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    const std::string rc = test::slurp(dir + "/bg_rc.txt");
    if (!rc.empty() && rc.back() == '\n') return std::stoi(rc);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

const std::string kLong =
    "train --steps 200000 --hidden 16 --embed 8 --batch 4 --window 8 --eval-every 100000 "
    "--checkpoint-every 50 --quiet";

TEST(DistCli, CtrlCSavesAndStopsEveryRankAndOneProcessContinues) {
  TempDir tmp;
  const std::string run =
      "train --steps 3000 --hidden 64 --embed 16 --batch 8 --window 32 --eval-every 1000 "
      "--checkpoint-every 50 --dtype f64 --quiet --out ";
  const std::string out = tmp.path + "/run";
  start_mpi(tmp.path, run + out, out + "/checkpoint.safetensors");
  // Ctrl-C in a terminal: SIGINT to mpiexec, which passes it on to the ranks (Open MPI takes
  // about a second to; the run lasts a few).
  ASSERT_EQ(
      std::system(("pkill -INT -f '^" + std::string(GRUX_MPIEXEC) + " .*" + out + "'").c_str()), 0);
  const int rc = wait_mpi(tmp.path, 30);
  EXPECT_NE(rc, -1) << "mpiexec still running 30 s after SIGINT";
  EXPECT_NE(rc, 0);
  EXPECT_THAT(test::slurp(tmp.path + "/bg_stderr.txt"), HasSubstr("interrupted after"));
  const CliRun show = test::grux_cli(tmp.path, "model show " + out + "/checkpoint.safetensors");
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, ::testing::Not(HasSubstr("(step 3000 of 3000)")));
  // One process continues the 2-process run to the losses of an uninterrupted run.
  const CliRun resume = test::grux_cli(
      tmp.path, "train --resume " + out + "/checkpoint.safetensors --out " + out + " --quiet");
  ASSERT_EQ(resume.code, 0) << resume.err;
  const CliRun whole = test::grux_cli(tmp.path, run + tmp.path + "/whole");
  ASSERT_EQ(whole.code, 0) << whole.err;
  // In f64 the runs agree to the CSV's 6 decimals over thousands of steps. (In f32 two runs
  // that add the same numbers in another order drift apart after several thousand steps, as
  // any two f32 trainings do.)
  const Curve a = read_curve(tmp.path + "/whole/loss.csv"), b = read_curve(out + "/loss.csv");
  ASSERT_EQ(b.train.size(), a.train.size());
  for (size_t i = 0; i < a.train.size(); ++i)
    ASSERT_NEAR(b.train[i], a.train[i], 2e-6) << "step " << i + 1;
  ASSERT_EQ(b.val.size(), a.val.size());
  for (size_t i = 0; i < a.val.size(); ++i)
    EXPECT_NEAR(b.val[i], a.val[i], 2e-6) << "validation " << i;
}

TEST(DistCli, ARankThatDiesEndsTheJobAndLeavesTheCheckpointWhole) {
  TempDir tmp;
  const std::string out = tmp.path + "/run";
  start_mpi(tmp.path, kLong + " --out " + out, out + "/checkpoint.safetensors");
  // Kill one rank (a grux process, not mpiexec) with SIGKILL.
  ASSERT_EQ(
      std::system(("pkill -KILL -n -f '^" + std::string(GRUX_CLI) + " .*" + out + "'").c_str()), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_mpi(tmp.path, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, -1) << "mpiexec still running 30 s after a rank died";
  EXPECT_NE(rc, 0);
  EXPECT_LT(took, 10) << "the job took " << took << " s to end";
  const CliRun show = test::grux_cli(tmp.path, "model show " + out + "/checkpoint.safetensors");
  EXPECT_EQ(show.code, 0) << show.err;
}

TEST(DistCli, ABatchTheRanksCannotShareIsOneLineOnEachWithNothingWritten) {
  TempDir tmp;
  const CliRun r = grux_mpi(tmp.path, "train --steps 3 --batch 15 --out " + tmp.path + "/no");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(count(r.err, "grux: error: --batch 15 is not divisible by the 2 processes"), 2u)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/no"));
}

// `mpiexec -n 2 grux scan`: each rank scans its half of the memory-mapped input and the two
// write one .npy, equal to one process's within the scans' tolerance.
TEST(DistCli, ScansSplitAcrossRanksWriteOneFile) {
  TempDir tmp;
  std::mt19937_64 rng(5);
  write_npy(tmp.path + "/x.npy", test::random_tensor({3, 301, 2}, DType::f64, rng));
  write_npy(tmp.path + "/a.npy", test::random_tensor({3, 301, 2, 2}, DType::f64, rng, 0.5));
  for (const std::string& args :
       {"sum --input " + tmp.path + "/x.npy --dim 1",
        "logaddexp --input " + tmp.path + "/x.npy --dim -2 --reverse --exclusive",
        "affine --a " + tmp.path + "/a.npy --b " + tmp.path + "/x.npy --dim 1"}) {
    const CliRun one = test::grux_cli(tmp.path, "scan " + args + " --out " + tmp.path + "/one.npy");
    ASSERT_EQ(one.code, 0) << one.err;
    const CliRun two = grux_mpi(tmp.path, "scan " + args + " --out " + tmp.path + "/two.npy");
    ASSERT_EQ(two.code, 0) << two.err;
    EXPECT_TRUE(test::all_close(args, "y", read_npy(tmp.path + "/two.npy"),
                                read_npy(tmp.path + "/one.npy"), test::tol_for(DType::f64)));
  }
  // Bad input stops both ranks with one line each and writes nothing.
  const CliRun bad = grux_mpi(
      tmp.path, "scan sum --input " + tmp.path + "/x.npy --dim 3 --out " + tmp.path + "/bad.npy");
  EXPECT_NE(bad.code, 0);
  EXPECT_EQ(count(bad.err, "grux: error: --dim 3 out of range"), 2u) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/bad.npy"));
}

// mpiexec -n 2 grux bench scan: the distributed scan checked against one process's, timed.
TEST(DistCli, BenchScanRunsSplitAcrossRanks) {
  TempDir tmp;
  for (const char* args : {"sum t100000 --reps 2", "affine n2t5000d3 --reps 2",
                           "logaddexp n3t20000c5 --reps 2 --dtype f64"}) {
    const CliRun r = grux_mpi(tmp.path, std::string("bench scan ") + args + " --threads 1");
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(count(r.out, "\"ranks\":2"), 1u) << r.out;  // rank 0 prints
    EXPECT_THAT(r.out, HasSubstr("\"median_ms\":"));
  }
}

// mpiexec -n 2 grux calibrate: the link between the ranks joins the machine's profile, and
// grux cost --ranks predicts with it.
TEST(DistCli, CalibrateMeasuresTheLinkForTheCostModel) {
  TempDir tmp;
  const std::string prof = tmp.path + "/profile.json";
  const CliRun none = grux_mpi(tmp.path, "calibrate --quick --out " + prof);
  EXPECT_NE(none.code, 0);
  EXPECT_EQ(count(none.err, "calibrate this machine first"), 2u) << none.err;
  const CliRun base = test::grux_cli(tmp.path, "calibrate --quick --threads 1 --out " + prof);
  ASSERT_EQ(base.code, 0) << base.err;
  const CliRun link = grux_mpi(tmp.path, "calibrate --quick --out " + prof);
  ASSERT_EQ(link.code, 0) << link.err;
  EXPECT_THAT(link.out, HasSubstr("link between 2 ranks: "));
  const CliRun cost = test::grux_cli(
      tmp.path, "cost charlm l1t64n16e64h512v65 --train --ranks 2 --profile " + prof);
  ASSERT_EQ(cost.code, 0) << cost.err;
  EXPECT_THAT(cost.out, HasSubstr("local, 2 ranks (grux calibrate)"));
}

}  // namespace
}  // namespace grux
