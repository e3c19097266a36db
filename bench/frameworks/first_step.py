"""The Lightning callback of bench/frameworks_bench.py (on PYTHONPATH there,
added to NequIP's tiny run by tiny_bench.yaml).

Appends one line per event to the file named by FRAMEWORKS_BENCH_EVENTS:

    <event> <time.time()> <RANK> <TORCHELASTIC_RESTART_COUNT> <pid>

  imported  this module was imported: Hydra instantiates the trainer's
            callbacks after torch, lightning and nequip were imported
  step      the rank's first training batch is done (forward, backward and
            DDP's all-reduce, optimizer step)
  epoch     the rank's first training epoch is done
  end       the rank's training ended (Lightning's on_train_end)
  kill      FRAMEWORKS_BENCH_KILL=1, attempt 0, last rank: right after its
            step line (FRAMEWORKS_BENCH_KILL_DELAY seconds later, if set),
            the time at which it SIGKILLs itself

A line is one write(2) to a file opened with O_APPEND, so the ranks' lines
never mix.
"""
import os
import signal
import time

from lightning.pytorch.callbacks import Callback

_PATH = os.environ["FRAMEWORKS_BENCH_EVENTS"]


def record(event):
    line = (f"{event} {time.time():.6f} {os.environ.get('RANK', '-')} "
            f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '-')} {os.getpid()}\n")
    fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


record("imported")


class FirstStep(Callback):
    def __init__(self):
        self._stepped = False
        self._epoch = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._stepped:
            return
        self._stepped = True
        record("step")
        if (os.environ.get("FRAMEWORKS_BENCH_KILL") == "1"
                and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
                and int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1):
            time.sleep(float(os.environ.get("FRAMEWORKS_BENCH_KILL_DELAY", "0")))
            record("kill")
            os.kill(os.getpid(), signal.SIGKILL)

    def on_train_epoch_end(self, trainer, pl_module):
        if not self._epoch:
            self._epoch = True
            record("epoch")

    def on_train_end(self, trainer, pl_module):
        record("end")
