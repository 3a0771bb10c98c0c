"""A Replicate DTensor whose rank DTSIM_WRITE_RANK writes its replica in place before a Replicate -> Shard(0)
redistribution and a Shard(1) -> Replicate one of a 2-D mesh's tp submesh, recorded with dtsim.record (sys.argv[1]).
Replaying from the recorded shards alone would find every rank's result equal (each rank keeps a chunk of its own
bytes); the recording's own replica hashes show the written one. Unset, the run is clean.

    dtsim run --nproc-per-node 4 replica_written.py OUT.json
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

import dtsim


def main():
    mesh = init_device_mesh("cpu", (4,))
    written = os.environ.get("DTSIM_WRITE_RANK", "")
    with dtsim.record(sys.argv[1]):
        w = distribute_tensor(torch.arange(32.0).reshape(8, 4), mesh, [Replicate()])
        if written and dist.get_rank() == int(written):
            w.to_local()[0, 0] += 1  # the planted write
        w.redistribute(mesh, [Shard(0)])
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        v = distribute_tensor(torch.arange(12.0).reshape(3, 4), mesh2, [Replicate(), Shard(1)])
        v.redistribute(mesh2, [Replicate(), Replicate()])
    print("done", flush=True)


if __name__ == "__main__":
    main()
