// `grux model show | run | convert` on model files (tools/grux/cmd_model.cpp): what show prints,
// run's output against the library's, its independence from --block, convert's round trip, and
// bad input as one line and exit code 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "grux/io.h"
#include "grux/model.h"
#include "test_util.h"

namespace grux::test_model_cli {
namespace {

using test::CliRun;
using test::expect_user_error;
using test::grux_cli;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFiles = std::string(GRUX_MODELS_DIR) + "/files/";
const std::string kSignal = std::string(GRUX_MODELS_DIR) + "/golden/signal_i1.npy";

TEST(ModelCli, ShowListsTheLayersAndTheRealTimeFactor) {
  TempDir tmp;
  CliRun r = grux_cli(tmp.path, "model show " + kFiles + "nam_core_lstm.nam");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(nam, \"Test LSTM\")"));
  EXPECT_THAT(r.out, HasSubstr("sample rate: 48000 Hz"));
  EXPECT_THAT(r.out, HasSubstr("stored initial state"));
  EXPECT_THAT(r.out, HasSubstr("predicted (cost model"));
  EXPECT_THAT(r.out, HasSubstr("real time at 48000 Hz"));
  EXPECT_THAT(r.out, HasSubstr("measured (one frame per call"));
  r = grux_cli(tmp.path, "model show --no-measure " + kFiles + "rtneural_gru.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(rtneural-json)"));
  EXPECT_THAT(r.out, HasSubstr("not in the file (48000 Hz assumed below)"));
  EXPECT_THAT(r.out, HasSubstr("sigmoid"));
  EXPECT_THAT(r.out, Not(HasSubstr("measured")));
}

TEST(ModelCli, RunWritesTheLibrarysOutputWhateverTheBlock) {
  TempDir tmp;
  const std::string file = kFiles + "neuralseed_gru7_ts9.json";
  const Tensor want = load_model(file).process(read_npy(kSignal));
  for (const char* block : {"0", "1", "64"}) {
    const std::string out = tmp.path + "/run" + block;
    const CliRun r = grux_cli(tmp.path, "model run " + file + " --input " + kSignal + " --out " +
                                            out + " --block " + block);
    ASSERT_EQ(r.code, 0) << r.err;
    const Tensor y = read_npy(out + "/output.npy");
    ASSERT_EQ(y.shape(), want.shape());
    EXPECT_EQ(std::memcmp(y.data<float>(), want.data<float>(), y.numel() * 4), 0) << block;
  }
}

TEST(ModelCli, RunAtAnotherSampleRate) {
  TempDir tmp;
  const std::string file = kFiles + "rtneural_gru.json", out = tmp.path + "/sr";
  const CliRun r = grux_cli(tmp.path, "model run " + file + " --input " + kSignal + " --out " +
                                          out + " --sample-rate 96000 --correction no_interp");
  ASSERT_EQ(r.code, 0) << r.err;
  const Tensor y = read_npy(out + "/output.npy");
  const Tensor want = read_npy(std::string(GRUX_MODELS_DIR) + "/golden/rate/gru_nointerp2.npy");
  ASSERT_EQ(y.shape(), want.shape());
  for (int64_t t = 0; t < y.numel(); ++t)
    ASSERT_NEAR(y.data<float>()[t], want.data<float>()[t],
                1e-5 + 1e-4 * std::fabs(want.data<float>()[t]))
        << t;
  expect_user_error(grux_cli(tmp.path, "model run " + file + " --input " + kSignal + " --out " +
                                           out + " --sample-rate 22050"),
                    {"22050 Hz is below the model's 48000 Hz"});
  expect_user_error(grux_cli(tmp.path, "model run " + file + " --input " + kSignal + " --out " +
                                           out + " --sample-rate 88200 --correction no_interp"),
                    {"no_interp needs a whole ratio"});
}

