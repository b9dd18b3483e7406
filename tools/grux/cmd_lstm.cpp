// `grux lstm`: the conformance command of the LSTM. Runs an LSTM given PyTorch-keyed weights
// and .npy inputs, writes the outputs and (given upstream gradients) every gradient into --out.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "grux/io.h"
#include "grux/lstm.h"

namespace grux::cli {

namespace {

struct LstmArgs {
  std::string weights, input, out, h0, c0, lengths, grad_output, grad_hn, grad_cn;
  bool batch_first = false;
};

void run_lstm(const LstmArgs& a) {
  const Tensor x = read_float_input(a.input);
  const SafeTensors st = read_weights(a.weights, x.dtype());
  LstmConfig options;
  options.batch_first = a.batch_first;
  const Lstm lstm = [&] {
    try {
      return Lstm::from_state_dict(st.tensors, options);
    } catch (const Error& e) {
      throw Error(a.weights + ": " + e.what());
    }
  }();
  const Tensor h0 = read_optional_npy(a.h0), c0 = read_optional_npy(a.c0),
               lengths = read_optional_npy(a.lengths);
  const Tensor dy = read_optional_npy(a.grad_output), dhn = read_optional_npy(a.grad_hn),
               dcn = read_optional_npy(a.grad_cn);
  for (auto [path, t] : {std::pair{&a.h0, &h0},
                         {&a.c0, &c0},
                         {&a.grad_output, &dy},
                         {&a.grad_hn, &dhn},
                         {&a.grad_cn, &dcn}})
    if (t->defined()) check_float_dtype(*path, *t, x.dtype());
  if (lengths.defined() && lengths.dtype() != DType::i64)
    throw Error(a.lengths + ": dtype " + std::string(dtype_name(lengths.dtype())) +
                ", expected i64 (int64)");
  // The engine's messages name its arguments; the user gave files: name those too.
  const auto named = [&](auto&& f) {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(fmt::format(
          "{} (files: --input {}{}{}{})", e.what(), a.input, a.h0.empty() ? "" : " --h0 " + a.h0,
          a.c0.empty() ? "" : " --c0 " + a.c0, a.lengths.empty() ? "" : " --lengths " + a.lengths));
    }
  };
  const bool want_grads = dy.defined() || dhn.defined() || dcn.defined();
  LstmTape tape;
  const LstmOutput y = named([&] {
    return want_grads ? lstm.forward_train(x, h0, c0, lengths, tape)
                      : lstm.forward(x, h0, c0, lengths);
  });
  // The gradients' shapes are the results' (named by their files, not the engine's words).
  for (auto [path, flag, t, like, what] :
       {std::tuple{&a.grad_output, "--grad-output", &dy, &y.output, "the output's"},
        {&a.grad_hn, "--grad-hn", &dhn, &y.h_n, "h_n's"},
        {&a.grad_cn, "--grad-cn", &dcn, &y.c_n, "c_n's"}})
    if (t->defined() && t->shape() != like->shape())
      throw Error(fmt::format("{}: {} has shape {}, expected {} {}", *path, flag,
                              shape_str(t->shape()), what, shape_str(like->shape())));
  LstmGrads g;
  if (want_grads) g = lstm.backward(tape, dy, dhn, dcn);

  const std::filesystem::path out(output_dir(a.out));
  write_npy((out / "output.npy").string(), y.output);
  write_npy((out / "h_n.npy").string(), y.h_n);
  write_npy((out / "c_n.npy").string(), y.c_n);
  if (want_grads) {
    write_npy((out / "grad_input.npy").string(), g.dinput);
    write_safetensors((out / "grad_weights.safetensors").string(), g.state_dict(lstm.config()));
    if (h0.defined()) write_npy((out / "grad_h0.npy").string(), g.dh0);
    if (c0.defined()) write_npy((out / "grad_c0.npy").string(), g.dc0);
  }
}

}  // namespace

Action add_lstm_command(CLI::App& app) {
  auto a = std::make_shared<LstmArgs>();
  CLI::App* c = app.add_subcommand(
      "lstm",
      "Run an LSTM stack (PyTorch nn.LSTM semantics, proj_size included) on .npy inputs; with "
      "--grad-output, --grad-hn and/or --grad-cn also compute every gradient.\n"
      "Writes OUT/output.npy, OUT/h_n.npy and OUT/c_n.npy; with gradients also "
      "OUT/grad_input.npy, OUT/grad_weights.safetensors and (with --h0 / --c0) OUT/grad_h0.npy "
      "/ OUT/grad_c0.npy. The arrays' dtype (float32 or float64) decides the dtype; a rank-2 "
      "input is unbatched (T, I). Bad input: one line on stderr, exit code 2, nothing written.");
  c->add_option("--weights", a->weights,
                "safetensors file with nn.LSTM state_dict keys (weight_ih_l0, weight_hr_l0, ...); "
                "layers, directions, sizes, bias and proj_size are inferred")
      ->required();
  c->add_option("--input", a->input,
                ".npy input: (T, N, I), (N, T, I) with --batch-first, or (T, I)")
      ->required();
  c->add_option("--out", a->out, "output directory (created if missing)")->required();
  c->add_option("--h0", a->h0,
                ".npy initial h (L*D, N, H_out) or (L*D, H_out), H_out = proj_size or H; "
                "default zeros");
  c->add_option("--c0", a->c0, ".npy initial c (L*D, N, H) or (L*D, H); default zeros");
  c->add_option("--lengths", a->lengths,
                ".npy int64 lengths (N,), 1 <= len <= T, any order; rows at t >= len are zero");
  c->add_flag("--batch-first", a->batch_first, "input and output are (N, T, ...)");
  c->add_option("--grad-output", a->grad_output, ".npy gradient of the loss w.r.t. output");
  c->add_option("--grad-hn", a->grad_hn, ".npy gradient of the loss w.r.t. h_n");
  c->add_option("--grad-cn", a->grad_cn, ".npy gradient of the loss w.r.t. c_n");
  return [a] { run_lstm(*a); };
}

}  // namespace grux::cli
