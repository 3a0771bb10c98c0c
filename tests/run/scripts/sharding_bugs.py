"""Planted sharding and script bugs for `dtsim run --check-ops` (issue 32): DTSIM_PLANT picks one, unset runs clean.

    dtsim run --check-ops --nproc-per-node 4 sharding_bugs.py             every op checks clean
    DTSIM_PLANT=wrong_strategy ...   a custom op whose registered strategy keeps Shard(0), but the op reads each row's
                                     global index (it computes on the wrong shard's indices)
    DTSIM_PLANT=uneven_mean ...      a custom row mean whose strategy is Shard(0) -> Partial(avg): right on even shards
                                     only; the program runs it on 8 rows (even) and then 6 rows (uneven)
    DTSIM_PLANT=local_map_offset ... a local_map function that numbers its rows from 0 on every shard
    DTSIM_PLANT=replica_write ...    rank 1 writes its replica of a Replicate DTensor in place

Every planted line is marked `# planted`. The program itself runs to the end under real torchrun too: the bugs are
silent there.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.experimental import local_map, register_sharding

PLANT = os.environ.get("DTSIM_PLANT", "")


@torch.library.custom_op("dtsim_planted::row_scale", mutates_args=())
def row_scale(x: torch.Tensor) -> torch.Tensor:
    """Each row times its index: row i of the result is i * x[i]."""
    return x * torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1)


@row_scale.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("dtsim_planted::row_mean", mutates_args=())
def row_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean over rows (dim 0)."""
    return x.mean(0)


@row_mean.register_fake
def _(x):
    return x.new_empty(x.shape[1:])


@register_sharding(torch.ops.dtsim_planted.row_scale.default)
def _row_scale_strategy(x):
    if PLANT == "wrong_strategy":
        return [([Shard(0)], [Shard(0)]), ([Replicate()], [Replicate()])]  # planted: rows keep their local index
    return [([Replicate()], [Replicate()])]


@register_sharding(torch.ops.dtsim_planted.row_mean.default)
def _row_mean_strategy(x):
    if PLANT == "uneven_mean":
        return [([Partial("avg")], [Shard(0)]), ([Replicate()], [Replicate()])]  # planted: even shards only
    return [([Replicate()], [Replicate()])]


class Block(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.mesh = mesh

    def forward(self, x):
        y = torch.ops.dtsim_planted.row_scale(x)
        numbered = local_map(_number_rows, out_placements=[Shard(0)], in_placements=([Shard(0)],),
                             device_mesh=self.mesh, redistribute_inputs=True)(y)
        return numbered + 1


def _number_rows(local):
    rows = torch.arange(local.shape[0], dtype=local.dtype).unsqueeze(1)
    if PLANT != "local_map_offset":
        start = _shard_start(local.shape[0])
        rows = rows + start
    return local + rows  # planted (with local_map_offset): every shard numbers its rows from 0


def _shard_start(local_rows):
    # The global index of this shard's first row, for an even Shard(0) over the world (0 in a world of one).
    return dist.get_rank() * local_rows


def main():
    mesh = init_device_mesh("cpu", (4,))
    torch.manual_seed(0)
    block = Block(mesh)
    for rows in (8, 6):
        x = torch.randn(rows, 3)
        sharded = distribute_tensor(x, mesh, [Shard(0)])
        if rows == 8:
            out = block(sharded)
            print(f"result block {out.full_tensor().sum().item():.6e}", flush=True)
        mean = torch.ops.dtsim_planted.row_mean(sharded)
        print(f"result row_mean_{rows} {mean.full_tensor().sum().item():.6e} (unsharded {x.mean(0).sum().item():.6e})",
              flush=True)
    weights = distribute_tensor(torch.ones(4, 4), mesh, [Replicate()])
    if PLANT == "replica_write" and dist.get_rank() == 1:
        weights.to_local().mul_(2)  # planted: one replica written in place
    total = weights * 3
    print(f"result replicated {total.to_local().sum().item():.6e}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
