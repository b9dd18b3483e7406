/* The C API from C: compiled as C99 with -pedantic -Werror (the header must stay C), run by
 * CTest. Loads the golden residual model (tests/reference/gen_capi_golden.py), checks the
 * sizes, streams frames one at a time, and checks the error paths a C caller meets.
 * Usage: test_capi_c GOLDEN_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grux/grux.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(int argc, char** argv) {
  char path[4096], err[256];
  grux_model* m;
  grux_stream* s;
  float in[3] = {0.5f, -1.0f, 0.25f}, out[3], first[3];
  int t;
  if (argc != 2) {
    fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
    return 2;
  }
  snprintf(path, sizeof path, "%s/capi/model_residual.safetensors", argv[1]);

  CHECK(strlen(grux_version()) >= 5);
  m = grux_model_load(path, "rnn.", "fc.", GRUX_RESIDUAL, err, sizeof err);
  if (!m) {
    fprintf(stderr, "grux_model_load: %s\n", err);
    return 1;
  }
  CHECK(grux_model_input_size(m) == 3);
  CHECK(grux_model_output_size(m) == 3);

  s = grux_stream_create(m, 1, 1, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return 1;
  grux_model_free(m); /* a stream does not need its model */
  for (t = 0; t < 100; ++t) {
    CHECK(grux_stream_process(s, in, out, 1) == GRUX_OK);
    if (t == 0) memcpy(first, out, sizeof out);
  }
  CHECK(isfinite(out[0]) && isfinite(out[1]) && isfinite(out[2]));
  grux_stream_reset(s);
  CHECK(grux_stream_process(s, in, out, 1) == GRUX_OK);
  CHECK(memcmp(out, first, sizeof out) == 0); /* reset: back to the first step's output */

  CHECK(grux_stream_process(s, NULL, out, 1) == GRUX_EINVAL);
  CHECK(strstr(grux_stream_error(s), "in is NULL") != NULL);
  CHECK(grux_stream_process(s, in, out, -5) == GRUX_EINVAL);
  CHECK(strstr(grux_stream_error(s), "frames is -5") != NULL);
  CHECK(grux_stream_process(NULL, in, out, 1) == GRUX_EINVAL);
  grux_stream_free(s);

  CHECK(grux_model_load("/nonexistent/model.safetensors", NULL, NULL, 0, err, sizeof err) == NULL);
  CHECK(strstr(err, "/nonexistent/model.safetensors") != NULL);
  CHECK(grux_stream_create(NULL, 1, 1, err, sizeof err) == NULL);
  CHECK(strstr(err, "model is NULL") != NULL);
  CHECK(grux_model_load_file("/nonexistent/model.nam", 0, err, sizeof err) == NULL);
  CHECK(strstr(err, "/nonexistent/model.nam") != NULL);
  CHECK(grux_model_sample_rate(NULL) == -1);
  grux_model_free(NULL);
  grux_stream_free(NULL);

  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("C API from C99: ok\n");
  return failures ? 1 : 0;
}
