// Scans of a sequence split along time across the ranks (grux/dist.h). Each rank reduces its
// chunk to one slice (its total), the ranks exchange the totals, and each scans its chunk with
// the combined totals of the chunks before it (after it, in reverse) placed in front (behind):
// scan([P, x_0, ..., x_{n-1}]) drops its first slice to give P . x_0 . ... . x_t, in the
// scan kernels' own arithmetic and operand order, so non-commutative combines (matmul) and
// exclusive scans need nothing else. The affine recurrence exchanges each chunk's map (the
// product of its a, and its state from zero) and rescans the chunk from its incoming state.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "grux/dist.h"
#include "grux/error.h"
#include "grux/tensor_ops.h"

namespace grux {

namespace {

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.numel() * dtype_size(c.dtype()));
}

Tensor from_bytes(const std::string& bytes, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  GRUX_ASSERT(bytes.size() == static_cast<size_t>(t.numel()) * dtype_size(dtype));
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

// x's shape with dimension d taken out, and its dtype: what every rank's chunk shares.
std::string signature(const Tensor& x, int64_t d) {
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return fmt::format("{} {}", shape_str(s), dtype_name(x.dtype()));
}

int64_t wrap(const char* op, const Tensor& x, int64_t dim) {
  if (!x.defined()) throw Error(fmt::format("{}: the chunk is undefined", op));
  const int64_t r = x.dim();
  if (dim < -r || dim >= r)
    throw Error(fmt::format("{}: dim {} is out of range for a chunk of {} dimensions", op, dim, r));
  return dim < 0 ? dim + r : dim;
}

// [a, b] along d: two tensors that agree everywhere but along d.
Tensor concat(const Tensor& a, const Tensor& b, int64_t d) {
  Shape s = a.shape();
  s[d] = a.size(d) + b.size(d);
  Tensor r = Tensor::empty(s, a.dtype());
  r.slice(d, 0, a.size(d)).copy_from(a);
  r.slice(d, a.size(d), s[d]).copy_from(b);
  return r;
}

template <typename Op>
Tensor combine(const Tensor& earlier, const Tensor& later, const Op& op) {
  ScanOptions one;
  one.threads = 1;
  return reduce_scan(concat(earlier.unsqueeze(0), later.unsqueeze(0), 0), 0, op, one);
}

template <typename Op>
Tensor scan_impl(const char* name, Communicator& comm, const Tensor& x, int64_t dim, const Op& op,
                 const ScanOptions& opt) {
  std::string error, sig;
  int64_t d = 0;
  try {
    d = wrap(name, x, dim);
    sig = signature(x, d);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  agree_same(comm, "chunk shape (without the scanned dimension) and dtype", sig);
  const int64_t n = x.size(d);
  // This chunk's total (nothing for an empty chunk), then every rank's.
  std::string total;
  try {
    if (n > 0) total = bytes_of(reduce_scan(x, d, op, opt));
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  const std::vector<std::string> totals = comm.all_gather(total);
  Shape slice = x.shape();
  slice.erase(slice.begin() + d);
  // The totals on this rank's side, combined in sequence order.
  const int K = comm.size(), r = comm.rank();
  Tensor carry;
  auto fold = [&](int k) {
    if (totals[k].empty()) return;
    const Tensor t = from_bytes(totals[k], slice, x.dtype());
    if (!carry.defined())
      carry = t;
    else
      carry = opt.reverse ? combine(t, carry, op) : combine(carry, t, op);
  };
  if (!opt.reverse)
    for (int k = 0; k < r; ++k) fold(k);
  else
    for (int k = K - 1; k > r; --k) fold(k);
  if (!carry.defined() || n == 0) return prefix_scan(x, d, op, opt).contiguous();
  const Tensor c = carry.unsqueeze(d);
  if (!opt.reverse) return prefix_scan(concat(c, x, d), d, op, opt).slice(d, 1, n + 1).contiguous();
  return prefix_scan(concat(x, c, d), d, op, opt).slice(d, 0, n).contiguous();
}

}  // namespace

Tensor dist_prefix_scan(Communicator& comm, const Tensor& chunk, int64_t dim, ScanOp op,
                        const ScanOptions& opt) {
  return scan_impl("dist_prefix_scan", comm, chunk, dim, op, opt);
}

Tensor dist_prefix_scan(Communicator& comm, const Tensor& chunk, int64_t dim, const ScanFn& op,
                        const ScanOptions& opt) {
  return scan_impl("dist_prefix_scan", comm, chunk, dim, op, opt);
}

Tensor dist_affine_scan(Communicator& comm, const Tensor& a_in, const Tensor& b_in, int64_t dim,
                        const Tensor& h0_in, const AffineScanOptions& opt) {
  const char* name = "dist_affine_scan";
  const int K = comm.size(), r = comm.rank();
  // The rank that holds the sequence's start (in walk order) and the ranks in walk order.
  const int start = opt.reverse ? K - 1 : 0;
  std::string error, sig;
  int64_t d = 0;
  bool matrix = false;
  Tensor a = a_in, b = b_in, h0 = r == start ? h0_in : Tensor();
  try {
    d = wrap(name, b, dim);
    if (!a.defined()) throw Error(fmt::format("{}: a is undefined", name));
    matrix = a.dim() == b.dim() + 1;
    // Validation of shapes, dtypes and (log space) signs: affine_scan's own, on this chunk.
    AffineScanOptions check = opt;
    check.threads = 1;
    check.log_space = false;
    if (b.size(d) > 0) (void)affine_scan(a.slice(d, 0, 1), b.slice(d, 0, 1), d, h0, check);
    Shape state = b.shape();
    state.erase(state.begin() + d);
    if (h0.defined() && (h0.shape() != state || h0.dtype() != b.dtype()))
      throw Error(fmt::format("{}: h0 is {} {}, expected {} {} (b's shape without dim {})", name,
                              dtype_name(h0.dtype()), shape_str(h0.shape()), dtype_name(b.dtype()),
                              shape_str(state), d));
    if (opt.log_space) {
      if (matrix) throw Error(fmt::format("{}: log space needs the diagonal form", name));
      for (auto [arg, t] : {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"h0", &h0}})
        if (t->defined() && t->numel() > 0 && !(min(*t).item() > 0))
          throw Error(fmt::format("{}: log space needs a, b and h0 > 0; {} has {}", name, arg,
                                  min(*t).item()));
    }
    sig = signature(b, d) + (matrix ? " matrix" : " diagonal");
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  agree_same(comm, "chunk shape (without the scanned dimension), dtype and form", sig);
  // In log space everything below runs on logs: the map of a chunk is (sum of log a, log of
  // its state from zero), and one step of the log recurrence combines maps.
  const bool logs = opt.log_space;
  if (logs) {
    a = log(a);
    b = log(b);
    if (h0.defined()) h0 = log(h0);
  }
  AffineScanOptions o = opt;
  o.log_space = false;
  auto run = [&](const Tensor& aa, const Tensor& bb, int64_t dd, const Tensor& hh,
                 const AffineScanOptions& oo) {
    return logs ? log_affine_scan(aa, bb, dd, hh, oo) : affine_scan(aa, bb, dd, hh, oo);
  };
  const int64_t n = b.size(d);
  // This chunk's map: its last state from the incoming state zero (from h0 on the start rank,
  // whose map is just that state; an empty start chunk passes h0 on), then the composite of
  // its a in walk order. An empty chunk elsewhere has no map: it passes the state on.
  Tensor h;
  std::string map;
  if (n > 0) {
    h = run(a, b, d, h0, o);
    map = bytes_of(h.select(d, opt.reverse ? 0 : n - 1));
    if (r != start) {
      ScanOptions so;
      so.threads = o.threads;
      Tensor A;
      if (!matrix)
        A = reduce_scan(a, d, logs ? ScanOp::sum : ScanOp::prod, so);
      else if (opt.reverse)
        A = reduce_scan(a, d, ScanOp::matmul, so);  // a_0 a_1 ... a_{n-1}
      else
        A = reduce_scan(
            a, d, [](const Tensor& e, const Tensor& l) { return matmul(l, e); }, so);
      map += bytes_of(A);
    }
  } else if (h0.defined()) {
    map = bytes_of(h0);
  }
  const std::vector<std::string> maps = comm.all_gather(map);
  if (n == 0) return Tensor::empty(b_in.shape(), b_in.dtype());
  if (r == start) return logs ? exp(h) : h;
  // The incoming state: the maps of the chunks before this one, applied in walk order, each
  // as one step of the recurrence (s = A s + B; from no state yet, s = B).
  Shape state_shape = b.shape(), a_shape = a.shape();
  state_shape.erase(state_shape.begin() + d);
  a_shape.erase(a_shape.begin() + d);
  Tensor s;
  const size_t state_bytes = static_cast<size_t>(h.select(d, 0).numel()) * dtype_size(b.dtype());
  for (int k = start; k != r; k += opt.reverse ? -1 : 1) {
    if (maps[k].empty()) continue;
    const Tensor B = from_bytes(maps[k].substr(0, state_bytes), state_shape, b.dtype());
    if (k == start || !s.defined()) {
      s = B;
      continue;
    }
    const Tensor A = from_bytes(maps[k].substr(state_bytes), a_shape, b.dtype());
    AffineScanOptions one;
    one.threads = 1;
    s = run(A.unsqueeze(0), B.unsqueeze(0), 0, s, one).squeeze(0);
  }
  if (s.defined()) h = run(a, b, d, s, o);
  return logs ? exp(h) : h;
}

}  // namespace grux
