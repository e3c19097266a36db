"""A Python NCCL DDP job for a GPU machine: what ddprun and torchrun give it.

    ddprun   --nproc_per_node=gpu --numa_binding=node bench/gpu/nccl_ddp.py
    torchrun --nproc_per_node=gpu --numa-binding=node bench/gpu/nccl_ddp.py

Each rank reports (one line starting "GPUCHECK ", JSON) what the launcher
gave it: its environment, its GPU, the CPUs it may run on, the NUMA nodes its
memory may come from and the memory policy of its heap (from
/proc/self/numa_maps: "prefer:N" after --numa_binding), then trains a small
MLP with DistributedDataParallel on NCCL for --steps steps and reports the
wall-clock time (time.time(), the same clock as the driver's) at which its
first step finished, the seconds per step after it, an all-reduce's result
and, on rank 0, a checksum of the final weights (equal under any launcher
for the same world size). scripts/gpu-check runs it.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def heap_policy() -> str:
    """The memory policy of this process's heap, as numa_maps shows it."""
    try:
        with open("/proc/self/numa_maps") as maps:
            for line in maps:
                if " heap" in line:
                    return line.split()[1]
    except OSError:
        pass
    return "unknown"


def status_field(name: str) -> str:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    t = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(t)
    expected = world * (world + 1) / 2

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)
    ).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator(device=device).manual_seed(1 + rank)
    first_step_at = None
    start = None
    for step in range(args.steps):
        x = torch.randn(256, 512, device=device, generator=generator)
        optimizer.zero_grad()
        ddp(x).pow(2).mean().backward()
        optimizer.step()
        if step == 0:
            torch.cuda.synchronize()
            first_step_at = time.time()
            start = time.perf_counter()
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - start) / max(1, args.steps - 1)
    checksum = sum(p.double().sum().item() for p in model.parameters())

    report = {
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world,
        "backend": dist.get_backend(),
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "gpu": torch.cuda.get_device_name(device),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torchelastic_run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        "cpus_allowed": status_field("Cpus_allowed_list"),
        "cpu_count_allowed": len(os.sched_getaffinity(0)),
        "mems_allowed": status_field("Mems_allowed_list"),
        "heap_policy": heap_policy(),
        "all_reduce_ok": bool(torch.all(t == expected).item()),
        "first_step_at": first_step_at,
        "ms_per_step": per_step * 1e3,
        "checksum": checksum if rank == 0 else None,
    }
    print("GPUCHECK " + json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
