// Scan operators: validate, bring the scanned dimension into the (O, T, C) layout the kernels
// take (a copy only when the tensor is not already laid out that way), pick optimized or
// reference kernels, and run; plus the scans with a user callable, driven here at the tensor
// level, and the affine scans' backward.
#include "grux/scan.h"

#include <fmt/format.h>
#include <omp.h>

#include <exception>
#include <mutex>
#include <vector>

#include "core/descriptor.h"
#include "cpu/ref/scan_ref.h"
#include "cpu/scan.h"
#include "grux/error.h"
#include "grux/runtime.h"
#include "grux/tensor_ops.h"

namespace grux {

namespace {

// The scans pass their thread count to the kernels (docs/api.md's `threads` option).
int team(int threads) {
  if (threads < 0)
    throw Error(fmt::format("scan: threads is {}, expected 0 (grux chooses) or >= 1", threads));
  return threads > 0 ? threads : omp_get_max_threads();
}

int64_t wrap_dim(const char* op, const Tensor& x, int64_t dim) {
  const int64_t r = x.dim();
  if (r == 0)
    throw Error(fmt::format("{}: the input is a scalar; expected at least 1 dimension", op));
  if (dim < -r || dim >= r)
    throw Error(fmt::format("{}: dim {} out of range for a tensor of rank {} (expected {}..{})", op,
                            dim, r, -r, r - 1));
  return dim < 0 ? dim + r : dim;
}

void check_float(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) throw Error(fmt::format("{}: {} is undefined", op, arg));
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(
        fmt::format("{}: {} has dtype {}; expected f32 or f64", op, arg, dtype_name(t.dtype())));
  if (t.device() != Device::cpu())
    throw Error(fmt::format("{}: {} is on {}; only cpu tensors are supported here", op, arg,
                            t.device().str()));
}

int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

Shape without(const Shape& s, int64_t d) {
  Shape r = s;
  r.erase(r.begin() + d);
  return r;
}

// Permutation moving dimension d to just before the last `keep` dimensions.
std::vector<int64_t> move_before_tail(int64_t rank, int64_t d, int64_t keep) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < rank - keep; ++i)
    if (i != d) p.push_back(i);
  p.push_back(d);
  for (int64_t i = rank - keep; i < rank; ++i) p.push_back(i);
  return p;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[p[i]] = int64_t(i);
  return q;
}

cpu::ScanKind kind_of(ScanOp op) {
  switch (op) {
    case ScanOp::sum:
      return cpu::ScanKind::sum;
    case ScanOp::prod:
      return cpu::ScanKind::prod;
    case ScanOp::max:
      return cpu::ScanKind::max;
    case ScanOp::min:
      return cpu::ScanKind::min;
    case ScanOp::logaddexp:
      return cpu::ScanKind::logaddexp;
    case ScanOp::matmul:
      break;
  }
  GRUX_ASSERT(false);
  return cpu::ScanKind::sum;
}

template <typename T>
void elementwise_typed(cpu::ScanKind kind, const Tensor& x, Tensor& y, int64_t O, int64_t Tn,
                       int64_t C, const cpu::ScanWalk& w) {
  if (reference_kernels())
    cpu::ref::scan_elementwise(kind, x.data<T>(), y.data<T>(), O, Tn, C, w.exclusive, w.reverse);
  else
    cpu::scan_elementwise(kind, x.data<T>(), y.data<T>(), O, Tn, C, w);
}

template <typename T>
void matmul_typed(const Tensor& x, Tensor& y, int64_t O, int64_t Tn, int64_t d,
                  const cpu::ScanWalk& w) {
  if (reference_kernels())
    cpu::ref::matmul_scan(x.data<T>(), y.data<T>(), O, Tn, d, w.reverse);
  else
    cpu::matmul_scan(x.data<T>(), y.data<T>(), O, Tn, d, w);
}

