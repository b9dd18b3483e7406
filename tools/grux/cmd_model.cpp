// `grux model show`: a trained model's architecture, parameter counts and the cost of one
// training step; `--dot` writes the network as a Graphviz graph. `grux model eval`: its
// validation loss in each precision.
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "commands.h"
#include "grux/gru.h"
#include "grux/io.h"
#include "grux/train.h"

namespace grux::cli {

namespace {

struct ModelArgs {
  std::string checkpoint, dot, data, precision = "all";
  int threads = 0;
};

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return r;
}

std::string dot_graph(const TrainedModel& tm) {
  const CharLmConfig& c = tm.model->config();
  const TrainOptions& o = tm.options;
  std::string g =
      "digraph grux_char_lm {\n  rankdir=TB;\n  node [shape=box, fontname=\"sans-serif\"];\n";
  g += fmt::format("  ids [label=\"characters\\n(T={}, N={})\", shape=ellipse];\n", o.window,
                   o.batch);
  g += fmt::format("  embedding [label=\"Embedding\\n{} x {}\"];\n", c.vocab, c.embed);
  g += "  ids -> embedding;\n";
  std::string prev = "embedding";
  const char* cell = c.lstm() ? "LSTM" : "GRU";
  const char* state = c.lstm() ? "h, c" : "h";
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t in = l == 0 ? c.embed : c.hidden;
    g += fmt::format("  {0}{1} [label=\"{2} layer {1}\\n{3} -> {4}\"];\n", c.cell, l, cell, in,
                     c.hidden);
    g += fmt::format("  {} -> {}{} [label=\"(T, N, {})\"];\n", prev, c.cell, l, in);
    g += fmt::format("  {0}{1} -> {0}{1} [label=\"{2} (N, {3})\", style=dashed];\n", c.cell, l,
                     state, c.hidden);
    if (l + 1 < c.layers && c.dropout > 0) {
      g += fmt::format("  drop{} [label=\"dropout {}\", shape=diamond];\n", l, c.dropout);
      g += fmt::format("  {}{} -> drop{};\n", c.cell, l, l);
      prev = fmt::format("drop{}", l);
    } else {
      prev = fmt::format("{}{}", c.cell, l);
    }
  }
  g += fmt::format("  fc [label=\"Linear\\n{} -> {}\"];\n", c.hidden, c.vocab);
  g += fmt::format("  {} -> fc [label=\"(T, N, {})\"];\n", prev, c.hidden);
  g += "  loss [label=\"softmax cross-entropy\", shape=ellipse];\n";
  g += fmt::format("  fc -> loss [label=\"logits (T*N, {})\"];\n", c.vocab);
  g += "  targets [label=\"next characters\", shape=ellipse];\n  targets -> loss;\n}\n";
  return g;
}

void run_show(const ModelArgs& a) {
  TrainedModel tm = load_trained_model(a.checkpoint);
  const CharLmConfig& c = tm.model->config();
  const TrainOptions& o = tm.options;
  fmt::print("checkpoint: {} (step {} of {}{})\n", a.checkpoint, tm.step, o.steps,
             tm.val_loss.empty()
                 ? ""
                 : fmt::format(", last validation loss {:.4f} nats/char", tm.val_loss.back()));
  fmt::print("model: character-level {} language model, {}, vocabulary {} characters{}\n",
             c.lstm() ? "LSTM" : "GRU", dtype_name(c.dtype), c.vocab,
             o.precision == Precision::f32
                 ? ""
                 : fmt::format(" (trained with the {}'s products in {})", c.lstm() ? "LSTM" : "GRU",
                               precision_name(o.precision)));
  fmt::print("  {:<24} {:<14} {:>12}\n", "parameter", "shape", "count");
  for (const Parameter& p : tm.model->parameters())
    fmt::print("  {:<24} {:<14} {:>12}\n", p.name, shape_str(p.value.shape()),
               with_commas(p.value.numel()));
  const int64_t n = tm.model->num_parameters();
  fmt::print("  {:<24} {:<14} {:>12}  ({:.2f} MiB)\n", "total", "", with_commas(n),
             n * dtype_size(c.dtype) / 1048576.0);
  if (c.layers > 1)
    fmt::print("  dropout between {} layers: {}\n", c.lstm() ? "LSTM" : "GRU", c.dropout);

  // One training step: forward, then backward at twice the forward's GEMM work.
  const double tokens = static_cast<double>(o.window * o.batch);
  const double gru_f = 2.0 * tokens * (c.lstm() ? 4 : 3) * c.hidden *
                       static_cast<double>(c.embed + c.hidden + (c.layers - 1) * 2 * c.hidden);
  const double fc_f = 2.0 * tokens * c.hidden * c.vocab;
  fmt::print(
      "one training step (batch {} x window {} = {} tokens), GEMM FLOPs (2 per multiply-add):\n"
      "  {:<24} {:>14} forward {:>14} forward + backward\n"
      "  {:<24} {:>14} forward {:>14} forward + backward\n"
      "  {:<24} {:>14} forward {:>14} forward + backward ({:.2f} MFLOP per token)\n",
      o.batch, o.window, with_commas(static_cast<int64_t>(tokens)), c.lstm() ? "LSTM" : "GRU",
      with_commas(static_cast<int64_t>(gru_f)), with_commas(static_cast<int64_t>(3 * gru_f)),
      "Linear", with_commas(static_cast<int64_t>(fc_f)),
      with_commas(static_cast<int64_t>(3 * fc_f)), "total",
      with_commas(static_cast<int64_t>(gru_f + fc_f)),
      with_commas(static_cast<int64_t>(3 * (gru_f + fc_f))), 3 * (gru_f + fc_f) / tokens / 1e6);
  if (!a.dot.empty()) {
    const std::string g = dot_graph(tm);
    if (a.dot == "-") {
      fmt::print("{}", g);
    } else {
      write_file_atomic(a.dot, g);
      fmt::print("wrote {} (render with: dot -Tsvg {} -o model.svg)\n", a.dot, a.dot);
    }
  }
}

