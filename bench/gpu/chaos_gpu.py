"""Faults on CUDA workers, for a GPU machine: what ddprun's self-healing does
with NCCL ranks that hold a CUDA context.

    python3 bench/gpu/chaos_gpu.py --ddprun PATH [--steps 30]
    scripts/python bench/gpu/chaos_gpu.py --ddprun build/bin/ddprun --nproc 2   (no GPU)

The job: DistributedDataParallel on NCCL, one rank per GPU, run with no
flag but --max_restarts=3 (so with the default --preload auto). It trains a
small MLP deterministically (fixed seed, deterministic algorithms; the
batch of step s comes from a generator seeded with s), saves a checkpoint
(torch.save of the step, model and optimizer) every 5 steps and resumes
from the last one, and rank 0 prints a checksum of the final weights.

The faults fire at a step boundary, not at a time: after step S rank 0
finds CHAOS_DIR/hold-S, writes its pid to CHAOS_DIR/at-S and waits until
the hold is gone; the script fires the fault there and lets go. Cases:

  undisturbed        the reference checksum
  worker SIGKILL     at step 12: restarted, resumes from step 10
  worker SIGKILL x2  at steps 12 and 17 (the second in the restarted job)
  worker exit 1      at step 12
  worker SIGSTOP     at step 12, with --watchdog_timeout=5: found stopped
                     (state T), killed, restarted
  ddprun SIGTERM     at step 12: it stops its workers and exits 143
  ddprun SIGKILL     at step 12: its workers die with it

and checks, as the chaos harness (tests/chaos) does on CPU: a job with
survivable faults ends 0 with the undisturbed checksum; the others end with
their exit code; afterwards no process of the job is left and no process
holds the GPU (nvidia-smi) within 10 s. It prints one line per case, a
markdown table (with the time from each worker fault to the restarted
job's first step) and exits non-zero if any check failed.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# bench/process_tree.py
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from process_tree import descendants  # noqa: E402

WORKER = r'''
import os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
folder, steps = os.environ["CHAOS_DIR"], int(os.environ["CHAOS_STEPS"])
checkpoint = os.path.join(folder, "checkpoint.pt")
torch.use_deterministic_algorithms(True)
local = int(os.environ["LOCAL_RANK"])
if torch.cuda.is_available():
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
else:  # the script's own check on a machine without a GPU (--nproc N)
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
step = 0
if os.path.exists(checkpoint):
    state = torch.load(checkpoint, map_location=device)
    step = state["step"]
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
ddp = DDP(model, device_ids=[local] if device.type == "cuda" else None)
print(f"start rank {rank} pid {os.getpid()} step {step} restart "
      f"{os.environ['TORCHELASTIC_RESTART_COUNT']}", flush=True)
while step < steps:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(64, 256, generator=g).to(device)
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    step += 1
    if rank == 0:
        if step % 5 == 0:
            partial = checkpoint + f".{os.getpid()}"
            torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()},
                       partial)
            os.replace(partial, checkpoint)
        print(f"step {step}", flush=True)
        hold = os.path.join(folder, f"hold-{step}")
        if os.path.exists(hold):
            with open(os.path.join(folder, f"at-{step}.tmp"), "w") as f:
                f.write(str(os.getpid()))
            os.replace(os.path.join(folder, f"at-{step}.tmp"), os.path.join(folder, f"at-{step}"))
            while os.path.exists(hold):
                time.sleep(0.01)
            if os.path.exists(os.path.join(folder, f"exit-{os.getpid()}")):
                print("exits 1 as asked", flush=True)
                sys.exit(1)
    dist.barrier()
if rank == 0:
    print("checksum " + repr(sum(p.double().sum().item() for p in model.parameters())),
          flush=True)
dist.destroy_process_group()
'''


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gpu_pids():
    if not shutil.which("nvidia-smi"):
        return set()
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {int(p) for p in out.stdout.split() if p.strip().isdigit()}


def wait_for(condition, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Job:
    def __init__(self, ddprun, nproc, script, folder, steps, extra):
        env = dict(os.environ, CHAOS_DIR=folder, CHAOS_STEPS=str(steps),
                   PYTHON_EXEC=sys.executable, CUBLAS_WORKSPACE_CONFIG=":4096:8")
        self.cmd = [ddprun, f"--nproc_per_node={nproc}", "--max_restarts=3", *extra, script]
        self.lines = []  # (time, line) of its stdout
        self.seen = set()  # every process of the job seen so far
        self.process = subprocess.Popen(self.cmd, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self.err = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.lines),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, self.err),
                         daemon=True).start()

    @staticmethod
    def _read(stream, into):
        for line in stream:  # without ddprun's default "[rank N]: " prefix
            into.append((time.time(), re.sub(r"^\[rank \d+\]: ", "", line.rstrip("\n"))))

    def note_processes(self):
        self.seen.update(descendants(self.process.pid))

    def wait(self, seconds=300):
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.note_processes()
            os.killpg(self.process.pid, signal.SIGKILL)
            for pid in self.seen:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.wait()
            return None


def hold(folder, step):
    open(os.path.join(folder, f"hold-{step}"), "w").close()


def reach(job, folder, step, seconds=240):
    """Waits until rank 0 holds after `step`; its pid."""
    at = os.path.join(folder, f"at-{step}")
    if not wait_for(lambda: os.path.exists(at) or job.process.poll() is not None, seconds):
        return None
    if not os.path.exists(at):
        return None
    job.note_processes()
    return int(open(at).read())


def release(folder, step):
    os.remove(os.path.join(folder, f"hold-{step}"))


def first_step_after(job, moment, step):
    """Seconds from `moment` to the restarted job's first step: the first
    line "step N" after it with N <= `step` (the job resumes from the last
    checkpoint before the fault's step, so a line of the job before the
    fault, read late, is not taken for it)."""
    for t, line in list(job.lines):
        if t >= moment and line.startswith("step ") and int(line.split()[1]) <= step:
            return t - moment
    return None


def run_case(name, ddprun, nproc, script, steps, reference):
    folder = tempfile.mkdtemp(prefix="chaos-gpu-")
    watchdog = ["--watchdog_timeout=5"] if name == "worker SIGSTOP" else []
    fault_steps = {"worker SIGKILL x2": [12, 17]}.get(name, [12] if name != "undisturbed" else [])
    for s in fault_steps:
        hold(folder, s)
    job = Job(ddprun, nproc, script, folder, steps, watchdog)
    problems, back = [], []
    for s in fault_steps:
        pid = reach(job, folder, s)
        if pid is None:
            problems.append(f"never reached step {s}")
            break
        fired = time.time()
        if name.startswith("worker SIGKILL"):
            os.kill(pid, signal.SIGKILL)
        elif name == "worker exit 1":
            open(os.path.join(folder, f"exit-{pid}"), "w").close()
        elif name == "worker SIGSTOP":
            os.kill(pid, signal.SIGSTOP)
        elif name == "ddprun SIGTERM":
            os.kill(job.process.pid, signal.SIGTERM)
        elif name == "ddprun SIGKILL":
            os.kill(job.process.pid, signal.SIGKILL)
        release(folder, s)
        if name.startswith("worker"):
            # The restarted job's first step (after resuming at the checkpoint).
            if not wait_for(lambda: first_step_after(job, fired, s) is not None, 120):
                problems.append(f"no step after the fault at step {s}")
                break
            back.append(first_step_after(job, fired, s))
    code = job.wait()
    out = [line for _, line in job.lines]
    err = [line for _, line in job.err]
    checksum = next((line.split()[1] for line in out if line.startswith("checksum ")), None)
    expect_code = {"ddprun SIGTERM": 143, "ddprun SIGKILL": -signal.SIGKILL}.get(name, 0)
    if code != expect_code:
        problems.append(f"exit {code}, expected {expect_code}")
    if expect_code == 0:
        if reference is not None and checksum != reference:
            problems.append(f"checksum {checksum}, expected {reference}")
        restarts = sum(1 for line in out if line.startswith("start rank 0") and
                       not line.endswith("restart 0"))
        if restarts != len(fault_steps):
            problems.append(f"{restarts} restarts for {len(fault_steps)} faults")
    job.note_processes()
    left = lambda: [p for p in job.seen if alive(p)]  # noqa: E731
    if not wait_for(lambda: not left(), 10):
        problems.append(f"processes left: {left()}")
    on_gpu = lambda: gpu_pids() & (job.seen | {job.process.pid})  # noqa: E731
    if not wait_for(lambda: not on_gpu(), 10):
        problems.append(f"still on the GPU: {on_gpu()}")
    said = [line for line in err if "hung" in line or "stopped by a signal" in line or
            "was killed by" in line or "exited with" in line or "received SIGTERM" in line or
            "Downtime on this node" in line or "reload" in line or "zygote" in line or
            "left out" in line]
    shutil.rmtree(folder, ignore_errors=True)
    return {"name": name, "code": code, "checksum": checksum, "back": back, "problems": problems,
            "said": said[:8] + [line for line in said[8:] if "Downtime" in line],
            "err": err[-30:]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddprun", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--nproc", default="gpu",
                        help="ranks (default: one per GPU; a number runs on CPU with Gloo where "
                             "there is no GPU, to check this script)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="chaos-gpu-script-")
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(WORKER)
    cases = ["undisturbed", "worker SIGKILL", "worker SIGKILL x2", "worker exit 1",
             "worker SIGSTOP", "ddprun SIGTERM", "ddprun SIGKILL"]
    results, reference, failed = [], None, False
    for name in cases:
        r = run_case(name, args.ddprun, args.nproc, script, args.steps, reference)
        if name == "undisturbed":
            reference = r["checksum"]
            if reference is None:
                r["problems"].append("no checksum")
        results.append(r)
        ok = not r["problems"]
        failed = failed or not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}: exit {r['code']}"
              + (f", checksum {r['checksum']}" if r["checksum"] else "")
              + (f", back to training in {', '.join(f'{b:.2f} s' for b in r['back'])}"
                 if r["back"] else "")
              + (f"; {'; '.join(r['problems'])}" if r["problems"] else ""), flush=True)
        for line in r["said"]:
            print(f"  ddprun said: {line}", flush=True)
        if r["problems"]:
            print("  its stderr's end:\n    " + "\n    ".join(r["err"]), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print("\n| fault | exit | final weights | fault -> first step again | left behind |")
    print("|---|---:|---|---:|---|")
    for r in results:
        weights = ("reference" if r["name"] == "undisturbed" else
                   "= reference" if r["checksum"] == reference and r["checksum"] else
                   "-" if r["checksum"] is None else "DIFFERENT")
        back = ", ".join(f"{b:.2f} s" for b in r["back"]) or "-"
        left = "; ".join(p for p in r["problems"] if "left" in p or "GPU" in p) or "nothing"
        print(f"| {r['name']} | {r['code']} | {weights} | {back} | {left} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
