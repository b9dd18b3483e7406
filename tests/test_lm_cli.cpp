// `grux train`, `grux generate` and `grux model show` end to end: outputs, exact resume
// after a kill -9 at random moments (the checkpoint is always whole), and every bad input:
// one line on stderr, exit code 2, nothing already saved damaged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "grux/dist.h"
#include "grux/io.h"
#include "grux/model.h"
#include "grux/train.h"
#include "test_util.h"

namespace grux::test_lm_cli {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

using test::CliRun;
using test::expect_user_error;
using test::grux_cli;
using test::slurp;

// Starts `cmd` (a shell command line, output discarded) in the background; returns its pid
// (the shell execs the command, so signals reach it directly), or -1.
pid_t spawn(const std::string& cmd) {
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >/dev/null 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// A small text and a model small enough that a step takes about a millisecond.
struct Fixture {
  TempDir dir;
  std::string data, small;
  Fixture() {
    data = dir.path + "/text.txt";
    write_file_atomic(
        data, read_file(std::string(GRUX_DATA_DIR) + "/tinyshakespeare.txt").substr(0, 20000));
    small = "--data " + data + " --hidden 16 --embed 8 --batch 4 --window 16 --threads 1";
  }
};

// A grux built without MPI that an MPI launcher starts several times (its environment says
// so) refuses at once instead of letting every copy train over the same files. Runs in the
// builds without MPI (scripts/test.sh's sanitizer build); an MPI build would start MPI here.
TEST(LmCli, ABuildWithoutMpiRefusesToRunAsManyRanks) {
  if (mpi_available()) GTEST_SKIP() << "this grux has MPI: tests/test_dist_cli.cpp covers it";
  TempDir tmp;
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);  // what mpirun -np 2 sets in each process
  for (const char* cmd : {"train --steps 2 --out ", "scan sum --input x.npy --dim 0 --out ",
                          "calibrate --quick --out "}) {
    const test::CliRun r = test::grux_cli(tmp.path, cmd + tmp.path + "/o");
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_THAT(r.err, HasSubstr("the MPI launcher started 2 processes, but this grux was built "
                                 "without MPI"))
        << cmd;
    EXPECT_FALSE(std::filesystem::exists(tmp.path + "/o")) << cmd;
  }
  unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(LmCli, TrainThenShowThenGenerate) {
  Fixture f;
  const std::string out = f.dir.path + "/run";
  CliRun r = grux_cli(f.dir.path, "train " + f.small + " --steps 30 --eval-every 10 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("validation loss"));
  EXPECT_THAT(r.err, HasSubstr("done after 30 steps"));
  const std::string csv = slurp(out + "/loss.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 31) << csv;  // header + 30 steps
  EXPECT_THAT(slurp(out + "/loss.svg"), HasSubstr("<svg"));

  r = grux_cli(f.dir.path,
               "model show " + out + "/checkpoint.safetensors --dot " + f.dir.path + "/m.dot");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("step 30 of 30"));
  EXPECT_THAT(r.out, HasSubstr("gru.weight_hh_l0"));
  EXPECT_THAT(r.out, HasSubstr("(48, 16)"));
  EXPECT_THAT(slurp(f.dir.path + "/m.dot"), HasSubstr("digraph"));

  r = grux_cli(f.dir.path, "generate --checkpoint " + out +
                               "/checkpoint.safetensors --prompt ROMEO: --length 40 --seed 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ROMEO:", 0), 0u) << r.out;
  EXPECT_EQ(r.out.size(), 6u + 40u + 1u) << r.out;  // ASCII corpus: one byte per character
  // Same seed, same text; greedy and beam search are deterministic too.
  EXPECT_EQ(grux_cli(f.dir.path, "generate --checkpoint " + out +
                                     "/checkpoint.safetensors --prompt ROMEO: --length 40 --seed 3")
                .out,
            r.out);
  for (const char* extra : {"--temperature 0", "--beam 4", "--top-k 3", "--precision bf16",
                            "--precision int8 --beam 3 --stats"}) {
    r = grux_cli(f.dir.path, "generate --checkpoint " + out + "/checkpoint.safetensors " +
                                 "--length 25 " + extra);
    ASSERT_EQ(r.code, 0) << extra << ": " << r.err;
    EXPECT_EQ(r.out.size(), 26u) << extra;
  }
  EXPECT_THAT(r.err, HasSubstr("characters/s"));

  // The validation loss in each precision: f32's is the one training printed last.
  r = grux_cli(f.dir.path, "model eval " + out + "/checkpoint.safetensors --data " + f.data);
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.out.find("f32   ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NEAR(std::stod(r.out.substr(at + 6)), std::stod(csv.substr(csv.rfind(',') + 1)), 1e-5)
      << r.out;
  EXPECT_THAT(r.out, HasSubstr("bf16 "));
  EXPECT_THAT(r.out, HasSubstr("int8 "));
  EXPECT_THAT(r.out, HasSubstr("vs f32"));
  r = grux_cli(f.dir.path, "model eval " + out + "/checkpoint.safetensors --precision int8 " +
                               "--data " + f.data);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("f32 ")));
  EXPECT_THAT(r.out, HasSubstr("int8 "));
}

// An LSTM model from the command line: trained, shown, generated from, evaluated; resumed
// with its cell from the checkpoint; trained in bf16, generated from in int8.
TEST(LmCli, TrainAnLstmThenShowGenerateAndEvaluate) {
  Fixture f;
  const std::string out = f.dir.path + "/run", ck = out + "/checkpoint.safetensors";
  CliRun r = grux_cli(f.dir.path, "train " + f.small + " --cell lstm --steps 12 --eval-every 6 " +
                                      "--checkpoint-every 6 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-> LSTM "));
  r = grux_cli(f.dir.path, "model show " + ck + " --dot -");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("character-level LSTM language model"));
  EXPECT_THAT(r.out, HasSubstr("lstm.weight_hh_l0"));
  EXPECT_THAT(r.out, HasSubstr("(64, 16)"));  // 4H x H
  EXPECT_THAT(r.out, HasSubstr("LSTM layer 0"));
  // The recurrent part as ONNX: the LSTM layer and the head, the checkpoint's very weights.
  r = grux_cli(f.dir.path, "model export-onnx " + ck + " " + f.dir.path + "/lm.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the embedding left out"));
  {
    const ModelSpec spec = read_model(f.dir.path + "/lm.onnx");
    ASSERT_EQ(spec.layers.size(), 2u);
    EXPECT_EQ(spec.layers[0].kind, ModelLayer::Kind::lstm);
    EXPECT_EQ(spec.layers[1].kind, ModelLayer::Kind::dense);
    const auto sd = load_trained_model(ck).model->state_dict();
    const Tensor w = sd.at("lstm.weight_hh_l0").to(DType::f32).contiguous();
    ASSERT_EQ(spec.layers[0].w_hh.shape(), w.shape());
    EXPECT_EQ(std::memcmp(spec.layers[0].w_hh.data<float>(), w.data<float>(), w.numel() * 4), 0);
    EXPECT_EQ(spec.input_size, sd.at("embedding.weight").size(1));
  }
  r = grux_cli(f.dir.path, "generate --checkpoint " + ck + " --prompt ROMEO: --length 30 --beam 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.size(), 6u + 30u + 1u) << r.out;
  r = grux_cli(f.dir.path, "model eval " + ck + " --data " + f.data);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("f32 "));
  EXPECT_THAT(r.out, HasSubstr("bf16 "));
  EXPECT_THAT(r.out, HasSubstr("int8 "));
  r = grux_cli(f.dir.path, "generate --checkpoint " + ck + " --precision int8 --length 10");
  ASSERT_EQ(r.code, 0) << r.err;
  r = grux_cli(f.dir.path, "train " + f.small + " --cell lstm --steps 2 --precision bf16 --out " +
                               f.dir.path + "/bf");
  ASSERT_EQ(r.code, 0) << r.err;
  r = grux_cli(f.dir.path, "model show " + f.dir.path + "/bf/checkpoint.safetensors");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trained with the LSTM's products in bf16"));
  expect_user_error(grux_cli(f.dir.path, "train " + f.small + " --cell rnn --steps 2 --out " +
                                             f.dir.path + "/rnn"),
                    {"--cell"});
  expect_user_error(grux_cli(f.dir.path, "train --data " + f.data + " --resume " + ck +
                                             " --cell gru --out " + out),
                    {"--cell cannot be combined with --resume"});
}

