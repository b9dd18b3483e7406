/* Streams a signal through a GRU model with grux's C API, one frame per call, as an audio
 * callback would; checks that one call over the whole signal gives the same bits.
 * Build against an installed grux:
 *   cc -std=c99 stream.c $(pkg-config --cflags --libs grux) -o stream
 * Usage: stream MODEL.safetensors [GRU_PREFIX [HEAD_PREFIX]]   (e.g. data/example/gru.safetensors)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grux/grux.h"

int main(int argc, char** argv) {
  char err[256];
  const int64_t frames = 480; /* 10 ms at 48 kHz */
  grux_model* model;
  grux_stream *live, *whole;
  float *in, *out, *out_whole;
  int64_t I, O, t, i;
  int same;
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.safetensors [GRU_PREFIX [HEAD_PREFIX]]\n", argv[0]);
    return 2;
  }
  model = grux_model_load(argv[1], argc > 2 ? argv[2] : NULL, argc > 3 ? argv[3] : NULL, 0, err,
                          sizeof err);
  if (!model) {
    fprintf(stderr, "stream: %s\n", err);
    return 1;
  }
  I = grux_model_input_size(model);
  O = grux_model_output_size(model);
  live = grux_stream_create(model, 1, 1, err, sizeof err);
  whole = live ? grux_stream_create(model, 1, 1, err, sizeof err) : NULL;
  if (!whole) {
    fprintf(stderr, "stream: %s\n", err);
    return 1;
  }
  in = malloc(sizeof(float) * (size_t)(frames * I));
  out = malloc(sizeof(float) * (size_t)(frames * O));
  out_whole = malloc(sizeof(float) * (size_t)(frames * O));
  if (!in || !out || !out_whole) return 1;
  for (t = 0; t < frames; ++t)
    for (i = 0; i < I; ++i) in[t * I + i] = (float)sin(0.05 * (double)t * (double)(i + 1));

  for (t = 0; t < frames; ++t) /* the audio callback: one frame at a time */
    if (grux_stream_process(live, in + t * I, out + t * O, 1) != GRUX_OK) {
      fprintf(stderr, "stream: %s\n", grux_stream_error(live));
      return 1;
    }
  if (grux_stream_process(whole, in, out_whole, frames) != GRUX_OK) {
    fprintf(stderr, "stream: %s\n", grux_stream_error(whole));
    return 1;
  }
  same = memcmp(out, out_whole, sizeof(float) * (size_t)(frames * O)) == 0;
  printf(
      "grux %s: %lld frames of %lld -> %lld floats; last frame starts %.6f; frame by frame %s "
      "one call\n",
      grux_version(), (long long)frames, (long long)I, (long long)O, out[(frames - 1) * O],
      same ? "==" : "!=");
  grux_stream_free(live);
  grux_stream_free(whole);
  grux_model_free(model);
  free(in);
  free(out);
  free(out_whole);
  return same ? 0 : 1;
}
