"""Rank 1 raises after the first collective; the others go on to the next."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
if dist.get_rank() == 1:
    raise ValueError("rank 1 found a bad batch")
dist.all_reduce(t)
dist.destroy_process_group()
