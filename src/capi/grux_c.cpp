// The C API (include/grux/grux.h) over the C++ engine's public API: a GRU or LSTM stack
// (grux::Gru run by grux::GruStream, grux::Lstm run by grux::LstmStream) and an optional Linear
// head and skip (grux::GruStreamHead), or a model file (grux::Model run by grux::ModelStream).
// Every entry point catches everything: no exception crosses into C.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "grux/gru.h"
#include "grux/grux.h"
#include "grux/io.h"
#include "grux/lstm.h"
#include "grux/model.h"
#include "grux/version.h"

namespace {

using grux::Error;
using grux::Tensor;

// Writes a one-line message into err (truncated, NUL-terminated) when there is room.
void set_error(char* err, size_t err_len, const std::string& msg) {
  if (!err || err_len == 0) return;
  const size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// The head and skip connection of a model, given to each of its streams.
struct Head {
  grux::GruStreamHead layer;  // weight (O, H) or undefined: no head; bias (O) or undefined
  int64_t O = 0, H = 0;
  int64_t input_size = 0;
};

// Keys of `file` under `prefix`, with the prefix removed.
std::map<std::string, Tensor> under(const grux::SafeTensors& file, const std::string& prefix,
                                    const std::string& exclude) {
  std::map<std::string, Tensor> out;
  for (const auto& [key, t] : file.tensors) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    if (!exclude.empty() && key.compare(0, exclude.size(), exclude) == 0) continue;
    out.emplace(key.substr(prefix.size()), t);
  }
  return out;
}

// The message of the exception being handled, for C callers; call only inside a catch block.
std::string current_error(const char* fn) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fmt::format("{}: out of memory", fn);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return fmt::format("{}: unknown error", fn);
  }
}

// The products' precision that GRUX_BF16 / GRUX_INT8 in `flags` ask for (f32 without either).
grux::Precision precision_of(unsigned flags) {
  return (flags & GRUX_BF16)   ? grux::Precision::bf16
         : (flags & GRUX_INT8) ? grux::Precision::int8
                               : grux::Precision::f32;
}

}  // namespace

struct grux_model {
  std::optional<grux::Gru> gru;  // the model's stack and head (grux_model_load): one of the two
  std::optional<grux::Lstm> lstm;
  Head head;
  std::optional<grux::Model> file;  // or a model file (grux_model_load_file)
  grux::Precision precision = grux::Precision::f32;
};

struct grux_stream {
  std::optional<grux::GruStream> gru;  // with the model's head (set_head); one of the three
  std::optional<grux::LstmStream> lstm;
  std::optional<grux::ModelStream> file;
  std::string error{};
};

namespace {

// The flags of a model file or description (`fn` names the entry point in messages): a
// precision at most; `note` follows the expected flags in the message.
void check_file_flags(const char* fn, unsigned flags, const char* note) {
  if (flags & ~(GRUX_BF16 | GRUX_INT8))
    throw Error(
        fmt::format("{}: flags 0x{:x}, expected GRUX_BF16 or GRUX_INT8 or 0{}", fn, flags, note));
  if ((flags & GRUX_BF16) && (flags & GRUX_INT8))
    throw Error(fmt::format("{}: GRUX_BF16 and GRUX_INT8 both given; choose one precision", fn));
}

// A C model of a model file's description, its products in the precision of `flags`.
grux_model* file_model(grux::ModelSpec spec, unsigned flags) {
  auto m = std::make_unique<grux_model>();
  m->file.emplace(std::move(spec));
  m->head.input_size = m->file->input_size();
  m->head.O = m->file->output_size();
  m->precision = precision_of(flags);
  return m.release();
}

}  // namespace

