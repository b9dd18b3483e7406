# The precision table: grux's GRU inference in f32, bf16 and int8 against oneDNN's and
# PyTorch's at the same precisions, in one run, grux's training step (W4) in f32 and bf16,
# and the error of each precision against PyTorch's f32 output on the same weights and inputs.
#
#   /usr/bin/python3 bench/compare_precision.py [--reps R] [--threads 1,2] [--only W3,W2]
#       [--grux build/grux] [--onednn build/bench/onednn_gru] [--json OUT.jsonl]
#
# Speed (medians of R runs, best thread setting each): `grux bench gru DESC --prepacked
# --precision P` (the weights packed or converted once before timing, as oneDNN's reorders
# are), `bench/pytorch_gru.py DESC --precision P`, `onednn_gru DESC --precision P` (see each
# for what its precision means). oneDNN 2.6 has no int8 linear-before-reset GRU: "n/a".
# Accuracy: nn.GRU's default initialization (seed 0) and an input uniform in [-1, 1]; the
# f32 output of nn.GRU is the reference; grux runs `grux gru --precision P` on the same
# weights and input (files), PyTorch its bf16 module and its dynamically quantized GRU.
# Reported: the largest absolute difference of the output and its RMS over all elements.
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare import DISTURBED_CORES, measure, wait_until_quiet  # noqa: E402

WORKLOADS = [  # id, descriptor (../shared/WORKLOADS.md)
    ("W2", "l1d1t1000n1i128h256"),
    ("W3", "l1d1t100n64i256h512"),
    ("W4", "l1d1t100n64i256h512"),  # a training step: forward + backward
    ("W5", "l2d2t200n32i128h256"),
]
TRAINING = {"W4"}  # grux only: neither peer trains a GRU in bf16
PRECISIONS = ["f32", "bf16", "int8"]
TRAIN_PRECISIONS = ["f32", "bf16"]
# The precision targets: (workload, precision) -> minimum speed-up over grux f32.
TARGETS = {("W3", "bf16"): 1.7, ("W3", "int8"): 2.5, ("W2", "bf16"): 1.7, ("W2", "int8"): 3.0,
           ("W4", "bf16"): 1.5, ("W5", "bf16"): 1.6, ("W5", "int8"): 2.2}


def write_safetensors(path, tensors):
    """A safetensors file of float32 arrays (numpy), keys sorted."""
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        b = tensors[k].astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def accuracy(desc, grux):
    """{precision: (max abs diff, rms)} for grux and PyTorch, against PyTorch's f32 output."""
    import numpy as np
    import torch

    L, D, T, N, I, H = parse(desc)
    torch.manual_seed(0)
    gru = torch.nn.GRU(I, H, num_layers=L, bidirectional=D == 2)
    x = torch.rand(T, N, I) * 2 - 1
    with torch.inference_mode():
        ref = gru(x)[0].numpy().astype(np.float64)
        out = {}

        def err(y):
            d = np.asarray(y, dtype=np.float64) - ref
            return float(np.abs(d).max()), float(np.sqrt((d * d).mean()))

        gb = torch.nn.GRU(I, H, num_layers=L, bidirectional=D == 2).to(torch.bfloat16)
        gb.load_state_dict({k: v.to(torch.bfloat16) for k, v in gru.state_dict().items()})
        out[("pytorch", "bf16")] = err(gb(x.to(torch.bfloat16))[0].float().numpy())
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(gru), {torch.nn.GRU},
                                                   dtype=torch.qint8)[0]
        out[("pytorch", "int8")] = err(q(x)[0].numpy())
    with tempfile.TemporaryDirectory() as tmp:
        write_safetensors(os.path.join(tmp, "w.safetensors"),
                          {k: v.detach().numpy() for k, v in gru.state_dict().items()})
        np.save(os.path.join(tmp, "x.npy"), x.numpy())
        for p in PRECISIONS:
            o = os.path.join(tmp, "out_" + p)
            subprocess.run([grux, "gru", "--weights", os.path.join(tmp, "w.safetensors"),
                            "--input", os.path.join(tmp, "x.npy"), "--out", o, "--precision", p],
                           check=True, capture_output=True)
            out[("grux", p)] = err(np.load(os.path.join(o, "output.npy")))
    return out


def parse(desc):
    import re
    m = re.fullmatch(r"l(\d+)d(\d+)t(\d+)n(\d+)i(\d+)h(\d+)", desc)
    return tuple(int(g) for g in m.groups())


