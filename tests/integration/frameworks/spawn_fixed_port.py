"""The torch.multiprocessing.spawn pattern of PyTorch's DDP tutorial: the
script starts its own processes and sets MASTER_ADDR/MASTER_PORT itself, to
a fixed port (argv[1]).

  spawn_fixed_port.py PORT
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    print(f"spawned rank {rank} of {world_size}: sum {t.item():g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = sys.argv[1]
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
