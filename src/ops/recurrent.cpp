// Shared checks and layouts of the recurrent stack drivers (recurrent.h) and the packed
// sequence layout and team shares of their layers (recurrent_layer.h).
#include "ops/recurrent.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <regex>

#include "core/descriptor.h"
#include "grux/io.h"
#include "grux/sequence.h"
#include "ops/recurrent_layer.h"

namespace grux {

int64_t SequenceShape::rows() const {
  if (lengths.empty()) return N * T;
  int64_t sum = 0;
  for (int64_t v : lengths) sum += v;
  return sum;
}

std::string SequenceShape::set_lengths(const std::string& spec) {
  if (spec.empty()) {
    lengths.clear();
    return "";
  }
  if (spec.rfind("uniform:", 0) == 0) {
    long long lo, hi, seed;
    char tail;
    if (std::sscanf(spec.c_str(), "uniform:%lld:%lld:%lld%c", &lo, &hi, &seed, &tail) != 3)
      throw Error(fmt::format("--lengths '{}' is malformed (expected uniform:LO:HI:SEED)", spec));
    if (lo < 1 || hi < lo || hi > T)
      throw Error(fmt::format("--lengths '{}': expected 1 <= LO <= HI <= T = {}", spec, T));
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::uniform_int_distribution<int64_t> u(lo, hi);
    lengths.resize(N);
    for (auto& v : lengths) v = u(rng);
    return fmt::format("_len{}-{}s{}", lo, hi, seed);
  }
  const Tensor t = read_npy(spec);
  if (t.dtype() != DType::i64 || t.dim() != 1 || t.size(0) != N)
    throw Error(fmt::format("{}: expected int64 lengths of shape ({},)", spec, N));
  const int64_t* v = t.data<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    if (v[n] < 1 || v[n] > T)
      throw Error(
          fmt::format("{}: length {} of sequence {} is outside [1, T = {}]", spec, v[n], n, T));
  lengths.assign(v, v + N);
  return "_lenfile";
}

}  // namespace grux

namespace grux::ops {

SeqLayout make_seq_layout(int64_t T, int64_t N, const int64_t* lengths) {
  SeqLayout lay;
  lay.T = T;
  lay.N = N;
  lay.len.assign(N, T);
  if (lengths) lay.len.assign(lengths, lengths + N);
  lay.perm.resize(N);
  std::iota(lay.perm.begin(), lay.perm.end(), 0);
  std::stable_sort(lay.perm.begin(), lay.perm.end(),
                   [&](int64_t a, int64_t b) { return lay.len[a] > lay.len[b]; });
  lay.S = N > 0 ? lay.len[lay.perm[0]] : 0;
  // bs[s]: the sequences longer than s, from a count of each length: O(N + T) (a loop over
  // every sequence's steps would be O(N T) before anything is allocated: hours for a huge,
  // zero-strided input that the allocation would refuse at once).
  lay.bs.assign(lay.S, 0);
  std::vector<int64_t> of_length(static_cast<size_t>(lay.S) + 1, 0);
  for (int64_t n = 0; n < N; ++n) ++of_length[static_cast<size_t>(lay.len[n])];
  for (int64_t s = lay.S - 1, longer = 0; s >= 0; --s) {
    longer += of_length[static_cast<size_t>(s) + 1];
    lay.bs[s] = longer;
  }
  lay.off.assign(lay.S + 1, 0);
  for (int64_t s = 0; s < lay.S; ++s) lay.off[s + 1] = lay.off[s] + lay.bs[s];
  return lay;
}

int layer_team_size(int64_t H, int64_t unit) {
  const int64_t blocks = (H + unit - 1) / unit;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, omp_get_max_threads()));
}

TeamShare team_share(int64_t H, int64_t unit, int tid, int threads, SpinBarrier* barrier) {
  const int64_t blocks = (H + unit - 1) / unit;
  return {tid * blocks / threads, (tid + 1) * blocks / threads, barrier, tid, threads};
}

