/* grux's C API: run a GRU or LSTM model stream by stream from C, or from any language that calls C
 * (Rust, Swift, C#, Python's ctypes, a plugin host). C99; no C++ types; no exception crosses
 * it. The names and signatures below are stable.
 *
 * The model: a unidirectional GRU or LSTM stack whose weights are a PyTorch nn.GRU or nn.LSTM
 * state_dict stored in a safetensors file (f32), optionally followed by an nn.Linear head:
 *
 *   y_t = head(rnn(x)_t)            or, with GRUX_RESIDUAL,   y_t = x_t + head(rnn(x)_t)
 *
 * (no head: head(h) = h); or any sequential model of a model file people already have (RTNeural
 * JSON, GuitarML JSON, .nam: grux_model_load_file), as the file describes it.
 * A model is immutable once loaded and may be shared by any number of
 * threads and streams. A stream holds the state of `batch` independent sequences; one thread
 * at a time may use it. A stream copies what it needs from its model: the model may be freed
 * before its streams.
 *
 *   char err[256];
 *   grux_model* m = grux_model_load("model.safetensors", "rnn.", "fc.", 0, err, sizeof err);
 *   if (!m) { fprintf(stderr, "%s\n", err); return 1; }
 *   grux_stream* s = grux_stream_create(m, 1, 1, err, sizeof err);
 *   ...
 *   if (grux_stream_process(s, in, out, frames) != 0) fprintf(stderr, "%s\n",
 * grux_stream_error(s)); grux_stream_free(s); grux_model_free(m);
 *
 * Results are bit-identical to the C++ API's GruStream (grux/gru.h) or LstmStream (grux/lstm.h)
 * followed by
 * grux::linear_forward (grux/nn.h), except for one sequence on the calling thread, whose head
 * runs inside the real-time kernel's step (equal to them within f32 rounding); they never
 * depend on how frames are split between calls.
 */
#ifndef GRUX_GRUX_H
#define GRUX_GRUX_H

#include <stddef.h>
#include <stdint.h>

#include "grux/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grux_model grux_model;   /* immutable once loaded; shareable between threads */
typedef struct grux_stream grux_stream; /* state of one stream; one thread at a time */

/* Flags of grux_model_load. */
#define GRUX_RESET_BEFORE 1u /* a GRU whose n = tanh(W_in x + b_in + W_hn (r*h) + b_hn) */
#define GRUX_RESIDUAL 2u     /* output = input + model(input); sizes must match */
#define GRUX_BF16 4u         /* the products in bf16 (weights converted at load) */
#define GRUX_INT8 8u         /* the products in int8 (weights quantized at load) */

/* Return codes of grux_stream_process. */
#define GRUX_OK 0
#define GRUX_EINVAL 1 /* a bad argument (null pointer, negative frame count) */
#define GRUX_EFAIL 2  /* anything else (out of memory) */

/* Loads a model from a safetensors file.
 *   gru_prefix: the prefix of the nn.GRU's or nn.LSTM's keys ("rnn." for rnn.weight_ih_l0,
 *     ...); NULL or "" for none. The cell (an LSTM's weight_hh_l0 has 4 rows a column, a
 *     GRU's 3; weight_hr_l0: an LSTM with proj_size), layers, sizes and bias are inferred
 *     from the keys and shapes.
 *   head_prefix: the prefix of an nn.Linear head's "weight" (O, H) and optional "bias" (O);
 *     NULL or "" for no head.
 *   flags: GRUX_RESET_BEFORE (a GRU's), GRUX_RESIDUAL, at most one of GRUX_BF16 and
 *     GRUX_INT8 (the precision of the model's products: docs/precision.md; the head stays
 *     f32), or 0 (PyTorch's model in f32, no skip connection).
 * Returns NULL on error, with a one-line message in err (truncated to err_len bytes, always
 * NUL-terminated; err may be NULL when err_len is 0). Errors: a missing or malformed file, a
 * missing, extra or misshapen key, a dtype other than F32, a bidirectional model, a residual
 * whose input and output sizes differ, unknown flags, GRUX_BF16 with GRUX_INT8, and for an
 * LSTM GRUX_RESET_BEFORE. */
GRUX_API grux_model* grux_model_load(const char* safetensors_path, const char* gru_prefix,
                                     const char* head_prefix, unsigned flags, char* err,
                                     size_t err_len);
/* Loads a model file: RTNeural's JSON, GuitarML's (or a bare) PyTorch state-dict JSON, a Neural
 * Amp Modeler .nam (LSTM), safetensors (an nn.GRU / nn.LSTM state dict with an optional
 * nn.Linear after it, or what `grux model convert` writes) or ONNX (docs/format_onnx.md); the
 * format is told from the content. A model with layers that need the whole sequence (an ONNX
 * file's bidirectional, reverse, clip or peephole layers) loads, and grux_stream_create refuses
 * it with the reason.
 * The file says the layers, the GRU's form, the skip connection, the initial state and the
 * sample rate (docs/formats.md). flags: 0, GRUX_BF16 or GRUX_INT8 (the recurrent layers'
 * products; dense layers stay f32). Streams start from the file's initial state (zeros where it
 * stores none), and grux_stream_reset returns to it. Returns NULL on error with a one-line
 * message in err, as grux_model_load: a missing, malformed or oversized file, a misshapen or
 * non-finite weight, sizes that do not chain, a layer grux does not run (named by its position
 * and type), unknown flags. */
