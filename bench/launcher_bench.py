#!/usr/bin/python3
"""Side-by-side benchmark of ddprun, torchrun 1.13.1 and the current PyTorch's
torchrun on one node.

  bench/launcher_bench.py [--repeat N] [--ddprun build/bin/ddprun]
                          [--versions 1.13,current]

Measures, interleaving the launchers in one run:
  launch   wall time of `--standalone --nproc_per_node=4 --no_python /bin/true`
  restart  from a worker's failing exit to all replacement workers running
           (build/bin/restart_probe records both instants)
  memory   peak RSS of the launcher process (GNU time's %M)
and prints medians and ratios. torchrun 1.13.1 is Debian's, run with the
flags it needs under Python 3.11 (--redirects 1 --tee 2 --log_dir DIR); the
current torchrun is `python -m torch.distributed.run` of the project's
environment (scripts/python, made by scripts/setup), labelled with its
version (e.g. "torchrun 2.13.0") and run by the environment's interpreter
directly (not through the scripts/python wrapper). Both run with
--monitor_interval 0.1 (their best case). --versions picks the torchruns.
"""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from torch_current import current_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    """Runs cmd; returns (wall seconds, exit code)."""
    start = time.perf_counter()
    code = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, code


def peak_rss_kib(cmd, out_file):
    """Peak RSS of cmd as GNU time reports it (its ru_maxrss after exec).

    Measuring from Python directly would report Python's own RSS: a child's
    ru_maxrss keeps the high-water mark of the memory it had before exec.
    """
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out_file] + cmd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return int(open(out_file).read().split()[-1])


TORCHRUN_113 = "torchrun 1.13.1"


def launcher_cmds(launchers, ddprun, python, log_dir, extra):
    """The same job under each launcher; python runs the current torchrun."""
    cmds = {
        "ddprun": [ddprun] + extra,
        TORCHRUN_113: ["/usr/bin/torchrun", "--redirects", "1", "--tee", "2", "--log_dir",
                       log_dir, "--monitor_interval", "0.1"] + extra,
    }
    for name in launchers[1:]:
        if name != TORCHRUN_113:
            cmds[name] = [python, "-m", "torch.distributed.run", "--monitor_interval",
                          "0.1"] + extra
    return {name: cmds[name] for name in launchers}


def restart_once(cmd, probe_dir):
    shutil.rmtree(probe_dir, ignore_errors=True)
    os.makedirs(probe_dir)
    env = dict(os.environ, PROBE_DIR=probe_dir)
    _, code = run(cmd, env)
    fail = glob.glob(os.path.join(probe_dir, "fail_0_*"))
    starts = glob.glob(os.path.join(probe_dir, "start_1_*"))
    if code != 0 or len(fail) != 1 or len(starts) != 4:
        raise RuntimeError(f"restart run failed: {cmd} exit {code}, files {os.listdir(probe_dir)}")
    read = lambda p: int(open(p).read())
    return (max(read(p) for p in starts) - read(fail[0])) / 1e9


def median(values, scale):
    return statistics.median(values) * scale


def print_row(launchers, name, unit, samples, scale, fmt):
    base = median(samples["ddprun"], scale)
    cells = [f"{fmt.format(base)} {unit}"]
    for ref in launchers[1:]:
        value = median(samples[ref], scale)
        cells += [f"{fmt.format(value)} {unit}", f"{value / base:.0f}x" if base > 0 else "-"]
    print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build/bin/ddprun"))
    parser.add_argument("--versions", default="1.13,current",
                        help="the torchruns to compare with: 1.13 (Debian's), current (the "
                             "project environment's), or both, comma-separated")
    args = parser.parse_args()
    versions = args.versions.split(",")
    if not versions or set(versions) - {"1.13", "current"}:
        sys.exit(f"launcher_bench: --versions {args.versions}: give 1.13, current or 1.13,current")
    probe = os.path.join(os.path.dirname(args.ddprun), "restart_probe")
    needed = [args.ddprun, probe, "/usr/bin/time"]
    launchers = ["ddprun"]
    python = None
    if "1.13" in versions:
        needed.append("/usr/bin/torchrun")
        launchers.append(TORCHRUN_113)
    if "current" in versions:
        python, version = current_torch("launcher_bench")
        launchers.append(f"torchrun {version}")
    for path in needed:
        if not os.access(path, os.X_OK):
            sys.exit(f"launcher_bench: {path} is missing; run scripts/build (and scripts/setup)")

    work = tempfile.mkdtemp(prefix="ddprun-bench-")
    try:
        logs = os.path.join(work, "logs")
        launch = launcher_cmds(launchers, args.ddprun, python, logs,
                               ["--standalone", "--nproc_per_node=4", "--no_python", "/bin/true"])
        restart = launcher_cmds(launchers, args.ddprun, python, logs,
                                ["--standalone", "--nproc_per_node=4", "--max_restarts=1",
                                 "--no_python", probe])
        wall = {name: [] for name in launchers}
        rss = {name: [] for name in launchers}
        rest = {name: [] for name in launchers}
        for i in range(args.repeat):
            for name in launchers:   # interleaved: the same noise for all
                seconds, code = run(launch[name])
                if code != 0:
                    sys.exit(f"launcher_bench: {name} launch exited {code}")
                wall[name].append(seconds)
                rss[name].append(peak_rss_kib(launch[name], os.path.join(work, "rss")))
                rest[name].append(restart_once(restart[name], os.path.join(work, "probe")))
        print(f"launcher_bench: {args.repeat} interleaved runs each, medians "
              f"({os.cpu_count()} CPUs)\n")
        header = ["measure", "ddprun"]
        for name in launchers[1:]:
            header += [name, f"{name.split()[-1]} / ddprun"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        print_row(launchers, "launch, 4 x /bin/true (wall)", "ms", wall, 1000, "{:.1f}")
        print_row(launchers, "restart, failing exit -> 4 workers running", "ms", rest, 1000,
                  "{:.2f}")
        print_row(launchers, "launcher peak RSS", "MB", rss, 1 / 1024, "{:.1f}")
        print("\nmin/max ddprun launch ms: %.1f / %.1f; restart ms: %.2f / %.2f" % (
            min(wall["ddprun"]) * 1000, max(wall["ddprun"]) * 1000,
            min(rest["ddprun"]) * 1000, max(rest["ddprun"]) * 1000))
        if python:
            print(f"current torchrun: {python} -m torch.distributed.run")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
