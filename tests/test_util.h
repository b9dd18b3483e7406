// Shared test helpers: tolerance comparison that prints case, tensor, index and both values,
// golden-file loading, seeded random tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "grux/io.h"
#include "grux/tensor.h"

namespace grux::test {

// Tolerances of the engine issue: f32 1e-5 absolute + 1e-4 relative; f64 1e-10.
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

inline Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937_64& rng,
                            double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  Tensor t = Tensor::empty(shape, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(rng);
  return t.to(dtype);
}

// A temporary directory removed at scope exit.
struct TempDir {
  std::string path;
  TempDir();
  ~TempDir();
};

}  // namespace grux::test
