"""One replica group of torchft, launched as torchft's README launches it:
one worker per replica group (`torchrun --nproc_per_node=1`), the lighthouse
named by TORCHFT_LIGHTHOUSE. torchft's Manager is a TCPStore client of
MASTER_ADDR:MASTER_PORT and never hosts a store: the launcher must serve one
there. Trains a linear model for --steps steps through torchft's DDP and
Optimizer wrappers and prints the committed step and a checksum.

  TORCHFT_LIGHTHOUSE=http://HOST:PORT ddprun --nproc_per_node=1 torchft_train.py
"""
import argparse
import os
from datetime import timedelta

import torch
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    manager = Manager(
        pg=ProcessGroupGloo(),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{os.environ.get('REPLICA_GROUP_ID', '0')}",
        timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, inner)
    generator = torch.Generator().manual_seed(1)
    while manager.current_step() < args.steps:
        optimizer.zero_grad()
        ddp(torch.randn(16, 8, generator=generator)).pow(2).mean().backward()
        optimizer.step()
    checksum = sum(p.double().sum().item() for p in model.parameters())
    print(f"torchft committed step {manager.current_step()}: checksum {checksum!r}", flush=True)
    manager.shutdown()


if __name__ == "__main__":
    main()
