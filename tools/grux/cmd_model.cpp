// `grux model show`: a trained model's architecture, parameter counts and the cost of one
// training step; `--dot` writes the network as a Graphviz graph.
#include <fmt/format.h>

#include <cmath>

#include "commands.h"
#include "grux/gru.h"
#include "grux/io.h"
#include "grux/train.h"

namespace grux::cli {

namespace {

struct ModelArgs {
  std::string checkpoint, dot;
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
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t in = l == 0 ? c.embed : c.hidden;
    g += fmt::format("  gru{} [label=\"GRU layer {}\\n{} -> {}\"];\n", l, l, in, c.hidden);
    g += fmt::format("  {} -> gru{} [label=\"(T, N, {})\"];\n", prev, l, in);
    g += fmt::format("  gru{0} -> gru{0} [label=\"h (N, {1})\", style=dashed];\n", l, c.hidden);
    if (l + 1 < c.layers && c.dropout > 0) {
      g += fmt::format("  drop{} [label=\"dropout {}\", shape=diamond];\n", l, c.dropout);
      g += fmt::format("  gru{0} -> drop{0};\n", l);
      prev = fmt::format("drop{}", l);
    } else {
      prev = fmt::format("gru{}", l);
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
  fmt::print("model: character-level GRU language model, {}, vocabulary {} characters\n",
             dtype_name(c.dtype), c.vocab);
  fmt::print("  {:<24} {:<14} {:>12}\n", "parameter", "shape", "count");
  for (const Parameter& p : tm.model->parameters())
    fmt::print("  {:<24} {:<14} {:>12}\n", p.name, shape_str(p.value.shape()),
               with_commas(p.value.numel()));
  const int64_t n = tm.model->num_parameters();
  fmt::print("  {:<24} {:<14} {:>12}  ({:.2f} MiB)\n", "total", "", with_commas(n),
             n * dtype_size(c.dtype) / 1048576.0);
  if (c.layers > 1) fmt::print("  dropout between GRU layers: {}\n", c.dropout);

  // One training step: forward, then backward at twice the forward's GEMM work.
  GruProblem p;
  p.num_layers = c.layers, p.T = o.window, p.N = o.batch, p.input_size = c.embed,
  p.hidden_size = c.hidden;
  const double tokens = static_cast<double>(o.window * o.batch);
  const double gru_f = p.gemm_flops(), fc_f = 2.0 * tokens * c.hidden * c.vocab;
  fmt::print(
      "one training step (batch {} x window {} = {} tokens), GEMM FLOPs (2 per multiply-add):\n"
      "  {:<24} {:>14} forward {:>14} forward + backward\n"
      "  {:<24} {:>14} forward {:>14} forward + backward\n"
      "  {:<24} {:>14} forward {:>14} forward + backward ({:.2f} MFLOP per token)\n",
      o.batch, o.window, with_commas(static_cast<int64_t>(tokens)), "GRU",
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
  return [a] { run_show(*a); };
}

}  // namespace grux::cli
