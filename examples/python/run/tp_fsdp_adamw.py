"""2-D parallelism: tensor parallel on the "tp" mesh dim, FSDP2 (fully_shard) on the "dp" mesh dim, AdamW, 5 steps.
Each data-parallel replica trains on its own batch (seeded by its dp coordinate).

    torchrun --standalone --nproc_per_node 4 tp_fsdp_adamw.py
    dtsim run --nproc-per-node 4 tp_fsdp_adamw.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
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
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size = mesh.get_local_rank("dp"), mesh.size(0)

    torch.manual_seed(0)  # identical init on every rank
    model = MLP()
    model = parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])  # params become DTensors on the 2-D mesh: (Shard(0) on dp, TP sharding)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)

    torch.manual_seed(1000 + dp_rank)  # per-replica data; both tp ranks of a replica see the same batch
    x = torch.randn(BATCH, DIM)
    target = torch.randn(BATCH, DIM)

    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)  # plain tensor, replicated over tp
        loss.backward()  # FSDP reduce-scatters (averages) the grads over dp
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, group=mesh.get_group("dp"))
        if rank == 0:
            print(f"step {step} loss {global_loss.item() / dp_size:.9e}", flush=True)

    for name, p in model.named_parameters():
        full = p.full_tensor()  # collective over the whole 2-D mesh
        if rank == 0:
            print(f"param {name} sum {full.sum().item():.9e} abssum {full.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
