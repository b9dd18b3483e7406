// The character-level language model: PyTorch training traces replayed step for step,
// exact resume from checkpoints, f64 finite-difference gradients of the whole model,
// streaming generation vs the whole-window forward, UTF-8 and batching, checkpoint errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "grux/io.h"
#include "grux/train.h"
#include "test_util.h"

namespace grux::test_lm {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

std::string corpus(size_t chars) {
  const std::string text = read_file(std::string(GRUX_DATA_DIR) + "/tinyshakespeare.txt");
  return text.substr(0, chars);  // the corpus is ASCII: bytes are characters
}

// The settings of a golden trace, from its metadata.
TrainOptions golden_options(const SafeTensors& g) {
  auto m = [&](const char* k) { return g.metadata.at(k); };
  TrainOptions o;
  o.model.dtype = m("dtype") == "float64" ? DType::f64 : DType::f32;
  o.model.layers = std::stoll(m("layers"));
  o.model.embed = std::stoll(m("embed"));
  o.model.hidden = std::stoll(m("hidden"));
  o.model.cell = g.metadata.count("cell") ? m("cell") : "gru";
  o.batch = std::stoll(m("batch"));
  o.window = std::stoll(m("window"));
  o.steps = std::stoll(m("steps"));
  o.optimizer = m("optimizer");
  o.lr = std::stod(m("lr"));
  o.min_lr = std::stod(m("min_lr"));
  o.warmup = std::stoll(m("warmup"));
  o.clip = std::stod(m("clip"));
  o.weight_decay = std::stod(m("weight_decay"));
  o.momentum = std::stod(m("momentum"));
  o.val_fraction = std::stod(m("val_fraction"));
  return o;
}

class LmGolden : public ::testing::TestWithParam<const char*> {};

// Same initial weights, data order and hyperparameters as the PyTorch script: the same loss
// at every step (f64 within 1e-8, f32 within 1e-4), and the same validation loss at the end.
TEST_P(LmGolden, LossesMatchPyTorchStepForStep) {
  const SafeTensors g =
      read_safetensors(std::string(GRUX_GOLDEN_DIR) + "/lm/" + GetParam() + ".safetensors");
  const TrainOptions o = golden_options(g);
  std::map<std::string, Tensor> init;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("model.", 0) == 0) init[k.substr(6)] = v;
  Trainer tr(o, corpus(std::stoull(g.metadata.at("text_chars"))), &init);
  const Tensor& expected = g.tensors.at("loss.train");
  ASSERT_EQ(expected.numel(), o.steps);
  const double tol = o.model.dtype == DType::f64 ? 1e-8 : 1e-4;
  for (int64_t s = 0; s < o.steps; ++s) {
    const double loss = tr.step().loss;
    ASSERT_NEAR(loss, expected.data<double>()[s], tol) << GetParam() << " step " << s + 1;
  }
  EXPECT_NEAR(tr.evaluate(), g.tensors.at("loss.val").item(), tol) << "validation loss";
}

INSTANTIATE_TEST_SUITE_P(Traces, LmGolden,
                         ::testing::Values("adam_f64_l2", "adam_f32_l2", "adamw_f64_l1",
                                           "sgd_f64_l1", "lstm_adam_f64_l2", "lstm_adam_f32_l2",
                                           "lstm_sgd_f64_l1"));

TrainOptions small_options(DType dtype, const char* cell = "gru") {
  TrainOptions o;
  o.model.dtype = dtype;
  o.model.cell = cell;
  o.model.layers = 2;
  o.model.embed = 6;
  o.model.hidden = 10;
  o.model.dropout = 0.25;  // exercises the per-step dropout seeds across a resume
  o.batch = 3;
  o.window = 7;
  o.steps = 14;
  o.warmup = 3;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  return o;
}

// Steps `t` to the end of its run, appending each step's loss to `losses`.
void run_to_end(Trainer& t, std::vector<double>& losses) {
  while (!t.done()) losses.push_back(t.step().loss);
}

