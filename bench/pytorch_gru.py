# Peer benchmark: a GRU stack through PyTorch (nn.GRU / nn.GRUCell, Debian's python3-torch), timed
# the way `grux bench gru` times grux; prints one JSON line per problem (see bench/README.md).
# With --lstm the same for an LSTM (nn.LSTM / nn.LSTMCell, as `grux bench lstm`): 4 gates in
# place of 3 in the flops, the cell's state (h, c).
#
# Run with Debian's interpreter, which has torch:  /usr/bin/python3 bench/pytorch_gru.py DESCRIPTOR
#   [--train] [--cell] [--lengths uniform:LO:HI:SEED | --lengths FILE.npy] [--threads K] [--reps R]
#   [--warmup W] [--dtype f32|f64] [--precision f32|bf16|int8] [--lstm]
# DESCRIPTOR is l{L}d{D}t{T}n{N}i{I}h{H} (missing l/d default to 1); sizes T N I H L D as there.
# Modes (h0 = 0 everywhere, weights with nn.GRU's default init, input uniform [-1, 1]):
#   inference  nn.GRU forward under torch.inference_mode().
#   train      nn.GRU forward + backward of a fixed random upstream gradient, gradients w.r.t.
#              the input and every weight (grads reset to None before each step, as
#              optimizer.zero_grad(set_to_none=True) does).
#   cell       T successive nn.GRUCell calls on one (N, I) frame each, the state carried (one cell
#              per layer, D must be 1), under torch.inference_mode(): the streaming use, W1.
#   --lengths  sequences of the batch have lengths drawn with Python's random module:
#              rng = random.Random(SEED); lengths = [rng.randint(LO, HI) for _ in range(N)]
#              (inclusive bounds; HI <= T); FILE.npy gives the N lengths instead. The padded
#              (T, N, I) input is packed once, outside the timed region, with
#              pack_padded_sequence(enforce_sorted=False); the timed call is nn.GRU(packed).
#   --precision (inference only) bf16: the module and the input in torch.bfloat16 (PyTorch's
#              CPU bf16 GRU); int8: torch.ao.quantization.quantize_dynamic(..., {nn.GRU},
#              torch.qint8) on the f32 module (the dynamically quantized GRU, weights int8 per
#              tensor, activations quantized per call) with the default quantized engine.
# GEMM flops as in WORKLOADS.md: 2*N*T*3H*(C_l + H) per layer and direction (C_0 = I, C_l = D*H
# above), x3 for train; with lengths sum(lengths) replaces N*T. gflops = flops / median time.
import argparse
import json
import random
import re
import statistics
import sys
import time


