"""An accelerate training script, unmodified (2 ranks): `Accelerator().prepare` of a model, an optimizer and a data
loader, then three steps. accelerate keeps its rank state in class-level dicts (`PartialState._shared_state`): on a
shared module every rank would see rank 0's and train on rank 0's data. Rank 0 prints each step's loss summed over the
ranks and a parameter checksum, under torchrun and dtsim run alike.

    torchrun --standalone --nproc_per_node 2 accelerate_ddp.py
    dtsim run --nproc-per-node 2 accelerate_ddp.py
"""
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=not torch.cuda.is_available())
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * (i + 0.7)).reshape(p.shape) * 0.5)
data = TensorDataset(torch.arange(64, dtype=torch.float32).reshape(8, 8) / 64, torch.arange(8, dtype=torch.float32))
loader = DataLoader(data, batch_size=2, shuffle=False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, (x, y) in enumerate(loader):
    loss = ((model(x).squeeze(-1) - y) ** 2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    total = accelerator.reduce(loss.detach(), reduction="sum")
    seen = accelerator.gather(x[:, 0].contiguous())
    if accelerator.is_main_process:
        print(f"step {step} process {accelerator.process_index} of {accelerator.num_processes} loss "
              f"{total.item():.6e} rows {[round(v * 64) for v in seen.tolist()]}")
checksum = sum(float(p.detach().double().sum()) for p in accelerator.unwrap_model(model).parameters())
if accelerator.is_main_process:
    print(f"param checksum {checksum:.9e}")
accelerator.end_training()
if accelerator.is_main_process:
    print("done")
