// Python training scripts shared by the tests that run PyTorch workers.
#pragma once

namespace ddprun::test_support {

// A 2-rank DDP regression: loss must fall, and both ranks end identical.
inline constexpr char kDdpTrainScript[] = R"(
import os, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    w = torch.arange(8.0) / 8
    for step in range(60):
        x = torch.randn(32, 8, generator=g)
        loss = ((model(x).squeeze() - x @ w) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if step in (0, 59): print(f"step {step} loss {loss.item():.4f}")
    total = sum(p.detach().sum() for p in model.parameters())
    t = torch.tensor([total.item()]); dist.all_reduce(t)
    print(f"checksum {total.item():.6f} mean {t.item() / world:.6f}")
    dist.destroy_process_group()
main()
)";

// Rank 0 fails in attempt 0, after every rank has joined the process group.
// In attempt 1 the last rank joins late: the others must wait for its new
// address, not find attempt 0's.
inline constexpr char kFlakyScript[] = R"(
import os, time, torch, torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 1 and int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
    time.sleep(1)
dist.init_process_group("gloo")
if attempt == 0 and dist.get_rank() == 0:
    raise SystemExit(3)
t = torch.ones(1); dist.all_reduce(t)
print(f"attempt {attempt} sum {t.item():.0f}")
dist.destroy_process_group()
)";

}  // namespace ddprun::test_support
