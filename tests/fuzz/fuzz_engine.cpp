// libFuzzer targets of the inputs that reach the whole engine (GRUX_FUZZ_ENGINE names which),
// linked with the library itself (built by tests/fuzz/CMakeLists.txt with the same sanitizers
// and coverage as the readers): a refusal is fine if its message is one line of printable
// UTF-8; a crash, an uncaught exception, a sanitizer report, a hang or a huge allocation is a
// bug.
//   model_load   the C API's grux_model_load_file and grux_model_load on the bytes as a file:
//                a model that loads has sizes within the file's, and a stream of it gives the
//                same outputs, bit for bit, for a block of frames run at once and in two parts.
//   checkpoint   a grux train checkpoint, as grux generate and grux train --resume read it (the
//                resumed run on the text its seed was trained on): what resumes saves a
//                checkpoint that resumes and saves the same bytes.
//   sweep        grux cost --sweep: the operator on the first line, the fixed descriptor on the
//                second, up to three axes on the next ones; a sweep that runs has one point per
//                combination of the axes' values, and its CSV a line per point. A sweep's time
//                grows with its points and each point's layers (a report lists every layer's
//                phases): one of 412 points of up to 4112 layers took 31 s here, where each
//                input gets 10 s. Inputs of more than 16 points or a number above 1024 (in
//                the descriptor or an axis) are parsed, not run: at most about 2 s each.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz.h"
#include "grux/error.h"
#include "grux/grux.h"
#include "grux/io.h"
#include "grux/sweep.h"
#include "grux/train.h"

namespace grux::fuzz {

// The input as a file of this process's own in the temporary directory (the readers under test
// take paths), removed at exit with what the checkpoint target writes beside it.
struct ScratchFiles {
  std::string base = (std::filesystem::temp_directory_path() /
                      ("grux-fuzz-" + std::to_string(static_cast<long>(getpid()))))
                         .string();
  ~ScratchFiles() {
    std::error_code ec;
    for (const char* suffix :
         {".model", ".safetensors", ".safetensors.again", ".safetensors.twice"})
      std::filesystem::remove(base + suffix, ec);
  }
};

std::string as_file(const std::string& bytes, const char* suffix) {
  static const ScratchFiles scratch;
  const std::string path = scratch.base + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0)
    __builtin_trap();  // the fuzzer's own scratch file: not the code under test
  return path;
}

#if GRUX_FUZZ_ENGINE_MODEL_LOAD
// Runs 48 frames of a ramp through a stream of m at once and as 17 + 31 frames from a reset:
// the same bits, or the same refusal.
void check_stream(const grux_model* m) {
  char err[512] = "";
  grux_stream* s = grux_stream_create(m, 1, 1, err, sizeof err);
  if (!s) return check_message(err);
  const int64_t in_size = grux_model_input_size(m), out_size = grux_model_output_size(m);
  const int64_t frames = 48;
  std::vector<float> in(static_cast<size_t>(frames * in_size)), once(frames * out_size),
      parts(frames * out_size);
  for (size_t k = 0; k < in.size(); ++k) in[k] = 0.01f * static_cast<float>(k % 97) - 0.4f;
  const int a = grux_stream_process(s, in.data(), once.data(), frames);
  if (a != GRUX_OK) check_message(grux_stream_error(s));
  grux_stream_reset(s);
  const int b = grux_stream_process(s, in.data(), parts.data(), 17);
  const int c =
      grux_stream_process(s, in.data() + 17 * in_size, parts.data() + 17 * out_size, frames - 17);
  if ((a == GRUX_OK) != (b == GRUX_OK && c == GRUX_OK)) __builtin_trap();
  if (a == GRUX_OK && std::memcmp(once.data(), parts.data(), once.size() * sizeof(float)) != 0)
    __builtin_trap();  // a stream's outputs depend on how its frames were cut into blocks
  grux_stream_free(s);
}

void loaded(grux_model* m, size_t bytes) {
  // Every input and output feature has at least one weight, and a weight at least one byte.
  const int64_t in_size = grux_model_input_size(m), out_size = grux_model_output_size(m);
  if (in_size < 1 || out_size < 1 || uint64_t(in_size) > bytes || uint64_t(out_size) > bytes)
    __builtin_trap();
  check_stream(m);
  grux_model_free(m);
}

