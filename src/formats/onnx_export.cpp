// The ONNX writer (`grux model export-onnx`): a model description as an ONNX graph of opset 14
// that ONNX Runtime and onnx.checker accept and the ONNX reader (onnx.cpp) reads back to the same
// layers. The frames come in as "x" (time, batch, features), dynamic in time and batch; each
// recurrent layer is one GRU or LSTM node (gates reordered to ONNX's z, r, h and i, o, f, c; its
// output squeezed, or for two directions transposed and reshaped to both directions' features),
// a stored initial state expanded to the batch; a dense layer a MatMul and Add; activations
// their nodes; PReLU a PRelu; batch norm a Sub, Mul and Add; the skip an Add of the frames (or
// of their first features, sliced). The output is "y" (time, batch, features).
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "formats/readers.h"
#include "grux/error.h"
#include "grux/io.h"
#include "grux/model.h"
#include "grux/version.h"

namespace grux {
namespace {

class Writer {
 public:
  explicit Writer(onnx::GraphProto* g) : g_(g) {}

  void floats(const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<float>& values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  }
  void ints(const std::string& name, const std::vector<int64_t>& values, bool scalar = false) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(int64_t(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  onnx::NodeProto* node(const std::string& op, const std::string& name,
                        const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  static void attr(onnx::NodeProto* n, const char* name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const char* name, float v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto* n, const char* name, const std::string& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  // A float tensor value of (time, batch, features), named for the graph's inputs and outputs.
  static void frames(onnx::ValueInfoProto* v, const std::string& name, int64_t features) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* s = t->mutable_shape();
    s->add_dim()->set_dim_param("time");
    s->add_dim()->set_dim_param("batch");
    s->add_dim()->set_dim_value(features);
  }

 private:
  onnx::GraphProto* g_;
};

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// A recurrent tensor of one or two directions (rows of G blocks of H, `cols` wide each; cols 0:
// a bias) with its gate blocks in ONNX's order: block q of the result is grux's block order[q].
std::vector<float> onnx_gates(const Tensor& t, int64_t D, int64_t G, int64_t H, int64_t cols,
                              const int64_t* order) {
  const std::vector<float> v = values(t);
  const int64_t row = std::max<int64_t>(cols, 1), block = H * row;
  std::vector<float> out(v.size());
  for (int64_t d = 0; d < D; ++d)
    for (int64_t q = 0; q < G; ++q)
      std::copy_n(v.begin() + (d * G + order[q]) * block, block, out.begin() + (d * G + q) * block);
  return out;
}

}  // namespace

std::string serialize_onnx(const ModelSpec& spec) {
  spec.validate();
  bool recurrent = false;
  for (const ModelLayer& l : spec.layers) recurrent |= l.recurrent();
  if (!recurrent)
    throw Error(
        "export-onnx: the model has no GRU or LSTM layer (grux writes and reads recurrent "
        "models as ONNX)");
  onnx::ModelProto m;
  m.set_ir_version(7);  // what opset 14 needs; read by ONNX Runtime 1.8 and later
  m.set_producer_name("grux");
  m.set_producer_version(GRUX_VERSION_STRING);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(14);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(spec.name.empty() ? "grux_model" : spec.name);
  Writer w(g);
  Writer::frames(g->add_input(), "x", spec.input_size);
  static const int64_t gru_order[3] = {1, 0, 2}, lstm_order[4] = {0, 3, 1, 2};
  static const int64_t peephole_order[3] = {0, 2, 1};
  std::string cur = "x";
  bool batch_shape = false;  // "batch_dim": the frames' batch as a 1-D shape, for Expand
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const ModelLayer& l = spec.layers[k];
    const std::string p = fmt::format("layer{}", k), out = fmt::format("{}.y", p);
    switch (l.kind) {
      case ModelLayer::Kind::gru:
      case ModelLayer::Kind::lstm: {
        const bool lstm = l.kind == ModelLayer::Kind::lstm;
        if (l.lengths.defined())
          throw Error(fmt::format(
              "export-onnx: layer {} ({}) has sequence lengths bound when it was read: they are "
              "a run's input (ONNX's sequence_lens), not the model's",
              k, l.kind_name()));
        const int64_t D = l.directions, H = l.hidden_size(), G = lstm ? 4 : 3, I = l.in_size;
        const int64_t* order = lstm ? lstm_order : gru_order;
        w.floats(p + ".W", {D, G * H, I}, onnx_gates(l.w_ih, D, G, H, I, order));
        w.floats(p + ".R", {D, G * H, H}, onnx_gates(l.w_hh, D, G, H, H, order));
        std::vector<std::string> in = {cur, p + ".W", p + ".R"};
        if (l.b_ih.defined()) {
          const std::vector<float> bi = onnx_gates(l.b_ih, D, G, H, 0, order);
          const std::vector<float> bh = onnx_gates(l.b_hh, D, G, H, 0, order);
          std::vector<float> b;
          for (int64_t d = 0; d < D; ++d) {
            b.insert(b.end(), bi.begin() + d * G * H, bi.begin() + (d + 1) * G * H);
            b.insert(b.end(), bh.begin() + d * G * H, bh.begin() + (d + 1) * G * H);
          }
          w.floats(p + ".B", {D, 2 * G * H}, b);
          in.push_back(p + ".B");
        } else {
          in.push_back("");
        }
        in.push_back("");  // sequence_lens
        bool layer_shape = false;
        // A stored initial state: [D, 1, H] expanded to the run's batch; one for each of a
        // batch: [D, N, H] as it is.
        const auto state = [&](const Tensor& s, const std::string& name) {
          if (!s.defined()) return std::string();
          const bool each = s.dim() == (D == 2 ? 3 : 2);
          const int64_t N = each ? s.size(s.dim() - 2) : 1;
          w.floats(name, {D, N, H}, values(s));
          if (each) return name;
          if (!batch_shape) {
            w.node("Shape", "x_shape", {"x"}, {"x_shape"});
            w.ints("batch_axis", {1});
            w.node("Gather", "batch_dim", {"x_shape", "batch_axis"}, {"batch_dim"});
            batch_shape = true;
          }
          const std::string shape = p + ".state_shape";  // [D, batch, H], once a layer
          if (!layer_shape) {
            w.ints(p + ".D", {D});
            w.ints(p + ".H", {H});
            Writer::attr(w.node("Concat", shape, {p + ".D", "batch_dim", p + ".H"}, {shape}),
                         "axis", int64_t(0));
            layer_shape = true;
          }
          w.node("Expand", name + "_expand", {name, shape}, {name + "_batch"});
          return name + "_batch";
        };
        in.push_back(state(l.h0, p + ".initial_h"));
        if (lstm) {
          in.push_back(state(l.c0, p + ".initial_c"));
          if (l.peephole.defined()) {
            std::vector<float> pv = values(l.peephole), po(pv.size());
            for (int64_t d = 0; d < D; ++d)
              for (int64_t q = 0; q < 3; ++q)
                std::copy_n(pv.begin() + (d * 3 + peephole_order[q]) * H, H,
                            po.begin() + (d * 3 + q) * H);
            w.floats(p + ".P", {D, 3 * H}, po);
            in.push_back(p + ".P");
          }
        }
        while (!in.empty() && in.back().empty()) in.pop_back();
        onnx::NodeProto* n =
            w.node(lstm ? "LSTM" : "GRU", p + "." + l.kind_name(), in, {p + ".Y", p + ".Y_h"});
        Writer::attr(n, "hidden_size", H);
        Writer::attr(n, "direction",
                     std::string(D == 2      ? "bidirectional"
                                 : l.reverse ? "reverse"
                                             : "forward"));
        if (!lstm)
          Writer::attr(n, "linear_before_reset",
                       int64_t(l.form == GruForm::linear_before_reset ? 1 : 0));
        if (l.clip > 0) Writer::attr(n, "clip", l.clip);
        if (l.input_forget) Writer::attr(n, "input_forget", int64_t(1));
        if (D == 1) {
          w.ints(p + ".axis1", {1});
          w.node("Squeeze", p + ".squeeze", {p + ".Y", p + ".axis1"}, {out});
        } else {  // (T, 2, N, H) -> (T, N, 2, H) -> (T, N, 2 H)
          Writer::attr(w.node("Transpose", p + ".transpose", {p + ".Y"}, {p + ".Yt"}), "perm",
                       std::vector<int64_t>{0, 2, 1, 3});
          w.ints(p + ".shape", {0, 0, -1});
          w.node("Reshape", p + ".reshape", {p + ".Yt", p + ".shape"}, {out});
        }
        break;
      }
      case ModelLayer::Kind::dense: {
        const int64_t I = l.in_size, O = l.out_size;
        const std::vector<float> wv = values(l.weight);
        std::vector<float> wt(wv.size());  // (I, O): MatMul's
        for (int64_t o = 0; o < O; ++o)
          for (int64_t i = 0; i < I; ++i) wt[i * O + o] = wv[o * I + i];
        w.floats(p + ".weight", {I, O}, wt);
        if (l.bias.defined()) {
          w.node("MatMul", p + ".matmul", {cur, p + ".weight"}, {p + ".mm"});
          w.floats(p + ".bias", {O}, values(l.bias));
          w.node("Add", p + ".bias_add", {p + ".mm", p + ".bias"}, {out});
        } else {
          w.node("MatMul", p + ".matmul", {cur, p + ".weight"}, {out});
        }
        break;
      }
      case ModelLayer::Kind::activation: {
        static const char* ops[] = {"Tanh", "Relu", "Sigmoid", "Softmax", "Elu"};
        onnx::NodeProto* n = w.node(ops[int(l.activation)], p + ".activation", {cur}, {out});
        if (l.activation == ModelLayer::Activation::softmax) Writer::attr(n, "axis", int64_t(-1));
        break;
      }
      case ModelLayer::Kind::prelu:
        w.floats(p + ".slope", {l.out_size}, values(l.weight));
        w.node("PRelu", p + ".prelu", {cur, p + ".slope"}, {out});
        break;
      case ModelLayer::Kind::batchnorm:
        w.floats(p + ".mean", {l.out_size}, values(l.mean));
        w.floats(p + ".scale", {l.out_size}, values(l.weight));
        w.floats(p + ".shift", {l.out_size}, values(l.bias));
        w.node("Sub", p + ".sub", {cur, p + ".mean"}, {p + ".centered"});
        w.node("Mul", p + ".mul", {p + ".centered", p + ".scale"}, {p + ".scaled"});
        w.node("Add", p + ".add", {p + ".scaled", p + ".shift"}, {out});
        break;
    }
    cur = out;
  }
  if (spec.skip > 0) {
    std::string added = "x";
    if (spec.skip < spec.input_size) {  // the first `skip` features of the frames
      w.ints("skip.starts", {0});
      w.ints("skip.ends", {spec.skip});
      w.ints("skip.axes", {2});
      w.node("Slice", "skip.slice", {"x", "skip.starts", "skip.ends", "skip.axes"}, {"skip.x"});
      added = "skip.x";
    }
    w.node("Add", "skip.add", {cur, added}, {"skip.y"});
    cur = "skip.y";
  }
  w.node("Identity", "output", {cur}, {"y"});
  Writer::frames(g->add_output(), "y", spec.output_size());
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw Error("export-onnx: protobuf could not write the model");
  return bytes;
}

void write_onnx(const std::string& path, const ModelSpec& spec) {
  write_file_atomic(path, serialize_onnx(spec));
}

}  // namespace grux