GRUX_API grux_model* grux_model_load_file(const char* path, unsigned flags, char* err,
                                          size_t err_len);
/* A model as C data, for a program without a file system: what `grux model export-c FILE OUT.h`
 * writes (the topology and weights of any model file as static const arrays and one
 * grux_model_desc), or what a program fills in itself. Sizes: H = out_size; G = 3 H for a GRU,
 * 4 H for an LSTM. Every pointer is read during grux_model_from_desc only (the model keeps its
 * own copy); NULL where the layer has no such tensor. */
#define GRUX_MODEL_DESC_VERSION 1
enum {
  GRUX_LAYER_GRU = 1,        /* w_ih (G, in) w_hh (G, H) b_ih b_hh (G) h0 (H); option: 0 or
                                GRUX_RESET_BEFORE (PyTorch's nn.GRU layout and gate order) */
  GRUX_LAYER_LSTM = 2,       /* w_ih (G, in) w_hh (G, H) b_ih b_hh (G) h0 c0 (H) */
  GRUX_LAYER_DENSE = 3,      /* weight (out, in) row-major, bias (out) */
  GRUX_LAYER_ACTIVATION = 4, /* option: one of GRUX_ACT_* */
  GRUX_LAYER_PRELU = 5,      /* weight = alpha (out) */
  GRUX_LAYER_BATCHNORM = 6   /* y = (x - mean) * weight + bias, each (out) */
};
enum { GRUX_ACT_TANH = 1, GRUX_ACT_RELU, GRUX_ACT_SIGMOID, GRUX_ACT_SOFTMAX, GRUX_ACT_ELU };
typedef struct grux_layer_desc {
  int kind; /* GRUX_LAYER_* */
  int option;
  int64_t in_size, out_size;
  const float *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;
  const float *weight, *bias, *mean;
} grux_layer_desc;
typedef struct grux_model_desc {
  int version; /* GRUX_MODEL_DESC_VERSION */
  int64_t input_size;
  int64_t num_layers;
  const grux_layer_desc* layers;
  int64_t skip;       /* the first `skip` input features added to the output (0: none) */
  double sample_rate; /* Hz, 0: unknown */
} grux_model_desc;
/* Builds a model from a description (checked as a file is: sizes that chain, a known kind and
 * option, finite weights). flags as grux_model_load_file's. Returns NULL on error with a
 * one-line message in err naming the layer. */
GRUX_API grux_model* grux_model_from_desc(const grux_model_desc* desc, unsigned flags, char* err,
                                          size_t err_len);
/* Floats per frame and sequence going in (the GRU's input size) and coming out (the head's
 * output size, or the GRU's hidden size without a head). -1 when m is NULL. */
GRUX_API int64_t grux_model_input_size(const grux_model* m);
GRUX_API int64_t grux_model_output_size(const grux_model* m);
/* The sample rate (Hz) the model was trained at, as its file says; 0 where it does not say (and
 * for grux_model_load's models); -1 when m is NULL. */
GRUX_API double grux_model_sample_rate(const grux_model* m);
/* Frees a model; NULL is a no-op. */
GRUX_API void grux_model_free(grux_model* m);

/* Creates a stream of `batch` (>= 1) sequences, all starting from a zero state; sizes all its
 * memory here. After creation grux_stream_process and grux_stream_reset allocate nothing,
 * take no lock, start no thread and make no system call (see docs/realtime.md).
 *   threads: 0 or 1 runs every call on the calling thread only (use this on an audio thread);
 *   k > 1 starts up to k - 1 worker threads here, which spin between calls for the stream's
 *   whole life (give them their own cores and the caller's priority); grux_stream_free joins
 *   them.
 * Returns NULL on error, with the message in err as for grux_model_load. */
GRUX_API grux_stream* grux_stream_create(const grux_model* m, int64_t batch, int threads, char* err,
                                         size_t err_len);
/* As grux_stream_create, for a host running at `sample_rate` Hz (0: the model's own rate): a model
 * file trained at another (lower) rate gets RTNeural's sample-rate correction, each recurrent
 * layer fed back its state from ratio = sample_rate / trained rate frames before (linearly
 * interpolated where the ratio is fractional; docs/formats.md). The trained rate is the file's,
 * or 48000 Hz where it has none. f32 models only; errors as grux_stream_create's, and a
 * sample_rate below the model's. */
GRUX_API grux_stream* grux_stream_create_at_rate(const grux_model* m, int64_t batch, int threads,
                                                 double sample_rate, char* err, size_t err_len);
/* Runs `frames` (>= 0) time steps. in: frames x batch x input_size floats, time-major
 * (in[(t * batch + n) * input_size + i]); out: frames x batch x output_size floats, the same
 * way. in and out must not overlap. Returns GRUX_OK, or a non-zero code with the message in
 * grux_stream_error(s) (the state is then unchanged). */
GRUX_API int grux_stream_process(grux_stream* s, const float* in, float* out, int64_t frames);
/* The message of the last failed call on s ("" if none); valid until the next call on s. */
GRUX_API const char* grux_stream_error(const grux_stream* s);
/* Sets every sequence's state back to its start: zero, or a model file's stored initial state. */
GRUX_API void grux_stream_reset(grux_stream* s);
/* Frees a stream; NULL is a no-op. */
GRUX_API void grux_stream_free(grux_stream* s);

/* The library's version, "MAJOR.MINOR.PATCH". */
GRUX_API const char* grux_version(void);

#ifdef __cplusplus
}
#endif

#endif /* GRUX_GRUX_H */