// A square-matrix sequence x (..., T at dim, ..., d, d) as (O, T, d, d), contiguous.
struct MatrixLayout {
  Tensor xp;
  std::vector<int64_t> perm;
  int64_t O, Tn, d;
};
MatrixLayout matrix_layout(const char* op, const Tensor& x, int64_t d) {
  const int64_t r = x.dim();
  if (r < 3)
    throw Error(fmt::format("{}: matmul scans need x of shape (..., T, ..., d, d); got {}", op,
                            shape_str(x.shape())));
  if (x.size(-1) != x.size(-2))
    throw Error(
        fmt::format("{}: matmul scans need square matrices in the last two dimensions; "
                    "got {} x {}",
                    op, x.size(-2), x.size(-1)));
  if (d >= r - 2)
    throw Error(
        fmt::format("{}: dim {} is a matrix dimension of x {}; expected a dimension "
                    "before the last two",
                    op, d, shape_str(x.shape())));
  MatrixLayout L;
  L.perm = move_before_tail(r, d, 2);
  L.xp = x.permute(L.perm).contiguous();
  L.Tn = x.size(d);
  L.d = x.size(-1);
  L.O = prod(L.xp.shape(), 0, size_t(r - 3));
  return L;
}

}  // namespace

const char* scan_op_name(ScanOp op) {
  switch (op) {
    case ScanOp::sum:
      return "sum";
    case ScanOp::prod:
      return "prod";
    case ScanOp::max:
      return "max";
    case ScanOp::min:
      return "min";
    case ScanOp::logaddexp:
      return "logaddexp";
    case ScanOp::matmul:
      return "matmul";
  }
  return "?";
}

ScanOp parse_scan_op(const std::string& name) {
  for (ScanOp op :
       {ScanOp::sum, ScanOp::prod, ScanOp::max, ScanOp::min, ScanOp::logaddexp, ScanOp::matmul})
    if (name == scan_op_name(op)) return op;
  throw Error(fmt::format(
      "unknown scan op '{}'; expected one of sum, prod, max, min, logaddexp, matmul", name));
}

// ---- Built-in combines ----------------------------------------------------------------

Tensor prefix_scan(const Tensor& x, int64_t dim, ScanOp op, const ScanOptions& opt) {
  const char* name = "prefix_scan";
  check_float(name, "x", x);
  const int64_t d = wrap_dim(name, x, dim);
  cpu::ScanWalk w{opt.exclusive, opt.reverse, team(opt.threads)};
  if (opt.identity.defined())
    throw Error(
        fmt::format("{}: the built-in '{}' knows its identity; pass none", name, scan_op_name(op)));
  if (op == ScanOp::matmul) {
    if (opt.exclusive)
      throw Error(
          fmt::format("{}: matmul scans are inclusive only (there is no identity of "
                      "unknown size); drop exclusive",
                      name));
    MatrixLayout L = matrix_layout(name, x, d);
    Tensor yp = Tensor::empty(L.xp.shape(), x.dtype());
    if (x.dtype() == DType::f32)
      matmul_typed<float>(L.xp, yp, L.O, L.Tn, L.d, w);
    else
      matmul_typed<double>(L.xp, yp, L.O, L.Tn, L.d, w);
    return yp.permute(inverse(L.perm)).contiguous();
  }
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  const int64_t O = prod(x.shape(), 0, size_t(d)), Tn = x.size(d),
                C = prod(x.shape(), size_t(d + 1), x.shape().size());
  if (x.dtype() == DType::f32)
    elementwise_typed<float>(kind_of(op), xc, y, O, Tn, C, w);
  else
    elementwise_typed<double>(kind_of(op), xc, y, O, Tn, C, w);
  return y;
}

Tensor reduce_scan(const Tensor& x, int64_t dim, ScanOp op, const ScanOptions& opt) {
  check_float("reduce_scan", "x", x);
  const int64_t d = wrap_dim("reduce_scan", x, dim);
  if (x.size(d) == 0)
    throw Error(fmt::format("reduce_scan: dim {} has length 0; expected at least 1", dim));
  if (op == ScanOp::matmul) {
    matrix_layout("reduce_scan", x, d);  // validates
    return reduce_scan(x, dim,
                       ScanFn([](const Tensor& a, const Tensor& b) { return matmul(a, b); }), opt);
  }
  // The element-wise kernels are bandwidth-bound; the last row of the scan is the reduction.
  ScanOptions o;
  o.threads = opt.threads;
  return prefix_scan(x, d, op, o).select(d, x.size(d) - 1).contiguous();
}

// ---- Scans with a callable -------------------------------------------------------------

