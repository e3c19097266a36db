#!/usr/bin/python3
"""A real framework under the launchers: NequIP's tiny training
(examples/nequip/tiny.yaml: Lightning DDP, gloo, 2 ranks, CPU) under ddprun
with no flag (--preload auto), ddprun --preload off (exec'd workers, as no
flag was before) or --preload MODULES, and the current PyTorch's torchrun
(the project's environment, scripts/python; labelled with its version),
alternating, in one run.

Every launcher runs the same worker, `python -u -m nequip.scripts.train`
(the module nequip-train's entry point calls; as a module, ddprun can fork
it from its zygote), with tiny.yaml plus a Lightning callback
(bench/frameworks/first_step.py, added by bench/frameworks/tiny_bench.yaml)
that appends "<event> <time.time()> <RANK> <TORCHELASTIC_RESTART_COUNT> <pid>"
lines to a file. Workers get OMP_NUM_THREADS=1. torchrun runs with
--standalone --monitor_interval=0.1 (its best case), ddprun with
--standalone. Two runs per launcher and repeat:

  launch run    tiny.yaml as it is (--epochs, default 4):
    launch      the launcher was started -> the first rank finished its first
                training batch (forward, backward with DDP's all-reduce,
                optimizer step); attempt 0 of the restart run below is a
                launch as well, so its median is over 2 x --repeat runs
    memory      proportional set size (Pss of /proc/PID/smaps_rollup) of the
                launcher and all its descendants, summed: taken by this
                script once both ranks finished their first batch, then
                every --sample-interval until a rank's training ends; the
                first sample split into the launcher's own processes (ddprun
                and its helper; torchrun's Python), ddprun's zygote and the
                workers, and the largest total of all samples
  restart run   --max_restarts=1 on both launchers, trainer.max_epochs=1;
                at its first batch of attempt 0, the last rank records the
                time and SIGKILLs itself:
    restart     the kill -> the first rank of attempt 1 finished its first
                training batch (the survivor's stop, the new workers' start,
                imports, Hydra, data, model, gloo and the batch)

A restart run whose attempt 1 never finishes a batch within --timeout is
counted as failed, with the reason found in the launcher's output, and the
time from the kill to attempt 1's callback import (a lower bound of its
restart) when it got that far.

Every run has its own temporary directory; each launcher starts in a session
of its own, and after every run no process of the job may be left: the
launcher's descendants are tracked and any process whose environment names
the run's event file is killed (and counted as left behind).

  scripts/python bench/frameworks_bench.py [--repeat 5] [--json FILE]
"""
import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from torch_current import current_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "bench", "frameworks")
NEQUIP = os.path.join(ROOT, "examples", "nequip")
RANKS = 2
MARKER = "FRAMEWORKS_BENCH_EVENTS"
POLL = 0.005


# --- processes -------------------------------------------------------------

def children_map():
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    return children


