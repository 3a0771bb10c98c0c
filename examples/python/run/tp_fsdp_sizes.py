"""TP + FSDP2 on a (dp, tp) mesh of any size, written so it also runs metadata-only (`dtsim run --meta`): it reads no
tensor values, and prints every rank's memory (torch.cuda's counters) after sharding and after each step.

    torchrun --standalone --nproc_per_node 4 tp_fsdp_sizes.py --tp 2                   # needs CUDA for the counters
    dtsim run --nproc-per-node 4 tp_fsdp_sizes.py --tp 2                               # values, 4 ranks
    dtsim run --meta --nproc-per-node 1024 tp_fsdp_sizes.py --steps 1                  # shapes only, 1,024 ranks

Each block is Linear(DIM, HIDDEN) colwise -> ReLU -> Linear(HIDDEN, DIM) rowwise over "tp", and every block and the
root are fully_shard-ed over "dp"; AdamW. Sizes divide evenly for dp up to 256 and tp up to 4, so each rank holds
exactly its share of every parameter.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, LAYERS, BATCH = 512, 2048, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.down(F.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    shown = world <= 8 or rank in (0, world - 1)

    torch.manual_seed(0)
    model = Net().to("cuda")
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    if shown:
        print(f"memory rank {rank} sharded {torch.cuda.memory_allocated()}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    torch.manual_seed(1000 + mesh.get_local_rank("dp"))  # a batch per data-parallel replica
    x = torch.randn(BATCH, DIM, device="cuda")
    target = torch.randn(BATCH, DIM, device="cuda")
    for step in range(args.steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        if shown:
            print(f"memory rank {rank} step {step} {torch.cuda.memory_allocated()} peak "
                  f"{torch.cuda.max_memory_allocated()}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
