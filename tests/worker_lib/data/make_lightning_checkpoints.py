"""Writes the real Lightning checkpoints Checkpoint.RealLightningCheckpointsLoad
reads (tests/worker_lib/training_test.cc), and prints what the test compares:
each file's global_step and the sum of the model's parameters.

Made with Lightning 2.6.6 and PyTorch 2.13.0 (CPU):
    python make_lightning_checkpoints.py OUTPUT_DIR
The files are committed: the test needs neither Lightning nor this script.
"""
import argparse
import pathlib
import sys
import tempfile
import warnings

import lightning as L
import numpy as np
import torch

warnings.filterwarnings("ignore")


class Net(L.LightningModule):
    def __init__(self, lr=0.1, hidden=3, **kw):
        super().__init__()
        self.save_hyperparameters()
        self.model = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.BatchNorm1d(hidden),
                                         torch.nn.Linear(hidden, 1))

    def training_step(self, batch, index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=float(self.hparams.lr))


def loader():
    x = torch.randn(16, 4)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                       batch_size=8)


def write(out, name, **hparams):
    torch.manual_seed(0)
    model = Net(**hparams)
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, default_root_dir=root)
        trainer.fit(model, loader())
    path = pathlib.Path(out) / name
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)
    total = sum(v.double().sum().item() for k, v in saved["state_dict"].items()
                if k.endswith(("weight", "bias")))
    print(f"{name}: global_step {saved['global_step']}, parameter sum {total!r}")


if __name__ == "__main__":
    out = sys.argv[1]
    write(out, "lightning_plain.ckpt", lr=0.1)
    write(out, "lightning_exotic_hparams.ckpt", lr=np.float64(0.1), hidden=3, path=pathlib.Path("/data/x"),
          dtype=torch.float16, ns=argparse.Namespace(a=1), tup=(1, "a"), st={1, 2}, npint=np.int64(7),
          arr=np.arange(3), raw=b"\x00\xff", dev=torch.device("cpu"), big=2**40, neg=-5, uni="h\u00e9llo")
