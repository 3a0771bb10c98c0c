"""Optimizers on DTensor parameters, both launchers (4 ranks): SGD with foreach, AdamW with foreach and Adam fused,
each on its own tensor-parallel MLP; the default backend (init_process_group() with no name); the available device
from torch.accelerator (the CPU under real torchrun here, also with a CUDA wheel; "cuda" under dtsim run); and an
implicit redistribution from an op (an add of S(0) and S(1) operands, at the line marked below).

    torchrun --standalone --nproc_per_node 4 optimizers.py
    dtsim run --nproc-per-node 4 optimizers.py
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group()
rank = dist.get_rank()
device = torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
mesh = init_device_mesh(device.type, (dist.get_world_size(),))

OPTIMIZERS = {
    "sgd_foreach": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=True),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    "adam_fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
}
torch.manual_seed(0)
x = torch.randn(8, 16, device=device)
target = torch.linspace(-1.0, 1.0, 8 * 16, device=device).reshape(8, 16)
for name, make in OPTIMIZERS.items():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).to(device)
    model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = make(model.parameters())
    for step in range(3):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {name} {step} loss {loss.item():.9e}", flush=True)
    for pname, p in model.named_parameters():
        full = p.full_tensor()
        if rank == 0:
            print(f"param {name} {pname} sum {full.sum().item():.9e}", flush=True)

a = distribute_tensor(torch.arange(32.0, device=device).reshape(8, 4), mesh, [Shard(0)])
b = distribute_tensor(torch.ones(8, 4, device=device), mesh, [Shard(1)])
c = (a + b).full_tensor()  # implicit redistribution: one operand is redistributed to the other's placement
if rank == 0:
    print(f"result implicit add sum {c.sum().item():.9e}", flush=True)
    print("done", flush=True)
dist.destroy_process_group()
