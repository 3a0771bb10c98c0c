"""dtsim from Python against upstream, side by side in one process: the same small redistribution on 8 ranks.

Case: a 2x4 (dp, tp) mesh, a 16x16 float32 arange tensor, [S(0), R] -> [R, S(1)], then every rank's shard
(`.to_local()`). Upstream: torch.distributed.tensor's DTensor.redistribute under LocalTensorMode(8) with a fake process
group (as tests/oracle does); dtsim: `import dtsim`, DTensor.redistribute through the Python binding (placements as
dtsim's objects, the list of 8 shards out). Both are warmed up, then timed in alternating batches (an upstream batch,
a dtsim batch, ...) so that load on a shared machine hits both alike; the time of a side is the median over the
batches of (batch time / calls). The shards are checked equal (bitwise) before timing.

Prints one JSON object: {"upstream_us", "dtsim_us", "ratio", "batches", "ok"}. Run: .venv/bin/python bench/python_bench.py
(scripts/bench.sh prints it as `bench python_redistribute_vs_upstream ratio <x>`).
"""
import json
import logging
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))  # works without the venv's .pth too
import dtsim  # noqa: E402

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)

MESH, SHAPE, WORLD = (2, 4), (16, 16), 8


def batch_us(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    batches = int(os.environ.get("DTSIM_PY_BENCH_BATCHES", "41"))
    x = torch.arange(SHAPE[0] * SHAPE[1], dtype=torch.float32).reshape(SHAPE)

    mesh = dtsim.init_device_mesh("cpu", MESH, mesh_dim_names=("dp", "tp"))
    src = dtsim.distribute_tensor(x, mesh, [dtsim.Shard(0), dtsim.Replicate()])
    dst = [dtsim.Replicate(), dtsim.Shard(1)]

    def run_dtsim():
        return src.redistribute(mesh, dst).to_local()

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=dist.HashStore())
    try:
        up_mesh = init_device_mesh("cpu", MESH, mesh_dim_names=("dp", "tp"))
        up_dst = [Replicate(), Shard(1)]
        with LocalTensorMode(WORLD):
            up_src = distribute_tensor(x, up_mesh, [Shard(0), Replicate()])

        # Upstream runs inside LocalTensorMode, dtsim outside it, as each is used. (dtsim called inside a dispatch mode
        # steps out of it for its own ATen calls, about 7 us more per call: docs/python.md.)
        def run_upstream():
            with LocalTensorMode(WORLD):
                return up_src.redistribute(up_mesh, up_dst).to_local()

        def upstream_batch_us(calls):
            with LocalTensorMode(WORLD):  # entered once per batch, outside the timed loop
                return batch_us(lambda: up_src.redistribute(up_mesh, up_dst).to_local(), calls)

        ours, theirs = run_dtsim(), run_upstream()
        ok = all(torch.equal(ours[r], theirs._local_tensors[r]) for r in range(WORLD))
        # Warm-up, then size the batches so each side's batch takes about 20 ms.
        for _ in range(5):
            run_dtsim()
            run_upstream()
        up_calls = max(1, int(20e3 / upstream_batch_us(3)))
        sim_calls = max(1, int(20e3 / batch_us(run_dtsim, 20)))
        up, sim = [], []
        for _ in range(batches):
            up.append(upstream_batch_us(up_calls))
            sim.append(batch_us(run_dtsim, sim_calls))
    finally:
        dist.destroy_process_group()
    up_us, sim_us = statistics.median(up), statistics.median(sim)
    print(json.dumps({"upstream_us": up_us, "dtsim_us": sim_us, "ratio": up_us / sim_us, "batches": batches,
                      "upstream_calls_per_batch": up_calls, "dtsim_calls_per_batch": sim_calls, "ok": ok}))


if __name__ == "__main__":
    main()
