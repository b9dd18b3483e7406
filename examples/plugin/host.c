/* A plugin host that knows nothing of grux: dlopens a plugin (gru_plugin.so), runs one second
 * of a 16-channel signal at 48 kHz through it in blocks of 64 frames, and prints the result.
 * Usage: plugin_host PLUGIN.so MODEL.safetensors */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

typedef void* (*create_fn)(const char*, char*, size_t);
typedef int (*process_fn)(void*, const float*, float*, long);
typedef void (*destroy_fn)(void*);

#define I 16
#define H 64
#define BLOCK 64

int main(int argc, char** argv) {
  static float in[BLOCK * I], out[BLOCK * H];
  char err[256];
  void *lib, *plugin;
  create_fn create;
  process_fn process;
  destroy_fn destroy;
  long b, t, i;
  double sum = 0;
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so MODEL.safetensors\n", argv[0]);
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "plugin_host: %s\n", dlerror());
    return 1;
  }
  create = (create_fn)dlsym(lib, "plugin_create");
  process = (process_fn)dlsym(lib, "plugin_process");
  destroy = (destroy_fn)dlsym(lib, "plugin_destroy");
  if (!create || !process || !destroy) {
    fprintf(stderr, "plugin_host: the plugin lacks an entry point\n");
    return 1;
  }
  plugin = create(argv[2], err, sizeof err);
  if (!plugin) {
    fprintf(stderr, "plugin_host: %s\n", err);
    return 1;
  }
  for (b = 0; b < 48000 / BLOCK; ++b) {
    for (t = 0; t < BLOCK; ++t)
      for (i = 0; i < I; ++i)
        in[t * I + i] = (float)sin(0.01 * (double)((b * BLOCK + t) * (i + 1)));
    if (process(plugin, in, out, BLOCK) != 0) {
      fprintf(stderr, "plugin_host: process failed\n");
      return 1;
    }
    for (t = 0; t < BLOCK * H; ++t) sum += out[t];
  }
  destroy(plugin);
  if (dlclose(lib) != 0) {
    fprintf(stderr, "plugin_host: dlclose: %s\n", dlerror());
    return 1;
  }
  printf("plugin_host: 48000 frames through the plugin, output sum %.4f\n", sum);
  return isfinite(sum) ? 0 : 1;
}