// A checkpoint taken mid-run resumes to exactly the losses of an uninterrupted run: model,
// optimizer state, carried hidden state, data cursor and dropout stream all restored.
TEST(LmCheckpoint, ResumeGivesTheUninterruptedLosses) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const char* opt : {"adam", "sgd", "lstm adam"}) {
      const bool lstm = std::string(opt) == "lstm adam";
      TrainOptions o = small_options(dtype, lstm ? "lstm" : "gru");
      o.optimizer = lstm ? "adam" : opt;
      const std::string text = corpus(2000);  // the pass over the data wraps mid-run
      Trainer a(o, text);
      std::vector<double> full;
      run_to_end(a, full);

      TempDir dir;
      const std::string path = dir.path + "/ck.safetensors";
      std::vector<double> resumed;
      {
        Trainer b(o, text);
        for (int i = 0; i < 6; ++i) resumed.push_back(b.step().loss);
        b.evaluate();
        b.save_checkpoint(path);
      }
      Trainer c = Trainer::resume(path, text);
      EXPECT_EQ(c.steps_done(), 6);
      EXPECT_EQ(c.history().train_loss, resumed);
      EXPECT_EQ(c.history().val_step, std::vector<int64_t>{6});
      run_to_end(c, resumed);
      EXPECT_EQ(resumed, full) << dtype_name(dtype) << " " << opt;
    }
  }
}

TEST(LmCheckpoint, BadCheckpointsAreErrorsNamingTheProblem) {
  const std::string text = corpus(2000);
  TempDir dir;
  const std::string path = dir.path + "/ck.safetensors";
  Trainer t(small_options(DType::f32), text);
  t.step();
  t.save_checkpoint(path);
  const std::string bytes = read_file(path);

  try {
    Trainer::resume(path, corpus(1999));
    FAIL() << "other data accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("trained on other data"));
  }
  // Truncated file.
  write_file_atomic(dir.path + "/cut.safetensors", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(Trainer::resume(dir.path + "/cut.safetensors", text), Error);
  EXPECT_THROW(load_trained_model(dir.path + "/cut.safetensors"), Error);
  // A safetensors file that is not a training checkpoint.
  write_safetensors(dir.path + "/plain.safetensors", {{"x", Tensor::zeros({2}, DType::f32)}});
  try {
    load_trained_model(dir.path + "/plain.safetensors");
    FAIL() << "plain file accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing metadata 'format'"));
  }
  // A parameter with the wrong shape for the stored configuration.
  SafeTensors ck = read_safetensors(path);
  ck.tensors["model.fc.bias"] = Tensor::zeros({3}, DType::f32);
  write_safetensors(dir.path + "/shape.safetensors", ck.tensors, ck.metadata);
  try {
    Trainer::resume(dir.path + "/shape.safetensors", text);
    FAIL() << "misshapen parameter accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fc.bias"));
  }
  // Optimizer state missing.
  ck = read_safetensors(path);
  for (auto it = ck.tensors.begin(); it != ck.tensors.end();)
    it = it->first.rfind("optim.", 0) == 0 ? ck.tensors.erase(it) : std::next(it);
  write_safetensors(dir.path + "/noopt.safetensors", ck.tensors, ck.metadata);
  EXPECT_THROW(Trainer::resume(dir.path + "/noopt.safetensors", text), Error);
  // Malformed configuration JSON.
  ck = read_safetensors(path);
  ck.metadata["model"] = "{\"vocab\": 3";
  write_safetensors(dir.path + "/json.safetensors", ck.tensors, ck.metadata);
  EXPECT_THROW(load_trained_model(dir.path + "/json.safetensors"), Error);
  // The original checkpoint is untouched by all of this.
  EXPECT_EQ(read_file(path), bytes);
}

