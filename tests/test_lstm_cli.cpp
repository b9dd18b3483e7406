// The `grux lstm` conformance CLI end to end: files in, files out, compared with PyTorch's
// golden results (golden/lstm); and bad input of every kind: one line on stderr, exit code 2,
// nothing written under --out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grux/io.h"
#include "test_util.h"

namespace grux::test_lstm_cli {
namespace {

namespace fs = std::filesystem;
using test::expect_user_error;
using test::grux_cli;

SafeTensors golden(const std::string& name) {
  return read_safetensors(std::string(GRUX_GOLDEN_DIR) + "/lstm/" + name + ".safetensors");
}

// Writes a golden case's inputs as the CLI's files; returns the CLI arguments.
std::string write_inputs(const SafeTensors& g, const std::string& dir, bool grads,
                         bool batch_first) {
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0) w[k.substr(2)] = v;
  write_safetensors(dir + "/w.safetensors", w);
  std::string args = "lstm --weights " + dir + "/w.safetensors --out " + dir + "/out";
  if (batch_first) args += " --batch-first";
  auto put = [&](const char* key, const char* flag) {
    if (!g.tensors.count(key)) return;
    write_npy(dir + "/" + key + ".npy", g.tensors.at(key));
    args += std::string(" ") + flag + " " + dir + "/" + key + ".npy";
  };
  put("input", "--input");
  put("h0", "--h0");
  put("c0", "--c0");
  put("lengths", "--lengths");
  if (grads) {
    put("grad_output", "--grad-output");
    put("grad_h_n", "--grad-hn");
    put("grad_c_n", "--grad-cn");
  }
  return args;
}

struct Case {
  const char* golden;
  bool batch_first;
};

class LstmCliGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LstmCliGolden, WritesOutputsAndGradientsMatchingPyTorch) {
  const Case& k = GetParam();
  test::TempDir tmp;
  const SafeTensors g = golden(k.golden);
  const test::CliRun r = grux_cli(tmp.path, write_inputs(g, tmp.path, true, k.batch_first));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string out = tmp.path + "/out/";
  const test::Tol tol = test::tol_for(g.tensors.at("input").dtype());
  const auto grad_tol = [&](const Tensor& e) {
    return test::Tol{tol.atol + tol.rtol * test::max_abs(e) * 0.1, tol.rtol};
  };
  for (const char* name : {"output", "h_n", "c_n"})
    EXPECT_TRUE(
        test::all_close(k.golden, name, read_npy(out + name + ".npy"), g.tensors.at(name), tol));
  const auto grad = [&](const std::string& file, const std::string& key) {
    const Tensor e = g.tensors.at(key);
    EXPECT_TRUE(test::all_close(k.golden, key, read_npy(out + file), e, grad_tol(e)));
  };
  grad("grad_input.npy", "grad.input");
  EXPECT_EQ(fs::exists(out + "grad_h0.npy"), g.tensors.count("h0") == 1);
  EXPECT_EQ(fs::exists(out + "grad_c0.npy"), g.tensors.count("c0") == 1);
  if (g.tensors.count("h0")) grad("grad_h0.npy", "grad.h0");
  if (g.tensors.count("c0")) grad("grad_c0.npy", "grad.c0");
  const SafeTensors dw = read_safetensors(out + "grad_weights.safetensors");
  int64_t keys = 0;
  for (const auto& [key, v] : g.tensors) {
    if (key.rfind("grad.", 0) != 0 || key == "grad.input" || key == "grad.h0" || key == "grad.c0")
      continue;
    ++keys;
    ASSERT_TRUE(dw.tensors.count(key.substr(5))) << key;
    EXPECT_TRUE(test::all_close(k.golden, key, dw.tensors.at(key.substr(5)), v, grad_tol(v)));
  }
  EXPECT_EQ(static_cast<int64_t>(dw.tensors.size()), keys);
}

INSTANTIATE_TEST_SUITE_P(Golden, LstmCliGolden,
                         ::testing::Values(Case{"lstm_basic_f32", false},
                                           Case{"lstm_basic_f64", false},
                                           Case{"lstm_proj_l2_bidir_lengths_bf_f32", true},
                                           Case{"lstm_proj_l2_bidir_lengths_bf_f64", true},
                                           Case{"lstm_c0_only_f64", false},
                                           Case{"lstm_unbatched_proj_f32", false},
                                           Case{"lstm_gradcn_bidir_lengths_f64", false}),
                         [](const auto& info) { return std::string(info.param.golden); });

// The example LSTM of data/example (the README's command) gives PyTorch's output.
TEST(LstmCli, ExampleModelMatchesPyTorch) {
  test::TempDir tmp;
  const std::string d = std::string(GRUX_DATA_DIR) + "/example/";
  const test::CliRun r = grux_cli(tmp.path, "lstm --weights " + d + "lstm.safetensors --input " +
                                                d + "input.npy --out " + tmp.path + "/out");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(test::all_close("example", "output", read_npy(tmp.path + "/out/output.npy"),
                              read_npy(d + "expected_lstm_output.npy"), test::tol_for(DType::f32)));
}

