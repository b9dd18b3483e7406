// Soak runs through the C API: a stream of a stable model fed a long signal in blocks of random
// sizes gives, bit for bit, what the same frames give in one call; resident memory stays flat
// while it runs, and no output is NaN or infinite. Scaled for the test command (2 x 10^6 frames
// of one sequence, 2 x 10^5 of a batch of 8); GRUX_SOAK_FRAMES=N sets the one sequence's frames
// (the batch runs N / 10) for the full run by hand (docs/testing.md: 10^8 and 10^7).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "grux/grux.h"

namespace grux::test_soak {
namespace {

// Resident memory now, in KiB (0 where /proc/self/statm is not there).
int64_t resident_kib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return int64_t(resident) * 4;
}

int64_t soak_frames() {
  const char* s = std::getenv("GRUX_SOAK_FRAMES");
  return s && *s ? std::atoll(s) : 2000000;
}

struct Soaked {
  int64_t frames = 0, calls = 0, grown_kib = 0, mismatches = 0, not_finite = 0;
};

// Runs `frames` frames of noise through two streams of `batch` sequences of the model: one in
// blocks of 1..max_block frames (chunks of the signal generated as it goes, so that the one-call
// stream's whole input and output are the only large buffers), the other in one call.
Soaked soak(grux_model* m, int64_t batch, int64_t frames, int64_t max_block, uint64_t seed) {
  char err[256];
  const int64_t I = grux_model_input_size(m), O = grux_model_output_size(m);
  grux_stream* whole = grux_stream_create(m, batch, 0, err, sizeof err);
  grux_stream* blocks = grux_stream_create(m, batch, 0, err, sizeof err);
  EXPECT_NE(whole, nullptr) << err;
  EXPECT_NE(blocks, nullptr) << err;
  Soaked r;
  if (!whole || !blocks) return r;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> noise(-1.f, 1.f);
  std::vector<float> x(size_t(frames * batch * I)), y(size_t(frames * batch * O));
  for (float& v : x) v = noise(rng);
  EXPECT_EQ(grux_stream_process(whole, x.data(), y.data(), frames), GRUX_OK);
  std::uniform_int_distribution<int64_t> size(1, max_block);
  std::vector<float> out(size_t(max_block * batch * O));
  int64_t start_kib = 0;
  for (int64_t t = 0; t < frames;) {
    const int64_t n = std::min(size(rng), frames - t);
    EXPECT_EQ(grux_stream_process(blocks, x.data() + t * batch * I, out.data(), n), GRUX_OK);
    const float* want = y.data() + t * batch * O;
    for (int64_t k = 0; k < n * batch * O; ++k) {
      r.mismatches += std::memcmp(&out[size_t(k)], &want[k], sizeof(float)) != 0;
      r.not_finite += !std::isfinite(out[size_t(k)]);
    }
    t += n;
    ++r.calls;
    // Resident memory from the first tenth on (what the streams and buffers touch first is in
    // by then), to the end.
    if (start_kib == 0 && t >= frames / 10) start_kib = resident_kib();
  }
  r.frames = frames;
  r.grown_kib = resident_kib() - start_kib;
  grux_stream_free(whole);
  grux_stream_free(blocks);
  return r;
}

// Real-time models of the sizes people run (the GRU of RTNeural's example, NAM's LSTM with its
// stored state): one sequence, then a batch of 8.
TEST(Soak, RandomBlocksEqualOneCallAndMemoryStaysFlat) {
  const int64_t frames = soak_frames();
  for (const char* file : {"rtneural_gru.json", "nam_core_lstm.nam"}) {
    SCOPED_TRACE(file);
    char err[256];
    grux_model* m = grux_model_load_file((std::string(GRUX_MODELS_DIR) + "/files/" + file).c_str(),
                                         0, err, sizeof err);
    ASSERT_NE(m, nullptr) << err;
    for (const auto& [batch, n] : {std::pair<int64_t, int64_t>{1, frames}, {8, frames / 10}}) {
      const Soaked r = soak(m, batch, n, 700, uint64_t(batch) * 7 + 1);
      std::printf(
          "soak %s batch %lld: %lld frames in %lld calls, %lld mismatches, %lld not "
          "finite, resident memory %+lld KiB\n",
          file, (long long)batch, (long long)r.frames, (long long)r.calls, (long long)r.mismatches,
          (long long)r.not_finite, (long long)r.grown_kib);
      EXPECT_EQ(r.mismatches, 0) << "batch " << batch;
      EXPECT_EQ(r.not_finite, 0) << "batch " << batch;
      // Flat: nothing the run allocates stays (the buffers were touched in the first tenth).
      EXPECT_LE(r.grown_kib, 1024) << "batch " << batch;
    }
    grux_model_free(m);
  }
}

}  // namespace
}  // namespace grux::test_soak
