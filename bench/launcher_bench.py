#!/usr/bin/python3
"""Side-by-side benchmark of ddprun and torchrun on one node.

  bench/launcher_bench.py [--repeat N] [--ddprun build/bin/ddprun]

Measures, interleaving the two launchers in one run:
  launch   wall time of `--standalone --nproc_per_node=4 --no_python /bin/true`
  restart  from a worker's failing exit to all replacement workers running
           (build/bin/restart_probe records both instants)
  memory   peak RSS of the launcher process (GNU time's %M)
and prints medians and ratios. torchrun is Debian's 1.13.1 run with the
flags it needs under Python 3.11 (--redirects 1 --tee 2 --log_dir DIR) and
--monitor_interval 0.1 (its best case).
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


def torchrun_cmd(log_dir, extra):
    return ["/usr/bin/torchrun", "--redirects", "1", "--tee", "2", "--log_dir", log_dir,
            "--monitor_interval", "0.1"] + extra


def launch_cmds(ddprun, log_dir):
    common = ["--standalone", "--nproc_per_node=4", "--no_python", "/bin/true"]
    return {"ddprun": [ddprun] + common, "torchrun": torchrun_cmd(log_dir, common)}


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


def median_row(name, unit, ddp, ref, scale=1.0, fmt="{:.1f}"):
    d, r = statistics.median(ddp), statistics.median(ref)
    ratio = r / d if d > 0 else float("inf")
    print(f"| {name} | {fmt.format(d * scale)} {unit} | {fmt.format(r * scale)} {unit} | "
          f"{ratio:.0f}x |")
    return d, r


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build/bin/ddprun"))
    args = parser.parse_args()
    probe = os.path.join(os.path.dirname(args.ddprun), "restart_probe")
    for path in (args.ddprun, probe, "/usr/bin/torchrun", "/usr/bin/time"):
        if not os.access(path, os.X_OK):
            sys.exit(f"launcher_bench: {path} is missing; run scripts/build (and scripts/setup)")

    work = tempfile.mkdtemp(prefix="ddprun-bench-")
    try:
        cmds = launch_cmds(args.ddprun, os.path.join(work, "logs"))
        restart = {
            "ddprun": [args.ddprun, "--standalone", "--nproc_per_node=4", "--max_restarts=1",
                       "--no_python", probe],
            "torchrun": torchrun_cmd(os.path.join(work, "logs"),
                                     ["--standalone", "--nproc_per_node=4", "--max_restarts=1",
                                      "--no_python", probe]),
        }
        wall = {"ddprun": [], "torchrun": []}
        rss = {"ddprun": [], "torchrun": []}
        rest = {"ddprun": [], "torchrun": []}
        for i in range(args.repeat):
            for name in ("ddprun", "torchrun"):   # interleaved: same noise for both
                seconds, code = run(cmds[name])
                if code != 0:
                    sys.exit(f"launcher_bench: {name} launch exited {code}")
                wall[name].append(seconds)
                rss[name].append(peak_rss_kib(cmds[name], os.path.join(work, "rss")))
                rest[name].append(restart_once(restart[name], os.path.join(work, "probe")))
        print(f"launcher_bench: {args.repeat} interleaved runs each, medians "
              f"({os.cpu_count()} CPUs)\n")
        print("| measure | ddprun | torchrun 1.13.1 | torchrun / ddprun |")
        print("|---|---|---|---|")
        median_row("launch, 4 x /bin/true (wall)", "ms", wall["ddprun"], wall["torchrun"], 1000)
        median_row("restart, failing exit -> 4 workers running", "ms", rest["ddprun"],
                   rest["torchrun"], 1000, "{:.2f}")
        median_row("launcher peak RSS", "MB", rss["ddprun"], rss["torchrun"], 1 / 1024)
        print("\nmin/max ddprun launch ms: %.1f / %.1f; restart ms: %.2f / %.2f" % (
            min(wall["ddprun"]) * 1000, max(wall["ddprun"]) * 1000,
            min(rest["ddprun"]) * 1000, max(rest["ddprun"]) * 1000))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
