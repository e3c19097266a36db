#!/usr/bin/env python3
"""ddprun::worker against Python torch.distributed 1.13 and the current
PyTorch on this machine.

Both sides run as 2 ranks under build/bin/ddprun with one LibTorch thread per
rank and the same Gloo underneath; the launcher only starts them (every time
is measured inside the workers). Each version is compared with itself:
build/bin/worker_bench (LibTorch 1.13) against Debian 12's Python 1.13, and
build-torch-current/bin/worker_bench (the LibTorch of the project's
environment, scripts/build-torch-current) against that environment's Python
(scripts/python's interpreter, run directly). Runs alternate C++ / Python
--repeat times and the report gives the median of the per-run medians and
the median of the per-run ratios.

    bench/distributed_bench.py [--build build] [--repeat 3] [--versions 1.13,current]
                               [--build-current build-torch-current] [--json out.json]

Rows:
  all_reduce  latency (median per call) and algorithm bandwidth, 4 B .. 100 MiB
  DDP step    forward + backward + SGD step of a ~6.5M-parameter MLP, batch 64
              per rank: ddprun overlap / simple / no_sync, Python DDP / no_sync
  overlap     efficiency = 1 - exposed / alone, in the same run: "exposed" is the
              time the end of backward waited for communication on the rank
              that waited least (the other one also waits for its slower
              peer), median over steps; "alone" the
              time the same buckets take to all-reduce back to back without
              compute. The step times move by ±10 % between runs on this shared
              machine, so Python/ddprun is the median of per-run ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from torch_current import current_torch

HERE = os.path.dirname(os.path.abspath(__file__))


ROOT = os.path.dirname(HERE)


def run(build, worker, args, python="/usr/bin/python3"):
    command = [os.path.join(build, "bin", "ddprun"), "--standalone", "--nproc_per_node=2",
               *worker, *args]
    env = dict(os.environ, PYTHON_EXEC=python)
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    results = []
    for line in out.stdout.splitlines():
        if "{" in line:
            results.append(json.loads(line[line.index("{"):]))
    return results


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sizes", default=None, help="comma-separated bytes")
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", choices=["allreduce", "ddp"], default=None)
    parser.add_argument("--versions", default="1.13,current",
                        help="LibTorch/PyTorch versions to compare: 1.13 (Debian's), current "
                             "(the project environment's), or both, comma-separated")
    parser.add_argument("--build-current", default=os.path.join(ROOT, "build-torch-current"),
                        help="the build against the current LibTorch that holds "
                             "bin/worker_bench")
    args = parser.parse_args()
    setups = []  # (version label, C++ worker, Python interpreter)
    for version in args.versions.split(","):
        if version == "1.13":
            setups.append(("1.13", os.path.join(args.build, "bin", "worker_bench"),
                           "/usr/bin/python3"))
        elif version == "current":
            python, label = current_torch("distributed_bench")
            setups.append((label, os.path.join(args.build_current, "bin", "worker_bench"),
                           python))
        else:
            sys.exit(f"--versions: unknown version {version!r} (1.13 or current)")
    for label, cpp, _ in setups:
        if not os.access(cpp, os.X_OK):
            hint = ("scripts/build" if label == "1.13" else
                    "cmake -S . -B build-torch-current -DDDPRUN_BUILD_BENCH=ON && cmake --build "
                    "build-torch-current --target worker_bench (after scripts/build-torch-current; "
                    "its preset, torch-current, turns DDPRUN_BUILD_BENCH off)")
            sys.exit(f"distributed_bench: {cpp} is missing (LibTorch {label}); build it: {hint}")
    py = [os.path.join(HERE, "worker_bench.py")]
    sizes = ["--sizes", args.sizes] if args.sizes else []
    for label, cpp, python in setups:
        print(f"\n## LibTorch/PyTorch {label}", flush=True)
        measure(args, label, [cpp], python, py, sizes)


def measure(args, version, cpp, python, py, sizes):
    allreduce = {"ddprun": {}, "python": {}}
    ddp = {}
    configs = (("ddprun overlap", cpp, "overlap", []),
               ("python DDP", py, "ddp", []),
               ("ddprun simple", cpp, "simple", []),
               ("ddprun no_sync", cpp, "nosync", []),
               ("python no_sync", py, "nosync", []),
               ("ddprun overlap, 4 MiB buckets", cpp, "overlap", ["--bucket_mb", "4"]))
    for repeat in range(args.repeat):
        print(f"{version}: run {repeat + 1}/{args.repeat}", file=sys.stderr, flush=True)
        if args.only != "ddp":
            pairs = (("ddprun", cpp), ("python", py))
            for name, worker in (pairs if repeat % 2 == 0 else reversed(pairs)):
                for r in run(args.build, worker, ["allreduce", *sizes], python):
                    allreduce[name].setdefault(r["bytes"], []).append(r["seconds"])
        if args.only == "allreduce":
            continue
        steps = ["--steps", str(args.steps)]
        # Alternate the order so slow phases of the shared machine hit both.
        order = configs if repeat % 2 == 0 else tuple(reversed(configs))
        for name, worker, strategy, extra in order:
            for r in run(args.build, worker, ["ddp", "--strategy", strategy, *steps, *extra],
                         python):
                entry = ddp.setdefault(name, {"seconds": [], "exposed": [], "comm": [],
                                              "parameters": r["parameters"]})
                entry["seconds"].append(r["seconds"])
                entry["exposed"].append(r.get("exposed_seconds", float("nan")))
                entry["comm"].append(r.get("comm_seconds", float("nan")))

    report = {"allreduce": [], "ddp": {}}
    if allreduce["ddprun"]:
        print("\n| size | ddprun latency | Python latency | Python/ddprun (of medians) | "
              "Python/ddprun (median of per-run ratios) | ddprun GB/s | Python GB/s |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
    for nbytes in sorted(allreduce["ddprun"]):
        ours = statistics.median(allreduce["ddprun"][nbytes])
        theirs = statistics.median(allreduce["python"][nbytes])
        paired = statistics.median(
            p / o for p, o in zip(allreduce["python"][nbytes], allreduce["ddprun"][nbytes]))
        report["allreduce"].append({"bytes": nbytes, "ddprun_s": ours, "python_s": theirs,
                                    "python_ratio": paired})
        print(f"| {human(nbytes)} | {ours * 1e6:,.1f} µs | {theirs * 1e6:,.1f} µs | "
              f"{theirs / ours:.2f}× | {paired:.2f}× | {nbytes / ours / 1e9:.3f} | "
              f"{nbytes / theirs / 1e9:.3f} |")

    if ddp:
        print("\n| DDP step | median step | python DDP / this (median of per-run ratios) | "
              "exposed comm | comm alone | overlap efficiency |")
        print("|---|---:|---:|---:|---:|---:|")
    for name, entry in ddp.items():
        ratios = [p / o for p, o in zip(ddp["python DDP"]["seconds"], entry["seconds"])]
        row = {"seconds": statistics.median(entry["seconds"]),
               "python_ratio": statistics.median(ratios),
               "exposed_seconds": statistics.median(entry["exposed"]),
               "comm_seconds": statistics.median(entry["comm"]),
               "parameters": entry["parameters"]}
        # The share of one step's communication that did not delay the step.
        row["overlap_efficiency"] = 1 - row["exposed_seconds"] / row["comm_seconds"]
        report["ddp"][name] = row
        comm = "" if row["comm_seconds"] != row["comm_seconds"] else (
            f"{row['exposed_seconds'] * 1e3:.1f} ms | {row['comm_seconds'] * 1e3:.1f} ms | "
            f"{row['overlap_efficiency']:.2f}")
        if not comm or name.endswith("no_sync"):
            comm = " | | "
        print(f"| {name} | {row['seconds'] * 1e3:.1f} ms | {row['python_ratio']:.3f}× | {comm} |")
    if ddp:
        print(f"\n{ddp['ddprun overlap']['parameters']:,} parameters, batch 64 "
              f"per rank, {args.steps} timed steps per run, {args.repeat} runs")
    if args.json:
        path = args.json
        if version != "1.13":
            path = f"{args.json.replace('.json', '')}-{version}.json"
        with open(path, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
