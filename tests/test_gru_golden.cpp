// GRU and GRUCell against PyTorch golden files (tests/reference/golden, written by
// gen_gru_golden.py): outputs and every gradient, with optimized and reference kernels.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "grux/gru.h"
#include "grux/runtime.h"
#include "test_util.h"

namespace grux::test_gru_golden {
namespace {

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(GRUX_GOLDEN_DIR))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

struct Golden {
  std::string name;
  nlohmann::json config;
  std::map<std::string, Tensor> t;
  std::map<std::string, Tensor> weights;  // w.<key> with the prefix removed
  Tensor get(const std::string& k) const { return t.count(k) ? t.at(k) : Tensor(); }
};

Golden load(const std::string& file) {
  Golden g;
  g.name = file;
  SafeTensors st = read_safetensors(std::string(GRUX_GOLDEN_DIR) + "/" + file);
  g.config = nlohmann::json::parse(st.metadata.at("config"));
  g.t = st.tensors;
  for (const auto& [k, v] : st.tensors)
    if (k.rfind("w.", 0) == 0) g.weights[k.substr(2)] = v;
  return g;
}

class GoldenTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override { set_reference_kernels(std::get<1>(GetParam())); }
  void TearDown() override { set_reference_kernels(false); }
};

TEST_P(GoldenTest, MatchesPyTorch) {
  const Golden g = load(std::get<0>(GetParam()));
  const std::string where =
      g.name + (std::get<1>(GetParam()) ? " (reference kernels)" : " (optimized kernels)");
  const test::Tol tol = test::tol_for(g.get("input").dtype());
  if (g.config["kind"] == "cell") {
    GruCell cell = GruCell::from_state_dict(g.weights);
    const Tensor x = g.get("input"), h = g.get("h0");
    EXPECT_TRUE(test::all_close(where, "h_new", cell.forward(x, h), g.get("h_new"), tol));
    GruCellGrads d = cell.backward(x, h, g.get("grad_h_new"));
    EXPECT_TRUE(test::all_close(where, "grad.input", d.dinput, g.get("grad.input"), tol));
    if (h.defined()) {
      EXPECT_TRUE(test::all_close(where, "grad.h0", d.dh, g.get("grad.h0"), tol));
    }
    const GruLayerWeights& dw = d.dweights;
    EXPECT_TRUE(test::all_close(where, "grad.weight_ih", dw.w_ih, g.get("grad.weight_ih"), tol));
    EXPECT_TRUE(test::all_close(where, "grad.weight_hh", dw.w_hh, g.get("grad.weight_hh"), tol));
    if (g.config["bias"]) {
      EXPECT_TRUE(test::all_close(where, "grad.bias_ih", dw.b_ih, g.get("grad.bias_ih"), tol));
      EXPECT_TRUE(test::all_close(where, "grad.bias_hh", dw.b_hh, g.get("grad.bias_hh"), tol));
    }
    return;
  }
  GruConfig options;
  options.batch_first = g.config["batch_first"];
  Gru gru = Gru::from_state_dict(g.weights, options);
  EXPECT_EQ(gru.config().num_layers, g.config["num_layers"]);
  EXPECT_EQ(gru.config().bidirectional, g.config["bidirectional"]);
  EXPECT_EQ(gru.config().bias, g.config["bias"]);
  const Tensor x = g.get("input"), h0 = g.get("h0"), lengths = g.get("lengths");

  GruOutput inference = gru.forward(x, h0, lengths);
  EXPECT_TRUE(test::all_close(where, "output", inference.output, g.get("output"), tol));
  EXPECT_TRUE(test::all_close(where, "h_n", inference.h_n, g.get("h_n"), tol));

  GruTape tape;
  GruOutput y = gru.forward_train(x, h0, lengths, tape);
  EXPECT_TRUE(test::all_close(where, "output (train)", y.output, g.get("output"), tol));
  EXPECT_TRUE(test::all_close(where, "h_n (train)", y.h_n, g.get("h_n"), tol));
  GruGrads d = gru.backward(tape, g.get("grad_output"), g.get("grad_h_n"));
  EXPECT_TRUE(test::all_close(where, "grad.input", d.dinput, g.get("grad.input"), tol));
  if (h0.defined()) {
    EXPECT_TRUE(test::all_close(where, "grad.h0", d.dh0, g.get("grad.h0"), tol));
  }
  const auto dstate = d.state_dict(gru.config());
  EXPECT_EQ(dstate.size(), g.weights.size());
  for (const auto& [key, w] : g.weights) {
    ASSERT_TRUE(dstate.count(key)) << where << ": no gradient for " << key;
    EXPECT_TRUE(test::all_close(where, "grad." + key, dstate.at(key), g.get("grad." + key), tol));
  }
}

std::string case_name(const ::testing::TestParamInfo<GoldenTest::ParamType>& info) {
  std::string n = std::get<0>(info.param);
  n = n.substr(0, n.size() - std::string(".safetensors").size());
  return n + (std::get<1>(info.param) ? "_ref" : "_opt");
}

INSTANTIATE_TEST_SUITE_P(PyTorch, GoldenTest,
                         ::testing::Combine(::testing::ValuesIn(golden_files()), ::testing::Bool()),
                         case_name);

TEST(GoldenFiles, AllCasesPresent) {
  // Guards against an empty or missing golden folder making the suite pass vacuously.
  EXPECT_GE(golden_files().size(), 80u);
}

}  // namespace
}  // namespace grux::test_gru_golden