void run(const std::string& bytes) {
  const std::string path = as_file(bytes, ".model");
  char err[512] = "";
  if (grux_model* m = grux_model_load_file(path.c_str(), 0, err, sizeof err))
    loaded(m, bytes.size());
  else
    check_message(err);
  // A PyTorch state dict as safetensors: nn.GRU / nn.LSTM under "rnn." with "fc." after it
  // (the reference models' names), or at the top level with no head.
  for (auto [rnn, head] : {std::pair{"rnn.", "fc."}, {"", nullptr}}) {
    if (grux_model* m = grux_model_load(path.c_str(), rnn, head, 0, err, sizeof err))
      loaded(m, bytes.size());
    else
      check_message(err);
  }
}
#elif GRUX_FUZZ_ENGINE_CHECKPOINT
// The text every seed checkpoint was trained on. The seeds (tests/fuzz/corpus/checkpoint): with
// this text in text.txt, `grux train --data text.txt --window 8 --steps 3 --eval-every 2
// --checkpoint-every 0 --warmup 1 --threads 1` and --cell gru --layers 1 --hidden 8 --embed 4
// --batch 2 --dtype f32, or --cell lstm --layers 2 --hidden 6 --embed 3 --batch 2 --dtype f64.
const std::string& seed_text() {
  static const std::string text = [] {
    std::string t;
    for (int k = 0; k < 40; ++k) t += "the quick brown fox jumps over the lazy dog. ";
    return t;
  }();
  return text;
}

void run(const std::string& bytes) {
  const std::string path = as_file(bytes, ".safetensors");
  try {
    const grux::TrainedModel m = grux::load_trained_model(path);
    if (m.vocab.size() < 1) __builtin_trap();
  } catch (const grux::Error& e) {
    check_message(e.what());
  }
  std::string saved;
  try {
    grux::Trainer t = grux::Trainer::resume(path, seed_text());
    t.save_checkpoint(path + ".again");
    saved = grux::read_file(path + ".again", size_t(1) << 30);
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  // What resumed saves a checkpoint that resumes and saves the same bytes (an Error here
  // escapes: a bug).
  grux::Trainer again = grux::Trainer::resume(path + ".again", seed_text());
  again.save_checkpoint(path + ".twice");
  if (grux::read_file(path + ".twice", size_t(1) << 30) != saved) __builtin_trap();
}
#elif GRUX_FUZZ_ENGINE_SWEEP
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size() && lines.size() < 6) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The largest number in the fixed descriptor (its runs of digits) and the axes' values.
int64_t largest_number(const grux::SweepSpec& spec) {
  int64_t largest = 0, n = 0;
  for (char c : spec.fixed + " ") {
    if (c >= '0' && c <= '9') {
      n = std::min<int64_t>(n * 10 + (c - '0'), int64_t(1) << 40);
    } else {
      largest = std::max(largest, n);
      n = 0;
    }
  }
  for (const grux::SweepAxis& a : spec.axes)
    for (int64_t v : a.values) largest = std::max(largest, v);
  return largest;
}

void run(const std::string& text) {
  const std::vector<std::string> lines = lines_of(text);
  if (lines.size() < 2) return;
  grux::SweepResult r;
  size_t points = 1;
  try {
    grux::SweepSpec spec;
    spec.op = lines[0];
    spec.fixed = lines[1];
    for (size_t k = 2; k < lines.size(); ++k) {
      spec.axes.push_back(grux::SweepAxis::parse(lines[k]));
      points *= spec.axes.back().values.size();
    }
    if (points > 16 || largest_number(spec) > 1024) return;
    r = grux::run_sweep(spec, grux::MachineProfile::preset(2), 1);
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  if (r.points.size() != points || r.descriptors.size() != points || r.values.size() != points)
    __builtin_trap();
  const std::string csv = grux::sweep_csv(r);
  if (size_t(std::count(csv.begin(), csv.end(), '\n')) != points + 1) __builtin_trap();
  (void)grux::sweep_json(r);
}
#else
#error "GRUX_FUZZ_ENGINE_* names the input"
#endif

}  // namespace grux::fuzz
