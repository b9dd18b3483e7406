// The C API (include/grux/grux.h) over the C++ engine: a GRU stack (grux::Gru, run by
// grux::GruStream) and an optional Linear head (the kernel grux::linear_forward runs). Every
// entry point catches everything: no exception crosses into C.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_packed.h"
#include "cpu/gru_stream.h"
#include "grux/gru.h"
#include "grux/grux.h"
#include "grux/io.h"
#include "grux/version.h"
#include "ops/gru_stream_access.h"

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

// The head and skip connection, shared by a model and (copied into) each of its streams.
struct Head {
  std::vector<float> w, b;  // (O, H) row-major, (O) or empty: no bias; w empty: no head
  int64_t O = 0, H = 0;
  bool residual = false;
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

std::vector<float> to_vector(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

}  // namespace

struct grux_model {
  grux::Gru gru;
  Head head;
  grux::Precision precision = grux::Precision::f32;
};

struct grux_stream {
  grux::GruStream stream;
  Head head;
  int64_t batch = 0;
  // One f32 sequence on the calling thread: the real-time kernel runs the head in its steps.
  bool fast = false;
  grux::cpu::StreamHead fast_head{};
  // Otherwise, sized at creation: process() runs calls in blocks of `block` frames and
  // allocates nothing.
  int64_t block = 0;
  std::vector<float> gru_out{};  // (block, batch, H) when there is a head
  Tensor head_packed{};          // batch > 1: the head's W^T packed once, as cpu::gemm packs it
  grux::cpu::PackedB<float> head_b{};
  std::string error{};
};

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
      throw Error(fmt::format("{}no key starts with \"{}\" (expected nn.GRU's weight_ih_l0, ...)",
                              what, gp));
    for (const auto& [key, t] : state)
      if (key.size() > 8 && key.compare(key.size() - 8, 8, "_reverse") == 0)
        throw Error(
            fmt::format("{}{}{} belongs to a bidirectional GRU, which cannot stream (the "
                        "reverse direction needs the whole sequence)",
                        what, gp, key));
    grux::GruConfig options;
    options.form = (flags & GRUX_RESET_BEFORE) ? grux::GruForm::reset_before
                                               : grux::GruForm::linear_before_reset;
    grux::Gru gru = [&] {
      try {
        return grux::Gru::from_state_dict(state, options);
      } catch (const Error& e) {
        throw Error(what + e.what());
      }
    }();

    Head head;
    head.input_size = gru.config().input_size;
    head.H = gru.config().hidden_size;
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
      head.w = to_vector(wt);
      const auto b = file.tensors.find(hp + "bias");
      if (b != file.tensors.end()) {
        if (b->second.shape() != grux::Shape{head.O})
          throw Error(fmt::format("{}{}bias has shape {}, expected ({})", what, hp,
                                  grux::shape_str(b->second.shape()), head.O));
        head.b = to_vector(b->second);
      }
      for (const auto& [key, t] : file.tensors)
        if (key.compare(0, hp.size(), hp) == 0 && key != hp + "weight" && key != hp + "bias")
          throw Error(
              fmt::format("{}unexpected key {} under the head's prefix (expected {}weight "
                          "and {}bias)",
                          what, key, hp, hp));
    }
    if (flags & GRUX_RESIDUAL) {
      head.residual = true;
      if (head.O != head.input_size)
        throw Error(
            fmt::format("{}GRUX_RESIDUAL adds the input to the output, but the input has "
                        "{} features and the output {}",
                        what, head.input_size, head.O));
    }
    const grux::Precision precision = (flags & GRUX_BF16)   ? grux::Precision::bf16
                                      : (flags & GRUX_INT8) ? grux::Precision::int8
                                                            : grux::Precision::f32;
    return new grux_model{std::move(gru), std::move(head), precision};
  } catch (...) {
    set_error(err, err_len, current_error("grux_model_load"));
  }
  return nullptr;
}

int64_t grux_model_input_size(const grux_model* m) {
  return m ? m->head.input_size : -1;
}
int64_t grux_model_output_size(const grux_model* m) {
  return m ? m->head.O : -1;
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
    std::unique_ptr<grux_stream> s(new grux_stream{
        grux::GruStream(m->gru, batch, Tensor(), m->precision, threads), m->head, batch});
    const Head& h = s->head;
    s->fast = grux::GruStreamAccess::fast(s->stream);
    if (s->fast) {
      if (!h.w.empty())
        s->fast_head = grux::cpu::gru_stream_pack_head(h.O, h.H, h.w.data(),
                                                       h.b.empty() ? nullptr : h.b.data());
      return s.release();
    }
    if (!h.w.empty()) {
      // Blocks of about 256 KiB of GRU outputs: the head's product over a block stays in cache.
      s->block = std::clamp<int64_t>((int64_t(1) << 16) / (batch * h.H), 1, 512);
      s->gru_out.resize(s->block * batch * h.H);
    }
    if (!h.w.empty() && batch > 1) {  // batch 1 runs dot products of the head's rows instead
      const int64_t panel = grux::cpu::gemm_panel_width<float>(h.O);
      s->head_packed =
          Tensor::empty({grux::cpu::packed_size<float>(h.H, h.O, panel)}, grux::DType::f32);
      // W (O x H) row-major used as W^T (H x O): stride_k = 1, stride_n = H (cpu::gemm's way).
      s->head_b = grux::cpu::pack_b_for_target<float>(h.H, h.O, panel, h.w.data(), 1, h.H, nullptr,
                                                      nullptr, s->head_packed.data<float>());
    }
    return s.release();
  } catch (...) {
    set_error(err, err_len, current_error("grux_stream_create"));
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
    const Head& h = s->head;
    if (s->fast) {
      grux::GruStreamAccess::process_head(s->stream, in, out, frames,
                                          h.w.empty() ? nullptr : &s->fast_head, h.residual);
    } else if (h.w.empty()) {  // the GRU's outputs are the stream's
      s->stream.process<float>(in, out, frames);
      if (h.residual)
        for (int64_t i = 0; i < frames * s->batch * h.O; ++i) out[i] = in[i] + out[i];
    } else {
      const int64_t I = h.input_size, B = s->batch;
      const float* bias = h.b.empty() ? nullptr : h.b.data();
      for (int64_t f0 = 0; f0 < frames; f0 += s->block) {
        const int64_t f = std::min(s->block, frames - f0), rows = f * B;
        const float* x = in + f0 * B * I;
        float* o = out + f0 * B * h.O;
        float* y = s->gru_out.data();
        s->stream.process<float>(x, y, f);
        // The head, on the calling thread: for one sequence, dot products of the head's rows
        // (its own multiply-adds, nothing more); for a batch, linear_forward's product
        // (cpu::gemm packs W^T the same way, then runs this kernel).
        if (B == 1)
          grux::cpu::dense_rows(f, h.H, h.O, y, h.H, h.w.data(), bias, o, h.O, false);
        else
          grux::cpu::gemm_packed<float>(rows, y, h.H, false, s->head_b, bias, false, o, h.O, 0,
                                        s->head_b.panels());
        if (h.residual)
          for (int64_t i = 0; i < rows * h.O; ++i) o[i] = x[i] + o[i];
      }
    }
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
    s->stream.reset();
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