// d(loss)/d(parameter) of the whole model (embedding, 2 GRU layers, fc, cross-entropy) against
// central differences in f64, on sampled coordinates of every parameter.
class LmGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(LmGradient, MatchesFiniteDifferencesInF64) {
  CharLmConfig c;
  c.vocab = 7, c.embed = 4, c.hidden = 5, c.layers = 2, c.dtype = DType::f64, c.cell = GetParam();
  CharLm m(c, 3);
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> id(0, c.vocab - 1);
  const int64_t T = 6, N = 3;
  Tensor ids = Tensor::empty({T, N}, DType::i64), targets = Tensor::empty({T, N}, DType::i64);
  for (int64_t i = 0; i < T * N; ++i) ids.data<int64_t>()[i] = id(rng);
  for (int64_t i = 0; i < T * N; ++i) targets.data<int64_t>()[i] = id(rng);
  Tensor h0 = test::random_tensor({c.state_rows(), N, c.hidden}, DType::f64, rng, 0.5);
  auto loss = [&] {
    Tensor h = h0.clone();
    return m.forward_backward(ids, targets, h, false);
  };
  Tensor h = h0.clone();
  m.forward_backward(ids, targets, h, true);
  std::vector<Tensor> grads;
  for (const Parameter& p : m.parameters()) grads.push_back(p.grad.clone());
  const double eps = 1e-6;
  for (size_t k = 0; k < m.parameters().size(); ++k) {
    Parameter& p = m.parameters()[k];
    ASSERT_EQ(grads[k].shape(), p.value.shape()) << p.name;
    double* v = p.value.data<double>();
    for (int64_t i = 0; i < p.value.numel(); i += std::max<int64_t>(1, p.value.numel() / 7)) {
      const double saved = v[i];
      v[i] = saved + eps;
      const double up = loss();
      v[i] = saved - eps;
      const double down = loss();
      v[i] = saved;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[k].data<double>()[i], fd, 1e-7 + 1e-6 * std::abs(fd))
          << p.name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, LmGradient, ::testing::Values("gru", "lstm"));

// One window of batch 1 from a sequence: ids seq[0, T), targets seq[1, T].
void window_of(const std::vector<int64_t>& seq, Tensor& ids, Tensor& targets) {
  const int64_t T = static_cast<int64_t>(seq.size()) - 1;
  ids = Tensor::empty({T, 1}, DType::i64), targets = Tensor::empty({T, 1}, DType::i64);
  for (int64_t t = 0; t < T; ++t) {
    ids.data<int64_t>()[t] = seq[t];
    targets.data<int64_t>()[t] = seq[t + 1];
  }
}

// The mean cross-entropy of predicting seq[t + 1] from the stream's logits after seq[t].
double stream_loss(CharLm::Stream& s, const std::vector<int64_t>& seq) {
  const int64_t T = static_cast<int64_t>(seq.size()) - 1;
  double sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<double> z = s.step({seq[t]});
    double mx = z[0], se = 0;
    for (double v : z) mx = std::max(mx, v);
    for (double v : z) se += std::exp(v - mx);
    sum += mx + std::log(se) - z[seq[t + 1]];
  }
  return sum / T;
}

