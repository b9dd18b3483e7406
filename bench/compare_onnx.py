# ONNX models in grux against the same models in PyTorch, in one run: a module is exported by
# torch.onnx.export, loaded by grux.load, and timed beside the same model converted to
# safetensors (`Model.save`: grux's own file, the same kernels expected) and beside the module
# itself in PyTorch.
"""Usage (from the repository root, after building with -DGRUX_BUILD_PYTHON=ON):

    env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/compare_onnx.py [--reps 7] [--threads 1]
        [--pythonpath build/python]

Rows (f32, inputs uniform in [-1, 1], zero initial states, weights seeded):
  proteus      GuitarML's Proteus: nn.LSTM(1, 40) + Linear(40, 1), one sequence of 48,000
               frames, whole (grux Model.process; PyTorch module(x) under inference_mode).
  proteus-1f   the same model one frame a call, 4,800 calls: a grux ModelStream.step loop
               against the module called on one frame with its state carried (PyTorch's
               streaming idiom).
  gru-2x128    nn.GRU(64, 128, num_layers=2) + Linear(128, 10), 200 frames of 32 sequences.
  bigru-128    nn.GRU(64, 128, bidirectional=True) + Linear(256, 10), 200 frames of 32
               sequences (runs on whole sequences).
Columns: the median time of --reps runs of each; onnx/safetensors (1.00 expected: the same
kernels); PyTorch / grux ONNX (the speed-up). Progress to stderr, the Markdown table to stdout.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def median_ms(fn, reps):
    fn()  # warm up: first-touch of buffers, packing
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"))
    a = ap.parse_args()
    sys.path.insert(0, a.pythonpath)
    import numpy as np
    import torch

    import grux

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    class Head(torch.nn.Module):
        def __init__(self, rnn, out):
            super().__init__()
            width = rnn.hidden_size * (2 if rnn.bidirectional else 1)
            self.rnn, self.lin = rnn, torch.nn.Linear(width, out)

        def forward(self, x, state=None):
            y, s = self.rnn(x, state)
            return self.lin(y), s

    class Frames(torch.nn.Module):  # the exported graph: frames in, frames out
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

    rows = [
        ("proteus", Head(torch.nn.LSTM(1, 40), 1), (48000, 1, 1), "whole"),
        ("proteus-1f", Head(torch.nn.LSTM(1, 40), 1), (4800, 1, 1), "frames"),
        ("gru-2x128", Head(torch.nn.GRU(64, 128, num_layers=2), 10), (200, 32, 64), "whole"),
        ("bigru-128", Head(torch.nn.GRU(64, 128, bidirectional=True), 10), (200, 32, 64), "whole"),
    ]
    rng = np.random.default_rng(0)
    print("| model | shape | grux ONNX (ms) | grux safetensors (ms) | onnx / safetensors | "
          "PyTorch (ms) | PyTorch / grux ONNX |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, module, shape, mode in rows:
            print(f"{name} ...", file=sys.stderr)
            module.eval()
            path = os.path.join(tmp, name + ".onnx")
            with torch.no_grad():
                torch.onnx.export(Frames(module), (torch.zeros(5, shape[1], shape[2]),), path,
                                  input_names=["x"], output_names=["y"], opset_version=14,
                                  dynamic_axes={"x": {0: "T", 1: "N"}})
            onnx_model = grux.load(path)
            onnx_model.save(os.path.join(tmp, name + ".safetensors"))
            st_model = grux.load(os.path.join(tmp, name + ".safetensors"))
            x = rng.uniform(-1, 1, shape).astype(np.float32)
            xt = torch.from_numpy(x)
            with torch.inference_mode():
                want = module(xt)[0].numpy()
            got = onnx_model.process(x, a.threads)
            err = float(np.abs(got - want).max())
            if err > 1e-4:
                raise SystemExit(f"{name}: grux and PyTorch differ by {err}")
            if mode == "whole":
                t_onnx = median_ms(lambda: onnx_model.process(x, a.threads), a.reps)
                t_st = median_ms(lambda: st_model.process(x, a.threads), a.reps)

                def torch_run():
                    with torch.inference_mode():
                        module(xt)
            else:
                def stream_loop(m):
                    s = m.stream(1)
                    for t in range(shape[0]):
                        s.step(x[t])

                t_onnx = median_ms(lambda: stream_loop(onnx_model), a.reps)
                t_st = median_ms(lambda: stream_loop(st_model), a.reps)

                def torch_run():
                    with torch.inference_mode():
                        state = None
                        for t in range(shape[0]):
                            _, state = module(xt[t:t + 1], state)
            t_torch = median_ms(torch_run, a.reps)
            desc = "x".join(str(d) for d in shape) + (" one frame a call" if mode == "frames" else "")
            print(f"| {name} | {desc} | {t_onnx:.2f} | {t_st:.2f} | {t_onnx / t_st:.2f} | "
                  f"{t_torch:.2f} | {t_torch / t_onnx:.1f}x |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
