# The chaos harness's worker (tests/chaos/ddprun_chaos.cc): "training" in
# exact integer arithmetic, so the result does not depend on the world size
# or the order of a sum, and a checkpoint every 5 steps it resumes from.
#
# The harness paces the job by the steps its faults fire at: after printing
# step S, rank 0 opens CHAOS_DIR/hold-S if there is one, a FIFO that blocks
# it (and, through the next all_reduce, every rank) until the harness has
# fired its fault and let go (then it is a regular file: a restarted job
# passes it at once). It first creates CHAOS_DIR/at-S, which tells the
# harness the job holds there (the console line may come late: a paused
# agent passes its workers' lines on only when it runs again). No step
# waits for time.
#
# Each step every rank adds up its share of the step's CHAOS_SAMPLES samples
# (sample i goes to rank i % world), the shares are all-reduced (int64 SUM,
# exact), and the state moves on from the total. A rank that trained in a
# stale world (missed or counted twice a share) changes the final checksum.
# Runs under PyTorch 1.13 and the current one (Gloo).
import os
import sys

import torch
import torch.distributed as dist

MODULUS = (1 << 61) - 1
MULTIPLIER = 6364136223846793005
STEPS = int(os.environ["CHAOS_STEPS"])
SAMPLES = int(os.environ.get("CHAOS_SAMPLES", "64"))
CHECKPOINT = os.environ["CHAOS_CHECKPOINT"]  # a path every host sees
FOLDER = os.environ["CHAOS_DIR"]
# The harness asks a worker to fail (exit 1) by creating this file.
EXIT_FILE = os.path.join(FOLDER, f"exit-{os.getpid()}")


def sample_value(state, i, step):
    return (state * 31 + i * 7 + step) % 1000003


def load():
    try:
        with open(CHECKPOINT) as f:
            step, state = f.read().split()
        return int(step), int(state)
    except FileNotFoundError:
        return 0, 1


def save(step, state):
    partial = f"{CHECKPOINT}.{os.getpid()}"
    with open(partial, "w") as f:
        f.write(f"{step} {state}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, CHECKPOINT)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
step, state = load()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"start rank {rank} world {world} pid {os.getpid()} step {step} restart {restart}",
      flush=True)
while step < STEPS:
    if os.path.exists(EXIT_FILE):
        print(f"rank {rank} exits 1 as the harness asked", flush=True)
        sys.exit(1)
    share = sum(sample_value(state, i, step) for i in range(rank, SAMPLES, world))
    total = torch.tensor([share], dtype=torch.int64)
    dist.all_reduce(total)
    state = (state * MULTIPLIER + int(total.item())) % MODULUS
    step += 1
    if rank == 0:
        if step % 5 == 0 or step == STEPS:
            save(step, state)
        print(f"step {step} world {world}", flush=True)
        hold = os.path.join(FOLDER, f"hold-{step}")
        if os.path.exists(hold):
            open(os.path.join(FOLDER, f"at-{step}"), "w").close()
            with open(hold) as gate:  # a FIFO: until the harness lets go
                gate.read()
dist.barrier()
if rank == 0:
    print(f"checksum {state}", flush=True)
print(f"done rank {rank} world {world}", flush=True)
dist.destroy_process_group()
