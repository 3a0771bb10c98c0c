"""Record a real PyTorch DTensor job, then replay it in dtsim's simulation.

    .venv/bin/torchrun --standalone --nproc_per_node 4 examples/python/record_torchrun.py run.json
    build/dtsim replay run.json                       # per redistribution: equal, or where and on which rank not
    build/dtsim export --format perfetto run.json run.perfetto.json   # every rank's redistributions on a time axis

The job is ordinary upstream code (Gloo ranks, torch.distributed.tensor): a tensor-parallel MLP (ColwiseParallel then
RowwiseParallel), one training step, and an uneven redistribution. The only dtsim line is `with dtsim.record(...)`.
With --bug, rank 2 computes a wrong shard in every S(i) -> S(j) (a monkeypatched upstream method): replay names the
redistribution and rank 2.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dtsim


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "run.json"
    dist.init_process_group("gloo")
    if "--bug" in sys.argv:
        from torch.distributed.tensor import placement_types
        original = placement_types.Shard._to_new_shard_dim
        placement_types.Shard._to_new_shard_dim = (
            lambda self, *a, **k: original(self, *a, **k) + (1 if dist.get_rank() == 2 else 0))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = parallelize_module(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with dtsim.record(out):
        loss = model(torch.randn(8, 32)).pow(2).mean()
        loss.backward()
        optimizer.step()
        x = distribute_tensor(torch.arange(90.0).reshape(9, 10), mesh, [Shard(0)])  # 9 rows over 4 ranks: 3,3,3,0
        y = x.redistribute(mesh, [Shard(1)])
        assert torch.equal(y.full_tensor(), torch.arange(90.0).reshape(9, 10)) or "--bug" in sys.argv
    if dist.get_rank() == 0:
        print(f"recorded {out}; replay it with: dtsim replay {out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