// Streaming generation computes the same logits as the whole-window forward: the mean
// cross-entropy of a sequence computed from the stream's logits equals forward_backward's.
TEST(LmStream, StepByStepEqualsWholeWindow) {
  for (DType dtype : {DType::f32, DType::f64})
    for (const char* cell : {"gru", "lstm"}) {
      CharLmConfig c;
      c.vocab = 11, c.embed = 5, c.hidden = 19, c.layers = 2, c.dtype = dtype, c.cell = cell;
      CharLm m(c, 9);
      const std::vector<int64_t> seq{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
      Tensor ids, targets, h;
      window_of(seq, ids, targets);
      const double whole = m.forward_backward(ids, targets, h, false);
      CharLm::Stream s(m, 1);
      EXPECT_NEAR(stream_loss(s, seq), whole, dtype == DType::f64 ? 1e-12 : 1e-5)
          << dtype_name(dtype) << " " << cell;
    }
}

// The GRU's products in bf16 and int8: a stream fed one character at a time gives the loss
// of the whole window through an inference plan of the same precision, near f32's and not
// equal to it; the trainer's validation loss in each precision likewise (f32's is evaluate()'s,
// and the other precisions leave the history alone); an f64 model refuses them in one line.
TEST(LmPrecision, StreamAndValidationLossInEachPrecision) {
  TrainOptions o = small_options(DType::f32);
  o.model.dropout = 0;
  o.model.hidden = 37;  // odd: the tails of every kernel
  Trainer tr(o, corpus(3000));
  while (!tr.done()) tr.step();
  const CharLm& m = tr.model();
  const std::vector<int64_t> seq{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
  Tensor ids, targets;
  window_of(seq, ids, targets);
  auto streamed_loss = [&](Precision p) {
    CharLm::Stream s(m, 1, p);
    return stream_loss(s, seq);
  };
  const double f32_stream = streamed_loss(Precision::f32);
  const double f32_val = tr.evaluate();
  EXPECT_EQ(tr.validation_loss(Precision::f32), f32_val);
  const size_t recorded = tr.history().val_loss.size();
  for (Precision p : {Precision::bf16, Precision::int8}) {
    const char* name = precision_name(p);
    Tensor h;
    const double whole = m.loss(ids, targets, h, GruInference(m.gru(), p));
    EXPECT_EQ(h.shape(), (Shape{o.model.layers, 1, o.model.hidden})) << name;
    const double streamed = streamed_loss(p);
    EXPECT_NEAR(streamed, whole, 1e-5) << name;
    EXPECT_NEAR(streamed, f32_stream, 0.05) << name;
    EXPECT_NE(streamed, f32_stream) << name;
    const double val = tr.validation_loss(p);
    EXPECT_NEAR(val, f32_val, 0.05) << name;
    EXPECT_NE(val, f32_val) << name;
  }
  EXPECT_EQ(tr.history().val_loss.size(), recorded);

  CharLmConfig c;
  c.vocab = 5, c.embed = 3, c.hidden = 8, c.dtype = DType::f64;
  CharLm m64(c, 1);
  try {
    CharLm::Stream s(m64, 1, Precision::bf16);
    FAIL() << "an f64 model ran in bf16";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bf16"));
    EXPECT_THAT(e.what(), HasSubstr("f64"));
  }
}

// Training with the GRU's products in bf16: losses near f32 training's (not equal), and a
// checkpoint mid-run resumes in bf16 to exactly the uninterrupted run's losses.
TEST(LmPrecision, Bf16TrainingResumesExactlyAndStaysNearF32) {
  TrainOptions o = small_options(DType::f32);
  o.model.hidden = 21;
  const std::string text = corpus(2000);
  Trainer f32(o, text);
  std::vector<double> f32_losses;
  run_to_end(f32, f32_losses);
  o.precision = Precision::bf16;
  Trainer a(o, text);
  std::vector<double> full;
  run_to_end(a, full);
  ASSERT_EQ(full.size(), f32_losses.size());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(full[i], f32_losses[i], 0.02) << i;
  EXPECT_NE(full, f32_losses);

  TempDir dir;
  const std::string path = dir.path + "/ck.safetensors";
  std::vector<double> resumed;
  {
    Trainer b(o, text);
    for (int i = 0; i < 5; ++i) resumed.push_back(b.step().loss);
    b.save_checkpoint(path);
  }
  Trainer c = Trainer::resume(path, text);
  EXPECT_EQ(c.options().precision, Precision::bf16);
  run_to_end(c, resumed);
  EXPECT_EQ(resumed, full);

  o.precision = Precision::int8;
  EXPECT_THROW(Trainer(o, text), Error);
  o.precision = Precision::bf16;
  o.model.dtype = DType::f64;
  EXPECT_THROW(Trainer(o, text), Error);
}

// Beam reordering moves whole states: after reorder({1, 1}) both beams continue beam 1.
TEST(LmStream, ReorderCopiesBeamStates) {
  for (const char* cell : {"gru", "lstm"}) {
    SCOPED_TRACE(cell);
    CharLmConfig c;
    c.vocab = 5, c.embed = 3, c.hidden = 8, c.layers = 2, c.cell = cell;
    CharLm m(c, 2);
    // Against a stream of the same batch fed beam 1's history in both rows (a batch-1 stream
    // runs another kernel, equal within rounding only).
    CharLm::Stream two(m, 2), both(m, 2);
    two.step({0, 3});
    both.step({3, 3});
    two.reorder({1, 1});
    const std::vector<double> z2 = two.step({2, 2}), zb = both.step({2, 2});
    for (int64_t v = 0; v < 2 * c.vocab; ++v) EXPECT_EQ(z2[v], zb[v]);
    EXPECT_NE(z2[0], CharLm::Stream(m, 2).step({2, 2})[0]);  // the history mattered
  }
}

// An LSTM model in bf16 and int8 as a GRU one: trained in bf16 (the losses near f32's, not
// equal), evaluated and generated from in bf16 and int8 (near f32's).
TEST(LmLstm, LowPrecisionTrainsEvaluatesAndGenerates) {
  TrainOptions o = small_options(DType::f32, "lstm");
  Trainer f32(o, corpus(2000));
  o.precision = Precision::bf16;
  Trainer bf16(o, corpus(2000));
  for (int s = 0; s < 3; ++s) {
    const double a = f32.step().loss, b = bf16.step().loss;
    EXPECT_NEAR(a, b, 2e-2 * a) << "step " << s;
    if (s == 0) EXPECT_NE(a, b);
  }
  Trainer& tr = f32;
  const double ref = tr.validation_loss(Precision::f32);
  for (Precision p : {Precision::bf16, Precision::int8}) {
    const double v = tr.validation_loss(p);
    EXPECT_NEAR(v, ref, 2e-2 * ref) << precision_name(p);
    EXPECT_NE(v, ref) << precision_name(p);
    CharLm::Stream lowp(tr.model(), 1, p), full(tr.model(), 1);
    for (int64_t id : {1, 4, 2}) {
      const std::vector<double> a = lowp.step({id}), b = full.step({id});
      double most = 0;
      for (size_t v = 0; v < a.size(); ++v) most = std::max(most, std::abs(a[v] - b[v]));
      EXPECT_LT(most, 0.1) << precision_name(p);
      EXPECT_GT(most, 0) << precision_name(p);
    }
  }
  CharLmConfig bad = tr.model().config();
  bad.cell = "rnn";
  EXPECT_THAT([&] { bad.validate(); }, testing::ThrowsMessage<Error>(HasSubstr("gru or lstm")));
}

TEST(LmText, Utf8RoundTripAndErrors) {
  const std::string text = "añ€😀\nb";  // 1, 2, 3 and 4 byte characters
  const Vocab v = Vocab::from_text(text);
  EXPECT_EQ(v.size(), 6);
  const std::vector<int64_t> ids = v.encode(text, "text");
  std::string back;
  for (int64_t i : ids) back += v.decode(i);
  EXPECT_EQ(back, text);
  EXPECT_EQ(Vocab::from_utf8(v.to_utf8()).chars(), v.chars());
  struct Bad {
    std::string bytes;
    size_t offset;
  };
  for (const Bad& b :
       {Bad{"ab\xff", 2}, Bad{"\xc0\xaf", 0}, Bad{"x\xed\xa0\x80", 1}, Bad{"\xe2\x82", 0},
        Bad{"a\xf4\x90\x80\x80", 1}, Bad{"ab\x80", 2}, Bad{"\xe2(\xa1", 0}}) {
    try {
      utf8_decode(b.bytes, "data.txt");
      FAIL() << "accepted invalid UTF-8";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("data.txt is not valid UTF-8"));
      EXPECT_THAT(e.what(), HasSubstr("byte offset " + std::to_string(b.offset)));
    }
  }
  try {
    v.encode("aZ", "--prompt");
    FAIL() << "unknown character accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--prompt: character U+005A at position 1"));
  }
  EXPECT_THROW(Vocab::from_text(""), Error);
}

