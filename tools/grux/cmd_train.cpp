// `grux train`: trains the character-level GRU or LSTM language model with a progress line,
// periodic validation, atomic checkpoints and a loss curve; Ctrl-C saves and stops cleanly.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "grux/dist.h"
#include "grux/io.h"
#include "grux/train.h"

namespace grux::cli {

namespace {

struct TrainArgs {
  TrainOptions o;
  std::string data, out = "out", resume, dtype = "f32", precision = "f32";
  double time_s = 0;
  int threads = 0;
  int64_t checkpoint_every = 500;
  bool quiet = false;
};

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) {
  g_stop = true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string duration_str(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// Saves the loss curve, then the checkpoint; each file is replaced atomically. The checkpoint
// goes last: a kill in between leaves the curve a step ahead of it, and --resume (which
// rewrites the curve from the checkpoint's history) repeats that step. The other order could
// leave a finished checkpoint, which --resume refuses, beside a curve that lacks its end.
// With several processes rank 0 writes the curve, and every rank learns whether it could.
void save_all(const Trainer& tr, const std::string& dir) {
  Communicator& comm = tr.communicator();
  std::string error;
  if (comm.rank() == 0) {
    try {
      write_file_atomic(dir + "/loss.csv", loss_curve_csv(tr.history()));
      write_file_atomic(
          dir + "/loss.svg",
          loss_curve_svg(tr.history(), fmt::format("grux train: {} steps", tr.steps_done())));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  agree_no_error(comm, error);
  tr.save_checkpoint(dir + "/checkpoint.safetensors");
}

// Threads per process: all the cores this process may run on, divided among the processes
// mpirun started on this host (mpirun may bind each to a core or leave them all free).
int default_threads(const Communicator& comm) {
  const int procs = omp_get_num_procs();
  const int local = launched_local_ranks();
  if (comm.size() == 1 || local <= 1) return procs;
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, std::min(procs, cores / local));
}

void run_train(TrainArgs& a, CLI::App* sub, Communicator& comm) {
  const bool root = comm.rank() == 0;
  const int threads = set_threads(a.threads > 0 ? a.threads : default_threads(comm));
  const std::string path = a.data.empty() ? default_data_path("tinyshakespeare.txt") : a.data;
  std::string text, error;
  try {
    text = read_text_file(path, "--data");
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  Communicator* group = comm.size() > 1 ? &comm : nullptr;

  // The output folder, once the settings are known to be good: a refused run writes nothing.
  auto make_out_dir = [&] {
    std::string error;
    if (root) {
      std::error_code ec;
      std::filesystem::create_directories(a.out, ec);
      if (ec) error = fmt::format("--out {}: cannot create the folder ({})", a.out, ec.message());
    }
    agree_no_error(comm, error);
  };
  std::unique_ptr<Trainer> tr;
  if (!a.resume.empty()) {
    // The run's settings come from the checkpoint; giving a different one is a mistake.
    for (const char* opt :
         {"--layers",       "--hidden",     "--embed",        "--batch",     "--window",
          "--steps",        "--lr",         "--min-lr",       "--warmup",    "--dropout",
          "--seed",         "--optimizer",  "--weight-decay", "--momentum",  "--clip",
          "--val-fraction", "--eval-every", "--dtype",        "--precision", "--time",
          "--cell"})
      if (sub->count(opt) > 0)
        throw CollectiveError(
            fmt::format("{} cannot be combined with --resume (the run continues with "
                        "the settings saved in the checkpoint)",
                        opt));
    tr = std::make_unique<Trainer>(Trainer::resume(a.resume, text, group));
    if (tr->done()) {
      const Trainer::History& h = tr->history();
      const bool evaluated =
          tr->val_tokens() == 0 || (!h.val_step.empty() && h.val_step.back() == tr->steps_done());
      if (evaluated)
        throw CollectiveError(fmt::format("--resume {}: the run is complete ({} of {} steps)",
                                          a.resume, tr->steps_done(), tr->options().steps));
      // A finished run's checkpoint without its final validation loss (written by a grux that
      // checkpointed the last step before evaluating it, then killed in between): finish it.
      const double v = tr->evaluate();
      make_out_dir();
      save_all(*tr, a.out);
      if (root)
        fmt::print(stderr,
                   "the run was complete ({} steps) but its final evaluation was missing: "
                   "validation loss {:.4f} nats/char\nwrote {}/checkpoint.safetensors, "
                   "{}/loss.csv, {}/loss.svg\n",
                   tr->steps_done(), v, a.out, a.out, a.out);
      return;
    }
  } else {
    a.o.model.dtype = a.dtype == "f64" ? DType::f64 : DType::f32;
    a.o.precision = parse_precision(a.precision);
    tr = std::make_unique<Trainer>(a.o, text, nullptr, group);
  }
  make_out_dir();
  const TrainOptions& o = tr->options();
  const CharLmConfig& m = o.model;
  if (root)
    fmt::print(stderr,
               "grux train: {} ({} characters, vocabulary {}; {} for training, {} for "
               "validation)\nmodel: embedding {} -> {} {} x {} -> linear {}; {} parameters ({})\n"
               "{} steps of batch {} x window {}, {} lr {} (warm-up {}, cosine to {}), clip {}, "
               "{}{} threads{}\n",
               path, text.size(), tr->vocab().size(), tr->train_tokens(), tr->val_tokens(), m.embed,
               m.lstm() ? "LSTM" : "GRU", m.layers, m.hidden, m.vocab, tr->model().num_parameters(),
               o.precision == Precision::f32
                   ? std::string(dtype_name(m.dtype))
                   : fmt::format("{}, the GRU's products in {}", dtype_name(m.dtype),
                                 precision_name(o.precision)),
               a.time_s > 0 ? fmt::format("up to {:.0f} s:", a.time_s) : fmt::to_string(o.steps),
               o.batch, o.window, o.optimizer, o.lr, o.warmup, o.min_lr, o.clip,
               comm.size() > 1 ? fmt::format("{} processes x ", comm.size()) : "", threads,
               a.resume.empty() ? "" : fmt::format("; resuming at step {}", tr->steps_done()));

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const bool tty = root && isatty(fileno(stderr));
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  const int64_t first = tr->steps_done();
  int64_t tokens = 0;
  double eval_s = 0;  // time spent evaluating, excluded from the training rate
  bool planned = a.time_s <= 0;
  double last_loss = 0;
  bool stop = false;  // agreed by every rank: a Ctrl-C on any of them stops all after this step
  auto evaluate = [&] {
    const auto e0 = std::chrono::steady_clock::now();
    const double v = tr->evaluate();
    eval_s += seconds_since(e0);
    if (root)
      fmt::print(stderr, "{}step {:>6}: validation loss {:.4f} nats/char (perplexity {:.2f})\n",
                 tty ? "\r\033[K" : "", tr->steps_done(), v, std::exp(v));
    return v;
  };
  while (!tr->done() && !stop) {
    const StepStats s = tr->step();
    tokens += s.tokens;
    last_loss = s.loss;
    // Every decision below is taken from the same numbers on every rank: whether any rank was
    // interrupted, and rank 0's clock (the loss is the same everywhere already).
    double control[3] = {g_stop ? 1.0 : 0.0, root ? seconds_since(t0) : 0.0, root ? eval_s : 0.0};
    comm.sum(control, 3);
    stop = control[0] > 0;
    const double elapsed = control[1], evaluating = control[2];
    if (!std::isfinite(s.loss))
      throw CollectiveError(
          fmt::format("training diverged at step {} (loss {}); try a lower --lr", s.step, s.loss));
    const double rate = tokens / std::max(1e-9, elapsed - evaluating);
    if (!planned && tr->steps_done() >= std::min<int64_t>(o.warmup + 1, 10) + first) {
      // Time budget: fix the number of steps now (the warm-up's learning rates do not depend
      // on it), leaving room for the evaluations.
      const double per_step = (elapsed - evaluating) / static_cast<double>(s.step - first);
      const double per_eval =
          tr->val_tokens() > 0 ? per_step * 0.4 * tr->val_tokens() / static_cast<double>(s.tokens)
                               : 0;
      const double left = a.time_s - elapsed;
      int64_t more = static_cast<int64_t>(left / per_step);
      more = static_cast<int64_t>((left - per_eval * (1 + more / o.eval_every)) / per_step);
      tr->plan_steps(std::max<int64_t>(tr->steps_done() + std::max<int64_t>(more, 0), 1));
      planned = true;
      if (root)
        fmt::print(stderr,
                   "{}planned {} steps for the {:.0f} s budget ({:.1f} ms per step); "
                   "--steps {} reproduces this run\n",
                   tty ? "\r\033[K" : "", o.steps, a.time_s, per_step * 1e3, o.steps);
    }
    if (root && !a.quiet && (tty || seconds_since(last_print) >= 5 || tr->done())) {
      const double eta = (o.steps - tr->steps_done()) * (elapsed - evaluating) /
                         static_cast<double>(tr->steps_done() - first);
      const int width = 24;
      const int fill = static_cast<int>(width * tr->steps_done() / std::max<int64_t>(1, o.steps));
      fmt::print(stderr, "{}[{}{}] step {}/{}  loss {:.4f}  {:.0f} tok/s  lr {:.2e}  ETA {}{}",
                 tty ? "\r\033[K" : "", std::string(fill, '#'), std::string(width - fill, '.'),
                 tr->steps_done(), o.steps, s.loss, rate, s.lr, duration_str(eta), tty ? "" : "\n");
      last_print = std::chrono::steady_clock::now();
    }
    if (tr->val_tokens() > 0 && tr->steps_done() % o.eval_every == 0 && !tr->done()) evaluate();
    // Before a time budget is planned, the run's length is unknown: nothing to resume yet.
    // The last step is saved after the loop, with its evaluation: a checkpoint of a finished
    // run saved here, then a kill before that evaluation, would leave a run that --resume
    // calls complete but whose loss history lacks the final validation loss.
    if (planned && a.checkpoint_every > 0 && tr->steps_done() % a.checkpoint_every == 0 &&
        !tr->done()) {
      save_all(*tr, a.out);
    }
    if (a.time_s > 0 && elapsed > a.time_s * 1.05 && !tr->done()) {
      if (root)
        fmt::print(stderr, "{}time budget reached before the planned steps; stopping at step {}\n",
                   tty ? "\r\033[K" : "", tr->steps_done());
      break;
    }
  }
  if (tty) fmt::print(stderr, "\n");
  if (!planned) {
    // Stopped before the time budget was planned: the run ends where it stopped.
    if (tr->steps_done() == 0)
      throw Interrupted("interrupted before the first step; nothing saved");
    tr->plan_steps(tr->steps_done());
  }
  double val = NAN;
  // An interrupted run is evaluated where the uninterrupted run would be, not here: its loss
  // history then stays identical to the uninterrupted run's after --resume. A run interrupted
  // during its last step is finished, and --resume would refuse it: evaluate it now.
  if (tr->val_tokens() > 0 && (!stop || tr->done())) val = evaluate();
  save_all(*tr, a.out);
  const double train_s = seconds_since(t0) - eval_s;
  if (root)
    fmt::print(stderr,
               "{} after {} steps ({} this run, {:.1f} s, {:.0f} tokens/s): training loss {:.4f}"
               "{}\nwrote {}/checkpoint.safetensors, {}/loss.csv, {}/loss.svg\n",
               stop ? "interrupted" : "done", tr->steps_done(), tr->steps_done() - first, train_s,
               tokens / std::max(1e-9, train_s), last_loss,
               std::isfinite(val) ? fmt::format(", validation loss {:.4f}", val) : "", a.out, a.out,
               a.out);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (stop) throw Interrupted("interrupted; the checkpoint is saved (continue with --resume)");
}

}  // namespace

Action add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a character-level GRU or LSTM language model (embedding -> GRU or LSTM -> linear -> "
      "softmax) on a "
      "UTF-8 text; writes DIR/checkpoint.safetensors, DIR/loss.csv and DIR/loss.svg. Under "
      "mpirun -np K, one model on K processes: each takes batch/K streams, the gradients are "
      "summed every step, rank 0 prints and writes (docs/cli.md)");
  TrainOptions& o = a->o;
  sub->add_option("--data", a->data,
                  "UTF-8 text to train on (default: the embedded Shakespeare corpus)");
  sub->add_option("--cell", o.model.cell, "the recurrent layers: gru or lstm")
      ->check(CLI::IsMember({"gru", "lstm"}))
      ->capture_default_str();
  sub->add_option("--layers", o.model.layers, "recurrent layers")->capture_default_str();
  sub->add_option("--hidden", o.model.hidden, "hidden size")->capture_default_str();
  sub->add_option("--embed", o.model.embed, "embedding width")->capture_default_str();
  sub->add_option("--dropout", o.model.dropout, "dropout between recurrent layers")
      ->capture_default_str();
  sub->add_option("--batch", o.batch, "parallel text streams per step")->capture_default_str();
  sub->add_option("--window", o.window, "time steps per window (truncated BPTT length)")
      ->capture_default_str();
  auto* steps = sub->add_option("--steps", o.steps, "optimizer steps (default: use --time)");
  sub->add_option("--time", a->time_s,
                  "train for about SECONDS (default 170 when --steps is not given): the number "
                  "of steps is planned after the first steps are timed, and printed")
      ->excludes(steps);
  sub->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")
      ->capture_default_str();
  sub->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  sub->add_option("--optimizer", o.optimizer, "adam, adamw or sgd")->capture_default_str();
  sub->add_option("--weight-decay", o.weight_decay,
                  "weight decay (L2 in adam and sgd, decoupled in adamw)")
      ->capture_default_str();
  sub->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--clip", o.clip, "clip gradients to this global norm (0: off)")
      ->capture_default_str();
  sub->add_option("--val-fraction", o.val_fraction, "last part of the text held out")
      ->capture_default_str();
  sub->add_option("--eval-every", o.eval_every, "validate every K steps (and at the end)")
      ->capture_default_str();
  sub->add_option("--checkpoint-every", a->checkpoint_every,
                  "save the checkpoint every K steps (0: only at the end)")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "f32 or f64")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  sub->add_option("--precision", a->precision,
                  "f32 or bf16: the GRU's or LSTM's products in training (bf16: an f32 model, "
                  "its weights and optimizer state kept in f32; docs/precision.md)")
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "threads (default: all cores)");
  sub->add_option("--seed", o.seed, "seed of the initial weights and dropout")
      ->capture_default_str();
  sub->add_option("--out", a->out, "output directory")->capture_default_str();
  sub->add_option("--resume", a->resume, "continue the run saved in this checkpoint");
  sub->add_flag("--quiet", a->quiet, "no progress line");
  return [a, sub] {
    if (!sub->count("--steps") && !sub->count("--time") && a->resume.empty()) a->time_s = 170;
    if (a->time_s < 0 || (sub->count("--time") && !(a->time_s > 0)))
      throw Error(fmt::format("--time {} (expected > 0 seconds)", a->time_s));
    if (a->checkpoint_every < 0)
      throw Error(fmt::format("--checkpoint-every {} (expected >= 0)", a->checkpoint_every));
    if (a->time_s > 0) a->o.steps = int64_t(1) << 40;  // planned after the first steps
    run_launched("grux train", [&](Communicator& comm) { run_train(*a, sub, comm); });
  };
}

}  // namespace grux::cli
