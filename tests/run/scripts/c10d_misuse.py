"""c10d misuse that a real backend refuses (2 ranks): DTSIM_PLANT picks one; unset, the program is correct.

    DTSIM_PLANT=recv_dtype     rank 1 receives float32 into an int64 tensor
    DTSIM_PLANT=send_peer      rank 0 sends to rank 99
    DTSIM_PLANT=gather_list    all_gather into a list of 3 tensors on 2 ranks
    DTSIM_PLANT=bad_root       broadcast from rank 5
    DTSIM_PLANT=unreceived     rank 0 sends a message that no rank receives
    DTSIM_PLANT=leaf_grad      all_reduce of a leaf tensor that requires grad (a real backend accepts it)
"""
import os

import torch
import torch.distributed as dist

PLANT = os.environ.get("DTSIM_PLANT", "")
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.arange(4, dtype=torch.float32) + rank
if PLANT == "recv_dtype":
    if rank == 0:
        dist.send(t, dst=1)
    else:
        into = torch.zeros(4, dtype=torch.int64)
        dist.recv(into, src=0)
elif PLANT == "send_peer" and rank == 0:
    dist.send(t, dst=99)
elif PLANT == "gather_list":
    dist.all_gather([torch.empty(4) for _ in range(3)], t)
elif PLANT == "bad_root":
    dist.broadcast(t, src=5)
elif PLANT == "unreceived" and rank == 0:
    dist.isend(t, dst=1)
elif PLANT == "leaf_grad":
    w = torch.ones(3, requires_grad=True)
    dist.all_reduce(w.data)
    dist.all_reduce(w)
    print(f"result rank {rank} leaf {w.tolist()}")
dist.barrier()
print(f"result rank {rank} done")
dist.destroy_process_group()
