"""Tensor-parallel MLP tutorial written for GPUs (NCCL, one GPU per rank). Same model, seed, data and steps as
tp_mlp.py, so its `step`/`param` lines equal tp_mlp.py's; it also prints peak GPU memory as `mem <bytes>` (dtsim run's meter).

    torchrun --standalone --nproc_per_node 4 gpu_tp_tutorial.py
    dtsim run --nproc-per-node 4 gpu_tp_tutorial.py
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
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    device_mesh = init_device_mesh("cuda", (world_size,))

    torch.manual_seed(0)  # same init and data on every rank
    model = MLP().to("cuda")  # initialized on the CPU RNG, like tp_mlp.py, then moved
    x = torch.randn(BATCH, DIM).cuda()
    target = torch.linspace(-1.0, 1.0, BATCH * DIM, device="cuda").reshape(BATCH, DIM)
    model = parallelize_module(model, device_mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.9e}", flush=True)

    torch.cuda.synchronize()
    for name, p in model.named_parameters():
        full = p.full_tensor()  # collective: every rank calls it
        if rank == 0:
            print(f"param {name} sum {full.sum().item():.9e} abssum {full.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print(f"mem {torch.cuda.max_memory_allocated()}", flush=True)
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
