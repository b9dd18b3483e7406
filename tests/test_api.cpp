// The C++ API's promises (docs/api.md), each a test: const tensors give read-only pointers; tapes
// are opaque; copies of a model deep-copy its weights; replaced weights in any layout give the same
// results (and are checked like the constructor's, device included); every operator takes a
// per-call `threads` option that leaves the caller's OpenMP setting as it was.
#include <omp.h>

#include <atomic>
#include <thread>
#include <type_traits>
#include <utility>

#include "core/tensor_test_access.h"
#include "grux/conv.h"
#include "grux/gru.h"
#include "grux/mingru.h"
#include "grux/nn.h"
#include "grux/scan.h"
#include "test_util.h"

namespace grux::test_api {
namespace {

using test::all_close;
using test::random_tensor;

// ---- const means const; opaque means opaque -----------------------------------------------

static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().data<float>()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<Tensor&>().data<float>()), float*>);
static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().raw_data()), const void*>);

template <typename Tape>
concept exposes_its_data = requires(Tape& t) {
  t.data;
}
|| requires(Tape& t) {
  t.data_;
};
static_assert(!exposes_its_data<GruTape>, "GruTape's contents must not be reachable");
static_assert(!exposes_its_data<MinGruTape>, "MinGruTape's contents must not be reachable");

TEST(Api, ConstTensorReadsTheSameElementsAsItsHandle) {
  Tensor t = Tensor::from_vector<float>({3}, {1, 2, 3});
  const Tensor& c = t;
  EXPECT_EQ(c.data<float>(), t.data<float>());
  t.data<float>()[1] = 7;
  EXPECT_EQ(c.data<float>()[1], 7.0f);
  EXPECT_THROW(c.data<double>(), Error);
}

// ---- Copies deep-copy ------------------------------------------------------------------

// Writes through a handle to the first weight of `w` (shared storage) must not reach a copy.
TEST(Api, GruCopiesDeepCopyTheirWeights) {
  GruConfig c;
  c.input_size = 3;
  c.hidden_size = 5;
  c.num_layers = 2;
  Gru gru(c, DType::f32, 1);
  std::mt19937_64 rng(2);
  const Tensor x = random_tensor({4, 2, 3}, DType::f32, rng);
  const Tensor before = gru.forward(x).output;
  const Gru copy(gru);
  Gru assigned(c, DType::f32, 9);
  assigned = gru;
  Tensor handle = gru.weights()[0].w_hh;  // shares the original's storage
  handle.fill(0.5);
  ASSERT_FALSE(all_close("gru", "original changed", gru.forward(x).output, before, {0, 0}));
  EXPECT_TRUE(all_close("gru", "copy", copy.forward(x).output, before, {0, 0}));
  EXPECT_TRUE(all_close("gru", "assigned", assigned.forward(x).output, before, {0, 0}));
  EXPECT_FALSE(copy.weights()[0].w_hh.shares_storage(gru.weights()[0].w_hh));
}

TEST(Api, MinGruAndGruCellCopiesDeepCopyTheirWeights) {
  MinGruConfig c;
  c.input_size = 3;
  c.hidden_size = 4;
  MinGru m(c, DType::f64, 3);
  std::mt19937_64 rng(4);
  const Tensor x = random_tensor({5, 2, 3}, DType::f64, rng);
  const Tensor before = m.forward(x).output;
  const MinGru copy(m);
  Tensor handle = m.weights()[0].weight;
  handle.fill(0.25);
  ASSERT_FALSE(all_close("mingru", "original changed", m.forward(x).output, before, {0, 0}));
  EXPECT_TRUE(all_close("mingru", "copy", copy.forward(x).output, before, {0, 0}));

  GruCell cell(3, 4, true, GruForm::linear_before_reset, DType::f32, 5);
  const Tensor xc = random_tensor({2, 3}, DType::f32, rng);
  const Tensor cell_before = cell.forward(xc);
  const GruCell cell_copy(cell);
  GruLayerWeights changed = cell.weights();
  changed.w_ih = changed.w_ih.clone();
  changed.w_ih.fill(0.75);
  cell.set_weights(changed);
  ASSERT_FALSE(all_close("cell", "original changed", cell.forward(xc), cell_before, {0, 0}));
  EXPECT_TRUE(all_close("cell", "copy", cell_copy.forward(xc), cell_before, {0, 0}));
  // Its batch-1 path (the real-time kernel) sees the new weights too.
  const Tensor x1 = xc.select(0, 0);
  EXPECT_FALSE(all_close("cell", "unbatched", cell.forward(x1), cell_copy.forward(x1), {0, 0}));
  GruLayerWeights bad = cell.weights();
  bad.w_hh = Tensor::zeros({12, 5}, DType::f32);
  EXPECT_THROW(cell.set_weights(bad), Error);
}

