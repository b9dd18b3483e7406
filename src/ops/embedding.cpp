// nn.Embedding driver: validates ids (i64, in range), the table and doutput at the API boundary,
// then calls the gather / scatter-add kernels (cpu/embedding.h) or their reference twins.
#include "cpu/embedding.h"

#include <fmt/format.h>

#include "cpu/ref/nn_ref.h"
#include "grux/nn.h"
#include "grux/runtime.h"
#include "ops/nn_util.h"
#include "ops/threads_option.h"

namespace grux {

namespace {

// ids: defined, i64, CPU; returned contiguous after checking every id is in [0, V).
Tensor checked_ids(const char* op, const Tensor& ids, int64_t V) {
  check_defined(op, "ids", ids);
  check_dtype(op, "ids", ids, DType::i64);
  if (ids.device() != Device::cpu())
    throw Error(fmt::format("{}: ids is on {}, expected cpu (the only device of this build)", op,
                            ids.device().str()));
  Tensor c = ids.contiguous();
  const int64_t* p = c.data<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (p[i] < 0 || p[i] >= V)
      throw Error(fmt::format("{}: ids{} = {} is out of range (expected 0 <= id < {})", op,
                              ops::index_str(c.shape(), i), p[i], V));
  return c;
}

template <typename T>
Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  const int64_t N = ids.numel(), E = table.size(1);
  const auto to = ops::row_major_operand<T>(table);
  Shape shape = ids.shape();
  shape.push_back(E);
  Tensor y = Tensor::empty(shape, dtype_of<T>());
  auto kernel = reference_kernels() ? &cpu::ref::embedding_forward<T> : &cpu::embedding_forward<T>;
  kernel(N, E, ids.data<int64_t>(), to.data, to.ld, y.data<T>());
  return y;
}

template <typename T>
Tensor embedding_backward(const Tensor& ids, const Tensor& dy, int64_t V) {
  const int64_t N = ids.numel(), E = dy.size(-1);
  const Tensor dyc = dy.contiguous();
  Tensor dtable = Tensor::empty({V, E}, dtype_of<T>());
  auto kernel =
      reference_kernels() ? &cpu::ref::embedding_backward<T> : &cpu::embedding_backward<T>;
  kernel(N, V, E, ids.data<int64_t>(), dyc.data<T>(), dtable.data<T>());
  return dtable;
}

}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& table, int threads) {
  const char* op = "embedding_forward";
  ops::ThreadsScope scope(op, threads);
  ops::check_float_cpu(op, "table", table);
  ops::check_dim(op, "table", table, 2, "(V, E)");
  if (ids.defined()) check_same_device(op, "table", table, "ids", ids);
  const Tensor c = checked_ids(op, ids, table.size(0));
  return table.dtype() == DType::f32 ? embedding_forward<float>(c, table)
                                     : embedding_forward<double>(c, table);
}

Tensor embedding_backward(const Tensor& ids, const Tensor& doutput, int64_t num_embeddings,
                          int threads) {
  const char* op = "embedding_backward";
  ops::ThreadsScope scope(op, threads);
  const Tensor& dy = doutput;
  if (num_embeddings < 1)
    throw Error(fmt::format("{}: num_embeddings is {}, expected >= 1", op, num_embeddings));
  ops::check_float_cpu(op, "doutput", dy);
  check_defined(op, "ids", ids);
  check_same_device(op, "doutput", dy, "ids", ids);
  // doutput must be ids.shape + (E).
  Shape prefix(dy.shape().begin(), dy.shape().end() - (dy.dim() > 0 ? 1 : 0));
  if (dy.dim() != ids.dim() + 1 || prefix != ids.shape()) {
    std::string s = "(";
    for (int64_t d : ids.shape()) s += std::to_string(d) + ", ";
    s += "E)";
    throw Error(fmt::format("{}: doutput has shape {}, expected ids.shape + (E) = {}", op,
                            shape_str(dy.shape()), s));
  }
  const Tensor c = checked_ids(op, ids, num_embeddings);
  return dy.dtype() == DType::f32 ? embedding_backward<float>(c, dy, num_embeddings)
                                  : embedding_backward<double>(c, dy, num_embeddings);
}

}  // namespace grux
