"""Module-level state a real rank holds alone, under torchrun and dtsim run alike (4 ranks, a 2 x 2 mesh).

    torchrun --standalone --nproc_per_node 4 rank_modules.py
    dtsim run --nproc-per-node 4 rank_modules.py

rank_lib's cache of a wrapper class that closes over the first mesh it saw, its class-level state, its counter and its
import-time registry must each be the rank's own; a thread pool the rank starts runs collectives on its groups and
allocates on its device. Rank 0 prints every rank's results, gathered, so both launchers print the same lines.
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rank_lib  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

# The wrapper class made by this rank's first call gathers over this rank's tp group.
gathered = rank_lib.gather_wrapper(mesh["tp"]).apply(torch.tensor([float(rank)]))
state = rank_lib.State()
data = torch.arange(8, dtype=torch.float32)[state.rank::state.world]  # accelerate-style sharding of the data
counts = [rank_lib.bump() for _ in range(rank + 1)][-1]


def in_thread(i):
    t = torch.full((2,), float(rank + i))
    dist.all_reduce(t, group=mesh.get_group("dp"))  # the rank's own dp group, from a thread the rank started
    return dist.get_rank(), t.tolist()


with ThreadPoolExecutor(max_workers=1) as pool:
    thread_rank, reduced = pool.submit(in_thread, 1).result()

row = {"rank": rank, "gathered": gathered.tolist(), "state_rank": state.rank, "data": data.tolist(),
       "counter": counts, "registry": rank_lib.REGISTRY["imported_by_rank"], "thread_rank": thread_rank,
       "thread_all_reduce": reduced}
rows = [None] * world
dist.all_gather_object(rows, row)
if rank == 0:
    for r in rows:
        print("result " + " ".join(f"{k}={v}" for k, v in r.items()))
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print("done")
