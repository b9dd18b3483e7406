// Example: build a GRU, run a batch of variable-length sequences, then stream a batch frame
// by frame and check it matches the whole-sequence run. Public API only.
#include <grux/gru.h>

#include <cstdio>

int main() {
  grux::GruConfig config;
  config.input_size = 8;
  config.hidden_size = 16;
  config.num_layers = 2;
  grux::Gru gru(config, grux::DType::f32, /*seed=*/42);

  const int64_t T = 20, N = 3;
  grux::Tensor x = grux::Tensor::empty({T, N, config.input_size}, grux::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 7) * 0.1f - 0.3f;
  grux::Tensor lengths = grux::Tensor::from_vector<int64_t>({N}, {20, 5, 12});

  // Whole batch at once; rows past each sequence's length are zero.
  grux::GruOutput y = gru.forward(x, /*h0=*/{}, lengths);
  std::printf("output (%ld, %ld, %ld), h_n (%ld, %ld, %ld)\n", y.output.size(0), y.output.size(1),
              y.output.size(2), y.h_n.size(0), y.h_n.size(1), y.h_n.size(2));

  // Stream the batch one frame at a time (real-time use): the same bits as the
  // whole-sequence run.
  grux::GruOutput full = gru.forward(x);
  grux::GruStream stream(gru, N);
  grux::Tensor last;
  for (int64_t t = 0; t < T; ++t) last = stream.step(x.select(0, t));
  const double diff = grux::max_abs_diff(last, full.output.select(0, T - 1));
  std::printf("streamed vs whole sequence, last frame: max |difference| = %g\n", diff);
  return diff == 0.0 ? 0 : 1;
}
