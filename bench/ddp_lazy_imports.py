#!/usr/bin/python3
"""Which modules DistributedDataParallel's constructor imports lazily: the
ones a forking launcher must preload (ddprun --preload) so that forked
workers share them instead of importing them each.

  scripts/python bench/ddp_lazy_imports.py [--preload torch._dynamo,...] [-v]
  /usr/bin/python3 bench/ddp_lazy_imports.py    # Debian's PyTorch 1.13

One process: imports torch, torch.distributed and DDP (what a training
script imports at its top), joins a gloo group of world size 1, then
compares sys.modules before and after constructing DDP around a small model
and prints the new modules' count, their top-level packages (torch.X for
torch's own), the constructor's time and torch's packages that it imported anew.
--preload imports those modules first (as a ddprun zygote would), so the
output shows what is still left to the constructor.
"""
import argparse
import importlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--preload", default="", help="modules to import first, comma-separated")
parser.add_argument("-v", action="store_true", help="also list every new module")
args = parser.parse_args()
start = time.perf_counter()
for name in filter(None, args.preload.split(",")):
    importlib.import_module(name)
if args.preload:
    print(f"preloaded {args.preload} in {(time.perf_counter() - start) * 1e3:.0f} ms")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
if "MASTER_PORT" not in os.environ:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
dist.init_process_group("gloo", rank=0, world_size=1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
before = set(sys.modules)
start = time.perf_counter()
DDP(model)
took = time.perf_counter() - start
new = sorted(set(sys.modules) - before)
packages = {}
for name in new:
    parts = name.split(".")
    top = ".".join(parts[:2]) if parts[0] == "torch" and len(parts) > 1 else parts[0]
    packages[top] = packages.get(top, 0) + 1
print(f"PyTorch {torch.__version__}, Python {sys.version.split()[0]}")
print(f"DDP(model) imported {len(new)} new modules in {took * 1e3:.0f} ms "
      f"(the constructor's whole time)")
for top, count in sorted(packages.items(), key=lambda kv: -kv[1]):
    print(f"  {top}: {count}")
# torch's packages imported anew as a whole: what a preload list draws from
# (one may import the others: try it with --preload; 0 new modules is enough).
roots = sorted(t for t in packages if t.startswith("torch.") and t in new)
print("new torch packages: " + (", ".join(roots) or "none"))
if args.v:
    print("\n".join(new))
dist.destroy_process_group()