// Training in bf16 from the command line: the banner and `model show` say so, and the run
// resumes in bf16.
TEST(LmCli, TrainInBf16) {
  Fixture f;
  const std::string out = f.dir.path + "/run";
  CliRun r = grux_cli(f.dir.path, "train " + f.small +
                                      " --steps 6 --precision bf16 --checkpoint-every 3 "
                                      "--out " +
                                      out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("f32, the GRU's products in bf16"));
  r = grux_cli(f.dir.path, "model show " + out + "/checkpoint.safetensors");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("trained with the GRU's products in bf16"));
}

// kill -9 at random moments while checkpoints are being written every step: the checkpoint
// on disk always loads, and resuming from it ends with the uninterrupted run's loss history.
TEST(LmCli, KilledRunResumesToTheSameLosses) {
  Fixture f;
  const std::string args = "train " + f.small + " --steps 60 --eval-every 20 --checkpoint-every 1";
  CliRun r = grux_cli(f.dir.path, args + " --out " + f.dir.path + "/full");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string full_csv = slurp(f.dir.path + "/full/loss.csv");

  std::mt19937 rng(11);
  const std::string out = f.dir.path + "/killed";
  const std::string ck = out + "/checkpoint.safetensors";
  int kills = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::string cmd = std::string(GRUX_CLI) + " " + args + " --out " + out;
    if (fs::exists(ck))
      cmd = std::string(GRUX_CLI) + " train --resume " + ck + " --data " + f.data +
            " --threads 1 --checkpoint-every 1 --out " + out;
    const pid_t pid = spawn(cmd);
    ASSERT_GE(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 60));
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) ++kills;
    if (fs::exists(ck)) {
      // Whatever moment the kill hit, the checkpoint is a whole, loadable file.
      r = grux_cli(f.dir.path, "model show " + ck);
      ASSERT_EQ(r.code, 0) << "attempt " << attempt << ": " << r.err;
    }
  }
  EXPECT_GT(kills, 0);
  if (!fs::exists(ck)) GTEST_SKIP() << "no checkpoint was written before the kills";
  r = grux_cli(f.dir.path,
               "train --resume " + ck + " --data " + f.data + " --threads 1 --out " + out);
  if (r.code == 2 && r.err.find("the run is complete") != std::string::npos) {
    // A kill landed after the last step: the run had finished.
  } else {
    ASSERT_EQ(r.code, 0) << r.err;
  }
  EXPECT_EQ(slurp(out + "/loss.csv"), full_csv);
}

