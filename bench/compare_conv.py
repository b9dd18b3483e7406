# Convolution comparison in one run: grux loops vs im2col (the algorithm speed-up) and grux
# im2col vs PyTorch F.conv2d, forward + backward, on the standard shapes; prints ratios.
"""Usage:  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/compare_conv.py [--grux build/grux]

Run it with OPENBLAS_CORETYPE unset: the environment pins OpenBLAS to its Haswell kernels,
which halves sgemm speed on this AVX-512 machine (the script re-executes itself without the
variable if it finds it set, and says so; --keep-coretype keeps it). Needs Debian's
python3-torch (use /usr/bin/python3) and a Release build of grux.

What is timed (f32, forward + backward = grad_input, grad_weight, grad_bias; median of reps):
  * grux: `grux bench conv2d DESCRIPTOR --train --algo A --threads T` (which checks its
    result against the loops reference before timing), T in 1 and 2, the better is used;
  * loops: the same command with --algo loops and fewer reps. With --loops-batch B < N it is
    timed on a batch of B and scaled by N / B (the loops are linear in the batch; printed);
  * PyTorch: F.conv2d(x, w, b, stride, padding) then y.backward(dy), in this process,
    torch.set_num_threads(T) for T in 1 and 2, the better is used.
Shapes: n8c16h64w64d32k3 (B=8 C=16 H=W=64 D=32 K=3) and n8c64h56w56d64k3p1 (ResNet-like).
Targets: im2col >= 100x loops; grux im2col <= 1.5x PyTorch.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = ["n8c16h64w64d32k3", "n8c64h56w56d64k3p1"]
LOOPS_SHAPE = "n8c16h64w64d32k3"


def parse(desc):
    import re
    m = re.fullmatch(r"n(\d+)c(\d+)h(\d+)w(\d+)d(\d+)k(\d+)(?:s(\d+))?(?:p(\d+))?", desc)
    n, c, h, w, d, k, s, p = m.groups()
    return dict(N=int(n), C=int(c), H=int(h), W=int(w), D=int(d), K=int(k),
                stride=int(s or 1), padding=int(p or 0))


def grux(exe, desc, algo, threads, reps):
    out = subprocess.run([exe, "bench", "conv2d", desc, "--train", "--algo", algo,
                          "--threads", str(threads), "--reps", str(reps)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def torch_ms(desc, threads, reps):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    p = parse(desc)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(p["N"], p["C"], p["H"], p["W"], generator=g, requires_grad=True)
    w = torch.randn(p["D"], p["C"], p["K"], p["K"], generator=g, requires_grad=True)
    b = torch.randn(p["D"], generator=g, requires_grad=True)
    dy = None
    ms = []
    for i in range(reps + 1):  # the first run warms up
        t0 = time.perf_counter()
        y = F.conv2d(x, w, b, stride=p["stride"], padding=p["padding"])
        if dy is None:
            dy = torch.randn(y.shape, generator=g)
        y.backward(dy)
        ms.append((time.perf_counter() - t0) * 1e3)
        x.grad = w.grad = b.grad = None
    return statistics.median(ms[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--grux", default=os.path.join(os.path.dirname(__file__), "..", "build", "grux"))
    ap.add_argument("--reps", type=int, default=10, help="timed runs of im2col and PyTorch")
    ap.add_argument("--loops-reps", type=int, default=2, help="timed runs of the loops")
    ap.add_argument("--loops-batch", type=int, default=8,
                    help="batch on which the loops are timed (scaled to N=8 linearly)")
    ap.add_argument("--keep-coretype", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE")
    a = ap.parse_args()
    if "OPENBLAS_CORETYPE" in os.environ and not a.keep_coretype:
        env = dict(os.environ)
        del env["OPENBLAS_CORETYPE"]
        print("note: re-running without OPENBLAS_CORETYPE (it pins OpenBLAS to slower kernels)",
              flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"f32; forward + backward; medians in ms", flush=True)

    rows = []
    for desc in SHAPES:
        p = parse(desc)
        im = {t: grux(a.grux, desc, "im2col", t, a.reps) for t in (1, 2)}
        best_t = min(im, key=lambda t: im[t]["median_ms"])
        th = {t: torch_ms(desc, t, a.reps) for t in (1, 2)}
        torch_t = min(th, key=th.get)
        row = dict(desc=desc, im2col=im[best_t]["median_ms"], im2col_threads=best_t,
                   im2col_all={t: im[t]["median_ms"] for t in im}, checked=im[best_t]["checked"],
                   torch=th[torch_t], torch_threads=torch_t, torch_all=th)
        if desc == LOOPS_SHAPE:
            lb = a.loops_batch
            ldesc = desc.replace(f"n{p['N']}", f"n{lb}", 1)
            lo = grux(a.grux, ldesc, "loops", 1, a.loops_reps)
            row["loops"] = lo["median_ms"] * p["N"] / lb
            row["loops_note"] = (f"timed on n{lb}, scaled x{p['N'] / lb:g}" if lb != p["N"]
                                 else "timed on the full batch, 1 thread")
        rows.append(row)

    print()
    print(f"{'problem':<22}{'loops':>10}{'im2col':>10}{'torch':>10}"
          f"{'loops/im2col':>14}{'grux/torch':>12}")
    for r in rows:
        loops = f"{r['loops']:.1f}" if "loops" in r else "-"
        speed = f"{r['loops'] / r['im2col']:.1f}x" if "loops" in r else "-"
        print(f"{r['desc']:<22}{loops:>10}{r['im2col']:>10.1f}{r['torch']:>10.1f}"
              f"{speed:>14}{r['im2col'] / r['torch']:>11.2f}x")
    print()
    for r in rows:
        print(f"{r['desc']}: grux im2col ms by threads {fmt(r['im2col_all'])} (used "
              f"{r['im2col_threads']}, checked {r['checked']}); torch ms by threads "
              f"{fmt(r['torch_all'])} (used {r['torch_threads']})"
              + (f"; loops {r['loops_note']}" if "loops_note" in r else ""))
        if "loops" in r:
            s = r["loops"] / r["im2col"]
            print(f"  target im2col >= 100x loops: {s:.1f}x -> {'met' if s >= 100 else 'NOT met'}")
        q = r["im2col"] / r["torch"]
        print(f"  target grux <= 1.5x torch: {q:.2f}x -> {'met' if q <= 1.5 else 'NOT met'}")


def fmt(d):
    return "{" + ", ".join(f"{k}: {v:.1f}" for k, v in d.items()) + "}"


if __name__ == "__main__":
    main()