void check_weight(const char* op, const std::string& key, const Tensor& t, const Shape& shape,
                  DType dtype) {
  if (!t.defined()) throw Error(fmt::format("{}: missing weight '{}'", op, key));
  if (t.shape() != shape)
    throw Error(fmt::format("{}: weight '{}' has shape {}, expected {}", op, key,
                            shape_str(t.shape()), shape_str(shape)));
  if (t.dtype() != dtype)
    throw Error(fmt::format("{}: weight '{}' has dtype {}, expected {} like the other weights", op,
                            key, dtype_name(t.dtype()), dtype_name(dtype)));
  if (t.device() != Device::cpu())
    throw Error(fmt::format("{}: weight '{}' is on {}, expected cpu", op, key, t.device().str()));
}

DType weights_dtype(const char* op, const std::string& key, const Tensor& first) {
  if (!first.defined()) return DType::f32;
  if (first.dtype() != DType::f32 && first.dtype() != DType::f64)
    throw Error(fmt::format("{}: weight '{}' has dtype {}, expected f32 or f64", op, key,
                            dtype_name(first.dtype())));
  return first.dtype();
}

void make_contiguous(Tensor& t) {
  if (t.defined()) t = t.contiguous();
}

SeqInput normalize_input(const SeqSpec& s, const Tensor& input, const Tensor& h0,
                         const Tensor& lengths) {
  const char* op = s.op;
  check_defined(op, "input", input);
  if (input.dtype() != s.dtype)
    throw Error(fmt::format(
        "{}: input has dtype {} but the weights have dtype {} (expected the same dtype)", op,
        dtype_name(input.dtype()), dtype_name(s.dtype)));
  if (input.device() != Device::cpu())
    throw Error(
        fmt::format("{}: input is on {} but the weights are on cpu (expected the same device)", op,
                    input.device().str()));
  SeqInput p;
  if (input.dim() == 2) {
    p.unbatched = true;
    p.x = input.unsqueeze(1);
  } else if (input.dim() == 3) {
    p.x = s.batch_first ? input.transpose(0, 1) : input;
  } else {
    throw Error(fmt::format(
        "{}: input has shape {}, expected (T, N, I), (N, T, I) with batch_first, or (T, I) "
        "unbatched",
        op, shape_str(input.shape())));
  }
  const int64_t T = p.x.size(0), N = p.x.size(1), I = p.x.size(2);
  if (I != s.input_size)
    throw Error(fmt::format("{}: input has shape {}: feature size {}, expected input_size {}", op,
                            shape_str(input.shape()), I, s.input_size));
  if (T < 1 || N < 1)
    throw Error(
        fmt::format("{}: input has shape {}, expected at least one time step and one sequence", op,
                    shape_str(input.shape())));
  const int64_t R = s.state_rows, H = s.hidden_size;
  if (h0.defined()) {
    check_same_dtype(op, "input", input, "h0", h0);
    check_same_device(op, "input", input, "h0", h0);
    if (p.unbatched) {
      check_shape(op, "h0", h0, {R, H});
      p.h0 = h0.unsqueeze(1);
    } else {
      check_shape(op, "h0", h0, {R, N, H});
      p.h0 = h0;
    }
  }
  if (lengths.defined()) {
    if (p.unbatched)
      throw Error(fmt::format(
          "{}: lengths given with unbatched input (expected a batched input (T, N, I))", op));
    check_same_device(op, "input", input, "lengths", lengths);
    check_dtype(op, "lengths", lengths, DType::i64);
    check_shape(op, "lengths", lengths, {N});
    p.len.resize(N);
    for (int64_t n = 0; n < N; ++n) {
      p.len[n] = static_cast<int64_t>(lengths.at_flat(n));
      if (p.len[n] < 1 || p.len[n] > T)
        throw Error(
            fmt::format("{}: lengths[{}] = {} is out of range (expected 1 <= length <= T = {})", op,
                        n, p.len[n], T));
    }
  }
  return p;
}

Tensor to_caller_layout(const Tensor& t, bool batch_first, bool unbatched) {
  if (unbatched) return t.squeeze(1);
  return batch_first ? t.transpose(0, 1).contiguous() : t;
}

