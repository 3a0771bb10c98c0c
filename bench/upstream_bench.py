"""Times upstream PyTorch LocalTensorMode on the cases of bench/local_tensor_bench.cc; prints one JSON object.

Cases (8 ranks, 16x16 float shards): "add" = a + b, "chain" = the same 10 ops as Chain() in the C++ benchmark;
"all_gather": 8 ranks x 16 MiB float shards gathered along dim 0 over all 8 ranks (functional all_gather_tensor).
Times are the best of several repeats, in microseconds per call, so scripts/bench.sh can compare them with dtsim's.
"""
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import warnings
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode

WORLD = 8


def chain(a, b):
    x = a + b
    x = x * 2
    x = torch.relu(x)
    x = x - b
    x = x.abs()
    x = x.neg()
    x = x.sigmoid()
    x = x.transpose(0, 1)
    x = x.mul(a)
    return x.sum(1)


def best_us(fn, repeats=5, calls=None, warmup=True):
    if warmup:
        fn()
    if calls is None:
        start = time.perf_counter()
        fn()
        one = time.perf_counter() - start
        calls = max(1, int(0.2 / max(one, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main():
    dist.init_process_group("fake", rank=0, world_size=WORLD, store=dist.HashStore())
    try:
        with LocalTensorMode(WORLD):
            a = LocalTensor({r: torch.arange(256, dtype=torch.float32).reshape(16, 16) + r for r in range(WORLD)})
            b = LocalTensor({r: torch.arange(256, dtype=torch.float32).reshape(16, 16) + r + 1 for r in range(WORLD)})
            result = {
                "add_us": best_us(lambda: a + b),
                "chain_us": best_us(lambda: chain(a, b)),
            }
            n = 16 * (1 << 20) // 4
            big = LocalTensor({r: torch.full((n // 1024, 1024), float(r)) for r in range(WORLD)})
            group = dist.new_group(list(range(WORLD)))

            def gather():
                out = funcol.all_gather_tensor(big, 0, group)
                if isinstance(out, funcol.AsyncCollectiveTensor):
                    out = out.wait()
                return out

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result["all_gather_us"] = best_us(gather, repeats=3, calls=1, warmup=True)
    finally:
        dist.destroy_process_group()
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
