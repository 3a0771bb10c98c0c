"""Async redistributions (`async_op=True`, as upstream's parallel styles issue them) recorded by dtsim.record, for
tests/python/test_recorder.py: the recorder hashes such a result when the program waits for it, not when the
redistribution returns, and the hash must still be the value the redistribution produced.

    torchrun --standalone --nproc_per_node 2 recorded_async_program.py OUT.json [--bypass RANK]

Every async redistribution has a synchronous twin (the same source and target, async_op=False: hashed at once) recorded
just before it. After an async one returns, the program writes its result in place (through the DTensor; through a
view of it), so a hash taken after that write differs from the twin's; one async result is never waited for inside the
block (hashed when the block ends). Recorded in order:

    0 P(sum) -> R   twin             1 P(sum) -> R   async, then  a.add_(1)
    2 S(0) -> R     twin             3 S(0) -> R     async, then  a view of it  .mul_(2)
    4 S(0) -> R     async, not waited inside the block
    5 S(0) -> S(1)  twin             6 S(0) -> S(1)  async, then  .add_(1)
    7 S(0) -> R     async            8 R -> S(0)     of #7's result before anyone waited: upstream's copy of the
                                                     shard waits (both hashed then)
    9 P(sum) -> R   async; with --bypass RANK that rank waits through the wait_tensor overload (not hooked) and
                    writes the buffer: its hash of #9 is unavailable

A second block (OUT.json.bound.json) records three async results with the pending bound set to 1 byte, so the older
ones are waited for and hashed as the next comes. Every rank prints `STATS <rank> <block> <json>`: how its async
results were hashed (dtsim.recorder.last_stats). A third block's recording cannot be written (rank 0 removes its
folder inside the block): every rank prints `WRITEFAIL <rank> <the error it raised>`.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh

import dtsim
import dtsim.recorder


def main():
    out = sys.argv[1]
    bypass = int(sys.argv[sys.argv.index("--bypass") + 1]) if "--bypass" in sys.argv else -1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    p = DTensor.from_local(torch.arange(30.0).reshape(6, 5) * (rank + 1), mesh, [Partial()], shape=(6, 5),
                           stride=(5, 1))
    s = distribute_tensor(torch.arange(35.0).reshape(7, 5), mesh, [Shard(0)])
    with dtsim.record(out):
        p.redistribute(mesh, [Replicate()])
        a = p.redistribute(mesh, [Replicate()], async_op=True)
        a.add_(1)
        s.redistribute(mesh, [Replicate()])
        b = s.redistribute(mesh, [Replicate()], async_op=True)
        b.view(-1).mul_(2)
        s.redistribute(mesh, [Replicate()], async_op=True)  # waited for only after the block
        s.redistribute(mesh, [Shard(1)])
        d = s.redistribute(mesh, [Shard(1)], async_op=True)
        d.add_(1)
        f = s.redistribute(mesh, [Replicate()], async_op=True)
        f.redistribute(mesh, [Shard(0)])
        e = p.redistribute(mesh, [Replicate()], async_op=True)
        if rank == bypass:
            local = e._local_tensor
            torch.ops._c10d_functional.wait_tensor.default(local.elem)
            local.elem.add_(100)
    print(f"STATS {rank} main {json.dumps(dtsim.recorder.last_stats)}", flush=True)
    bound = dtsim.recorder._MAX_PENDING_BYTES
    dtsim.recorder._MAX_PENDING_BYTES = 1
    try:
        with dtsim.record(out + ".bound.json"):
            held = [p.redistribute(mesh, [Replicate()], async_op=True) for _ in range(3)]
            held[0].add_(1)
    finally:
        dtsim.recorder._MAX_PENDING_BYTES = bound
    print(f"STATS {rank} bound {json.dumps(dtsim.recorder.last_stats)}", flush=True)
    # A third block whose recording rank 0 cannot write (its folder is gone by the end): every rank must raise rank
    # 0's error, not just rank 0, and none may hang or abort.
    gone = out + ".gone"
    if rank == 0:
        os.makedirs(gone)
    dist.barrier()
    try:
        with dtsim.record(os.path.join(gone, "r.json")):
            p.redistribute(mesh, [Replicate()])
            if rank == 0:
                os.rmdir(gone)
        print(f"WRITEFAIL {rank} no error", flush=True)
    except RuntimeError as e:
        print(f"WRITEFAIL {rank} {str(e).splitlines()[0][:200]}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
