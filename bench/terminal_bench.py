"""How soon a worker's progress update ('\\r', no newline: tqdm, Lightning's
bar) reaches the user's terminal, under ddprun and under torchrun of the
current PyTorch, side by side.

Each launcher runs on a pseudo-terminal this script reads, as from a shell,
with one worker that draws a bar of STEPS updates, one every INTERVAL
seconds, each carrying the CLOCK_MONOTONIC time it was written; the line
ends only after the last step. For every update the latency is the time
from the worker's write to its appearance on the terminal; an update that
appears only when its line ends is as late as the rest of the bar.

  scripts/python bench/terminal_bench.py [--repeat 5] [--steps 10] [--interval 0.2]
      [--ddprun build/bin/ddprun] [--baseline build-portable/bin/ddprun]

--baseline: another ddprun build to compare (the portable build of the
commit before live terminals, say); left out when it does not exist.
"""
import argparse
import os
import pty
import re
import select
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_current import ROOT, current_torch  # noqa: E402

WORKER = r'''
import sys, time
steps, interval = int(sys.argv[1]), float(sys.argv[2])
for i in range(steps):
    sys.stderr.write(f"\rstep {i} at {time.monotonic_ns()} ns "); sys.stderr.flush()
    time.sleep(interval)
sys.stderr.write("\n"); sys.stderr.flush()
'''


def run_on_terminal(argv, env):
    """Runs argv on a new pseudo-terminal; returns [(step, latency s)]."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, env)
    seen = {}
    buffer = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        now = time.monotonic_ns()
        buffer += data
        for match in re.finditer(rb"step (\d+) at (\d+) ns", buffer):
            step = int(match.group(1))
            seen.setdefault(step, (now - int(match.group(2))) / 1e9)
    os.waitpid(pid, 0)
    os.close(fd)
    return sorted(seen.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build/bin/ddprun"))
    parser.add_argument("--baseline", default=os.path.join(ROOT, "build-portable/bin/ddprun"))
    args = parser.parse_args()
    python, version = current_torch("terminal_bench")
    torchrun = os.path.join(os.path.dirname(python), "torchrun")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "bar.py")
        with open(script, "w") as f:
            f.write(WORKER)
        program = [script, str(args.steps), str(args.interval)]
        env = dict(os.environ, PYTHON_EXEC=python, OMP_NUM_THREADS="1")
        launchers = {"ddprun": [args.ddprun, "--nproc_per_node=1"] + program,
                     f"torchrun {version}": [torchrun, "--standalone", "--nproc_per_node=1"]
                     + program}
        if os.path.exists(args.baseline):
            launchers["ddprun (baseline)"] = [args.baseline, "--nproc_per_node=1"] + program
        first, every = {name: [] for name in launchers}, {name: [] for name in launchers}
        for _ in range(args.repeat):
            for name, argv in launchers.items():  # interleaved
                latencies = run_on_terminal(argv, env)
                if latencies:
                    first[name].append(latencies[0][1])
                    every[name].append(statistics.median(l for _, l in latencies))
    print(f"| launcher | first update (median of {args.repeat}) | median update | ")
    print("|---|---|---|")
    for name in launchers:
        if not first[name]:
            print(f"| {name} | never shown | |")
            continue
        print(f"| {name} | {statistics.median(first[name]) * 1e3:.2f} ms | "
              f"{statistics.median(every[name]) * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
