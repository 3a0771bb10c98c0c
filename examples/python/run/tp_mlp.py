"""Tensor-parallel MLP: Linear -> ReLU -> Linear split Colwise/Rowwise over a 1-D CPU mesh, SGD, 5 steps.

    torchrun --standalone --nproc_per_node 4 tp_mlp.py
    dtsim run --nproc-per-node 4 tp_mlp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, BATCH, STEPS = 16, 32, 8, 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (world_size,))

    torch.manual_seed(0)  # same init and data on every rank
    model = MLP()
    x = torch.randn(BATCH, DIM)
    target = torch.linspace(-1.0, 1.0, BATCH * DIM).reshape(BATCH, DIM)
    model = parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)  # RowwiseParallel returns a replicated plain tensor
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.9e}", flush=True)

    for name, p in model.named_parameters():
        full = p.full_tensor()  # collective: every rank calls it
        if rank == 0:
            print(f"param {name} sum {full.sum().item():.9e} abssum {full.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
