/* A GRU audio effect the way a plugin runs one (docs/realtime.md): everything that
 * allocates happens in effect_prepare (the host's "prepare to play", off the audio thread);
 * effect_process is the audio callback: it only calls grux_stream_process, which allocates
 * nothing, takes no lock, starts no thread and makes no system call; effect_reset is
 * real-time safe too. The model: an nn.GRU with an nn.Linear head and a skip connection
 * (out = in + head(gru(in))), channels = the GRU's input size = the head's output size.
 * main() plays the host: one second at 48 kHz in blocks of 64 frames, then reports the time
 * per frame and the real-time factor.
 * Build against an installed grux:
 *   cc -std=c99 effect.c $(pkg-config --cflags --libs grux) -lm -o effect
 * Usage: effect MODEL.safetensors GRU_PREFIX HEAD_PREFIX
 *   (e.g. tests/reference/golden/capi/model_residual.safetensors rnn. fc.) */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "grux/grux.h"

typedef struct {
  grux_stream* stream;
  int64_t channels;
} Effect;

/* Off the audio thread: load, check, create the stream (all of its memory is sized here). */
static Effect* effect_prepare(const char* path, const char* gru_prefix, const char* head_prefix,
                              char* err, size_t err_len) {
  Effect* e;
  grux_model* m = grux_model_load(path, gru_prefix, head_prefix, GRUX_RESIDUAL, err, err_len);
  if (!m) return NULL;
  e = (Effect*)malloc(sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    grux_model_free(m);
    return NULL;
  }
  e->channels = grux_model_input_size(m);
  /* threads = 1: every call runs on the calling (audio) thread, no worker to wait for. */
  e->stream = grux_stream_create(m, 1, 1, err, err_len);
  grux_model_free(m); /* the stream keeps what it needs */
  if (!e->stream) {
    free(e);
    return NULL;
  }
  return e;
}

/* The audio callback: `frames` frames of interleaved channels in, the same out. */
static int effect_process(Effect* e, const float* in, float* out, int64_t frames) {
  return grux_stream_process(e->stream, in, out, frames);
}

/* Real-time safe as well: the state back to zeros (a transport jump, a new file). */
static void effect_reset(Effect* e) {
  grux_stream_reset(e->stream);
}

static void effect_release(Effect* e) {
  if (!e) return;
  grux_stream_free(e->stream);
  free(e);
}

int main(int argc, char** argv) {
  enum { kRate = 48000, kBlock = 64 };
  char err[256];
  Effect* e;
  float *in, *out;
  int64_t t, c, C;
  struct timespec t0, t1;
  double ns, peak = 0;
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.safetensors GRU_PREFIX HEAD_PREFIX\n", argv[0]);
    return 2;
  }
  e = effect_prepare(argv[1], argv[2], argv[3], err, sizeof err);
  if (!e) {
    fprintf(stderr, "effect: %s\n", err);
    return 1;
  }
  C = e->channels;
  in = (float*)malloc(sizeof(float) * kRate * C);
  out = (float*)malloc(sizeof(float) * kRate * C);
  if (!in || !out) return 1;
  for (t = 0; t < kRate; ++t) /* a 440 Hz tone, one phase per channel */
    for (c = 0; c < C; ++c) in[t * C + c] = 0.5f * (float)sin(6.283185307 * 440.0 * t / kRate + c);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (t = 0; t < kRate; t += kBlock) /* what the host's audio thread does */
    if (effect_process(e, in + t * C, out + t * C, kBlock) != GRUX_OK) {
      fprintf(stderr, "effect: %s\n", grux_stream_error(e->stream));
      return 1;
    }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  effect_reset(e);
  for (t = 0; t < kRate * C; ++t) {
    if (!isfinite(out[t])) {
      fprintf(stderr, "effect: output %ld is not finite\n", (long)t);
      return 1;
    }
    if (fabs(out[t]) > peak) peak = fabs(out[t]);
  }
  ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / kRate;
  printf(
      "effect: %ld channels, 1 s at 48 kHz in blocks of %d: %.0f ns per frame, "
      "real-time factor %.0f, output peak %.3f\n",
      (long)C, kBlock, ns, 1e9 / kRate / ns, peak);
  free(in);
  free(out);
  effect_release(e);
  return 0;
}
