// The ONNX reader: a graph that torch.onnx.export, tf2onnx or onnx.helper wrote around GRU and
// LSTM nodes, read into a ModelSpec. Not a general ONNX runtime: the graph is interpreted once,
// node by node in file order, over a few kinds of value, and every node must turn values of
// the kinds it expects into one of them:
//   constant  an initializer, a Constant node or what constants compute (Shape arithmetic);
//   dims      a shape some of whose dimensions are the frames' time or batch, still unknown
//             numbers (Shape of the frames, Gather / Unsqueeze / Concat of it);
//   zeros     a tensor of zeros of such a shape (ConstantOfShape, Expand, Slice of one), or a
//             constant expanded to it (a stored initial state for every sequence);
//   signal    the frames after the spec's first k layers (the graph's frames input: k = 0),
//             its axes named (time, batch, features, axes of size 1), or only its last frame;
//   state     final states of recurrent layers (Y_h, Y_c; Concat of them), stacked.
// A GRU or LSTM node, a Gemm or MatMul (+ Add) on the features and the elementwise activations
// append a layer to the spec; Transpose, Squeeze, Unsqueeze and Reshape only rename a signal's
// axes (a node that would move the frames' data otherwise is refused). The graph's outputs
// must then be the last signal or states. Anything else: one line naming the node (its name,
// op type and position) and what was expected.
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include "formats/readers.h"
#include "grux/error.h"

namespace grux::formats {
namespace {

// Elements a constant may have (a shape's arithmetic or a layer's weights): the file's own
// size bounds initializers; this bounds what ConstantOfShape and Expand of known sizes build.
constexpr int64_t kMaxElements = int64_t(1) << 26;

// The labels of a signal's or a shape's axes: 'T' time, 'N' batch, 'F' features, '1' an axis
// of size 1, 'L' the stacked layers of a state, 'D' the two directions of a bidirectional
// layer (its features split into each direction's, or its two states); 'a'-'d' the frames
// input's axes before a recurrent node tells which of them is time and which batch.
struct Dim {
  char label = 0;     // 0: a known size
  int64_t value = 0;  // the size, where known
};

struct Const {
  std::vector<int64_t> dims;
  bool integer = false;
  std::vector<double> f;   // floating point values (f16, f32, f64)
  std::vector<int64_t> i;  // integer values (int32, int64, bool)
  int64_t numel() const { return integer ? int64_t(i.size()) : int64_t(f.size()); }
  double at(int64_t k) const { return integer ? double(i[k]) : f[k]; }
};

struct Value {
  enum class Kind { constant, dims, zeros, signal, state } kind = Kind::constant;
  Const c;              // constant
  std::vector<Dim> d;   // dims (one per element), zeros (its shape)
  bool scalar = false;  // dims: a 0-D value (one dimension, from Gather of one index)
  std::string axes;     // signal, state
  size_t layers = 0;    // signal: the spec's layers it has been through
  int64_t prefix = 0;   // signal: the frames' first `prefix` features only (a skip's Slice)
  bool last_frame = false;
  std::vector<int64_t> stacked;  // state: the recurrent layers whose final states, in order,
  std::vector<int> dirs;         // each in this direction of its layer (0, or 1: reverse)
  bool cell = false;             // state: Y_c
};

class Reader {
 public:
  Reader(const onnx::ModelProto& m, const std::string& what,
         const std::map<std::string, Tensor>& given)
      : m_(m), what_(what), given_(given) {}

  ModelSpec read();

 private:
  const onnx::ModelProto& m_;
  const std::string what_;
  const std::map<std::string, Tensor>& given_;
  ModelSpec spec_;
  std::map<std::string, Value> values_;
  std::map<char, char> bound_;  // frames input's axis label -> 'T' or 'N'
  std::string input_axes_;
  std::string where_;  // the node being read, for messages
  int64_t opset_ = 0;  // the default domain's opset
  // A batch norm read from Sub, Mul and Add of constants: its layer, and the nodes read (1:
  // Sub, 2: Mul, 3: Add).
  int64_t norm_layer_ = -1;
  int norm_stage_ = 0;

  [[noreturn]] void fail(const std::string& m) const {
    throw Error(fmt::format("{}: {}{}", what_, where_.empty() ? "" : where_ + ": ", m));
  }
  char label(char c) const {
    auto it = bound_.find(c);
    return it == bound_.end() ? c : it->second;
  }
  std::string labels(const std::string& axes) const {
    std::string s = axes;
    for (char& c : s) c = label(c);
    return s;
  }
  // The size of a signal's or a state's 'F' axis (a direction's, where a 'D' axis splits them).
  int64_t features(const Value& v) const {
    if (v.kind == Value::Kind::state) return spec_.layers[v.stacked[0]].hidden_size();
    if (v.prefix > 0) return v.prefix;
    const int64_t f = v.layers == 0 ? spec_.input_size : spec_.layers[v.layers - 1].out_size;
    return v.axes.find('D') == std::string::npos ? f : f / 2;
  }
  Const tensor(const onnx::TensorProto& t, const std::string& name) const;
  Const from_given(const Tensor& t, const std::string& name) const;
  const Value& in(const onnx::NodeProto& n, int k) const;
  bool has(const onnx::NodeProto& n, int k) const {
    return k < n.input_size() && !n.input(k).empty();
  }
  const Const& constant(const onnx::NodeProto& n, int k, const char* role) const;
  std::vector<int64_t> ints(const onnx::NodeProto& n, int k, const char* role) const;
  void set(const onnx::NodeProto& n, int k, Value v) {
    if (k < n.output_size() && !n.output(k).empty()) values_[n.output(k)] = std::move(v);
  }
  // The signal at the model's end (the only one a layer may follow); the final h of the top
  // layer, where it is its last frame (tf2onnx's Dense after Y_h), as that last frame.
  Value tip(const onnx::NodeProto& n, int k) const;
  Value append(const Value& s, ModelLayer layer);
  void node(const onnx::NodeProto& n);
  void recurrent(const onnx::NodeProto& n, bool lstm);
  void dense(const onnx::NodeProto& n, const Const& w, bool transposed, const Const* b);
  void activation(const onnx::NodeProto& n, ModelLayer::Activation a);
  void rename_axes(const onnx::NodeProto& n);
  void arithmetic(const onnx::NodeProto& n);
  void output(const onnx::ValueInfoProto& o);
};

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t attr_int(const onnx::NodeProto& n, const char* name, int64_t otherwise) {
  const auto* a = attr(n, name);
  return a ? a->i() : otherwise;
}

int64_t checked_numel(const std::vector<int64_t>& dims, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error(fmt::format("{}: a dimension of {}, expected sizes >= 0", where, d));
    if (d > 0 && n > kMaxElements / d)
      throw Error(fmt::format("{}: more than {} elements, expected a model's weights", where,
                              kMaxElements));
    n *= d;
  }
  return n;
}

template <typename T>
std::vector<T> raw_values(const std::string& raw, int64_t n, const std::string& where) {
  if (int64_t(raw.size()) != n * int64_t(sizeof(T)))
    throw Error(fmt::format("{}: raw_data holds {} bytes, expected {} ({} elements of {} bytes)",
                            where, raw.size(), n * int64_t(sizeof(T)), n, sizeof(T)));
  std::vector<T> v(n);
  if (n > 0) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(float(man), -24);
  uint32_t bits =
      exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Const Reader::tensor(const onnx::TensorProto& t, const std::string& name) const {
  const std::string where = fmt::format("tensor {}", name);
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0)
    fail(
        fmt::format("{} keeps its data in an external file, which grux does not read (save "
                    "the model with its weights inside: onnx.save(model, path, "
                    "save_as_external_data=False))",
                    where));
  Const c;
  c.dims.assign(t.dims().begin(), t.dims().end());
  int64_t n = 0;
  try {
    n = checked_numel(c.dims, where);
  } catch (const Error& e) {
    fail(e.what());
  }
  // The values of element type Raw: from raw_data, or else from the typed field, each
  // converted to what Const keeps.
  const auto take = [&](auto raw_type, const auto& typed, auto& out, auto convert) {
    using Raw = decltype(raw_type);
    if (t.has_raw_data()) {
      for (Raw x : raw_values<Raw>(t.raw_data(), n, where)) out.push_back(convert(x));
      return;
    }
    if (typed.size() != n)
      fail(fmt::format("{} has {} values, expected {} (dims {})", where, typed.size(), n,
                       fmt::join(c.dims, "x")));
    for (const auto x : typed) out.push_back(convert(x));
  };
  const auto same = [](auto x) { return x; };
  try {
    switch (t.data_type()) {
      case onnx::TensorProto::FLOAT:
        take(float(), t.float_data(), c.f, same);
        break;
      case onnx::TensorProto::DOUBLE:
        take(double(), t.double_data(), c.f, same);
        break;
      case onnx::TensorProto::FLOAT16:  // typed: the 16 bits in int32_data
        take(uint16_t(), t.int32_data(), c.f, [](auto x) { return half_to_float(uint16_t(x)); });
        break;
      case onnx::TensorProto::INT64:
        c.integer = true;
        take(int64_t(), t.int64_data(), c.i, same);
        break;
      case onnx::TensorProto::INT32:
        c.integer = true;
        take(int32_t(), t.int32_data(), c.i, same);
        break;
      case onnx::TensorProto::BOOL:
        c.integer = true;
        take(uint8_t(), t.int32_data(), c.i, [](auto x) { return int64_t(x != 0); });
        break;
      default:
        fail(
            fmt::format("{} has element type {}, expected float, double, float16, int64, "
                        "int32 or bool",
                        where, onnx::TensorProto::DataType_Name(t.data_type())));
    }
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.rfind(what_, 0) == 0) throw;
    fail(m);
  }
  for (double x : c.f)
    if (!std::isfinite(x)) fail(fmt::format("{} holds {}, expected finite numbers", where, x));
  return c;
}