def main():
    ap = argparse.ArgumentParser(description="grux f32/bf16/int8 vs oneDNN and PyTorch.")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", help="comma-separated workload ids")
    ap.add_argument("--grux", default=os.path.join(ROOT, "build", "grux"))
    ap.add_argument("--onednn", default=os.path.join(ROOT, "build", "bench", "onednn_gru"))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter that has torch")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the accuracy table")
    ap.add_argument("--json", help="save every raw result line (JSON Lines) to this file")
    ap.add_argument("--wait-quiet", type=int, default=60)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    only = a.only.split(",") if a.only else None
    work = [w for w in WORKLOADS if only is None or w[0] in only]
    if not work:
        ap.error(f"--only {a.only} selects no workload")

    def command(tool, wid, desc, p, k):
        common = [desc, "--threads", str(k), "--reps", str(a.reps), "--precision", p]
        if tool == "grux":
            return [a.grux, "bench", "gru", *common,
                    "--train" if wid in TRAINING else "--prepacked"]
        if tool == "pytorch":
            return [a.python, os.path.join(HERE, "pytorch_gru.py"), *common]
        return [a.onednn, *common]

    res, raw = {}, []  # (wid, tool, precision) -> best Result over threads
    def precisions(wid):
        return TRAIN_PRECISIONS if wid in TRAINING else PRECISIONS

    for wid, desc in work:
        for p in precisions(wid):
            for tool in ("grux",) if wid in TRAINING else ("grux", "onednn", "pytorch"):
                for k in threads:
                    if a.wait_quiet > 0:
                        wait_until_quiet(a.wait_quiet, DISTURBED_CORES)
                    r = measure(command(tool, wid, desc, p, k), "gru", 1800)
                    status = "n/a" if r.unsupported else r.error or f"{r.ms} ms"
                    print(f"[{wid} {tool} {p} {k}t] {status}", file=sys.stderr, flush=True)
                    raw.append({**(r.line or {}), "workload": wid, "tool": tool,
                                "other_cores": round(r.other_cores, 3)})
                    old = res.get((wid, tool, p))
                    if old is None or (r.ms is not None and not r.error and
                                       (old.ms is None or old.error or r.ms < old.ms)):
                        res[(wid, tool, p)] = r
    if a.json:
        with open(a.json, "w") as f:
            for line in raw:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def ms(wid, tool, p):
        r = res.get((wid, tool, p))
        return r.ms if r is not None and r.ms is not None and not r.error else None

    def cell(x, fmt="{:.3g}"):
        return fmt.format(x) if x is not None else "n/a"

    def ratio(num, den):
        return f"{num / den:.2f}x" if num and den else "–"

    print(f"\n## Precision: grux vs oneDNN and PyTorch (median ms, best of {a.threads} threads)\n")
    print("| workload | precision | grux | oneDNN | PyTorch | vs grux f32 | vs oneDNN | vs PyTorch | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for wid, desc in work:
        base = ms(wid, "grux", "f32")
        for p in precisions(wid):
            g, o, t = ms(wid, "grux", p), ms(wid, "onednn", p), ms(wid, "pytorch", p)
            tgt = TARGETS.get((wid, p))
            met = "" if tgt is None or not g or not base else (
                f">= {tgt}x: {'met' if base / g >= tgt else 'not met'}")
            print(f"| {wid} {desc}{' train' if wid in TRAINING else ''} | {p} | {cell(g)} | {cell(o)} | {cell(t)} | "
                  f"{ratio(base, g) if p != 'f32' else '1x'} | {ratio(o, g)} | {ratio(t, g)} | {met} |")
    if a.no_accuracy:
        return 0
    print("\n## Error against PyTorch's f32 output (same weights and input): max |diff|, RMS\n")
    print("| workload | grux f32 | grux bf16 | PyTorch bf16 | grux int8 | PyTorch int8 | "
          "grux int8 / PyTorch int8 (max) |")
    print("|---|---|---|---|---|---|---|")
    for wid, desc in work:
        if wid in TRAINING:
            continue
        e = accuracy(desc, a.grux)
        f = lambda key: f"{e[key][0]:.2e}, {e[key][1]:.1e}"  # noqa: E731
        print(f"| {wid} | {f(('grux', 'f32'))} | {f(('grux', 'bf16'))} | {f(('pytorch', 'bf16'))} | "
              f"{f(('grux', 'int8'))} | {f(('pytorch', 'int8'))} | "
              f"{e[('grux', 'int8')][0] / e[('pytorch', 'int8')][0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
