"""Rank 2 calls sys.exit(3) after the first collective."""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
if dist.get_rank() == 2:
    sys.exit(3)
dist.all_reduce(t)
dist.destroy_process_group()
