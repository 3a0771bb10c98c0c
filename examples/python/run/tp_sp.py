"""Tensor + sequence parallel block: LayerNorm (SequenceParallel) -> Linear (Colwise, input Shard(1)) -> ReLU
-> Linear (Rowwise, output Shard(1)) with a residual, on [batch, seq, dim] inputs sharded on seq; SGD, 5 steps.

    torchrun --standalone --nproc_per_node 4 tp_sp.py
    dtsim run --nproc-per-node 4 tp_sp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

BATCH, SEQ, DIM, HIDDEN, STEPS = 2, 8, 16, 32, 5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (world_size,))

    torch.manual_seed(0)  # same init and data on every rank
    model = Block()
    x = torch.randn(BATCH, SEQ, DIM)
    target = torch.linspace(-1.0, 1.0, BATCH * SEQ * DIM).reshape(BATCH, SEQ, DIM)
    plan = {
        "norm": SequenceParallel(),
        "fc1": ColwiseParallel(input_layouts=Shard(1)),
        "fc2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    model = parallelize_module(model, mesh, plan)
    # activations live sharded on the sequence dim (dim 1) between the parallel regions
    x = distribute_tensor(x, mesh, [Shard(1)])
    target = distribute_tensor(target, mesh, [Shard(1)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for step in range(STEPS):
        opt.zero_grad()
        # written out instead of F.mse_loss: on torch 2.13 DTensor derives mse_loss_backward from its
        # decomposition, which divides by the LOCAL numel, so seq-sharded grads come out world_size x too big
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        value = loss.full_tensor().item()  # collective: every rank calls it
        if rank == 0:
            print(f"step {step} loss {value:.9e}", flush=True)

    for name, p in model.named_parameters():
        full = p.full_tensor()
        if rank == 0:
            print(f"param {name} sum {full.sum().item():.9e} abssum {full.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
