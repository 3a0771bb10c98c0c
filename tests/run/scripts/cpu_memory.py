"""A CPU script whose memory at module boundaries has a closed form (torchrun + Gloo, or dtsim run). Rank r's Spike
module allocates a temporary of (r + 1) MiB, adds a slice of it to its 16-byte input (a new 16-byte tensor) and lets
the temporary go when its forward returns: its end holds 16 bytes more than its begin, and its peak is its begin +
(r + 1) MiB + 16. A sharded matmul runs in Outer (DTensor ops under the recorder too)."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

MIB = 1 << 20


class Spike(nn.Module):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def forward(self, x):
        tmp = torch.zeros((self.rank + 1) * MIB // 4)  # freed when forward returns
        return x + tmp[: x.numel()].view_as(x)


class Outer(nn.Module):
    def __init__(self, rank: int, mesh):
        super().__init__()
        self.spike = Spike(rank)
        self.mesh = mesh

    def forward(self, x):
        y = self.spike(x)
        w = distribute_tensor(torch.ones(4, 4), self.mesh, [Shard(0)])
        return (w @ distribute_tensor(y.view(4, 1), self.mesh, [Replicate()])).full_tensor()


dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
model = Outer(rank, mesh)
out = model(torch.arange(4.0))
print(f"rank {rank} done {out.sum().item()}", flush=True)
dist.barrier()
dist.destroy_process_group()
