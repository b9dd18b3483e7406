// ONNX files (src/formats/onnx.cpp) against their expected outputs, every case of
// tests/reference/onnx/cases.txt (made by tests/reference/gen_onnx_models.py): files that
// Debian's torch.onnx.export wrote from nn.GRU / nn.LSTM models (PyTorch's float64 outputs),
// graphs made with onnx.helper for what torch does not write (linear_before_reset 0, layout 1,
// reverse, clip, peepholes, input_forget, sequence_lens, states and weights as graph inputs;
// the ONNX equations in float64), ONNX's own node tests and ONNX Runtime's operator tests
// (their expected numbers); then files grux must refuse, each with its message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
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
  std::string name;
  std::string input;                 // the frames input's name
  std::vector<std::string> given;    // graph inputs given with the frames
  std::vector<std::string> outputs;  // every graph output, in order
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  if (s == "-") return out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = [] {
    std::vector<Case> v;
    std::ifstream f(std::string(GRUX_ONNX_DIR) + "/cases.txt");
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::stringstream in(line);
      std::string name, input, given, outputs;
      in >> name >> input >> given >> outputs;
      v.push_back({name, input, split(given), split(outputs)});
    }
    return v;
  }();
  return c;
}

Tensor golden(const Case& c, const std::string& name) {
  return read_npy(kGolden + c.name + "." + name + ".npy");
}

// Every kind of case is there: the list was read, and none of them went missing.
TEST(Onnx, TheCasesCoverEverySource) {
  std::map<std::string, int> by_source;
  for (const Case& c : cases()) ++by_source[c.name.substr(0, c.name.find('_'))];
  EXPECT_GE(by_source["torch"], 11);
  EXPECT_GE(by_source["helper"], 20);
  EXPECT_GE(by_source["tf2onnx"], 2);
  EXPECT_GE(by_source["node"], 8);  // every GRU and LSTM case of onnx 1.12's generator
  EXPECT_GE(by_source["ort"], 50);
}

TEST(Onnx, EveryOutputMatchesItsReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::map<std::string, Tensor> given;
    for (const std::string& g : c.given) given[g] = golden(c, g);
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

Case find(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return c;
  ADD_FAILURE() << "no case " << name;
  return {};
}

Model read_case(const Case& c) {
  std::map<std::string, Tensor> given;
  for (const std::string& g : c.given) given[g] = golden(c, g);
  return Model(read_model(kFiles + c.name + ".onnx", given));
}

// Layers that need the whole sequence (two directions, reverse, clip, peepholes, bound lengths
// or states) run in Model::process as in run_graph, bit for bit, and a stream refuses them,
// naming the layer and why.
TEST(Onnx, WholeSequenceLayersRunWholeAndRefuseStreams) {
  const std::vector<std::pair<std::string, std::string>> whole = {
      {"torch_gru_bidirectional_2layers", "layer 0 (gru) is bidirectional"},
      {"helper_gru_reverse", "layer 0 (gru) runs in reverse"},
      {"helper_gru_clip", "layer 0 (gru) clips its gates"},
      {"helper_lstm_peepholes", "layer 0 (lstm) has peepholes"},
      {"helper_lstm_clip_input_forget", "layer 0 (lstm) clips its gates"},
      {"helper_gru_sequence_lens_h0", "layer 0 (gru) is bidirectional"},
      {"torch_gru_2layers_h0", "layer 0 (gru) has initial states for a batch"},
  };
  for (const auto& [name, why] : whole) {
    SCOPED_TRACE(name);
    const Case c = find(name);
    const Model model = read_case(c);
    EXPECT_EQ(model.spec().whole_sequence_only(), why);
    EXPECT_THAT(
        [&] { ModelStream s(model, 2); },
        ::testing::ThrowsMessage<Error>(HasSubstr(why + ", which needs the whole sequence")));
    // The first output is the frames (T, D, N, H) or (T, N, F): process gives the same bits.
    const Tensor x = golden(c, c.input);
    const auto outs = run_graph(model, x);
    const Tensor y = model.process(x);  // (T, N, D H)
    const Tensor& g = outs[0].second;
    const int64_t T = x.size(0), N = x.size(1), F = y.size(2);
    ASSERT_EQ(g.numel(), T * N * F);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) {
          // (T, D, N, H) for a node's Y; (T, N, F) for torch's joined directions.
          const double want =
              g.dim() == 4 ? g.item({t, f / g.size(3), n, f % g.size(3)}) : g.item({t, n, f});
          ASSERT_EQ(y.item({t, n, f}), want) << t << " " << n << " " << f;
        }
  }
}

