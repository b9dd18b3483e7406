// Shared test helpers: tolerance comparison that prints case, tensor, index and both values,
// golden-file loading, seeded random tensors.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "grux/io.h"
#include "grux/precision.h"
#include "grux/runtime.h"
#include "grux/tensor.h"

namespace grux::test {

// The best SIMD target of this build below AVX-512 (where the low-precision products run
// grux's portable kernels), or "" where there is none: the sanitized build compiles only this
// CPU's best target.
inline std::string target_below_avx512() {
  for (const std::string& t : simd_targets())
    if (t.rfind("AVX3", 0) != 0) return t;
  return "";
}
#define GRUX_SKIP_WITHOUT_TARGET_BELOW_AVX512(below)                                          \
  if ((below).empty())                                                                        \
  GTEST_SKIP() << "no SIMD target below AVX-512 in this build (the sanitized build compiles " \
                  "only this CPU's best target; the Release build runs this test)"

// The engine's tolerances: f32 1e-5 absolute + 1e-4 relative; f64 1e-10.
struct Tol {
  double atol, rtol;
};
inline Tol tol_for(DType t) {
  return t == DType::f32 ? Tol{1e-5, 1e-4} : Tol{1e-10, 1e-10};
}

// Checks |a - e| <= atol + rtol * |e| elementwise. On failure reports the case, the tensor,
// the first failing index, both values and the max difference.
inline ::testing::AssertionResult all_close(const std::string& where, const std::string& name,
                                            const Tensor& actual, const Tensor& expected, Tol tol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << where << ": " << name << " is undefined";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure()
           << where << ": " << name << " has shape " << shape_str(actual.shape()) << ", expected "
           << shape_str(expected.shape());
  double max_diff = 0;
  int64_t first_bad = -1, bad = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = actual.at_flat(i), e = expected.at_flat(i);
    // Equal infinities and NaN against NaN match; anything else against NaN does not.
    if (a == e || (std::isnan(a) && std::isnan(e))) continue;
    const double d = std::abs(a - e);
    if (!(d <= tol.atol + tol.rtol * std::abs(e))) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
    if (!(d <= max_diff)) max_diff = d;  // NaN-propagating
  }
  if (first_bad < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << where << ": tensor " << name << " " << shape_str(actual.shape()) << ": " << bad
         << " elements out of tolerance (atol " << tol.atol << ", rtol " << tol.rtol
         << "); first at flat index " << first_bad << ": got " << actual.at_flat(first_bad)
         << ", expected " << expected.at_flat(first_bad) << "; max |difference| " << max_diff;
}

// The named results of one training run: outputs, then gradients by key.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// bf16 training's checks, the GRU's and the LSTM's: train(precision, threads) runs
// forward_train and backward. Every result against the reference twins (the same bf16
// roundings, sums in double) within 1e-2 and against f32 training within 3e-2, relative to
// the twin's largest value, some of them different from f32; the same bits on 1 and 2
// threads.
inline void expect_bf16_training_near_f32(
    const std::string& what, const std::function<NamedTensors(Precision, int)>& train) {
  const NamedTensors got = train(Precision::bf16, 0);
  set_reference_kernels(true);
  const NamedTensors twin = train(Precision::bf16, 0);
  set_reference_kernels(false);
  const NamedTensors f32 = train(Precision::f32, 0);
  double most_vs_f32 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double scale = 1e-30;
    const Tensor& r = twin[i].second;
    for (int64_t j = 0; j < r.numel(); ++j) scale = std::max(scale, std::abs(r.at_flat(j)));
    const std::string of = what + " " + got[i].first;
    EXPECT_LE(max_abs_diff(got[i].second, r) / scale, 1e-2) << of;
    const double vs_f32 = max_abs_diff(got[i].second, f32[i].second) / scale;
    EXPECT_LE(vs_f32, 3e-2) << of;
    most_vs_f32 = std::max(most_vs_f32, vs_f32);
  }
  EXPECT_GT(most_vs_f32, 1e-6) << what << ": no different from f32 training";
  const NamedTensors two = train(Precision::bf16, 2), one = train(Precision::bf16, 1);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(max_abs_diff(one[i].second, two[i].second), 0.0)
        << what << " " << got[i].first << ": 1 vs 2 threads";
}

inline Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937_64& rng,
                            double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(rng);
  return t.to(dtype);
}

// max |t| over all elements (0 for an empty tensor).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(t.at_flat(i)));
  return m;
}

// The whole content of a file ("" if it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One run of the grux CLI (GRUX_CLI): exit code (or 128 + signal), stdout and stderr. The
// output goes through files in `dir`.
struct CliRun {
  int code;
  std::string out, err;
};
inline CliRun grux_cli(const std::string& dir, const std::string& args) {
  const std::string o = dir + "/stdout.txt", e = dir + "/stderr.txt";
  const int st = std::system(
      (std::string(GRUX_CLI) + " " + args + " >" + o + " 2>" + e + " </dev/null").c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), slurp(o), slurp(e)};
}

// Runs `body` in a forked child process that is killed after `timeout_s` seconds (a hang
// fails instead of blocking the test); returns the child's exit code: body's result, 125 if it
// threw, 128 + signal if it was killed, or -1 if fork failed.
int exit_code_in_child(const std::function<int()>& body, unsigned timeout_s = 20);

// Caps this process's address space (RLIMIT_AS) at what it maps now plus `headroom` bytes, so
// that a larger allocation or thread stack fails; for a child of exit_code_in_child. False if
// the size could not be read or the limit not set.
bool cap_address_space(size_t headroom);

// Expects exit code `code` and exactly one stderr line containing every piece.
inline void expect_user_error(const CliRun& r, std::initializer_list<const char*> pieces,
                              int code = 2) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* p : pieces) EXPECT_THAT(r.err, ::testing::HasSubstr(p));
}

// Golden files (*.safetensors) in `dir` whose names start with one of `prefixes`, sorted; and
// the test-case name of one (the file name without its extension).
std::vector<std::string> golden_files(const std::string& dir,
                                      const std::vector<std::string>& prefixes);
inline std::string golden_case_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param.substr(0, info.param.size() - std::string(".safetensors").size());
}

// A temporary directory removed at scope exit.
struct TempDir {
  std::string path;
  TempDir();
  ~TempDir();
};

}  // namespace grux::test
