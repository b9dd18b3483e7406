# Runs the standard workloads (../shared/WORKLOADS.md) through grux, PyTorch and oneDNN in one
# run, one process at a time, and prints Markdown tables of times, ratios and the performance
# targets: the GRU's W1-W6 (`grux bench gru`, bench/pytorch_gru.py, onednn_gru) and the same
# shapes as LSTMs, L1-L6 (`grux bench lstm`, the peers with --lstm), each cell in its own table.
#
# Usage (from the repository root, after building):  /usr/bin/python3 bench/compare.py
#   [--reps R] [--only W3[,L3...]] [--cells gru,lstm] [--threads 1,2] [--grux build/grux]
#   [--onednn build/bench/onednn_gru] [--python /usr/bin/python3] [--json OUT.jsonl]
#   [--rounds R] [--timeout S] [--wait-quiet S]
# Ratios are speed-ups, peer time / grux time, best thread setting against best thread setting
# (the lower of the medians over --threads); the LSTM table adds grux's LSTM time over its GRU
# time on the same shape (L3 over W3) at each thread count where both ran. A peer that fails
# gets its error in its cell and the run goes on; the environment (OPENBLAS_CORETYPE etc.) is
# passed unchanged to every run. The LSTM rows have no performance targets.
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# id, cell, descriptor, extra flags, mode label, tools measured. Extras (ids with a dash) are
# grux-only GRU rows that some performance targets need: f64, and the reset-before form.
ALL = ("grux", "pytorch", "onednn")
GRU_WORKLOADS = [
    ("W1", "gru", "t1000n1i64h256", ["--cell"], "cell", ALL),
    ("W2", "gru", "l1d1t1000n1i128h256", [], "inference", ALL),
    ("W3", "gru", "l1d1t100n64i256h512", [], "inference", ALL),
    ("W4", "gru", "l1d1t100n64i256h512", ["--train"], "train", ALL),
    ("W5", "gru", "l2d2t200n32i128h256", [], "inference", ALL),
    ("W6", "gru", "l1d1t100n64i128h256", ["--lengths", "uniform:10:100:1"], "inference, lengths",
     ALL),
]
# L1-L6: W1-W6 as LSTMs (grux bench lstm; nn.LSTM / nn.LSTMCell; oneDNN's vanilla_lstm).
LSTM_WORKLOADS = [("L" + w[0][1:], "lstm", *w[2:]) for w in GRU_WORKLOADS]
WORKLOADS = GRU_WORKLOADS + [
    ("W3-f64", "gru", "l1d1t100n64i256h512", ["--dtype", "f64"], "inference f64", ("grux",)),
    ("W3-rb", "gru", "l1d1t100n64i256h512", ["--reset-before"], "inference reset-before",
     ("grux",)),
    ("W4-rb", "gru", "l1d1t100n64i256h512", ["--train", "--reset-before"], "train reset-before",
     ("grux",)),
] + LSTM_WORKLOADS
CELLS = {"gru": "GRU", "lstm": "LSTM"}
TOOLS = {"grux": "grux", "pytorch": "PyTorch", "onednn": "oneDNN"}
DISTURBED, DISTURBED_CORES = "†", 0.1  # mark timings during which others used > 0.1 core
ENV_SHOWN = ["OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_PROC_BIND",
             "GOMP_CPU_AFFINITY", "MKL_NUM_THREADS"]


class Result:
    """One measurement: the parsed JSON line, or why there is none."""

    def __init__(self, line=None, error=None, unsupported=None):
        self.line, self.error, self.unsupported = line, error, unsupported
        self.other_cores = 0.0

    @property
    def ms(self):
        return self.line.get("median_ms") if self.line else None

    def cell(self):
        if self.unsupported:
            return "n/a"
        if self.error:
            return "error: " + self.error
        return f"{self.ms:.3g}" + (DISTURBED if self.disturbed else "")

    @property
    def disturbed(self):
        return self.other_cores > DISTURBED_CORES


