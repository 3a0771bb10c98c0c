"""Script bugs that show inside one run, for `dtsim trace-diff RECORDING` (its replicas), planted by DTSIM_TEST_FAULT:

- replica_write: rank 1 writes its replica of a Replicate weight in place (outside any DTensor op) between two
  matmuls that read it;
- skip_grad_reduce: gradients reduced by hand (a Replicate parameter's gradient made with DTensor.from_local, then
  all-reduced in place over the world), but rank 2 reduces a copy of its gradient, so its replica is never reduced
  and the update reads it.

Unset, the run is clean. 4 ranks; prints `done`."""
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh


def main():
    dist.init_process_group("gloo")
    fault = os.environ.get("DTSIM_TEST_FAULT", "")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (4,))
    torch.manual_seed(0)
    w = distribute_tensor(torch.randn(8, 8), mesh, [Replicate()])
    x = distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)])
    y = torch.mm(x, w)
    if fault == "replica_write" and rank == 1:
        with torch.no_grad():
            w.to_local()[0, 0] += 1.0  # the planted write: one replica only
    z = torch.mm(y, w)
    # A gradient reduced by hand: each rank's own part, claimed Replicate, summed over the world in place.
    g = DTensor.from_local(torch.full((8, 8), float(rank + 1)), mesh, [Replicate()], run_check=False)
    reduced = g.to_local().clone() if fault == "skip_grad_reduce" and rank == 2 else g.to_local()
    dist.all_reduce(reduced)
    w = w - 0.1 * g
    # No collective after the last op (a functional collective's tensors released by Gloo's worker thread after the
    # program returned abort the rank: upstream's teardown race, docs/run.md).
    print(f"rank {rank}: {float(z.to_local().sum()):.4f} {float(w.to_local().sum()):.4f}", flush=True)
    print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