// A finished run's checkpoint without its final evaluation (what a kill between the two left
// before grux saved them together): --resume evaluates it and writes the uninterrupted
// run's curve; a finished, evaluated run is refused.
TEST(LmCli, ResumeOfAFinishedRunCompletesAMissingFinalEvaluation) {
  Fixture f;
  const std::string args = "train " + f.small + " --steps 20 --eval-every 10";
  CliRun r = grux_cli(f.dir.path, args + " --out " + f.dir.path + "/full");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string full_ck = f.dir.path + "/full/checkpoint.safetensors";
  SafeTensors ck = read_safetensors(full_ck);
  const Tensor vs = ck.tensors.at("history.val_step"), vl = ck.tensors.at("history.val_loss");
  ASSERT_EQ(vs.numel(), 2);  // steps 10 and 20
  ck.tensors["history.val_step"] = vs.slice(0, 0, 1).contiguous();
  ck.tensors["history.val_loss"] = vl.slice(0, 0, 1).contiguous();
  const std::string out = f.dir.path + "/stale";
  fs::create_directories(out);
  write_safetensors(out + "/checkpoint.safetensors", ck.tensors, ck.metadata);
  const std::string resume = "train --resume " + out + "/checkpoint.safetensors --data " + f.data +
                             " --threads 1 --out " + out;
  r = grux_cli(f.dir.path, resume);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("final evaluation was missing"));
  EXPECT_EQ(slurp(out + "/loss.csv"), slurp(f.dir.path + "/full/loss.csv"));
  // Now it is complete, like the uninterrupted run.
  expect_user_error(grux_cli(f.dir.path, resume), {"the run is complete"});
  expect_user_error(grux_cli(f.dir.path, "train --resume " + full_ck + " --data " + f.data +
                                             " --threads 1 --out " + f.dir.path + "/again"),
                    {"the run is complete"});
}

