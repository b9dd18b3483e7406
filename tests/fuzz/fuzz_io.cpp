// libFuzzer targets of the array files (GRUX_FUZZ_IO names the format): the bytes are handed to
// the reader as a file's content. A grux::Error is a refused file, which is fine, if its
// message is one line of printable UTF-8; anything else (a crash, an uncaught exception, a
// sanitizer report, a hang, an allocation beyond the input's size) is a bug. What reads must
// round-trip: written again and read back, the same shapes, dtypes and bytes (an Error on the
// way back escapes, and libFuzzer reports it).
//   npy          parse_npy, and map_npy of the same bytes in a file: the same array or the
//                same refusal; the array's data is never larger than the file.
//   safetensors  parse_safetensors: every tensor within the file, the metadata kept.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "fuzz.h"
#include "grux/error.h"
#include "grux/io.h"

namespace grux::fuzz {

bool same(const grux::Tensor& a, const grux::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const grux::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * grux::dtype_size(x.dtype())) ==
         0;
}

#if GRUX_FUZZ_IO_NPY
// A file of the fuzzer's bytes for map_npy, one per process: in memory (/dev/shm) where there
// is one, as a file on disk costs a few milliseconds an input here.
struct Scratch {
  std::string path = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                     "/grux_fuzz_npy." + std::to_string(::getpid()) + ".npy";
  ~Scratch() { std::remove(path.c_str()); }
};
const std::string& scratch() {
  static const Scratch s;
  return s.path;
}

void run(const std::string& bytes) {
  grux::Tensor t;
  try {
    t = grux::parse_npy(bytes, "fuzz");
  } catch (const grux::Error& e) {
    check_message(e.what());
  }
  if (t.defined()) {
    if (size_t(t.numel()) * grux::dtype_size(t.dtype()) > bytes.size()) __builtin_trap();
    if (!same(grux::parse_npy(grux::serialize_npy(t), "again"), t)) __builtin_trap();
  }
  // The memory-mapped reader agrees with the one that copies.
  if (FILE* f = std::fopen(scratch().c_str(), "wb")) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  try {
    const grux::Tensor m = grux::map_npy(scratch());
    if (!t.defined() || !same(m, t)) __builtin_trap();
  } catch (const grux::Error& e) {
    check_message(e.what());
    if (t.defined()) __builtin_trap();
  }
}
#elif GRUX_FUZZ_IO_SAFETENSORS
void run(const std::string& bytes) {
  grux::SafeTensors s;
  try {
    s = grux::parse_safetensors(bytes, "fuzz");
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  // What reads writes and reads back (an Error here escapes: libFuzzer reports it).
  size_t total = 0;
  for (const auto& [key, t] : s.tensors) total += size_t(t.numel()) * grux::dtype_size(t.dtype());
  if (total > bytes.size()) __builtin_trap();
  const grux::SafeTensors back =
      grux::parse_safetensors(grux::serialize_safetensors(s.tensors, s.metadata), "again");
  if (back.tensors.size() != s.tensors.size() || back.metadata != s.metadata) __builtin_trap();
  for (const auto& [key, t] : s.tensors)
    if (!back.tensors.count(key) || !same(back.tensors.at(key), t)) __builtin_trap();
}
#else
#error "GRUX_FUZZ_IO_* names the format"
#endif

}  // namespace grux::fuzz
