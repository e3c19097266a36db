#!/usr/bin/python3
"""Where a restart's seconds go: one failure after training began, in plain
DDP, Lightning and NequIP jobs (2 CPU ranks, gloo, --max_restarts=1), under
ddprun with no flag, ddprun as no flag was before --preload auto and the
survivors' grace (--preload=off --survivor_grace=30), and the current
PyTorch's torchrun, alternating.

Two instruments:
  the agent's phases   ddprun's own incident record (events.jsonl in the run
                       directory: detect, stop, restart, rendezvous, spawn,
                       process_group, first_step; docs/operations.md)
  the workers' probe   the same for every launcher: each worker appends
                       "<event> <time.time()> <rank> <attempt>" lines to a
                       file: `death` (rank 1, attempt 0, right before it
                       exits or SIGKILLs itself), `started` (the script's
                       first line; NequIP: its Lightning callback's import,
                       after torch, lightning and nequip), `pg` (the process
                       group formed; not for NequIP), `step` (the first
                       training step done)
From the probe, per run:
  restart        death -> the first rank of attempt 1 stepped
  to a worker    death -> the first worker of attempt 1 started (the
                 launcher's detection, stop, decision, rendezvous and spawn)
  to the group   that -> the last rank's process group (imports, gloo)
  to the step    that (NequIP: the start) -> the first rank's first step
torchrun's events (--event_log_handler=console) give no phase but the
rendezvous's duration_ms (2.4+), shown when it printed one.

A crash loop (--jobs crashloop): a script that imports torch and then a
module that does not exist, --max_restarts=10, under ddprun (its default
--max_no_progress_restarts=3) and torchrun: the time to the launcher's
exit, the attempts it ran, and its exit code.

  launch         the launcher started -> the first rank's first step (attempt 0)

--fail-delay S: the failing rank waits S seconds after its step before it
dies (a failure some time into training; the restart is timed from the
death either way).

  scripts/python bench/downtime_bench.py [--repeat 3] [--jobs ddp,lightning,nequip,crashloop]
                                          [--fail-delay 10] [--no-before]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from torch_current import current_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEQUIP = os.path.join(ROOT, "examples", "nequip")
CONFIGS = os.path.join(ROOT, "bench", "frameworks")
PHASES = ["detect", "stop", "restart", "rendezvous", "spawn", "process_group", "first_step"]

PROBE = r'''
import os, sys, time
def probe(event):
    line = f"{event} {time.time():.6f} {os.environ['RANK']} {os.environ['TORCHELASTIC_RESTART_COUNT']}\n"
    fd = os.open(os.environ["DOWNTIME_BENCH_EVENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode()); os.close(fd)
probe("started")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
'''

DDP = PROBE + r'''
import torch, torch.distributed as dist
dist.init_process_group("gloo")
probe("pg")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    if step == 0:
        probe("step")
    if step == 5 and attempt == 0 and rank == 1:
        time.sleep(float(os.environ["DOWNTIME_BENCH_DELAY"]))
        probe("death"); os._exit(1)
dist.destroy_process_group()
'''

LIGHTNING = PROBE + r'''
import torch, lightning as L
class Module(L.LightningModule):
    def __init__(self):
        super().__init__(); self.net = torch.nn.Linear(64, 1); self.seen = False
    def setup(self, stage):
        probe("pg")  # Lightning formed the process group before setup
    def training_step(self, batch, i):
        return self.net(batch[0]).pow(2).mean()
    def on_train_batch_end(self, outputs, batch, i):
        if not self.seen:
            self.seen = True; probe("step")
        if i == 5 and attempt == 0 and rank == 1:
            time.sleep(float(os.environ["DOWNTIME_BENCH_DELAY"]))
            probe("death"); os._exit(1)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(640, 64)), batch_size=32)
L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
          enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False).fit(Module(), data)
'''


def launcher_command(kind, python, ddprun, flags, job, work):
    if kind == "ddprun":
        cmd = [ddprun, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
               "--log_dir", os.path.join(work, "logs")] + flags
    else:
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "--max_restarts=1", "--monitor_interval=0.1", "--event_log_handler=console"]
    if job == "nequip":
        return cmd + ["-m", "nequip.scripts.train", "-cp", NEQUIP, "-cd", CONFIGS, "-cn",
                      "tiny_bench", f"hydra.run.dir={os.path.join(work, 'run')}",
                      "trainer.max_epochs=1"]
    script = os.path.join(work, f"{job}_job.py")  # not lightning.py: it would shadow the package
    with open(script, "w") as f:
        f.write(DDP if job == "ddp" else LIGHTNING)
    return cmd + [script]


def rendezvous_durations(text):
    """torchrun's RENDEZVOUS events (--event_log_handler=console), one per
    attempt: their duration_ms (None where it printed null)."""
    out = []
    for line in text.splitlines():
        start = line.find('{"name": "torchelastic.worker.status.RENDEZVOUS"')
        if start < 0:
            continue
        try:
            out.append(json.loads(line[start:])["metadata"].get("duration_ms"))
        except ValueError:
            continue
    return out


def probe_lines(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[0], float(parts[1]), parts[2], parts[3]))
    return out


def run_once(name, kind, python, ddprun, flags, job, timeout, delay):
    work = tempfile.mkdtemp(prefix="downtime-bench-")
    events = os.path.join(work, "probe")
    env = dict(os.environ, OMP_NUM_THREADS="1", DOWNTIME_BENCH_EVENTS=events,
               FRAMEWORKS_BENCH_EVENTS=events, FRAMEWORKS_BENCH_KILL="1", PYTHON_EXEC=python,
               DOWNTIME_BENCH_DELAY=str(delay), FRAMEWORKS_BENCH_KILL_DELAY=str(delay))
    if job == "nequip":
        env["PYTHONPATH"] = CONFIGS + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if kind != "ddprun":
        env.pop("PYTHON_EXEC")
    cmd = launcher_command(kind, python, ddprun, flags, job, work)
    with open(os.path.join(work, "launcher.log"), "w") as log:
        launched = time.time()
        p = subprocess.Popen(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            code = "timeout"
    lines = probe_lines(events)
    if job == "nequip":  # the callback's names
        lines = [("death" if e == "kill" else "started" if e == "imported" else e, t, r, a)
                 for e, t, r, a in lines]
    result = {"code": code}
    steps0 = [t for e, t, r, a in lines if e == "step" and a == "0"]
    if steps0:
        result["launch"] = min(steps0) - launched
    death = [t for e, t, r, a in lines if e == "death" and a == "0"]
    steps1 = [t for e, t, r, a in lines if e == "step" and a == "1"]
    started1 = [t for e, t, r, a in lines if e == "started" and a == "1"]
    pg1 = [t for e, t, r, a in lines if e == "pg" and a == "1"]
    if death and steps1:
        d = death[0]
        result["restart"] = min(steps1) - d
        if started1:
            result["to a worker"] = min(started1) - d
            if pg1:
                result["to the group"] = max(pg1) - min(started1)
                result["to the step"] = min(steps1) - max(pg1)
            else:
                result["to the step"] = min(steps1) - min(started1)
    if kind == "ddprun":
        for root, _, files in os.walk(os.path.join(work, "logs")):
            if "events.jsonl" in files:
                for line in open(os.path.join(root, "events.jsonl")):
                    e = json.loads(line)
                    m = e["metadata"]
                    if e["name"] == "ddprun.agent.INCIDENT" and m["incident"] == 1:
                        for ph in PHASES:
                            if f"{ph}_ms" in m:
                                result[f"agent {ph}"] = m[f"{ph}_ms"] / 1000.0
                        result["agent lost"] = m["lost_ms"] / 1000.0
    else:
        text = open(os.path.join(work, "launcher.log"), errors="replace").read()
        durations = rendezvous_durations(text)
        if len(durations) >= 2 and durations[-1] is not None:
            result["torchrun rendezvous"] = durations[-1] / 1000.0
    if "restart" not in result:
        result["log"] = open(os.path.join(work, "launcher.log"), errors="replace").read()[-2000:]
    shutil.rmtree(work, ignore_errors=True)
    return result


CRASH = "import torch\nimport a_module_that_is_not_there\n"


def crash_loop(kind, python, ddprun, timeout):
    work = tempfile.mkdtemp(prefix="downtime-bench-")
    script = os.path.join(work, "crash.py")
    with open(script, "w") as f:
        f.write(CRASH)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=python)
    if kind == "ddprun":
        cmd = [ddprun, "--standalone", "--nproc_per_node=2", "--max_restarts=10",
               "--log_dir", os.path.join(work, "logs"), script]
    else:
        env.pop("PYTHON_EXEC")
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "--max_restarts=10", "--monitor_interval=0.1", "--event_log_handler=console",
               script]
    started = time.time()
    out = subprocess.run(cmd, env=env, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=timeout)
    took = time.time() - started
    text = out.stderr + out.stdout
    # ddprun logs each restart; torchrun records a RENDEZVOUS event per attempt.
    attempts = (len(re.findall(r"Restarting the worker group", text)) + 1 if kind == "ddprun"
                else len(rendezvous_durations(text)))
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": took, "attempts": attempts, "code": out.returncode}


def crash_loops(args, python, version, ddprun):
    launchers = [("ddprun (--max_no_progress_restarts=3)", "ddprun"),
                 (f"torchrun {version}", "torchrun")]
    runs = {name: [crash_loop(kind, python, ddprun, args.timeout) for _ in range(args.repeat)]
            for name, kind in launchers}
    print(f"\n### crash loop: import error after torch, --max_restarts=10, 2 ranks "
          f"(medians of {args.repeat})\n")
    print("| launcher | to the exit | attempts | exit code | per attempt |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in launchers:
        r = runs[name]
        seconds = statistics.median(x["seconds"] for x in r)
        attempts = statistics.median(x["attempts"] for x in r)
        codes = sorted({x["code"] for x in r})
        print(f"| {name} | {seconds:.2f} s | {attempts:.0f} | {codes} | {seconds / attempts:.2f} s |")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", default="ddp,lightning,nequip")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--fail-delay", type=float, default=0,
                        help="seconds the failing rank waits after its step before it dies "
                             "(default 0: right after the first steps)")
    parser.add_argument("--no-before", action="store_true",
                        help="leave out the row of ddprun as no flag was before")
    args = parser.parse_args()
    python, version = current_torch("downtime_bench")
    ddprun = os.path.join(args.build, "bin", "ddprun")
    for job in args.jobs.split(","):
        if job == "crashloop":
            crash_loops(args, python, version, ddprun)
            continue
        # No flag (the default: --preload auto, --survivor_grace 0.05), what
        # no flag gave before both (exec'd workers, the survivors given
        # --shutdown_timeout), and torchrun.
        before = ["--preload=off", "--survivor_grace=30"]
        launchers = [("ddprun (no flag)", "ddprun", []),
                     ("ddprun " + " ".join(before), "ddprun", before),
                     (f"torchrun {version}", "torchrun", [])]
        if args.no_before:
            del launchers[1]
        runs = {name: [] for name, _, _ in launchers}
        for _ in range(args.repeat):
            for name, kind, flags in launchers:
                r = run_once(name, kind, python, ddprun, flags, job, args.timeout,
                             args.fail_delay)
                runs[name].append(r)
                if "restart" not in r:
                    print(f"# {job} {name}: no restart measured (exit {r['code']})\n{r.get('log', '')}",
                          file=sys.stderr)
        keys = ["launch", "restart", "to a worker", "to the group", "to the step"] + \
               [f"agent {p}" for p in PHASES] + ["agent lost", "torchrun rendezvous"]
        print(f"\n### {job} (2 ranks, gloo, CPU; the failing rank dies {args.fail_delay:g} s "
              f"after its step; medians of {args.repeat}, seconds)\n")
        print("| measure | " + " | ".join(n for n, _, _ in launchers) + " |")
        print("|---|" + "---:|" * len(launchers))
        for key in keys:
            cells = []
            for name, _, _ in launchers:
                values = [r[key] for r in runs[name] if key in r]
                cells.append(f"{statistics.median(values):.2f}" if values else "-")
            if any(c != "-" for c in cells):
                print(f"| {key} | " + " | ".join(cells) + " |")
        medians = {name: statistics.median(r["restart"] for r in runs[name] if "restart" in r)
                   for name, _, _ in launchers if any("restart" in r for r in runs[name])}
        first, reference = launchers[0][0], launchers[-1][0]
        if first in medians and reference in medians:
            print(f"\nrestart: {reference} / {first} = "
                  f"{medians[reference] / medians[first]:.1f}x")
        launches = {name: [r["launch"] for r in runs[name] if "launch" in r]
                    for name in (first, reference)}
        if all(launches.values()):
            print(f"launch -> first step: {reference} / {first} = "
                  f"{statistics.median(launches[reference]) / statistics.median(launches[first]):.2f}x")
        launcher_side = [sum(r.get(f"agent {p}", 0) for p in PHASES[:5]) for r in runs[first]]
        if launcher_side:
            print(f"launcher-side phases (detect+stop+restart+rendezvous+spawn) of {first}: "
                  f"median {statistics.median(launcher_side):.3f} s")
        restarted = {name: sum("restart" in r for r in runs[name]) for name, _, _ in launchers}
        print("\nrestarted: " + ", ".join(f"{n} {c} of {args.repeat}" for n, c in restarted.items()))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
