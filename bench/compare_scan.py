# Cumulative-matmul comparison in one run: grux's work-efficient scan (`grux bench scan`)
# against the seed's padded log-depth algorithm run in PyTorch (bench/seed_scan.py); prints
# the ratio for its target (>= 5x).
"""Usage:  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/compare_scan.py [--grux build/grux]

Run it with OPENBLAS_CORETYPE unset: the environment pins OpenBLAS to its Haswell kernels,
which halves sgemm speed on this AVX-512 machine (the script re-executes itself without the
variable if it finds it set, and says so; --keep-coretype keeps it). Needs Debian's
python3-torch (use /usr/bin/python3) and a Release build of grux.

Problem: cumulative matrix product of 8192 matrices 64x64, f32, x = randn / sqrt(64)
(descriptor t8192d64): y_t = x_0 @ x_1 @ ... @ x_t.
  * seed: seed_scan.prefix_scan(x, torch.matmul, dim=0) in this process under
    torch.inference_mode(), torch.set_num_threads(T) for T in 1 and 2; one warm-up run,
    then the median of --reps runs; the better thread count is used. 8192 is a power of
    two, so there is no padding: 13 levels of 4096 batched 64x64 matmuls (53248 in all).
    It is timed twice: first with glibc malloc's defaults ("as is"), then ("warm heap")
    after mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1, M_TOP_PAD=256 MiB) through ctypes.
    With the defaults every 64 MiB temporary of every level is a fresh mmap that is
    page-faulted in and unmapped again, which is most of the seed's time here (mostly
    system time); the warm heap keeps freed memory for reuse. The ratio uses the faster of
    the two (the stronger baseline); --seed-malloc default|warm times only one;
  * grux: `grux bench scan matmul t8192d64 --threads T` for T in 1 and 2 (it prints one
    JSON line with median_ms); the better is used.
Ratio = seed ms / grux ms; target >= 5x. Then (unless --seed-only) the other scan targets
in the same run, each at the better of 1 and 2 threads: `grux bench scan sum t16777216`
and `affine n8t4096c1536` (pct_of_limit: % of memcpy bandwidth), the callable / built-in
ratio of `grux bench scan matmul t8192d64`, and `grux bench mingru l1t4096n8i256h256`
(speedup_vs_gru, and speedup_bound: the GRU's time over that of the minGRU's GEMM alone,
the most any minGRU could gain); a table of all five closes the output. A missing or
failing grux binary is reported and the PyTorch side is still timed (exit status 1 then).

Checks before timing: prefix_scan equals a sequential float64 loop of matmuls on a small
case (T = 37, d = 5, not a power of two); if the binary exists, `grux scan matmul --input
X.npy --dim 0 --out Y.npy` on the same case is compared with the loop too.

The machine has 2 cores: anything else running spoils the 2-thread timings. For every
timing the script prints how many cores other processes used meanwhile (from /proc/stat
less this process's / the child's CPU time); values above 0.1 are marked with † -- rerun.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBLEM = "t8192d64"
T_LEN, D = 8192, 64


# --------------------------------------------------------------------------- CPU use of others
def _busy_s():
    """Busy CPU seconds of the whole machine since boot (all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_s(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class OtherLoad:
    """Average number of cores used by other processes while the block ran."""

    def __init__(self, who):
        self.who = who

    def __enter__(self):
        self.t0, self.b0, self.o0 = time.perf_counter(), _busy_s(), _own_s(self.who)
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        others = (_busy_s() - self.b0) - (_own_s(self.who) - self.o0)
        self.cores = max(0.0, others / wall) if wall > 0 else 0.0
        return False


def mark(load):
    return f"{load:.2f}" + ("†" if load > 0.1 else "")


# --------------------------------------------------------------------------- PyTorch side
def check_seed_small(seed_scan, torch):
    """Seed algorithm vs a sequential f64 loop on T = 37, d = 5; returns (x, loop, err)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(37, 5, 5, generator=g, dtype=torch.float64) / math.sqrt(5)
    want = [x[0]]
    for t in range(1, x.shape[0]):
        want.append(want[-1] @ x[t])
    want = torch.stack(want)
    got = seed_scan.prefix_scan(x, torch.matmul, dim=0)
    scale = want.flatten(1).abs().max(1).values.view(-1, 1, 1)  # products shrink with t
    err = float(((got - want).abs() / scale).max())
    return x, want, err


def time_seed(seed_scan, torch, threads, reps):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T_LEN, D, D, generator=g) / math.sqrt(D)
    ms = []
    with torch.inference_mode(), OtherLoad(resource.RUSAGE_SELF) as load:
        for i in range(reps + 1):  # the first run warms up
            t0 = time.perf_counter()
            y = seed_scan.prefix_scan(x, torch.matmul, dim=0)
            ms.append((time.perf_counter() - t0) * 1e3)
            assert bool(torch.isfinite(y[-1]).all())
    return statistics.median(ms[1:]), load.cores


HEAP = {"default": "as is", "warm": "warm heap"}


def warm_heap():
    """glibc: no mmap for big blocks, never trim: freed temporaries are reused, not faulted."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
        return all(libc.mallopt(k, v) == 1 for k, v in
                   ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1), (M_TOP_PAD, 256 << 20)))
    except (OSError, AttributeError):
        return False


