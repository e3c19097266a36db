// Python training scripts shared by the tests that run PyTorch workers.
#pragma once

namespace ddprun::harness {

// A 2-rank DDP regression: loss must fall, and both ranks end identical.
inline constexpr char kDdpTrainScript[] = R"(
import gc, os, torch, torch.distributed as dist
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
    # DDP's reducer holds the process group: freed here, not at the
    # interpreter's exit, where PyTorch 2.13's Gloo threads sometimes abort
    # the process (SIGABRT) on a loaded machine.
    del model, opt
    gc.collect()
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

// The store ops PyTorch 2.8-2.14 added, from real workers on ddprun's store:
// queues through the process group's store (a PrefixStore over the agent's
// store, as torch.distributed hands it out), list_keys, and BARRIER with its
// timeout (CANCEL_WAIT) from a plain TCPStore client at MASTER_ADDR:PORT.
// Prints what this PyTorch has; the tests compare by version.
inline constexpr char kStoreOpsScript[] = R"(
import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
store = dist.distributed_c10d._get_default_store()
if rank == 0:
    print("torch", ".".join(torch.__version__.split("+")[0].split(".")[:2]))
if hasattr(store, "queue_push"):
    if rank == 0:
        for r in range(1, world):
            store.queue_push("work", f"item-{r}")
    else:
        item = store.queue_pop("work").decode()  # blocking: WAIT, then QUEUE_POP
        print(f"rank {rank} popped {item[:5]}")
    dist.barrier()
    if rank == 0:
        try:
            store.queue_pop("work", block=False)
            print("pop on an empty queue returned")
        except dist.QueueEmptyError:
            print("pop on an empty queue raised QueueEmptyError")
        print("queue_len", store.queue_len("work"))
        store.set_timeout(datetime.timedelta(milliseconds=300))
        try:
            store.queue_pop("never-pushed")
            print("blocking pop returned")
        except dist.DistStoreError as e:
            print("blocking pop timed out:", "timeout" in str(e))
        store.set_timeout(datetime.timedelta(seconds=60))
        store.queue_push("after-timeout", "ok")
        print("store usable after the timeout:", store.queue_pop("after-timeout").decode())
else:
    if rank == 0:
        print("no queues in this PyTorch")
if hasattr(store, "list_keys"):
    store.set(f"listed/{rank}", "x")
    dist.barrier()
    if rank == 0:
        keys = store.list_keys()
        print("list_keys has every rank:", all(f"listed/{r}" in keys for r in range(world)))
if hasattr(dist.Store, "barrier"):
    raw = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                        datetime.timedelta(seconds=60))
    raw.barrier("ddprun-test/barrier", world)  # BARRIER (op 18), world arrivals
    print(f"rank {rank} passed the store barrier")
    dist.barrier()
    if rank == 0:
        try:
            raw.barrier("ddprun-test/never", world + 1, datetime.timedelta(milliseconds=300))
            print("lonely barrier returned")
        except dist.DistStoreError as e:
            print("lonely barrier timed out:", "barrier timeout" in str(e))
        raw.set("ddprun-test/after", "1")
        print("raw client usable after the cancel:", raw.get("ddprun-test/after").decode())
dist.destroy_process_group()
)";

}  // namespace ddprun::harness
