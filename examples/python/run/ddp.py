"""DistributedDataParallel over a small MLP: every rank trains on its own data (seed base + rank), DDP
all-reduces (averages) the gradients, SGD with momentum, 5 steps. Rank 0 prints its own loss.

    torchrun --standalone --nproc_per_node 4 ddp.py
    dtsim run --nproc-per-node 4 ddp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DIM, HIDDEN, BATCH, STEPS = 16, 32, 8, 5


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])

    torch.manual_seed(0)  # identical init on every rank (DDP also broadcasts rank 0's params)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, DIM))
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    torch.manual_seed(100 + rank)  # per-rank data
    x = torch.randn(BATCH, DIM)
    target = torch.randn(BATCH, DIM)

    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()  # gradients are averaged across ranks here
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.9e}", flush=True)

    # DDP keeps the parameters replicated, so rank 0's copy is the global parameter
    for name, p in model.module.named_parameters():
        if rank == 0:
            print(f"param {name} sum {p.sum().item():.9e} abssum {p.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
