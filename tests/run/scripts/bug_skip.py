"""Injected bug: rank 2 skips the second all_reduce (a hang on a real job)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if rank != 2:  # BUG: rank 2 skips it
    dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
