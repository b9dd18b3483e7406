# The cost model's predictions against measurements on the standard workloads
# (../shared/WORKLOADS.md): runs `grux bench gru ... --predict` for W1-W6, several interleaved
# rounds at each thread count, and prints a Markdown table of the median measured time, the
# prediction (with and without the per-step term), and predicted / measured.
#
# Usage (from the repository root, after building and calibrating):
#   env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/predict_accuracy.py
#       [--rounds 5] [--reps 7] [--threads 1,2] [--profile FILE] [--grux build/grux]
# The profile defaults to grux calibrate's default location (see docs/cost_model.md).
import argparse
import json
import statistics
import subprocess
import sys

WORKLOADS = [
    ("W1", "t1000n1i64h256", ["--cell"]),
    ("W2", "l1d1t1000n1i128h256", []),
    ("W3", "l1d1t100n64i256h512", []),
    ("W4", "l1d1t100n64i256h512", ["--train"]),
    ("W5", "l2d2t200n32i128h256", []),
    ("W6", "l1d1t100n64i128h256", ["--lengths", "uniform:10:100:1"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grux", default="build/grux")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--profile", default="")
    ap.add_argument("--only", default="", help="comma-separated workload ids")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    chosen = [w for w in WORKLOADS if not args.only or w[0] in args.only.split(",")]
    runs = {}  # (id, threads) -> list of bench JSON
    for r in range(args.rounds):
        for wid, desc, extra in chosen:
            for t in threads:
                cmd = [args.grux, "bench", "gru", desc, *extra, "--threads", str(t), "--reps",
                       str(args.reps), "--predict"]
                if args.profile:
                    cmd += ["--profile", args.profile]
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
                d = json.loads(out.stdout)
                runs.setdefault((wid, t), []).append(d)
                print(f"[round {r + 1}/{args.rounds}] {wid} {t}t: {d['median_ms']:.3f} ms, "
                      f"predicted {d['predicted_ms']:.3f} ms", file=sys.stderr)
    print(f"profile: {next(iter(runs.values()))[0]['profile']}; {args.rounds} rounds of "
          f"{args.reps} reps, medians over rounds\n")
    print("| workload | threads | measured ms (median) | best round | predicted ms "
          "| roofline part | step part | bound | predicted / median | predicted / best "
          "| within 30% (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for wid, desc, extra in chosen:
        for t in threads:
            ds = runs[(wid, t)]
            med = statistics.median(d["median_ms"] for d in ds)
            lo = min(d["median_ms"] for d in ds)
            p = ds[0]
            roof = p["predicted_ms"] - p["predicted_overhead_ms"]
            ratio = p["predicted_ms"] / med
            print(f"| {wid} `{desc}{' ' + ' '.join(extra) if extra else ''}` | {t} | {med:.3f} "
                  f"| {lo:.3f} | {p['predicted_ms']:.3f} | {roof:.3f} "
                  f"| {p['predicted_overhead_ms']:.3f} | {p['predicted_bound']} | {ratio:.2f} "
                  f"| {p['predicted_ms'] / lo:.2f} | {'yes' if 0.7 <= ratio <= 1.3 else 'NO'} |")


if __name__ == "__main__":
    main()
