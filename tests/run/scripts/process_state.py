"""Process-wide state one rank changes for itself alone (4 ranks), under torchrun and dtsim run alike.

    torchrun --standalone --nproc_per_node 4 process_state.py
    dtsim run --nproc-per-node 4 process_state.py
    DTSIM_PLANT=exit dtsim run --nproc-per-node 4 process_state.py    rank 1 ends its process with os._exit(7)

Every rank replaces `builtins.print` with one that prints on rank 0 only (torchvision's `setup_for_distributed`),
and the ranks other than 0 send `sys.stdout` to /dev/null: only rank 0's lines are printed, by either launcher. A
thread each rank starts allocates on the rank's device, and the rank's meter counts it (under dtsim run --memory).
"""
import builtins
import os
import sys
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
_builtin_print = builtins.print


def _print(*args, **kwargs):
    force = kwargs.pop("force", False)
    if rank == 0 or force:
        _builtin_print(*args, **kwargs)


builtins.print = _print
if rank != 0:
    sys.stdout = open(os.devnull, "w")

t = torch.arange(4, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
print(f"result all_reduce {t.tolist()}")
if os.environ.get("DTSIM_PLANT") == "exit" and rank == 1:
    os._exit(7)
kept = []


def allocate():
    kept.append(torch.zeros(256, device="cuda" if os.environ.get("DTSIM_RUN") else "cpu"))


if os.environ.get("DTSIM_RUN"):
    before = torch.cuda.memory_allocated()
thread = threading.Thread(target=allocate)
thread.start()
thread.join()
if os.environ.get("DTSIM_RUN"):
    _builtin_print(f"memory rank {rank} thread allocated {torch.cuda.memory_allocated() - before}", file=sys.__stdout__
                   if rank == 0 else sys.stderr)
dist.barrier()
print(f"result rank {rank} printed")  # rank 0 only
print(f"result forced by rank {rank}", force=True) if rank == 0 else None
dist.destroy_process_group()
print("done")