# --------------------------------------------------------------------------- grux side
def grux_bench(exe, threads):
    """Returns (json dict, None) or (None, error text)."""
    cmd = [exe, "bench", "scan", "matmul", PROBLEM, "--threads", str(threads)]
    with OtherLoad(resource.RUSAGE_CHILDREN) as load:
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, f"`{' '.join(cmd)}` exited {p.returncode}: {msg[-1] if msg else ''}"
    lines = [l for l in p.stdout.splitlines() if l.lstrip().startswith("{")]
    try:
        r = json.loads(lines[-1])
        float(r["median_ms"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None, f"`{' '.join(cmd)}`: no JSON line with median_ms in its output"
    r["_other_cores"] = load.cores
    return r, None


def grux_cli_check(exe, x, want, np):
    """`grux scan matmul` on the small f64 case against the loop; returns a line of text."""
    with tempfile.TemporaryDirectory() as d:
        xi, yo = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
        np.save(xi, x.numpy())
        cmd = [exe, "scan", "matmul", "--input", xi, "--dim", "0", "--out", yo]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(yo):
            err = (p.stderr.strip() or p.stdout.strip()).splitlines()
            return f"not checked (`grux scan matmul` exited {p.returncode}: " \
                   f"{err[-1] if err else ''})"
        y = np.load(yo)
    w = want.numpy()
    if y.shape != w.shape:
        return f"MISMATCH: shape {y.shape} vs {w.shape}"
    scale = np.abs(w.reshape(w.shape[0], -1)).max(1).reshape(-1, 1, 1)
    err = float((np.abs(y - w) / scale).max())
    return f"max rel err {err:.2e} ({'ok' if err < 1e-10 else 'MISMATCH'}; dtype {y.dtype})"


def grux_json(exe, args):
    """One `grux bench ...` run: (json dict, None) or (None, error text)."""
    cmd = [exe, "bench"] + args
    with OtherLoad(resource.RUSAGE_CHILDREN) as load:
        p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in p.stdout.splitlines() if l.lstrip().startswith("{")]
    if p.returncode != 0 or not lines:
        msg = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, f"`{' '.join(cmd)}` exited {p.returncode}: {msg[-1] if msg else ''}"
    r = json.loads(lines[-1])
    r["_other_cores"] = load.cores
    return r, None


# The scan targets other than the seed comparison, each at the better of 1 and 2 threads:
# (label, bench arguments, JSON key, target, higher is better).
OTHER_TARGETS = [
    ("sum 2^24, one sequence: % of memcpy", ["scan", "sum", "t16777216"], "pct_of_limit", 70, True),
    ("diagonal affine 8x1536xT4096: % of memcpy", ["scan", "affine", "n8t4096c1536"],
     "pct_of_limit", 60, True),
    ("callable / built-in, matmul 64x64", ["scan", "matmul", PROBLEM], "callable_over_builtin", 2,
     False),
    ("minGRU fwd vs GRU fwd, l1t4096n8i256h256", ["mingru", "l1t4096n8i256h256"],
     "speedup_vs_gru", 5, True),
]


def other_targets(exe):
    rows = []
    for label, args, key, target, higher in OTHER_TARGETS:
        got = []
        for t in (1, 2):
            r, e = grux_json(exe, args + ["--threads", str(t)])
            if r is None or key not in r:
                print(f"  {label}, {t} thread(s): {e or 'no ' + key}", flush=True)
                continue
            extra = ""
            if "speedup_bound" in r:
                extra = (f"; speedup_bound {float(r['speedup_bound']):.2f} (GRU ms / ms of the "
                         f"minGRU's GEMM alone, {float(r['gemm_median_ms']):.2f} ms)")
            print(f"  {' '.join(args)} --threads {t}: {key} {float(r[key]):.3f}, median "
                  f"{float(r['median_ms']):.2f} ms (other cores {mark(r['_other_cores'])}){extra}",
                  flush=True)
            got.append(float(r[key]))
        if got:
            v = max(got) if higher else min(got)
            ok = v >= target if higher else v <= target
            rows.append((label, f"{v:.2f}", f"{'>=' if higher else '<='} {target}",
                         "met" if ok else "NOT met"))
        else:
            rows.append((label, "-", f"{'>=' if higher else '<='} {target}", "not measured"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--grux", default=os.path.join(HERE, "..", "build", "grux"))
    ap.add_argument("--reps", type=int, default=5, help="timed runs of the seed algorithm")
    ap.add_argument("--seed-malloc", choices=["both", "default", "warm"], default="both",
                    help="glibc heap setting(s) under which the seed is timed (see above)")
    ap.add_argument("--seed-only", action="store_true",
                    help="only the seed comparison (skip the other scan targets)")
    ap.add_argument("--keep-coretype", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE")
    a = ap.parse_args()
    if "OPENBLAS_CORETYPE" in os.environ and not a.keep_coretype:
        env = dict(os.environ)
        del env["OPENBLAS_CORETYPE"]
        print("note: re-running without OPENBLAS_CORETYPE (it pins OpenBLAS to slower kernels)",
              flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    import seed_scan

    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; torch "
          f"{torch.__version__}; problem {PROBLEM}: cumulative matmul of {T_LEN} matrices "
          f"{D}x{D}, f32; medians in ms", flush=True)

    x, want, err = check_seed_small(seed_scan, torch)
    ok_seed = err < 1e-12
    print(f"check: seed prefix_scan vs sequential f64 loop (T=37, d=5): max rel err {err:.2e} "
          f"({'ok' if ok_seed else 'MISMATCH'})")
    exe = os.path.normpath(a.grux)
    have_grux = os.path.isfile(exe) and os.access(exe, os.X_OK)
    if have_grux:
        print(f"check: grux scan matmul vs the same loop: {grux_cli_check(exe, x, want, np)}")
    else:
        print(f"grux binary not found at {exe} (build grux, or pass --grux PATH); "
              "timing the PyTorch side only")

    seed = {}  # (heap, threads) -> (ms, other cores)
    heaps = ["default", "warm"] if a.seed_malloc == "both" else [a.seed_malloc]
    for heap in heaps:
        if heap == "warm" and not warm_heap():
            print("  (mallopt unavailable: warm-heap timing skipped)")
            continue
        for t in (1, 2):
            seed[heap, t] = time_seed(seed_scan, torch, t, a.reps)
            print(f"  seed PyTorch, {HEAP[heap]}, {t} thread(s): {seed[heap, t][0]:.1f} ms "
                  f"(other cores {mark(seed[heap, t][1])})", flush=True)
    seed_best = min(seed, key=lambda k: seed[k][0])
    s_ms = seed[seed_best][0]

    grux = {}
    if have_grux:
        for t in (1, 2):
            r, e = grux_bench(exe, t)
            if r is None:
                print(f"  grux, {t} thread(s): failed: {e}", flush=True)
            else:
                grux[t] = r
                print(f"  grux, {t} thread(s): {float(r['median_ms']):.1f} ms (other cores "
                      f"{mark(r['_other_cores'])}); "
                      + json.dumps({k: v for k, v in r.items() if not k.startswith("_")}),
                      flush=True)

    def best(heap):
        ks = [k for k in seed if k[0] == heap]
        return min(seed[k][0] for k in ks) if ks else None

    print()
    print(f"{'problem':<11}{'seed as is':>12}{'seed warm':>11}{'grux':>9}{'ratio':>9}"
          "   (ms; ratio = best seed / grux, target >= 5x)")
    cells = [f"{best(h):.1f}" if best(h) is not None else "-" for h in ("default", "warm")]
    if grux:
        grux_t = min(grux, key=lambda t: float(grux[t]["median_ms"]))
        g_ms = float(grux[grux_t]["median_ms"])
        ratio = s_ms / g_ms
        print(f"{PROBLEM:<11}{cells[0]:>12}{cells[1]:>11}{g_ms:>9.1f}{ratio:>8.1f}x   "
              f"target {'met' if ratio >= 5 else 'NOT met'}")
        extra = f"grux best at {grux_t} thread(s); grux ms by threads {{" + ", ".join(
            f"{t}: {float(r['median_ms']):.1f}" for t, r in grux.items()) + "}"
        if "default" in [k[0] for k in seed]:
            extra += f"; ratio against the seed as is: {best('default') / g_ms:.1f}x"
    else:
        print(f"{PROBLEM:<11}{cells[0]:>12}{cells[1]:>11}{'-':>9}{'-':>9}   not measured: "
              + ("grux binary missing" if not have_grux else "grux bench failed"))
        extra = ""
    print(f"(seed best: {HEAP[seed_best[0]]}, {seed_best[1]} thread(s); seed ms "
          + ", ".join(f"{HEAP[h]} {t}T {v[0]:.1f}" for (h, t), v in seed.items())
          + (f"; {extra}" if extra else "") + ")")
    if have_grux and not a.seed_only:
        print("\nThe other targets (better of 1 and 2 threads):", flush=True)
        rows = other_targets(exe)
        if grux:
            rows.insert(2, (f"cumulative matmul {PROBLEM} vs the seed in PyTorch",
                            f"{ratio:.2f}", ">= 5", "met" if ratio >= 5 else "NOT met"))
        print()
        print(f"{'target':<46}{'measured':>10}  {'wanted':<8} result")
        for label, v, want, res in rows:
            print(f"{label:<46}{v:>10}  {want:<8} {res}")
    return 0 if (grux and ok_seed) else 1


if __name__ == "__main__":
    sys.exit(main())
