// grux: the command-line tool. Dispatches to one subcommand; any error in the user's input
// is printed as one line on stderr with exit code 2.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "commands.h"
#include "grux/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "grux: fast, exact recurrent-sequence operators (GRU, LSTM, parallel scans, convolution) on "
      "the CPU, and a GRU language model trainer"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "grux 0.1.0");
  std::map<CLI::App*, grux::cli::Action> actions;
  auto add = [&](grux::cli::Action (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    grux::cli::Action a = adder(app);
    actions[app.get_subcommands({})[before]] = std::move(a);
  };
  add(grux::cli::add_gru_command);
  add(grux::cli::add_lstm_command);
  add(grux::cli::add_demo_command);
  add(grux::cli::add_bench_command);
  add(grux::cli::add_conv2d_command);
  add(grux::cli::add_conv1d_command);
  add(grux::cli::add_train_command);
  add(grux::cli::add_generate_command);
  add(grux::cli::add_model_command);
  add(grux::cli::add_cost_command);
  add(grux::cli::add_calibrate_command);
  add(grux::cli::add_scan_command);
  add(grux::cli::add_info_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::puts("grux 0.1.0");
    return 0;
  } catch (const CLI::ParseError& e) {
    // Subcommand help (grux gru --help) arrives here too, as a "success" parse error.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "grux: error: %s (see grux --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) action();
  } catch (const grux::cli::Exit& e) {
    return e.code;
  } catch (const grux::cli::Interrupted& e) {
    std::fprintf(stderr, "grux: %s\n", e.what());
    return 130;
  } catch (const grux::cli::ResultMismatch& e) {
    std::fprintf(stderr, "grux: error: %s\n", e.what());
    return 3;
  } catch (const grux::Error& e) {
    std::fprintf(stderr, "grux: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "grux: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grux: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
