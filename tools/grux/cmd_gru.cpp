// `grux gru`: the conformance command. Runs a GRU given PyTorch-keyed weights and .npy
// inputs, writes the outputs and (given upstream gradients) every gradient into --out.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "grux/gru.h"
#include "grux/io.h"

namespace grux::cli {

namespace {

struct GruArgs {
  std::string weights, input, out, h0, lengths, grad_output, grad_hn, precision = "f32";
  bool batch_first = false, reset_before = false;
};

void run_gru(const GruArgs& a) {
  const Precision prec = parse_precision(a.precision);
  if (prec != Precision::f32 && (!a.grad_output.empty() || !a.grad_hn.empty()))
    throw Error(
        fmt::format("--precision {} runs inference only; it cannot be combined with "
                    "--grad-output or --grad-hn",
                    a.precision));
  Tensor x = read_float_input(a.input);
  if (prec != Precision::f32 && x.dtype() != DType::f32)
    throw Error(fmt::format("{}: --precision {} takes float32 arrays and weights, not {}", a.input,
                            a.precision, dtype_name(x.dtype())));
  const SafeTensors st = read_weights(a.weights, x.dtype());
  GruConfig options;
  options.batch_first = a.batch_first;
  options.form = a.reset_before ? GruForm::reset_before : GruForm::linear_before_reset;
  Gru gru = [&] {
    try {
      return Gru::from_state_dict(st.tensors, options);
    } catch (const Error& e) {
      throw Error(a.weights + ": " + e.what());
    }
  }();
  Tensor h0 = read_optional_npy(a.h0), lengths = read_optional_npy(a.lengths);
  Tensor dy = read_optional_npy(a.grad_output), dhn = read_optional_npy(a.grad_hn);
  if (h0.defined()) check_float_dtype(a.h0, h0, x.dtype());
  if (dy.defined()) check_float_dtype(a.grad_output, dy, x.dtype());
  if (dhn.defined()) check_float_dtype(a.grad_hn, dhn, x.dtype());
  if (lengths.defined() && lengths.dtype() != DType::i64)
    throw Error(a.lengths + ": dtype " + std::string(dtype_name(lengths.dtype())) +
                ", expected i64 (int64)");

  const bool want_grads = dy.defined() || dhn.defined();
  GruTape tape;
  GruOutput y = want_grads               ? gru.forward_train(x, h0, lengths, tape)
                : prec == Precision::f32 ? gru.forward(x, h0, lengths)
                                         : GruInference(gru, prec).forward(x, h0, lengths);
  // The gradients' shapes are the results' (named by their files, not the engine's words).
  if (dy.defined() && dy.shape() != y.output.shape())
    throw Error(a.grad_output + ": --grad-output has shape " + shape_str(dy.shape()) +
                ", expected the output's " + shape_str(y.output.shape()));
  if (dhn.defined() && dhn.shape() != y.h_n.shape())
    throw Error(a.grad_hn + ": --grad-hn has shape " + shape_str(dhn.shape()) +
                ", expected h_n's " + shape_str(y.h_n.shape()));
  GruGrads g;
  if (want_grads) g = gru.backward(tape, dy, dhn);

  const std::filesystem::path out(output_dir(a.out));
  write_npy((out / "output.npy").string(), y.output);
  write_npy((out / "h_n.npy").string(), y.h_n);
  if (want_grads) {
    write_npy((out / "grad_input.npy").string(), g.dinput);
    write_safetensors((out / "grad_weights.safetensors").string(), g.state_dict(gru.config()));
    if (h0.defined()) write_npy((out / "grad_h0.npy").string(), g.dh0);
  }
}

}  // namespace

Action add_gru_command(CLI::App& app) {
  auto a = std::make_shared<GruArgs>();
  CLI::App* c = app.add_subcommand(
      "gru",
      "Run a GRU stack (PyTorch nn.GRU semantics) on .npy inputs; with --grad-output and/or "
      "--grad-hn also compute every gradient.\n"
      "Writes OUT/output.npy and OUT/h_n.npy; with gradients also OUT/grad_input.npy, "
      "OUT/grad_weights.safetensors and (with --h0) OUT/grad_h0.npy. The arrays' dtype "
      "(float32 or float64) decide the dtype; --precision bf16 or int8 runs the products in "
      "lower precision; a rank-2 input is unbatched (T, I). "
      "Bad input: one line on stderr, exit code 2.");
  c->add_option("--weights", a->weights,
                "safetensors file with nn.GRU state_dict keys (weight_ih_l0, ...); layers, "
                "directions, sizes and bias are inferred")
      ->required();
  c->add_option("--input", a->input,
                ".npy input: (T, N, I), (N, T, I) with --batch-first, or (T, I)")
      ->required();
  c->add_option("--out", a->out, "output directory (created if missing)")->required();
  c->add_option("--h0", a->h0, ".npy initial state (L*D, N, H) or (L*D, H); default zeros");
  c->add_option("--lengths", a->lengths,
                ".npy int64 lengths (N,), 1 <= len <= T, any order; rows at t >= len are zero");
  c->add_flag("--batch-first", a->batch_first, "input and output are (N, T, ...)");
  c->add_flag("--reset-before", a->reset_before,
              "candidate n = tanh(W_in x + b_in + W_hn (r*h) + b_hn) (ONNX default, TensorFlow) "
              "instead of PyTorch's linear-before-reset form");
  c->add_option("--precision", a->precision,
                "f32, bf16 or int8: the precision of the products with W_ih and W_hh "
                "(inference; bf16 and int8 take float32 arrays; docs/precision.md)")
      ->capture_default_str();
  c->add_option("--grad-output", a->grad_output, ".npy gradient of the loss w.r.t. output");
  c->add_option("--grad-hn", a->grad_hn, ".npy gradient of the loss w.r.t. h_n");
  return [a] { run_gru(*a); };
}

}  // namespace grux::cli
