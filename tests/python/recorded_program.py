"""An upstream PyTorch DTensor program recorded by tests/python/test_recorder.py: a tensor-parallel MLP (ColwiseParallel
then RowwiseParallel, forward and backward) and explicit redistributions with uneven shapes on 1-D and 2-D meshes
(all_to_all, all_gather, reduce_scatter, all_reduce, an implicit redistribution from op dispatch), also on the tp
submesh of a 2x2 (dp, tp) mesh.

    torchrun --standalone --nproc_per_node 4 recorded_program.py OUT.json      (real Gloo ranks)
    python recorded_program.py OUT.json --local                                (upstream's LocalTensorMode, 4 ranks)

With DTSIM_CORRUPT_RANK=r, rank r's shard_dim_alltoall / all-gather-and-chunk result of every S(i) -> S(j) is off by
one (a monkeypatched upstream method): the recording of a broken run.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dtsim


CAP = int(os.environ.get("DTSIM_RECORD_CAP", str(256 << 20)))  # dtsim.record's data cap


def program(per_rank):
    """per_rank(fn): the local tensor fn(rank) of every rank (this rank's on real ranks)."""
    mesh = init_device_mesh("cpu", (4,))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 8))
    model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(5, 16)
    y = model(x)
    y.sum().backward()
    # explicit, uneven: 7x5 S(0) -> S(1) (all_to_all), full_tensor
    a = distribute_tensor(torch.arange(35.0).reshape(7, 5), mesh, [Shard(0)])
    b = a.redistribute(mesh, [Shard(1)])
    b.full_tensor()
    # Partial -> Shard(0): reduce_scatter over uneven rows
    p = DTensor.from_local(per_rank(lambda r: torch.full((6, 3), 1.0) * (r + 1)), mesh, [Partial()], shape=(6, 3),
                           stride=(3, 1))
    p.redistribute(mesh, [Shard(0)])
    # implicit: an add of S(0) and S(1) operands redistributes one of them
    c = distribute_tensor(torch.arange(35.0).reshape(7, 5) * 2, mesh, [Shard(1)])
    (a + c).full_tensor()
    # 2-D mesh, nested uneven sharding
    mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    d = distribute_tensor(torch.arange(15.0).reshape(5, 3), mesh2, [Shard(0), Shard(1)])
    d.redistribute(mesh2, [Replicate(), Shard(0)])
    # a submesh (TP inside a dp x tp mesh): every rank runs in its own tp group
    tp = mesh2["tp"]
    e = distribute_tensor(torch.arange(21.0).reshape(7, 3), tp, [Shard(0)])
    e.redistribute(tp, [Shard(1)]).full_tensor()
    q = DTensor.from_local(per_rank(lambda r: torch.full((3, 2), float(r + 1))), tp, [Partial()], shape=(3, 2),
                           stride=(2, 1))
    q.redistribute(tp, [Replicate()])


def corrupt(rank):
    from torch.distributed.tensor import placement_types
    original = placement_types.Shard._to_new_shard_dim

    def broken(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        return out + 1 if dist.get_rank() == rank else out

    placement_types.Shard._to_new_shard_dim = broken


def main():
    out = sys.argv[1]
    if "--local" in sys.argv:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401
        from torch.distributed._local_tensor import LocalTensorMode
        dist.init_process_group("fake", rank=0, world_size=4, store=dist.HashStore())
        from torch.distributed._local_tensor import LocalTensor
        with LocalTensorMode(4) as mode:

            def per_rank(fn):
                with mode.disable():  # plain per-rank tensors, as each rank would make its own
                    shards = {r: fn(r) for r in range(4)}
                return LocalTensor(shards)

            with dtsim.record(out, max_data_bytes=CAP):
                program(per_rank)
        dist.destroy_process_group()
        return
    dist.init_process_group("gloo")
    if os.environ.get("DTSIM_CORRUPT_RANK"):
        corrupt(int(os.environ["DTSIM_CORRUPT_RANK"]))
    with dtsim.record(out, max_data_bytes=CAP, ops=os.environ.get("DTSIM_RECORD_OPS") == "1"):
        program(lambda fn: fn(dist.get_rank()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
