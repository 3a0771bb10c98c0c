"""An upstream PyTorch DTensor program on NCCL ranks, one GPU each, recorded with dtsim.record: scripts/gpu_check.sh
runs it under torchrun on a GPU machine (one GPU: world 1) and replays the recording with `dtsim replay`.

    torchrun --standalone --nproc_per_node N recorded_nccl_program.py OUT.json
    DTSIM_RECORD_DEVICE=cpu torchrun ...                  (Gloo ranks on the CPU: the same program, for a machine
                                                           without a GPU)

Explicit redistributions of every placement kind (S, R, P) on a 1-D mesh and on a 2-D (dp, tp) mesh, full_tensor,
a tensor-parallel MLP's forward and backward (ColwiseParallel then RowwiseParallel: implicit redistributions from op
dispatch and autograd's), every shard a CUDA tensor.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dtsim


def main(path):
    device = os.environ.get("DTSIM_RECORD_DEVICE", "cuda")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    world = dist.get_world_size()
    rank = dist.get_rank()
    mesh = init_device_mesh(device, (world,))
    mesh2 = init_device_mesh(device, (1, world), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(device)
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with dtsim.record(path):
        x = distribute_tensor(torch.arange(8 * 6 * world, dtype=torch.float32, device=device).reshape(8 * world, 6),
                              mesh, [Shard(0)])
        x.redistribute(mesh, [Replicate()])
        x.redistribute(mesh, [Shard(1)]).full_tensor()
        p = DTensor.from_local(torch.full((4, 4), float(rank + 1), device=device), mesh, [Partial()])
        p.redistribute(mesh, [Replicate()])
        y = distribute_tensor(torch.arange(35, dtype=torch.float64, device=device).reshape(7, 5), mesh2,
                              [Shard(0), Shard(1)])
        y.redistribute(mesh2, [Replicate(), Shard(0)]).redistribute(mesh2, [Shard(1), Replicate()])
        out = model(torch.randn(4, 16, device=device))
        out.sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
