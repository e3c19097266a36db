#!/usr/bin/python3
"""Side-by-side benchmark of ddprun, torchrun 1.13.1 and torchrun 2.6 on one node.

  bench/launcher_bench.py [--repeat N] [--ddprun build/bin/ddprun]

Measures, interleaving the launchers in one run:
  launch   wall time of `--standalone --nproc_per_node=4 --no_python /bin/true`
  restart  from a worker's failing exit to all replacement workers running
           (build/bin/restart_probe records both instants)
  memory   peak RSS of the launcher process (GNU time's %M)
and prints medians and ratios. torchrun 1.13.1 is Debian's, run with the
flags it needs under Python 3.11 (--redirects 1 --tee 2 --log_dir DIR);
torchrun 2.6 is `python -m torch.distributed.run` from the Debian trixie root
(scripts/torch2-python, made by scripts/setup-torch2). Both run with
--monitor_interval 0.1 (their best case). The trixie wrapper's own start
(unshare, bind mounts, chroot, a bare interpreter) is measured separately.
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


TORCH2_PYTHON = os.path.join(ROOT, "scripts/torch2-python")
LAUNCHERS = ("ddprun", "torchrun 1.13.1", "torchrun 2.6")


def launcher_cmds(ddprun, log_dir, extra):
    """The same job under each launcher."""
    return {
        "ddprun": [ddprun] + extra,
        "torchrun 1.13.1": ["/usr/bin/torchrun", "--redirects", "1", "--tee", "2", "--log_dir",
                            log_dir, "--monitor_interval", "0.1"] + extra,
        "torchrun 2.6": [TORCH2_PYTHON, "-m", "torch.distributed.run", "--monitor_interval",
                         "0.1"] + extra,
    }


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


def print_row(name, unit, samples, scale, fmt):
    base = median(samples["ddprun"], scale)
    cells = [f"{fmt.format(base)} {unit}"]
    for ref in LAUNCHERS[1:]:
        value = median(samples[ref], scale)
        cells += [f"{fmt.format(value)} {unit}", f"{value / base:.0f}x" if base > 0 else "-"]
    print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build/bin/ddprun"))
    args = parser.parse_args()
    probe = os.path.join(os.path.dirname(args.ddprun), "restart_probe")
    for path in (args.ddprun, probe, "/usr/bin/torchrun", "/usr/bin/time", TORCH2_PYTHON):
        if not os.access(path, os.X_OK):
            sys.exit(f"launcher_bench: {path} is missing; run scripts/build (and scripts/setup)")
    if subprocess.run([TORCH2_PYTHON, "-c", "import torch"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        sys.exit("launcher_bench: PyTorch 2.6 does not run; run scripts/setup-torch2")

    work = tempfile.mkdtemp(prefix="ddprun-bench-")
    try:
        logs = os.path.join(work, "logs")
        launch = launcher_cmds(args.ddprun, logs,
                               ["--standalone", "--nproc_per_node=4", "--no_python", "/bin/true"])
        restart = launcher_cmds(args.ddprun, logs, ["--standalone", "--nproc_per_node=4",
                                                    "--max_restarts=1", "--no_python", probe])
        wall = {name: [] for name in LAUNCHERS}
        rss = {name: [] for name in LAUNCHERS}
        rest = {name: [] for name in LAUNCHERS}
        wrapper = []
        for i in range(args.repeat):
            for name in LAUNCHERS:   # interleaved: the same noise for all
                seconds, code = run(launch[name])
                if code != 0:
                    sys.exit(f"launcher_bench: {name} launch exited {code}")
                wall[name].append(seconds)
                rss[name].append(peak_rss_kib(launch[name], os.path.join(work, "rss")))
                rest[name].append(restart_once(restart[name], os.path.join(work, "probe")))
            wrapper.append(run([TORCH2_PYTHON, "-S", "-c", "pass"])[0])
        print(f"launcher_bench: {args.repeat} interleaved runs each, medians "
              f"({os.cpu_count()} CPUs)\n")
        print("| measure | ddprun | torchrun 1.13.1 | 1.13.1 / ddprun | torchrun 2.6 | "
              "2.6 / ddprun |")
        print("|---|---|---|---|---|---|")
        print_row("launch, 4 x /bin/true (wall)", "ms", wall, 1000, "{:.1f}")
        print_row("restart, failing exit -> 4 workers running", "ms", rest, 1000, "{:.2f}")
        print_row("launcher peak RSS", "MB", rss, 1 / 1024, "{:.1f}")
        print("\nmin/max ddprun launch ms: %.1f / %.1f; restart ms: %.2f / %.2f" % (
            min(wall["ddprun"]) * 1000, max(wall["ddprun"]) * 1000,
            min(rest["ddprun"]) * 1000, max(rest["ddprun"]) * 1000))
        print("torchrun 2.6's wrapper alone (scripts/torch2-python -S -c pass): median %.1f ms; "
              "2.6 launch without it: %.1f ms" % (
                  median(wrapper, 1000), median(wall["torchrun 2.6"], 1000) -
                  median(wrapper, 1000)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