Const Reader::from_given(const Tensor& t, const std::string& name) const {
  Const c;
  for (int64_t k = 0; k < t.dim(); ++k) c.dims.push_back(t.size(k));
  const Tensor x = t.contiguous();
  switch (x.dtype()) {
    case DType::f32:
      for (int64_t k = 0; k < x.numel(); ++k) c.f.push_back(x.data<float>()[k]);
      break;
    case DType::f64:
      for (int64_t k = 0; k < x.numel(); ++k) c.f.push_back(x.data<double>()[k]);
      break;
    case DType::i64:
      c.integer = true;
      for (int64_t k = 0; k < x.numel(); ++k) c.i.push_back(x.data<int64_t>()[k]);
      break;
    default:
      fail(fmt::format("input {} is {}, expected f32, f64 or int64", name, dtype_name(x.dtype())));
  }
  return c;
}

const Value& Reader::in(const onnx::NodeProto& n, int k) const {
  if (!has(n, k)) fail(fmt::format("input {} is missing", k));
  auto it = values_.find(n.input(k));
  if (it == values_.end())
    fail(
        fmt::format("input {} (\"{}\") is neither a graph input, an initializer nor an earlier "
                    "node's output (the nodes must come in order, without cycles)",
                    k, n.input(k)));
  return it->second;
}

const Const& Reader::constant(const onnx::NodeProto& n, int k, const char* role) const {
  const Value& v = in(n, k);
  if (v.kind != Value::Kind::constant)
    fail(
        fmt::format("{} (\"{}\") must be a constant (an initializer, a Constant node or a "
                    "given input), found one computed from the frames",
                    role, n.input(k)));
  return v.c;
}

std::vector<int64_t> Reader::ints(const onnx::NodeProto& n, int k, const char* role) const {
  const Const& c = constant(n, k, role);
  if (!c.integer) fail(fmt::format("{} must be integers", role));
  return c.i;
}

Value Reader::tip(const onnx::NodeProto& n, int k) const {
  Value v = in(n, k);
  if (v.kind == Value::Kind::state && !v.cell && v.stacked.size() == 1 &&
      v.stacked[0] + 1 == int64_t(spec_.layers.size())) {
    const ModelLayer& l = spec_.layers.back();
    if (l.directions == 1 && !l.reverse && !l.lengths.defined() &&
        labels(v.axes).find('L') == std::string::npos) {
      v.kind = Value::Kind::signal;
      v.layers = spec_.layers.size();
      v.last_frame = true;
    }
  }
  if (v.kind != Value::Kind::signal)
    fail(
        fmt::format("input {} (\"{}\") is not the frames (the graph input or what layers made "
                    "of it)",
                    k, n.input(k)));
  if (v.layers != spec_.layers.size())
    fail(
        fmt::format("input \"{}\" is the frames after {} of the model's {} layers: grux runs "
                    "one chain of layers, and this branches from it",
                    n.input(k), v.layers, spec_.layers.size()));
  if (v.last_frame && (n.op_type() == "GRU" || n.op_type() == "LSTM"))
    fail("the input is one frame (Gather of a time step): a recurrent layer needs the frames");
  if (v.prefix > 0)
    fail(
        fmt::format("input \"{}\" is a slice of the frames' features, which only a skip Add "
                    "may take",
                    n.input(k)));
  if (v.axes.find('D') != std::string::npos)
    fail(
        fmt::format("input \"{}\" has the two directions' features apart (axes {}): expected "
                    "them joined into one axis (Transpose and Reshape to 2 x hidden_size)",
                    n.input(k), labels(v.axes)));
  return v;
}

Value Reader::append(const Value& s, ModelLayer layer) {
  spec_.layers.push_back(std::move(layer));
  Value v = s;
  v.layers = spec_.layers.size();
  return v;
}

// ONNX's gate blocks (GRU z, r, h; LSTM i, o, f, c) in PyTorch's order (r, z, n; i, f, g, o).
Tensor gates(const Const& c, int64_t offset, int64_t G, int64_t H, int64_t cols, bool lstm) {
  static const int64_t gru_order[3] = {1, 0, 2}, lstm_order[4] = {0, 2, 3, 1};
  const int64_t* order = lstm ? lstm_order : gru_order;
  Tensor t = Tensor::empty(cols == 0 ? Shape{G * H} : Shape{G * H, cols}, DType::f32);
  float* p = t.data<float>();
  const int64_t row = std::max<int64_t>(cols, 1);
  for (int64_t q = 0; q < G; ++q)
    for (int64_t r = 0; r < H * row; ++r)
      p[q * H * row + r] = float(c.f[offset + order[q] * H * row + r]);
  return t;
}

// `per` (one direction's tensor from the offset of direction d's values) for each of D
// directions, stacked on a leading axis of 2 where D is 2.
template <typename F>
Tensor directions(int64_t D, F per) {
  if (D == 1) return per(0);
  const Tensor a = per(0), b = per(1);
  Shape s = a.shape();
  s.insert(s.begin(), 2);
  Tensor t = Tensor::empty(s, DType::f32);
  t.select(0, 0).copy_from(a);
  t.select(0, 1).copy_from(b);
  return t;
}