// ---- Replaced weights: any layout of the same values, the same results -----------------

// The same values as `t` (R, C) in a transposed, non-contiguous layout.
Tensor strided_copy(const Tensor& t) {
  Tensor storage = t.transpose(0, 1).contiguous();  // (C, R)
  Tensor v = storage.transpose(0, 1);               // (R, C) view, column-major
  EXPECT_FALSE(v.is_contiguous());
  return v;
}

TEST(Api, GruSetWeightsReadsAnyLayoutAndChecksLikeTheConstructor) {
  GruConfig c;
  c.input_size = 6;
  c.hidden_size = 7;
  Gru gru(c, DType::f32, 11);
  std::mt19937_64 rng(12);
  const Tensor x = random_tensor({9, 3, 6}, DType::f32, rng);
  const Tensor expected = gru.forward(x).output;
  std::vector<GruLayerWeights> w = gru.weights();
  w[0].w_ih = strided_copy(w[0].w_ih);
  w[0].w_hh = strided_copy(w[0].w_hh);
  w[0].b_hh = Tensor::from_vector<float>({42}, std::vector<float>(42, 0)).slice(0, 0, 42, 2);
  w[0].b_hh.copy_from(gru.weights()[0].b_hh);  // a strided bias view with the same values
  gru.set_weights(w);
  EXPECT_TRUE(all_close("set_weights", "strided", gru.forward(x).output, expected, {0, 0}));
  EXPECT_TRUE(all_close("set_weights", "packed once", GruInference(gru).forward(x).output, expected,
                        {0, 0}));
  GruStream stream(gru, 3);
  EXPECT_TRUE(all_close("set_weights", "stream", stream.step(x), expected, {0, 0}));

  auto expect_error = [&](std::vector<GruLayerWeights> bad, const char* part) {
    try {
      gru.set_weights(std::move(bad));
      ADD_FAILURE() << "no error, expected one containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
    }
  };
  std::vector<GruLayerWeights> bad = gru.weights();
  bad[0].w_hh = Tensor::zeros({21, 6}, DType::f32);
  expect_error(bad, "weight 'weight_hh_l0' has shape (21, 6), expected (21, 7)");
  bad = gru.weights();
  bad[0].b_ih = bad[0].b_ih.to(DType::f64);
  expect_error(bad, "weight 'bias_ih_l0' has dtype f64");
  bad = gru.weights();
  bad[0].w_ih = TensorTestAccess::with_device_tag(bad[0].w_ih, {Device::Kind::cuda, 0});
  expect_error(bad, "weight 'weight_ih_l0' is on cuda:0, expected cpu");
  expect_error({}, "0 weight sets given");
  // A failed replacement leaves the model as it was.
  EXPECT_TRUE(all_close("set_weights", "after errors", gru.forward(x).output, expected, {0, 0}));
}

TEST(Api, MinGruSetWeightsReadsAnyLayout) {
  MinGruConfig c;
  c.input_size = 5;
  c.hidden_size = 6;
  c.num_layers = 2;
  MinGru m(c, DType::f64, 13);
  std::mt19937_64 rng(14);
  const Tensor x = random_tensor({7, 2, 5}, DType::f64, rng);
  const Tensor expected = m.forward(x).output;
  std::vector<MinGruLayerWeights> w = m.weights();
  w[1].weight = strided_copy(w[1].weight);
  m.set_weights(w);
  EXPECT_TRUE(all_close("mingru set_weights", "strided", m.forward(x).output, expected, {0, 0}));
  w = m.weights();
  w[0].bias = TensorTestAccess::with_device_tag(w[0].bias, {Device::Kind::cuda, 1});
  EXPECT_THROW(m.set_weights(w), Error);
}

