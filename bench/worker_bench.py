"""The Python torch.distributed side of bench/distributed_bench.py.

Run under a launcher (one process per rank); rank 0 prints one JSON object per
result, in the same format as build/bin/worker_bench:

    worker_bench.py allreduce [--sizes 4,1024,...]
    worker_bench.py ddp --strategy ddp|nosync [--steps N]
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def iterations_for(nbytes):
    if nbytes <= 256 << 10:
        return 200
    if nbytes <= 4 << 20:
        return 50
    if nbytes <= 25 << 20:
        return 10
    return 5


def median(values):
    return sorted(values)[len(values) // 2]


def allreduce(sizes):
    for nbytes in sizes:
        tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(tensor)
        times = []
        for _ in range(iterations_for(nbytes)):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            times.append(time.perf_counter() - start)
        if dist.get_rank() == 0:
            print(json.dumps({"kind": "allreduce", "bytes": nbytes, "seconds": median(times)}),
                  flush=True)


def ddp_steps(strategy, steps, batch):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 100))
    ddp = nn.parallel.DistributedDataParallel(model)
    sgd = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, 1024)
    y = torch.randint(100, (batch,))
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for step in range(steps + 5):
        start = time.perf_counter()
        sgd.zero_grad()
        if strategy == "nosync":
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        else:
            loss_fn(ddp(x), y).backward()
        sgd.step()
        if step >= 5:
            times.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        print(json.dumps({"kind": "ddp", "strategy": strategy,
                          "parameters": sum(p.numel() for p in model.parameters()),
                          "seconds": median(times)}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("allreduce")
    a.add_argument("--sizes", default=None)
    d = sub.add_parser("ddp")
    d.add_argument("--strategy", choices=["ddp", "nosync"], default="ddp")
    d.add_argument("--steps", type=int, default=20)
    d.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    if args.mode == "allreduce":
        sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else
                 [4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 25 << 20,
                  64 << 20, 100 << 20])
        allreduce(sizes)
    else:
        ddp_steps(args.strategy, args.steps, args.batch)
    dist.barrier()  # no rank tears down its Gloo pairs while the other still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