void Reader::recurrent(const onnx::NodeProto& n, bool lstm) {
  const int64_t G = lstm ? 4 : 3;
  const Value x = tip(n, 0);
  const int64_t layout = attr_int(n, "layout", 0);
  if (layout != 0 && layout != 1) fail(fmt::format("layout is {}, expected 0 or 1", layout));
  if (x.axes.size() != 3 || labels(x.axes)[2] != 'F')
    fail(fmt::format("X has axes {}, expected {} and features last", x.axes,
                     layout == 0 ? "time, batch" : "batch, time"));
  // Bind the frames input's axes: which is time and which batch.
  const std::string ax = labels(x.axes);
  const char want[2] = {layout == 0 ? 'T' : 'N', layout == 0 ? 'N' : 'T'};
  for (int k = 0; k < 2; ++k) {
    const char c = ax[k];
    if (c == want[k]) continue;
    if (c >= 'a' && c <= 'd') {
      bound_[x.axes[k]] = want[k];
    } else if (!(c == '1' && want[k] == 'N')) {
      fail(fmt::format("X's axis {} is {}, expected {} (layout {})", k,
                       c == 'T'   ? "time"
                       : c == 'N' ? "batch"
                                  : "of size 1",
                       want[k] == 'T' ? "time" : "batch", layout));
    }
  }
  const auto* hs = attr(n, "hidden_size");
  if (!hs || hs->i() < 1) fail("hidden_size is missing or below 1");
  const int64_t H = hs->i(), I = features(x);
  const auto* dir = attr(n, "direction");
  const std::string direction = dir ? dir->s() : "forward";
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    fail(fmt::format("direction is \"{}\", expected forward, reverse or bidirectional", direction));
  const int64_t D = direction == "bidirectional" ? 2 : 1;
  const auto* ns = attr(n, "num_directions");  // opset 1's spelling
  if (ns && ns->i() != D)
    fail(fmt::format("num_directions is {}, but direction is {}", ns->i(), direction));
  float clip = 0;
  if (const auto* c = attr(n, "clip")) {
    clip = c->f();
    if (!(clip > 0) || !std::isfinite(clip))
      fail(fmt::format("clip is {}, expected a bound > 0", clip));
  }
  if (const auto* a = attr(n, "activations")) {
    // The defaults, once for each direction.
    const std::vector<std::string> one = lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                              : std::vector<std::string>{"Sigmoid", "Tanh"};
    std::vector<std::string> want_acts = one;
    if (D == 2) want_acts.insert(want_acts.end(), one.begin(), one.end());
    bool ok = a->strings_size() == int(want_acts.size());
    for (int k = 0; ok && k < a->strings_size(); ++k) {
      std::string s = a->strings(k);
      std::transform(s.begin(), s.end(), s.begin(), ::tolower);
      std::string w = want_acts[k];
      std::transform(w.begin(), w.end(), w.begin(), ::tolower);
      ok = s == w;
    }
    if (!ok) {
      std::vector<std::string> have(a->strings().begin(), a->strings().end());
      fail(fmt::format("activations [{}]: grux runs the default [{}] only", fmt::join(have, ", "),
                       fmt::join(want_acts, ", ")));
    }
  }
  const int64_t input_forget = lstm ? attr_int(n, "input_forget", 0) : 0;
  if (input_forget != 0 && input_forget != 1)
    fail(fmt::format("input_forget is {}, expected 0 or 1", input_forget));
  const int64_t lbr = attr_int(n, "linear_before_reset", 0);
  if (!lstm && lbr != 0 && lbr != 1)
    fail(fmt::format("linear_before_reset is {}, expected 0 or 1", lbr));

  const auto shaped = [&](int k, const char* role, std::vector<int64_t> dims) -> const Const& {
    const Const& c = constant(n, k, role);
    if (c.integer) fail(fmt::format("{} is integers, expected float", role));
    if (c.dims != dims)
      fail(fmt::format("{} has shape [{}], expected [{}] (hidden_size {}, {} input features)", role,
                       fmt::join(c.dims, ", "), fmt::join(dims, ", "), H, I));
    return c;
  };
  const Const& W = shaped(1, "W", {D, G * H, I});
  const Const& R = shaped(2, "R", {D, G * H, H});
  ModelLayer l;
  l.kind = lstm ? ModelLayer::Kind::lstm : ModelLayer::Kind::gru;
  l.in_size = I;
  l.out_size = D * H;
  l.directions = D;
  l.reverse = direction == "reverse";
  l.clip = clip;
  l.input_forget = input_forget == 1;
  l.form = lbr == 1 || lstm ? GruForm::linear_before_reset : GruForm::reset_before;
  l.w_ih = directions(D, [&](int64_t d) { return gates(W, d * G * H * I, G, H, I, lstm); });
  l.w_hh = directions(D, [&](int64_t d) { return gates(R, d * G * H * H, G, H, H, lstm); });
  if (has(n, 3)) {
    const Const& B = shaped(3, "B", {D, 2 * G * H});
    l.b_ih = directions(D, [&](int64_t d) { return gates(B, d * 2 * G * H, G, H, 0, lstm); });
    l.b_hh =
        directions(D, [&](int64_t d) { return gates(B, d * 2 * G * H + G * H, G, H, 0, lstm); });
  }  // without B the biases are zeros: the layer keeps none
  // The batch the states and lengths below are for, where a constant gives one.
  int64_t batch = 0;
  if (has(n, 4)) {
    const Value& v = in(n, 4);
    if (v.kind != Value::Kind::constant || !v.c.integer || v.c.dims.size() != 1 || v.c.dims[0] < 1)
      fail(
          fmt::format("sequence_lens (\"{}\") must be integers of [batch], given with the "
                      "frames (grux model run --input {}=LENGTHS.npy) or in the file",
                      n.input(4), n.input(4)));
    batch = v.c.dims[0];
    l.lengths = Tensor::empty({batch}, DType::i64);
    for (int64_t u = 0; u < batch; ++u) {
      if (v.c.i[u] < 0)
        fail(fmt::format("sequence_lens[{}] is {}, expected a length >= 0", u, v.c.i[u]));
      l.lengths.data<int64_t>()[u] = v.c.i[u];
    }
  }
  // An initial state: zeros of [D, batch, H] (the layer keeps none), or a constant of [D, 1,
  // H] (one state for every sequence) or [D, batch, H] (one each, the batch then fixed).
  const auto state = [&](int k, const char* role, Tensor ModelLayer::*slot) {
    if (!has(n, k)) return;
    const Value& v = in(n, k);
    const char batch_axis = label(x.axes[1 - layout]);
    if (v.kind == Value::Kind::zeros) {
      const auto& d = v.d;
      const int b = layout == 0 ? 1 : 0, dd = layout == 0 ? 0 : 1;
      const bool ok = d.size() == 3 && d[dd].label == 0 && d[dd].value == D && d[2].label == 0 &&
                      d[2].value == H &&
                      (d[b].label == 0 ? d[b].value >= 1 : label(d[b].label) == batch_axis);
      if (!ok)
        fail(fmt::format("{} is zeros of another shape than [{}, batch, {}]{}", role, D, H,
                         layout == 1 ? " (layout 1: [batch, directions, hidden])" : ""));
      if (v.c.numel() == 0) return;  // zeros
      // A constant expanded to the batch: one state for every sequence.
      const std::vector<int64_t> one =
          layout == 0 ? std::vector<int64_t>{D, 1, H} : std::vector<int64_t>{1, D, H};
      if (v.c.dims != one)
        fail(fmt::format("{} expands a constant of [{}], expected [{}]", role,
                         fmt::join(v.c.dims, ", "), fmt::join(one, ", ")));
    } else if (v.kind != Value::Kind::constant) {
      fail(fmt::format("{} (\"{}\") must be zeros or a constant of [{}, batch, {}]", role,
                       n.input(k), D, H));
    }
    const std::vector<int64_t>& dims = v.c.dims;
    const int64_t N = dims.size() == 3 ? dims[layout == 0 ? 1 : 0] : 0;
    const bool ok = !v.c.integer && dims.size() == 3 && dims[layout == 0 ? 0 : 1] == D &&
                    dims[2] == H && N >= 1;
    if (!ok)
      fail(fmt::format(
          "{} has shape [{}], expected [{}]", role, fmt::join(dims, ", "),
          layout == 0 ? fmt::format("{}, batch, {}", D, H) : fmt::format("batch, {}, {}", D, H)));
    if (N > 1 && batch != 0 && N != batch)
      fail(fmt::format("{} is for a batch of {}, and sequence_lens or another state for {}", role,
                       N, batch));
    if (N > 1) batch = N;
    // (D?, N?, H) from [D, N, H] or, layout 1, [N, D, H].
    Shape shape{H};
    if (N > 1) shape.insert(shape.begin(), N);
    if (D == 2) shape.insert(shape.begin(), 2);
    Tensor t = Tensor::empty(shape, DType::f32);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < N; ++b)
        for (int64_t u = 0; u < H; ++u)
          t.data<float>()[(d * N + b) * H + u] =
              float(v.c.f[(layout == 0 ? d * N + b : b * D + d) * H + u]);
    l.*slot = t;
  };
  state(5, "initial_h", &ModelLayer::h0);
  if (lstm) {
    state(6, "initial_c", &ModelLayer::c0);
    if (has(n, 7)) {  // ONNX's p_i, p_o, p_f as grux's i, f, o; zeros: none
      const Const& P = shaped(7, "P", {D, 3 * H});
      bool any = false;
      for (double p : P.f) any |= p != 0;
      if (any) {
        l.peephole = directions(D, [&](int64_t d) {
          Tensor t = Tensor::empty({3 * H}, DType::f32);
          static const int64_t order[3] = {0, 2, 1};
          for (int64_t q = 0; q < 3; ++q)
            for (int64_t u = 0; u < H; ++u)
              t.data<float>()[q * H + u] = float(P.f[d * 3 * H + order[q] * H + u]);
          return t;
        });
      }
    }
  }
  if (batch > 1 && (l.h0.defined() || l.c0.defined())) {
    // A state of [D, 1, H] beside lengths or a state for a batch: one each, broadcast.
    for (Tensor* t : {&l.h0, &l.c0}) {
      if (!t->defined() || t->dim() == (D == 2 ? 3 : 2)) continue;
      Shape shape{batch, H};
      if (D == 2) shape.insert(shape.begin(), 2);
      Tensor e = Tensor::empty(shape, DType::f32);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t b = 0; b < batch; ++b)
          std::memcpy(e.data<float>() + (d * batch + b) * H, t->data<float>() + d * H,
                      size_t(H) * sizeof(float));
      *t = e;
    }
  }
  const size_t layer = spec_.layers.size();
  Value y = append(x, std::move(l));
  // Y: (time, D, batch, H) or, layout 1, (batch, time, D, H); Y_h and Y_c: (D, batch, H) or
  // (batch, D, H). One direction's axis has size 1.
  const char dax = D == 2 ? 'D' : '1';
  y.axes = layout == 0 ? std::string{x.axes[0], dax, x.axes[1], 'F'}
                       : std::string{x.axes[0], x.axes[1], dax, 'F'};
  set(n, 0, y);
  Value h;
  h.kind = Value::Kind::state;
  h.stacked.assign(size_t(D), int64_t(layer));
  h.dirs = D == 2 ? std::vector<int>{0, 1} : std::vector<int>{0};
  h.axes = layout == 0 ? std::string{dax, x.axes[1], 'F'} : std::string{x.axes[0], dax, 'F'};
  set(n, 1, h);
  if (lstm) {
    h.cell = true;
    set(n, 2, h);
  }
}