extern "C" {

grux_model* grux_model_load(const char* safetensors_path, const char* gru_prefix,
                            const char* head_prefix, unsigned flags, char* err, size_t err_len) {
  set_error(err, err_len, "");
  try {
    if (!safetensors_path) throw Error("grux_model_load: safetensors_path is NULL");
    if (flags & ~(GRUX_RESET_BEFORE | GRUX_RESIDUAL | GRUX_BF16 | GRUX_INT8))
      throw Error(fmt::format(
          "grux_model_load: unknown flags 0x{:x}, expected GRUX_RESET_BEFORE | GRUX_RESIDUAL | "
          "GRUX_BF16 or GRUX_INT8",
          flags));
    if ((flags & GRUX_BF16) && (flags & GRUX_INT8))
      throw Error("grux_model_load: GRUX_BF16 and GRUX_INT8 both given; choose one precision");
    const std::string gp = gru_prefix ? gru_prefix : "", hp = head_prefix ? head_prefix : "";
    const grux::SafeTensors file = grux::read_safetensors(safetensors_path);
    const std::string what = fmt::format("grux_model_load: {}: ", safetensors_path);
    for (const auto& [key, t] : file.tensors)
      if ((key.compare(0, gp.size(), gp) == 0 ||
           (!hp.empty() && key.compare(0, hp.size(), hp) == 0)) &&
          t.dtype() != grux::DType::f32)
        throw Error(
            fmt::format("{}{} is {}, expected F32", what, key, grux::dtype_name(t.dtype())));

    // The GRU: every key under gru_prefix except the head's (when its prefix extends it).
    std::map<std::string, Tensor> state =
        under(file, gp, hp.size() > gp.size() && hp.compare(0, gp.size(), gp) == 0 ? hp : "");
    if (state.empty())
      throw Error(fmt::format(
          "{}no key starts with \"{}\" (expected nn.GRU's or nn.LSTM's weight_ih_l0, ...)", what,
          gp));
    // The cell, told by the shapes: an LSTM's weight_hh_l0 has 4 rows a column (4H x H, or
    // 4H x proj_size with weight_hr_l0), a GRU's 3.
    const auto hh = state.find("weight_hh_l0");
    const bool lstm = state.count("weight_hr_l0") || (hh != state.end() && hh->second.dim() == 2 &&
                                                      hh->second.size(0) == 4 * hh->second.size(1));
    const char* model = lstm ? "LSTM" : "GRU";
    for (const auto& [key, t] : state)
      if (key.size() > 8 && key.compare(key.size() - 8, 8, "_reverse") == 0)
        throw Error(
            fmt::format("{}{}{} belongs to a bidirectional {}, which cannot stream (the "
                        "reverse direction needs the whole sequence)",
                        what, gp, key, model));
    if (lstm && (flags & GRUX_RESET_BEFORE))
      throw Error(fmt::format(
          "{}GRUX_RESET_BEFORE is a GRU's candidate form, but the weights are an LSTM's", what));
    auto m = std::make_unique<grux_model>();
    Head head;
    try {
      if (lstm) {
        m->lstm.emplace(grux::Lstm::from_state_dict(state));
        head.input_size = m->lstm->config().input_size;
        head.H = m->lstm->config().output_size();
      } else {
        grux::GruConfig options;
        options.form = (flags & GRUX_RESET_BEFORE) ? grux::GruForm::reset_before
                                                   : grux::GruForm::linear_before_reset;
        m->gru.emplace(grux::Gru::from_state_dict(state, options));
        head.input_size = m->gru->config().input_size;
        head.H = m->gru->config().hidden_size;
      }
    } catch (const Error& e) {
      throw Error(what + e.what());
    }
    head.O = head.H;
    if (!hp.empty()) {
      const auto w = file.tensors.find(hp + "weight");
      if (w == file.tensors.end())
        throw Error(
            fmt::format("{}the head has no {}weight (expected nn.Linear's weight, ({}, "
                        "out_features))",
                        what, hp, head.H));
      const Tensor& wt = w->second;
      if (wt.dim() != 2 || wt.size(1) != head.H || wt.size(0) < 1)
        throw Error(fmt::format("{}{}weight has shape {}, expected (out_features, {})", what, hp,
                                grux::shape_str(wt.shape()), head.H));
      head.O = wt.size(0);
      head.layer.weight = wt.contiguous();
      const auto b = file.tensors.find(hp + "bias");
      if (b != file.tensors.end()) {
        if (b->second.shape() != grux::Shape{head.O})
          throw Error(fmt::format("{}{}bias has shape {}, expected ({})", what, hp,
                                  grux::shape_str(b->second.shape()), head.O));
        head.layer.bias = b->second.contiguous();
      }
      for (const auto& [key, t] : file.tensors)
        if (key.compare(0, hp.size(), hp) == 0 && key != hp + "weight" && key != hp + "bias")
          throw Error(
              fmt::format("{}unexpected key {} under the head's prefix (expected {}weight "
                          "and {}bias)",
                          what, key, hp, hp));
    }
    if (flags & GRUX_RESIDUAL) {
      head.layer.residual = true;
      if (head.O != head.input_size)
        throw Error(
            fmt::format("{}GRUX_RESIDUAL adds the input to the output, but the input has "
                        "{} features and the output {}",
                        what, head.input_size, head.O));
    }
    const grux::Precision precision = precision_of(flags);
    m->head = std::move(head);
    m->precision = precision;
    return m.release();
  } catch (...) {
    set_error(err, err_len, current_error("grux_model_load"));
  }
  return nullptr;
}

grux_model* grux_model_load_file(const char* path, unsigned flags, char* err, size_t err_len) {
  set_error(err, err_len, "");
  try {
    if (!path) throw Error("grux_model_load_file: path is NULL");
    check_file_flags("grux_model_load_file", flags,
                     " (the file itself says the GRU's form and the skip connection)");
    return file_model(grux::read_model(path), flags);
  } catch (...) {
    set_error(err, err_len, current_error("grux_model_load_file"));
  }
  return nullptr;
}

}  // extern "C"

