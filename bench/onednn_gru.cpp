// Peer benchmark: a GRU stack through oneDNN 2.6's linear-before-reset GRU primitive, timed the way
// `grux bench gru` times grux; prints one JSON line per problem (see bench/README.md). With
// --lstm the same for an LSTM through oneDNN's vanilla_lstm primitive, as `grux bench lstm`
// times grux's: gates i, f, g, o as in PyTorch (oneDNN's ldigo order i, f, c, o), one bias of
// 4 gates (PyTorch's b_ih + b_hh), no peephole or projection, h0 = c0 = 0.
//
// Usage: onednn_gru DESCRIPTOR [--train] [--cell] [--lengths SPEC] [--threads K] [--reps R]
//                   [--warmup W] [--dtype f32|f64] [--precision f32|bf16|int8] [--lstm]
// DESCRIPTOR is l{L}d{D}t{T}n{N}i{I}h{H} (missing l/d default to 1). Sizes, used throughout:
//   T time steps, N batch, I input size of layer 0, H hidden size, L layers, D directions,
//   C_l input size of layer l (I for l = 0, D*H above), G gates: 3 for the GRU, 4 for the
//   LSTM (both have 4 biases: lbr's extra one is b_hn).
// Modes (the same for both cells; the LSTM's state is (h, c), everything said of h holds for c):
//   inference  one forward_inference primitive per layer, whole sequence, h0 = 0.
//   train      forward_training + backward per layer (upstream gradient random, fixed),
//              gradients w.r.t. input and weights; diff weights zeroed each step (oneDNN
//              accumulates into them).
//   cell       T executions of a one-step (T = 1) primitive per layer with batch N, the state
//              carried from step to step (streaming use); D must be 1.
// --precision (inference): bf16 runs the primitive with bf16 input, weights, states and
// output (bias f32); int8 with u8 input and output (data scale 63.5, shift 64: [-1, 1] onto
// [0, 127]), s8 weights quantized per output channel (weights_qparams mask 24, scale 127 /
// max |w| of each gate row), bias f32: oneDNN's int8 RNN recipe (the LSTM's c stays f32).
// Where the library has no such primitive for this CPU, the reason is reported as unsupported.
// Unsupported by oneDNN 2.6, reported as {"unsupported":true} instead of faked: variable
// lengths, f64 RNN.
// One primitive per layer because a oneDNN multi-layer primitive needs every layer's input
// size equal to H (layer 0 here has I, and bidirectional_concat feeds 2H upward).
// Weight reorders (user ldigo -> the primitive's packed format) happen once, outside the
// timed region, as in benchdnn.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

struct Options {
  int64_t L = 1, D = 1, T = 0, N = 0, I = 0, H = 0;
  std::string problem, mode = "inference", dtype = "f32", lengths, precision = "f32";
  int threads = 1, reps = 10, warmup = 2;
  bool lstm = false;  // --lstm: oneDNN's vanilla_lstm in place of lbr_gru
  const char* cell() const { return lstm ? "lstm" : "gru"; }
  int64_t gates() const { return lstm ? 4 : 3; }
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "onednn_gru: error: %s\n", msg.c_str());
  std::exit(2);
}

int parse_int(const std::string& name, const std::string& v) {
  try {
    size_t pos = 0;
    const int x = std::stoi(v, &pos);
    if (pos != v.size() || x < 1) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    usage_error(name + " expects a positive integer, got '" + v + "'");
  }
}