void Reader::dense(const onnx::NodeProto& n, const Const& w, bool transposed, const Const* b) {
  const Value& x = tip(n, 0);
  const std::string ax = labels(x.axes);
  if (ax.empty() || ax.back() != 'F')
    fail(fmt::format("the features are not the last axis ({})", ax));
  const int64_t I = features(x);
  if (w.integer || w.dims.size() != 2 || w.dims[transposed ? 1 : 0] != I)
    fail(fmt::format("the weight has shape [{}], expected [{}, outputs]{}", fmt::join(w.dims, ", "),
                     I, transposed ? " transposed" : ""));
  const int64_t O = w.dims[transposed ? 0 : 1];
  ModelLayer l;
  l.kind = ModelLayer::Kind::dense;
  l.in_size = I;
  l.out_size = O;
  l.weight = Tensor::empty({O, I}, DType::f32);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      l.weight.data<float>()[o * I + i] = float(transposed ? w.f[o * I + i] : w.f[i * O + o]);
  if (b) {
    if (b->integer || b->numel() != O)
      fail(fmt::format("the bias has {} values, expected {}", b->numel(), O));
    l.bias = Tensor::empty({O}, DType::f32);
    for (int64_t o = 0; o < O; ++o) l.bias.data<float>()[o] = float(b->f[o]);
  }
  set(n, 0, append(x, std::move(l)));
}

void Reader::activation(const onnx::NodeProto& n, ModelLayer::Activation a) {
  const Value& x = tip(n, 0);
  if (a == ModelLayer::Activation::softmax) {
    const std::string ax = labels(x.axes);
    // Before opset 13 Softmax flattens the axes from `axis` (default 1) into one.
    int64_t axis = attr_int(n, "axis", opset_ >= 13 ? -1 : 1);
    if (axis < 0) axis += int64_t(ax.size());
    if (axis != int64_t(ax.size()) - 1)
      fail(fmt::format("Softmax over axis {} of {} (opset {}), expected the features' (the last)",
                       axis, ax.size(), opset_));
  }
  if (a == ModelLayer::Activation::elu &&
      std::abs((attr(n, "alpha") ? attr(n, "alpha")->f() : 1.0f) - 1.0f) > 0)
    fail("Elu's alpha is not 1: grux's elu has alpha 1");
  ModelLayer l;
  l.kind = ModelLayer::Kind::activation;
  l.activation = a;
  l.in_size = l.out_size = features(x);
  set(n, 0, append(x, std::move(l)));
}

