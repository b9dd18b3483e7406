// Model building blocks besides the GRU: Linear, Embedding and softmax cross-entropy, each a
// forward / backward pair with PyTorch's shapes and numbers (nn.Linear, nn.Embedding,
// F.cross_entropy).
#pragma once

#include <cstdint>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Sizes: M rows (e.g. T*N tokens), I input features, O output features, V vocabulary, E width.

// nn.Linear: output = input weight^T + bias.
//   input (M, I), weight (O, I), bias (O) or undefined (no bias); one dtype (f32 or f64),
//   contiguous or not. Returns output (M, O), contiguous.
Tensor linear_forward(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                      int threads = 0);

struct LinearGrads {
  Tensor dinput;   // (M, I); undefined when want_dinput is false
  Tensor dweight;  // (O, I)
  Tensor dbias;    // (O); undefined when there is no bias
};
// Gradients of linear_forward given doutput = d(loss)/d(output) (M, O): dinput = doutput
// weight, dweight = doutput^T input, dbias = column sums of doutput. `bias` says whether
// linear_forward had a bias.
LinearGrads linear_backward(const Tensor& input, const Tensor& weight, const Tensor& doutput,
                            bool bias, bool want_dinput = true, int threads = 0);

// One Linear problem: what the cost model and the CLI read. Descriptor string: b{B}i{I}o{O}
// (B rows, I input features, O output features), e.g. "b32i256o512"; all three required.
struct LinearProblem {
  int64_t B = 0, I = 0, O = 0;
  bool bias = true;
  DType dtype = DType::f32;

  // Throws grux::Error naming the descriptor and what was expected.
  static LinearProblem parse(const std::string& descriptor);
  std::string descriptor() const;
};

// nn.Embedding: rows of `table` (V, E) picked by `ids` (any shape, i64, each in [0, V)).
// Returns ids.shape + (E). An id out of range is an error naming the id and its position.
Tensor embedding_forward(const Tensor& ids, const Tensor& table, int threads = 0);
// d(loss)/d(table) (V, E) from doutput (ids.shape + (E)): row ids[p] receives doutput[p]; repeated
// ids add up, in increasing position order (deterministic). num_embeddings >= 1.
Tensor embedding_backward(const Tensor& ids, const Tensor& doutput, int64_t num_embeddings,
                          int threads = 0);

// F.cross_entropy(logits, targets) with reduction 'mean': logits (M, V), targets (M,) i64 in
// [0, V). loss = mean over m of -log_softmax(logits[m])[targets[m]], computed stably (max
// subtracted, sums in double). With want_grad, dlogits = (softmax(logits) - onehot) / M,
// shape (M, V), the dtype of logits. M >= 1 and V >= 1; no ignore_index (a target of -100
// is out of range here, unlike PyTorch's default ignore_index).
struct CrossEntropy {
  double loss = 0;
  Tensor dlogits;
};
CrossEntropy cross_entropy(const Tensor& logits, const Tensor& targets, bool want_grad = true,
                           int threads = 0);

}  // namespace GRUX_API