def tree(root):
    """root and its descendants (pids), from /proc."""
    children, found, todo = children_map(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def marked(events):
    """pids of processes whose environment names this run's event file."""
    needle = f"{MARKER}={events}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read() + b"\0":
                    found.append(int(pid))
        except OSError:
            continue
    return found


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sample_pss(launcher, workers):
    """PSS of the job split into launcher / zygote / workers (bytes)."""
    parts = {"launcher": 0, "zygote": 0, "workers": 0}
    children = children_map()
    todo = [(launcher, "launcher")]
    while todo:
        pid, part = todo.pop()
        if pid in workers:
            part = "workers"
        elif part == "launcher" and "preload_zygote" in cmdline(pid):
            part = "zygote"
        value = pss_bytes(pid)
        if value is not None:
            parts[part] += value
        todo += [(child, part) for child in children.get(pid, [])]
    parts["total"] = sum(parts.values())
    return parts


def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# --- events ----------------------------------------------------------------

def read_events(path):
    """[(event, time, rank, attempt, pid)] of the complete lines so far."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    events = []
    for line in text.split("\n")[:-1]:  # the last piece is "" or an unfinished line
        parts = line.split()
        if len(parts) == 5:
            events.append((parts[0], float(parts[1]), parts[2], parts[3], int(parts[4])))
    return events


def times(events, name, attempt):
    """{rank: time} of the first `name` event of each rank in `attempt`."""
    found = {}
    for event, t, rank, att, _ in events:
        if event == name and att == str(attempt) and rank not in found:
            found[rank] = t
    return found


def wait_for(cond, process, deadline):
    """Polls cond() until it returns a true value, the launcher exits or the
    deadline passes; returns cond()'s last value."""
    while True:
        value = cond()
        if value or process.poll() is not None or time.time() > deadline:
            return cond() if not value else value
        time.sleep(POLL)


# --- one run ---------------------------------------------------------------

class Launcher:
    def __init__(self, name, kind, python, ddprun, preload):
        self.name, self.kind, self.python, self.ddprun, self.preload = (
            name, kind, python, ddprun, preload)

    def command(self, restarts):
        if self.kind == "ddprun":
            cmd = [self.ddprun, "--standalone", f"--nproc_per_node={RANKS}"]
            if self.preload:
                cmd.append(f"--preload={self.preload}")
        else:
            cmd = [self.python, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={RANKS}", "--monitor_interval=0.1"]
        return cmd + [f"--max_restarts={restarts}", "-m", "nequip.scripts.train"]


def start(launcher, work, kill_rank, restarts, epochs):
    os.makedirs(work)
    events = os.path.join(work, "events")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=launcher.python,
               PYTHONPATH=CONFIGS + (os.pathsep + os.environ["PYTHONPATH"]
                                     if os.environ.get("PYTHONPATH") else ""),
               **{MARKER: events, "FRAMEWORKS_BENCH_KILL": "1" if kill_rank else "0"})
    if launcher.kind != "ddprun":
        env.pop("PYTHON_EXEC")  # torchrun runs workers with its own interpreter
    cmd = launcher.command(restarts) + [
        "-cp", NEQUIP, "-cd", CONFIGS, "-cn", "tiny_bench",
        f"hydra.run.dir={os.path.join(work, 'run')}", f"trainer.max_epochs={epochs}"]
    log = open(os.path.join(work, "launcher.log"), "w")
    started = time.time()
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
    log.close()
    return process, started, events, cmd


def stop(process, events, grace):
    """Ends the job: waits `grace` s for the launcher to exit, then SIGTERMs
    it (it stops its workers) and after 5 s SIGKILLs every process of the
    job (the launcher's descendants, and any process with this run's
    environment: torchrun 2.x starts each worker in a session of its own).
    Returns (exit code, pids still alive with this run's environment once
    the launcher has exited, which are then killed)."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            kill(set(tree(process.pid)) | set(marked(events)))
            process.wait()
    left = marked(events)
    if left:
        kill(left)
        deadline = time.time() + 5
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in left):
            time.sleep(0.01)
    return process.returncode, left


def tail(work, n=3000):
    try:
        with open(os.path.join(work, "launcher.log"), errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def failure_reason(work):
    """What the launcher's output says about a failed attempt 1."""
    text = tail(work, 10**7)
    if "connectFullMesh failed" in text:
        return ("gloo's connectFullMesh failed (Connection refused): a rank dialled an "
                "address of the dead attempt, read from the store kept across restarts")
    inits = text.count("Initializing distributed: GLOBAL_RANK")
    if inits >= 2 * RANKS:
        return (f"both ranks of attempt 1 entered init_process_group ('Initializing "
                f"distributed') and never left it")
    return None


def launch_run(launcher, work, args):
    process, started, events, cmd = start(launcher, work, False, 0, args.epochs)
    deadline = started + args.timeout
    result = {"launcher": launcher.name, "kind": "launch", "cmd": cmd}
    try:
        both = wait_for(lambda: len(times(read_events(events), "step", 0)) == RANKS and
                        read_events(events), process, deadline)
        steps = times(read_events(events), "step", 0)
        if len(steps) < RANKS:
            result["error"] = f"attempt 0 did not step ({len(steps)}/{RANKS} ranks)"
            return result
        workers = {pid for event, _, _, _, pid in both if event == "step"}
        first = sample_pss(process.pid, workers)
        samples = [first]
        # a short while after: every sample-interval until a rank's training ends
        while process.poll() is None and time.time() < deadline:
            if times(read_events(events), "end", 0):
                break
            time.sleep(args.sample_interval)
            if times(read_events(events), "end", 0):
                break
            samples.append(sample_pss(process.pid, workers))
        evs = read_events(events)
        imported = times(evs, "imported", 0)
        result.update(
            launch=min(steps.values()) - started,
            launch_last=max(steps.values()) - started,
            launch_imported=min(imported.values()) - started if imported else None,
            pss_first=first, pss_peak=max(s["total"] for s in samples),
            pss_samples=len(samples))
    finally:
        code, left = stop(process, events, grace=max(5.0, deadline - time.time()))
        result.update(exit=code, left_behind=left)
    if code != 0:
        result["error"] = f"exit {code}"
    return result


def restart_run(launcher, work, args):
    process, started, events, cmd = start(launcher, work, True, 1, 1)
    result = {"launcher": launcher.name, "kind": "restart", "cmd": cmd}
    try:
        killed = wait_for(lambda: times(read_events(events), "kill", 0), process,
                          started + args.timeout)
        if not killed:
            result["error"] = "attempt 0 did not reach its first batch"
            return result
        death = min(killed.values())
        evs = read_events(events)
        steps, imported = times(evs, "step", 0), times(evs, "imported", 0)
        result.update(launch=min(steps.values()) - started if steps else None,
                      launch_imported=min(imported.values()) - started if imported else None)
        again = wait_for(lambda: times(read_events(events), "step", 1), process,
                         death + args.timeout)
        imported = times(read_events(events), "imported", 1)
        result.update(death=death - started,
                      imported=min(imported.values()) - death if imported else None)
        if again:
            result["restart"] = min(again.values()) - death
    finally:
        hung = process.poll() is None and "restart" not in result
        code, left = stop(process, events, grace=0.0 if hung else 60.0)
        result.update(exit=code, left_behind=left)
    if "restart" not in result:
        reason = failure_reason(work)
        if hung:
            result["failed"] = (f"attempt 1 hung: no batch {args.timeout:.0f} s after the kill"
                                + (f"; {reason}" if reason else ""))
        else:
            result["failed"] = f"launcher exited {code} without a batch in attempt 1" + (
                f"; {reason}" if reason else "")
    elif code != 0:
        result["error"] = f"exit {code} after attempt 1 stepped"
    return result


# --- report ----------------------------------------------------------------

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ddprun", default=os.path.join(ROOT, "build", "bin", "ddprun"))
    parser.add_argument("--python", help="the workers' (and torchrun's) interpreter; default: "
                        "the project environment's (scripts/python)")
    parser.add_argument("--preload", default="off",
                        help="the second ddprun's --preload (default off: exec'd workers)")
    parser.add_argument("--epochs", type=int, default=4,
                        help="trainer.max_epochs of the launch runs (default 4, tiny.yaml's)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a run may take to its first batch, and from the kill to "
                             "attempt 1's (default 60)")
    parser.add_argument("--sample-interval", type=float, default=0.1,
                        help="seconds between PSS samples after the first batch (default 0.1)")
    parser.add_argument("--json", metavar="FILE", help="also write every run, the medians and "
                        "the ratios as JSON to FILE ('-': stdout, after the table)")
    args = parser.parse_args()

    if args.python:
        python = args.python
        version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip().split("+")[0]
    else:
        python, version = current_torch("frameworks_bench")
    check = subprocess.run([python, "-c", "import lightning, nequip; print(lightning.__version__,"
                            " nequip.__version__)"], capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(f"frameworks_bench: {python} cannot import lightning and nequip (scripts/setup)"
                 f"\n{check.stderr[-2000:]}")
    lightning_version, nequip_version = check.stdout.split()
    if not os.access(args.ddprun, os.X_OK):
        sys.exit(f"frameworks_bench: {args.ddprun} is missing; run scripts/build")

    launchers = [Launcher("ddprun (no flag)", "ddprun", python, args.ddprun, None),
                 Launcher(f"ddprun --preload {args.preload}", "ddprun", python, args.ddprun,
                          args.preload),
                 Launcher(f"torchrun {version}", "torchrun", python, None, None)]
    runs = []
    base = tempfile.mkdtemp(prefix="frameworks-bench-")
    try:
        for i in range(args.repeat):
            order = launchers if i % 2 == 0 else list(reversed(launchers))
            for launcher in order:
                for kind, fn in (("launch", launch_run), ("restart", restart_run)):
                    work = tempfile.mkdtemp(prefix=f"{kind}-", dir=base)
                    os.rmdir(work)
                    print(f"run {i + 1}/{args.repeat}: {launcher.name}, {kind}",
                          file=sys.stderr, flush=True)
                    result = fn(launcher, work, args)
                    result["repeat"] = i
                    runs.append(result)
                    if result.get("left_behind"):
                        print(f"  left behind (killed): {result['left_behind']}",
                              file=sys.stderr)
                    if "error" in result:
                        sys.exit(f"frameworks_bench: {launcher.name} {kind} run: "
                                 f"{result['error']}\n{' '.join(result['cmd'])}\n{tail(work)}")
                    if "failed" in result:
                        print(f"  {result['failed']}", file=sys.stderr)
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def of(name, kind, key, sub=None):
        out = []
        for r in runs:
            if r["launcher"] == name and r["kind"] == kind and key in r:
                out.append(r[key][sub] if sub else r[key])
        return out

    names = [launcher.name for launcher in launchers]
    medians = {}
    for name in names:
        medians[name] = {
            # attempt 0 of a restart run is a launch as well, up to its first batch
            "launch_s": median(of(name, "launch", "launch") + of(name, "restart", "launch")),
            "launch_imported_s": median(of(name, "launch", "launch_imported") +
                                        of(name, "restart", "launch_imported")),
            "launch_samples": len(of(name, "launch", "launch") + of(name, "restart", "launch")),
            "restart_s": median(of(name, "restart", "restart")),
            "restart_imported_s": median(of(name, "restart", "imported")),
            "restarted": len(of(name, "restart", "restart")),
            "restart_runs": len(of(name, "restart", "exit")),
            "failures": [r["failed"] for r in runs
                         if r["launcher"] == name and r["kind"] == "restart" and "failed" in r],
            "pss_first_total": median(of(name, "launch", "pss_first", "total")),
            "pss_first_launcher": median(of(name, "launch", "pss_first", "launcher")),
            "pss_first_zygote": median(of(name, "launch", "pss_first", "zygote")),
            "pss_first_workers": median(of(name, "launch", "pss_first", "workers")),
            "pss_peak_total": median(of(name, "launch", "pss_peak")),
            "left_behind": sum(len(r.get("left_behind", [])) for r in runs
                               if r["launcher"] == name),
        }
    torchrun, plain, pre = names[2], names[0], names[1]

    def ratio(key, a, b):
        x, y = medians[a][key], medians[b][key]
        return x / y if x and y else None

    keys = ["launch_s", "launch_imported_s", "restart_s", "restart_imported_s",
            "pss_first_total", "pss_first_launcher", "pss_first_workers", "pss_peak_total"]
    ratios = {f"{torchrun} / {d}": {k: ratio(k, torchrun, d) for k in keys} for d in (plain, pre)}

    ms = lambda v: "-" if v is None else f"{v * 1e3:,.0f} ms"  # noqa: E731
    mib = lambda v: "-" if v is None else f"{v / 2**20:,.1f} MiB"  # noqa: E731
    x = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731

    def row(label, key, fmt, cells=None):
        cells = cells or {n: fmt(medians[n][key]) for n in names}
        r1 = ratios[f"{torchrun} / {plain}"].get(key)
        r2 = ratios[f"{torchrun} / {pre}"].get(key)
        print(f"| {label} | {cells[plain]} | {cells[pre]} | {cells[torchrun]} | {x(r1)} | "
              f"{x(r2)} |")

    print(f"\nNequIP tiny (examples/nequip/tiny.yaml), {RANKS} ranks, CPU, gloo; "
          f"torch {version}, lightning {lightning_version}, nequip {nequip_version}; "
          f"medians of {args.repeat} alternating runs; {os.cpu_count()} CPUs, "
          f"{platform.platform()}\n")
    print(f"| measure | {plain} | {pre} | {torchrun} | {torchrun.split()[0]} / ddprun | "
          f"{torchrun.split()[0]} / ddprun --preload {args.preload} |")
    print("|---|---:|---:|---:|---:|---:|")
    row(f"launch → first training batch (first rank; {medians[plain]['launch_samples']} runs)",
        "launch_s", ms)
    row("  of which launch → callback imported (imports done)", "launch_imported_s", ms)
    cells = {}
    for n in names:
        m = medians[n]
        cell = ms(m["restart_s"])
        if m["restarted"] < m["restart_runs"]:
            cell += f" ({m['restarted']}/{m['restart_runs']} restarted)"
        cells[n] = cell
    row("rank SIGKILLed → first batch of attempt 1", "restart_s", ms, cells)
    row("  of which kill → attempt 1's callback imported", "restart_imported_s", ms)
    row("job PSS at first batch: total", "pss_first_total", mib)
    row("  launcher's own (ddprun + helper / torchrun)", "pss_first_launcher", mib)
    cells = {n: mib(medians[n]["pss_first_zygote"]) if medians[n]["pss_first_zygote"] else "-"
             for n in names}
    row("  ddprun's zygote", "pss_first_zygote", mib, cells)
    row(f"  workers ({RANKS})", "pss_first_workers", mib)
    row("job PSS, largest sample during training", "pss_peak_total", mib)
    print()
    for n in names:
        m = medians[n]
        if m["failures"]:
            print(f"- {n}: attempt 1 failed in {len(m['failures'])}/{m['restart_runs']} restart "
                  f"runs:")
            for f in m["failures"]:
                print(f"  - {f}")
        if m["left_behind"]:
            print(f"- {n}: {m['left_behind']} process(es) left behind after the launcher's exit "
                  f"(killed by the bench)")
    for n in names:
        launch = of(n, "launch", "launch") + of(n, "restart", "launch")
        restart = of(n, "restart", "restart")
        spread = f"- {n}: launch {ms(min(launch))}-{ms(max(launch))}"
        if restart:
            spread += f", restart {ms(min(restart))}-{ms(max(restart))}"
        print(spread.replace(" ms-", "-") + " (min-max)")
    samples = [r["pss_samples"] for r in runs if r["kind"] == "launch"]
    print(f"- PSS samples per launch run: {min(samples)}-{max(samples)} "
          f"(every {args.sample_interval} s from both ranks' first batch to the end of training)")

    if args.json:
        doc = {"python": python, "torch": version, "lightning": lightning_version,
               "nequip": nequip_version, "ranks": RANKS, "repeat": args.repeat,
               "epochs": args.epochs, "preload": args.preload, "cpus": os.cpu_count(),
               "platform": platform.platform(), "runs": runs, "medians": medians,
               "ratios": ratios}
        if args.json == "-":
            print(json.dumps(doc, indent=1))
        else:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
