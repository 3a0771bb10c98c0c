"""The digest's speed (issue 32), as docs/performance.md quotes it ("XXH3 built in, prefetching far enough"):

    python bench/digest_bench.py        prints one line per case, GB/s, the best of three passes

- cold contiguous: dtsim._C.shard_digest over 64 [1024, 512] float32 tensors (128 MiB, more than the caches), each once
  a pass; beside it torch's own sum over the same tensors (a read of the same bytes, the floor);
- cold transposed: the same tensors' .t() (read in place, gathered sixteen rows at a time);
- hot contiguous / hot transposed: one of them, 64 times a pass.
Run it with OMP_NUM_THREADS=1 (one core, as a recording rank digests)."""
import time

import torch

from dtsim import _C

N = 64


def best_gbps(f, tensors) -> float:
    f(tensors[0])
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for t in tensors:
            f(t)
        best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
    return best


def main() -> None:
    torch.manual_seed(0)
    tensors = [torch.randn(1024, 512) for _ in range(N)]
    cases = [
        ("digest cold contiguous", _C.shard_digest, tensors),
        ("sum cold contiguous", torch.sum, tensors),
        ("digest cold transposed", _C.shard_digest, [t.t() for t in tensors]),
        ("digest hot contiguous", _C.shard_digest, [tensors[0]] * N),
        ("digest hot transposed", _C.shard_digest, [tensors[0].t()] * N),
    ]
    for name, f, ts in cases:
        print(f"{name} {best_gbps(f, ts):.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
