// Example: a two-layer minGRU (Feng et al. 2024) over a batch of variable-length sequences,
// forward then backward. Public API only.
#include <grux/mingru.h>

#include <cstdio>

int main() {
  grux::MinGruConfig config;
  config.input_size = 8;
  config.hidden_size = 16;
  config.num_layers = 2;
  config.log_space = true;  // h~ = g(v) > 0 and the scan runs on log h
  grux::MinGru mingru(config, grux::DType::f32, /*seed=*/42);  // or MinGru::from_state_dict

  const int64_t T = 20, N = 3;
  grux::Tensor x = grux::Tensor::empty({T, N, config.input_size}, grux::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 7) * 0.1f - 0.3f;
  grux::Tensor lengths = grux::Tensor::from_vector<int64_t>({N}, {20, 5, 12});

  grux::MinGruTape tape;
  grux::MinGruOutput y = mingru.forward_train(x, /*h0=*/{}, lengths, tape);
  grux::MinGruGrads g = mingru.backward(tape, /*doutput=*/y.output, /*dh_n=*/{});
  std::printf("output (%ld, %ld, %ld), h_n (%ld, %ld, %ld), %zu weight gradients\n",
              y.output.size(0), y.output.size(1), y.output.size(2), y.h_n.size(0), y.h_n.size(1),
              y.h_n.size(2), g.state_dict(config).size());
  // Outputs past a sequence's length are zero, and so is the input gradient there.
  return y.output.item({T - 1, 1, 0}) == 0.0 && g.dinput.item({T - 1, 1, 0}) == 0.0 ? 0 : 1;
}
