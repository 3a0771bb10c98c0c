"""DTensor ops whose sharding propagation reads the rank: shape arguments rewritten to each rank's local shape (view,
reshape, new_zeros, expand) and group norm's sizes, on shards of unequal size (6 rows over 4 ranks:
2, 2, 2, 0), next to the same ops on even shards. Rank 0 prints every rank's local shapes and each result's global
values, which must equal the unsharded op's, and how many ranks' chunks of a redistributed op output differ from the
unsharded chunks (0). Both are what the sharding-propagation cache that dtsim run's ranks share must keep exact.

    torchrun --standalone --nproc_per_node 4 uneven_views.py
    dtsim run --nproc-per-node 4 uneven_views.py
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def main():
    mesh = init_device_mesh("cpu", (4,))
    rank = dist.get_rank()
    results = {}
    for rows in (6, 8):  # uneven, then even
        x = torch.arange(rows * 5, dtype=torch.float32).reshape(rows, 5) / 7
        dt = distribute_tensor(x, mesh, [Shard(0)])
        cases = {
            "view": (dt.view(rows, 5, 1), x.view(rows, 5, 1)),
            "reshape": (dt.reshape(rows, 1, 5), x.reshape(rows, 1, 5)),
            "new_zeros": (dt.new_zeros((rows + 1, 3)) + 1, x.new_zeros((rows + 1, 3)) + 1),
            "expand": (dt.view(rows, 1, 5).expand(rows, 2, 5), x.view(rows, 1, 5).expand(rows, 2, 5)),
        }
        if rows % 4 == 0:  # upstream refuses to flatten an unevenly sharded dim
            cases["flatten"] = (dt.reshape(rows * 5), x.reshape(rows * 5))
        images = torch.arange(rows * 4 * 3, dtype=torch.float32).reshape(rows, 4, 3).sin()
        cases["group_norm"] = (F.group_norm(distribute_tensor(images, mesh, [Shard(0)]), 2),
                               F.group_norm(images, 2))
        # An op's output goes on to a redistribution that reads the rank's coordinate (each rank keeps its own chunk).
        doubled = distribute_tensor(x, mesh, [Replicate()]) * 2
        sums = [None] * dist.get_world_size()
        dist.all_gather_object(sums, doubled.redistribute(mesh, [Shard(1)]).to_local().sum().item())
        wrong = [r for r, (v, c) in enumerate(zip(sums, (2 * x).chunk(4, 1))) if abs(v - c.sum().item()) > 1e-4 * abs(v)]
        results[f"rechunk_{rows}"] = ([()], float(len(wrong)))
        for name, (sharded, unsharded) in cases.items():
            shapes = [None] * dist.get_world_size()
            dist.all_gather_object(shapes, tuple(sharded.to_local().shape))
            full = sharded.full_tensor()
            assert torch.allclose(full, unsharded, atol=1e-6), (name, rows, rank)
            results[f"{name}_{rows}"] = (shapes, full.abs().sum().item())
    if rank == 0:
        for name, (shapes, total) in results.items():
            local = " ".join("x".join(str(d) for d in shape) or "scalar" for shape in shapes)
            print(f"result {name} {local} {total:.6e}", flush=True)
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
