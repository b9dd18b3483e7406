#!/usr/bin/python3
# Untuned shapes: runs `grux bench gru` over a grid of I, H in 16..2048 and N in 1..256 and
# prints each time against its bound (GEMM-peak-bound at large N, cache-bandwidth-bound at N=1).
import argparse
import json
import subprocess
import sys

SIZES = [(16, 16), (64, 200), (256, 512), (700, 1000), (2048, 2048)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grux", default="build/grux")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="save raw result lines here")
    args = ap.parse_args()
    rows = []
    problems = []
    for n, t in [(1, 200), (16, 32), (256, 16)]:
        for i, h in SIZES:
            problems.append(f"t{t}n{n}i{i}h{h}")
    for p in problems:
        for th in args.threads.split(","):
            cmd = [args.grux, "bench", "gru", p, "--threads", th, "--reps", str(args.reps)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{p} {th}t: failed: {out.stderr.strip()}", file=sys.stderr)
                continue
            d = json.loads(out.stdout)
            rows.append(d)
            print(f"[{p} {th}t] {d['median_ms']:.3f} ms, bound {d['bound_ms']:.3f} ms "
                  f"({d['bound']}), {d['pct_of_bound']:.0f}% of bound", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print("| problem | threads | median ms | bound ms | bound | % of bound | within 25% |")
    print("|---|---|---|---|---|---|---|")
    met = 0
    for d in rows:
        ok = d["median_ms"] <= 1.25 * d["bound_ms"]
        met += ok
        print(f"| {d['problem']} | {d['threads']} | {d['median_ms']:.3f} | {d['bound_ms']:.3f} | "
              f"{d['bound']} | {d['pct_of_bound']:.0f} | {'yes' if ok else 'NO'} |")
    print(f"\n{met} of {len(rows)} within 25% of their bound")


if __name__ == "__main__":
    main()
