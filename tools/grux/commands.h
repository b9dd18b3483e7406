// The grux CLI's subcommands: each registers its options on the parser and returns the
// action to run when it is chosen. Errors are grux::Error, reported by main as one line.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "grux/dist.h"
#include "grux/error.h"
#include "grux/io.h"
#include "grux/tensor.h"

namespace grux::cli {

using Action = std::function<void()>;

// A computed result that failed its check (not a user error): exit code 3.
class ResultMismatch : public Error {
 public:
  using Error::Error;
};

// Stopped by Ctrl-C or SIGTERM after saving what was done: exit code 130.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// Ends grux with this exit code, the message already printed (each rank of an MPI job prints
// its line before the job ends).
struct Exit {
  int code;
};

// Runs `body` in this process alone, or, when an MPI launcher (mpirun) started several
// copies of grux, as one rank of them. An error every rank throws alike (CollectiveError) or
// an interruption ends each rank with its line; an error one rank alone meets ends the whole
// job (the others would wait for it forever). `what` names the command in the error for a
// grux built without MPI.
void run_launched(const char* what, const std::function<void(Communicator&)>& body);

// Sets OpenMP's (grux's kernels) and OpenBLAS's (the measured peer) thread counts; 0 means all
// cores. Returns the count.
int set_threads(int k);
// The data folder: $GRUX_DATA_DIR; else, for an installed grux (PREFIX/bin/grux),
// PREFIX/share/grux; else the source tree's data/ this binary was built from.
std::string default_data_dir();
std::string default_data_path(const std::string& name);
// A whole text file for `option` (named in errors); empty or oversized files are errors.
std::string read_text_file(const std::string& path, const std::string& option);

// The conformance commands' (gru, lstm) file handling. read_optional_npy: "" gives an
// undefined tensor. read_float_input: the input .npy, f32 or f64. check_float_dtype: `t`
// (read from `path`) has the input's dtype. read_weights: a safetensors state dict whose
// every tensor has `dtype`. output_dir: creates `path` (an error names it), called only after
// everything was computed, so bad input leaves nothing behind.
Tensor read_optional_npy(const std::string& path);
Tensor read_float_input(const std::string& path);
void check_float_dtype(const std::string& path, const Tensor& t, DType want);
SafeTensors read_weights(const std::string& path, DType dtype);
std::string output_dir(const std::string& path);

Action add_gru_command(CLI::App& app);
Action add_lstm_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_conv2d_command(CLI::App& app);
Action add_conv1d_command(CLI::App& app);
Action add_train_command(CLI::App& app);
Action add_generate_command(CLI::App& app);
Action add_model_command(CLI::App& app);
Action add_cost_command(CLI::App& app);
Action add_calibrate_command(CLI::App& app);
Action add_scan_command(CLI::App& app);
Action add_info_command(CLI::App& app);
// Registers `bench scan` on the bench command; the returned call runs it if it was chosen
// (and says whether it was).
std::function<bool()> add_bench_scan_command(CLI::App* bench);

}  // namespace grux::cli