def busy_seconds():
    """CPU seconds the whole machine has spent busy (incl. steal) since boot, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_until_quiet(max_wait, threshold):
    """Waits (up to max_wait s) until other processes use under `threshold` cores; returns the
    load last seen, in cores."""
    deadline = time.time() + max_wait
    while True:
        b0 = busy_seconds()
        time.sleep(0.5)
        b1 = busy_seconds()
        load = (b1 - b0) / 0.5 if b0 is not None and b1 is not None else 0.0
        if load < threshold or time.time() >= deadline:
            return load
        time.sleep(1.5)


def measure(cmd, op, timeout):
    """Runs cmd, returns a Result from the last stdout line that is a JSON object with op `op`.
    Result.other_cores: the CPU other processes (or the hypervisor, as steal) took meanwhile,
    in cores on average: a timing with much of it was disturbed."""
    b0, c0, t0 = busy_seconds(), children_cpu_seconds(), time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return Result(error=f"not found: {cmd[0]}")
    except subprocess.TimeoutExpired:
        return Result(error=f"timed out after {timeout}s")
    b1, c1, wall = busy_seconds(), children_cpu_seconds(), time.time() - t0
    other_s = max(0.0, b1 - b0 - (c1 - c0)) if b0 is not None and b1 is not None else 0.0
    r = parse(p, op)
    # /proc/stat counts in ticks (10 ms): below 5 ticks of others' time, call it noise.
    r.other_cores = min(other_s / wall, os.cpu_count() or 1) if other_s > 0.05 else 0.0
    return r


def parse(p, op):
    """A Result from a finished process: its last stdout line that is a JSON object of op `op`."""
    line = None
    for text in reversed(p.stdout.splitlines()):
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("op") == op:
            line = obj
            break
    if line is not None and line.get("unsupported"):
        return Result(line=line, unsupported=line.get("reason", "unsupported"))
    if p.returncode != 0 or line is None:
        msg = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or [""])[-1]
        why = f"rc {p.returncode}" if p.returncode != 0 else "no JSON line"
        return Result(line=line, error=f"{why}: {msg[:100]}".strip())
    needed = "gflops" if op == "gemm" else "median_ms"
    if not isinstance(line.get(needed), (int, float)):
        return Result(line=line, error=f"no numeric {needed} in its JSON line")
    return Result(line=line)


def md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def best(results):
    """The lowest median over thread counts, or None when no run has one."""
    ms = [r.ms for r in results.values() if r.ms is not None and not r.error]
    return min(ms) if ms else None


def fmt_ratio(x):
    return f"{x:.2f}x" if x is not None else "–"


def main():
    ap = argparse.ArgumentParser(description="grux vs PyTorch vs oneDNN on the standard workloads.")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per measurement")
    ap.add_argument("--only", help="comma-separated workload ids, W1-W6 (W3 also selects W3-f64, "
                    "W3-rb) and L1-L6")
    ap.add_argument("--cells", default="gru,lstm",
                    help="comma-separated cells: gru (W rows), lstm (L rows); with --only, both "
                         "must select a row")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--grux", default=os.path.join(ROOT, "build", "grux"))
    ap.add_argument("--onednn", default=os.path.join(ROOT, "build", "bench", "onednn_gru"))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter that has torch")
    ap.add_argument("--json", help="save every raw result line (JSON Lines) to this file")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run everything this many times, interleaved; each cell keeps its best")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    ap.add_argument("--wait-quiet", type=int, default=120,
                    help="before each measurement wait up to this many seconds for other "
                         "processes to use under 0.1 core (0: don't wait)")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    only = a.only.split(",") if a.only else None
    cell_ids = a.cells.split(",")
    if not set(cell_ids) <= set(CELLS):
        ap.error(f"--cells expects a comma-separated subset of {','.join(CELLS)}, got {a.cells}")
    selected = [w for w in WORKLOADS if w[1] in cell_ids and
                (only is None or any(w[0] == o or w[0].startswith(o + "-") for o in only))]
    if not selected:
        ap.error((f"--only {a.only} " if only else "") + f"--cells {a.cells} selects no "
                 f"workload; ids: {', '.join(w[0] for w in WORKLOADS)}")

    def command(tool, cell, desc, flags, k):
        common = [desc, *flags, "--threads", str(k), "--reps", str(a.reps)]
        lstm = ["--lstm"] if cell == "lstm" else []
        if tool == "grux":
            return [a.grux, "bench", cell, *common]
        if tool == "pytorch":
            return [a.python, os.path.join(HERE, "pytorch_gru.py"), *common, *lstm]
        return [a.onednn, *common, *lstm]

    raw = []

    def run(label, tool, cmd, op, k):
        load = wait_until_quiet(a.wait_quiet, DISTURBED_CORES) if a.wait_quiet > 0 else 0.0
        if load >= DISTURBED_CORES:
            print(f"[{label} {tool} {k}t] machine still busy ({load:.2f} cores used by others) "
                  f"after {a.wait_quiet}s; measuring anyway", file=sys.stderr, flush=True)
        t0 = time.time()
        r = measure(cmd, op, a.timeout)
        if r.unsupported:
            status = "unsupported"
        elif r.error:
            status = "error: " + r.error
        elif op == "gemm":
            status = f"{r.line.get('gflops')} GFLOP/s"
        else:
            status = f"{r.ms} ms"
            if r.line.get("handoff_ns") is not None:
                status += f", handoff {r.line['handoff_ns']} ns"
        print(f"[{label} {tool} {k}t] {status} ({time.time() - t0:.0f}s wall, others used "
              f"{r.other_cores:.2f} cores)", file=sys.stderr, flush=True)
        raw.append({**(r.line or {}), "workload": label, "tool": tool, "cmd": " ".join(cmd),
                    "other_cores": round(r.other_cores, 3),
                    **({"error": r.error} if r.error else {})})
        return r

    # The GEMM peak first (f64 only if an f64 row is selected), then every workload.
    dtypes = ["f32"] + (["f64"] if any("--dtype" in w[3] for w in selected) else [])
    # With --rounds R every measurement runs R times, interleaved (round after round), and each
    # cell keeps its best run: the lowest median, the highest GEMM rate.
    def better(old, new, key):
        if old is None or (old.error and not new.error):
            return new
        if new.error or old.unsupported:
            return old
        return new if key(new) < key(old) else old

    gemm, res = {}, {}  # (dtype, threads) -> Result; (workload id, tool) -> {threads: Result}
    for rnd in range(a.rounds):
        if a.rounds > 1:
            print(f"-- round {rnd + 1} of {a.rounds}", file=sys.stderr, flush=True)
        for d in dtypes:
            for k in threads:
                cmd = [a.grux, "bench", "gemm", "--threads", str(k), "--dtype", d]
                r = run("gemm", "grux", cmd, "gemm", k)
                gemm[(d, k)] = better(gemm.get((d, k)), r, lambda x: -x.line.get("gflops", 0))
        for wid, cell, desc, flags, _, tools in selected:
            for k in threads:
                for tool in tools:
                    r = run(wid, tool, command(tool, cell, desc, flags, k), cell, k)
                    kept = res.setdefault((wid, tool), {})
                    kept[k] = better(kept.get(k), r, lambda x: x.ms)

    if a.json:
        with open(a.json, "w") as f:
            for line in raw:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def pct_peak(wid, k, dtype):
        """grux's own pct_of_gemm_peak (same process), else its gflops over this run's gemm."""
        r = res.get((wid, "grux"), {}).get(k)
        if r is None or r.error or not r.line:
            return None
        if r.line.get("pct_of_gemm_peak") is not None:
            return float(r.line["pct_of_gemm_peak"])
        g = gemm.get((dtype, k))
        if g and g.line and g.line.get("gflops") and r.line.get("gflops"):
            return 100.0 * r.line["gflops"] / g.line["gflops"]
        return None

    def speedup(wid, peer):
        g, p = best(res.get((wid, "grux"), {})), best(res.get((wid, peer), {}))
        return p / g if g and p else None

    def lstm_over_gru(wid, k):
        """grux's LSTM time over its GRU time on the same shape (L3 over W3) at k threads."""
        g = res.get(("W" + wid[1:], "grux"), {}).get(k)
        l = res.get((wid, "grux"), {}).get(k)
        ok = g and l and g.ms and l.ms and not g.error and not l.error
        return l.ms / g.ms if ok else None

    def scaling(wid):
        r = res.get((wid, "grux"), {})
        if 1 in r and 2 in r and r[1].ms and r[2].ms and not r[1].error and not r[2].error:
            return r[1].ms / r[2].ms
        return None

    # The table.
    ts = " / ".join(f"{k}t" for k in threads)
    out = []
    env = ", ".join(f"{v}={os.environ[v]}" for v in ENV_SHOWN if v in os.environ) or "none set"
    out.append(f"grux: `{a.grux}`; reps {a.reps}; rounds {a.rounds} (best kept); threads "
               f"{a.threads}; environment: {env}\n")
    # `gflops` is the BLAS rate that pct_of_gemm_peak divides by; grux_gflops, when grux prints
    # it, is grux's own packed GEMM on the same problem.
    out.append("| GEMM (grux bench gemm) | " + " | ".join(f"{k}t GFLOP/s" for k in threads) + " |")
    out.append("|---|" + "---|" * len(threads))
    for d in dtypes:
        for key, name in (("gflops", "BLAS"), ("grux_gflops", "grux")):
            if key != "gflops" and not any(g.line and key in g.line for g in gemm.values()):
                continue
            cells = []
            for k in threads:
                g = gemm[(d, k)]
                v = g.line.get(key) if g.line else None
                cells.append(md(g.cell()) if g.error or v is None else
                             f"{v:.1f}" + (DISTURBED if g.disturbed else ""))
            out.append(f"| {'s' if d == 'f32' else 'd'}gemm, {name} | " + " | ".join(cells) + " |")
    # One table per cell, the same columns; the LSTM's adds grux's LSTM time over its GRU time
    # on the same shape at each thread count (L3 over W3; about 4/3, the GEMM work's ratio),
    # where both ran.
    for cell_name, cell_label in CELLS.items():
        rows = [w for w in selected if w[1] == cell_name]
        if not rows:
            continue
        lstm = cell_name == "lstm"
        out.append("")
        out.append(f"| {cell_label} workload | mode | grux ms ({ts}) | PyTorch ms ({ts}) | "
                   f"oneDNN ms ({ts}) | grux vs PyTorch (best) | grux vs oneDNN (best) | "
                   f"grux % GEMM peak ({ts}) | grux 2t/1t |" +
                   (f" grux LSTM / GRU time ({ts}) |" if lstm else ""))
        out.append("|---|---|---|---|---|---|---|---|---|" + ("---|" if lstm else ""))
        for wid, _, desc, flags, mode, tools in rows:
            dtype = "f64" if "f64" in flags else "f32"
            cells = []
            for tool in TOOLS:
                if tool not in tools:
                    cells.append("–")
                else:
                    texts = [md(res[(wid, tool)][k].cell()) for k in threads]
                    same_error = len(set(texts)) == 1 and texts[0].startswith("error")
                    cells.append(texts[0] + " (all)" if same_error and len(texts) > 1
                                 else " / ".join(texts))
            pct = " / ".join(f"{p:.0f}%" if p is not None else "–"
                             for p in (pct_peak(wid, k, dtype) for k in threads))
            out.append(f"| {wid} `{desc}` | {mode} | " + " | ".join(cells) +
                       f" | {fmt_ratio(speedup(wid, 'pytorch'))} | "
                       f"{fmt_ratio(speedup(wid, 'onednn'))} | {pct} | {fmt_ratio(scaling(wid))} |"
                       + (" " + " / ".join(fmt_ratio(lstm_over_gru(wid, k)) for k in threads)
                          + " |" if lstm else ""))

    # Performance targets: (workload, what, measured value or None, threshold, formatter).
    targets = []
    ids = {w[0] for w in selected}

    def target(wid, what, value, need, fmt):
        if wid in ids:
            targets.append((wid, what, value, need, fmt))

    pct_fmt = lambda v: f"{v:.0f}%"
    for k in threads:
        target("W3", f"% of sgemm peak at {k}t >= 85%", pct_peak("W3", k, "f32"), 85, pct_fmt)
    target("W3", "vs oneDNN >= 1.4x", speedup("W3", "onednn"), 1.4, fmt_ratio)
    target("W2", "vs oneDNN >= 2x", speedup("W2", "onednn"), 2.0, fmt_ratio)
    target("W2", "vs PyTorch >= 5x", speedup("W2", "pytorch"), 5.0, fmt_ratio)
    target("W1", "vs PyTorch GRUCell loop >= 6x", speedup("W1", "pytorch"), 6.0, fmt_ratio)
    for k in threads:
        target("W4", f"% of sgemm peak at {k}t >= 75%", pct_peak("W4", k, "f32"), 75, pct_fmt)
    target("W4", "vs oneDNN >= 1.3x", speedup("W4", "onednn"), 1.3, fmt_ratio)
    target("W4", "vs PyTorch >= 2x", speedup("W4", "pytorch"), 2.0, fmt_ratio)
    target("W5", "vs oneDNN >= 1.3x", speedup("W5", "onednn"), 1.3, fmt_ratio)
    target("W6", "vs PyTorch packed >= 2.5x", speedup("W6", "pytorch"), 2.5, fmt_ratio)
    target("W3", "2t vs 1t >= 1.7x", scaling("W3"), 1.7, fmt_ratio)
    target("W4", "2t vs 1t >= 1.7x", scaling("W4"), 1.7, fmt_ratio)
    for k in threads:
        target("W3-f64", f"% of dgemm peak at {k}t >= 85%", pct_peak("W3-f64", k, "f64"), 85,
               pct_fmt)
    for rb, base in (("W3-rb", "W3"), ("W4-rb", "W4")):
        if base in ids:
            g, r = best(res.get((base, "grux"), {})), best(res.get((rb, "grux"), {}))
            target(rb, f"speed >= 85% of {base} default form", g / r if g and r else None, 0.85,
                   lambda v: f"{100 * v:.0f}%")
    out.append("")
    if targets:
        out.append("| target | measured | met |")
        out.append("|---|---|---|")
        met_all = True
        for wid, what, value, need, fmt in targets:
            ok = value is not None and value >= need
            met_all &= ok
            out.append(f"| {wid}: {what} | {fmt(value) if value is not None else 'no result'} | "
                       f"{'yes' if ok else 'NO'} |")
        out.append("")
        out.append(f"All targets met: {'yes' if met_all else 'no'}")
    else:  # the LSTM rows have no targets (../shared/WORKLOADS.md sets none)
        out.append("No performance targets for the selected workloads.")
    # Where the host put grux's threads: the round trip of a cache line between them, which
    # a time step shared by threads pays about twice (it moves the batch-1 rows most).
    hand = [f"{wid} {r.line['handoff_ns']:.0f}" for wid, *_ in selected
            for k, r in sorted(res.get((wid, "grux"), {}).items())
            if k > 1 and r.line and r.line.get("handoff_ns") is not None]
    if hand:
        out.append("\nCore-to-core round trip in grux's kept runs at 2+ threads (handoff_ns): "
                   + ", ".join(hand) + " ns.")
    kept = list(gemm.values()) + [r for cell in res.values() for r in cell.values()]
    disturbed = [r for r in kept if r.disturbed]
    if disturbed:
        out.append(f"\n{DISTURBED} {len(disturbed)} timing(s) ran while other processes used more "
                   f"than {DISTURBED_CORES} core (worst {max(r.other_cores for r in disturbed):.2f}"
                   "); with 2 cores a busy neighbour wrecks 2-thread timings: rerun on a quiet "
                   "machine.")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