namespace {

// The walk over slices of x along d for a callable: step t in walk order, and the combine in
// sequence order (reversed walks put the new element on the left).
struct CallableWalk {
  const Tensor& x;
  int64_t d, Tn;
  bool reverse;
  const ScanFn& op;
  const Shape slice_shape;
  Tensor slice(int64_t t) const { return x.select(d, reverse ? Tn - 1 - t : t); }
  Tensor combine(const Tensor& acc, const Tensor& v) const {
    Tensor r = reverse ? op(v, acc) : op(acc, v);
    if (!r.defined() || r.shape() != slice_shape || r.dtype() != x.dtype())
      throw Error(fmt::format(
          "scan: the combine returned {} {} for operands of shape {} and dtype {}; it must "
          "preserve the slice shape and dtype",
          r.defined() ? dtype_name(r.dtype()) : "an undefined tensor",
          r.defined() ? shape_str(r.shape()) : "", shape_str(slice_shape), dtype_name(x.dtype())));
    return r;
  }
  // Scans steps [t0, t1) into y from acc (undefined: start with the first element); returns
  // the state after the last step.
  Tensor scan(Tensor& y, int64_t t0, int64_t t1, Tensor acc, bool exclusive) const {
    for (int64_t t = t0; t < t1; ++t) {
      Tensor out = y.select(d, reverse ? Tn - 1 - t : t);
      if (exclusive) out.copy_from(acc);
      acc = acc.defined() ? combine(acc, slice(t)) : slice(t).clone();
      if (!exclusive) out.copy_from(acc);
    }
    return acc;
  }
  Tensor fold(int64_t t0, int64_t t1) const {
    Tensor acc = slice(t0).clone();
    for (int64_t t = t0 + 1; t < t1; ++t) acc = combine(acc, slice(t));
    return acc;
  }
};

// Runs first(p, P) on a team, then after a barrier second(p, P); an exception in any thread
// is rethrown after the team has finished (every thread still reaches the barrier).
template <typename First, typename Second>
void run_team(int threads, First first, Second second) {
  std::exception_ptr error;
  std::mutex m;
  auto guarded = [&](auto& fn, int p, int P) {
    try {
      fn(p, P);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
#pragma omp parallel num_threads(threads)
  {
    const int p = omp_get_thread_num(), P = omp_get_num_threads();
    guarded(first, p, P);
#pragma omp barrier
    bool failed;
    {
      std::lock_guard<std::mutex> lock(m);
      failed = bool(error);
    }
    if (!failed) guarded(second, p, P);
  }
  if (error) std::rethrow_exception(error);
}

int64_t chunk_begin(int64_t j, int64_t Tn, int64_t P) {
  return j * Tn / (P + 1);
}

}  // namespace

Tensor prefix_scan(const Tensor& x, int64_t dim, const ScanFn& op, const ScanOptions& opt) {
  const char* name = "prefix_scan";
  if (!op) throw Error("prefix_scan: the combine is empty");
  check_float(name, "x", x);
  const int64_t d = wrap_dim(name, x, dim);
  const Shape slice_shape = without(x.shape(), d);
  if (opt.exclusive) {
    if (!opt.identity.defined())
      throw Error("prefix_scan: an exclusive scan with a callable needs options.identity");
    if (opt.identity.shape() != slice_shape || opt.identity.dtype() != x.dtype())
      throw Error(fmt::format("prefix_scan: identity is {} {}; expected {} {} (one slice of x)",
                              dtype_name(opt.identity.dtype()), shape_str(opt.identity.shape()),
                              dtype_name(x.dtype()), shape_str(slice_shape)));
  }
  const int64_t Tn = x.size(d);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (Tn == 0) return y;
  const CallableWalk walk{x, d, Tn, opt.reverse, op, slice_shape};
  const Tensor start = opt.exclusive ? opt.identity : Tensor();
  const int threads = team(opt.threads);
  if (threads == 1 || Tn < 4 * threads) {
    walk.scan(y, 0, Tn, start, opt.exclusive);
    return y;
  }
  // P + 1 chunks: thread 0 scans chunks 0 and 1; thread p >= 1 folds chunk p, then scans
  // chunk p + 1 from (end of chunk 0) . total_1 . ... . total_p. Time 2T / (P + 1).
  std::vector<Tensor> totals(size_t(threads) + 1), ends(1);
  auto first = [&](int p, int P) {
    if (p == 0)
      ends[0] = walk.scan(y, 0, chunk_begin(1, Tn, P), start, opt.exclusive);
    else if (chunk_begin(p + 1, Tn, P) > chunk_begin(p, Tn, P))
      totals[p] = walk.fold(chunk_begin(p, Tn, P), chunk_begin(p + 1, Tn, P));
  };
  auto second = [&](int p, int P) {
    Tensor carry = ends[0];
    for (int j = 1; j <= p; ++j)
      if (totals[j].defined()) carry = carry.defined() ? walk.combine(carry, totals[j]) : totals[j];
    walk.scan(y, chunk_begin(p + 1, Tn, P), chunk_begin(p + 2, Tn, P), carry, opt.exclusive);
  };
  run_team(threads, first, second);
  return y;
}

Tensor reduce_scan(const Tensor& x, int64_t dim, const ScanFn& op, const ScanOptions& opt) {
  if (!op) throw Error("reduce_scan: the combine is empty");
  check_float("reduce_scan", "x", x);
  const int64_t d = wrap_dim("reduce_scan", x, dim);
  const int64_t Tn = x.size(d);
  if (Tn == 0)
    throw Error(fmt::format("reduce_scan: dim {} has length 0; expected at least 1", dim));
  const CallableWalk walk{x, d, Tn, false, op, without(x.shape(), d)};
  const int threads = std::min<int64_t>(team(opt.threads), Tn / 2);
  if (threads <= 1) return walk.fold(0, Tn);
  std::vector<Tensor> totals(static_cast<size_t>(threads));
  run_team(
      threads,
      [&](int p, int P) {
        const int64_t t0 = p * Tn / P, t1 = (p + 1) * Tn / P;
        if (t1 > t0) totals[p] = walk.fold(t0, t1);
      },
      [](int, int) {});
  Tensor acc;
  for (const Tensor& t : totals)
    if (t.defined()) acc = acc.defined() ? walk.combine(acc, t) : t;
  return acc;
}

// ---- Affine recurrences -----------------------------------------------------------------

namespace {

enum class AffineForm { diagonal, matrix };

struct AffineLayout {
  AffineForm form;
  int64_t d;         // normalized dim of b
  int64_t O, Tn, C;  // diagonal: (O, T, C); matrix: (O, T, C=d) with a (O, T, d, d)
  std::vector<int64_t> perm_b, perm_a;  // matrix form: to (..., T, d) and (..., T, d, d)
};

AffineLayout affine_layout(const char* name, const Tensor& a, const Tensor& b, int64_t dim,
                           const Tensor& h0) {
  check_float(name, "a", a);
  check_float(name, "b", b);
  check_same_dtype(name, "a", a, "b", b);
  AffineLayout L;
  L.d = wrap_dim(name, b, dim);
  const int64_t r = b.dim();
  if (a.shape() == b.shape()) {
    L.form = AffineForm::diagonal;
    L.O = prod(b.shape(), 0, size_t(L.d));
    L.Tn = b.size(L.d);
    L.C = prod(b.shape(), size_t(L.d + 1), size_t(r));
  } else {
    Shape expect = b.shape();
    expect.push_back(b.size(-1));
    if (a.shape() != expect)
      throw Error(
          fmt::format("{}: a has shape {} and b {}; expected a of b's shape (diagonal) "
                      "or {} (matrix form)",
                      name, shape_str(a.shape()), shape_str(b.shape()), shape_str(expect)));
    if (L.d == r - 1)
      throw Error(
          fmt::format("{}: in the matrix form dim {} is the state dimension of b {}; "
                      "expected a time dimension before it",
                      name, dim, shape_str(b.shape())));
    L.form = AffineForm::matrix;
    L.perm_b = move_before_tail(r, L.d, 1);
    L.perm_a = move_before_tail(r + 1, L.d, 2);
    L.Tn = b.size(L.d);
    L.C = b.size(-1);
    L.O = prod(without(without(b.shape(), r - 1), L.d), 0, size_t(r - 2));
  }
  if (h0.defined()) {
    check_float(name, "h0", h0);
    check_same_dtype(name, "h0", h0, "b", b);
    const Shape expect = without(b.shape(), L.d);
    if (h0.shape() != expect)
      throw Error(fmt::format("{}: h0 has shape {}; expected {} (b's shape without dim {})", name,
                              shape_str(h0.shape()), shape_str(expect), dim));
  }
  return L;
}

template <typename T>
void affine_typed(const AffineLayout& L, const Tensor& a, const Tensor& b, const Tensor& h0,
                  Tensor& h, bool log_space, const cpu::ScanWalk& w) {
  const T* h0p = h0.defined() ? h0.data<T>() : nullptr;
  const bool ref = reference_kernels();
  if (L.form == AffineForm::matrix) {
    if (ref)
      cpu::ref::affine_scan_matrix(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C,
                                   w.reverse);
    else
      cpu::affine_scan_matrix(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C, w);
  } else if (log_space) {
    if (ref)
      cpu::ref::log_affine_scan_diag(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C,
                                     w.reverse);
    else
      cpu::log_affine_scan_diag(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C, w);
  } else {
    if (ref)
      cpu::ref::affine_scan_diag(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C,
                                 w.reverse);
    else
      cpu::affine_scan_diag(a.data<T>(), b.data<T>(), h0p, h.data<T>(), L.O, L.Tn, L.C, w);
  }
}

// Runs the recurrence on (log-)inputs already validated; returns h (or log h) in b's shape.
Tensor run_affine(const AffineLayout& L, const Tensor& a, const Tensor& b, const Tensor& h0,
                  bool log_space, const AffineScanOptions& opt) {
  const cpu::ScanWalk w{false, opt.reverse, team(opt.threads)};
  const Tensor h0c = h0.defined() ? h0.contiguous() : Tensor();
  if (L.form == AffineForm::diagonal) {
    const Tensor ac = a.contiguous(), bc = b.contiguous();
    Tensor h = Tensor::empty(b.shape(), b.dtype());
    if (b.dtype() == DType::f32)
      affine_typed<float>(L, ac, bc, h0c, h, log_space, w);
    else
      affine_typed<double>(L, ac, bc, h0c, h, log_space, w);
    return h;
  }
  const Tensor ap = a.permute(L.perm_a).contiguous(), bp = b.permute(L.perm_b).contiguous();
  Tensor hp = Tensor::empty(bp.shape(), b.dtype());
  if (b.dtype() == DType::f32)
    affine_typed<float>(L, ap, bp, h0c, hp, false, w);
  else
    affine_typed<double>(L, ap, bp, h0c, hp, false, w);
  return hp.permute(inverse(L.perm_b)).contiguous();
}

// The first element <= 0 (or NaN) of t, as "name[i, j, ...] = v", or "" if all are > 0.
std::string first_non_positive(const char* arg, const Tensor& t) {
  const Tensor c = t.contiguous();
  const int64_t n = c.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double v = c.at_flat(i);
    if (!(v > 0)) {
      std::string idx;
      int64_t rem = i;
      std::vector<int64_t> index(c.dim());
      for (int64_t k = c.dim() - 1; k >= 0; --k) {
        index[k] = rem % c.size(k);
        rem /= c.size(k);
      }
      for (size_t k = 0; k < index.size(); ++k) idx += (k ? ", " : "") + std::to_string(index[k]);
      return fmt::format("{}[{}] = {}", arg, idx, v);
    }
  }
  return "";
}

}  // namespace

Tensor affine_scan(const Tensor& a, const Tensor& b, int64_t dim, const Tensor& h0,
                   const AffineScanOptions& opt) {
  const char* name = "affine_scan";
  const AffineLayout L = affine_layout(name, a, b, dim, h0);
  if (!opt.log_space) return run_affine(L, a, b, h0, false, opt);
  if (L.form == AffineForm::matrix)
    throw Error("affine_scan: log space needs the diagonal form (a of b's shape); a is a matrix");
  for (auto [arg, t] : {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"h0", &h0}}) {
    if (!t->defined()) continue;
    const std::string bad = first_non_positive(arg, *t);
    if (!bad.empty())
      throw Error(fmt::format("affine_scan: log space needs a, b and h0 > 0; {}", bad));
  }
  return exp(run_affine(L, log(a), log(b), h0.defined() ? log(h0) : Tensor(), true, opt));
}

