// `grux conv2d` / `grux conv1d`: run a convolution (PyTorch F.conv2d / F.conv1d semantics) on
// .npy files; write the output and, given an upstream gradient, every gradient into --out.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>

#include "commands.h"
#include "grux/conv.h"
#include "grux/io.h"

namespace grux::cli {

namespace {

struct ConvArgs {
  int dims = 2;
  std::string input, weight, bias, grad_output, out;
  std::string stride = "1", padding = "0", dilation = "1", algo = "im2col";
  int64_t groups = 1;
};

// "2" (both dimensions) or "2,1" (height, width) for conv2d; "2" for conv1d.
Pair2 parse_spatial(const char* flag, const std::string& text, int dims) {
  static const std::regex one(R"(-?\d{1,9})"), two(R"((-?\d{1,9}),(-?\d{1,9}))");
  std::smatch m;
  if (std::regex_match(text, m, one)) return Pair2(std::stoll(text));
  if (dims == 2 && std::regex_match(text, m, two))
    return Pair2(std::stoll(m[1].str()), std::stoll(m[2].str()));
  throw Error(fmt::format("{} '{}' is malformed (expected {})", flag, text,
                          dims == 2 ? "an integer, or H,W such as 2,1" : "an integer"));
}

Tensor read_float(const std::string& path, DType want) {
  Tensor t = read_npy(path);
  if (t.dtype() != want)
    throw Error(
        fmt::format("{}: dtype {} does not match the input's {} (mixed dtypes are not "
                    "allowed)",
                    path, dtype_name(t.dtype()), dtype_name(want)));
  return t;
}

// The gradient's shape is the output's, reported under the option's name (the engine's
// message would name its own argument, doutput).
void check_grad_output(const std::string& path, const Tensor& dy, const Tensor& y) {
  if (dy.defined() && dy.shape() != y.shape())
    throw Error(fmt::format("{}: --grad-output has shape {}, expected the output's {}", path,
                            shape_str(dy.shape()), shape_str(y.shape())));
}

void run_conv(const ConvArgs& a) {
  const Pair2 stride = parse_spatial("--stride", a.stride, a.dims);
  const Pair2 padding = parse_spatial("--padding", a.padding, a.dims);
  const Pair2 dilation = parse_spatial("--dilation", a.dilation, a.dims);
  const ConvAlgo algo = parse_conv_algo(a.algo);
  Tensor x = read_npy(a.input);
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw Error(fmt::format("{}: dtype {}, expected f32 or f64", a.input, dtype_name(x.dtype())));
  Tensor w = read_float(a.weight, x.dtype());
  Tensor b = a.bias.empty() ? Tensor() : read_float(a.bias, x.dtype());
  Tensor dy = a.grad_output.empty() ? Tensor() : read_float(a.grad_output, x.dtype());

  Tensor y;
  ConvGrads g;
  if (a.dims == 2) {
    const Conv2dOptions o{stride, padding, dilation, a.groups, algo};
    y = conv2d_forward(x, w, b, o);
    check_grad_output(a.grad_output, dy, y);
    if (dy.defined()) g = conv2d_backward(x, w, dy, b.defined(), o);
  } else {
    const Conv1dOptions o{stride.w, padding.w, dilation.w, a.groups, algo};
    y = conv1d_forward(x, w, b, o);
    check_grad_output(a.grad_output, dy, y);
    if (dy.defined()) g = conv1d_backward(x, w, dy, b.defined(), o);
  }

  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec || !std::filesystem::is_directory(a.out))
    throw Error(a.out + ": cannot create output directory" + (ec ? ": " + ec.message() : ""));
  const std::filesystem::path out(a.out);
  write_npy((out / "output.npy").string(), y);
  if (dy.defined()) {
    write_npy((out / "grad_input.npy").string(), g.dinput);
    write_npy((out / "grad_weight.npy").string(), g.dweight);
    if (b.defined()) write_npy((out / "grad_bias.npy").string(), g.dbias);
  }
}

Action add_conv_command(CLI::App& app, int dims) {
  auto a = std::make_shared<ConvArgs>();
  a->dims = dims;
  const bool d2 = dims == 2;
  CLI::App* c = app.add_subcommand(
      d2 ? "conv2d" : "conv1d",
      fmt::format(
          "Run a {0} (PyTorch F.{0} semantics) on .npy inputs; with --grad-output also its "
          "gradients. Writes OUT/output.npy; with --grad-output also OUT/grad_input.npy, "
          "OUT/grad_weight.npy and (with --bias) OUT/grad_bias.npy. The arrays' dtype (float32 "
          "or float64) decides the precision. Bad input: one line on stderr, exit code 2.",
          d2 ? "conv2d" : "conv1d"));
  c->add_option("--input", a->input,
                d2 ? ".npy input (N, C, H, W), or (C, H, W) unbatched"
                   : ".npy input (N, C, L), or (C, L) unbatched")
      ->required();
  c->add_option("--weight", a->weight,
                d2 ? ".npy weight (D, C/groups, KH, KW)" : ".npy weight (D, C/groups, K)")
      ->required();
  c->add_option("--out", a->out, "output directory (created if missing)")->required();
  c->add_option("--bias", a->bias, ".npy bias (D); default none");
  const char* pair = d2 ? " (an integer, or H,W)" : "";
  c->add_option("--stride", a->stride, std::string("stride >= 1") + pair)->capture_default_str();
  c->add_option("--padding", a->padding, std::string("zero padding >= 0 on each side") + pair)
      ->capture_default_str();
  c->add_option("--dilation", a->dilation, std::string("dilation >= 1") + pair)
      ->capture_default_str();
  c->add_option("--groups", a->groups, "groups; C and D must be multiples")->capture_default_str();
  c->add_option("--algo", a->algo,
                "loops (reference), im2col (fast) or toeplitz (teaching; refuses matrices over "
                "256 MiB)")
      ->capture_default_str();
  c->add_option("--grad-output", a->grad_output,
                ".npy gradient of the loss w.r.t. the output (the output's shape)");
  return [a] { run_conv(*a); };
}

}  // namespace

Action add_conv2d_command(CLI::App& app) {
  return add_conv_command(app, 2);
}
Action add_conv1d_command(CLI::App& app) {
  return add_conv_command(app, 1);
}

}  // namespace grux::cli
