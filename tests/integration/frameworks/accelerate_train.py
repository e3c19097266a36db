"""A Hugging Face Accelerate training script as users write them
(Accelerator(), prepare, accelerator.backward), on the CPU: rank 0 prints
`weights <hex floats>` (exact) at the end."""
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator(cpu=True)
    set_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    y = x @ (torch.arange(8.0) / 8) + 0.01 * torch.randn(256, generator=generator)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    print(f"process {accelerator.process_index} of {accelerator.num_processes} "
          f"({accelerator.distributed_type})", flush=True)
    for _ in range(3):
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        weights = torch.cat([p.detach().flatten()
                             for p in accelerator.unwrap_model(model).parameters()])
        print("weights " + " ".join(float(w).hex() for w in weights.double()), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
