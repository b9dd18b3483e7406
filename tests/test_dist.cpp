// Data parallelism over MPI, run by CTest as `mpiexec -n 2 test_dist` (tests/CMakeLists.txt):
// every rank runs every test; a test that fails on any rank fails the run. The communicator's
// sums are in rank order and the same bits everywhere; a K-process training run's losses
// equal the one-process run's (f64 1e-9, f32 1e-4), its model is the same on every rank and
// from run to run, a checkpoint from K processes continues in one and back, and bad input
// stops every rank with the same error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "grux/dist.h"
#include "grux/io.h"
#include "grux/train.h"
#include "test_util.h"

namespace grux {
namespace {

MpiSession* g_mpi = nullptr;
Communicator& world() {
  return g_mpi->world();
}

std::string corpus(size_t chars) {
  const std::string text = read_file(std::string(GRUX_DATA_DIR) + "/tinyshakespeare.txt");
  return text.substr(0, chars);
}

TrainOptions small_options(DType dtype) {
  TrainOptions o;
  o.model.dtype = dtype;
  o.model.layers = 2;
  o.model.embed = 6;
  o.model.hidden = 10;
  o.model.dropout = 0.25;  // the masks of each rank's streams must be the whole batch's
  o.batch = 4;
  o.window = 7;
  o.steps = 12;
  o.warmup = 3;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  return o;
}

std::vector<double> run_to_end(Trainer& t) {
  std::vector<double> losses;
  while (!t.done()) losses.push_back(t.step().loss);
  return losses;
}

// The model's parameter bytes.
std::string weights(Trainer& t) {
  std::string s;
  for (const Parameter& p : t.model().parameters())
    s.append(static_cast<const char*>(p.value.raw_data()),
             p.value.numel() * dtype_size(p.value.dtype()));
  return s;
}

// A folder every rank sees (rank 0's temporary folder).
struct SharedDir {
  std::unique_ptr<test::TempDir> mine;
  std::string path;
  SharedDir() {
    if (world().rank() == 0) mine = std::make_unique<test::TempDir>();
    path = world().all_gather(mine ? mine->path : "")[0];
  }
};

TEST(DistComm, SumsInRankOrderWithTheSameBitsOnEveryRank) {
  Communicator& c = world();
  const int K = c.size(), r = c.rank();
  ASSERT_GE(K, 2) << "run under mpiexec -n 2 (or more)";
  // Values whose sum depends on the order of the additions: rank 0 holds 1, the others
  // 2^-24 each (f32): in rank order each addition rounds back to 1.
  for (int64_t n : {0, 1, 3, 1000}) {
    std::vector<float> v(n, r == 0 ? 1.0f : 0x1p-24f);
    for (int64_t i = 0; i < n; ++i) v[i] += static_cast<float>(i % 7) * (r == 0 ? 1.0f : 0.0f);
    c.sum(v.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float expect = 1.0f + static_cast<float>(i % 7);
      for (int k = 1; k < K; ++k) expect += 0x1p-24f;
      ASSERT_EQ(v[i], expect) << "n " << n << " i " << i;
    }
    const std::vector<std::string> all =
        c.all_gather(std::string(reinterpret_cast<const char*>(v.data()), n * sizeof(float)));
    for (int k = 1; k < K; ++k) EXPECT_EQ(all[k], all[0]) << "rank " << k << " n " << n;
  }
  std::vector<double> d(5);
  for (int i = 0; i < 5; ++i) d[i] = (r + 1) * 0.1 + i;
  c.sum(d.data(), 5);
  for (int i = 0; i < 5; ++i) {
    double expect = 0;
    for (int k = 0; k < K; ++k) expect += (k + 1) * 0.1 + i;
    EXPECT_EQ(d[i], expect);
  }
}

TEST(DistComm, GathersMessagesOfAnyLength) {
  Communicator& c = world();
  const std::vector<std::string> all = c.all_gather(std::string(c.rank() * 3, 'a' + c.rank()));
  ASSERT_EQ(static_cast<int>(all.size()), c.size());
  for (int k = 0; k < c.size(); ++k) EXPECT_EQ(all[k], std::string(k * 3, 'a' + k));
}

TEST(DistComm, OneRanksErrorIsEveryRanks) {
  Communicator& c = world();
  try {
    agree_no_error(c, c.rank() == 1 ? "cannot read x.npy" : "");
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_STREQ(e.what(), "rank 1: cannot read x.npy");
  }
  EXPECT_NO_THROW(agree_no_error(c, ""));
  try {
    agree_same(c, "settings", c.rank() == 1 ? "lr 0.1" : "lr 0.2");
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_STREQ(e.what(), "rank 1 has a different settings than rank 0: lr 0.1 vs lr 0.2");
  }
}

// The losses of K processes against one, at every step and in validation; the same model on
// every rank; and a second K-process run repeats the first bit for bit.
void expect_same_run(DType dtype, double tol) {
  Communicator& c = world();
  TrainOptions o = small_options(dtype);
  o.batch = 2 * c.size();
  const std::string text = corpus(2000);
  Trainer one(o, text);
  const std::vector<double> expect = run_to_end(one);
  Trainer many(o, text, nullptr, &c);
  const std::vector<double> got = run_to_end(many);
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expect[i], tol * std::abs(expect[i])) << "step " << i + 1;
  EXPECT_NEAR(many.evaluate(), one.evaluate(), tol * one.evaluate());
  const std::vector<std::string> all = c.all_gather(weights(many));
  for (int k = 1; k < c.size(); ++k) EXPECT_EQ(all[k], all[0]) << "rank " << k;
  Trainer again(o, text, nullptr, &c);
  EXPECT_EQ(run_to_end(again), got);
  EXPECT_EQ(weights(again), weights(many));
}

TEST(DistTrain, LossesEqualOneProcessF64) {
  expect_same_run(DType::f64, 1e-9);
}

TEST(DistTrain, LossesEqualOneProcessF32) {
  expect_same_run(DType::f32, 1e-4);
}

TEST(DistTrain, LossesEqualOneProcessInBf16) {
  Communicator& c = world();
  TrainOptions o = small_options(DType::f32);
  o.batch = 2 * c.size();
  o.precision = Precision::bf16;
  const std::string text = corpus(2000);
  Trainer one(o, text);
  Trainer many(o, text, nullptr, &c);
  const std::vector<double> expect = run_to_end(one), got = run_to_end(many);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expect[i], 1e-4 * std::abs(expect[i])) << "step " << i + 1;
}