// The problem name `grux bench gru` prints: the full descriptor, plus a lengths suffix
// (uniform:LO:HI:SEED -> _lenLO-HIsSEED, FILE.npy -> _lenFILE).
std::string problem_name(const Options& o) {
  std::string s = "l" + std::to_string(o.L) + "d" + std::to_string(o.D) + "t" +
                  std::to_string(o.T) + "n" + std::to_string(o.N) + "i" + std::to_string(o.I) +
                  "h" + std::to_string(o.H);
  if (!o.lengths.empty()) {
    std::smatch m;
    static const std::regex uni(R"(uniform:(\d+):(\d+):(\d+))");
    if (std::regex_match(o.lengths, m, uni))
      s += "_len" + m[1].str() + "-" + m[2].str() + "s" + m[3].str();
    else {
      std::string stem = o.lengths.substr(o.lengths.find_last_of('/') + 1);
      s += "_len" + stem.substr(0, stem.rfind('.'));
    }
  }
  return s;
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::string desc;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    auto value = [&]() -> std::string {
      if (a + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++a];
    };
    if (arg == "--train")
      o.mode = "train";
    else if (arg == "--cell")
      o.mode = "cell";
    else if (arg == "--lstm")
      o.lstm = true;
    else if (arg == "--lengths")
      o.lengths = value();
    else if (arg == "--threads")
      o.threads = parse_int(arg, value());
    else if (arg == "--reps")
      o.reps = parse_int(arg, value());
    else if (arg == "--warmup")
      o.warmup = parse_int(arg, value());
    else if (arg == "--dtype") {
      o.dtype = value();
      if (o.dtype != "f32" && o.dtype != "f64")
        usage_error("--dtype expects f32 or f64, got '" + o.dtype + "'");
    } else if (arg == "--precision") {
      o.precision = value();
      if (o.precision != "f32" && o.precision != "bf16" && o.precision != "int8")
        usage_error("--precision expects f32, bf16 or int8, got '" + o.precision + "'");
    } else if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: onednn_gru DESCRIPTOR [--train] [--cell] [--lengths SPEC] [--threads K] "
          "[--reps R] [--warmup W] [--dtype f32|f64] [--precision f32|bf16|int8] [--lstm]\n");
      std::exit(0);
    } else if (!arg.empty() && arg[0] != '-' && desc.empty())
      desc = arg;
    else
      usage_error("unexpected argument '" + arg + "'");
  }
  if (desc.empty()) usage_error("DESCRIPTOR (l{L}d{D}t{T}n{N}i{I}h{H}) is required");
  static const std::regex re(R"((?:l(\d+))?(?:d(\d+))?t(\d+)n(\d+)i(\d+)h(\d+))");
  std::smatch m;
  if (!std::regex_match(desc, m, re))
    usage_error("DESCRIPTOR expects l{L}d{D}t{T}n{N}i{I}h{H}, got '" + desc + "'");
  o.L = m[1].matched ? parse_int("L", m[1]) : 1;
  o.D = m[2].matched ? parse_int("D", m[2]) : 1;
  o.T = parse_int("T", m[3]);
  o.N = parse_int("N", m[4]);
  o.I = parse_int("I", m[5]);
  o.H = parse_int("H", m[6]);
  if (o.D > 2) usage_error("D expects 1 or 2, got " + std::to_string(o.D));
  o.problem = problem_name(o);
  return o;
}

// GEMM flops as in WORKLOADS.md: 2*N*T*G*H*(C_l + H) per layer and direction, x3 for training.
double gemm_flops(const Options& o) {
  double f = 0;
  for (int64_t l = 0; l < o.L; ++l) {
    const int64_t C = l == 0 ? o.I : o.D * o.H;
    f += o.D * 2.0 * o.N * o.T * double(o.gates()) * o.H * double(C + o.H);
  }
  return o.mode == "train" ? 3 * f : f;
}

std::string json_head(const Options& o) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      R"({"op":"%s","peer":"onednn","problem":"%s","mode":"%s","threads":%d,"dtype":"%s",)"
      R"("precision":"%s")",
      o.cell(), o.problem.c_str(), o.mode.c_str(), o.threads, o.dtype.c_str(), o.precision.c_str());
  return buf;
}

void print_unsupported(const Options& o, const std::string& reason) {
  std::printf("%s,\"unsupported\":true,\"reason\":\"%s\"}\n", json_head(o).c_str(), reason.c_str());
}

// A oneDNN memory filled with uniform [-scale, scale] values.
memory random_memory(const memory::desc& md, const dnnl::engine& eng, std::mt19937& rng,
                     float scale) {
  memory m(md, eng);
  std::uniform_real_distribution<float> u(-scale, scale);
  float* p = static_cast<float*>(m.get_data_handle());
  for (size_t k = 0; k < md.get_size() / sizeof(float); ++k) p[k] = u(rng);
  return m;
}

void zero(memory& m) {
  std::memset(m.get_data_handle(), 0, m.get_desc().get_size());
}

bool all_finite(const memory& m) {
  if (m.get_desc().data_type() != dt::f32) return true;  // bf16 / u8 outputs: nothing to check
  const float* p = static_cast<const float*>(m.get_data_handle());
  for (size_t k = 0; k < m.get_desc().get_size() / sizeof(float); ++k)
    if (!std::isfinite(p[k])) return false;
  return true;
}

