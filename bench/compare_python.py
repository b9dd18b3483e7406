# The Python package against PyTorch, in one run: how much of grux's C++ speed-up over PyTorch
# survives the trip through Python and autograd, what a GRUStream.step call from Python costs
# over the C++ call, and grux.prefix_scan against torch_parallel_scan's algorithm.
"""Usage (from the repository root, after building with -DGRUX_BUILD_PYTHON=ON):

    env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/compare_python.py [--reps 7] [--threads 1,2]
        [--only W1,W3,...,step,scan] [--procs 3] [--grux build/grux] [--pythonpath build/python]

Rows (../shared/WORKLOADS.md, f32, h0 = 0, inputs uniform in [-1, 1]):
  W2, W3, W5   inference: nn.GRU against grux.torch.GRU, both called from PyTorch under
               torch.inference_mode(); the C++ speed-up is `grux bench gru DESC` against
               bench/pytorch_gru.py DESC (nn.GRU timed the same way in its own process).
  W4           training step: forward + backward of a fixed upstream gradient through autograd
               (gradients of the input and every weight), nn.GRU against grux.torch.GRU; the C++
               speed-up from `grux bench gru DESC --train` and pytorch_gru.py --train.
  W1           1000 steps of one frame, batch 1: a loop of nn.GRUCell calls against a loop of
               grux.GRUStream.step calls (grux's streaming idiom from Python), each over the
               frames listed beforehand (as pytorch_gru.py --cell does); the C++ speed-up from
               `grux bench gru t1000n1i64h256 --cell` and pytorch_gru.py --cell.
  W1-out       the GRUStream.step loop writing each frame's output into one preallocated tensor
               (`step(f, out=o)`: no new tensor per call), against the same C++ speed-up.
  W1-cell      the same loop through grux.torch.GRUCell (the drop-in module; no C++ row of its
               own, so its share is against W1's C++ speed-up).
Each row's speed-up is PyTorch time / grux time, best thread setting against best thread
setting (the lower median over --threads); "kept" is the Python speed-up over the C++ one
(target >= 90%).
  step         GRUStream.step from Python (one thread, batch 1, 48,000 single frames) against
               the C++ call (`grux bench gru t48000n1i{I}h{H} --cell --threads 1`, ns_per_frame):
               the difference is Python's cost per call (target <= 2 us).
  scan         grux.prefix_scan(x, torch.matmul, dim=-3) on torch_parallel_scan's example, 8192
               matrices 64 x 64, against the same library's algorithm written in PyTorch
               (bench/seed_scan.py, our own implementation; target >= 5x), at each thread count.

The GRU rows time each side in --procs processes (default 3) and keep the fastest: with two
threads a batch-1 run's speed on a shared machine with few cores differs from process to
process by up to 1.6x (C++ and Python alike). Every timing is its own process, one after another (the machine's cores are shared by nothing
else we start). Progress goes to stderr, the Markdown table to stdout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# id, descriptor, mode
GRU_ROWS = [
    ("W1", "t1000n1i64h256", "cell"),
    ("W2", "l1d1t1000n1i128h256", "inference"),
    ("W3", "l1d1t100n64i256h512", "inference"),
    ("W4", "l1d1t100n64i256h512", "train"),
    ("W5", "l2d2t200n32i128h256", "inference"),
]
STEP_SHAPES = [(1, 32), (8, 64), (64, 256)]  # (I, H) for the step row


def parse_descriptor(s):
    import re
    m = re.fullmatch(r"(?:l(\d+))?(?:d(\d+))?t(\d+)n(\d+)i(\d+)h(\d+)", s)
    L, D, T, N, I, H = (int(v) if v else 1 for v in m.groups())
    return L, D, T, N, I, H


# ---- the worker: one timing in this process -------------------------------------------------

def median_ms(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def worker(spec):
    """Times one thing (spec: a dict) and prints one JSON line."""
    import torch
    torch.set_num_threads(spec["threads"])  # also grux's: both use the process's libgomp
    torch.manual_seed(0)
    import grux
    import grux.torch as gt
    reps, what = spec["reps"], spec["what"]
    out = {}
    if what in ("inference", "train"):
        L, D, T, N, I, H = parse_descriptor(spec["desc"])
        cls = torch.nn.GRU if spec["impl"] == "torch" else gt.GRU
        m = cls(I, H, num_layers=L, bidirectional=D == 2)
        x = torch.rand(T, N, I) * 2 - 1
        if what == "inference":
            def run():
                with torch.inference_mode():
                    m(x)
        else:
            x.requires_grad_(True)
            g = torch.rand(T, N, D * H) * 2 - 1

            def run():
                for p in m.parameters():
                    p.grad = None
                x.grad = None
                o, _ = m(x)
                o.backward(g)
        out["ms"] = median_ms(run, reps)
    elif what == "cell":
        L, D, T, N, I, H = parse_descriptor(spec["desc"])
        frames = torch.rand(T, N, I) * 2 - 1
        if spec["impl"] in ("stream", "stream-out"):
            gru = grux.GRU(I, H)
            stream = grux.GRUStream(gru, batch=N, threads=spec["threads"])
            fr = [frames[t] for t in range(T)]
            o = torch.empty(N, H)

            def run():
                for f in fr:
                    stream.step(f)

            def run_out():
                for f in fr:
                    stream.step(f, out=o)
            if spec["impl"] == "stream-out":
                run = run_out
        else:
            cell = torch.nn.GRUCell(I, H) if spec["impl"] == "torch" else gt.GRUCell(I, H)
            fr = list(frames.unbind(0))  # as the stream rows and pytorch_gru.py --cell

            def run():
                h = torch.zeros(N, H)
                with torch.inference_mode():
                    for f in fr:
                        h = cell(f, h)
        out["ms"] = median_ms(run, reps)
    elif what == "step":
        I, H, T = spec["I"], spec["H"], spec["T"]
        stream = grux.GRUStream(grux.GRU(I, H), batch=1, threads=1)
        frames = [f for f in (torch.rand(T, 1, I).numpy() * 2 - 1)]

        def run():
            for f in frames:
                stream.step(f)
        out["ns_per_frame"] = median_ms(run, reps, warmup=1) * 1e6 / T
    elif what == "scan":
        sys.path.insert(0, HERE)
        import seed_scan
        n, d = spec["n"], spec["d"]
        x = torch.randn(n, d, d) / d ** 0.5
        want = seed_scan.prefix_scan(x, torch.matmul, dim=-3)
        got = grux.prefix_scan(x, torch.matmul, dim=-3)
        # Products of 8192 near-orthogonal-scaled matrices decay: compare relative to the scale.
        err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        out["rel_err"] = err
        fn = (lambda: grux.prefix_scan(x, torch.matmul, dim=-3)) if spec["impl"] == "grux" else \
             (lambda: seed_scan.prefix_scan(x, torch.matmul, dim=-3))
        out["ms"] = median_ms(fn, reps, warmup=1)
    print(json.dumps({**spec, **out}))


# ---- the driver -----------------------------------------------------------------------------

def run_json(cmd, env, timeout):
    print("  $ " + " ".join(cmd), file=sys.stderr)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "no JSON line"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default="", help="comma list of W1..W5, W1-out, W1-cell, step, scan")
    ap.add_argument("--grux", default=os.path.join(ROOT, "build", "grux"))
    ap.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"),
                    help="where `import grux` finds the package (default build/python; '' for "
                         "an installed one)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--procs", type=int, default=3,
                    help="processes per GRU timing, the fastest kept (with 2 threads a run's "
                         "speed varies from process to process on a shared machine)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(json.loads(a.worker))

    only = set(filter(None, a.only.split(",")))
    want = lambda row: not only or row in only  # noqa: E731
    threads = [int(t) for t in a.threads.split(",")]
    py = sys.executable
    env = dict(os.environ)
    if a.pythonpath:
        env["PYTHONPATH"] = os.path.abspath(a.pythonpath) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    def py_worker(spec, t):
        e = dict(env, OMP_NUM_THREADS=str(t))
        spec = dict(spec, threads=t, reps=a.reps)
        return run_json([py, os.path.abspath(__file__), "--worker", json.dumps(spec)], e, a.timeout)

    def best(results, key="ms"):
        ok = [(r[key], t) for t, r in results.items() if key in r]
        return min(ok) if ok else (None, None)

    def fmt(v, t=None, digits=2):
        if v is None:
            return "failed"
        return f"{v:.{digits}f}" + (f" ({t}t)" if t is not None else "")

    print(f"# compare_python: {' '.join(sys.argv[1:]) or '(defaults)'}", file=sys.stderr)
    print("environment: OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "(unset)"))
    print()
    table = ["| row | C++: PyTorch ms / grux ms | speed-up | Python: PyTorch ms / grux ms | "
             "speed-up | kept (>= 90%) |", "|---|---|---|---|---|---|"]
    cpp_speedup = {}
    rows = [r for r in GRU_ROWS
            if want(r[0]) or (r[0] == "W1" and (want("W1-cell") or want("W1-out")))]
    for wid, desc, mode in rows:
        print(f"{wid} {desc} {mode}", file=sys.stderr)
        flag = {"cell": ["--cell"], "train": ["--train"], "inference": []}[mode]
        cg, cp, pg, pt, pc, po = {}, {}, {}, {}, {}, {}
        def keep(res, t, r, key="ms"):  # the fastest process's result (errors only if all fail)
            if t not in res or (key in r and r[key] < res[t].get(key, float("inf"))):
                res[t] = r

        for _ in range(a.procs):
            for t in threads:
                keep(cg, t, run_json([a.grux, "bench", "gru", desc, *flag, "--threads", str(t),
                                      "--reps", str(a.reps)], env, a.timeout), "median_ms")
                keep(cp, t, run_json([py, os.path.join(HERE, "pytorch_gru.py"), desc, *flag,
                                      "--threads", str(t), "--reps", str(a.reps)], env,
                                     a.timeout), "median_ms")
                what = "cell" if mode == "cell" else mode
                keep(pt, t, py_worker({"what": what, "desc": desc, "impl": "torch"}, t))
                keep(pg, t, py_worker({"what": what, "desc": desc,
                                       "impl": "stream" if mode == "cell" else "grux"}, t))
                if mode == "cell" and want("W1-out"):
                    keep(po, t, py_worker({"what": "cell", "desc": desc, "impl": "stream-out"}, t))
                if mode == "cell" and want("W1-cell"):
                    keep(pc, t, py_worker({"what": "cell", "desc": desc, "impl": "grux"}, t))
        (g_ms, g_t), (p_ms, p_t) = best(cg, "median_ms"), best(cp, "median_ms")
        (pg_ms, pg_t), (pt_ms, pt_t) = best(pg), best(pt)
        s_cpp = p_ms / g_ms if g_ms and p_ms else None
        cpp_speedup[wid] = s_cpp
        rows_out = [(wid + (" (GRUStream.step)" if mode == "cell" else ""), pg_ms, pg_t)]
        if po:
            co_ms, co_t = best(po)
            rows_out.append(("W1-out (GRUStream.step, out=)", co_ms, co_t))
        if pc:
            cc_ms, cc_t = best(pc)
            rows_out.append(("W1-cell (grux.torch.GRUCell)", cc_ms, cc_t))
        for label, gms, gt_ in rows_out:
            if label.startswith("W1-cell") and not want("W1-cell"):
                continue
            if label.startswith("W1-out") and not want("W1-out"):
                continue
            if label.startswith("W1 ") and only and "W1" not in only:
                continue
            s_py = pt_ms / gms if gms and pt_ms else None
            kept = s_py / s_cpp if s_py and s_cpp else None
            table.append(
                f"| {label} {desc} {mode} | {fmt(p_ms, p_t)} / {fmt(g_ms, g_t)} | "
                f"{fmt(s_cpp)}x | {fmt(pt_ms, pt_t)} / {fmt(gms, gt_)} | {fmt(s_py)}x | "
                + (f"{kept * 100:.0f}% {'met' if kept >= 0.9 else 'NO'}" if kept else "-") + " |")
        for res in (cg, cp, pt, pg, pc, po):
            for t, r in res.items():
                if "error" in r:
                    print(f"  error ({t} threads): {r['error']}", file=sys.stderr)
    print("\n".join(table))

    if want("step"):
        print("\n| GRUStream.step, batch 1, 1 thread | C++ ns/frame | Python ns/call | "
              "Python's cost | <= 2 us |\n|---|---|---|---|---|")
        for I, H in STEP_SHAPES:
            T = 48000
            print(f"step i{I}h{H}", file=sys.stderr)
            c = run_json([a.grux, "bench", "gru", f"t{T}n1i{I}h{H}", "--cell", "--threads", "1",
                          "--reps", str(a.reps)], env, a.timeout)
            p = py_worker({"what": "step", "I": I, "H": H, "T": T}, 1)
            cn, pn = c.get("ns_per_frame"), p.get("ns_per_frame")
            diff = pn - cn if cn and pn else None
            print(f"| I{I} H{H} | {fmt(cn, None, 0)} | {fmt(pn, None, 0)} | "
                  f"{fmt(diff, None, 0)} ns | "
                  + ("met" if diff is not None and diff <= 2000 else "NO") + " |")
            for r in (c, p):
                if "error" in r:
                    print(f"  error: {r['error']}", file=sys.stderr)

    if want("scan"):
        print("\n| prefix_scan(x, torch.matmul, dim=-3), 8192 x 64 x 64 f32 | "
              "torch_parallel_scan's algorithm ms | grux ms | speed-up (>= 5x) | grux rel. error |"
              "\n|---|---|---|---|---|")
        for t in threads:
            print(f"scan {t} threads", file=sys.stderr)
            s = py_worker({"what": "scan", "impl": "seed", "n": 8192, "d": 64}, t)
            g = py_worker({"what": "scan", "impl": "grux", "n": 8192, "d": 64}, t)
            sm, gm = s.get("ms"), g.get("ms")
            sp = sm / gm if sm and gm else None
            print(f"| {t} thread{'s' if t > 1 else ''} | {fmt(sm, None, 1)} | {fmt(gm, None, 1)} | "
                  f"{fmt(sp)}x {'met' if sp and sp >= 5 else 'NO'} | "
                  + (f"{g['rel_err']:.1e}" if "rel_err" in g else "-") + " |")
            for r in (s, g):
                if "error" in r:
                    print(f"  error: {r['error']}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
