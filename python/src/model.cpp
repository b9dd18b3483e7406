// grux._grux: Model and ModelStream (model.h): a model file read and run. The Python class
// grux.Model (python/grux/_model.py) wraps these; this file holds no policy.
#include "grux/model.h"

#include <cstdint>
#include <string>

#include "convert.h"
#include "grux/error.h"

namespace py = pybind11;
using grux_py::from_array;
using grux_py::to_array;

namespace {

// A layer as a dict: its kind and sizes, the GRU's form, the activation, its tensors.
py::dict layer_dict(const grux::ModelLayer& l) {
  py::dict d;
  d["kind"] = l.kind_name();
  d["in_size"] = l.in_size;
  d["out_size"] = l.out_size;
  if (l.kind == grux::ModelLayer::Kind::gru) d["form"] = grux::gru_form_name(l.form);
  if (l.kind == grux::ModelLayer::Kind::activation)
    d["activation"] = grux::ModelLayer::activation_name(l.activation);
  if (l.recurrent()) {
    d["directions"] = l.directions;
    d["reverse"] = l.reverse;
    d["clip"] = l.clip;
    d["input_forget"] = l.input_forget;
  }
  py::dict t;
  const std::pair<const char*, const grux::Tensor*> tensors[] = {
      {"w_ih", &l.w_ih},         {"w_hh", &l.w_hh},      {"b_ih", &l.b_ih},
      {"b_hh", &l.b_hh},         {"h0", &l.h0},          {"c0", &l.c0},
      {"weight", &l.weight},     {"bias", &l.bias},      {"mean", &l.mean},
      {"peephole", &l.peephole}, {"lengths", &l.lengths}};
  for (const auto& [name, tensor] : tensors)
    if (tensor->defined()) t[name] = to_array(*tensor);
  d["tensors"] = t;
  return d;
}

}  // namespace

void grux_py::bind_model(py::module_& m) {
  py::class_<grux::Model>(m, "Model")
      .def(py::init([](const std::string& path, const py::dict& inputs) {
             std::map<std::string, grux::Tensor> given;
             for (const auto& [k, v] : inputs) {
               const std::string key = py::str(k).cast<std::string>();
               given[key] = from_array(v, ("inputs['" + key + "']").c_str(), true);
             }
             return grux::Model(grux::read_model(path, given));
           }),
           py::arg("path"), py::arg("inputs"))
      .def_property_readonly("input_size", &grux::Model::input_size)
      .def_property_readonly("output_size", &grux::Model::output_size)
      .def_property_readonly(
          "format", [](const grux::Model& md) { return grux::model_format_name(md.spec().format); })
      .def_property_readonly("sample_rate",
                             [](const grux::Model& md) { return md.spec().sample_rate; })
      .def_property_readonly("skip", [](const grux::Model& md) { return md.spec().skip; })
      .def_property_readonly("name", [](const grux::Model& md) { return md.spec().name; })
      .def_property_readonly("parameters",
                             [](const grux::Model& md) { return md.spec().parameters(); })
      .def_property_readonly("layers",
                             [](const grux::Model& md) {
                               py::list out;
                               for (const grux::ModelLayer& l : md.spec().layers)
                                 out.append(layer_dict(l));
                               return out;
                             })
      .def(
          "process",
          [](const grux::Model& md, const py::handle& x, int threads) {
            const grux::Tensor t = from_array(x, "x");
            grux::Tensor y;
            {
              py::gil_scoped_release release;
              y = md.process(t, threads);
            }
            return to_array(y);
          },
          py::arg("x"), py::arg("threads") = 0)
      .def_property_readonly("graph_input",
                             [](const grux::Model& md) { return md.spec().graph.input; })
      .def_property_readonly("graph_outputs",
                             [](const grux::Model& md) {
                               py::list out;
                               for (const auto& o : md.spec().graph.outputs) out.append(o.name);
                               return out;
                             })
      .def(
          "run",
          [](const grux::Model& md, const py::handle& x, int threads) {
            const grux::Tensor t = from_array(x, "x");
            std::vector<std::pair<std::string, grux::Tensor>> outs;
            {
              py::gil_scoped_release release;
              outs = grux::run_graph(md, t, threads);
            }
            py::dict d;
            for (const auto& [name, y] : outs) d[py::str(name)] = to_array(y);
            return d;
          },
          py::arg("x"), py::arg("threads") = 0)
      .def(
          "save",
          [](const grux::Model& md, const std::string& path) {
            grux::write_model(path, md.spec());
          },
          py::arg("path"))
      .def(
          "save_onnx",
          [](const grux::Model& md, const std::string& path) { grux::write_onnx(path, md.spec()); },
          py::arg("path"));

  py::class_<grux::ModelStream>(m, "ModelStream")
      .def(py::init([](const grux::Model& md, int64_t batch, const std::string& precision,
                       int threads, double sample_rate, const std::string& correction,
                       int64_t warmup_frames) {
             grux::ModelStreamOptions o;
             o.precision = grux::parse_precision(precision);
             o.threads = threads;
             o.sample_rate = sample_rate;
             o.correction = grux::parse_sample_rate_correction(correction);
             o.warmup_frames = warmup_frames;
             return grux::ModelStream(md, batch, o);
           }),
           py::arg("model"), py::arg("batch"), py::arg("precision"), py::arg("threads"),
           py::arg("sample_rate"), py::arg("correction"), py::arg("warmup_frames"))
      .def_property_readonly("rate_ratio", &grux::ModelStream::rate_ratio)
      .def(
          "step",
          [](grux::ModelStream& s, const py::handle& x) {
            const grux::Tensor t = from_array(x, "frames");
            grux::Tensor y;
            {
              py::gil_scoped_release release;
              y = s.step(t);
            }
            return to_array(y);
          },
          py::arg("frames"))
      .def("reset", &grux::ModelStream::reset)
      .def_property_readonly("batch", &grux::ModelStream::batch)
      .def_property_readonly("input_size", &grux::ModelStream::input_size)
      .def_property_readonly("output_size", &grux::ModelStream::output_size);
}
