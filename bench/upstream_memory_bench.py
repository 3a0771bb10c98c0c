"""Peak memory of upstream PyTorch DTensor.redistribute under LocalTensorMode for the case of dtsim_scale_bench's
BM_RedistributeLargeMemory: 8 ranks x 16 MiB float32 (16384 x 2048 sharded on dim 0), S(0) -> R.

Measured the same way as the C++ side: the growth of peak resident memory (VmHWM, reset with /proc/self/clear_refs)
from before the source shards exist to the end of the redistribution; each rank's source shard is built directly
(no global tensor). Prints one JSON object {"peak_growth_bytes", "source_plus_global_bytes", "ok"}. Run it in a
process of its own (scripts/bench.sh does).
"""
import json
import logging
import os
import sys

import torch
from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Replicate, Shard

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "oracle"))
import upstream  # noqa: E402

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)

RANKS, ROWS, COLS = 8, 16384, 2048


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def main():
    with upstream.fake_world(RANKS):
        mesh = init_device_mesh("cpu", (RANKS,))
        rows = ROWS // RANKS
        with LocalTensorMode(RANKS):  # warm-up on a small tensor: one-time set-up is not counted
            small = LocalTensor({r: torch.ones(2, 4) for r in range(RANKS)})
            DTensor.from_local(small, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()
        base_kb = status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := the current RSS
        with LocalTensorMode(RANKS):
            local = LocalTensor({r: torch.arange(r * rows * COLS, (r + 1) * rows * COLS, dtype=torch.float32)
                                 .reshape(rows, COLS) for r in range(RANKS)})
            source = DTensor.from_local(local, mesh, [Shard(0)])
            out = source.redistribute(mesh, [Replicate()])
            peak_kb = status_kb("VmHWM")
            five = out.to_local()._local_tensors[5]
        ok = bool(torch.equal(five, torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)))
    print(json.dumps({"peak_growth_bytes": (peak_kb - base_kb) * 1024,
                      "source_plus_global_bytes": 2 * ROWS * COLS * 4, "ok": ok}))


if __name__ == "__main__":
    main()