// ---- One problem description per operator ------------------------------------------------

// The GRU's problem is its operator's options plus the data's shape, under one set of names:
// a benchmark's or the CLI's problem builds the operator as it is.
TEST(Api, ProblemsAreTheOperatorsOptionsPlusTheDataShape) {
  GruProblem p = GruProblem::parse("l2d2t5n3i4h6");
  EXPECT_EQ(p.num_layers, 2);
  EXPECT_TRUE(p.bidirectional);
  EXPECT_EQ(p.input_size, 4);
  EXPECT_EQ(p.hidden_size, 6);
  EXPECT_EQ(p.T, 5);
  EXPECT_EQ(p.N, 3);
  p.bias = false;
  const Gru gru(p, DType::f64);
  EXPECT_EQ(gru.config().num_layers, 2);
  EXPECT_FALSE(gru.config().bias);
  std::mt19937_64 rng(31);
  const GruOutput y = gru.forward(random_tensor({p.T, p.N, p.input_size}, DType::f64, rng));
  EXPECT_EQ(y.output.shape(), (Shape{5, 3, 12}));
  EXPECT_EQ(p.descriptor(), "l2d2t5n3i4h6");
  EXPECT_EQ(p.rows(), 15);

  MinGruProblem m = MinGruProblem::parse("l3t7n2i5h4");
  EXPECT_EQ(m.descriptor(), "l3t7n2i5h4");
  EXPECT_EQ(MinGruProblem::parse("l3d1t7n2i5h4").descriptor(), "l3t7n2i5h4");
  EXPECT_THROW(MinGruProblem::parse("l1d2t7n2i5h4"), Error);
  EXPECT_THROW(MinGruProblem::parse("t7n2i5"), Error);
  m.log_space = true;
  const MinGru mg(m, DType::f32);
  EXPECT_TRUE(mg.config().log_space);
  EXPECT_EQ(mg.config().num_layers, 3);
  m.set_lengths("uniform:1:7:3");
  EXPECT_EQ(static_cast<int64_t>(m.lengths.size()), 2);
}

// ---- The per-call threads option --------------------------------------------------------

// Runs `f` with the caller's OpenMP setting at 2 and checks that it is 2 again afterwards.
template <typename F>
void keeps_caller_setting(const char* what, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  f();
  EXPECT_EQ(omp_get_max_threads(), 2) << what << " changed the caller's thread setting";
  omp_set_num_threads(saved);
}