// Helpers of grux_model_from_desc, with C++ linkage (they return C++ types).
namespace {

// A (n) or (rows, cols) f32 tensor copied from `p` (NULL: undefined), every value finite.
Tensor desc_tensor(const float* p, const grux::Shape& shape, const std::string& where,
                   const char* name) {
  if (!p) return Tensor();
  Tensor t = Tensor::empty(shape, grux::DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i]))
      throw Error(fmt::format("{}: {}[{}] is {}, expected a finite number", where, name, i, p[i]));
    t.data<float>()[i] = p[i];
  }
  return t;
}

grux::ModelSpec spec_of(const grux_model_desc& d) {
  if (d.version != GRUX_MODEL_DESC_VERSION)
    throw Error(fmt::format("grux_model_from_desc: version {}, expected {}", d.version,
                            GRUX_MODEL_DESC_VERSION));
  if (d.num_layers < 0 || (d.num_layers > 0 && !d.layers))
    throw Error(fmt::format("grux_model_from_desc: num_layers {} with layers {}", d.num_layers,
                            d.layers ? "set" : "NULL"));
  constexpr int64_t kMaxSize = int64_t(1) << 20;
  grux::ModelSpec spec;
  spec.input_size = d.input_size;
  spec.skip = d.skip;
  spec.sample_rate = d.sample_rate;
  for (int64_t k = 0; k < d.num_layers; ++k) {
    const grux_layer_desc& l = d.layers[k];
    const std::string where = fmt::format("grux_model_from_desc: layer {}", k);
    if (l.in_size < 1 || l.in_size > kMaxSize || l.out_size < 1 || l.out_size > kMaxSize)
      throw Error(fmt::format("{}: sizes {} -> {}, expected 1..{}", where, l.in_size, l.out_size,
                              kMaxSize));
    grux::ModelLayer m;
    m.in_size = l.in_size;
    m.out_size = l.out_size;
    const int64_t I = l.in_size, H = l.out_size;
    switch (l.kind) {
      case GRUX_LAYER_GRU:
      case GRUX_LAYER_LSTM: {
        const bool gru = l.kind == GRUX_LAYER_GRU;
        m.kind = gru ? grux::ModelLayer::Kind::gru : grux::ModelLayer::Kind::lstm;
        if (gru && l.option != 0 && l.option != int(GRUX_RESET_BEFORE))
          throw Error(
              fmt::format("{}: option {}, expected 0 or GRUX_RESET_BEFORE", where, l.option));
        if (gru && l.option) m.form = grux::GruForm::reset_before;
        const int64_t G = (gru ? 3 : 4) * H;
        m.w_ih = desc_tensor(l.w_ih, {G, I}, where, "w_ih");
        m.w_hh = desc_tensor(l.w_hh, {G, H}, where, "w_hh");
        m.b_ih = desc_tensor(l.b_ih, {G}, where, "b_ih");
        m.b_hh = desc_tensor(l.b_hh, {G}, where, "b_hh");
        m.h0 = desc_tensor(l.h0, {H}, where, "h0");
        if (!gru) m.c0 = desc_tensor(l.c0, {H}, where, "c0");
        break;
      }
      case GRUX_LAYER_DENSE:
        m.kind = grux::ModelLayer::Kind::dense;
        m.weight = desc_tensor(l.weight, {H, I}, where, "weight");
        m.bias = desc_tensor(l.bias, {H}, where, "bias");
        break;
      case GRUX_LAYER_ACTIVATION: {
        m.kind = grux::ModelLayer::Kind::activation;
        using A = grux::ModelLayer::Activation;
        static const std::pair<int, A> kActs[] = {{GRUX_ACT_TANH, A::tanh},
                                                  {GRUX_ACT_RELU, A::relu},
                                                  {GRUX_ACT_SIGMOID, A::sigmoid},
                                                  {GRUX_ACT_SOFTMAX, A::softmax},
                                                  {GRUX_ACT_ELU, A::elu}};
        bool found = false;
        for (const auto& [code, a] : kActs)
          if (l.option == code) m.activation = a, found = true;
        if (!found)
          throw Error(
              fmt::format("{}: activation option {}, expected one of GRUX_ACT_*", where, l.option));
        break;
      }
      case GRUX_LAYER_PRELU:
        m.kind = grux::ModelLayer::Kind::prelu;
        m.weight = desc_tensor(l.weight, {H}, where, "weight");
        break;
      case GRUX_LAYER_BATCHNORM:
        m.kind = grux::ModelLayer::Kind::batchnorm;
        m.mean = desc_tensor(l.mean, {H}, where, "mean");
        m.weight = desc_tensor(l.weight, {H}, where, "weight");
        m.bias = desc_tensor(l.bias, {H}, where, "bias");
        break;
      default:
        throw Error(fmt::format("{}: kind {}, expected one of GRUX_LAYER_*", where, l.kind));
    }
    spec.layers.push_back(std::move(m));
  }
  try {
    spec.validate();
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("model: ", 0) == 0) msg = msg.substr(7);
    throw Error("grux_model_from_desc: " + msg);
  }
  return spec;
}

}  // namespace

