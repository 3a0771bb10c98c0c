"""Times upstream PyTorch DTensor.redistribute under LocalTensorMode on bench/redistribute_cases.json (the cases
bench/redistribute_bench.cc times dtsim on); prints one JSON object {case name: best microseconds per call}.
Sources are built like dtsim's arange cases (arange; Partial sources with from_local of scaled shards).

    upstream_redistribute_bench.py [CASE ...]                       the cases of redistribute_cases.json, on the CPU
    upstream_redistribute_bench.py --gpu RANKS MIB                  the cases `dtsim_gpu_bench redistribute --ranks
                                                                    RANKS --mib MIB` times (S(0) -> R and S(0) -> S(1),
                                                                    MIB per source shard), every shard on the GPU
"""
import json
import logging
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensorMode

try:
    from torch.distributed._local_tensor import tensor_map
except ImportError:  # torch 2.11 (the GPU machine's): only the Partial sources need it, and --gpu has none
    tensor_map = None
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Partial, Replicate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "oracle"))
import upstream  # noqa: E402
from upstream_bench import best_us  # noqa: E402  the same timing rule as the LocalTensor benchmark

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def gpu_cases(ranks, mib):
    """The cases of bench/gpu_bench.cc's redistribute mode (same names, shapes and placements)."""
    cols = 4096
    rows = ranks * (mib << 20) // (4 * cols)
    return [{"name": f"gpu_{ranks}x{mib}MiB_S0_to_{to}", "mesh": [ranks], "shape": [rows, cols], "from": "S(0)",
             "to": placement} for to, placement in (("R", "R"), ("S1", "S(1)"))]


def main():
    device = "cpu"
    if sys.argv[1:2] == ["--gpu"]:
        cases, only, device = gpu_cases(int(sys.argv[2]), int(sys.argv[3])), set(), "cuda"
    else:
        cases = json.load(open(os.path.join(os.path.dirname(__file__), "redistribute_cases.json")))
        only = set(sys.argv[1:])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {}
    for c in cases:
        if only and c["name"] not in only:
            continue
        world = math.prod(c["mesh"])
        with upstream.fake_world(world):
            mesh = init_device_mesh(device, tuple(c["mesh"]))
            src = [upstream.to_upstream(p) for p in c["from"].split(",")]
            dst = [upstream.to_upstream(p) for p in c["to"].split(",")]
            partial = [m for m, p in enumerate(src) if isinstance(p, Partial)]
            with LocalTensorMode(world):
                full = torch.arange(math.prod(c["shape"]), dtype=torch.float32, device=device).reshape(
                    c["shape"])
                read = [Replicate() if isinstance(p, Partial) else p for p in src]
                dt = distribute_tensor(full, mesh, read)
                if partial:
                    def scale(rank, t):
                        coord = [rank // math.prod(c["mesh"][m + 1:]) % c["mesh"][m] for m in range(len(c["mesh"]))]
                        return t * math.prod(1 + coord[m] for m in partial)
                    dt = DTensor.from_local(tensor_map(dt.to_local(), scale), mesh, src, shape=full.shape,
                                            stride=full.stride())
                def once():
                    dt.redistribute(mesh, dst).to_local()
                    sync()
                sync()
                out[c["name"]] = best_us(once, repeats=3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
