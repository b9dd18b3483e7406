// minGRU (Feng et al. 2024, "Were RNNs All We Needed?"): a GRU whose gates read only the
// input, so the recurrence is linear in h and runs in parallel over time as a scan.
//
// Sizes: T time steps, N batch, I input size, H hidden size, L layers.
// Layer k (input width in_k = I for k = 0, H above) has weight (2H, in_k) and bias (2H);
// rows [0, H) give the gate pre-activation k_z, rows [H, 2H) the candidate's v:
//   z_t  = sigmoid(k_z),  k_z = W_z x_t + b_z
//   h~_t = v = W_h x_t + b_h                      (linear variant)
//   h~_t = g(v),  g(v) = v + 0.5 (v >= 0), sigmoid(v) (v < 0)   (log-space variant: h~ > 0,
//          so h_t > 0 and the scan runs on log h, where long products of 1 - z cannot
//          underflow)
//   h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t
// Initial state: linear h_{-1} = h0 (zeros if not given); log-space h_{-1} = g(h0) (g(0) =
// 0.5 if not given), so h0 is a raw value like a pre-activation in both variants.
// Layer k+1's input is layer k's output. With lengths, sequence n runs for t < lengths[n]
// only, like PyTorch's packed GRU: outputs are 0 beyond, h_n is the state after the last
// valid step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grux/export.h"
#include "grux/sequence.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

struct MinGruConfig {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  bool log_space = false;

  // Input width of layer `layer`: I for layer 0, H above it.
  int64_t layer_input_size(int64_t layer) const;
  // Throws grux::Error if a size is < 1.
  void validate() const;
};

// One minGRU problem, what the operator, `grux bench mingru`, the cost model and the CLI read:
// the operator's options (MinGruConfig) and the data's shape (SequenceShape: T, N, dtype,
// lengths). A MinGruProblem is a MinGruConfig: pass it to MinGru's constructor as it is.
// Descriptor string: l{L}t{T}n{N}i{I}h{H}, e.g. "l2t4096n8i256h256"; l may be omitted
// (default 1). The GRU's "d1" after l is accepted (minGRU is unidirectional: d2 is an error).
struct MinGruProblem : MinGruConfig, SequenceShape {
  // Throws grux::Error naming the descriptor and what was expected.
  static MinGruProblem parse(const std::string& descriptor);
  std::string descriptor() const;  // always with l: "l1t4096n8i256h256"
  const MinGruConfig& config() const { return *this; }
};

// Weights of one layer: weight (2H, in), bias (2H) or undefined when bias is false.
struct MinGruLayerWeights {
  Tensor weight, bias;
};

// State-dict key: "weight_l0", "bias_l2". `what` is "weight" or "bias".
std::string mingru_key(const char* what, int64_t layer);

// Activations saved by MinGru::forward_train for MinGru::backward. Opaque: only MinGru reads
// it.
struct MinGruTapeData;
class MinGruTape {
 public:
  MinGruTape();
  ~MinGruTape();
  MinGruTape(MinGruTape&&) noexcept;
  MinGruTape& operator=(MinGruTape&&) noexcept;
  bool empty() const;

 private:
  friend class MinGru;
  std::unique_ptr<MinGruTapeData> data_;
};

struct MinGruOutput {
  Tensor output;  // (T, N, H), (N, T, H) with batch_first, or (T, H) unbatched
  Tensor h_n;     // (L, N, H), or (L, H) unbatched
};

struct MinGruGrads {
  Tensor dinput;                             // same shape as input
  Tensor dh0;                                // same shape as h0 (h_n's if h0 was not given)
  std::vector<MinGruLayerWeights> dweights;  // per layer
  // Gradients keyed like the weights' state_dict.
  std::map<std::string, Tensor> state_dict(const MinGruConfig& config) const;
};

class MinGru {
 public:
  // Weights uniform(-1/sqrt(in_k), 1/sqrt(in_k)) (nn.Linear's bound) from a seeded generator.
  MinGru(const MinGruConfig& config, DType dtype = DType::f32, uint64_t seed = 0);
  // Uses the given weights (one per layer), checked as set_weights does; shares their storage
  // with the caller (as Gru's constructor does).
  MinGru(const MinGruConfig& config, std::vector<MinGruLayerWeights> weights);
  // Copies deep-copy the weights; moves keep them.
  MinGru(const MinGru& other);
  MinGru& operator=(const MinGru& other);
  MinGru(MinGru&&) noexcept = default;
  MinGru& operator=(MinGru&&) noexcept = default;

  // From keys weight_l{k} (2H, in_k) and bias_l{k} (2H). input_size, hidden_size,
  // num_layers and bias are inferred; batch_first and log_space come from `options`. A
  // missing, extra or misshapen key, or mixed dtypes, is an error naming the key.
  static MinGru from_state_dict(const std::map<std::string, Tensor>& state,
                                const MinGruConfig& options = {});
  std::map<std::string, Tensor> state_dict() const;

  const MinGruConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const std::vector<MinGruLayerWeights>& weights() const { return weights_; }
  // Replaces every weight (one per layer): checked like the constructor's, strided layouts
  // copied into the row-major one the kernels read. The dtype becomes the weights'.
  void set_weights(std::vector<MinGruLayerWeights> weights);

  // Forward over the whole stack: one GEMM per layer for all T*N rows, a fused pointwise
  // pass, and a scan over time (parallel over time and channels).
  //   input: (T, N, I); (N, T, I) with batch_first; (T, I) unbatched. f32 or f64.
  //   h0: (L, N, H), or (L, H) unbatched; undefined means the default (see the top).
  //   lengths: (N,) i64 with 1 <= lengths[n] <= T, any order; undefined means all T.
  //   threads: 0 lets grux choose (OpenMP's setting), k >= 1 uses at most k (docs/api.md).
  MinGruOutput forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& lengths = {},
                       int threads = 0) const;

  // As forward(), and saves into `tape` what backward needs (the layer inputs and outputs,
  // shared with the caller's tensors: they must not be modified in place before backward).
  MinGruOutput forward_train(const Tensor& input, const Tensor& h0, const Tensor& lengths,
                             MinGruTape& tape, int threads = 0) const;

  // Gradients given d(loss)/d(output) and/or d(loss)/d(h_n) (either may be undefined, not
  // both), shaped as forward_train returned them, by a reverse scan per layer. The weights
  // must not have changed since forward_train.
  MinGruGrads backward(const MinGruTape& tape, const Tensor& doutput, const Tensor& dh_n,
                       int threads = 0) const;

 private:
  MinGruConfig config_;
  DType dtype_ = DType::f32;
  std::vector<MinGruLayerWeights> weights_;
};

}  // namespace GRUX_API
