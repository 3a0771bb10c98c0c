"""Injected bug: rank 1 reduces on a subgroup where its peers reduce on the world group (a hang on a real job)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pair = dist.new_group([0, 1])
t = torch.ones(4)
dist.all_reduce(t)
if rank == 1:
    dist.all_reduce(t, group=pair)  # BUG: the other ranks reduce on the world group
else:
    dist.all_reduce(t)
dist.destroy_process_group()