// A checkpoint holds the whole run: K processes continue a one-process run's checkpoint, and
// one process continues a K-process run's, with the uninterrupted run's losses.
TEST(DistTrain, CheckpointsContinueWithAnyNumberOfProcesses) {
  Communicator& c = world();
  TrainOptions o = small_options(DType::f64);
  o.batch = 2 * c.size();
  const std::string text = corpus(2000);
  Trainer whole(o, text);
  const std::vector<double> expect = run_to_end(whole);
  SharedDir dir;
  const std::string from_many = dir.path + "/many.safetensors";
  const std::string from_one = dir.path + "/one.safetensors";
  {
    Trainer many(o, text, nullptr, &c);
    for (int i = 0; i < 5; ++i) many.step();
    many.save_checkpoint(from_many);
    if (c.rank() == 0) {
      Trainer one(o, text);
      for (int i = 0; i < 5; ++i) one.step();
      one.save_checkpoint(from_one);
    }
    agree_no_error(c, "");  // the files are there before anyone reads them
  }
  Trainer one = Trainer::resume(from_many, text);
  std::vector<double> got(expect.begin(), expect.begin() + 5), rest = run_to_end(one);
  got.insert(got.end(), rest.begin(), rest.end());
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 5; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expect[i], 1e-9 * expect[i]) << "one process from K, step " << i + 1;
  Trainer many = Trainer::resume(from_one, text, &c);
  rest = run_to_end(many);
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_NEAR(rest[i], expect[i + 5], 1e-9 * expect[i + 5])
        << "K processes from one, step " << i + 6;
  EXPECT_EQ(many.history().train_loss.size(), expect.size());
}

TEST(DistTrain, ABatchTheProcessesCannotShareIsRefusedEverywhere) {
  Communicator& c = world();
  TrainOptions o = small_options(DType::f32);
  o.batch = 2 * c.size() + 1;
  try {
    Trainer t(o, corpus(2000), nullptr, &c);
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("is not divisible by the " + std::to_string(c.size()) +
                                         " processes"),
              std::string::npos)
        << e.what();
  }
}

TEST(DistTrain, DifferentSettingsOrDataOnOneRankAreRefusedEverywhere) {
  Communicator& c = world();
  TrainOptions o = small_options(DType::f32);
  o.batch = 2 * c.size();
  TrainOptions other = o;
  other.lr = 2e-2;
  try {
    Trainer t(c.rank() == 1 ? other : o, corpus(2000), nullptr, &c);
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 has a different settings than rank 0"),
              std::string::npos)
        << e.what();
  }
  try {
    Trainer t(o, corpus(c.rank() == 1 ? 2001 : 2000), nullptr, &c);
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 has a different training text (hash)"),
              std::string::npos)
        << e.what();
  }
  // A checkpoint one rank cannot read: every rank stops with that rank's error.
  SharedDir dir;
  {
    Trainer t(o, corpus(2000), nullptr, &c);
    t.step();
    t.save_checkpoint(dir.path + "/ck.safetensors");
  }
  try {
    Trainer::resume(c.rank() == 1 ? dir.path + "/missing.safetensors" : dir.path + "/ck.safetensors",
                    corpus(2000), &c);
    FAIL() << "no error on rank " << c.rank();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace grux

int main(int argc, char** argv) {
  grux::MpiSession mpi;
  grux::g_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  // Every rank's verdict: a failure on rank 1 fails rank 0's exit too.
  double any = failed ? 1 : 0;
  mpi.world().sum(&any, 1);
  if (any > 0 && failed == 0)
    std::fprintf(stderr, "rank %d: passed, but another rank failed\n", mpi.world().rank());
  return any > 0 ? 1 : 0;
}
