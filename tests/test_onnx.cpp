// ONNX files (src/formats/onnx.cpp) against their expected outputs: files that Debian's
// torch.onnx.export wrote from nn.GRU / nn.LSTM models (PyTorch's float64 outputs) and graphs
// made with onnx.helper for what torch does not write (linear_before_reset 0, layout 1, no
// bias, weights as graph inputs; the ONNX equations in float64), all made by
// tests/reference/gen_onnx_models.py; then files grux must refuse, each with its message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "grux/error.h"
#include "grux/io.h"
#include "grux/model.h"
#include "test_util.h"

namespace grux::test_onnx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kFiles = std::string(GRUX_ONNX_DIR) + "/files/";
const std::string kGolden = std::string(GRUX_ONNX_DIR) + "/golden/";

// Largest |got - want| / (1e-5 + 1e-4 |want|) (f32 against float64 rounded to f32).
double worst(const Tensor& got, const Tensor& want) {
  const Tensor g = got.contiguous().to(DType::f32), w = want.contiguous();
  double r = 0;
  for (int64_t k = 0; k < g.numel(); ++k) {
    const double a = g.data<float>()[k], b = w.data<float>()[k];
    r = std::max(r, std::abs(a - b) / (1e-5 + 1e-4 * std::abs(b)));
  }
  return r;
}

struct Case {
  const char* name;
  const char* input;                 // the frames input's name
  std::vector<const char*> given;    // graph inputs given with the frames
  std::vector<const char*> outputs;  // every graph output, in order
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"torch_gru", "x", {}, {"y", "h"}},
      {"torch_gru_2layers_batch_first", "x", {}, {"y", "h"}},
      {"torch_lstm_2layers", "x", {}, {"y", "h", "c"}},
      {"torch_lstm_head_batch_first", "x", {}, {"out"}},
      {"torch_gru_last_step_softmax", "x", {}, {"probs"}},
      {"torch_lstm_tanh_skip", "x", {}, {"out"}},
      {"helper_gru_reset_before", "X", {}, {"Y", "Y_h"}},
      {"helper_gru_linear_before_reset", "X", {}, {"Y", "Y_h"}},
      {"helper_gru_layout1", "X", {}, {"Y", "Y_h"}},
      {"helper_gru_no_bias", "X", {}, {"Y", "Y_h"}},
      {"helper_lstm", "X", {}, {"Y", "Y_h", "Y_c"}},
      {"helper_lstm_weights_as_inputs", "X", {"W", "R", "B"}, {"Y", "Y_h", "Y_c"}},
      {"helper_gru_float16", "X", {}, {"Y", "Y_h"}},
      {"helper_lstm_float64", "X", {}, {"Y", "Y_h", "Y_c"}},
  };
  return c;
}

Tensor golden(const Case& c, const std::string& name) {
  return read_npy(kGolden + c.name + "." + name + ".npy");
}

TEST(Onnx, EveryOutputMatchesItsReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::map<std::string, Tensor> given;
    for (const char* g : c.given) given[g] = golden(c, g);
    const Model model(read_model(kFiles + c.name + ".onnx", given));
    EXPECT_EQ(model.spec().format, ModelFormat::onnx);
    EXPECT_EQ(model.spec().graph.input, c.input);
    const auto outs = run_graph(model, golden(c, c.input));
    ASSERT_EQ(outs.size(), c.outputs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      EXPECT_EQ(outs[k].first, c.outputs[k]);
      const Tensor want = golden(c, c.outputs[k]);
      ASSERT_EQ(outs[k].second.shape(), want.shape()) << c.outputs[k];
      EXPECT_LE(worst(outs[k].second, want), 1.0) << c.outputs[k];
    }
  }
}

// The model of a file streams as the whole run computes: one sequence frame by frame through
// ModelStream gives the bits of the graph's frames output.
TEST(Onnx, StreamGivesTheGraphsBits) {
  const Model model = load_model(kFiles + std::string("torch_lstm_tanh_skip.onnx"));
  const Tensor x = read_npy(kGolden + std::string("torch_lstm_tanh_skip.x.npy"));  // (T, 1, I)
  const Tensor whole = run_graph(model, x)[0].second;                              // (T, 1, O)
  ModelStream s(model, 1);
  const int64_t T = x.size(0), I = x.size(2), O = whole.size(2);
  std::vector<float> y(size_t(T * O));
  for (int64_t t = 0; t < T; ++t) s.process(x.data<float>() + t * I, y.data() + t * O, 1);
  for (int64_t k = 0; k < T * O; ++k) ASSERT_EQ(y[k], whole.data<float>()[k]) << k;
}

