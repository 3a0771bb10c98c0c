"""Times upstream DTensor ops under LocalTensorMode on the cases of bench/op_bench.cc; prints one JSON object.

8 ranks, 1-D mesh, small shards (16 x 16 per rank), inputs already placed as the op wants them (no redistribution):
  matrix    mm of [128, 16] S(0) by [16, 16] R            -> S(0)
  pointwise add of two [128, 16] S(0)                      -> S(0)
  math      sum over dim 1 of [128, 16] S(0)               -> S(0)
  view      transpose(0, 1) of [128, 16] S(0)              -> S(1)
Times are the best of several repeats, microseconds per call (sharding propagation cached after the first call, as
in dtsim), so scripts/bench.sh divides them by dtsim's time for `bench op_<family>_vs_upstream`.
"""
import json
import logging
import sys

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from upstream_bench import best_us  # the same timing rule as the other upstream benchmarks

WORLD = 8


def main():
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    dist.init_process_group("fake", rank=0, world_size=WORLD, store=dist.HashStore())
    mesh = init_device_mesh("cpu", (WORLD,))
    try:
        with LocalTensorMode(WORLD):
            a = distribute_tensor(torch.randn(128, 16), mesh, [Shard(0)])
            b = distribute_tensor(torch.randn(128, 16), mesh, [Shard(0)])
            w = distribute_tensor(torch.randn(16, 16), mesh, [Replicate()])
            result = {
                "matrix_us": best_us(lambda: torch.ops.aten.mm.default(a, w)),
                "pointwise_us": best_us(lambda: torch.ops.aten.add.Tensor(a, b)),
                "math_us": best_us(lambda: torch.ops.aten.sum.dim_IntList(a, [1])),
                "view_us": best_us(lambda: torch.ops.aten.transpose.int(a, 0, 1)),
            }
    finally:
        dist.destroy_process_group()
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
