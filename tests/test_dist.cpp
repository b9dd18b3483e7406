// Data parallelism over MPI, run by CTest as `mpiexec -n 2 test_dist` (tests/CMakeLists.txt):
// every rank runs every test; a test that fails on any rank fails the run. The communicator's
// sums are in rank order and the same bits everywhere; a K-process training run's losses
// equal the one-process run's (f64 1e-9, f32 1e-4), its model is the same on every rank and
// from run to run, a checkpoint from K processes continues in one and back, and bad input
// stops every rank with the same error.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "grux/dist.h"
#include "grux/io.h"
#include "grux/tensor_ops.h"
#include "grux/train.h"
#include "test_util.h"

namespace grux {
namespace {

MpiSession* g_mpi = nullptr;
Communicator& world() {
  return g_mpi->world();
}

// The message of the CollectiveError that f must throw on every rank ("" after a failure when
// it throws none).
template <class F>
std::string collective_error(F&& f) {
  try {
    f();
  } catch (const CollectiveError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error on rank " << world().rank();
  return "";
}

// Expects what to contain part.
void expect_has(const std::string& what, const std::string& part) {
  EXPECT_NE(what.find(part), std::string::npos) << what;
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
  EXPECT_EQ(collective_error([&] { agree_no_error(c, c.rank() == 1 ? "cannot read x.npy" : ""); }),
            "rank 1: cannot read x.npy");
  EXPECT_NO_THROW(agree_no_error(c, ""));
  EXPECT_EQ(
      collective_error([&] { agree_same(c, "settings", c.rank() == 1 ? "lr 0.1" : "lr 0.2"); }),
      "rank 1 has a different settings than rank 0: lr 0.1 vs lr 0.2");
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
  expect_has(collective_error([&] { Trainer t(o, corpus(2000), nullptr, &c); }),
             "is not divisible by the " + std::to_string(c.size()) + " processes");
}

TEST(DistTrain, DifferentSettingsOrDataOnOneRankAreRefusedEverywhere) {
  Communicator& c = world();
  TrainOptions o = small_options(DType::f32);
  o.batch = 2 * c.size();
  TrainOptions other = o;
  other.lr = 2e-2;
  expect_has(
      collective_error([&] { Trainer t(c.rank() == 1 ? other : o, corpus(2000), nullptr, &c); }),
      "rank 1 has a different settings than rank 0");
  expect_has(
      collective_error([&] { Trainer t(o, corpus(c.rank() == 1 ? 2001 : 2000), nullptr, &c); }),
      "rank 1 has a different training text (hash)");
  // A checkpoint one rank cannot read: every rank stops with that rank's error.
  SharedDir dir;
  {
    Trainer t(o, corpus(2000), nullptr, &c);
    t.step();
    t.save_checkpoint(dir.path + "/ck.safetensors");
  }
  const std::string what = collective_error([&] {
    Trainer::resume(
        c.rank() == 1 ? dir.path + "/missing.safetensors" : dir.path + "/ck.safetensors",
        corpus(2000), &c);
  });
  expect_has(what, "rank 1: ");
  expect_has(what, "missing.safetensors");
}

// ---- Distributed scans ---------------------------------------------------------------

// This rank's positions of a sequence of length T split unevenly (rank 0 takes more, rank 1 of
// three takes none: the empty chunk must pass the totals on).
std::pair<int64_t, int64_t> uneven(int64_t T, int r, int K) {
  std::vector<int64_t> cut{0};
  for (int k = 0; k < K; ++k) {
    const int64_t n = k == 0 ? T / 2 : (k == 1 && K > 2 ? 0 : (T - T / 2) / (K - 1));
    cut.push_back(std::min(T, cut.back() + n));
  }
  cut.back() = T;
  return {cut[r], cut[r + 1]};
}

::testing::AssertionResult close_part(const std::string& what, const Tensor& got,
                                      const Tensor& whole, int64_t dim, int64_t t0, int64_t t1) {
  return test::all_close(what + " on rank " + std::to_string(world().rank()), "y", got,
                         whole.slice(dim, t0, t1), test::tol_for(whole.dtype()));
}

TEST(DistScan, EveryBuiltInOpForwardReverseExclusiveEqualsOneProcess) {
  Communicator& c = world();
  std::mt19937_64 rng(21);
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = test::random_tensor({3, 101, 2}, dt, rng, 0.3);
    const auto [t0, t1] = uneven(101, c.rank(), c.size());
    for (ScanOp op : {ScanOp::sum, ScanOp::prod, ScanOp::max, ScanOp::min, ScanOp::logaddexp})
      for (bool rev : {false, true})
        for (bool excl : {false, true}) {
          ScanOptions o;
          o.reverse = rev;
          o.exclusive = excl;
          const std::string what = fmt::format("{} {}{}{}", scan_op_name(op), dtype_name(dt),
                                               rev ? " reverse" : "", excl ? " exclusive" : "");
          const Tensor y = dist_prefix_scan(c, x.slice(1, t0, t1), 1, op, o);
          EXPECT_TRUE(close_part(what, y, prefix_scan(x, 1, op, o), 1, t0, t1));
        }
    // Cumulative matrix products keep their order across the ranks.
    const Tensor m = test::random_tensor({37, 2, 3, 3}, dt, rng, 0.6);
    const auto [m0, m1] = uneven(37, c.rank(), c.size());
    for (bool rev : {false, true}) {
      ScanOptions o;
      o.reverse = rev;
      EXPECT_TRUE(close_part(rev ? "matmul reverse" : "matmul",
                             dist_prefix_scan(c, m.slice(0, m0, m1), 0, ScanOp::matmul, o),
                             prefix_scan(m, 0, ScanOp::matmul, o), 0, m0, m1));
    }
  }
}

TEST(DistScan, ACallableCombineWithItsIdentity) {
  Communicator& c = world();
  std::mt19937_64 rng(22);
  const Tensor x = test::random_tensor({64, 4}, DType::f64, rng);
  const auto [t0, t1] = uneven(64, c.rank(), c.size());
  // Addition as a callable: its totals and identity travel as tensors like the built-ins'.
  ScanFn add_fn = [](const Tensor& e, const Tensor& l) { return add(e, l); };
  ScanOptions o, builtin;
  o.exclusive = builtin.exclusive = true;
  o.identity = Tensor::zeros({4}, DType::f64);
  o.threads = 1;
  EXPECT_TRUE(close_part("callable sum exclusive",
                         dist_prefix_scan(c, x.slice(0, t0, t1), 0, add_fn, o),
                         prefix_scan(x, 0, ScanOp::sum, builtin), 0, t0, t1));
}

TEST(DistScan, AffineRecurrencesEqualOneProcess) {
  Communicator& c = world();
  std::mt19937_64 rng(23);
  const int64_t T = 83;
  const auto [t0, t1] = uneven(T, c.rank(), c.size());
  for (DType dt : {DType::f32, DType::f64}) {
    // Diagonal, linear and log space, forward and reverse, with an initial state.
    Tensor a = add(mul(test::random_tensor({4, T}, dt, rng), 0.05), 0.9);
    Tensor b = test::random_tensor({4, T}, dt, rng);
    Tensor h0 = test::random_tensor({4}, dt, rng);
    for (bool rev : {false, true}) {
      AffineScanOptions o;
      o.reverse = rev;
      const std::string what = std::string("diagonal ") + dtype_name(dt) + (rev ? " reverse" : "");
      EXPECT_TRUE(close_part(what,
                             dist_affine_scan(c, a.slice(1, t0, t1), b.slice(1, t0, t1), 1, h0, o),
                             affine_scan(a, b, 1, h0, o), 1, t0, t1));
      o.log_space = true;
      const Tensor bp = abs(b), hp = abs(h0);
      EXPECT_TRUE(close_part(what + " log space",
                             dist_affine_scan(c, a.slice(1, t0, t1), bp.slice(1, t0, t1), 1, hp, o),
                             affine_scan(a, bp, 1, hp, o), 1, t0, t1));
    }
    // Matrix: a_t is 3 x 3 applied to b's last dimension.
    Tensor am = mul(test::random_tensor({2, T, 3, 3}, dt, rng), 0.4);
    Tensor bm = test::random_tensor({2, T, 3}, dt, rng);
    Tensor hm = test::random_tensor({2, 3}, dt, rng);
    for (bool rev : {false, true}) {
      AffineScanOptions o;
      o.reverse = rev;
      EXPECT_TRUE(
          close_part(std::string("matrix ") + dtype_name(dt) + (rev ? " reverse" : ""),
                     dist_affine_scan(c, am.slice(1, t0, t1), bm.slice(1, t0, t1), 1, hm, o),
                     affine_scan(am, bm, 1, hm, o), 1, t0, t1));
    }
  }
}

TEST(DistScan, OneNpyWrittenByEveryRank) {
  Communicator& c = world();
  std::mt19937_64 rng(24);
  const Tensor y = test::random_tensor({3, 50, 4}, DType::f32, rng);
  const auto [t0, t1] = uneven(50, c.rank(), c.size());
  SharedDir dir;
  dist_write_npy(c, dir.path + "/y.npy", y.slice(1, t0, t1), 1);
  EXPECT_TRUE(test::all_close("dist_write_npy", "y", read_npy(dir.path + "/y.npy"), y, {0, 0}));
  EXPECT_TRUE(map_npy(dir.path + "/y.npy").dtype() == DType::f32);
  // Nothing but the file: the temporary file is gone.
  agree_no_error(c, "");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  agree_no_error(c, "");  // every rank has looked before rank 0 removes the folder
}

TEST(DistScan, ChunksThatDoNotFitTogetherAreRefusedEverywhere) {
  Communicator& c = world();
  const Tensor x = Tensor::zeros({5, c.rank() == 1 ? 3 : 2}, DType::f32);
  expect_has(collective_error([&] { dist_prefix_scan(c, x, 0, ScanOp::sum); }),
             "rank 1 has a different chunk shape");
  expect_has(collective_error([&] {
               dist_prefix_scan(c, Tensor::zeros({5}, c.rank() == 1 ? DType::f64 : DType::f32), 0,
                                ScanOp::sum);
             }),
             "f64");
  // A bad initial state on the rank that holds the start, even with an empty chunk there.
  expect_has(collective_error([&] {
               dist_affine_scan(c, Tensor::zeros({c.rank() == 0 ? 0 : 4, 3}, DType::f32),
                                Tensor::zeros({c.rank() == 0 ? 0 : 4, 3}, DType::f32), 0,
                                Tensor::zeros({2}, DType::f32));
             }),
             "rank 0: dist_affine_scan: h0 is f32 (2,), expected f32 (3,)");
  expect_has(collective_error([&] { dist_prefix_scan(c, x, c.rank() == 1 ? 5 : 0, ScanOp::sum); }),
             "rank 1: dist_prefix_scan: dim 5 is out of range");
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