// User weights of one layer (ldigo / ldgo, PyTorch-style init scale 1/sqrt(H)), and their
// reorder into whatever format a primitive descriptor asks for.
struct LayerWeights {
  memory w_layer, w_iter, bias;  // {1,D,C,G,H}, {1,D,H,G,H}, {1,D,4,H}
};

LayerWeights random_weights(const Options& o, memory::dim C, memory::dim D, const dnnl::engine& eng,
                            std::mt19937& rng) {
  const memory::dim G = o.gates(), H = o.H;
  const float scale = 1.0f / std::sqrt(float(o.H));
  return {random_memory({{1, D, C, G, H}, dt::f32, tag::ldigo}, eng, rng, scale),
          random_memory({{1, D, H, G, H}, dt::f32, tag::ldigo}, eng, rng, scale),
          random_memory({{1, D, 4, H}, dt::f32, tag::ldgo}, eng, rng, scale)};
}

// The cell's primitive descriptors, behind the base both derive from: oneDNN's lbr_gru and
// vanilla_lstm descriptors differ only in the LSTM's cell state c (src_iter_c, dst_iter_c,
// ignored for the GRU). Weight descs are {1,D,C,G,H} / {1,D,H,G,H} with format any.
dnnl::rnn_primitive_desc_base forward_pd(
    const Options& o, dnnl::prop_kind prop, dnnl::rnn_direction dir, const memory::desc& src,
    const memory::desc& src_iter, const memory::desc& src_iter_c, const memory::desc& wl,
    const memory::desc& wi, const memory::desc& bias, const memory::desc& dst,
    const memory::desc& dst_iter, const memory::desc& dst_iter_c, const dnnl::primitive_attr& attr,
    const dnnl::engine& eng) {
  if (o.lstm)
    return dnnl::lstm_forward::primitive_desc(
        dnnl::lstm_forward::desc(prop, dir, src, src_iter, src_iter_c, wl, wi, bias, dst, dst_iter,
                                 dst_iter_c),
        attr, eng);
  return dnnl::lbr_gru_forward::primitive_desc(
      dnnl::lbr_gru_forward::desc(prop, dir, src, src_iter, wl, wi, bias, dst, dst_iter), attr,
      eng);
}

// Backward of a whole-sequence forward (h0 = 0, no final state, no gradient w.r.t. h0), the
// diff descs the same as the forward's (format any for the diff weights).
dnnl::rnn_primitive_desc_base backward_pd(const Options& o, dnnl::rnn_direction dir,
                                          const memory::desc& src, const memory::desc& wl,
                                          const memory::desc& wi, const memory::desc& bias,
                                          const memory::desc& dst,
                                          const dnnl::rnn_primitive_desc_base& fwd,
                                          const dnnl::engine& eng) {
  const memory::desc none;
  const auto back = dnnl::prop_kind::backward;
  if (o.lstm)
    return dnnl::lstm_backward::primitive_desc(
        dnnl::lstm_backward::desc(back, dir, src, none, none, wl, wi, bias, dst, none, none, src,
                                  none, none, wl, wi, bias, dst, none, none),
        eng, dnnl::lstm_forward::primitive_desc(fwd.get()));
  return dnnl::lbr_gru_backward::primitive_desc(
      dnnl::lbr_gru_backward::desc(back, dir, src, none, wl, wi, bias, dst, none, src, none, wl, wi,
                                   bias, dst, none),
      eng, dnnl::lbr_gru_forward::primitive_desc(fwd.get()));
}

memory reordered(const memory& src, const memory::desc& want, const dnnl::engine& eng,
                 dnnl::stream& s, const dnnl::primitive_attr& attr = {}) {
  if (src.get_desc() == want) return src;
  memory dst(want, eng);
  dnnl::reorder(src, dst, attr).execute(s, const_cast<memory&>(src), dst);
  s.wait();
  return dst;
}

// A runnable problem: the primitives and their argument lists, built once.
struct Plan {
  std::vector<std::pair<dnnl::primitive, Args>> steps;  // executed in order per rep
  std::vector<memory> to_zero;                          // cleared before each rep (diff weights)
  std::vector<memory> outputs;                          // checked for finite values
  std::vector<memory> buffers;  // owners of the buffers that per-step memories only point into
};

