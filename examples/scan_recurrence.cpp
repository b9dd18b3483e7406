// A non-diagonal linear recurrence x_t = W_t x_{t-1} + b_t computed three ways with the scan
// API: the affine scan, the seed's augmented-matrix products through a callable scan, and a
// plain loop; prints the largest difference and exits non-zero if they disagree.
#include <cmath>
#include <cstdio>
#include <random>

#include "grux/scan.h"
#include "grux/tensor_ops.h"

int main() {
  using grux::Tensor;
  const int64_t T = 1000, d = 8;
  std::mt19937_64 rng(0);
  std::normal_distribution<double> nd(0.0, 1.0 / std::sqrt(double(d)));
  Tensor W = Tensor::empty({T, d, d}, grux::DType::f64),
         b = Tensor::empty({T, d}, grux::DType::f64);
  Tensor x0 = Tensor::empty({d}, grux::DType::f64);
  for (int64_t i = 0; i < W.numel(); ++i) W.data<double>()[i] = nd(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<double>()[i] = nd(rng);
  for (int64_t i = 0; i < d; ++i) x0.data<double>()[i] = nd(rng);

  // 1. The affine scan: maps composed as (A2 A1, A2 b1 + b2).
  const Tensor x = grux::affine_scan(W, b, /*dim=*/0, x0);

  // 2. The seed's formulation: row vector [x; 1]^T times cumulative products of
  //    [[W^T, 0], [b^T, 1]], with any-op prefix scan (a callable calling matmul).
  Tensor M = Tensor::zeros({T, d + 1, d + 1}, grux::DType::f64);
  M.slice(1, 0, d).slice(2, 0, d).copy_from(W.transpose(1, 2));
  M.select(1, d).slice(1, 0, d).copy_from(b);
  M.select(1, d).select(1, d).fill(1.0);
  const Tensor cum =
      grux::prefix_scan(M, 0, [](const Tensor& l, const Tensor& r) { return grux::matmul(l, r); });
  Tensor row = Tensor::full({1, d + 1}, 1.0, grux::DType::f64);
  row.slice(1, 0, d).copy_from(x0.unsqueeze(0));
  const Tensor x_aug = grux::matmul(row, cum).squeeze(1).slice(1, 0, d);

  // 3. A plain loop.
  double worst = 0;
  std::vector<double> h(x0.data<double>(), x0.data<double>() + d), next(d);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      double s = b.item({t, i});
      for (int64_t j = 0; j < d; ++j) s += W.item({t, i, j}) * h[j];
      next[i] = s;
    }
    h = next;
    for (int64_t i = 0; i < d; ++i) {
      const double scale = 1 + std::abs(h[i]);
      worst = std::max(worst, std::abs(x.item({t, i}) - h[i]) / scale);
      worst = std::max(worst, std::abs(x_aug.item({t, i}) - h[i]) / scale);
    }
  }
  std::printf(
      "x_t = W_t x_{t-1} + b_t, T=%lld d=%lld: affine scan and augmented products vs a "
      "loop, max relative difference %.3g\n",
      static_cast<long long>(T), static_cast<long long>(d), worst);
  return worst < 1e-9 ? 0 : 1;
}
