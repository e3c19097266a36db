#!/usr/bin/env python3
"""ddprun::worker against Python torch.distributed 1.13 and 2.6 on this machine.

Both sides run as 2 ranks under build/bin/ddprun with one LibTorch thread per
rank and the same Gloo underneath; the launcher only starts them (every time
is measured inside the workers). Each version is compared with itself:
build/bin/worker_bench (LibTorch 1.13) against Debian 12's Python 1.13, and
build-torch2/bin/worker_bench (LibTorch 2.6, built here on first use inside
the trixie root of scripts/setup-torch2) against Python 2.6 from that root.
Runs alternate C++ / Python --repeat times and the report gives the median of
the per-run medians and the median of the per-run ratios.

    bench/distributed_bench.py [--build build] [--repeat 3] [--versions 1.13,2.6]
                               [--json out.json]

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

HERE = os.path.dirname(os.path.abspath(__file__))


ROOT = os.path.dirname(HERE)
TORCH2_RUN = os.path.join(ROOT, "scripts", "torch2-run")


def run(build, worker, args, version="1.13"):
    command = [os.path.join(build, "bin", "ddprun"), "--standalone", "--nproc_per_node=2",
               *worker, *args]
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
    if version == "2.6":
        # Debian built 2.6 without libuv: PyTorch's own switch to the legacy store.
        env.update(PYTHON_EXEC=os.path.join(ROOT, "scripts", "torch2-python"), USE_LIBUV="0")
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
    parser.add_argument("--versions", default="1.13,2.6",
                        help="LibTorch/PyTorch versions to compare: 1.13, 2.6 or both")
    args = parser.parse_args()
    versions = args.versions.split(",")
    for version in versions:
        if version == "2.6":
            torch2 = os.path.join(ROOT, "build-torch2")
            if not os.path.exists(os.path.join(torch2, "CMakeCache.txt")):
                subprocess.run([TORCH2_RUN, "cmake", "--preset", "torch2"], cwd=ROOT, check=True,
                               stdout=subprocess.DEVNULL)
            subprocess.run([TORCH2_RUN, "cmake", "--build", "--preset", "torch2", "--target",
                            "worker_bench"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        elif version != "1.13":
            sys.exit(f"--versions: unknown version {version!r} (1.13 or 2.6)")
    py = [os.path.join(HERE, "worker_bench.py")]
    sizes = ["--sizes", args.sizes] if args.sizes else []
    for version in versions:
        print(f"\n## LibTorch/PyTorch {version}", flush=True)
        measure(args, version, py, sizes)


def measure(args, version, py, sizes):
    if version == "2.6":
        cpp = [TORCH2_RUN, os.path.join(ROOT, "build-torch2", "bin", "worker_bench")]
    else:
        cpp = [os.path.join(args.build, "bin", "worker_bench")]
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
                for r in run(args.build, worker, ["allreduce", *sizes], version):
                    allreduce[name].setdefault(r["bytes"], []).append(r["seconds"])
        if args.only == "allreduce":
            continue
        steps = ["--steps", str(args.steps)]
        # Alternate the order so slow phases of the shared machine hit both.
        order = configs if repeat % 2 == 0 else tuple(reversed(configs))
        for name, worker, strategy, extra in order:
            for r in run(args.build, worker, ["ddp", "--strategy", strategy, *steps, *extra],
                         version):
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
        path = args.json if version == "1.13" else args.json.replace(".json", "") + "-2.6.json"
        with open(path, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