// Inference and training over the whole sequence: one primitive per layer.
Plan plan_sequence(const Options& o, const dnnl::engine& eng, dnnl::stream& s, std::mt19937& rng) {
  const bool train = o.mode == "train";
  const auto dir = o.D == 2 ? dnnl::rnn_direction::bidirectional_concat
                            : dnnl::rnn_direction::unidirectional_left2right;
  const auto prop = train ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const memory::dim T = o.T, N = o.N, D = o.D, H = o.H, G = o.gates();
  const memory::desc none;  // zero md: h0 = 0, no h_n / no grad w.r.t. h0

  // Data and weight types of the precision, and int8's quantization (see the top).
  const bool bf16 = o.precision == "bf16", int8 = o.precision == "int8";
  const dt xdt = bf16 ? dt::bf16 : int8 ? dt::u8 : dt::f32;
  const dt wdt = bf16 ? dt::bf16 : int8 ? dt::s8 : dt::f32;
  dnnl::primitive_attr attr, data_attr;
  if (int8) {
    attr.set_rnn_data_qparams(63.5f, 64.0f);
    data_attr.set_rnn_data_qparams(63.5f, 64.0f);
  }
  // int8 weights: a reorder attribute with per-output-channel scales 127 / max |w| (ldigo:
  // mask over g and o, dims 3 and 4, G*H channels).
  // The primitive takes one set for both weights: each row's max over W_ih and W_hh (and,
  // bidirectional, both directions).
  auto weight_attr = [&](const LayerWeights& w, bool with_data) {
    dnnl::primitive_attr a;
    if (!int8) return a;
    if (with_data) a.set_rnn_data_qparams(63.5f, 64.0f);
    const int64_t GH = G * H;
    std::vector<float> scales(GH, 0.0f);
    for (const memory* m : {&w.w_layer, &w.w_iter}) {
      const memory::dims d = m->get_desc().dims();  // {1, D, C, G, H}
      const float* p = static_cast<const float*>(m->get_data_handle());
      for (int64_t i = 0; i < d[1] * d[2]; ++i)
        for (int64_t g = 0; g < GH; ++g) scales[g] = std::max(scales[g], std::fabs(p[i * GH + g]));
    }
    for (float& v : scales) v = v > 0 ? 127.0f / v : 1.0f;
    a.set_rnn_weights_qparams(24, scales);
    return a;
  };

  Plan plan;
  memory src = random_memory({{T, N, o.I}, dt::f32, tag::tnc}, eng, rng, 1.0f);
  if (xdt != dt::f32) src = reordered(src, {{T, N, o.I}, xdt, tag::tnc}, eng, s, data_attr);
  struct Saved {
    dnnl::rnn_primitive_desc_base pd;
    memory src, dst, workspace;
    LayerWeights w;
  };
  std::vector<Saved> saved;
  for (int64_t l = 0; l < o.L; ++l) {
    const memory::dim C = l == 0 ? o.I : D * H;
    LayerWeights w = random_weights(o, C, D, eng, rng);
    const memory::desc dst_md({T, N, D * H}, xdt, tag::tnc);
    const auto pd =
        forward_pd(o, prop, dir, src.get_desc(), none, none, {{1, D, C, G, H}, wdt, tag::any},
                   {{1, D, H, G, H}, wdt, tag::any}, w.bias.get_desc(), dst_md, none, none,
                   int8 ? weight_attr(w, true) : attr, eng);
    memory dst(pd.dst_layer_desc(), eng);
    Args args{{DNNL_ARG_SRC_LAYER, src},
              {DNNL_ARG_WEIGHTS_LAYER,
               reordered(w.w_layer, pd.weights_layer_desc(), eng, s, weight_attr(w, false))},
              {DNNL_ARG_WEIGHTS_ITER,
               reordered(w.w_iter, pd.weights_iter_desc(), eng, s, weight_attr(w, false))},
              {DNNL_ARG_BIAS, w.bias},
              {DNNL_ARG_DST_LAYER, dst}};
    memory ws;
    if (train) {
      ws = memory(pd.workspace_desc(), eng);
      args[DNNL_ARG_WORKSPACE] = ws;
    }
    plan.steps.emplace_back(dnnl::primitive(pd), args);
    saved.push_back({pd, src, dst, ws, w});
    src = dst;
  }
  plan.outputs.push_back(src);
  if (!train) return plan;

  // Backward, top layer first: layer l's diff_src_layer is layer l-1's diff_dst_layer.
  memory diff_dst = random_memory(src.get_desc(), eng, rng, 1.0f);
  for (int64_t l = o.L - 1; l >= 0; --l) {
    const Saved& f = saved[l];
    const memory::dim C = l == 0 ? o.I : D * H;
    const memory::desc any_wl({1, D, C, G, H}, dt::f32, tag::any);
    const memory::desc any_wi({1, D, H, G, H}, dt::f32, tag::any);
    const auto pd = backward_pd(o, dir, f.src.get_desc(), any_wl, any_wi, f.w.bias.get_desc(),
                                f.dst.get_desc(), f.pd, eng);
    memory diff_src(pd.diff_src_layer_desc(), eng), dwl(pd.diff_weights_layer_desc(), eng),
        dwi(pd.diff_weights_iter_desc(), eng), db(pd.diff_bias_desc(), eng);
    Args args{{DNNL_ARG_SRC_LAYER, f.src},
              {DNNL_ARG_WEIGHTS_LAYER, reordered(f.w.w_layer, pd.weights_layer_desc(), eng, s)},
              {DNNL_ARG_WEIGHTS_ITER, reordered(f.w.w_iter, pd.weights_iter_desc(), eng, s)},
              {DNNL_ARG_BIAS, f.w.bias},
              {DNNL_ARG_DST_LAYER, f.dst},
              {DNNL_ARG_WORKSPACE, f.workspace},
              {DNNL_ARG_DIFF_DST_LAYER, diff_dst},
              {DNNL_ARG_DIFF_SRC_LAYER, diff_src},
              {DNNL_ARG_DIFF_WEIGHTS_LAYER, dwl},
              {DNNL_ARG_DIFF_WEIGHTS_ITER, dwi},
              {DNNL_ARG_DIFF_BIAS, db}};
    plan.steps.emplace_back(dnnl::primitive(pd), args);
    plan.to_zero.insert(plan.to_zero.end(), {dwl, dwi, db});
    plan.outputs.insert(plan.outputs.end(), {diff_src, dwl, dwi, db});
    diff_dst = diff_src;
  }
  return plan;
}