Tensor log_affine_scan(const Tensor& log_a, const Tensor& log_b, int64_t dim, const Tensor& log_h0,
                       const AffineScanOptions& opt) {
  const AffineLayout L = affine_layout("log_affine_scan", log_a, log_b, dim, log_h0);
  if (L.form == AffineForm::matrix)
    throw Error("log_affine_scan: log_a must have log_b's shape (the diagonal form)");
  return run_affine(L, log_a, log_b, log_h0, true, opt);
}

AffineScanGrads affine_scan_backward(const Tensor& a, const Tensor& h0, const Tensor& h,
                                     const Tensor& dh, int64_t dim, const AffineScanOptions& opt) {
  const char* name = "affine_scan_backward";
  const AffineLayout L = affine_layout(name, a, h, dim, h0);
  check_float(name, "dh", dh);
  check_same_dtype(name, "dh", dh, "h", h);
  if (dh.shape() != h.shape())
    throw Error(fmt::format("{}: dh has shape {}; expected h's shape {}", name,
                            shape_str(dh.shape()), shape_str(h.shape())));
  const int64_t d = L.d, Tn = L.Tn;
  AffineScanGrads g;
  if (Tn == 0) {
    g.da = Tensor::zeros(a.shape(), a.dtype());
    g.db = Tensor::zeros(h.shape(), h.dtype());
    if (h0.defined()) g.dh0 = Tensor::zeros(h0.shape(), h0.dtype());
    return g;
  }
  // Walk-order neighbours: "next" is t+1 walking forward, t-1 walking backward.
  const bool rev = opt.reverse;
  auto step = [&](const Tensor& t, int64_t i) { return t.select(d, rev ? Tn - 1 - i : i); };
  // The coefficients of the reverse recurrence g_t = dh_t + a_next^T g_next: a shifted one
  // step against the walk (the last step has no successor: 0), transposed in the matrix form.
  Tensor a_t = L.form == AffineForm::matrix ? a.transpose(-1, -2) : a;
  Tensor shifted = Tensor::zeros(a.shape(), a.dtype());
  for (int64_t i = 0; i + 1 < Tn; ++i) step(shifted, i).copy_from(step(a_t, i + 1));
  AffineScanOptions back = opt;
  back.reverse = !rev;
  back.log_space = false;
  g.db = run_affine(L, shifted, dh, Tensor(), false, back);
  // h_prev: h shifted one step along the walk, h0 (or zeros) first.
  Tensor h_prev = Tensor::zeros(h.shape(), h.dtype());
  if (h0.defined()) step(h_prev, 0).copy_from(h0);
  for (int64_t i = 1; i < Tn; ++i) step(h_prev, i).copy_from(step(h, i - 1));
  if (L.form == AffineForm::diagonal)
    g.da = mul(g.db, h_prev);
  else
    g.da = mul(g.db.unsqueeze(-1), h_prev.unsqueeze(-2));
  if (h0.defined()) {
    const Tensor g0 = step(g.db, 0), a0 = step(a, 0);
    g.dh0 = L.form == AffineForm::diagonal
                ? mul(a0, g0)
                : matmul(a0.transpose(-1, -2), g0.unsqueeze(-1)).squeeze(-1);
  }
  return g;
}

