"""The recorder's overhead on a real run: the same upstream DTensor program on 4 Gloo ranks (torchrun), timed without
and with `dtsim.record` around it, alternating (plain, recorded, plain, ...), median of each side.

Program per iteration: a ColwiseParallel -> RowwiseParallel MLP (256 -> 1024 -> 256, batch 64) forward and backward,
and explicit redistributions of a 257x255 float32 tensor (S(0) -> S(1) -> R, a Partial -> S(0)): 7 redistributions.
A round runs 5 iterations; a recorded round is one `with dtsim.record(...)` around them, as a user records a run,
and writes its recording (rank 0) with every source and result shard (the default data cap), so hashing, copying
shards, gathering them to rank 0 and writing are all counted. The time of a side is its median round / 5, over 21
rounds each (DTSIM_RECORDER_BENCH_ROUNDS; with 7, runs on the loaded 2-core machine scattered by +-0.08 in the ratio).

    torchrun --standalone --nproc_per_node 4 bench/recorder_bench.py OUT_DIR
Rank 0 prints {"plain_ms", "recorded_ms" (per iteration), "ratio", "rounds", "redistributions" (per recording),
"async" (how the last recording hashed its async results: dtsim.recorder.last_stats)}; scripts/bench.sh prints
`bench recorder_overhead ratio <plain / recorded>` (target >= 0.8).
"""
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))  # works without the venv's .pth too
import dtsim  # noqa: E402
import dtsim.recorder  # noqa: E402


STEPS = 5  # iterations per timed round; a recorded round is one `with dtsim.record` around all of them


def main():
    out_dir = sys.argv[1]
    rounds = int(os.environ.get("DTSIM_RECORDER_BENCH_ROUNDS", "21"))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = parallelize_module(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(64, 256)
    big = torch.randn(257, 255)

    def iteration():
        model(x).sum().backward()
        a = distribute_tensor(big, mesh, [Shard(0)])
        a.redistribute(mesh, [Shard(1)]).redistribute(mesh, [Replicate()])
        p = DTensor.from_local(big[:64] * (rank + 1), mesh, [Partial()], shape=(64, 255), stride=(255, 1))
        p.redistribute(mesh, [Shard(0)])

    def timed(record):
        dist.barrier()
        start = time.perf_counter()
        with dtsim.record(os.path.join(out_dir, "bench.json")) if record else contextlib.nullcontext():
            for _ in range(STEPS):
                iteration()
        dist.barrier()
        return (time.perf_counter() - start) * 1e3 / STEPS

    timed(False)
    timed(True)  # warm-up both
    plain, recorded = [], []
    for _ in range(rounds):
        plain.append(timed(False))
        recorded.append(timed(True))
    if rank == 0:
        n = len(json.load(open(os.path.join(out_dir, "bench.json")))["redistributions"])
        p, r = statistics.median(plain), statistics.median(recorded)
        print(json.dumps({"plain_ms": p, "recorded_ms": r, "ratio": p / r, "rounds": rounds, "redistributions": n,
                          "async": dtsim.recorder.last_stats}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
