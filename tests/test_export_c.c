/* `grux model export-c` end to end: headers written from two model files at build time
 * (tests/CMakeLists.txt) compiled as C99 into this program; each model built from its
 * grux_model_desc must give the bits of the same file loaded with grux_model_load_file, and a
 * malformed description is refused with a message. Usage: test_export_c MODELS_DIR */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "grux/grux.h"
#include "nam_core_lstm.h"
#include "rtneural_gru.h"

static int failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

static void same_as_file(const grux_model_desc* desc, const char* path) {
  char err[256];
  grux_model* a = grux_model_from_desc(desc, 0, err, sizeof err);
  grux_model* b = grux_model_load_file(path, 0, err, sizeof err);
  CHECK(a != NULL && b != NULL);
  if (!a || !b) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CHECK(grux_model_sample_rate(a) == grux_model_sample_rate(b));
  grux_stream* sa = grux_stream_create(a, 1, 0, err, sizeof err);
  grux_stream* sb = grux_stream_create(b, 1, 0, err, sizeof err);
  float in[500], ya[500], yb[500];
  for (int t = 0; t < 500; ++t) in[t] = 0.5f * sinf(0.05f * (float)t);
  CHECK(grux_stream_process(sa, in, ya, 500) == GRUX_OK);
  CHECK(grux_stream_process(sb, in, yb, 500) == GRUX_OK);
  CHECK(memcmp(ya, yb, sizeof ya) == 0);
  grux_stream_free(sa);
  grux_stream_free(sb);
  grux_model_free(a);
  grux_model_free(b);
}

int main(int argc, char** argv) {
  char path[1024], err[256];
  if (argc < 2) return 2;
  snprintf(path, sizeof path, "%s/files/nam_core_lstm.nam", argv[1]);
  same_as_file(&nam_core_lstm, path);
  snprintf(path, sizeof path, "%s/files/rtneural_gru.json", argv[1]);
  same_as_file(&rtneural_gru, path);

  CHECK(grux_model_from_desc(NULL, 0, err, sizeof err) == NULL);
  CHECK(strstr(err, "desc is NULL") != NULL);
  {
    grux_model_desc d = nam_core_lstm;
    d.version = 99;
    CHECK(grux_model_from_desc(&d, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "version 99") != NULL);
  }
  {
    grux_layer_desc layers[2];
    grux_model_desc d = rtneural_gru;
    memcpy(layers, rtneural_gru_layers, sizeof layers);
    layers[1].option = 77; /* layer 1 is the tanh activation */
    d.layers = layers;
    d.num_layers = 2;
    CHECK(grux_model_from_desc(&d, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "layer 1: activation option 77") != NULL);
    layers[1] = rtneural_gru_layers[1];
    layers[1].in_size = 5;
    CHECK(grux_model_from_desc(&d, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "layer 1 (activation)") != NULL);
  }
  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("export-c: ok\n");
  return failures ? 1 : 0;
}
