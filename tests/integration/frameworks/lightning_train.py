"""A Lightning Trainer script as users write them (strategy="ddp" on CPU),
for the framework tests: the same under torchrun and ddprun.

  lightning_train.py OUT_DIR [--devices N] [--num_nodes N] [--epochs N]
                     [--resume] [--die-at-epoch E] [--hold-at-epoch E]
                     [--auto-devices] [--progress-bar]

Rank 0 prints `weights <hex floats>` (exact) at the end. --resume fits with
ckpt_path="last" (OUT_DIR/checkpoints/last.ckpt, written every epoch).
--die-at-epoch E: in the first attempt (TORCHELASTIC_RESTART_COUNT=0) the
last rank kills itself (SIGKILL) when epoch E starts. --hold-at-epoch E:
every rank writes OUT_DIR/started-E.<rank> when epoch E starts and waits
there until Lightning's SIGTERM handler ran (then Lightning stops the fit).
"""
import argparse
import os
import signal
import sys
import time

import torch
import lightning as L
from lightning.fabric.utilities.rank_zero import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, die_at_epoch, hold_at_epoch, out):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.die_at_epoch = die_at_epoch
        self.hold_at_epoch = hold_at_epoch
        self.out = out

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_start(self):
        print(f"rank {self.global_rank} of {self.trainer.world_size} starts at epoch "
              f"{self.current_epoch} (rank_zero_only.rank={rank_zero_only.rank}, "
              f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')})", flush=True)

    def on_train_epoch_start(self):
        epoch = self.current_epoch
        if (epoch == self.die_at_epoch and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
                and self.global_rank == self.trainer.world_size - 1):
            print(f"rank {self.global_rank} dies at epoch {epoch}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if epoch == self.hold_at_epoch:
            with open(os.path.join(self.out, f"started-{epoch}.{self.global_rank}"), "w"):
                pass
            while not self.trainer.received_sigterm:
                time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num_nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--die-at-epoch", type=int, default=-1)
    parser.add_argument("--hold-at-epoch", type=int, default=-1)
    parser.add_argument("--auto-devices", action="store_true")
    parser.add_argument("--progress-bar", action="store_true")
    args = parser.parse_args()
    # What Lightning computed at import (under --preload: in the zygote).
    print(f"rank {os.environ.get('RANK')} imported with rank_zero_only.rank="
          f"{rank_zero_only.rank}", flush=True)

    L.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    y = x @ (torch.arange(8.0) / 8) + 0.01 * torch.randn(256, generator=generator)
    data = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=os.path.join(args.out, "checkpoints"), save_last=True, every_n_epochs=1)
    trainer = L.Trainer(
        # --auto-devices: Lightning's defaults (strategy and devices "auto")
        strategy="auto" if args.auto_devices else "ddp", accelerator="cpu",
        devices="auto" if args.auto_devices else args.devices, num_nodes=args.num_nodes,
        max_epochs=args.epochs, callbacks=[checkpoint], logger=False,
        enable_progress_bar=args.progress_bar, enable_model_summary=False,
        default_root_dir=args.out)
    model = Regression(args.die_at_epoch, args.hold_at_epoch, args.out)
    trainer.fit(model, data, ckpt_path="last" if args.resume else None)
    if trainer.global_rank == 0:
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        print("weights " + " ".join(float(w).hex() for w in weights.double()), flush=True)
    # Lightning leaves its process group to the interpreter's exit, where
    # PyTorch 2.13's Gloo threads can be destroyed still joinable: "terminate
    # called without an active exception", SIGABRT, under any launcher (once
    # in a cold CI run here). Ending the group joins them first.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
