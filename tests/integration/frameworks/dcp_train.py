"""Plain DDP that checkpoints with torch.distributed.checkpoint (DCP) after
every epoch and resumes from the last complete one: `dcp_train.py DIR`.
With DCP_TEST_KILL=1, rank 1 of attempt 0 dies after epoch 1's checkpoint.
Rank 0 prints `resumed from epoch N` when it loaded one and
`weights <hex floats>` at the end."""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 4


def main():
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    y = x @ (torch.arange(8.0) / 8)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    last = os.path.join(out, "last")  # the last complete epoch, written after its save
    if os.path.exists(last):
        epoch = int(open(last).read())
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=os.path.join(out, f"epoch_{epoch}"))
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start = epoch + 1
        if rank == 0:
            print(f"resumed from epoch {epoch}", flush=True)
    for epoch in range(start, EPOCHS):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optim": optim_state},
                 checkpoint_id=os.path.join(out, f"epoch_{epoch}"))
        dist.barrier()
        if rank == 0:
            with open(last + ".tmp", "w") as f:
                f.write(str(epoch))
            os.replace(last + ".tmp", last)
        dist.barrier()
        if os.environ.get("DCP_TEST_KILL") == "1" and attempt == 0 and epoch == 1 and rank == 1:
            os._exit(1)
    if rank == 0:
        weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
        print("weights " + " ".join(float(w).hex() for w in weights.double()), flush=True)
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