// Transpose, Squeeze, Unsqueeze, Reshape, Flatten of a signal or a state: the same frames, their
// axes renamed; a node that would reorder time, batch and features refused.
void Reader::rename_axes(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  Value v = in(n, 0);
  if (v.kind != Value::Kind::signal && v.kind != Value::Kind::state) {
    arithmetic(n);
    return;
  }
  const std::string a = v.axes;
  const int64_t r = int64_t(a.size());
  const auto norm = [&](int64_t axis, int64_t rank) {
    if (axis < -rank || axis >= rank)
      fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
    return axis < 0 ? axis + rank : axis;
  };
  std::string out;
  if (op == "Transpose") {
    std::vector<int64_t> perm;
    if (const auto* p = attr(n, "perm"))
      perm.assign(p->ints().begin(), p->ints().end());
    else
      for (int64_t k = r - 1; k >= 0; --k) perm.push_back(k);
    if (int64_t(perm.size()) != r)
      fail(fmt::format("perm has {} axes, the input {}", perm.size(), r));
    std::vector<bool> seen(r);
    for (int64_t p : perm) {
      p = norm(p, r);
      if (seen[p]) fail("perm repeats an axis");
      seen[p] = true;
      out += a[p];
    }
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    std::vector<int64_t> axes;
    if (has(n, 1))
      axes = ints(n, 1, "axes");
    else if (const auto* p = attr(n, "axes"))
      axes.assign(p->ints().begin(), p->ints().end());
    if (op == "Squeeze") {
      if (axes.empty())
        for (int64_t k = 0; k < r; ++k)
          if (a[k] == '1') axes.push_back(k);
      std::vector<bool> drop(r);
      for (int64_t x : axes) {
        x = norm(x, r);
        if (a[x] != '1')
          fail(fmt::format("squeezes axis {} ({}), expected an axis of size 1", x, labels(a)));
        drop[x] = true;
      }
      for (int64_t k = 0; k < r; ++k)
        if (!drop[k]) out += a[k];
    } else {
      const int64_t rank = r + int64_t(axes.size());
      std::vector<bool> ins(rank);
      for (int64_t x : axes) ins[norm(x, rank)] = true;
      for (int64_t k = 0, j = 0; k < rank; ++k) out += ins[k] ? '1' : a[j++];
    }
  } else {  // Reshape: sizes copied (0), inferred (-1), or given; only size-1 axes may change
    std::vector<Dim> shape;
    const Value& s = in(n, 1);
    if (s.kind == Value::Kind::constant) {
      if (!s.c.integer) fail("the shape is not integers");
      for (int64_t x : s.c.i) shape.push_back({0, x});
    } else if (s.kind == Value::Kind::dims) {
      shape = s.d;
    } else {
      fail("the shape is neither a constant nor computed from the frames' shape");
    }
    const bool allowzero = attr_int(n, "allowzero", 0) != 0;
    int64_t infer = -1;
    for (size_t k = 0; k < shape.size(); ++k) {
      const Dim& d = shape[k];
      char c;
      if (d.label)
        c = d.label;
      else if (d.value == 0 && !allowzero) {
        if (int64_t(k) >= r) fail("a 0 in the shape past the input's rank");
        c = a[k];
      } else if (d.value == -1) {
        if (infer >= 0) fail("the shape has two -1");
        infer = int64_t(k);
        c = '?';
      } else if (d.value == 1)
        c = '1';
      else
        c = '#';  // a known size: the features or the stacked layers
      out += c;
    }
    std::string in_core, out_core;
    for (char c : a)
      if (c != '1') in_core += c;
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k] == '1') continue;
      out_core += out[k];
    }
    // A bidirectional layer's two directions' features, next to each other, joined into one
    // axis of both (what torch.onnx.export writes after a bidirectional node).
    const size_t df = in_core.find("DF");
    const bool join = df != std::string::npos && out_core.size() + 1 == in_core.size();
    if (join) in_core.replace(df, 2, "F");
    // Each '#' and '?' takes the input's next non-1 axis in order, which must match its size.
    if (out_core.size() != in_core.size())
      fail(fmt::format("reshapes axes {} to {} axes: only axes of size 1 may come or go", labels(a),
                       out_core.size()));
    for (size_t k = 0, j = 0; k < out.size(); ++k) {
      if (out[k] == '1') continue;
      const char want = in_core[j++];
      if (out[k] == '#') {
        const int64_t size = shape[k].value;
        const int64_t have = label(want) == 'F' ? features(v) * (join ? 2 : 1)
                             : want == 'L'      ? int64_t(v.stacked.size())
                             : want == 'D'      ? 2
                                                : -1;
        if (size != have)
          fail(fmt::format("reshapes an axis ({}) to {}: only axes of size 1 may come or go",
                           label(want), size));
        out[k] = want;
      } else if (out[k] == '?') {
        out[k] = want;
      } else if (label(out[k]) != label(want)) {
        fail(fmt::format("reshapes axes {} to {}: only axes of size 1 may come or go", labels(a),
                         labels(out)));
      }
    }
  }
  v.axes = out;
  set(n, 0, v);
}

