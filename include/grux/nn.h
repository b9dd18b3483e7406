// Model building blocks besides the GRU: Linear, Embedding and softmax cross-entropy, each a
// forward / backward pair with PyTorch's shapes and numbers (nn.Linear, nn.Embedding, F.cross_entropy).
#pragma once

#include <cstdint>
#include <string>

#include "grux/export.h"
#include "grux/tensor.h"

namespace grux GRUX_API {

// Sizes: M rows (e.g. T*N tokens), I input features, O output features, V vocabulary, E width.

// nn.Linear: y = x W^T + b.
//   x (M, I), w (O, I), b (O) or undefined (no bias); one dtype (f32 or f64), contiguous or
//   not. Returns y (M, O), contiguous.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b);

struct LinearGrads {
  Tensor dx;  // (M, I); undefined when want_dx is false
  Tensor dw;  // (O, I)
  Tensor db;  // (O); undefined when there is no bias
};
// Gradients of linear_forward given dy = d(loss)/d(y) (M, O): dx = dy W, dw = dy^T x,
// db = column sums of dy. `bias` says whether linear_forward had a bias.
LinearGrads linear_backward(const Tensor& x, const Tensor& w, bool bias, const Tensor& dy,
                            bool want_dx = true);

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
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// d(loss)/d(table) (V, E) from dy (ids.shape + (E)): row ids[p] receives dy[p]; repeated ids
// add up, in increasing position order (deterministic). num_embeddings >= 1.
Tensor embedding_backward(const Tensor& ids, const Tensor& dy, int64_t num_embeddings);

// F.cross_entropy(logits, targets) with reduction 'mean': logits (M, V), targets (M,) i64 in
// [0, V). loss = mean over m of -log_softmax(logits[m])[targets[m]], computed stably (max
// subtracted, sums in double). With want_grad, dlogits = (softmax(logits) - onehot) / M,
// shape (M, V), the dtype of logits. M >= 1 and V >= 1; no ignore_index (a target of -100
// is out of range here, unlike PyTorch's default ignore_index).
struct CrossEntropy {
  double loss = 0;
  Tensor dlogits;
};
CrossEntropy cross_entropy(const Tensor& logits, const Tensor& targets, bool want_grad = true);

}  // namespace grux
