// libFuzzer targets of the text grux parses from its users (GRUX_FUZZ_TEXT names which): a
// grux::Error is a refusal, fine if its message is one line of printable UTF-8; a crash, an
// uncaught exception, a sanitizer report, a hang or a huge allocation is a bug.
//   descriptor  problem descriptors (src/core/descriptor.h: every operator's parse() and the
//               sweeps read them) in the recurrent syntax l{L}d{D}t{T}n{N}i{I}h{H} and conv's
//               n{N}c{C}h{H}w{W}d{D}k{K}[x{K}]s{S}p{P}: what parses prints back to the same sizes,
//               each within its letter's digits.
//   rearrange   einops patterns (grux/rearrange.h) applied to a small tensor whose shape and
//               axis lengths the input's first bytes give: the result holds the same elements
//               (a permutation of them: the same sum and count).
//   profile     machine profiles (grux/cost_profile.h, the JSON grux calibrate writes and the cost
//               model reads): what parses writes back to JSON that parses to the same JSON, and its
//               rates at every thread count and buffer size are finite and not negative.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "core/descriptor.h"
#include "fuzz.h"
#include "grux/cost_profile.h"
#include "grux/error.h"
#include "grux/rearrange.h"

namespace grux::fuzz {

#if GRUX_FUZZ_TEXT_DESCRIPTOR
using grux::detail::Descriptor;
using grux::detail::DescriptorLetter;

void parse_both_ways(const std::string& text, std::initializer_list<DescriptorLetter> syntax) {
  Descriptor d;
  try {
    d = Descriptor::parse(text, syntax, "fuzz descriptor", "the fuzz syntax");
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  // Printed back letter by letter, the same sizes (an Error here escapes: a bug).
  std::string again;
  for (const DescriptorLetter& l : syntax) {
    if (!d.has(l.letter)) continue;
    const int64_t v = d.get(l.letter);
    if (v < 0 || std::to_string(v).size() > size_t(l.max_digits)) __builtin_trap();
    again += l.letter + std::to_string(v);
    if (l.pair && d.second(l.letter) != v) again += "x" + std::to_string(d.second(l.letter));
  }
  const Descriptor e = Descriptor::parse(again, syntax, "again", "the fuzz syntax");
  for (const DescriptorLetter& l : syntax)
    if (e.has(l.letter) != d.has(l.letter) || e.get(l.letter) != d.get(l.letter) ||
        e.second(l.letter) != d.second(l.letter))
      __builtin_trap();
}

void run(const std::string& text) {
  parse_both_ways(text, {{'l', true, false, 6}, {'d', true, false, 6}, {'t'}, {'n'}, {'i'}, {'h'}});
  parse_both_ways(
      text, {{'n'}, {'c'}, {'h'}, {'w'}, {'d'}, {'k', false, true}, {'s', true}, {'p', true}});
  (void)grux::detail::descriptor_tokens(text);
}
#elif GRUX_FUZZ_TEXT_REARRANGE
// Bytes 0-3: the tensor's rank (1-4) and its sizes (1-4 each); bytes 4-5: lengths for axes "h"
// and "w" (0: not given); the rest: the pattern.
void run(const std::string& bytes) {
  if (bytes.size() < 6) return;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const int64_t rank = 1 + byte(0) % 4;
  grux::Shape shape;
  for (int64_t k = 0; k < rank; ++k) shape.push_back(1 + byte(1 + k % 3) % 4);
  std::map<std::string, int64_t> lengths;
  if (byte(4) % 8) lengths["h"] = byte(4) % 8;
  if (byte(5) % 8) lengths["w"] = byte(5) % 8;
  grux::Tensor t = grux::Tensor::empty(shape, grux::DType::f64);
  for (int64_t k = 0; k < t.numel(); ++k) t.data<double>()[k] = double(k + 1);
  grux::Tensor r;
  try {
    r = grux::rearrange(t, bytes.substr(6), lengths);
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  if (r.numel() != t.numel()) __builtin_trap();
  const grux::Tensor c = r.contiguous();
  double sum = 0;
  for (int64_t k = 0; k < c.numel(); ++k) sum += c.data<double>()[k];
  if (sum != double(t.numel()) * double(t.numel() + 1) / 2) __builtin_trap();
}
#elif GRUX_FUZZ_TEXT_PROFILE
bool rate(double v) {
  return std::isfinite(v) && v >= 0;
}

void run(const std::string& text) {
  grux::MachineProfile p;
  try {
    p = grux::MachineProfile::from_json(text, "fuzz profile");
  } catch (const grux::Error& e) {
    check_message(e.what());
    return;
  }
  // Written back, it reads as the same profile (an Error here escapes: a bug).
  const std::string json = p.to_json();
  if (grux::MachineProfile::from_json(json, "again").to_json() != json) __builtin_trap();
  // The rates at any thread count: measured, interpolated between two entries or clamped.
  for (int threads : {1, 2, 3, 7, 64, 4096, 5000}) {
    const grux::ThreadProfile t = p.at(threads);
    for (double v : {t.sgemm_gflops, t.dgemm_gflops, t.bf16_gflops, t.int8_gflops, t.memcpy_gbps,
                     t.step_us, t.stream_step_us, t.gru_gemm_efficiency})
      if (!rate(v)) __builtin_trap();
    for (double bytes : {0.0, 1.0, 4096.0, 1e6, 1e9, 1e300})
      if (!rate(grux::read_bandwidth_at(t, bytes)) ||
          !rate(grux::bandwidth_at(t.stream_gbps, bytes)))
        __builtin_trap();
  }
}
#else
#error "GRUX_FUZZ_TEXT_* names the parser"
#endif

}  // namespace grux::fuzz
