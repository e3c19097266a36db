#!/usr/bin/env python3
"""ddprun::worker against Python torch.distributed 1.13 on this machine.

Both sides run as 2 ranks under build/bin/ddprun with one LibTorch thread per
rank and the same Gloo underneath; the launcher only starts them (every time
is measured inside the workers). Runs alternate C++ / Python --repeat times
and the report gives the median of the per-run medians.

    bench/distributed_bench.py [--build build] [--repeat 3] [--json out.json]

Rows:
  all_reduce  latency (median per call) and algorithm bandwidth, 4 B .. 100 MiB
  DDP step    forward + backward + SGD step of a ~6.5M-parameter MLP, batch 64
              per rank: ddprun overlap / simple / no_sync, Python DDP / no_sync
  overlap     efficiency = (simple - overlap) / (simple - no_sync): the share of
              the communication time that overlap hides behind backward
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(build, worker, args):
    command = [os.path.join(build, "bin", "ddprun"), "--standalone", "--nproc_per_node=2",
               *worker, *args]
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3")
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
    args = parser.parse_args()
    cpp = [os.path.join(args.build, "bin", "worker_bench")]
    py = [os.path.join(HERE, "worker_bench.py")]
    sizes = ["--sizes", args.sizes] if args.sizes else []

    allreduce = {"ddprun": {}, "python": {}}
    ddp = {}
    for repeat in range(args.repeat):
        print(f"run {repeat + 1}/{args.repeat}", file=sys.stderr, flush=True)
        if args.only != "ddp":
            for name, worker in (("ddprun", cpp), ("python", py)):
                for r in run(args.build, worker, ["allreduce", *sizes]):
                    allreduce[name].setdefault(r["bytes"], []).append(r["seconds"])
        if args.only == "allreduce":
            continue
        steps = ["--steps", str(args.steps)]
        for name, worker, strategy, extra in (
                ("ddprun overlap", cpp, "overlap", []),
                ("python DDP", py, "ddp", []),
                ("ddprun simple", cpp, "simple", []),
                ("ddprun no_sync", cpp, "nosync", []),
                ("python no_sync", py, "nosync", []),
                ("ddprun overlap 4 MiB buckets", cpp, "overlap", ["--bucket_mb", "4"])):
            for r in run(args.build, worker, ["ddp", "--strategy", strategy, *steps, *extra]):
                entry = ddp.setdefault(name, {"seconds": [], "exposed": [],
                                              "parameters": r["parameters"]})
                entry["seconds"].append(r["seconds"])
                entry["exposed"].append(r.get("exposed_seconds", float("nan")))

    report = {"allreduce": [], "ddp": {}}
    print("\n| size | ddprun latency | Python latency | ratio (Python/ddprun) | "
          "ddprun GB/s | Python GB/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for nbytes in sorted(allreduce["ddprun"]) if args.only != "ddp" else []:
        ours = statistics.median(allreduce["ddprun"][nbytes])
        theirs = statistics.median(allreduce["python"][nbytes])
        report["allreduce"].append({"bytes": nbytes, "ddprun_s": ours, "python_s": theirs})
        print(f"| {human(nbytes)} | {ours * 1e6:,.1f} µs | {theirs * 1e6:,.1f} µs | "
              f"{theirs / ours:.2f}× | {nbytes / ours / 1e9:.3f} | {nbytes / theirs / 1e9:.3f} |")

    print("\n| DDP step (median) | time | exposed comm |")
    print("|---|---:|---:|")
    for name, entry in ddp.items():
        seconds = statistics.median(entry["seconds"])
        exposed = statistics.median(entry["exposed"])
        report["ddp"][name] = {"seconds": seconds, "exposed_seconds": exposed,
                               "parameters": entry["parameters"]}
        shown = "" if exposed != exposed else f"{exposed * 1e3:.1f} ms"
        print(f"| {name} ({entry['parameters']:,} params) | {seconds * 1e3:.1f} ms | {shown} |")
    if report["ddp"]:
        step = {name: value["seconds"] for name, value in report["ddp"].items()}
        comm = step["ddprun simple"] - step["ddprun no_sync"]
        report["overlap_efficiency"] = {}
        for name in ("ddprun overlap", "ddprun overlap 4 MiB buckets"):
            hidden = step["ddprun simple"] - step[name]
            efficiency = hidden / comm if comm > 0 else float("nan")
            report["overlap_efficiency"][name] = efficiency
            print(f"\n{name}: overlap efficiency {efficiency:.2f} "
                  f"(hides {hidden * 1e3:.1f} of {comm * 1e3:.1f} ms of communication)")
        for name in ("ddprun overlap", "ddprun simple", "ddprun overlap 4 MiB buckets"):
            print(f"DDP step python DDP / {name}: {step['python DDP'] / step[name]:.3f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
