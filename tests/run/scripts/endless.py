"""Rank 1 computes forever after the first collective, its peers wait for it at the next."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
if dist.get_rank() == 1:
    # Print, loop and body share line 11: a rank stopped once its line was read is there, even still in print().
    printed = False
    while True: t = t + 0; printed = printed or print("rank 1 loops", flush=True) or True  # noqa: E701,E702
dist.all_reduce(t)
dist.destroy_process_group()