TEST(LstmCli, ForwardOnlyWritesNoGradients) {
  test::TempDir tmp;
  const test::CliRun r =
      grux_cli(tmp.path, write_inputs(golden("lstm_basic_f32"), tmp.path, false, false));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp.path + "/out/c_n.npy"));
  EXPECT_FALSE(fs::exists(tmp.path + "/out/grad_input.npy"));
}

TEST(LstmCli, Help) {
  test::TempDir tmp;
  const test::CliRun help = grux_cli(tmp.path, "lstm --help");
  EXPECT_EQ(help.code, 0);
  for (const char* flag : {"--weights", "--c0", "--grad-cn", "--batch-first", "proj_size"})
    EXPECT_THAT(help.out, ::testing::HasSubstr(flag));
}

// Bad inputs of every kind, from a valid problem, one file broken at a time; none leaves
// anything under --out.
class LstmCliBadInput : public ::testing::Test {
 protected:
  test::TempDir tmp;
  SafeTensors g = golden("lstm_lengths_h0_c0_f32");
  std::string args;
  void SetUp() override { args = write_inputs(g, tmp.path, true, false); }
  std::string p(const char* f) { return tmp.path + "/" + f; }
  void expect_refused(std::initializer_list<const char*> pieces) {
    expect_user_error(grux_cli(tmp.path, args), pieces);
    EXPECT_FALSE(fs::exists(p("out"))) << "something was written under --out";
  }
};

TEST_F(LstmCliBadInput, ValidBaselineSucceeds) {
  EXPECT_EQ(grux_cli(tmp.path, args).code, 0);
}

TEST_F(LstmCliBadInput, Files) {
  fs::remove(p("c0.npy"));
  expect_refused({"c0.npy"});
  std::ofstream(p("c0.npy"), std::ios::binary) << "\x93NUMPY";
  expect_refused({"c0.npy"});
  write_npy(p("c0.npy"), g.tensors.at("c0").to(DType::f64));
  expect_refused({"c0.npy", "mixed"});
}

TEST_F(LstmCliBadInput, Shapes) {
  write_npy(p("c0.npy"), Tensor::zeros({1, 4, 5}, DType::f32));
  expect_refused({"c0", "(1, 4, 6)", "c0.npy"});
  write_npy(p("c0.npy"), g.tensors.at("c0"));
  write_npy(p("h0.npy"), Tensor::zeros({2, 4, 6}, DType::f32));
  expect_refused({"h0", "(1, 4, 6)"});
  write_npy(p("h0.npy"), g.tensors.at("h0"));
  write_npy(p("grad_c_n.npy"), Tensor::zeros({1, 4, 7}, DType::f32));
  expect_refused({"grad_c_n.npy: --grad-cn has shape (1, 4, 7), expected c_n's (1, 4, 6)"});
  write_npy(p("grad_c_n.npy"), g.tensors.at("grad_c_n"));
  write_npy(p("lengths.npy"), Tensor::full({4}, 7, DType::i64));
  expect_refused({"lengths[0] = 7"});
  write_npy(p("lengths.npy"), Tensor::full({4}, 1, DType::f32));
  expect_refused({"lengths.npy", "i64"});
}

TEST_F(LstmCliBadInput, WeightsOfAnotherModel) {
  std::map<std::string, Tensor> w;
  for (const auto& [k, v] : g.tensors)
    if (k.rfind("w.", 0) == 0 && k != "w.bias_hh_l0") w[k.substr(2)] = v;
  write_safetensors(p("w.safetensors"), w);
  expect_refused({"w.safetensors", "missing key 'bias_hh_l0'"});
  // A GRU's state dict: 3H rows.
  const SafeTensors gru =
      read_safetensors(std::string(GRUX_GOLDEN_DIR) + "/gru_lengths_h0_f32.safetensors");
  w.clear();
  for (const auto& [k, v] : gru.tensors)
    if (k.rfind("w.", 0) == 0) w[k.substr(2)] = v;
  write_safetensors(p("w.safetensors"), w);
  expect_refused({"w.safetensors", "weight_ih_l0", "4*hidden_size"});
}