TEST(ModelCli, ConvertRoundTrips) {
  TempDir tmp;
  const std::string out = tmp.path + "/m.safetensors";
  const CliRun r = grux_cli(tmp.path, "model convert " + kFiles + "rtneural_dense.json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rtneural-json"));
  const Tensor x = read_npy(kSignal);
  const Tensor a = load_model(kFiles + "rtneural_dense.json").process(x);
  const Tensor b = load_model(out).process(x);
  EXPECT_EQ(std::memcmp(a.data<float>(), b.data<float>(), a.numel() * 4), 0);
}

// An ONNX graph: one DIR/<output name>.npy per graph output, the bits of run_graph; weights that
// are graph inputs given as NAME=X.npy; show prints the graph and the file's
// linear_before_reset.
TEST(ModelCli, RunOnnxWritesEveryGraphOutput) {
  TempDir tmp;
  const std::string onnx = std::string(GRUX_ONNX_DIR) + "/files/";
  const std::string golden = std::string(GRUX_ONNX_DIR) + "/golden/";
  const std::string file = onnx + "torch_lstm_2layers.onnx",
                    x = golden + "torch_lstm_2layers.x.npy";
  const auto want = run_graph(load_model(file), read_npy(x));
  CliRun r =
      grux_cli(tmp.path, "model run " + file + " --input " + x + " --out " + tmp.path + "/o");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(want.size(), 3u);
  for (const auto& [name, t] : want) {
    const Tensor y = read_npy(tmp.path + "/o/" + name + ".npy");
    ASSERT_EQ(y.shape(), t.shape()) << name;
    EXPECT_EQ(std::memcmp(y.data<float>(), t.data<float>(), y.numel() * 4), 0) << name;
  }
  const std::string w = onnx + "helper_lstm_weights_as_inputs.onnx",
                    g = golden + "helper_lstm_weights_as_inputs.";
  r = grux_cli(tmp.path, "model run " + w + " --input X=" + g + "X.npy --input W=" + g +
                             "W.npy --input R=" + g + "R.npy --input B=" + g + "B.npy --out " +
                             tmp.path + "/w");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(tmp.path + "/w/Y_c.npy"));
  r = grux_cli(tmp.path, "model show --no-measure " + onnx + "helper_gru_reset_before.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("graph: input \"X\" TNF; outputs \"Y\" T1NF (frames)"));
  EXPECT_THAT(r.out, HasSubstr("the file's linear_before_reset = 0"));
  expect_user_error(
      grux_cli(tmp.path, "model run " + w + " --input " + g + "X.npy --out " + tmp.path + "/bad"),
      {"graph input \"W\": is not the frames"});
  expect_user_error(grux_cli(tmp.path, "model run " + file + " --input " + x + " --block 4 --out " +
                                           tmp.path + "/bad"),
                    {"an ONNX graph runs whole"});
  expect_user_error(
      grux_cli(tmp.path, "model run " + kFiles + "nam_core_lstm.nam --input " + kSignal +
                             " --input W=" + x + " --out " + tmp.path + "/bad"),
      {"NAME=X.npy is for ONNX graphs"});
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/bad")) << "nothing written on bad input";
}

