"""Vocabulary-parallel cross entropy: a TP trunk (Colwise/Rowwise) and an output projection whose logits stay
sharded on the vocabulary dim (ColwiseParallel(use_local_output=False)); the loss runs under loss_parallel().

    torchrun --standalone --nproc_per_node 4 loss_parallel.py
    dtsim run --nproc-per-node 4 loss_parallel.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                               parallelize_module)

DIM, HIDDEN, VOCAB, BATCH, STEPS = 16, 32, 32, 8, 3


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, x):
        return self.head(x + self.fc2(F.relu(self.fc1(x))))


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cpu", (world_size,))

    torch.manual_seed(0)  # same init and data on every rank
    model = LM()
    x = torch.randn(BATCH, DIM)
    labels = torch.randint(0, VOCAB, (BATCH,))
    plan = {
        "fc1": ColwiseParallel(),
        "fc2": RowwiseParallel(),
        "head": ColwiseParallel(use_local_output=False),  # logits: DTensor, Shard(-1) over the vocabulary
    }
    model = parallelize_module(model, mesh, plan)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    for step in range(STEPS):
        opt.zero_grad()
        logits = model(x)
        with loss_parallel():  # cross entropy without gathering the full logits; backward must be inside too
            loss = F.cross_entropy(logits, labels)
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