def fail(msg):
    print(f"pytorch_gru: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_descriptor(s):
    m = re.fullmatch(r"(?:l(\d+))?(?:d(\d+))?t(\d+)n(\d+)i(\d+)h(\d+)", s)
    if not m:
        fail(f"DESCRIPTOR expects l{{L}}d{{D}}t{{T}}n{{N}}i{{I}}h{{H}}, got '{s}'")
    L, D, T, N, I, H = (int(g) if g is not None else 1 for g in m.groups())
    if min(L, D, T, N, I, H) < 1 or D > 2:
        fail(f"sizes must be >= 1 and D in {{1, 2}}, got '{s}'")
    return L, D, T, N, I, H


def draw_lengths(spec, N, T):
    """Returns (lengths list, problem-name suffix) for --lengths SPEC."""
    m = re.fullmatch(r"uniform:(\d+):(\d+):(\d+)", spec)
    if m:
        lo, hi, seed = map(int, m.groups())
        if not 1 <= lo <= hi <= T:
            fail(f"--lengths needs 1 <= LO <= HI <= T={T}, got '{spec}'")
        rng = random.Random(seed)
        return [rng.randint(lo, hi) for _ in range(N)], f"_len{lo}-{hi}s{seed}"
    if spec.endswith(".npy"):
        import numpy as np
        lengths = [int(x) for x in np.load(spec).reshape(-1)]
        if len(lengths) != N or not all(1 <= x <= T for x in lengths):
            fail(f"{spec} must hold N={N} lengths in [1, {T}]")
        stem = spec.rsplit("/", 1)[-1][: -len(".npy")]
        return lengths, f"_len{stem}"
    fail(f"--lengths expects uniform:LO:HI:SEED or FILE.npy, got '{spec}'")


def main():
    ap = argparse.ArgumentParser(description="PyTorch GRU peer benchmark (one JSON line).")
    ap.add_argument("descriptor")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--cell", action="store_true")
    ap.add_argument("--lengths")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--precision", choices=["f32", "bf16", "int8"], default="f32")
    ap.add_argument("--lstm", action="store_true", help="nn.LSTM / nn.LSTMCell instead")
    a = ap.parse_args()
    if a.precision != "f32" and (a.train or a.cell or a.dtype != "f32"):
        ap.error("--precision bf16/int8 times f32 inference of the whole sequence only")
    if a.train and a.cell:
        ap.error("--train and --cell are exclusive")
    if a.threads < 1 or a.reps < 1 or a.warmup < 0:
        ap.error("--threads and --reps must be >= 1, --warmup >= 0")
    L, D, T, N, I, H = parse_descriptor(a.descriptor)
    if a.cell and (D != 1 or a.lengths):
        ap.error("--cell needs D = 1 and no --lengths")
    lengths, suffix = draw_lengths(a.lengths, N, T) if a.lengths else (None, "")
    mode = "train" if a.train else "cell" if a.cell else "inference"

    import torch
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = torch.float64 if a.dtype == "f64" else torch.float32
    x = torch.rand(T, N, I, dtype=dtype) * 2 - 1

    if mode == "cell":
        Cell = torch.nn.LSTMCell if a.lstm else torch.nn.GRUCell
        cells = [Cell(I if l == 0 else H, H).to(dtype) for l in range(L)]
        h0 = torch.zeros(N, H, dtype=dtype)
        if a.lstm:
            h0 = (h0, h0)
        frames = list(x.unbind(0))  # views, made once: the stream hands over one frame per call

        def step():
            with torch.inference_mode():
                hs = [h0] * L
                for frame in frames:
                    inp = frame
                    for l, cell in enumerate(cells):
                        hs[l] = cell(inp, hs[l])
                        inp = hs[l][0] if a.lstm else hs[l]
                return inp
    else:
        Module = torch.nn.LSTM if a.lstm else torch.nn.GRU
        gru = Module(I, H, num_layers=L, bidirectional=D == 2).to(dtype)
        src = x
        if lengths is not None:
            src = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
        if a.precision == "bf16":
            gru = gru.to(torch.bfloat16)
            src = src.to(torch.bfloat16)
        elif a.precision == "int8":
            gru = torch.ao.quantization.quantize_dynamic(
                torch.nn.Sequential(gru), {Module}, dtype=torch.qint8)[0]
        if mode == "inference":
            def step():
                with torch.inference_mode():
                    return gru(src)[0]
        else:
            if lengths is not None:
                src = src._replace(data=src.data.detach().requires_grad_())
                leaf = src.data
            else:
                src = src.detach().requires_grad_()
                leaf = src
            with torch.no_grad():
                out = gru(src)[0]
                grad_out = torch.rand_like(out.data if lengths is not None else out) * 2 - 1

            def step():
                leaf.grad = None
                for p in gru.parameters():
                    p.grad = None
                out = gru(src)[0]
                (out.data if lengths is not None else out).backward(grad_out)
                return leaf.grad

    # Validate once (finite result), warm up, then time.
    result = step()
    if not torch.isfinite(result.data if hasattr(result, "batch_sizes") else result).all():
        print(f"pytorch_gru: non-finite result on {a.descriptor}", file=sys.stderr)
        return 1
    for _ in range(max(0, a.warmup - 1)):
        step()
    ms = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)

    rows = sum(lengths) if lengths is not None else N * T
    gates = 4 if a.lstm else 3
    flops = sum(D * 2.0 * rows * gates * H * ((I if l == 0 else D * H) + H) for l in range(L))
    if mode == "train":
        flops *= 3
    median = statistics.median(ms)
    print(json.dumps({
        "op": "lstm" if a.lstm else "gru", "peer": "pytorch",
        "problem": f"l{L}d{D}t{T}n{N}i{I}h{H}{suffix}", "mode": mode,
        "threads": a.threads, "dtype": a.dtype, "precision": a.precision, "reps": a.reps,
        "median_ms": round(median, 4), "min_ms": round(min(ms), 4),
        "gflops": round(flops / (median * 1e6), 3),
    }, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