// Window w of stream n covers positions n*S + w*T ... + T - 1 (S = len / N), targets one later.
TEST(LmText, WindowsCutParallelStreams) {
  std::vector<int64_t> ids(23);
  for (int64_t i = 0; i < 23; ++i) ids[i] = i;
  TextBatches b(ids, 3, 2);  // S = 7, windows = (7 - 1) / 2 = 3
  EXPECT_EQ(b.windows(), 3);
  Tensor x, y;
  b.window(2, x, y);
  ASSERT_EQ(x.shape(), (Shape{2, 3}));
  const int64_t ex[2][3] = {{4, 11, 18}, {5, 12, 19}};
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t n = 0; n < 3; ++n) {
      EXPECT_EQ(x.data<int64_t>()[t * 3 + n], ex[t][n]);
      EXPECT_EQ(y.data<int64_t>()[t * 3 + n], ex[t][n] + 1);
    }
  try {
    TextBatches(std::vector<int64_t>(10), 4, 3);
    FAIL() << "short text accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("too short for batch 4 x window 3"));
  }
}

TEST(LmSchedule, PlannedStepsEqualGivenSteps) {
  // A run whose total is fixed after its warm-up (the --time budget) equals one given the
  // total from the start.
  TrainOptions o = small_options(DType::f64);
  o.model.dropout = 0;
  const std::string text = corpus(2000);
  Trainer a(o, text);
  std::vector<double> la, lb;
  run_to_end(a, la);
  TrainOptions big = o;
  big.steps = 1000;
  Trainer b(big, text);
  for (int i = 0; i < 2; ++i) lb.push_back(b.step().loss);
  b.plan_steps(o.steps);
  run_to_end(b, lb);
  EXPECT_EQ(la, lb);
}

TEST(LmLossCurve, CsvAndSvg) {
  Trainer::History h;
  h.train_loss = {4.0, 3.5, 3.0};
  h.val_step = {2};
  h.val_loss = {3.25};
  EXPECT_EQ(loss_curve_csv(h),
            "step,train_loss,val_loss\n1,4.000000,\n2,3.500000,3.250000\n3,3.000000,\n");
  const std::string svg = loss_curve_svg(h, "a <title>");
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("a &lt;title&gt;"));
  EXPECT_THAT(svg, HasSubstr("<circle"));
}

}  // namespace
}  // namespace grux::test_lm
