// A minimal "plugin": a GRU model behind three C entry points, built as a shared object that
// links the static libgrux (examples/plugin/CMakeLists.txt). A host dlopens it (host.c).
#include "grux/grux.h"

#define PLUGIN_API extern "C" __attribute__((visibility("default")))

struct Plugin {
  grux_model* model = nullptr;
  grux_stream* stream = nullptr;
};

// Loads the model (an nn.GRU state_dict, no prefix, no head); NULL on error, message in err.
PLUGIN_API Plugin* plugin_create(const char* model_path, char* err, size_t err_len) {
  grux_model* m = grux_model_load(model_path, nullptr, nullptr, 0, err, err_len);
  if (!m) return nullptr;
  grux_stream* s = grux_stream_create(m, 1, 1, err, err_len);
  grux_model_free(m);  // the stream keeps what it needs
  if (!s) return nullptr;
  return new Plugin{nullptr, s};
}

// One block of `frames` frames: in (frames x input size), out (frames x output size).
PLUGIN_API int plugin_process(Plugin* p, const float* in, float* out, long frames) {
  return grux_stream_process(p->stream, in, out, frames);
}

PLUGIN_API void plugin_destroy(Plugin* p) {
  if (!p) return;
  grux_stream_free(p->stream);
  delete p;
}