// Shape arithmetic on constants and on the frames' symbolic dimensions.
void Reader::arithmetic(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  const Value& v0 = in(n, 0);
  Value out;
  if (op == "Shape") {
    if (v0.kind == Value::Kind::signal || v0.kind == Value::Kind::state) {
      out.kind = Value::Kind::dims;
      for (char c : v0.axes) {
        const char l = label(c);
        if (l == 'F')
          out.d.push_back({0, features(v0)});
        else if (l == '1')
          out.d.push_back({0, 1});
        else if (l == 'L')
          out.d.push_back({0, int64_t(v0.stacked.size())});
        else if (l == 'D')
          out.d.push_back({0, 2});
        else
          out.d.push_back({c, 0});
      }
    } else if (v0.kind == Value::Kind::constant) {
      out.c.integer = true;
      out.c.dims = {int64_t(v0.c.dims.size())};
      out.c.i = v0.c.dims;
    } else if (v0.kind == Value::Kind::zeros) {
      out.kind = Value::Kind::dims;
      out.d = v0.d;
    } else {
      fail("Shape of a shape");
    }
    set(n, 0, out);
    return;
  }
  // Every input either a constant or dims: dims where any is.
  const auto as_dims = [&](const Value& v) {
    std::vector<Dim> d;
    if (v.kind == Value::Kind::dims) return v.d;
    if (v.kind != Value::Kind::constant || !v.c.integer)
      fail(fmt::format("expected a shape (integers), found {}",
                       v.kind == Value::Kind::signal ? "the frames" : "values"));
    for (int64_t x : v.c.i) d.push_back({0, x});
    return d;
  };
  if (op == "Gather") {
    const std::vector<int64_t> idx = ints(n, 1, "indices");
    const bool scalar = constant(n, 1, "indices").dims.empty();
    if (v0.kind == Value::Kind::dims ||
        (v0.kind == Value::Kind::constant && v0.c.integer && v0.c.dims.size() == 1)) {
      const std::vector<Dim> d = as_dims(v0);
      out.kind = Value::Kind::dims;
      for (int64_t k : idx) {
        if (k < -int64_t(d.size()) || k >= int64_t(d.size()))
          fail(fmt::format("index {} is out of range", k));
        out.d.push_back(d[k < 0 ? k + d.size() : k]);
      }
      out.scalar = scalar;
    } else {
      fail("Gather of something other than a shape or the frames' time axis");
    }
  } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Cast" || op == "Identity" ||
             op == "Reshape" || op == "Flatten") {
    if (v0.kind == Value::Kind::dims) {
      out = v0;
      out.scalar = op == "Squeeze" ? out.d.size() == 1 : false;
      if (op == "Unsqueeze" && !v0.scalar) fail("Unsqueeze of a shape (expected of one dimension)");
    } else if (v0.kind == Value::Kind::constant) {
      out = v0;
      if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten") {
        // Elements unchanged; the shape as the op says (only what the patterns need).
        if (op == "Unsqueeze") {
          out.c.dims.insert(out.c.dims.begin(), 1);
        } else if (op == "Squeeze") {
          out.c.dims.erase(std::remove(out.c.dims.begin(), out.c.dims.end(), 1), out.c.dims.end());
        } else if (op == "Reshape") {
          const std::vector<int64_t> s = ints(n, 1, "shape");
          int64_t known = 1, infer = -1;
          std::vector<int64_t> dims;
          for (size_t k = 0; k < s.size(); ++k) {
            int64_t x = s[k];
            if (x == 0) x = k < v0.c.dims.size() ? v0.c.dims[k] : 0;
            if (x == -1) {
              infer = int64_t(k);
              dims.push_back(1);
              continue;
            }
            if (x < 0) fail("a negative size in the shape");
            dims.push_back(x);
            known *= std::max<int64_t>(x, 1);
          }
          if (infer >= 0) dims[infer] = known ? v0.c.numel() / known : 0;
          out.c.dims = dims;
          if (checked_numel(dims, "Reshape") != v0.c.numel())
            fail("the shape does not hold the elements");
        } else {
          out.c.dims = {1, v0.c.numel()};
        }
      } else if (op == "Cast") {
        const int64_t to = attr_int(n, "to", 1);
        const bool integer = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32 ||
                             to == onnx::TensorProto::BOOL;
        if (integer && !v0.c.integer) {
          out.c.integer = true;
          for (double x : v0.c.f) out.c.i.push_back(int64_t(x));
          out.c.f.clear();
        } else if (!integer && v0.c.integer) {
          out.c.integer = false;
          for (int64_t x : v0.c.i) out.c.f.push_back(double(x));
          out.c.i.clear();
        }
      }
    } else if (v0.kind == Value::Kind::zeros && (op == "Cast" || op == "Identity")) {
      out = v0;
    } else {
      fail("expected a shape or a constant");
    }
  } else if (op == "Concat") {
    bool all_const = true;
    for (int k = 0; k < n.input_size(); ++k) all_const &= in(n, k).kind == Value::Kind::constant;
    if (all_const) {
      out.c.integer = true;
      for (int k = 0; k < n.input_size(); ++k) {
        const Const& c = in(n, k).c;
        if (!c.integer || c.dims.size() != 1) fail("Concat of constants other than 1-D integers");
        out.c.i.insert(out.c.i.end(), c.i.begin(), c.i.end());
      }
      out.c.dims = {int64_t(out.c.i.size())};
    } else {
      out.kind = Value::Kind::dims;
      for (int k = 0; k < n.input_size(); ++k) {
        const std::vector<Dim> d = as_dims(in(n, k));
        out.d.insert(out.d.end(), d.begin(), d.end());
      }
    }
  } else if (op == "ConstantOfShape" || op == "Expand") {
    double value = 0;
    std::vector<Dim> shape;
    if (op == "ConstantOfShape") {
      shape = as_dims(v0);
      if (const auto* a = attr(n, "value")) {
        const Const c = tensor(a->t(), "value");
        if (c.numel() != 1) fail("value must hold one element");
        value = c.at(0);
      }
    } else {
      shape = as_dims(in(n, 1));
      if (v0.kind == Value::Kind::zeros) {
        if (v0.c.numel() > 0) fail("Expand of an expanded constant");
        value = 0;
      } else {
        const Const& c = constant(n, 0, "input");
        bool zero = true;
        for (int64_t k = 0; k < c.numel(); ++k) zero &= c.at(k) == 0;
        if (!zero) {
          // A constant broadcast over the frames' batch (a stored initial state): kept with
          // the shape it is expanded to. Each of its axes is 1 or the shape's known size.
          if (c.integer || c.dims.size() != shape.size())
            fail("Expand of a constant other than a state of the same rank as the shape");
          for (size_t k = 0; k < shape.size(); ++k)
            if (c.dims[k] != 1 && (shape[k].label != 0 || shape[k].value != c.dims[k]))
              fail("Expand of a constant along an axis it does not have of size 1");
          out.kind = Value::Kind::zeros;
          out.d = shape;
          out.c = c;
          set(n, 0, out);
          return;
        }
      }
    }
    bool known = true;
    std::vector<int64_t> dims;
    for (const Dim& d : shape) known &= d.label == 0, dims.push_back(d.value);
    if (known && value != 0) {
      out.c.dims = dims;
      out.c.f.assign(checked_numel(dims, op), value);
    } else {
      if (value != 0)
        fail("a constant other than zeros of the frames' shape (expected a zero state)");
      out.kind = Value::Kind::zeros;
      out.d = shape;
      for (const Dim& d : shape)
        if (d.label == 0) checked_numel({d.value}, op);
    }
  } else if (op == "Slice") {
    if ((v0.kind != Value::Kind::zeros && v0.kind != Value::Kind::dims &&
         v0.kind != Value::Kind::constant) ||
        (v0.kind == Value::Kind::zeros && v0.c.numel() > 0))
      fail("Slice of something other than zeros, a shape or a constant");
    const std::vector<int64_t> starts = ints(n, 1, "starts"), ends = ints(n, 2, "ends");
    std::vector<int64_t> axes, steps;
    if (has(n, 3))
      axes = ints(n, 3, "axes");
    else
      for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
    if (has(n, 4)) steps = ints(n, 4, "steps");
    if (starts.size() != ends.size() || axes.size() != starts.size())
      fail("starts, ends and axes differ in length");
    out = v0;
    if (v0.kind == Value::Kind::constant) {  // e.g. one layer's initial state of a stack's
      const std::vector<int64_t>& dims = v0.c.dims;
      const int64_t rank = int64_t(dims.size());
      std::vector<int64_t> lo(dims.size(), 0), hi = dims;
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t ax = axes[k] < 0 ? axes[k] + rank : axes[k];
        if (ax < 0 || ax >= rank) fail("axis out of range");
        if (!steps.empty() && steps[k] != 1) fail("a step other than 1");
        int64_t st = starts[k], e = ends[k];
        if (st < 0) st += dims[ax];
        if (e < 0) e += dims[ax];
        lo[ax] = std::clamp<int64_t>(st, 0, dims[ax]);
        hi[ax] = std::max(lo[ax], std::clamp<int64_t>(e, 0, dims[ax]));
      }
      out.c = Const{};
      out.c.integer = v0.c.integer;
      for (int64_t k = 0; k < rank; ++k) out.c.dims.push_back(hi[k] - lo[k]);
      const int64_t total = checked_numel(out.c.dims, "Slice");
      // Each element of the slice: its index in the input, from its multi-index.
      for (int64_t e = 0; e < total; ++e) {
        int64_t rem = e, src = 0, stride = 1;
        std::vector<int64_t> at(static_cast<size_t>(rank));
        for (int64_t k = rank - 1; k >= 0; --k) {
          at[k] = lo[k] + rem % out.c.dims[k];
          rem /= out.c.dims[k];
        }
        for (int64_t k = rank - 1; k >= 0; --k) src += at[k] * stride, stride *= dims[k];
        if (out.c.integer)
          out.c.i.push_back(v0.c.i[src]);
        else
          out.c.f.push_back(v0.c.f[src]);
      }
    } else if (v0.kind == Value::Kind::dims) {
      if (axes.size() != 1 || (axes[0] != 0 && axes[0] != -1))
        fail("Slice of a shape along another axis than 0");
      const int64_t size = int64_t(v0.d.size());
      int64_t s = starts[0], e = ends[0];
      if (s < 0) s += size;
      if (e < 0) e += size;
      s = std::clamp<int64_t>(s, 0, size), e = std::clamp<int64_t>(e, 0, size);
      out.d.assign(v0.d.begin() + s, v0.d.begin() + std::max(s, e));
    } else {
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t ax = axes[k];
        const int64_t rank = int64_t(out.d.size());
        if (ax < 0) ax += rank;
        if (ax < 0 || ax >= rank) fail("axis out of range");
        if (!steps.empty() && steps[k] != 1) fail("a step other than 1");
        Dim& d = out.d[ax];
        if (d.label != 0) {
          if (starts[k] != 0 || ends[k] < std::numeric_limits<int64_t>::max() / 2)
            fail("Slice of the frames' time or batch axis");
          continue;
        }
        int64_t s = starts[k], e = ends[k];
        if (s < 0) s += d.value;
        if (e < 0) e += d.value;
        s = std::clamp<int64_t>(s, 0, d.value), e = std::clamp<int64_t>(e, 0, d.value);
        d.value = std::max<int64_t>(e - s, 0);
      }
    }
  } else {
    fail("unexpected op");
  }
  set(n, 0, out);
}

