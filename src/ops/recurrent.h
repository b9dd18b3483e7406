// Code the recurrent stack drivers (gru.cpp, lstm.cpp, mingru.cpp, stream.cpp) share, so that
// they check and shape their arguments the same way and give the same messages: weight
// checks, the caller's input as a time-major problem, the upstream gradients of backward,
// the caller's output layout, state-dict key reading, and dtype dispatch.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "grux/precision.h"
#include "grux/tensor.h"

namespace grux::ops {

// One weight tensor of a recurrent stack: defined, `shape`, `dtype`, on the CPU. `op` ("gru",
// "mingru") and `key` (its state-dict key) name it in the message.
void check_weight(const char* op, const std::string& key, const Tensor& t, const Shape& shape,
                  DType dtype);
// The dtype of a stack's weights, from its first weight (`key`): f32 or f64, else an error.
// An undefined first weight gives f32 (check_weight reports it as missing).
DType weights_dtype(const char* op, const std::string& key, const Tensor& first);
// Kernels take raw row-major pointers: a non-contiguous weight is replaced by a contiguous
// copy (same values), so no layout a caller gives is misread.
void make_contiguous(Tensor& t);

// Throws grux::Error "<who>: precision <p> takes an f32 <model>; this one is <dtype>" unless a
// model (a "GRU", an "LSTM") of `dtype` can run in precision p (src/ops/precision.cpp).
void check_precision(const char* who, DType dtype, Precision p, const char* model = "GRU");

// What the drivers' input checks need to know of the stack.
struct SeqSpec {
  const char* op;       // "gru", "mingru": the messages' prefix
  int64_t input_size;   // I
  int64_t hidden_size;  // H
  int64_t state_rows;   // rows of h0 / h_n: L * D (GRU), L (minGRU)
  bool batch_first;
  DType dtype;  // the weights'
};

// The caller's input, h0 and lengths as time-major views, checked.
struct SeqInput {
  Tensor x;                  // (T, N, I)
  Tensor h0;                 // (state_rows, N, H) or undefined
  std::vector<int64_t> len;  // (N) when lengths were given, else empty
  bool unbatched = false;
};
// input (T, N, I), (N, T, I) with batch_first or (T, I) unbatched, same dtype as the weights,
// on the CPU; h0 (state_rows, N, H) or (state_rows, H) unbatched, or undefined; lengths (N,)
// i64 in [1, T] (batched input only), or undefined. Errors name the argument and what was
// expected.
SeqInput normalize_input(const SeqSpec& s, const Tensor& input, const Tensor& h0,
                         const Tensor& lengths);

// Restores the caller's layout of a time-major (T, N, C) result: batch_first or unbatched.
Tensor to_caller_layout(const Tensor& t, bool batch_first, bool unbatched);

// The upstream gradients of backward, checked against what forward_train returned and made
// time-major: doutput (T, N, out_width) in the caller's layout, dh_n shaped `h_n_shape`.
// Either may be undefined, not both.
struct SeqUpstream {
  Tensor doutput;  // (T, N, out_width) or undefined
  Tensor dh_n;     // (state_rows, N, H) or undefined
};
SeqUpstream normalize_upstream(const SeqSpec& s, int64_t T, int64_t N, bool unbatched,
                               int64_t out_width, const Shape& h_n_shape, const Tensor& doutput,
                               const Tensor& dh_n);

// What a stack's state-dict keys say of it (nn.GRU's or nn.LSTM's): layers, directions and
// bias from the keys, the sizes from weight_ih_l0 (gates * hidden_size, input_size). `op`
// ("gru", "lstm") and `module` ("nn.GRU") name it in the messages; weight_hr keys (an LSTM's
// projection) are accepted only `with_hr`. Errors: a key of another module, a layer index of
// more than 6 digits, a missing or misshapen weight_ih_l0.
struct StackKeys {
  int64_t layers = 0, hidden = 0, input = 0;
  bool reverse = false, bias = false;
};
StackKeys read_stack_keys(const char* op, const char* module,
                          const std::map<std::string, Tensor>& state, int64_t gates, bool with_hr);

// Reads a stack's weights out of a state dict: get() returns a key's tensor (an error names
// a missing key) and remembers it; check_no_other() rejects keys that were not read.
class StateDictReader {
 public:
  StateDictReader(const char* op, const std::map<std::string, Tensor>& state)
      : op_(op), state_(state) {}
  const Tensor& get(const std::string& key);
  // `what`: the stack as the message names it, e.g. "a 2-layer GRU without bias".
  void check_no_other(const std::string& what) const;

 private:
  const char* op_;
  const std::map<std::string, Tensor>& state_;
  std::set<std::string> read_;
};

// The sizes of a recurrent problem's descriptor l{L}d{D}t{T}n{N}i{I}h{H} (l and d optional,
// default 1), as GruProblem and MinGruProblem parse it. Errors start with `kind` (e.g.
// "problem descriptor") and the text: malformed (naming `form`, the expected form), a size
// below 1, or D above `max_directions` (`directions_note` says what is expected).
struct SeqDescriptor {
  int64_t L = 1, D = 1, T = 0, N = 0, I = 0, H = 0;
};
SeqDescriptor parse_seq_descriptor(const std::string& text, const char* kind, const char* form,
                                   int64_t max_directions, const char* directions_note);

// Calls f(float{}) or f(double{}) for the weights' dtype (f32 or f64).
template <typename F>
decltype(auto) dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::f32) return f(float{});
  return f(double{});
}

}  // namespace grux::ops
