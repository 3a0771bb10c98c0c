"""The step bench/record_ops_bench.py times: TP (Colwise / Rowwise) on "tp" x FSDP2 on "dp", a 2 x 2 mesh, two
blocks of [512 -> 2048 -> 512], batch 64, AdamW. Prints `step_s <seconds per step>` (rank 0; the mean of 8 steps
after 2 warm-up steps, with a barrier before each clock reading)."""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, BATCH, WARMUP, STEPS = 512, 2048, 64, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


def main():
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    for block in model:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, target = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    for i in range(WARMUP + STEPS):
        if i == WARMUP:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(model(x), target).backward()
        opt.step()
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"step_s {(time.perf_counter() - start) / STEPS:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