// `grux model eval`: the validation loss of a checkpoint on the held-out part of the text it
// was trained on, with the stack's products in each precision asked for.
void run_eval(const ModelArgs& a) {
  std::vector<Precision> precisions;
  if (a.precision == "all")
    precisions = {Precision::f32, Precision::bf16, Precision::int8};
  else
    precisions = {parse_precision(a.precision)};
  set_threads(a.threads);
  const std::string path = a.data.empty() ? default_data_path("tinyshakespeare.txt") : a.data;
  const std::string text = read_text_file(path, "--data");
  Trainer tr = Trainer::resume(a.checkpoint, text);
  const CharLmConfig& c = tr.options().model;
  if (tr.val_tokens() == 0)
    throw Error(fmt::format("{} was trained with --val-fraction 0: there is no held-out text",
                            a.checkpoint));
  // bf16 and int8 take an f32 model: "all" is f32 alone for the others.
  if (c.dtype != DType::f32 && precisions.size() > 1) precisions = {Precision::f32};
  fmt::print("checkpoint: {} (step {}), validation part of {}: {} characters\n", a.checkpoint,
             tr.steps_done(), path, tr.val_tokens());
  double f32_loss = 0;
  for (Precision p : precisions) {
    if (p != Precision::f32 && c.dtype != DType::f32)
      throw Error(fmt::format("--precision {} takes a float32 model; {} is {}", precision_name(p),
                              a.checkpoint, dtype_name(c.dtype)));
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = tr.validation_loss(p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string delta;
    if (p == Precision::f32)
      f32_loss = loss;
    else if (precisions.front() == Precision::f32)
      delta = fmt::format("  ({:+.5f} vs f32)", loss - f32_loss);
    fmt::print("  {:<5} {:.5f} nats/char{}  [{}, {:.2f} s]\n", precision_name(p), loss, delta,
               precision_kernel(p), s);
  }
}

}  // namespace

Action add_model_command(CLI::App& app) {
  auto a = std::make_shared<ModelArgs>();
  CLI::App* sub = app.add_subcommand("model", "Inspect a trained model");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand(
      "show", "Print a checkpoint's architecture, parameter counts and training-step cost");
  show->add_option("checkpoint", a->checkpoint, "checkpoint written by grux train")->required();
  show->add_option("--dot", a->dot,
                   "also write the network as a Graphviz graph to FILE (- for "
                   "standard output)");
  CLI::App* eval = sub->add_subcommand(
      "eval",
      "Validation loss of a checkpoint (nats/char on the held-out end of its training text) "
      "with the GRU or LSTM in f32, bf16 or int8");
  eval->add_option("checkpoint", a->checkpoint, "checkpoint written by grux train")->required();
  eval->add_option("--data", a->data,
                   "the text it was trained on (default: the embedded Shakespeare corpus)");
  eval->add_option("--precision", a->precision,
                   "f32, bf16, int8 or all (bf16 and int8 take a float32 model)")
      ->capture_default_str();
  eval->add_option("--threads", a->threads, "threads (default: all cores)");
  return [a, eval] {
    if (eval->parsed())
      run_eval(*a);
    else
      run_show(*a);
  };
}

}  // namespace grux::cli