extern "C" {

grux_model* grux_model_from_desc(const grux_model_desc* desc, unsigned flags, char* err,
                                 size_t err_len) {
  set_error(err, err_len, "");
  try {
    if (!desc) throw Error("grux_model_from_desc: desc is NULL");
    check_file_flags("grux_model_from_desc", flags, "");
    return file_model(spec_of(*desc), flags);
  } catch (...) {
    set_error(err, err_len, current_error("grux_model_from_desc"));
  }
  return nullptr;
}

int64_t grux_model_input_size(const grux_model* m) {
  return m ? m->head.input_size : -1;
}
int64_t grux_model_output_size(const grux_model* m) {
  return m ? m->head.O : -1;
}
double grux_model_sample_rate(const grux_model* m) {
  if (!m) return -1;
  return m->file ? m->file->spec().sample_rate : 0;
}
void grux_model_free(grux_model* m) {
  delete m;
}

grux_stream* grux_stream_create(const grux_model* m, int64_t batch, int threads, char* err,
                                size_t err_len) {
  set_error(err, err_len, "");
  try {
    if (!m) throw Error("grux_stream_create: model is NULL");
    if (batch < 1)
      throw Error(fmt::format("grux_stream_create: batch is {}, expected >= 1", batch));
    if (threads < 0)
      throw Error(fmt::format(
          "grux_stream_create: threads is {}, expected 0 or 1 (the calling thread only) "
          "or more",
          threads));
    auto s = std::make_unique<grux_stream>();
    const Head& h = m->head;
    const bool head = h.layer.weight.defined() || h.layer.residual;
    if (m->file) {
      s->file.emplace(*m->file, batch, m->precision, threads);
    } else if (m->gru) {
      s->gru.emplace(*m->gru, batch, Tensor(), m->precision, threads);
      if (head) s->gru->set_head(h.layer);
    } else {
      s->lstm.emplace(*m->lstm, batch, Tensor(), Tensor(), m->precision, threads);
      if (head) s->lstm->set_head(h.layer);
    }
    return s.release();
  } catch (...) {
    set_error(err, err_len, current_error("grux_stream_create"));
  }
  return nullptr;
}

grux_stream* grux_stream_create_at_rate(const grux_model* m, int64_t batch, int threads,
                                        double sample_rate, char* err, size_t err_len) {
  set_error(err, err_len, "");
  try {
    if (!m) throw Error("grux_stream_create_at_rate: model is NULL");
    if (!m->file)
      throw Error(
          "grux_stream_create_at_rate: the model came from grux_model_load, which keeps no "
          "sample rate; load it with grux_model_load_file");
    if (threads < 0)
      throw Error(fmt::format("grux_stream_create_at_rate: threads is {}, expected >= 0", threads));
    grux::ModelStreamOptions o;
    o.precision = m->precision;
    o.threads = threads;
    o.sample_rate = sample_rate;
    auto s = std::make_unique<grux_stream>();
    s->file.emplace(*m->file, batch, o);
    return s.release();
  } catch (...) {
    set_error(err, err_len, current_error("grux_stream_create_at_rate"));
  }
  return nullptr;
}

int grux_stream_process(grux_stream* s, const float* in, float* out, int64_t frames) {
  if (!s) return GRUX_EINVAL;
  s->error.clear();
  try {
    if (frames < 0) {
      s->error = fmt::format("grux_stream_process: frames is {}, expected >= 0", frames);
      return GRUX_EINVAL;
    }
    if (frames == 0) return GRUX_OK;
    if (!in || !out) {
      s->error = fmt::format("grux_stream_process: {} is NULL", in ? "out" : "in");
      return GRUX_EINVAL;
    }
    if (s->file)
      s->file->process(in, out, frames);
    else if (s->gru)
      s->gru->process<float>(in, out, frames);
    else
      s->lstm->process<float>(in, out, frames);
    return GRUX_OK;
  } catch (...) {
    s->error = current_error("grux_stream_process");
  }
  return GRUX_EFAIL;
}

const char* grux_stream_error(const grux_stream* s) {
  return s ? s->error.c_str() : "grux_stream_error: stream is NULL";
}

void grux_stream_reset(grux_stream* s) {
  if (!s) return;
  try {
    if (s->file)
      s->file->reset();
    else if (s->gru)
      s->gru->reset();
    else
      s->lstm->reset();
    s->error.clear();
  } catch (...) {
    s->error = "grux_stream_reset: failed";
  }
}

void grux_stream_free(grux_stream* s) {
  delete s;
}

const char* grux_version(void) {
  return GRUX_VERSION_STRING;
}

}  // extern "C"
