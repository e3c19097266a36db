"""Hugging Face Trainer, DDP on CPU ranks (gloo), saving a checkpoint every 4
steps and resuming from the last one when restarted: `hf_trainer_train.py
DIR`. With HF_TEST_KILL=1, rank 1 of attempt 0 dies as step 10 begins
(checkpoint-8 is complete). Rank 0 prints `resumed from checkpoint-N` when it
resumed and `weights <hex floats>` at the end."""
import os
import sys

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)

    def forward(self, x, labels=None):
        out = self.linear(x).squeeze(-1)
        loss = torch.nn.functional.mse_loss(out, labels)
        return {"loss": loss, "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(256, 8, generator=generator)
        self.y = self.x @ (torch.arange(8.0) / 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class DieAfterACheckpoint(TrainerCallback):
    # Step 9's all-reduce came after every rank's part of checkpoint-8.
    def on_step_begin(self, args, state, control, **kwargs):
        if (os.environ.get("HF_TEST_KILL") == "1" and state.global_step == 9
                and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
                and os.environ["RANK"] == "1"):
            os._exit(1)


def main():
    out = sys.argv[1]
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=24,
                             save_steps=4, learning_rate=0.05, use_cpu=True,
                             ddp_backend="gloo", report_to=[], seed=0, logging_steps=100,
                             dataloader_num_workers=0, disable_tqdm=True)
    torch.manual_seed(0)
    trainer = Trainer(model=Regression(), args=args, train_dataset=Data(),
                      callbacks=[DieAfterACheckpoint()])
    last = get_last_checkpoint(out) if os.path.isdir(out) else None
    if last and int(os.environ["RANK"]) == 0:
        print(f"resumed from {os.path.basename(last)}", flush=True)
    trainer.train(resume_from_checkpoint=last)
    if int(os.environ["RANK"]) == 0:
        weights = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
        print("weights " + " ".join(float(w).hex() for w in weights.double()), flush=True)


if __name__ == "__main__":
    main()
