"""Times upstream PyTorch DTensor.redistribute under LocalTensorMode on bench/redistribute_cases.json (the cases
bench/redistribute_bench.cc times dtsim on); prints one JSON object {case name: best microseconds per call}.
Sources are built like dtsim's arange cases (arange; Partial sources with from_local of scaled shards)."""
import json
import logging
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensorMode, tensor_map
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor.placement_types import Partial, Replicate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "oracle"))
import upstream  # noqa: E402
from upstream_bench import best_us  # noqa: E402  the same timing rule as the LocalTensor benchmark

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def main():
    cases = json.load(open(os.path.join(os.path.dirname(__file__), "redistribute_cases.json")))
    only = set(sys.argv[1:])
    out = {}
    for c in cases:
        if only and c["name"] not in only:
            continue
        world = math.prod(c["mesh"])
        with upstream.fake_world(world):
            mesh = init_device_mesh("cpu", tuple(c["mesh"]))
            src = [upstream.to_upstream(p) for p in c["from"].split(",")]
            dst = [upstream.to_upstream(p) for p in c["to"].split(",")]
            partial = [m for m, p in enumerate(src) if isinstance(p, Partial)]
            with LocalTensorMode(world):
                full = torch.arange(math.prod(c["shape"]), dtype=torch.float32).reshape(c["shape"])
                read = [Replicate() if isinstance(p, Partial) else p for p in src]
                dt = distribute_tensor(full, mesh, read)
                if partial:
                    def scale(rank, t):
                        coord = [rank // math.prod(c["mesh"][m + 1:]) % c["mesh"][m] for m in range(len(c["mesh"]))]
                        return t * math.prod(1 + coord[m] for m in partial)
                    dt = DTensor.from_local(tensor_map(dt.to_local(), scale), mesh, src, shape=full.shape,
                                            stride=full.stride())
                out[c["name"]] = best_us(lambda: dt.redistribute(mesh, dst).to_local(), repeats=3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
