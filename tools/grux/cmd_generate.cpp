// `grux generate`: streams text from a trained character-level model, one character at a
// time through the recurrent stack's streaming step API: temperature / top-k sampling or beam
// search.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "commands.h"
#include "grux/train.h"

namespace grux::cli {

namespace {

struct GenerateArgs {
  std::string checkpoint, prompt, precision = "f32";
  int64_t length = 500, top_k = 0, beam = 1;
  double temperature = 0.8;
  uint64_t seed = 1;
  int threads = 0;
  bool stats = false;
};

void emit(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// log-softmax of one row of logits.
std::vector<double> log_softmax(const double* z, int64_t V) {
  const double m = *std::max_element(z, z + V);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - m);
  const double lse = m + std::log(sum);
  std::vector<double> r(z, z + V);
  for (double& x : r) x -= lse;
  return r;
}

// Draws the next id: greedy at temperature 0, else from softmax(z / temperature) restricted to
// the top_k largest (all when top_k is 0). `idx` and `w` are reused buffers: generation runs
// one character at a time and this is on its critical path.
int64_t sample(const double* z, int64_t V, double temperature, int64_t top_k, std::mt19937_64& rng,
               std::vector<int64_t>& idx, std::vector<double>& w) {
  if (temperature == 0) return std::max_element(z, z + V) - z;
  idx.resize(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  if (k < V)
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int64_t a, int64_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  double m = z[idx[0]];
  for (int64_t i = 1; i < k; ++i) m = std::max(m, z[idx[i]]);
  // Inverse-CDF draw over the unnormalised weights.
  w.resize(k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) w[i] = sum += std::exp((z[idx[i]] - m) / temperature);
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  const int64_t i = std::upper_bound(w.begin(), w.end(), u) - w.begin();
  return idx[std::min(i, k - 1)];
}

void run_generate(const GenerateArgs& a) {
  if (a.length < 0) throw Error(fmt::format("--length {} (expected >= 0)", a.length));
  if (!(a.temperature >= 0) || !std::isfinite(a.temperature))
    throw Error(fmt::format("--temperature {} (expected >= 0; 0 picks the likeliest character)",
                            a.temperature));
  if (a.top_k < 0) throw Error(fmt::format("--top-k {} (expected >= 0; 0 means all)", a.top_k));
  if (a.beam < 1 || a.beam > 1024) throw Error(fmt::format("--beam {} (expected 1..1024)", a.beam));
  const Precision precision = parse_precision(a.precision);
  set_threads(a.threads);
  TrainedModel tm = load_trained_model(a.checkpoint);
  if (precision != Precision::f32 && tm.model->config().dtype != DType::f32)
    throw Error(fmt::format("--precision {} takes a float32 model; {} is {}", a.precision,
                            a.checkpoint, dtype_name(tm.model->config().dtype)));
  const Vocab& vocab = tm.vocab;
  const int64_t V = vocab.size(), B = a.beam;
  std::vector<int64_t> prompt = vocab.encode(a.prompt, "--prompt");
  if (prompt.empty()) {
    // No prompt: start as after a line break, as the corpus's lines do.
    auto it = std::find(vocab.chars().begin(), vocab.chars().end(), U'\n');
    prompt.push_back(it != vocab.chars().end() ? it - vocab.chars().begin() : 0);
  } else {
    emit(a.prompt);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Printed on stderr (stdout is the text alone): characters per second of the whole loop.
  auto report = [&] {
    if (!a.stats) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "generated %lld characters in %.3f s (%.0f characters/s)\n",
                 static_cast<long long>(a.length), s, a.length / std::max(s, 1e-9));
  };
  CharLm::Stream stream(*tm.model, B, precision);
  std::vector<double> logits;
  for (int64_t id : prompt) logits = stream.step(std::vector<int64_t>(B, id));

  if (B == 1) {
    std::mt19937_64 rng(a.seed);
    std::vector<int64_t> idx;
    std::vector<double> w;
    for (int64_t i = 0; i < a.length; ++i) {
      const int64_t id = sample(logits.data(), V, a.temperature, a.top_k, rng, idx, w);
      emit(vocab.decode(id));
      if (i + 1 < a.length) logits = stream.step({id});
    }
    emit("\n");
    report();
    return;
  }
  // Beam search for the likeliest continuation of `length` characters. The part on which all
  // beams agree is printed as soon as it is settled.
  std::vector<std::vector<int64_t>> seqs(B);
  std::vector<double> score(B, 0.0);
  int64_t live = 1, printed = 0;  // all beams start identical: expand one
  for (int64_t i = 0; i < a.length; ++i) {
    struct Cand {
      double score;
      int64_t beam, id;
    };
    std::vector<Cand> cands;
    for (int64_t b = 0; b < live; ++b) {
      const std::vector<double> lp = log_softmax(logits.data() + b * V, V);
      for (int64_t v = 0; v < V; ++v) cands.push_back({score[b] + lp[v], b, v});
    }
    const int64_t keep = std::min<int64_t>(B, static_cast<int64_t>(cands.size()));
    std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(), [](auto& x, auto& y) {
      return x.score > y.score ||
             (x.score == y.score && (x.beam < y.beam || (x.beam == y.beam && x.id < y.id)));
    });
    std::vector<int64_t> from(B), ids(B);
    std::vector<std::vector<int64_t>> next(B);
    for (int64_t b = 0; b < B; ++b) {
      const Cand& c = cands[std::min(b, keep - 1)];
      from[b] = c.beam, ids[b] = c.id, score[b] = c.score;
      next[b] = seqs[c.beam];
      next[b].push_back(c.id);
    }
    seqs = std::move(next);
    live = keep;
    // Settled prefix: common to every live beam.
    int64_t common = static_cast<int64_t>(seqs[0].size());
    for (int64_t b = 1; b < live; ++b) {
      int64_t k = 0;
      while (k < common && seqs[b][k] == seqs[0][k]) ++k;
      common = k;
    }
    for (; printed < common; ++printed) emit(vocab.decode(seqs[0][printed]));
    if (i + 1 < a.length) {
      stream.reorder(from);
      logits = stream.step(ids);
    }
  }
  for (; printed < static_cast<int64_t>(seqs[0].size()); ++printed)
    emit(vocab.decode(seqs[0][printed]));
  emit("\n");
  report();
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Generate text from a checkpoint of `grux train`, streaming each character");
  sub->add_option("--checkpoint", a->checkpoint, "checkpoint written by grux train")->required();
  sub->add_option("--prompt", a->prompt, "text to start from (default: a line break)");
  sub->add_option("--length", a->length, "characters to generate")->capture_default_str();
  sub->add_option("--temperature", a->temperature,
                  "sampling temperature (0: always the likeliest character)")
      ->capture_default_str();
  sub->add_option("--top-k", a->top_k, "sample among the K likeliest characters (0: all)")
      ->capture_default_str();
  sub->add_option("--beam", a->beam,
                  "beam search with B beams for the likeliest text (ignores temperature/top-k)")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  sub->add_option("--threads", a->threads, "threads (default: all cores)")->capture_default_str();
  sub->add_option("--precision", a->precision,
                  "f32, bf16 or int8: the precision of the GRU's or LSTM's products (bf16 and "
                  "int8 take a float32 model; docs/precision.md)")
      ->capture_default_str();
  sub->add_flag("--stats", a->stats, "print the generation speed on stderr");
  return [a] { run_generate(*a); };
}

}  // namespace grux::cli
