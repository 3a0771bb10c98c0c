"""A tensor-parallel script in the style of upstream's tutorials: it never calls init_process_group, leaving it to
init_device_mesh (which initialises the default group itself), and picks its device as GPU scripts do ("cuda" where
torch.cuda.is_available(): under dtsim run, which emulates a GPU per rank; "cpu" with Gloo under torchrun here).
Colwise then Rowwise MLP, SGD, 3 steps; rank 0 prints the losses and a checksum of every parameter.

    torchrun --standalone --nproc_per_node 4 implicit_init_tp.py
    dtsim run --nproc-per-node 4 implicit_init_tp.py
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

device = "cuda" if torch.cuda.is_available() else "cpu"
mesh = init_device_mesh(device, (int(os.environ["WORLD_SIZE"]),))
rank = mesh.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 12)).to(device)
x = torch.randn(6, 12, device=device)
model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(3):
    opt.zero_grad()
    loss = F.mse_loss(model(x), torch.zeros(6, 12, device=device))
    loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item():.9e}", flush=True)
for name, p in model.named_parameters():
    full = p.full_tensor()
    if rank == 0:
        print(f"param {name} sum {full.sum().item():.9e} abssum {full.abs().sum().item():.9e}", flush=True)
if rank == 0:
    print("done", flush=True)
torch.distributed.destroy_process_group()
