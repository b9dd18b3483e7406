// Runs the example model (data/example: an nn.GRU(16, 64, num_layers=2) and PyTorch's output
// for one input) through an installed grux, as a downstream project would.
// Usage: consumer DATA_DIR   (exits 1 when the output differs from PyTorch's)
#include <cmath>
#include <cstdio>
#include <string>

#include "grux/gru.h"
#include "grux/io.h"
#include "grux/version.h"

#ifdef _OPENMP
#error "grux leaked OpenMP into its consumer's compile flags"
#endif

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR (the folder holding gru.safetensors)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    const grux::Gru gru =
        grux::Gru::from_state_dict(grux::read_safetensors(dir + "/gru.safetensors").tensors);
    const grux::Tensor x = grux::read_npy(dir + "/input.npy");
    const grux::Tensor expected = grux::read_npy(dir + "/expected_output.npy");
    const grux::Tensor y = gru.forward(x).output;
    const double diff = grux::max_abs_diff(y, expected);
    std::printf("grux %s: output %s, max |difference| from PyTorch %.3g\n", GRUX_VERSION_STRING,
                grux::shape_str(y.shape()).c_str(), diff);
    return diff <= 1e-5 ? 0 : 1;
  } catch (const grux::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