TEST(LstmCliBench, PrintsOneCheckedJsonLine) {
  test::TempDir tmp;
  for (const char* args : {"bench lstm l2d2t6n3i5h7p3 --threads 1 --reps 2",
                           "bench lstm t6n3i5h17 --train --lengths uniform:1:6:2 --reps 1",
                           "bench lstm t4n2i3h5 --dtype f64 --reps 1",
                           "bench lstm l2t40n1i1h6 --cell --block 7 --reps 1 --predict",
                           "bench lstm l2t9n3i4h20 --precision bf16 --reps 1",
                           "bench lstm l2d2t7n3i4h20p9 --train --precision bf16 --reps 1",
                           "bench lstm t30n1i1h12 --cell --precision int8 --reps 1"}) {
    const test::CliRun r = grux_cli(tmp.path, args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["op"], "lstm");
    EXPECT_TRUE(j["checked"].get<bool>());
    EXPECT_GT(j["median_ms"].get<double>(), 0);
    EXPECT_GT(j["gflops"].get<double>(), 0);
    // The cost model's roofline at this process's rates (grux cost lstm's phases).
    EXPECT_GT(j["bound_ms"].get<double>(), 0);
    EXPECT_THAT(j["bound"].get<std::string>(), testing::AnyOf("compute", "traffic"));
    if (j["precision"] != "f32") {
      EXPECT_GT(j["max_abs_diff_vs_f32"].get<double>(), 0) << args;
    }
    if (j["mode"] == "cell" && j["precision"] == "f32") {
      EXPECT_EQ(j["block"], 7);
      EXPECT_GT(j["predicted_ms"].get<double>(), 0);
    }
  }
  const test::CliRun r = grux_cli(tmp.path, "bench lstm l2d2t6n3i5h7p3 --reps 1");
  EXPECT_EQ(nlohmann::json::parse(r.out)["problem"], "l2d2t6n3i5h7p3");
}

// A batch-1 f32 stream's bound: the longest of the chain, the work and the weights' read,
// with the LSTM's counts (calibrate.h): l2 i1 h6 reads 4*6*(1+6) + 4*6*(6+6) = 456 floats a
// frame, and i2 h8 p3 4*8*(2+3) + 3*8 = 184; the chain of the projected one is 11 operations,
// the longer of sigmoid and tanh, and tanh.
TEST(LstmCliBench, StreamsPrintTheirBound) {
  test::TempDir tmp;
  for (const auto& [args, floats] :
       {std::pair{"bench lstm l2t40n1i1h6 --cell --threads 1 --reps 1", 456},
        std::pair{"bench lstm t20n1i2h8p3 --cell --block 4 --threads 1 --reps 1", 184}}) {
    const test::CliRun r = grux_cli(tmp.path, args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const double chain = j["chain_ns"], work = j["work_ns"], weights = j["weights_ns"];
    for (double part : {chain, work, weights}) EXPECT_GT(part, 0) << r.out;
    EXPECT_NEAR(j["bound_ns_per_frame"].get<double>(), std::max({chain, work, weights}), 0.051)
        << r.out;
    // Both figures are printed to 0.1: at about a nanosecond their product is that far off.
    const double gbps = j["weights_gbps"];
    EXPECT_NEAR(weights * gbps, 4.0 * floats, (0.01 + 0.05 / weights + 0.05 / gbps) * 4 * floats)
        << r.out;
    if (floats == 184) {
      const double fma = j["fma_ns"], sig = j["sigmoid_ns"], th = j["tanh_ns"];
      EXPECT_NEAR(chain, 11 * fma + std::max(sig, th) + th, 0.1 + 0.02 * chain) << r.out;
    }
  }
  // Not in bf16 / int8 (their weights are not f32's bytes).
  const test::CliRun q =
      grux_cli(tmp.path, "bench lstm t30n1i1h12 --cell --precision int8 --reps 1");
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_FALSE(nlohmann::json::parse(q.out).contains("bound_ns_per_frame")) << q.out;
}

TEST(LstmCliBench, RefusesToTimeAWrongResultAndBadArguments) {
  test::TempDir tmp;
  const test::CliRun r = grux_cli(tmp.path, "bench lstm t5n2i3h4 --reps 1 --inject-mismatch");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, ::testing::HasSubstr("differs from the reference"));
  expect_user_error(grux_cli(tmp.path, "bench lstm t5n2i3h4p4"), {"p4", "1 <= p < h = 4"});
  expect_user_error(grux_cli(tmp.path, "bench lstm l1d3t5n2i3h4"), {"d3"});
  expect_user_error(grux_cli(tmp.path, "bench lstm t5n2i3"), {"malformed"});
  expect_user_error(grux_cli(tmp.path, "bench lstm t5n2i3h4 --train --precision int8"),
                    {"int8 is for inference", "f32 or bf16"});
  expect_user_error(grux_cli(tmp.path, "bench lstm t5n2i3h4 --dtype f64 --precision int8"),
                    {"takes an f32 LSTM"});
  expect_user_error(grux_cli(tmp.path, "bench lstm t5n2i3h4 --lengths uniform:1:9:1"), {"T = 5"});
  expect_user_error(grux_cli(tmp.path, "bench lstm t100000n100000i1000h1000"), {"GiB", "memory"});
}

}  // namespace
}  // namespace grux::test_lstm_cli
