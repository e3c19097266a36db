"""The plain torchrun pattern: read RANK, WORLD_SIZE and LOCAL_RANK from the
environment, init_process_group, DistributedDataParallel with a
DistributedSampler. Rank 0 prints `weights <hex floats>` at the end."""
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    print(f"rank {rank} of {world} (local {local_rank})", flush=True)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    y = x @ (torch.arange(8.0) / 8)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if rank == 0:
        weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
        print("weights " + " ".join(float(w).hex() for w in weights.double()), flush=True)
    # DDP's reducer holds the process group: freed before it is destroyed,
    # not at the interpreter's exit (where PyTorch 2.13's Gloo threads
    # sometimes abort the process on a loaded machine).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