SeqUpstream normalize_upstream(const SeqSpec& s, int64_t T, int64_t N, bool unbatched,
                               int64_t out_width, const Shape& h_n_shape, const Tensor& doutput,
                               const Tensor& dh_n) {
  const std::string op = fmt::format("{} backward", s.op);
  if (!doutput.defined() && !dh_n.defined())
    throw Error(fmt::format("{}: neither doutput nor dh_n given (expected at least one)", op));
  auto check = [&](const char* name, const Tensor& t, const Shape& shape) {
    if (t.dtype() != s.dtype)
      throw Error(fmt::format("{}: {} has dtype {}, expected {} like the weights", op, name,
                              dtype_name(t.dtype()), dtype_name(s.dtype)));
    if (t.device() != Device::cpu())
      throw Error(fmt::format("{}: {} is on {}, expected cpu", op, name, t.device().str()));
    check_shape(op.c_str(), name, t, shape);
  };
  SeqUpstream u;
  if (doutput.defined()) {
    const Shape expected = unbatched       ? Shape{T, out_width}
                           : s.batch_first ? Shape{N, T, out_width}
                                           : Shape{T, N, out_width};
    check("doutput", doutput, expected);
    u.doutput = unbatched       ? doutput.unsqueeze(1)
                : s.batch_first ? doutput.transpose(0, 1)
                                : doutput;
  }
  if (dh_n.defined()) {
    check("dh_n", dh_n, h_n_shape);
    u.dh_n = unbatched ? dh_n.unsqueeze(1) : dh_n;
  }
  return u;
}

SeqDescriptor parse_seq_descriptor(const std::string& text, const char* kind, const char* form,
                                   int64_t max_directions, const char* directions_note) {
  const detail::Descriptor p = detail::Descriptor::parse(
      text, {{'l', true, false, 6}, {'d', true, false, 6}, {'t'}, {'n'}, {'i'}, {'h'}}, kind, form);
  SeqDescriptor d{p.get('l', 1), p.get('d', 1), p.get('t'), p.get('n'), p.get('i'), p.get('h')};
  if (d.D < 1 || d.D > max_directions)
    throw Error(fmt::format("{} '{}': d{} ({})", kind, text, d.D, directions_note));
  for (auto [name, v] : {std::pair{"l", d.L}, {"t", d.T}, {"n", d.N}, {"i", d.I}, {"h", d.H}})
    if (v < 1) throw Error(fmt::format("{} '{}': {}{} (expected >= 1)", kind, text, name, v));
  return d;
}

StackKeys read_stack_keys(const char* op, const char* module,
                          const std::map<std::string, Tensor>& state, int64_t gates, bool with_hr) {
  static const std::regex key_re(
      R"((weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?)");
  StackKeys k;
  int64_t max_layer = -1;
  for (const auto& [key, t] : state) {
    std::smatch m;
    if (!std::regex_match(key, m, key_re) || (!with_hr && m[1] == "weight_hr"))
      throw Error(fmt::format(
          "{} weights: unexpected key '{}' (expected {} state_dict keys such as 'weight_ih_l0')",
          op, key, module));
    if (m[2].length() > 6)
      throw Error(fmt::format("{} weights: layer index in '{}' is too large", op, key));
    max_layer = std::max<int64_t>(max_layer, std::stoll(m[2].str()));
    k.reverse = k.reverse || m[3].matched;
  }
  auto w_ih0 = state.find("weight_ih_l0");
  if (w_ih0 == state.end()) throw Error(fmt::format("{} weights: missing key 'weight_ih_l0'", op));
  const Tensor& w0 = w_ih0->second;
  if (w0.dim() != 2 || w0.size(0) % gates != 0 || w0.size(0) == 0 || w0.size(1) == 0)
    throw Error(
        fmt::format("{} weights: 'weight_ih_l0' has shape {}, expected ({}*hidden_size, "
                    "input_size) with both sizes >= 1",
                    op, shape_str(w0.shape()), gates));
  k.layers = max_layer + 1;
  k.hidden = w0.size(0) / gates;
  k.input = w0.size(1);
  k.bias = state.count("bias_ih_l0") || state.count("bias_hh_l0");
  return k;
}

const Tensor& StateDictReader::get(const std::string& key) {
  auto it = state_.find(key);
  if (it == state_.end()) throw Error(fmt::format("{} weights: missing key '{}'", op_, key));
  read_.insert(key);
  return it->second;
}

void StateDictReader::check_no_other(const std::string& what) const {
  for (const auto& [key, t] : state_)
    if (!read_.count(key))
      throw Error(fmt::format("{} weights: unexpected key '{}' for {}", op_, key, what));
}

}  // namespace grux::ops
