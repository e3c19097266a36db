#!/usr/bin/python3
"""Python worker start and restart: ddprun with no flag (--preload auto)
against ddprun --preload off (exec'd workers) and torchrun, under Debian's PyTorch 1.13 and the current PyTorch (the
project's environment, scripts/python; rows labelled with its version).

A 4-rank gloo DDP job on one node, --max_restarts=1. Every rank records
when it finished its first training step (init_process_group, DDP's
broadcast, one forward, backward and all-reduce). In attempt 0, once every
rank has done so, rank 1 dies (exit 1); attempt 1 records its first step
and ends. Times (wall clock, one machine):

  launch   the launcher was started -> the last rank of attempt 0 finished
           its first step
  restart  rank 1 died -> the last rank of attempt 1 finished its first step
  memory   the proportional set size (PSS, /proc/PID/smaps_rollup) of every
           process of the job (the launcher and all its descendants: agent,
           zygote, workers; torchrun 2.x starts each worker in a session of
           its own) summed,
           taken by rank 1 once every rank of attempt 0 finished its first
           step: what the job costs the node, pages shared between its
           processes (a preloaded torch's, after the fork) counted once

Where a restart's time goes (the last rank of each stage; medians):
  launcher  the death -> the worker's script runs its first line (detect,
            stop, rendezvous, spawn, and the interpreter's start; for a
            forked worker, the fork)
  import    -> torch and DDP imported
  group     -> init_process_group returned (on NCCL: CUDA's context and
            the communicator, set up eagerly with device_id)
  step      -> the first step finished (DDP's broadcast, one step)
and ddprun's own account of the same incident (its "Downtime on this node"
line).

A launcher whose attempt 1 never finishes a step (torchrun 2.6 was: its
restarted Gloo group failed to connect, or hung) is reported as failed, with
the time from the death to the last rank of attempt 1 having imported torch
and DDP: a lower bound of its restart.

Under PyTorch 2.x, DDP's constructor imports torch._dynamo (it reads
torch._dynamo.utils.get_optimize_ddp_mode(); with 2.13, 823 modules, sympy
among them, about 0.85 s: bench/ddp_lazy_imports.py): --preload auto
preloads it.

  bench/preload_bench.py [--repeat 5] [--build build] [--python 1.13|current|both]

On a GPU machine (scripts/gpu-check runs it so) the same job runs on NCCL,
one rank per GPU (with one GPU, rank 0 dies and comes back), with that
machine's interpreter and a given ddprun:

  bench/preload_bench.py --backend nccl --python-exe python3 --ddprun DIR/ddprun
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from process_tree import descendants
from torch_current import current_torch
from worker_record import PROLOGUE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY113 = "/usr/bin/python3"
RANKS = 4

WORKER = PROLOGUE + r'''
record(f"started_{attempt}_{rank}", time.time())
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
record(f"imported_{attempt}_{rank}", time.time())
backend = os.environ["BENCH_BACKEND"]
if backend == "nccl":
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
record(f"inited_{attempt}_{rank}", time.time())
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
model = DDP(model, device_ids=[device.index] if backend == "nccl" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss = model(torch.randn(32, 64, device=device)).pow(2).mean()
opt.zero_grad(); loss.backward(); opt.step()
if backend == "nccl":
    torch.cuda.synchronize()
record(f"step_{attempt}_{rank}", time.time())
if attempt == 1:
    dist.destroy_process_group()
    sys.exit(0)
if rank == int(os.environ["BENCH_DYING_RANK"]):
    while len([n for n in os.listdir(out) if n.startswith("step_0_") and "." not in n]) < int(os.environ["WORLD_SIZE"]):
        time.sleep(0.001)
    children = {}  # the job: the launcher and its descendants
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
        except OSError:
            continue
    job, pss = [int(open(os.path.join(out, "launcher")).read())], 0
    while job:
        pid = job.pop()
        job += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss += sum(int(l.split()[1]) * 1024 for l in f if l.startswith("Pss:"))
        except OSError:
            continue
    record("pss", pss)
    record("death", time.time())
    os._exit(1)
time.sleep(600)  # stopped by the launcher
'''


def run(launcher, python, preload, ddprun, backend, ranks, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    out = os.path.join(work, "out")
    os.makedirs(out)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=python, BENCH_BACKEND=backend,
               BENCH_DYING_RANK=str(1 if ranks > 1 else 0))
    if launcher == "ddprun":
        cmd = [ddprun, f"--nproc_per_node={ranks}",
               "--max_restarts=1"]
        if preload:
            cmd.append(f"--preload={preload}")
    else:
        logs = os.path.join(work, "logs")
        cmd = [python, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
               "--max_restarts=1", "--monitor_interval=0.1", "--redirects=1", "--tee=2",
               f"--log_dir={logs}"]
        env.pop("PYTHON_EXEC")  # torchrun runs workers with its own interpreter
    cmd += [script, out]
    started = time.time()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    with open(os.path.join(out, "launcher.tmp"), "w") as f:  # read by rank 1, for the memory
        f.write(str(process.pid))
    os.rename(os.path.join(out, "launcher.tmp"), os.path.join(out, "launcher"))
    try:
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        # torchrun 2.x starts each worker in a session of its own: killing the
        # launcher's group would leave them running (hung in attempt 1).
        job = descendants(process.pid)
        os.killpg(process.pid, signal.SIGKILL)
        for pid in job:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, err = process.communicate()

    def read(name):
        try:
            return float(open(os.path.join(out, name)).read())
        except (OSError, ValueError):
            return None

    def last(prefix):
        times = [read(f"{prefix}_{r}") for r in range(ranks)]
        return None if None in times else max(times)
    first, death, pss = last("step_0"), read("death"), read("pss")
    phases = None
    marks = [last(f"{stage}_1") for stage in ("started", "imported", "inited", "step")]
    if death is not None and None not in marks:
        points = [death] + marks
        phases = [b - a for a, b in zip(points, points[1:])]
    downtime = [line.split("] ", 1)[-1] for line in err.splitlines()
                if "Downtime on this node" in line]
    downtime = downtime[-1] if downtime else None
    if first is None or death is None:
        sys.exit(f"{' '.join(cmd)}: attempt 0 did not run ({process.returncode}); it left "
                 f"{sorted(os.listdir(out))}\n{err[-3000:]}")
    again = last("step_1")
    if again is not None and process.returncode == 0:
        return first - started, again - death, None, pss, phases, downtime
    if launcher == "ddprun":
        sys.exit(f"{' '.join(cmd)} failed ({process.returncode}):\n{err[-3000:]}")
    imported = last("imported_1")
    return (first - started, None, None if imported is None else imported - death, pss, phases,
            downtime)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ddprun", help="the ddprun to run (default BUILD/bin/ddprun)")
    parser.add_argument("--python", choices=["1.13", "current", "both"], default="both",
                        help="the PyTorch of the workers (and of torchrun): Debian's 1.13, "
                             "the project environment's (scripts/python), or both")
    parser.add_argument("--python-exe", help="an interpreter with torch to use instead of "
                        "--python's (a GPU machine's own)")
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--ranks", type=int,
                        help=f"ranks of the job (default {RANKS} on gloo, one per GPU on nccl)")
    args = parser.parse_args()
    ddprun = args.ddprun or os.path.join(args.build, "bin", "ddprun")
    versions = []
    if args.python_exe:
        out = subprocess.run([args.python_exe, "-c", "import torch; print(torch.__version__, "
                              "torch.cuda.device_count())"], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"preload_bench: {args.python_exe} cannot import torch:\n{out.stderr[-2000:]}")
        version, gpus = out.stdout.split()
        versions.append((version.split("+")[0], shutil.which(args.python_exe) or args.python_exe))
    else:
        gpus = "0"
        if args.python in ("1.13", "both"):
            versions.append(("1.13", PY113))
        if args.python in ("current", "both"):
            # Its interpreter directly, not the scripts/python wrapper (torch_current.py).
            python, version = current_torch("preload_bench")
            versions.append((version, python))
    ranks = args.ranks or (int(gpus) if args.backend == "nccl" else RANKS)
    if ranks < 1:
        sys.exit("preload_bench: --backend nccl needs a GPU (torch sees none)")
    print(f"{args.backend}, {ranks} ranks", file=sys.stderr, flush=True)
    cases = []
    for v, python in versions:
        # No flag (--preload auto), exec'd workers (--preload off), torchrun.
        cases += [("ddprun", python, None, f"ddprun, no flag (PyTorch {v})"),
                  ("ddprun", python, "off", f"ddprun --preload off (PyTorch {v})"),
                  ("torchrun", python, None, f"torchrun {v}")]
    results = {c[3]: ([], [], [], []) for c in cases}
    phases = {c[3]: [] for c in cases}
    downtimes = {}
    work = tempfile.mkdtemp(prefix="preload-bench-")
    try:
        for i in range(args.repeat):
            print(f"run {i + 1}/{args.repeat}", file=sys.stderr, flush=True)
            order = cases if i % 2 == 0 else list(reversed(cases))
            for launcher, python, preload, name in order:
                launch, restart, bound, pss, steps, downtime = run(
                    launcher, python, preload, ddprun, args.backend, ranks, work)
                results[name][0].append(launch)
                results[name][3].append(pss)
                if steps:
                    phases[name].append(steps)
                if downtime:
                    downtimes[name] = downtime
                if restart is not None:
                    results[name][1].append(restart)
                elif bound is not None:
                    results[name][2].append(bound)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms = lambda values: f"{statistics.median(values) * 1e3:,.0f} ms"  # noqa: E731
    mib = lambda values: f"{statistics.median(values) / 2**20:,.0f} MiB"  # noqa: E731
    print("\n| launcher | launch -> first step | restart -> first step | memory (PSS) | runs |")
    print("|---|---:|---:|---:|---:|")
    for _, _, preload, name in cases:
        launch, restart, bound, pss = results[name]
        again = ms(restart) if restart else "-"
        if bound:
            again += (f" (failed {len(bound)}/{len(launch)}: attempt 1 never stepped; "
                      f"imports done after {ms(bound)})")
        print(f"| {name} | {ms(launch)} | {again} | {mib(pss)} | {len(launch)} |")
    print("\n| launcher | restart: launcher -> script | import | process group | first step |")
    print("|---|---:|---:|---:|---:|")
    for _, _, _, name in cases:
        if phases[name]:
            cells = " | ".join(ms([p[i] for p in phases[name]]) for i in range(4))
            print(f"| {name} | {cells} |")
    for _, _, _, name in cases:
        if name in downtimes:
            print(f"{name}, its last run: {downtimes[name]}")
    for launcher, python, preload, name in cases:
        if launcher != "ddprun" or preload is not None:
            continue
        fast = statistics.median(results[name][1])
        for _, other_python, _, other in cases:
            _, restart, bound, pss = results[other]
            if other_python != python or other == name:
                continue
            if restart:
                print(f"restart: {name} is {statistics.median(restart) / fast:.1f}x faster "
                      f"than {other}")
            if bound:
                print(f"restart: {name} is >{statistics.median(bound) / fast:.1f}x faster "
                      f"than {other} (its lower bound)")
            print(f"memory: {name} uses {statistics.median(results[name][3]) / 2**20:,.0f} MiB, "
                  f"{other} {statistics.median(pss) / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
