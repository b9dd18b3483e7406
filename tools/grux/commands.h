// The grux CLI's subcommands: each registers its options on the parser and returns the
// action to run when it is chosen. Errors are grux::Error, reported by main as one line.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "grux/error.h"

namespace grux::cli {

using Action = std::function<void()>;

// A computed result that failed its check (not a user error): exit code 3.
class ResultMismatch : public Error {
 public:
  using Error::Error;
};

Action add_gru_command(CLI::App& app);
Action add_demo_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_conv2d_command(CLI::App& app);
Action add_conv1d_command(CLI::App& app);

}  // namespace grux::cli
