// `grux scan OP`: a prefix scan of a .npy array along one dimension (sum, prod, max, min,
// logaddexp, matmul), or the affine recurrence h_t = a_t h_{t-1} + b_t; writes one .npy.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "grux/dist.h"
#include "grux/io.h"
#include "grux/scan.h"

namespace grux::cli {

namespace {

struct ScanArgs {
  std::string op, input, a, b, h0, out;
  int64_t dim = 0;
  bool exclusive = false, reverse = false, log_space = false;
  int threads = 0;
};

Tensor read_float(const std::string& path, const char* flag) {
  Tensor t = map_npy(path);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(fmt::format("{} {}: dtype {}; expected float32 or float64", flag, path,
                            dtype_name(t.dtype())));
  return t;
}

void same_dtype(const Tensor& t, const char* flag, const std::string& path, const Tensor& ref,
                const char* ref_flag) {
  if (t.dtype() != ref.dtype())
    throw Error(fmt::format("{} {}: dtype {} differs from {}'s {} (mixed dtypes are not allowed)",
                            flag, path, dtype_name(t.dtype()), ref_flag, dtype_name(ref.dtype())));
}

// With K ranks, rank r scans positions [T r / K, T (r + 1) / K) along the scanned dimension
// of the memory-mapped inputs (it reads only those pages), and the ranks write one --out.
void run_scan(const ScanArgs& s, Communicator& comm) {
  const int threads = set_threads(s.threads);
  const int K = comm.size(), r = comm.rank();
  Tensor x, a, b, h0;
  int64_t d = 0;
  std::string error, files;
  try {
    if (s.op == "affine") {
      a = read_float(s.a, "--a");
      b = read_float(s.b, "--b");
      same_dtype(b, "--b", s.b, a, "--a");
      if (!s.h0.empty()) {
        h0 = read_float(s.h0, "--h0");
        same_dtype(h0, "--h0", s.h0, a, "--a");
      }
      files = fmt::format("--a {} --b {} --h0 {}", shape_str(a.shape()), shape_str(b.shape()),
                          h0.defined() ? shape_str(h0.shape()) : "none");
    } else {
      x = read_float(s.input, "--input");
      files = fmt::format("--input {} {}", shape_str(x.shape()), dtype_name(x.dtype()));
    }
    const Tensor& ref = s.op == "affine" ? b : x;
    const int64_t rank = ref.dim();
    if (rank == 0) throw Error("the input is a scalar; expected at least 1 dimension");
    if (s.dim < -rank || s.dim >= rank)
      throw Error(fmt::format("--dim {} out of range for an array of rank {} (expected {}..{})",
                              s.dim, rank, -rank, rank - 1));
    d = s.dim < 0 ? s.dim + ref.dim() : s.dim;
  } catch (const Error& e) {
    error = e.what();
  }
  agree_no_error(comm, error);
  if (K > 1) agree_same(comm, "input files (shapes and dtypes)", files);
  auto mine = [&](const Tensor& t) {
    const int64_t T = t.size(d);
    return K == 1 ? t : t.slice(d, T * r / K, T * (r + 1) / K);
  };
  Tensor y;
  if (s.op == "affine") {
    AffineScanOptions o;
    o.reverse = s.reverse;
    o.log_space = s.log_space;
    o.threads = threads;
    y = K == 1 ? affine_scan(a, b, d, h0, o) : dist_affine_scan(comm, mine(a), mine(b), d, h0, o);
  } else {
    ScanOptions o;
    o.exclusive = s.exclusive;
    o.reverse = s.reverse;
    o.threads = threads;
    y = K == 1 ? prefix_scan(x, d, parse_scan_op(s.op), o)
               : dist_prefix_scan(comm, mine(x), d, parse_scan_op(s.op), o);
  }
  if (K == 1)
    write_npy(s.out, y);
  else
    dist_write_npy(comm, s.out, y, d);
}

}  // namespace

Action add_scan_command(CLI::App& app) {
  auto s = std::make_shared<ScanArgs>();
  CLI::App* c = app.add_subcommand(
      "scan",
      "Prefix scan of a .npy array along --dim (inclusive by default; f32 or f64), or the linear "
      "recurrence h_t = a_t h_{t-1} + b_t. Writes one .npy (--out, written atomically). Bad "
      "input: one line on stderr, exit code 2. Under mpirun -np K, each process scans 1/K of "
      "--dim of the memory-mapped input and they write --out together (docs/cli.md).");
  // One of the subcommands below; an unknown name lands in OP and is reported by name.
  c->require_subcommand(0, 1);
  c->add_option("OP", s->op, "sum, prod, max, min, logaddexp, matmul or affine");
  c->allow_extras();  // so that `grux scan cumsum --input ...` names cumsum, not the options
  auto common = [&](CLI::App* sub) {
    sub->add_option("--dim", s->dim, "dimension to scan along (negative counts from the end)")
        ->required();
    sub->add_flag("--reverse", s->reverse, "walk from the last element to the first");
    sub->add_option("--out", s->out, "output .npy")->required();
    sub->add_option("--threads", s->threads, "threads (0: all cores)")->capture_default_str();
  };
  const char* help[] = {
      "cumulative sum (torch.cumsum)",
      "cumulative product (torch.cumprod)",
      "running maximum (torch.cummax values)",
      "running minimum (torch.cummin values)",
      "log of the cumulative sum of exp (torch.logcumsumexp)",
      ("cumulative matrix products y_t = x_0 @ x_1 @ ... @ x_t of square matrices stacked "
       "along --dim (X is (..., T, ..., d, d)); with --reverse y_t = x_t @ ... @ x_{T-1}")};
  const char* names[] = {"sum", "prod", "max", "min", "logaddexp", "matmul"};
  for (int i = 0; i < 6; ++i) {
    CLI::App* sub = c->add_subcommand(names[i], help[i]);
    sub->add_option("--input", s->input, ".npy input X")->required();
    common(sub);
    if (std::string(names[i]) != "matmul")
      sub->add_flag("--exclusive", s->exclusive,
                    "exclusive scan: y_t combines the elements before t (y_0 = the identity)");
    sub->callback([s, name = std::string(names[i])] { s->op = name; });
  }
  CLI::App* af = c->add_subcommand(
      "affine",
      "h_t = a_t * h_{t-1} + b_t along --dim, h_{-1} = H0 (zeros if not given). A of B's shape: "
      "element-wise (diagonal); A of B's shape plus one trailing dimension d: A_t is a d x d "
      "matrix applied to B's last dimension. With --reverse h_t = a_t h_{t+1} + b_t.");
  af->add_option("--a", s->a, ".npy coefficients A")->required();
  af->add_option("--b", s->b, ".npy inputs B")->required();
  af->add_option("--h0", s->h0, ".npy initial state: B's shape without --dim");
  af->add_flag("--log-space", s->log_space,
               "compute in log space (diagonal only; A, B and H0 must be > 0): stays exact when "
               "products of A underflow");
  common(af);
  af->callback([s] { s->op = "affine"; });
  return [s, c] {
    if (c->get_subcommands().empty()) {
      if (s->op.empty())
        throw Error("grux scan needs an op: sum, prod, max, min, logaddexp, matmul or affine");
      throw Error(fmt::format(
          "unknown scan op '{}'; expected one of sum, prod, max, min, logaddexp, matmul, affine",
          s->op));
    }
    std::vector<std::string> extra = c->remaining();
    for (const CLI::App* sub : c->get_subcommands())
      for (const std::string& e : sub->remaining()) extra.push_back(e);
    if (!extra.empty())
      throw Error(fmt::format("unexpected arguments: {} (see grux scan {} --help)",
                              fmt::join(extra, " "), s->op));
    run_launched("grux scan", [&](Communicator& comm) { run_scan(*s, comm); });
  };
}

}  // namespace grux::cli