// The lengths and states a model was read with fix its batch, and lengths beyond the frames
// are refused.
TEST(Onnx, BoundLengthsAndStatesCheckTheRun) {
  const Case c = find("helper_gru_sequence_lens_h0");  // lengths 6 and 4, batch 2
  const Model model = read_case(c);
  EXPECT_EQ(model.spec().bound_batch(), 2);
  EXPECT_THAT(
      [&] {
        run_graph(model, Tensor::zeros({6, 3, 3}, DType::f32));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("are for a batch of 2, the input has 3")));
  EXPECT_THAT(
      [&] {
        run_graph(model, Tensor::zeros({5, 2, 3}, DType::f32));
      },
      ::testing::ThrowsMessage<Error>(
          HasSubstr("sequence 0 has length 6, but the input has 5 frames")));
  // A model file keeps the model, not a run's lengths.
  EXPECT_THAT([&] { serialize_model(model.spec()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("has sequence lengths bound")));
}

// What ONNX has beyond nn.GRU / nn.LSTM survives grux model convert: two directions,
// peepholes, clip, input_forget, reverse, read back to the same bits.
TEST(Onnx, ConvertKeepsEveryOption) {
  for (const char* name : {"helper_lstm_layout1_peepholes_bidirectional",
                           "helper_lstm_clip_input_forget", "helper_gru_reverse"}) {
    SCOPED_TRACE(name);
    const Case c = find(name);
    const Model model = read_case(c);
    const Model back(parse_model(serialize_model(model.spec()), "converted"));
    const ModelLayer &a = model.spec().layers[0], &b = back.spec().layers[0];
    EXPECT_EQ(a.directions, b.directions);
    EXPECT_EQ(a.reverse, b.reverse);
    EXPECT_EQ(a.clip, b.clip);
    EXPECT_EQ(a.input_forget, b.input_forget);
    EXPECT_EQ(a.peephole.defined(), b.peephole.defined());
    std::mt19937_64 rng(3);
    const Tensor x = test::random_tensor({5, 2, model.input_size()}, DType::f32, rng);
    EXPECT_EQ(worst(model.process(x), back.process(x)), 0.0);
  }
}

// serialize_onnx writes what the reader reads back to the very layers: every tensor's bits,
// every option; lengths bound at reading are refused.
TEST(Onnx, ExportReadsBackToTheSameLayers) {
  for (const char* name : {"torch_lstm_bidirectional_2layers", "helper_gru_clip",
                           "helper_lstm_layout1_peepholes_bidirectional", "helper_gru_reset_before",
                           "torch_gru_last_step_softmax"}) {
    SCOPED_TRACE(name);
    const ModelSpec a = read_case(find(name)).spec();
    const ModelSpec b = parse_model(serialize_onnx(a), "exported");
    EXPECT_EQ(b.graph.input, "x");
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t k = 0; k < a.layers.size(); ++k) {
      const ModelLayer &p = a.layers[k], &q = b.layers[k];
      EXPECT_EQ(p.kind, q.kind);
      EXPECT_EQ(p.form, q.form);
      EXPECT_EQ(p.directions, q.directions);
      EXPECT_EQ(p.reverse, q.reverse);
      EXPECT_EQ(p.clip, q.clip);
      const std::pair<const Tensor*, const Tensor*> ts[] = {
          {&p.w_ih, &q.w_ih},     {&p.w_hh, &q.w_hh}, {&p.b_ih, &q.b_ih},        {&p.b_hh, &q.b_hh},
          {&p.weight, &q.weight}, {&p.bias, &q.bias}, {&p.peephole, &q.peephole}};
      for (const auto& [t, u] : ts) {
        ASSERT_EQ(t->defined(), u->defined());
        if (!t->defined()) continue;
        ASSERT_EQ(t->shape(), u->shape());
        EXPECT_EQ(std::memcmp(t->data<float>(), u->data<float>(), t->numel() * 4), 0);
      }
    }
  }
  EXPECT_THAT([&] { serialize_onnx(read_case(find("helper_gru_sequence_lens_h0")).spec()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("has sequence lengths bound")));
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

// ONNX Runtime's cases with other activations than the defaults: each refused, naming them.
TEST(Onnx, OtherActivationsAreRefused) {
  EXPECT_THAT([&] { read_model(kFiles + std::string("bad_activations.onnx")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("node 0 \"rnn\" (GRU): activations")));
  int refused = 0;
  for (const auto& e : fs::directory_iterator(kFiles)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("refused_", 0) != 0) continue;
    SCOPED_TRACE(name);
    ++refused;
    EXPECT_THAT([&] { read_model(e.path().string()); },
                ::testing::ThrowsMessage<Error>(HasSubstr("): activations [")));
  }
  EXPECT_GE(refused, 8);
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
      {"bad_clip", "clip is -3, expected a bound > 0"},
      {"bad_activations", "activations [Relu, Tanh]: grux runs the default [Sigmoid, Tanh] only"},
      {"bad_direction", "direction is \"sideways\", expected forward, reverse or bidirectional"},
      {"bad_bidirectional_w", "W has shape [1, 15, 3], expected [2, 15, 3]"},
      {"bad_directions_apart", "has the two directions' features apart"},
      {"bad_cycle", "node 0 \"t1\" (Tanh): input 0 (\"B\") is neither"},
      {"bad_state_size",
       "node 4 \"rnn\" (GRU): initial_h is zeros of another shape than [1, "
       "batch, 5]"},
      {"bad_reshape_sizes", "node 1 \"reshape\" (Reshape): reshapes an axis (F) to 4"},
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
