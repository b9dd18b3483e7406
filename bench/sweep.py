#!/usr/bin/python3
# Untuned shapes: runs `grux bench gru` over a grid of I, H in 16..2048 and N in 1..256 and
# prints each time against its bound (GEMM-peak-bound at large N, cache-bandwidth-bound at N=1).
import argparse
import json
import math
import subprocess
import sys

SIZES = [(16, 16), (64, 200), (256, 512), (700, 1000), (2048, 2048)]


def bench(grux, problem, threads, reps):
    cmd = [grux, "bench", "gru", problem, "--threads", threads, "--reps", str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{problem} {threads}t: failed: {out.stderr.strip()}", file=sys.stderr)
        return None
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grux", default="build/grux")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5,
                    help="timed runs per problem, at least; problems faster than --min-time "
                         "in total are run again with enough reps to fill it (at most 500)")
    ap.add_argument("--min-time", type=float, default=0.5,
                    help="seconds of timed runs per problem (default 0.5): a median of 5 runs "
                         "of 0.03 ms moves with every hiccup of a shared machine")
    ap.add_argument("--json", help="save raw result lines here")
    args = ap.parse_args()
    rows = []
    problems = []
    for n, t in [(1, 200), (16, 32), (256, 16)]:
        for i, h in SIZES:
            problems.append(f"t{t}n{n}i{i}h{h}")
    for p in problems:
        for th in args.threads.split(","):
            d = bench(args.grux, p, th, args.reps)
            if d is None:
                continue
            total_s = d["median_ms"] * d["reps"] / 1e3
            if total_s < args.min_time:
                reps = min(500, math.ceil(args.min_time / (d["median_ms"] / 1e3)))
                d = bench(args.grux, p, th, reps) or d
            rows.append(d)
            print(f"[{p} {th}t] {d['median_ms']:.3f} ms, bound {d['bound_ms']:.3f} ms "
                  f"({d['bound']}), {d['pct_of_bound']:.0f}% of bound", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    # handoff_ns: the round trip between the threads' cores (2+ threads), which every shared
    # time step pays about twice: it decides the N = 1 rows at 2 threads.
    print("| problem | threads | reps | median ms | bound ms | bound | % of bound | within 25% "
          "| handoff ns |")
    print("|---|---|---|---|---|---|---|---|---|")
    met = 0
    for d in rows:
        ok = d["median_ms"] <= 1.25 * d["bound_ms"]
        met += ok
        print(f"| {d['problem']} | {d['threads']} | {d['reps']} | {d['median_ms']:.3f} | "
              f"{d['bound_ms']:.3f} | {d['bound']} | {d['pct_of_bound']:.0f} | "
              f"{'yes' if ok else 'NO'} | {d.get('handoff_ns', '–')} |")
    print(f"\n{met} of {len(rows)} within 25% of their bound")


if __name__ == "__main__":
    main()
