"""Collectives whose number, bytes, causes and lines are known (4 ranks): 3 direct all_reduces, the scatter of
distribute_tensor and the all_gather of full_tensor; the report must say exactly these."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("gloo")
for _ in range(3):
    dist.all_reduce(torch.ones(4))  # 3 direct all_reduce calls of 16 bytes
mesh = init_device_mesh("cpu", (4,))
sharded = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])  # one scatter from rank 0: 4 x 2 floats (32 bytes)
sharded.full_tensor()  # one all_gather of 2 floats (8 bytes) per rank, caused by DTensor
dist.destroy_process_group()
