#!/usr/bin/python3
"""Hang detection and recovery: ddprun against torchrun 1.13 and 2.6.

Two Python ranks on one node, --max_restarts=1. In attempt 0 rank 1 hangs;
attempt 1 only records that it started. Times come from the workers
themselves (wall clock, one machine):

  detection  the hang began -> rank 1 is dead (rank 0 waits on its pidfd)
  recovery   rank 1 is dead -> the last worker of attempt 1 runs its first line

Scenarios:
  filetimer  rank 1 arms PyTorch's FileTimerClient for 1 s and sleeps; "the
             hang began" is the timer's deadline. ddprun, torchrun 1.13 and
             torchrun 2.6, all with TORCHELASTIC_ENABLE_FILE_TIMER=1.
  watchdog   rank 1 sleeps before an all_reduce that rank 0 enters after a
             second of compute; "the hang began" is rank 0 entering it. ddprun only
             (--watchdog_timeout=2; torchrun has no such watchdog).

  bench/self_healing_bench.py [--repeat 5] [--build build]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from worker_record import PROLOGUE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY113 = "/usr/bin/python3"
PY26 = os.path.join(ROOT, "scripts", "torch2-python")

WORKER = r'''
import time
started = time.time()
''' + PROLOGUE + r'''
if attempt == 1:
    record(f"start_{rank}", started)
    sys.exit(0)
scenario = sys.argv[2]
if scenario == "filetimer":
    from torch.distributed.elastic.timer import FileTimerClient
    if rank == 1:
        client = FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"])
        record("pid_1", os.getpid())
        deadline = time.time() + 1.0
        record("hang", deadline)
        client.acquire("step", deadline)
        time.sleep(600)
else:
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    if rank == 1:
        record("pid_1", os.getpid())
        time.sleep(600)
    end = time.time() + 1.0  # rank 0 still computes when rank 1 stops
    while time.time() < end:
        pass
# rank 0: watch rank 1 die, without CPU or I/O (a pidfd), so that in the
# watchdog scenario this rank looks as stuck as a rank blocked in a collective.
import select, signal
def died(*_):
    if not os.path.exists(os.path.join(out, "dead")):
        record("dead", time.time())
    os._exit(143)
signal.signal(signal.SIGTERM, died)
while not os.path.exists(os.path.join(out, "pid_1")):
    time.sleep(0.002)
time.sleep(0.05)
pid = int(open(os.path.join(out, "pid_1")).read())
if scenario == "watchdog":
    import threading
    record("hang", time.time())  # from now on the whole node waits
    threading.Thread(target=lambda: dist.all_reduce(torch.ones(1)), daemon=True).start()
fd = os.pidfd_open(pid)
select.select([fd], [], [])
record("dead", time.time())
time.sleep(600)
'''


def run(launcher, scenario, python, build, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    env = dict(os.environ, TORCHELASTIC_ENABLE_FILE_TIMER="1", OMP_NUM_THREADS="1",
               PYTHON_EXEC=python, USE_LIBUV="0")
    out = os.path.join(work, "out")
    os.makedirs(out)
    if launcher == "ddprun":
        cmd = [os.path.join(build, "bin", "ddprun"), "--nproc_per_node=2", "--max_restarts=1"]
        if scenario == "watchdog":
            cmd.append("--watchdog_timeout=2")
    else:
        logs = os.path.join(work, "logs")
        cmd = [python, "-m", "torch.distributed.run", "--nproc_per_node=2", "--max_restarts=1",
               "--monitor_interval=0.1", "--redirects=1", "--tee=2", f"--log_dir={logs}"]
        env["TORCHELASTIC_TIMER_FILE"] = os.path.join(work, "timer_pipe")
        # torchrun runs workers with its own interpreter (inside the root for 2.6).
        env.pop("PYTHON_EXEC")
    cmd += [script, out, scenario]
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=180)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")

    def read(name):
        try:
            return float(open(os.path.join(out, name)).read())
        except (OSError, ValueError):
            sys.exit(f"{launcher} ({scenario}, {python}): no {name} recorded; the run left "
                     f"{sorted(os.listdir(out))}\n{done.stderr[-3000:]}")
    hang, dead = read("hang"), read("dead")
    restarted = max(read("start_0"), read("start_1"))
    return dead - hang, restarted - dead


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    cases = [("ddprun", "filetimer", PY113, "ddprun (PyTorch 1.13 workers)"),
             ("torchrun", "filetimer", PY113, "torchrun 1.13"),
             ("ddprun", "filetimer", PY26, "ddprun (PyTorch 2.6 workers)"),
             ("torchrun", "filetimer", PY26, "torchrun 2.6"),
             ("ddprun", "watchdog", PY113, "ddprun --watchdog_timeout=2 (1.13 workers)")]
    results = {c[3]: ([], []) for c in cases}
    work = tempfile.mkdtemp(prefix="self-healing-")
    try:
        for i in range(args.repeat):
            print(f"run {i + 1}/{args.repeat}", file=sys.stderr, flush=True)
            order = cases if i % 2 == 0 else list(reversed(cases))
            for launcher, scenario, python, name in order:
                detect, recover = run(launcher, scenario, python, args.build, work)
                results[name][0].append(detect)
                results[name][1].append(recover)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| launcher | hang | detection (median) | recovery (median) | runs |")
    print("|---|---|---:|---:|---:|")
    for launcher, scenario, python, name in cases:
        detect, recover = results[name]
        print(f"| {name} | {scenario} | {statistics.median(detect) * 1e3:,.0f} ms | "
              f"{statistics.median(recover) * 1e3:,.0f} ms | {len(detect)} |")


if __name__ == "__main__":
    main()
