"""Training and generation speed of the character-level GRU language model: grux vs PyTorch.

Usage (from the repository root, after building):
  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/compare_lm.py [--rounds 3] [--steps 150]
      [--layers L --hidden H --embed E --batch N --window T] [--grux build/grux]

Runs, in one session and one process at a time, `grux train` (tokens per second, evaluation
excluded) and `grux generate --stats` (characters per second), and the same model in PyTorch
(bench/pytorch_lm.py) at 1 and 2 threads; prints the median of --rounds runs of each and the
ratios, best thread setting against best thread setting. OPENBLAS_CORETYPE (set in some
environments) holds OpenBLAS, and so PyTorch, to AVX2 kernels: unset it for a fair peer.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.strip()[-300:]}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--length", type=int, default=3000)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--grux", default=os.path.join(ROOT, "build", "grux"))
    ap.add_argument("--python", default="/usr/bin/python3")
    a = ap.parse_args()
    shape = ["--layers", str(a.layers), "--hidden", str(a.hidden), "--embed", str(a.embed),
             "--batch", str(a.batch), "--window", str(a.window)]
    tmp = tempfile.mkdtemp(prefix="grux_lm_bench_")
    res = {}  # (tool, mode, threads) -> [values]
    for r in range(a.rounds):
        for threads in (1, 2):
            out = os.path.join(tmp, f"run{threads}")
            p = run([a.grux, "train", *shape, "--steps", str(a.steps), "--threads", str(threads),
                     "--val-fraction", "0", "--checkpoint-every", "0", "--quiet", "--out", out])
            m = re.search(r"([0-9.]+) tokens/s\)", p.stderr)
            res.setdefault(("grux", "train", threads), []).append(float(m.group(1)))
            p = run([a.grux, "generate", "--checkpoint", os.path.join(out, "checkpoint.safetensors"),
                     "--length", str(a.length), "--threads", str(threads), "--stats"])
            m = re.search(r"\(([0-9.]+) characters/s\)", p.stderr)
            res.setdefault(("grux", "generate", threads), []).append(float(m.group(1)))
            for mode, key in (("train", "tokens_per_s"), ("generate", "chars_per_s")):
                p = run([a.python, os.path.join(HERE, "pytorch_lm.py"), mode, "--threads",
                         str(threads), "--steps", str(max(5, a.steps // 3)),
                         "--length", str(a.length), *shape])
                res.setdefault(("pytorch", mode, threads), []).append(json.loads(p.stdout)[key])
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"model: embed {a.embed}, GRU {a.layers} x {a.hidden}, batch {a.batch} x window "
          f"{a.window}; medians of {a.rounds} rounds; OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print("| | grux 1t / 2t | PyTorch 1t / 2t | speed-up (best vs best) | target |")
    print("|---|---|---|---|---|")
    for mode, unit, target in (("train", "tokens/s", 2.5), ("generate", "chars/s", 5.0)):
        g = [med[("grux", mode, t)] for t in (1, 2)]
        p = [med[("pytorch", mode, t)] for t in (1, 2)]
        ratio = max(g) / max(p)
        print(f"| {mode} ({unit}) | {g[0]:.0f} / {g[1]:.0f} | {p[0]:.0f} / {p[1]:.0f} | "
              f"{ratio:.2f}x | >= {target}x {'met' if ratio >= target else 'NOT met'} |")


if __name__ == "__main__":
    main()
