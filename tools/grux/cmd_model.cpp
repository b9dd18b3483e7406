// `grux model show`: a model file's layers, parameters, operations per frame and real-time
// factor (RTNeural JSON, GuitarML JSON, .nam, safetensors: grux/model.h), or a trained
// checkpoint's architecture, parameter counts and the cost of one training step (`--dot`
// writes that network as a Graphviz graph). `grux model run`: a model file over an input
// .npy. `grux model convert`: a model file to safetensors. `grux model eval`: a checkpoint's
// validation loss in each precision.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "commands.h"
#include "grux/cost.h"
#include "grux/cost_predict.h"
#include "grux/gru.h"
#include "grux/io.h"
#include "grux/lstm.h"
#include "grux/model.h"
#include "grux/train.h"

namespace grux::cli {

namespace {

struct ModelArgs {
  std::string checkpoint, dot, data, precision = "all";
  int threads = 0;
  // run, convert
  std::vector<std::string> inputs;
  std::string out, run_precision = "f32", correction = "lin_interp";
  int64_t block = 0, warmup = 0;
  std::string name;  // export-c
  double sample_rate = 0;
  bool no_measure = false;
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

// Whether `path` is a checkpoint written by grux train (safetensors with the trainer's
// metadata) rather than a model file.
bool is_checkpoint(const std::string& path) {
  // The first 64 KiB: the header's metadata (a missing file: not one; read_model says why).
  std::ifstream f(path, std::ios::binary);
  std::string head(size_t(1) << 16, '\0');
  f.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(f.gcount()));
  return head.size() > 8 && head[8] == '{' && head.find("\"train\"") != std::string::npos &&
         head.find("\"vocab\"") != std::string::npos;
}

// What a recurrent layer has beyond a forward nn.GRU / nn.LSTM layer (ONNX's options).
std::string onnx_options(const ModelLayer& l) {
  std::string s;
  if (l.directions == 2) s += ", bidirectional";
  if (l.reverse) s += ", reverse";
  if (l.clip > 0) s += fmt::format(", clip {:g}", l.clip);
  if (l.peephole.defined()) s += ", peepholes";
  if (l.input_forget) s += ", input_forget";
  if (l.lengths.defined()) s += fmt::format(", sequence lengths of {}", l.lengths.size(0));
  return s;
}

std::string layer_details(const ModelLayer& l) {
  switch (l.kind) {
    case ModelLayer::Kind::gru:
      return fmt::format("{}{}{}{}", gru_form_name(l.form), l.b_ih.defined() ? "" : ", no bias",
                         l.h0.defined() ? ", stored initial state" : "", onnx_options(l));
    case ModelLayer::Kind::lstm:
      return fmt::format("{}{}{}", l.b_ih.defined() ? "i, f, g, o" : "i, f, g, o, no bias",
                         l.h0.defined() || l.c0.defined() ? ", stored initial state" : "",
                         onnx_options(l));
    case ModelLayer::Kind::dense:
      return l.bias.defined() ? "weight, bias" : "weight, no bias";
    case ModelLayer::Kind::activation:
      return ModelLayer::activation_name(l.activation);
    case ModelLayer::Kind::prelu:
      return "alpha per feature";
    case ModelLayer::Kind::batchnorm:
      return "inference: (x - mean) * scale + shift";
  }
  return "";
}

// FLOPs of one frame of a layer (a multiply-add is 2) and the cost model's time for one second
// of frames at `rate` (ms), on one thread through the stream.
struct FrameCost {
  double flops = 0, predicted_ms = 0;
};
FrameCost layer_cost(const ModelLayer& l, double rate, const MachineProfile& profile) {
  FrameCost c;
  const int64_t T = std::max<int64_t>(1, int64_t(rate));
  if (l.recurrent()) {
    // One direction's stream; a bidirectional layer costs two of them.
    const std::string d = fmt::format("l1d1t{}n1i{}h{}", T, l.in_size, l.hidden_size());
    CostReport r;
    if (l.kind == ModelLayer::Kind::gru) {
      GruProblem p = GruProblem::parse(d);
      p.form = l.form;
      p.bias = l.b_ih.defined();
      r = gru_stream_cost(p);
    } else {
      LstmProblem p = LstmProblem::parse(d);
      p.bias = l.b_ih.defined();
      r = lstm_stream_cost(p);
    }
    c.flops = double(l.directions) * double(r.fwd(CountMode::gemm).total()) / double(T);
    c.predicted_ms =
        double(l.directions) * predict(r.inference_phases, DType::f32, profile, 1, true).ms;
  } else if (l.kind == ModelLayer::Kind::dense) {
    c.flops = 2.0 * l.in_size * l.out_size;
  } else {
    c.flops = double(l.out_size);
  }
  return c;
}

// Nanoseconds a frame of one sequence takes through a stream, one frame per call, one thread
// (median of 5 runs of `frames` frames).
double measure_ns_per_frame(const Model& m, int64_t frames) {
  ModelStream s(m, 1);
  std::vector<float> x(size_t(frames * m.input_size())), y(size_t(m.output_size()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * std::sin(0.01f * float(i));
  std::vector<double> ns;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < frames; ++t) s.process(x.data() + t * m.input_size(), y.data(), 1);
    const double e =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) ns.push_back(e / double(frames));  // the first warms the caches
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

void run_show_model(const ModelArgs& a) {
  const ModelSpec spec = read_model(a.checkpoint);
  const Model model(spec);
  fmt::print("model: {} ({}{})\n", a.checkpoint, model_format_name(spec.format),
             spec.name.empty() ? "" : fmt::format(", \"{}\"", spec.name));
  const double rate = spec.sample_rate > 0 ? spec.sample_rate : 48000;
  fmt::print("input: {} feature{} a frame; output: {}{}; sample rate: {}\n", spec.input_size,
             spec.input_size == 1 ? "" : "s", spec.output_size(),
             spec.skip > 0 ? fmt::format(" (plus the first {} input feature{}: skip)", spec.skip,
                                         spec.skip == 1 ? "" : "s")
                           : "",
             spec.sample_rate > 0 ? fmt::format("{:g} Hz", spec.sample_rate)
                                  : "not in the file (48000 Hz assumed below)");
  if (!spec.graph.input.empty()) {
    // The graph's names and what each output is (axes: T time, N batch, F features, L layers).
    std::vector<std::string> outs;
    for (const ModelGraphOutput& o : spec.graph.outputs) {
      const char* what = o.what == ModelGraphOutput::What::frames       ? "frames"
                         : o.what == ModelGraphOutput::What::last_frame ? "last frame"
                         : o.what == ModelGraphOutput::What::hidden     ? "final h of layers"
                                                                        : "final c of layers";
      std::vector<std::string> of;
      for (size_t k = 0; k < o.layers.size(); ++k)
        of.push_back(o.directions.size() > k && spec.layers[o.layers[k]].directions == 2
                         ? fmt::format("{}{}", o.layers[k], o.directions[k] ? "r" : "f")
                         : fmt::format("{}", o.layers[k]));
      outs.push_back(fmt::format("\"{}\" {} ({}{}{})", o.name, o.axes, what, of.empty() ? "" : " ",
                                 fmt::join(of, ", ")));
    }
    fmt::print("graph: input \"{}\" {}; outputs {}\n", spec.graph.input, spec.graph.input_axes,
               fmt::join(outs, ", "));
  }
  const MachineProfile profile = load_profile("");
  fmt::print("  {:<5} {:<10} {:>6} {:>6} {:>11} {:>13}  {}\n", "layer", "kind", "in", "out",
             "parameters", "FLOPs/frame", "details");
  double flops = 0, predicted_ms = 0;
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const ModelLayer& l = spec.layers[k];
    const FrameCost c = layer_cost(l, rate, profile);
    flops += c.flops;
    predicted_ms += c.predicted_ms;
    fmt::print(
        "  {:<5} {:<10} {:>6} {:>6} {:>11} {:>13}  {}\n", k, l.kind_name(), l.in_size, l.out_size,
        with_commas(l.parameters()), with_commas(int64_t(std::llround(c.flops))),
        layer_details(l) + (spec.format == ModelFormat::onnx && l.kind == ModelLayer::Kind::gru
                                ? fmt::format(" (the file's linear_before_reset = {})",
                                              l.form == GruForm::linear_before_reset ? 1 : 0)
                                : ""));
  }
  fmt::print("  {:<5} {:<10} {:>6} {:>6} {:>11} {:>13}\n", "total", "", "", "",
             with_commas(spec.parameters()), with_commas(int64_t(std::llround(flops))));
  if (predicted_ms > 0)
    fmt::print(
        "predicted (cost model, recurrent layers, one thread; {}): {:.0f} ns a frame, {:.1f}x "
        "real time at {:g} Hz\n",
        profile.source == "preset"
            ? "a preset profile, not this machine's: `grux calibrate` measures it"
            : "profile " + profile.source,
        predicted_ms * 1e6 / rate, 1000.0 / predicted_ms, rate);
  const std::string whole = spec.whole_sequence_only();
  if (!whole.empty()) {
    fmt::print("runs on whole sequences, not as a stream: {}\n", whole);
  } else if (!a.no_measure) {
    const double ns = measure_ns_per_frame(model, std::max<int64_t>(4800, int64_t(rate) / 4));
    fmt::print(
        "measured (one frame per call, one thread, median of 5): {:.0f} ns a frame, {:.1f}x "
        "real time at {:g} Hz\n",
        ns, 1e9 / (ns * rate), rate);
  }
}

void run_show(const ModelArgs& a) {
  if (!is_checkpoint(a.checkpoint)) return run_show_model(a);
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

// `grux model run` of an ONNX graph: each --input NAME=X.npy names a graph input (one without a
// name: the frames); each graph output written as DIR/<its name>.npy.
void run_run_graph(const ModelArgs& a, ModelSpec spec, const std::string& frames_path,
                   const std::map<std::string, Tensor>& given) {
  const Model model(std::move(spec));
  const ModelGraph& g = model.spec().graph;
  if (frames_path.empty()) {
    auto it = given.find(g.input);
    if (it == given.end())
      throw Error(
          fmt::format("{}: no --input for the graph's frames input \"{}\" (--input "
                      "{}=X.npy, or --input X.npy)",
                      a.checkpoint, g.input, g.input));
  }
  if (a.run_precision != "f32" || a.block != 0 || a.sample_rate != 0 || a.warmup != 0)
    throw Error(
        fmt::format("{}: an ONNX graph runs whole, in f32, at the model's rate: "
                    "--precision, --block, --sample-rate and --warmup are for the other "
                    "formats",
                    a.checkpoint));
  set_threads(a.threads);
  const Tensor x = frames_path.empty() ? given.at(g.input) : read_npy(frames_path);
  const auto t0 = std::chrono::steady_clock::now();
  const auto outputs = run_graph(model, x, a.threads);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string dir = output_dir(a.out);
  fmt::print("{}: {} {} through {} ({} layers) in {:.2f} ms; wrote", g.input,
             frames_path.empty() ? "given" : frames_path, shape_str(x.shape()), a.checkpoint,
             model.spec().layers.size(), ms);
  for (const auto& [name, t] : outputs) {
    std::string file = name;  // a file name of the output's name
    for (char& c : file)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    if (file.empty() || file[0] == '.') file = "_" + file;
    write_npy(dir + "/" + file + ".npy", t);
    fmt::print(" {}/{}.npy {}", dir, file, shape_str(t.shape()));
  }
  fmt::print("\n");
}

// `grux model run`: X (T, I) for one stream or (T, N, I) for N, f32, through the model from its
// initial state, in blocks of --block frames (0: all at once; the bits do not depend on it).
void run_run(const ModelArgs& a) {
  std::string input;  // the --input without a NAME=
  std::map<std::string, Tensor> given;
  for (const std::string& in : a.inputs) {
    const size_t eq = in.find('=');
    if (eq == std::string::npos) {
      if (!input.empty())
        throw Error(
            fmt::format("--input {} and --input {}: two inputs without a NAME= (only the "
                        "frames may go without one)",
                        input, in));
      input = in;
    } else {
      given[in.substr(0, eq)] = read_npy(in.substr(eq + 1));
    }
  }
  ModelSpec spec = read_model(a.checkpoint, given);
  if (!spec.graph.input.empty()) return run_run_graph(a, std::move(spec), input, given);
  if (input.empty() || !given.empty())
    throw Error(fmt::format("{}: expected one --input X.npy (NAME=X.npy is for ONNX graphs)",
                            a.checkpoint));
  const Model model(std::move(spec));
  const Precision precision = parse_precision(a.run_precision);
  set_threads(a.threads);
  Tensor x = read_npy(input);
  if (x.dtype() != DType::f32)
    throw Error(fmt::format("{}: dtype {}, expected f32", input, dtype_name(x.dtype())));
  const int64_t I = model.input_size();
  if ((x.dim() != 2 && x.dim() != 3) || x.size(x.dim() - 1) != I || x.size(0) < 0 ||
      (x.dim() == 3 && x.size(1) < 1))
    throw Error(fmt::format("{}: shape {}, expected (T, {}) for one stream or (T, N, {}) for N",
                            input, shape_str(x.shape()), I, I));
  if (a.block < 0) throw Error(fmt::format("--block {}: expected 0 or more frames", a.block));
  x = x.contiguous();
  const int64_t T = x.size(0), N = x.dim() == 3 ? x.size(1) : 1, O = model.output_size();
  ModelStreamOptions o;
  o.precision = precision;
  o.threads = a.threads;
  o.sample_rate = a.sample_rate;
  o.correction = parse_sample_rate_correction(a.correction);
  o.warmup_frames = a.warmup;
  Tensor y =
      x.dim() == 3 ? Tensor::empty({T, N, O}, DType::f32) : Tensor::empty({T, O}, DType::f32);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string whole = model.spec().whole_sequence_only();
  if (!whole.empty()) {  // layer by layer over the whole signal, in f32
    if (a.block != 0 || precision != Precision::f32 || a.sample_rate != 0 || a.warmup != 0)
      throw Error(
          fmt::format("{}: {}, so the model runs on the whole signal in f32: --block, --precision, "
                      "--sample-rate and --warmup do not apply",
                      a.checkpoint, whole));
    y = model.process(x, a.threads);
  } else {
    ModelStream s(model, N, o);
    const int64_t block = a.block > 0 ? a.block : std::max<int64_t>(T, 1);
    for (int64_t t = 0; t < T; t += block)
      s.process(x.data<float>() + t * N * I, y.data<float>() + t * N * O, std::min(block, T - t));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string dir = output_dir(a.out);
  write_npy(dir + "/output.npy", y);
  fmt::print(
      "{}: {} frames x {} stream{} through {} ({} layers) in {:.2f} ms; wrote {}/output.npy {}\n",
      input, T, N, N == 1 ? "" : "s", a.checkpoint, model.spec().layers.size(), ms, dir,
      shape_str(y.shape()));
}

void run_export_c(const ModelArgs& a) {
  const ModelSpec spec = read_model(a.checkpoint);
  std::string name = a.name;
  if (name.empty()) {  // the file's stem as a C identifier
    std::string stem = std::filesystem::path(a.checkpoint).stem().string();
    for (char& c : stem)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    name =
        (stem.empty() || std::isdigit(static_cast<unsigned char>(stem[0])) ? "model_" : "") + stem;
  }
  write_file_atomic(a.out, model_as_c(spec, name, a.checkpoint));
  fmt::print("{} ({}) -> {}: grux_model_desc {} ({} layers, {} parameters)\n", a.checkpoint,
             model_format_name(spec.format), a.out, name, spec.layers.size(),
             with_commas(spec.parameters()));
}

// A checkpoint of grux train as a model description: its recurrent layers and its head (fc),
// the embedding left out (the model's input is the embedded characters, `embed` features a
// frame); f64 checkpoints rounded to f32.
ModelSpec checkpoint_recurrent_part(const std::string& path) {
  const TrainedModel tm = load_trained_model(path);
  const CharLmConfig& c = tm.model->config();
  const std::map<std::string, Tensor> sd = tm.model->state_dict();
  const auto f32 = [&](const std::string& key) { return sd.at(key).to(DType::f32).contiguous(); };
  ModelSpec spec;
  spec.input_size = c.embed;
  spec.name = std::filesystem::path(path).stem().string();
  const std::string cell = c.lstm() ? "lstm" : "gru";
  for (int64_t k = 0; k < c.layers; ++k) {
    ModelLayer l;
    l.kind = c.lstm() ? ModelLayer::Kind::lstm : ModelLayer::Kind::gru;
    l.in_size = k == 0 ? c.embed : c.hidden;
    l.out_size = c.hidden;
    l.w_ih = f32(fmt::format("{}.weight_ih_l{}", cell, k));
    l.w_hh = f32(fmt::format("{}.weight_hh_l{}", cell, k));
    l.b_ih = f32(fmt::format("{}.bias_ih_l{}", cell, k));
    l.b_hh = f32(fmt::format("{}.bias_hh_l{}", cell, k));
    spec.layers.push_back(std::move(l));
  }
  ModelLayer fc;
  fc.kind = ModelLayer::Kind::dense;
  fc.in_size = c.hidden;
  fc.out_size = c.vocab;
  fc.weight = f32("fc.weight");
  fc.bias = f32("fc.bias");
  spec.layers.push_back(std::move(fc));
  return spec;
}

// `grux model export-onnx`: a model file, or a checkpoint's recurrent part, as ONNX.
void run_export_onnx(const ModelArgs& a) {
  const bool checkpoint = is_checkpoint(a.checkpoint);
  const ModelSpec spec =
      checkpoint ? checkpoint_recurrent_part(a.checkpoint) : read_model(a.checkpoint);
  write_onnx(a.out, spec);
  fmt::print(
      "{} ({}) -> {} (ONNX opset 14, {} layers, {} parameters{}): input \"x\" (time, "
      "batch, {}), output \"y\" (time, batch, {})\n",
      a.checkpoint, checkpoint ? "checkpoint" : model_format_name(spec.format), a.out,
      spec.layers.size(), with_commas(spec.parameters()),
      checkpoint ? "; the embedding left out: the input is the embedded characters" : "",
      spec.input_size, spec.output_size());
}

void run_convert(const ModelArgs& a) {
  const ModelSpec spec = read_model(a.checkpoint);
  write_model(a.out, spec);
  fmt::print("{} ({}) -> {} (safetensors, {} layers, {} parameters)\n", a.checkpoint,
             model_format_name(spec.format), a.out, spec.layers.size(),
             with_commas(spec.parameters()));
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
  CLI::App* sub = app.add_subcommand(
      "model", "Model files (RTNeural JSON, GuitarML JSON, .nam, safetensors) and checkpoints");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand(
      "show",
      "A model file's layers, parameters, FLOPs a frame and real-time factor (predicted by the "
      "cost model and measured here, one frame per call on one thread); or a checkpoint's "
      "architecture, parameter counts and training-step cost");
  show->add_option("file", a->checkpoint,
                   "model file (RTNeural JSON, GuitarML JSON, .nam, safetensors) or checkpoint "
                   "written by grux train")
      ->required();
  show->add_option("--dot", a->dot,
                   "checkpoints: also write the network as a Graphviz graph to FILE (- for "
                   "standard output)");
  show->add_flag("--no-measure", a->no_measure,
                 "model files: skip the timing (six runs of a quarter second of frames; 0.1 s for "
                 "an LSTM of 96)");
  CLI::App* run = sub->add_subcommand(
      "run",
      "Run a model file over an input from its initial state; writes DIR/output.npy, (T, O) or "
      "(T, N, O); an ONNX graph: DIR/<output name>.npy for each graph output");
  run->add_option("file", a->checkpoint, "model file")->required();
  run->add_option("--input", a->inputs,
                  "X.npy: f32 (T, I) for one stream or (T, N, I) for N; an ONNX graph: its frames "
                  "input laid out as the graph declares it, and NAME=X.npy for each other graph "
                  "input it needs")
      ->required();
  run->add_option("--out", a->out, "output directory (created)")->required();
  run->add_option("--precision", a->run_precision,
                  "the recurrent layers' products: f32, bf16 or int8 (docs/precision.md)")
      ->capture_default_str();
  run->add_option("--block", a->block,
                  "frames per call (0: all at once); the output does not depend on it")
      ->capture_default_str();
  run->add_option("--threads", a->threads, "threads of the stream (0 or 1: the calling thread)")
      ->capture_default_str();
  run->add_option("--sample-rate", a->sample_rate,
                  "the input's rate in Hz (0: the model's own); above the model's, RTNeural's "
                  "sample-rate correction delays the recurrent state by the ratio")
      ->capture_default_str();
  run->add_option("--correction", a->correction,
                  "lin_interp (any ratio), no_interp (whole ratios) or none")
      ->check(CLI::IsMember({"lin_interp", "no_interp", "none"}))
      ->capture_default_str();
  run->add_option("--warmup", a->warmup,
                  "frames of zeros run first (NAM's plugins run half a second)")
      ->capture_default_str();
  CLI::App* convert = sub->add_subcommand(
      "convert", "Write a model file as safetensors (grux reads it back exactly)");
  convert->add_option("file", a->checkpoint, "model file")->required();
  convert->add_option("out", a->out, "OUT.safetensors (written atomically)")->required();
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
  CLI::App* export_c = sub->add_subcommand(
      "export-c",
      "Write a model file as C data (static const arrays and a grux_model_desc) for a program "
      "without a file system: grux_model_from_desc builds the model from it (grux/grux.h)");
  export_c->add_option("file", a->checkpoint, "model file")->required();
  export_c->add_option("out", a->out, "OUT.h (written atomically)")->required();
  export_c->add_option("--name", a->name,
                       "the C name of the grux_model_desc (default: the file's name)");
  CLI::App* export_onnx = sub->add_subcommand(
      "export-onnx",
      "Write a model file (any format grux reads), or the recurrent layers and head of a grux "
      "train checkpoint, as an ONNX graph of opset 14: input \"x\" (time, batch, features), "
      "output \"y\" (docs/format_onnx.md)");
  export_onnx->add_option("file", a->checkpoint, "model file or checkpoint")->required();
  export_onnx->add_option("out", a->out, "OUT.onnx (written atomically)")->required();
  return [a, eval, run, convert, export_c, export_onnx] {
    if (eval->parsed())
      run_eval(*a);
    else if (run->parsed())
      run_run(*a);
    else if (convert->parsed())
      run_convert(*a);
    else if (export_c->parsed())
      run_export_c(*a);
    else if (export_onnx->parsed())
      run_export_onnx(*a);
    else
      run_show(*a);
  };
}

}  // namespace grux::cli