void Reader::node(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    fail(fmt::format("op domain \"{}\", expected the default ONNX domain", n.domain()));
  if (op == "Constant") {
    Value v;
    if (const auto* a = attr(n, "value"))
      v.c = tensor(a->t(), "value");
    else if (const auto* f = attr(n, "value_float"))
      v.c.f = {f->f()};
    else if (const auto* fs = attr(n, "value_floats")) {
      v.c.f.assign(fs->floats().begin(), fs->floats().end());
      v.c.dims = {int64_t(v.c.f.size())};
    } else if (const auto* i = attr(n, "value_int")) {
      v.c.integer = true;
      v.c.i = {i->i()};
    } else if (const auto* is = attr(n, "value_ints")) {
      v.c.integer = true;
      v.c.i.assign(is->ints().begin(), is->ints().end());
      v.c.dims = {int64_t(v.c.i.size())};
    } else
      fail("a Constant without value, value_float(s) or value_int(s)");
    set(n, 0, v);
    return;
  }
  if (op == "GRU" || op == "LSTM") return recurrent(n, op == "LSTM");
  if (op == "Tanh") return activation(n, ModelLayer::Activation::tanh);
  if (op == "Sigmoid") return activation(n, ModelLayer::Activation::sigmoid);
  if (op == "Relu") return activation(n, ModelLayer::Activation::relu);
  if (op == "Softmax") return activation(n, ModelLayer::Activation::softmax);
  if (op == "Elu") return activation(n, ModelLayer::Activation::elu);
  if (op == "Dropout" || op == "Identity") {
    const Value& v = in(n, 0);
    if (v.kind != Value::Kind::constant && v.kind != Value::Kind::dims) {
      set(n, 0, v);
      return;
    }
  }
  if (op == "Gemm") {
    if (attr_int(n, "transA", 0) != 0) fail("transA is 1, expected 0");
    const float alpha = attr(n, "alpha") ? attr(n, "alpha")->f() : 1.0f;
    const float beta = attr(n, "beta") ? attr(n, "beta")->f() : 1.0f;
    if (alpha != 1.0f || beta != 1.0f) fail("alpha or beta other than 1");
    if (labels(tip(n, 0).axes).size() != 2) fail("Gemm's input must be 2-D (batch, features)");
    return dense(n, constant(n, 1, "B"), attr_int(n, "transB", 0) != 0,
                 has(n, 2) ? &constant(n, 2, "C") : nullptr);
  }
  if (op == "MatMul") {
    const Value& a = in(n, 0);
    if (a.kind == Value::Kind::signal || a.kind == Value::Kind::state)
      return dense(n, constant(n, 1, "B"), false, nullptr);
  }
  if (op == "PRelu") {
    const Value x = tip(n, 0);
    const Const& slope = constant(n, 1, "slope");
    const int64_t F = features(x);
    if (slope.integer || slope.numel() != F)
      fail(fmt::format("the slope has {} values, expected one per feature ({})", slope.numel(), F));
    ModelLayer l;
    l.kind = ModelLayer::Kind::prelu;
    l.in_size = l.out_size = F;
    l.weight = Tensor::empty({F}, DType::f32);
    for (int64_t f = 0; f < F; ++f) l.weight.data<float>()[f] = float(slope.f[f]);
    set(n, 0, append(x, std::move(l)));
    return;
  }
  // Batch norm in inference, as Sub of the mean, Mul by the scale, Add of the shift (each a
  // constant per feature; the Mul and Add may be left out).
  const auto per_feature = [&](const Value& x, int k, const char* role) {
    const Const& c = constant(n, k, role);
    if (c.integer || c.numel() != features(x))
      fail(fmt::format("the {} has {} values, expected one per feature ({})", role, c.numel(),
                       features(x)));
    Tensor t = Tensor::empty({c.numel()}, DType::f32);
    for (int64_t f = 0; f < c.numel(); ++f) t.data<float>()[f] = float(c.f[f]);
    return t;
  };
  if (op == "Sub" && in(n, 0).kind == Value::Kind::signal) {
    const Value x = tip(n, 0);
    ModelLayer l;
    l.kind = ModelLayer::Kind::batchnorm;
    l.in_size = l.out_size = features(x);
    l.mean = per_feature(x, 1, "mean (Sub's second input)");
    l.weight = Tensor::full({l.out_size}, 1.0, DType::f32);
    l.bias = Tensor::zeros({l.out_size}, DType::f32);
    set(n, 0, append(x, std::move(l)));
    norm_layer_ = int64_t(spec_.layers.size()) - 1;
    norm_stage_ = 1;
    return;
  }
  if (op == "Mul" && in(n, 0).kind == Value::Kind::signal) {
    const Value x = tip(n, 0);
    if (norm_layer_ + 1 != int64_t(spec_.layers.size()) || norm_stage_ != 1)
      fail("Mul of the frames, expected a batch norm's scale right after its Sub of the mean");
    spec_.layers.back().weight = per_feature(x, 1, "scale (Mul's second input)");
    norm_stage_ = 2;
    set(n, 0, x);
    return;
  }
  if (op == "Slice" && in(n, 0).kind == Value::Kind::signal) {
    // The first features of the frames, for a skip connection that adds them back.
    const Value& v = in(n, 0);
    const std::vector<int64_t> starts = ints(n, 1, "starts"), ends = ints(n, 2, "ends");
    const std::vector<int64_t> axes = has(n, 3) ? ints(n, 3, "axes") : std::vector<int64_t>{};
    const int64_t rank = int64_t(v.axes.size());
    const bool ok = v.layers == 0 && !v.last_frame && v.prefix == 0 && starts.size() == 1 &&
                    ends.size() == 1 && axes.size() == 1 && starts[0] == 0 &&
                    (axes[0] == rank - 1 || axes[0] == -1) && ends[0] >= 1 &&
                    (!has(n, 4) || ints(n, 4, "steps") == std::vector<int64_t>{1});
    if (!ok)
      fail("Slice of the frames other than of their first features (the input of a skip Add)");
    Value o = v;
    o.prefix = std::min(ends[0], spec_.input_size);
    if (o.prefix == spec_.input_size) o.prefix = 0;
    set(n, 0, o);
    return;
  }
  if (op == "Add") {
    const Value& a = in(n, 0);
    const Value& b = in(n, 1);
    const Value* sig = a.kind == Value::Kind::signal   ? &a
                       : b.kind == Value::Kind::signal ? &b
                                                       : nullptr;
    const Value* other = sig == &a ? &b : &a;
    if (sig && other->kind == Value::Kind::constant) {
      // A bias after MatMul: the dense layer just appended takes it.
      const Value s = tip(n, sig == &a ? 0 : 1);
      if (norm_layer_ + 1 == int64_t(spec_.layers.size()) && norm_stage_ >= 1 &&
          norm_stage_ <= 2) {  // a batch norm's shift
        spec_.layers.back().bias = per_feature(s, sig == &a ? 1 : 0, "shift (Add's constant)");
        norm_stage_ = 3;
        set(n, 0, s);
        return;
      }
      if (spec_.layers.empty() || spec_.layers.back().kind != ModelLayer::Kind::dense ||
          spec_.layers.back().bias.defined())
        fail("Add of a constant to the frames, expected a bias right after MatMul");
      ModelLayer& l = spec_.layers.back();
      if (other->c.integer || other->c.numel() != l.out_size)
        fail(fmt::format("the bias has {} values, expected {}", other->c.numel(), l.out_size));
      l.bias = Tensor::empty({l.out_size}, DType::f32);
      for (int64_t o = 0; o < l.out_size; ++o) l.bias.data<float>()[o] = float(other->c.f[o]);
      set(n, 0, s);
      return;
    }
    if (a.kind == Value::Kind::signal && b.kind == Value::Kind::signal) {
      const bool a_tip = a.layers == spec_.layers.size();
      const Value& t = a_tip ? a : b;
      const Value& x = a_tip ? b : a;
      tip(n, a_tip ? 0 : 1);
      if (x.layers != 0 || spec_.skip != 0 || t.last_frame != x.last_frame ||
          labels(x.axes) != labels(t.axes) || features(x) != features(t))
        fail(
            "Add of two signals, expected the frames input added to the model's output "
            "(a skip connection of the same shape)");
      spec_.skip = features(t);
      Value o = t;
      set(n, 0, o);
      return;
    }
  }
  if (op == "Gather") {
    const Value& v = in(n, 0);
    if (v.kind == Value::Kind::signal) {
      const Value& s = tip(n, 0);
      const Const& idx = constant(n, 1, "indices");
      int64_t axis = attr_int(n, "axis", 0);
      const std::string ax = labels(s.axes);
      if (axis < 0) axis += int64_t(ax.size());
      if (axis < 0 || axis >= int64_t(ax.size()) || ax[axis] != 'T' || !idx.integer ||
          idx.numel() != 1 || idx.i[0] != -1)
        fail("Gather of the frames other than of the last time step (index -1 on the time axis)");
      Value o = s;
      o.last_frame = true;
      o.axes.erase(axis, 1);
      if (!idx.dims.empty()) o.axes.insert(o.axes.begin() + axis, '1');
      set(n, 0, o);
      return;
    }
  }
  if (op == "Concat") {
    const Value& v = in(n, 0);
    if (v.kind == Value::Kind::state) {
      int64_t axis = attr_int(n, "axis", 0);
      if (axis < 0) axis += int64_t(v.axes.size());
      Value o = v;
      o.stacked.clear();
      o.dirs.clear();
      for (int k = 0; k < n.input_size(); ++k) {
        const Value& s = in(n, k);
        if (s.kind != Value::Kind::state || s.cell != v.cell || labels(s.axes) != labels(v.axes) ||
            features(s) != features(v))
          fail("Concat of final states with something else (expected states of one kind and size)");
        o.stacked.insert(o.stacked.end(), s.stacked.begin(), s.stacked.end());
        o.dirs.insert(o.dirs.end(), s.dirs.begin(), s.dirs.end());
      }
      if (axis < 0 || axis >= int64_t(v.axes.size()) ||
          (v.axes[axis] != '1' && v.axes[axis] != 'L' && v.axes[axis] != 'D'))
        fail("Concat of final states along another axis than the layers'");
      for (int k = 1; k < n.input_size(); ++k)
        if (in(n, k).axes != v.axes) fail("Concat of final states of different layouts");
      o.axes[axis] = 'L';
      set(n, 0, o);
      return;
    }
  }
  if (op == "Transpose" || op == "Squeeze" || op == "Unsqueeze" || op == "Reshape" ||
      op == "Identity")
    return rename_axes(n);
  if (op == "Shape" || op == "Gather" || op == "Concat" || op == "ConstantOfShape" ||
      op == "Expand" || op == "Slice" || op == "Cast")
    return arithmetic(n);
  fail(
      "not an op grux reads (expected GRU, LSTM and the nodes exporters put around them: "
      "docs/format_onnx.md)");
}