// The states of a stream are there for its recurrent layers, and not under sample-rate
// correction (its layers' states are delayed ones).
TEST(Onnx, StreamStatesOfRecurrentLayersOnly) {
  const Model model = load_model(kFiles + std::string("torch_lstm_tanh_skip.onnx"));
  ModelStream s(model, 1);
  EXPECT_EQ(s.cell_state(0).shape(), (Shape{1, 6}));
  EXPECT_THAT([&] { s.hidden_state(1); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layer 1 is not one of")));
  ModelStreamOptions o;
  o.sample_rate = 96000;
  ModelStream corrected(model, 1, o);
  EXPECT_THAT([&] { corrected.hidden_state(0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not kept apart under sample-rate")));
}

// A double frames input gives double outputs of the same values.
TEST(Onnx, DoubleInputGivesDoubleOutputs) {
  const Model model = load_model(kFiles + std::string("torch_gru.onnx"));
  const Tensor x = read_npy(kGolden + std::string("torch_gru.x.npy"));
  const auto f = run_graph(model, x), d = run_graph(model, x.to(DType::f64));
  EXPECT_EQ(d[0].second.dtype(), DType::f64);
  EXPECT_EQ(worst(d[0].second, f[0].second), 0.0);
}

TEST(Onnx, WrongInputsAreRefused) {
  const Model model = load_model(kFiles + std::string("torch_gru.onnx"));
  EXPECT_THAT(
      [&] {
        run_graph(model, Tensor::zeros({5, 2, 4}, DType::f32));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("has 4 features, expected 3")));
  EXPECT_THAT(
      [&] {
        run_graph(model, Tensor::zeros({5, 3}, DType::f32));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("expected 3 axes (TNF)")));
  EXPECT_THAT(
      [&] {
        run_graph(model, Tensor::zeros({5, 2, 3}, DType::i64));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("expected f32 or f64")));
  const Model safetensors = load_model(std::string(GRUX_MODELS_DIR) + "/files/nam_core_lstm.nam");
  EXPECT_THAT(
      [&] {
        run_graph(safetensors, Tensor::zeros({5, 1}, DType::f32));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("not read from a graph")));
}

TEST(Onnx, WeightsAsGraphInputsMustBeGiven) {
  EXPECT_THAT([&] { read_model(kFiles + std::string("helper_lstm_weights_as_inputs.onnx")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("graph input \"W\": is not the frames")));
}

// Each hostile file: refused with one line naming what was wrong.
TEST(Onnx, HostileFilesAreRefused) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"bad_w_shape", "node 0 \"rnn\" (GRU): W has shape [1, 12, 3], expected [1, 15, 3]"},
      {"bad_missing_initializer", "input 1 (\"W\") is neither a graph input, an initializer"},
      {"bad_unknown_op", "node 0 \"conv\" (Conv): not an op grux reads"},
      {"bad_out_of_order", "node 0 \"t\" (Tanh): input 0 (\"Z\") is neither"},
      {"bad_external_data", "keeps its data in an external file"},
      {"bad_huge_dims", "more than 67108864 elements"},
      {"bad_clip", "clip is 3"},
      {"bad_bidirectional", "direction is \"bidirectional\""},
      {"bad_softmax_opset11", "Softmax over axis 1 of 3 (opset 11)"},
  };
  for (const auto& [name, message] : bad) {
    SCOPED_TRACE(name);
    try {
      read_model(kFiles + name + ".onnx");
      ADD_FAILURE() << "read";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_THAT(m, HasSubstr(message));
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
  }
  // Truncated at every length up to 400 bytes, and at half: refused, never read as a model.
  const std::string bytes = test::slurp(kFiles + "torch_gru.onnx");
  for (size_t n : {size_t(1), size_t(2), size_t(17), size_t(100), size_t(399), bytes.size() / 2}) {
    SCOPED_TRACE(n);
    EXPECT_THROW(parse_model(bytes.substr(0, n), "cut"), Error);
  }
}

}  // namespace
}  // namespace grux::test_onnx