// grux model export-onnx: a .nam (stored initial states) as ONNX, run by grux model run to the
// bits of the .nam itself; refusals in one line.
TEST(ModelCli, ExportOnnxRunsToTheSameBits) {
  TempDir tmp;
  const std::string out = tmp.path + "/nam.onnx";
  CliRun r = grux_cli(tmp.path, "model export-onnx " + kFiles + "nam_core_lstm.nam " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ONNX opset 14"));
  const Tensor x = read_npy(kSignal);  // (T, 1)
  const Tensor want = load_model(kFiles + "nam_core_lstm.nam").process(x);
  write_npy(tmp.path + "/x.npy", x.reshape({x.size(0), 1, x.size(1)}));
  r = grux_cli(tmp.path,
               "model run " + out + " --input " + tmp.path + "/x.npy --out " + tmp.path + "/o");
  ASSERT_EQ(r.code, 0) << r.err;
  const Tensor y = read_npy(tmp.path + "/o/y.npy");
  ASSERT_EQ(y.numel(), want.numel());
  EXPECT_EQ(std::memcmp(y.data<float>(), want.data<float>(), y.numel() * 4), 0);
  expect_user_error(grux_cli(tmp.path, "model export-onnx " + kFiles + "rtneural_dense.json " +
                                           tmp.path + "/bad.onnx"),
                    {"export-onnx: the model has no GRU or LSTM layer"});
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/bad.onnx")) << "nothing written on bad input";
}

// A model with a bidirectional layer, converted from ONNX to grux's file, runs whole through
// grux model run (Model::process's bits); the stream's options are refused for it.
TEST(ModelCli, RunOfAWholeSequenceModel) {
  TempDir tmp;
  const std::string onnx =
      std::string(GRUX_ONNX_DIR) + "/files/torch_gru_bidirectional_2layers.onnx";
  const std::string st = tmp.path + "/bi.safetensors";
  CliRun r = grux_cli(tmp.path, "model convert " + onnx + " " + st);
  ASSERT_EQ(r.code, 0) << r.err;
  const Tensor x =
      read_npy(std::string(GRUX_ONNX_DIR) + "/golden/torch_gru_bidirectional_2layers.x.npy");
  const Tensor want = load_model(onnx).process(x);
  r = grux_cli(tmp.path, "model run " + st + " --input " + std::string(GRUX_ONNX_DIR) +
                             "/golden/torch_gru_bidirectional_2layers.x.npy --out " + tmp.path +
                             "/o");
  ASSERT_EQ(r.code, 0) << r.err;
  const Tensor y = read_npy(tmp.path + "/o/output.npy");
  ASSERT_EQ(y.shape(), want.shape());
  EXPECT_EQ(std::memcmp(y.data<float>(), want.data<float>(), y.numel() * 4), 0);
  expect_user_error(
      grux_cli(tmp.path, "model run " + st + " --input " + std::string(GRUX_ONNX_DIR) +
                             "/golden/torch_gru_bidirectional_2layers.x.npy --block 4 --out " +
                             tmp.path + "/bad"),
      {"layer 0 (gru) is bidirectional, so the model runs on the whole signal"});
  r = grux_cli(tmp.path, "model show --no-measure " + st);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bidirectional"));
}

TEST(ModelCli, BadInputIsOneLineAndExitCode2) {
  TempDir tmp;
  const std::string nam = kFiles + "nam_core_lstm.nam";
  write_npy(tmp.path + "/x2.npy", Tensor::zeros({10, 2}, DType::f32));
  write_npy(tmp.path + "/x64.npy", Tensor::zeros({10, 1}, DType::f64));
  expect_user_error(grux_cli(tmp.path, "model run " + nam + " --input " + tmp.path +
                                           "/x2.npy --out " + tmp.path + "/o"),
                    {"x2.npy: shape (10, 2), expected (T, 1)"});
  expect_user_error(grux_cli(tmp.path, "model run " + nam + " --input " + tmp.path +
                                           "/x64.npy --out " + tmp.path + "/o"),
                    {"dtype f64, expected f32"});
  expect_user_error(grux_cli(tmp.path, "model run " + kFiles + "rtneural_bad_lstm.json --input " +
                                           kSignal + " --out " + tmp.path + "/o"),
                    {"layer 0 (lstm)"});
  expect_user_error(grux_cli(tmp.path, "model show " + tmp.path + "/missing.json"),
                    {"missing.json"});
  expect_user_error(grux_cli(tmp.path, "model run " + nam + " --input " + kSignal + " --out " +
                                           tmp.path + "/o --block -3"),
                    {"--block -3"});
  EXPECT_FALSE(std::filesystem::exists(tmp.path + "/o")) << "nothing written on bad input";
}

}  // namespace
}  // namespace grux::test_model_cli
