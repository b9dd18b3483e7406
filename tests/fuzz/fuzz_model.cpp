// libFuzzer targets of the model-file readers (one per reader: GRUX_FUZZ_READER names it): the
// bytes are handed to the reader as a file's content; a grux::Error is a refused file, which is
// fine; anything else (a crash, an uncaught exception, a sanitizer report, a hang, a huge
// allocation) is a bug. A file that reads is also validated and its description written back
// and read again (the safetensors round trip); a refusal's message must be one line of
// printable UTF-8. Built by tests/fuzz/CMakeLists.txt with clang,
// run for a bounded time by scripts/test.sh on the seed corpora of tests/fuzz/corpus.
#include <cstdint>
#include <string>

#include "formats/readers.h"
#include "fuzz.h"
#include "grux/error.h"
#include "grux/io.h"
#include "grux/model.h"

namespace grux::fuzz {

grux::ModelSpec read(const std::string& bytes) {
  using grux::formats::Json;
#if GRUX_FUZZ_READER_SAFETENSORS
  return grux::formats::read_safetensors_model(grux::parse_safetensors(bytes, "fuzz"), "fuzz");
#elif GRUX_FUZZ_READER_ONNX
  return grux::formats::read_onnx(bytes, "fuzz", {});
#else
  const Json j = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw grux::Error("not JSON");
#if GRUX_FUZZ_READER_RTNEURAL_JSON
  return grux::formats::read_rtneural_json(j, "fuzz");
#elif GRUX_FUZZ_READER_GUITARML_JSON
  return j.contains("model_data") ? grux::formats::read_guitarml_json(j, "fuzz")
                                  : grux::formats::read_state_dict_json(j, "fuzz");
#elif GRUX_FUZZ_READER_NAM
  return grux::formats::read_nam(j, "fuzz");
#else
#error "GRUX_FUZZ_READER_* names the reader"
#endif
#endif
}

void run(const std::string& bytes) {
  try {
    const grux::ModelSpec spec = read(bytes);
    spec.validate();
    const grux::ModelSpec back = grux::parse_model(grux::serialize_model(spec), "fuzz");
    if (back.layers.size() != spec.layers.size() || back.parameters() != spec.parameters())
      __builtin_trap();  // the round trip lost something
  } catch (const grux::Error& e) {
    check_message(e.what());
  }
}

}  // namespace grux::fuzz