// Ctrl-C (SIGINT) saves and exits with 130; resuming ends with the uninterrupted history.
TEST(LmCli, InterruptSavesAndResumes) {
  Fixture f;
  const std::string args =
      "train " + f.small + " --steps 3000 --eval-every 500 --checkpoint-every 100";
  CliRun r = grux_cli(f.dir.path, args + " --out " + f.dir.path + "/full");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string out = f.dir.path + "/int";
  const pid_t pid = spawn(std::string(GRUX_CLI) + " " + args + " --out " + out);
  ASSERT_GE(pid, 0);
  // Interrupt mid-run: once the first checkpoint (step 100) is on disk.
  for (int i = 0; i < 500 && !fs::exists(out + "/checkpoint.safetensors"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  // Before its handler is installed (start-up), SIGINT ends the process as usual.
  if (WIFSIGNALED(st)) GTEST_SKIP() << "interrupted during start-up";
  if (WEXITSTATUS(st) == 0) GTEST_SKIP() << "the run finished before the interrupt";
  EXPECT_EQ(WEXITSTATUS(st), 130);
  r = grux_cli(f.dir.path, "train --resume " + out + "/checkpoint.safetensors --data " + f.data +
                               " --threads 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(out + "/loss.csv"), slurp(f.dir.path + "/full/loss.csv"));
}

TEST(LmCli, BadInputIsOneLineExit2) {
  Fixture f;
  const std::string d = f.dir.path;
  expect_user_error(grux_cli(d, "train --data " + d + "/missing.txt --steps 1 --out " + d + "/o"),
                    {"--data", "missing.txt"});
  write_file_atomic(d + "/empty.txt", "");
  expect_user_error(grux_cli(d, "train --data " + d + "/empty.txt --steps 1 --out " + d + "/o"),
                    {"empty"});
  write_file_atomic(d + "/latin1.txt", std::string(500, 'a') + "caf\xe9 " + std::string(500, 'b'));
  expect_user_error(grux_cli(d, "train --data " + d + "/latin1.txt --steps 1 --out " + d + "/o"),
                    {"not valid UTF-8", "byte offset 503"});
  write_file_atomic(d + "/short.txt", "to be or not");
  expect_user_error(grux_cli(d, "train --data " + d + "/short.txt --steps 1 --out " + d + "/o"),
                    {"too short"});
  expect_user_error(grux_cli(d, "train " + f.small + " --steps 0 --out " + d + "/o"),
                    {"--steps is 0"});
  expect_user_error(grux_cli(d, "train " + f.small + " --lr -1 --out " + d + "/o"), {"--lr"});
  expect_user_error(grux_cli(d, "train " + f.small + " --dropout 1.5 --out " + d + "/o"),
                    {"dropout"});
  expect_user_error(grux_cli(d, "train " + f.small + " --precision int8 --out " + d + "/o"),
                    {"--precision int8", "inference"});
  expect_user_error(
      grux_cli(d, "train " + f.small + " --precision bf16 --dtype f64 --out " + d + "/o"),
      {"--precision bf16", "f64"});

  // A finished run to test resume and generate errors against.
  ASSERT_EQ(grux_cli(d, "train " + f.small + " --steps 3 --out " + d + "/run").code, 0);
  const std::string ck = d + "/run/checkpoint.safetensors";
  const std::string saved = slurp(ck);
  expect_user_error(
      grux_cli(d, "train --resume " + ck + " --data " + f.data + " --out " + d + "/run"),
      {"the run is complete"});
  expect_user_error(grux_cli(d, "train --resume " + ck + " --hidden 32 --data " + f.data),
                    {"--hidden cannot be combined with --resume"});
  expect_user_error(grux_cli(d, "train --resume " + ck + " --precision bf16 --data " + f.data),
                    {"--precision cannot be combined with --resume"});
  expect_user_error(grux_cli(d, "train --resume " + ck + " --data " + d + "/latin1.txt"),
                    {"trained on other data"});
  write_file_atomic(d + "/other.txt", std::string(3000, 'x') + "\n" + std::string(3000, 'y'));
  expect_user_error(grux_cli(d, "train --resume " + ck + " --data " + d + "/other.txt"),
                    {"trained on other data"});
  expect_user_error(grux_cli(d, "generate --checkpoint " + ck + " --prompt \"\xc3\xa9t\xc3\xa9\""),
                    {"--prompt: character U+00E9 at position 0"});
  expect_user_error(grux_cli(d, "generate --checkpoint " + ck + " --temperature -1"),
                    {"--temperature"});
  expect_user_error(grux_cli(d, "generate --checkpoint " + ck + " --beam 0"), {"--beam"});
  expect_user_error(grux_cli(d, "generate --checkpoint " + ck + " --precision f16"),
                    {"f16", "bf16"});
  expect_user_error(grux_cli(d, "model eval " + ck + " --precision f16"), {"f16", "bf16"});
  expect_user_error(grux_cli(d, "model eval " + ck), {"other data"});
  write_file_atomic(d + "/cut.safetensors", saved.substr(0, saved.size() - 100));
  expect_user_error(grux_cli(d, "generate --checkpoint " + d + "/cut.safetensors"),
                    {"cut.safetensors"});
  expect_user_error(grux_cli(d, "model show " + d + "/cut.safetensors"), {"cut.safetensors"});
  expect_user_error(grux_cli(d, "generate --checkpoint " + d + "/text.txt"), {"text.txt"});
  EXPECT_EQ(slurp(ck), saved) << "a failed command changed the checkpoint";
}

}  // namespace
}  // namespace grux::test_lm_cli