// Streaming: per step t and layer l, one execution of a T = 1 primitive. Layer l's state at
// step t is its own output frame t-1 (ldnc {1,1,N,H} and tnc {1,N,H} are the same bytes), so
// nothing is copied; every step's argument list is built here, outside the timed loop. The
// LSTM's c likewise: step t reads frame t-1 of a per-layer {T,N,H} buffer and writes frame t.
Plan plan_cell(const Options& o, const dnnl::engine& eng, dnnl::stream& s, std::mt19937& rng) {
  const memory::dim T = o.T, N = o.N, H = o.H, G = o.gates();
  const memory::desc none;
  Plan plan;
  memory inputs = random_memory({{T, N, o.I}, dt::f32, tag::tnc}, eng, rng, 1.0f);
  plan.buffers.push_back(inputs);
  for (int64_t l = 0; l < o.L; ++l) {
    const memory::dim C = l == 0 ? o.I : H;
    const memory::desc x_md({1, N, C}, dt::f32, tag::tnc), h_md({1, 1, N, H}, dt::f32, tag::ldnc),
        y_md({1, N, H}, dt::f32, tag::tnc);
    LayerWeights w = random_weights(o, C, 1, eng, rng);
    const memory::desc c_md = o.lstm ? h_md : none;
    const auto pd = forward_pd(
        o, dnnl::prop_kind::forward_inference, dnnl::rnn_direction::unidirectional_left2right, x_md,
        h_md, c_md, {{1, 1, C, G, H}, dt::f32, tag::any}, {{1, 1, H, G, H}, dt::f32, tag::any},
        w.bias.get_desc(), y_md, c_md, c_md, {}, eng);
    dnnl::primitive prim(pd);
    memory wl = reordered(w.w_layer, pd.weights_layer_desc(), eng, s);
    memory wi = reordered(w.w_iter, pd.weights_iter_desc(), eng, s);
    memory outputs({{T, N, H}, dt::f32, tag::tnc}, eng);
    memory h0(h_md, eng);  // h0 = 0, and c0 = 0 for the LSTM
    zero(h0);
    // The LSTM's c of every step, frame t written by step t; and its final h, which oneDNN
    // needs written when c is (dst_iter_c needs dst_iter), into a scratch frame nobody reads.
    memory cs, h_scratch;
    if (o.lstm) {
      cs = memory({{T, N, H}, dt::f32, tag::tnc}, eng);
      h_scratch = memory(h_md, eng);
    }
    float* in_base = static_cast<float*>(inputs.get_data_handle());
    float* out_base = static_cast<float*>(outputs.get_data_handle());
    float* c_base = o.lstm ? static_cast<float*>(cs.get_data_handle()) : nullptr;
    for (memory::dim t = 0; t < T; ++t) {
      Args args{{DNNL_ARG_SRC_LAYER, memory(x_md, eng, in_base + t * N * C)},
                {DNNL_ARG_SRC_ITER, t == 0 ? h0 : memory(h_md, eng, out_base + (t - 1) * N * H)},
                {DNNL_ARG_WEIGHTS_LAYER, wl},
                {DNNL_ARG_WEIGHTS_ITER, wi},
                {DNNL_ARG_BIAS, w.bias},
                {DNNL_ARG_DST_LAYER, memory(y_md, eng, out_base + t * N * H)}};
      if (o.lstm) {
        args[DNNL_ARG_SRC_ITER_C] = t == 0 ? h0 : memory(h_md, eng, c_base + (t - 1) * N * H);
        args[DNNL_ARG_DST_ITER] = h_scratch;
        args[DNNL_ARG_DST_ITER_C] = memory(h_md, eng, c_base + t * N * H);
      }
      plan.steps.emplace_back(prim, std::move(args));
    }
    plan.buffers.push_back(h0);
    plan.buffers.push_back(outputs);
    if (o.lstm) plan.buffers.insert(plan.buffers.end(), {cs, h_scratch});
    plan.outputs.push_back(outputs);
    inputs = outputs;
  }
  // Order the steps time-major (t, then layer), as a stream feeding frames one at a time would.
  if (o.L > 1) {
    std::vector<std::pair<dnnl::primitive, Args>> by_time;
    for (memory::dim t = 0; t < T; ++t)
      for (int64_t l = 0; l < o.L; ++l) by_time.push_back(plan.steps[l * T + t]);
    plan.steps.swap(by_time);
  }
  return plan;
}

