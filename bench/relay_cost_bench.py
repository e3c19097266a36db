#!/usr/bin/env python3
"""What the node relay (the default for multi-node jobs) costs a small job.

N agents on this machine (each its own loopback address, 127.0.0.1+i, as
separate nodes), 4 Python workers each, c10d on the first agent's store.
Each worker reports, against the launch's start time: when
init_process_group returned and when its first step (a Gloo all_reduce and a
barrier) was done. A run's times are the slowest rank's. `--store_relay=on`
and `off` alternate, run after run; medians and the ratio relay / direct.

    scripts/python bench/relay_cost_bench.py --nodes 2,4 --runs 5
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDPRUN = os.path.join(ROOT, "build", "bin", "ddprun")

WORKER = r"""
import os, sys, time
t0 = float(os.environ["BENCH_T0"])
import torch, torch.distributed as dist
t_imported = time.time() - t0
dist.init_process_group("gloo")
t_init = time.time() - t0
t = torch.ones(1)
dist.all_reduce(t)
dist.barrier()
t_step = time.time() - t0
print(f"bench rank {dist.get_rank()} init {t_init:.4f} step {t_step:.4f} "
      f"master {os.environ['MASTER_ADDR']} call {t_init - t_imported:.4f}", flush=True)
dist.destroy_process_group()
"""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(nodes, relay, python, folder):
    script = os.path.join(folder, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    port = free_port()
    env = dict(os.environ, DDPRUN_TOKEN="bench-secret", OMP_NUM_THREADS="1")
    t0 = time.time()
    env["BENCH_T0"] = repr(t0)
    agents = []
    for i in range(nodes):
        argv = [DDPRUN, f"--nnodes={nodes}", "--nproc_per_node=4", "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bench",
                f"--local_addr=127.0.0.{i + 1}", "--log_prefix=",
                f"--rdzv_conf=is_host={1 if i == 0 else 0},last_call_timeout=0.1",
                f"--store_relay={'on' if relay else 'off'}", python, script]
        agents.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True))
    inits, steps, calls, masters = [], [], [], set()
    for agent in agents:
        out, _ = agent.communicate(timeout=300)
        if agent.returncode != 0:
            sys.exit(f"an agent failed ({agent.returncode}):\n{out}")
        for line in out.splitlines():
            if line.startswith("bench rank"):
                parts = line.split()
                inits.append(float(parts[4]))
                steps.append(float(parts[6]))
                masters.add(parts[8])
                calls.append(float(parts[10]))
    if len(inits) != 4 * nodes:
        sys.exit(f"{len(inits)} of {4 * nodes} ranks reported")
    return max(inits), max(steps), max(calls), masters


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    print("| nodes x workers | to init_process_group: relay | direct | ratio | "
          "to the first step: relay | direct | ratio | the init_process_group call: relay | "
          "direct | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for nodes in [int(n) for n in args.nodes.split(",")]:
            results = {True: ([], [], []), False: ([], [], [])}
            one_run(nodes, True, args.python, folder)  # warm the page cache
            for _ in range(args.runs):
                for relay in (True, False):
                    init, step, call, masters = one_run(nodes, relay, args.python, folder)
                    # The relay: every worker's MASTER_ADDR is its own node's.
                    if relay and masters != {"127.0.0.1"}:
                        sys.exit(f"relayed workers saw MASTER_ADDR {masters}")
                    for column, value in enumerate((init, step, call)):
                        results[relay][column].append(value)
            med = {k: [statistics.median(column) for column in v] for k, v in results.items()}
            cells = []
            for column in range(3):
                cells += [f"{med[True][column]:.3f} s", f"{med[False][column]:.3f} s",
                          f"{med[True][column] / med[False][column]:.3f}"]
            print(f"| {nodes} x 4 | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