// ---- Benchmark problems -----------------------------------------------------------------

ScanProblem ScanProblem::parse(const std::string& s) {
  const detail::Descriptor m = detail::Descriptor::parse(
      s,
      {{'n', true, false, 12},
       {'t', false, false, 12},
       {'c', true, false, 12},
       {'d', true, false, 12}},
      "scan descriptor",
      "[n{N}]t{T}[c{C}][d{D}], numbers of up to 12 digits, e.g. t16777216, n8t4096c1536 or "
      "t8192d64");
  ScanProblem p;
  p.N = m.get('n', 1);
  p.T = m.get('t');
  p.C = m.get('c', 1);
  p.d = m.get('d', 0);
  if (p.N < 1 || p.T < 1 || p.C < 1 || (m.has('d') && p.d < 1))
    throw Error(fmt::format("scan descriptor '{}': sizes must be >= 1", s));
  if (p.d > 0 && m.has('c'))
    throw Error(
        fmt::format("scan descriptor '{}': give c (channels) or d (matrix size), not both", s));
  return p;
}

std::string ScanProblem::descriptor() const {
  std::string s = N != 1 ? fmt::format("n{}t{}", N, T) : fmt::format("t{}", T);
  if (d > 0) return s + fmt::format("d{}", d);
  if (C != 1) s += fmt::format("c{}", C);
  return s;
}

}  // namespace grux