void run_once(Plan& plan, dnnl::stream& s) {
  for (memory& m : plan.to_zero) zero(m);
  for (auto& [prim, args] : plan.steps) prim.execute(s, args);
  s.wait();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (!o.lengths.empty()) {
    print_unsupported(o, "oneDNN 2.6 RNN primitives have no variable-length (packed) sequences");
    return 0;
  }
  if (o.dtype != "f32") {
    print_unsupported(o, "oneDNN 2.6 RNN primitives support f32/bf16/int8, not f64");
    return 0;
  }
  if (o.mode == "cell" && o.D != 1) usage_error("--cell needs D = 1 (a stream has one direction)");
  if (o.precision != "f32" && o.mode != "inference")
    usage_error("--precision bf16/int8 times inference of the whole sequence only");

  // oneDNN's Debian build threads with OpenMP; set the team size before any primitive exists.
  omp_set_num_threads(o.threads);
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream s(eng);
    std::mt19937 rng(12345);
    Plan plan = o.mode == "cell" ? plan_cell(o, eng, s, rng) : plan_sequence(o, eng, s, rng);

    // Validate once (the result must be finite), then warm up and time.
    run_once(plan, s);
    for (const memory& m : plan.outputs)
      if (!all_finite(m)) {
        std::fprintf(stderr, "onednn_gru: non-finite values in the result of %s\n",
                     o.problem.c_str());
        return 1;
      }
    for (int w = 1; w < o.warmup; ++w) run_once(plan, s);
    std::vector<double> ms(o.reps);
    for (int r = 0; r < o.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run_once(plan, s);
      ms[r] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    std::sort(ms.begin(), ms.end());
    const double median = o.reps % 2 ? ms[o.reps / 2] : 0.5 * (ms[o.reps / 2 - 1] + ms[o.reps / 2]);
    std::printf("%s,\"reps\":%d,\"median_ms\":%.4f,\"min_ms\":%.4f,\"gflops\":%.3f}\n",
                json_head(o).c_str(), o.reps, median, ms[0], gemm_flops(o) / (median * 1e6));
  } catch (const dnnl::error& e) {
    if (o.precision != "f32" && e.status == dnnl_unimplemented) {
      print_unsupported(o, "oneDNN 2.6 has no " + o.precision + " " +
                               (o.lstm ? "LSTM" : "linear-before-reset GRU") +
                               " primitive for this CPU");
      return 0;
    }
    std::fprintf(stderr, "onednn_gru: oneDNN error on %s: %s (status %d)\n", o.problem.c_str(),
                 e.what(), int(e.status));
    return 1;
  }
  return 0;
}
