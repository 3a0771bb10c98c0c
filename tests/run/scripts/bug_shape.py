"""Injected bug: rank 3 all-reduces a tensor of another shape than its peers."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(5 if rank == 3 else 4)  # BUG: rank 3's buffer is one element longer
dist.all_reduce(t)
dist.destroy_process_group()