TEST(Api, EveryOperatorTakesThreadsAndRestoresTheCallersSetting) {
  std::mt19937_64 rng(21);
  GruConfig gc;
  gc.input_size = 4;
  gc.hidden_size = 8;
  const Gru gru(gc, DType::f32, 1);
  const Tensor x = random_tensor({6, 3, 4}, DType::f32, rng);
  const GruOutput all = gru.forward(x);
  keeps_caller_setting("gru", [&] {
    EXPECT_TRUE(all_close("gru", "threads 1", gru.forward(x, {}, {}, 1).output, all.output,
                          test::tol_for(DType::f32)));
    GruTape tape;
    const GruOutput y = gru.forward_train(x, {}, {}, tape, 0, Precision::f32, {}, 1);
    gru.backward(tape, y.output, {}, 1);
    GruInference(gru).forward(x, {}, {}, 1);
  });
  keeps_caller_setting("gru cell", [&] {
    const GruCell cell(4, 8);
    const Tensor h = cell.forward(x.select(0, 0), {}, 1);
    cell.backward(x.select(0, 0), {}, h, 1);
  });
  MinGruConfig mc;
  mc.input_size = 4;
  mc.hidden_size = 8;
  const MinGru m(mc, DType::f32, 2);
  keeps_caller_setting("mingru", [&] {
    MinGruTape tape;
    const MinGruOutput y = m.forward_train(x, {}, {}, tape, 1);
    m.backward(tape, y.output, {}, 1);
    m.forward(x, {}, {}, 1);
  });
  keeps_caller_setting("nn", [&] {
    const Tensor w = random_tensor({5, 4}, DType::f32, rng);
    const Tensor in = x.select(0, 0);
    const Tensor y = linear_forward(in, w, {}, 1);
    linear_backward(in, w, y, false, true, 1);
    const Tensor ids = Tensor::from_vector<int64_t>({2}, {1, 3});
    const Tensor e = embedding_forward(ids, w, 1);
    embedding_backward(ids, e, 5, 1);
    cross_entropy(y, Tensor::from_vector<int64_t>({3}, {0, 4, 2}), true, 1);
  });
  keeps_caller_setting("conv", [&] {
    Conv2dOptions o;
    o.threads = 1;
    const Tensor img = random_tensor({2, 3, 6, 6}, DType::f32, rng);
    const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, rng);
    const Tensor y = conv2d_forward(img, w, {}, o);
    conv2d_backward(img, w, y, false, o);
  });
  keeps_caller_setting("scan", [&] {
    AffineScanOptions o;
    o.threads = 1;
    const Tensor a = random_tensor({6, 3}, DType::f32, rng);
    const Tensor h = affine_scan(a, a, 0, {}, o);
    affine_scan_backward(a, {}, h, h, 0, o);
  });
  // The setting is the calling thread's: another thread's is not touched while calls with
  // threads = 1 run (a process-wide setting would show up there).
  std::atomic<bool> done{false}, changed{false};
  std::thread other([&] {
    omp_set_num_threads(2);
    while (!done) changed = changed || omp_get_max_threads() != 2;
  });
  for (int i = 0; i < 200; ++i) gru.forward(x, {}, {}, 1);
  done = true;
  other.join();
  EXPECT_FALSE(changed) << "a call with threads = 1 changed another thread's setting";
  // A negative count is an error naming the operator.
  EXPECT_THROW(gru.forward(x, {}, {}, -1), Error);
  EXPECT_THROW(m.forward(x, {}, {}, -2), Error);
  ScanOptions bad_scan;
  bad_scan.threads = -1;
  EXPECT_THROW(prefix_scan(x, 0, ScanOp::sum, bad_scan), Error);
  Conv2dOptions bad;
  bad.threads = -1;
  EXPECT_THROW(conv2d_forward(random_tensor({1, 1, 3, 3}, DType::f32, rng),
                              random_tensor({1, 1, 1, 1}, DType::f32, rng), {}, bad),
               Error);
}

// Error's promise: what() is one line of printable UTF-8 whatever bytes the message quoted
// (control characters, bytes that are not UTF-8, overlong forms, surrogates, C1 controls
// escaped as \xNN), and valid UTF-8 is kept as it is.
TEST(Api, ErrorsAreOnePrintableLineOfUtf8) {
  EXPECT_STREQ(Error("a\nb\tc").what(), "a\\x0ab\\x09c");
  EXPECT_STREQ(Error("key \xdb!").what(), "key \\xdb!");
  EXPECT_STREQ(Error("\xe2\x82\xac \xc3\xa9 \xf0\x9f\x8e\xb8").what(),
               "\xe2\x82\xac \xc3\xa9 \xf0\x9f\x8e\xb8");         // kept
  EXPECT_STREQ(Error("\xc0\xaf").what(), "\\xc0\\xaf");           // overlong
  EXPECT_STREQ(Error("\xed\xa0\x80").what(), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_STREQ(Error("\xe2\x82").what(), "\\xe2\\x82");           // cut short
  EXPECT_STREQ(Error("\xc2\x85").what(), "\\xc2\\x85");           // C1 control
  EXPECT_STREQ(Error("\x7f").what(), "\\x7f");
}

}  // namespace
}  // namespace grux::test_api
