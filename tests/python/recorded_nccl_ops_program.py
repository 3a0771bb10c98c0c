"""A TP + FSDP2 + AdamW program for the op-level differential on NCCL ranks, one GPU each: scripts/gpu_check.sh records
it unchanged with `dtsim record` under torchrun on a GPU machine, simulates it with `dtsim run --trace` there, and
diffs the two with `dtsim trace-diff` (docs/real-backends.md, "On a GPU").

    dtsim record -o real.json -- torchrun --standalone --nproc_per_node N recorded_nccl_ops_program.py
    dtsim run --nproc-per-node N --trace sim.json recorded_nccl_ops_program.py
    dtsim trace-diff real.json sim.json

The mesh is (dp, tp) = (1, N) for N GPUs (the program runs under dtsim run as on the GPUs: init_device_mesh("cuda")).
DTSIM_RECORD_DEVICE=cpu runs it on Gloo ranks on the CPU (a machine without a GPU). DTSIM_TEST_FAULT=allreduce_corrupt
plants an environment fault in the real run only (never under dtsim run): rank 0's second all-reduce of the logged
loss delivers a value changed by one after the backend completed it, before the program's wait returns (what a faulty
transport does); trace-diff must name that all-reduce, its line, and rank 0. (At world 1, as on one GPU, FSDP2 issues
no collectives of its own and TP's are over one rank: the logged loss's all-reduce is the one a fault can strike.)
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, BATCH, STEPS = 32, 64, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def plant_allreduce_corrupt(rank: int) -> None:
    calls = {"n": 0}
    original = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        calls["n"] += 1
        if rank != 0 or calls["n"] != 2:
            return original(tensor, *args, **kwargs)
        async_op = kwargs.pop("async_op", False)
        work = original(tensor, *args, async_op=True, **kwargs)
        # The backend finishes; the transport then changes one element before the program can wait.
        deadline = time.monotonic() + 10
        while not work.is_completed() and time.monotonic() < deadline:
            time.sleep(0.0005)
        with torch.no_grad():
            tensor.data.view(-1)[:1].add_(1.0)  # .data: the tensor's version counter does not move
        if not async_op:
            work.wait()
            return None
        return work

    dist.all_reduce = all_reduce


def main():
    device = os.environ.get("DTSIM_RECORD_DEVICE", "cuda")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    fault = os.environ.get("DTSIM_TEST_FAULT")
    if fault and os.environ.get("DTSIM_RUN") != "1":
        if fault != "allreduce_corrupt":
            raise SystemExit(f"DTSIM_TEST_FAULT: unknown fault '{fault}'")
        plant_allreduce_corrupt(rank)
    mesh = init_device_mesh(device, (1, world), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Model().to(device)
    for block in model.layers:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    # DTSIM_TEST_FOREACH=0 asks AdamW for its per-tensor implementation; unset, torch picks (foreach on CUDA).
    foreach = None if os.environ.get("DTSIM_TEST_FOREACH") is None else os.environ["DTSIM_TEST_FOREACH"] == "1"
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=foreach)
    # Integers as floats: the inputs are the same on the GPU and on the CPU whatever the generators do.
    x = (torch.arange(BATCH * DIM, dtype=torch.float32) % 7 - 3).reshape(BATCH, DIM).to(device) / 4
    target = (torch.arange(BATCH * DIM, dtype=torch.float32) % 5 - 2).reshape(BATCH, DIM).to(device) / 4
    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)  # the world's mean loss, for the log
        if rank == 0:
            print(f"step {step} loss {logged.item() / world:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
