"""A Lightning callback for the framework tests: in a job's first attempt
(TORCHELASTIC_RESTART_COUNT=0) the last rank SIGKILLs itself when epoch
`epoch` starts, after the previous epoch's checkpoint was written (Lightning
saves it, then all ranks pass a barrier, before the next epoch starts)."""
import os
import signal

import lightning


class KillRankAtEpoch(lightning.pytorch.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, module):
        if (trainer.current_epoch == self.epoch
                and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
                and trainer.global_rank == trainer.world_size - 1):
            print(f"rank {trainer.global_rank} kills itself at epoch {self.epoch}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
