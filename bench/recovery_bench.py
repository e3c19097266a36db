#!/usr/bin/python3
"""Recovery after losing a node: 3 ddprun agents on one machine (127.0.0.1-3),
dynamic rendezvous 2:3 with the store hosted by node 0. Node 2's agent is
killed with SIGKILL; measured is the time from the kill to the last worker
of the survivors' new round running (build/bin/restart_probe records each
worker's start).

  bench/recovery_bench.py [--repeat 5]
"""
import argparse
import glob
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_files(pattern, count, limit=20.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        files = glob.glob(pattern)
        if len(files) >= count:
            return files
        time.sleep(0.002)
    raise RuntimeError(f"timed out waiting for {count} files like {pattern}")


def once(ddprun, probe, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    port = free_port()
    env = dict(os.environ, PROBE_DIR=work, PROBE_MODE="wait", DDPRUN_TOKEN="bench",
               OMP_NUM_THREADS="1", DDPRUN_LOG_LEVEL="warn")
    agents = []
    for i in range(3):
        conf = "last_call_timeout=5,is_host=" + ("1" if i == 0 else "0")
        cmd = [ddprun, "--nnodes=2:3", "--nproc_per_node=2", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=recovery",
               f"--local_addr=127.0.0.{i + 1}", f"--rdzv_conf={conf}", "--no_python", probe]
        agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL))
        if i == 0:
            time.sleep(0.1)  # let node 0 bind the store first
    try:
        wait_files(os.path.join(work, "start_1_*"), 6)
        killed = time.time_ns()
        agents[2].send_signal(signal.SIGKILL)
        starts = wait_files(os.path.join(work, "start_2_*"), 4)
        time.sleep(0.05)
        last = max(int(open(p).read()) for p in glob.glob(os.path.join(work, "start_2_*")))
        return (last - killed) / 1e9
    finally:
        for a in agents:
            if a.poll() is None:
                a.send_signal(signal.SIGTERM)
        for a in agents:
            try:
                a.wait(timeout=10)
            except subprocess.TimeoutExpired:
                a.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build/bin/ddprun"))
    args = parser.parse_args()
    probe = os.path.join(os.path.dirname(args.ddprun), "restart_probe")
    for path in (args.ddprun, probe):
        if not os.access(path, os.X_OK):
            sys.exit(f"recovery_bench: {path} is missing; run scripts/build")
    work = tempfile.mkdtemp(prefix="ddprun-recovery-")
    try:
        times = [once(args.ddprun, probe, os.path.join(work, str(i))) for i in range(args.repeat)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"recovery_bench: kill -9 of 1 of 3 agents -> survivors' 4 workers running, "
          f"{args.repeat} runs")
    print("| median | min | max |\n|---:|---:|---:|")
    print(f"| {statistics.median(times) * 1000:.1f} ms | {min(times) * 1000:.1f} ms | "
          f"{max(times) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
