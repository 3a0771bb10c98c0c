"""Rank 1 computes forever after the first collective, its peers wait for it at the next."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
if dist.get_rank() == 1:
    print("rank 1 loops", flush=True)
    # One line, loop and body: wherever the rank is stopped (the loop's jump back or its body), it is on line 11.
    while True: t = t + 0  # noqa: E701
dist.all_reduce(t)
dist.destroy_process_group()