void Reader::output(const onnx::ValueInfoProto& o) {
  where_ = fmt::format("graph output \"{}\"", o.name());
  auto it = values_.find(o.name());
  if (it == values_.end()) fail("no node makes it");
  const Value& v = it->second;
  ModelGraphOutput out;
  out.name = o.name();
  out.axes = labels(v.axes);
  if (v.kind == Value::Kind::signal) {
    if (v.layers != spec_.layers.size())
      fail(
          fmt::format("is the frames after {} of the model's {} layers; grux gives the last "
                      "layer's frames only",
                      v.layers, spec_.layers.size()));
    out.what = v.last_frame ? ModelGraphOutput::What::last_frame : ModelGraphOutput::What::frames;
  } else if (v.kind == Value::Kind::state) {
    out.what = v.cell ? ModelGraphOutput::What::cell : ModelGraphOutput::What::hidden;
    out.layers = v.stacked;
  } else {
    fail("is not computed from the frames (expected the model's output or final states)");
  }
  out.directions = v.dirs;
  for (char& c : out.axes)
    if (c != 'T' && c != 'N' && c != 'F' && c != 'L' && c != '1' && c != 'D')
      fail(fmt::format("has an axis ({}) that no recurrent node tells as time or batch", out.axes));
  spec_.graph.outputs.push_back(out);
}

ModelSpec Reader::read() {
  spec_.format = ModelFormat::onnx;
  const onnx::GraphProto& g = m_.graph();
  spec_.name = g.name();
  for (const auto& op : m_.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = op.version();
  if (opset_ < 7) fail(fmt::format("opset {}, expected 7 or later", opset_));
  for (const auto& t : g.initializer()) {
    where_ = fmt::format("initializer \"{}\"", t.name());
    Value v;
    v.c = tensor(t, t.name());
    values_[t.name()] = std::move(v);
  }
  where_.clear();
  bool frames = false;
  for (const auto& i : g.input()) {
    if (values_.count(i.name())) continue;  // an initializer listed as an input (IR < 4)
    where_ = fmt::format("graph input \"{}\"", i.name());
    if (frames) {  // not the frames (the first input): its values given
      auto given = given_.find(i.name());
      if (given == given_.end())
        fail(
            "is not the frames (the first input) and not given: grux needs its values in the "
            "file (an initializer) or given with the frames (grux model run --input NAME=X.npy)");
      Value v;
      v.c = from_given(given->second, i.name());
      values_[i.name()] = std::move(v);
      continue;
    }
    frames = true;
    const auto& type = i.type();
    if (!type.has_tensor_type() || (type.tensor_type().elem_type() != onnx::TensorProto::FLOAT &&
                                    type.tensor_type().elem_type() != onnx::TensorProto::DOUBLE))
      fail("the frames input is not a float tensor");
    const auto& shape = type.tensor_type().shape();
    if (shape.dim_size() < 2 || shape.dim_size() > 3)
      fail(fmt::format("the frames input has rank {}, expected 3 (or 2, one sequence)",
                       shape.dim_size()));
    const auto& last = shape.dim(shape.dim_size() - 1);
    if (!last.has_dim_value() || last.dim_value() < 1)
      fail("the frames input's last dimension (features) is not a known size");
    spec_.input_size = last.dim_value();
    Value v;
    v.kind = Value::Kind::signal;
    v.axes = shape.dim_size() == 3 ? "abF" : "aF";
    input_axes_ = v.axes;
    spec_.graph.input = i.name();
    values_[i.name()] = std::move(v);
  }
  if (!frames) {
    where_.clear();
    fail("the graph has no input of frames");
  }
  for (int k = 0; k < g.node_size(); ++k) {
    const auto& n = g.node(k);
    where_ = fmt::format("node {} \"{}\" ({})", k, n.name(), n.op_type());
    node(n);
  }
  bool any_recurrent = false;
  for (const auto& l : spec_.layers) any_recurrent |= l.recurrent();
  where_.clear();
  if (!any_recurrent) fail("no GRU or LSTM node (grux reads recurrent models)");
  for (const auto& o : g.output()) output(o);
  where_.clear();
  spec_.graph.input_axes = labels(input_axes_);
  if (spec_.graph.input_axes.find_first_of("ab") != std::string::npos)
    fail(fmt::format("the frames input's axes ({}) are not all told as time or batch",
                     spec_.graph.input_axes));
  if (spec_.graph.input_axes.find('N') == std::string::npos && input_axes_.size() == 3)
    fail("the frames input has three axes but none is the batch");
  return std::move(spec_);
}

}  // namespace

bool looks_like_onnx(const std::string& bytes) {
  // A ModelProto begins with a field of it: ir_version (1, varint: 0x08), opset_import (8,
  // 0x42), producer_name (2, 0x12) ... graph (7, 0x3a).
  if (bytes.empty()) return false;
  const unsigned char b = static_cast<unsigned char>(bytes[0]);
  return b == 0x08 || b == 0x12 || b == 0x1a || b == 0x22 || b == 0x2a || b == 0x32 || b == 0x3a ||
         b == 0x42;
}

ModelSpec read_onnx(const std::string& bytes, const std::string& what,
                    const std::map<std::string, Tensor>& given) {
  onnx::ModelProto m;
  if (bytes.size() > size_t(std::numeric_limits<int>::max()))
    throw Error(fmt::format("{}: {} bytes, over protobuf's limit of 2 GiB", what, bytes.size()));
  if (!m.ParseFromArray(bytes.data(), int(bytes.size())))
    throw Error(
        fmt::format("{}: not a valid ONNX model (protobuf could not parse it: truncated "
                    "or not ONNX)",
                    what));
  if (!m.has_graph()) throw Error(fmt::format("{}: an ONNX model without a graph", what));
  return Reader(m, what, given).read();
}

}  // namespace grux::formats
