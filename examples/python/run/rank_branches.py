"""Rank-dependent control flow and the c10d collective zoo: subgroups made with new_group (every rank creates both,
in the same order, and uses only its own), broadcast_object_list, all_gather_object, barrier, reduce, scatter and
gather. Rank 0 prints `result <name> <values>` lines.

    torchrun --standalone --nproc_per_node 4 rank_branches.py
    dtsim run --nproc-per-node 4 rank_branches.py
"""
import os

import torch
import torch.distributed as dist


def fmt(values):
    return " ".join(f"{v:.9e}" if isinstance(v, float) else str(v) for v in values)


def main():
    dist.init_process_group("gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert world == 4, "the subgroups below are written for 4 ranks"
    results = {}

    even = dist.new_group([0, 2])  # collective over the default group: all ranks call both, same order
    odd = dist.new_group([1, 3])
    t = torch.tensor([float(rank + 1), 10.0 * rank])
    if rank % 2 == 0:
        dist.all_reduce(t, group=even)
    else:
        t *= 2
        dist.all_reduce(t, group=odd)
    if rank == 0:
        print("rank 0 took the even branch", flush=True)

    config = [{"lr": 0.25, "layers": [8, 16], "name": "tiny"} if rank == 0 else None]
    dist.broadcast_object_list(config, src=0)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "subgroup_sum": t.tolist(), "lr": config[0]["lr"]})
    results["subgroup_all_reduce"] = [v for g in gathered for v in g["subgroup_sum"]]
    results["broadcast_object"] = [config[0]["name"], config[0]["lr"], *config[0]["layers"]]
    results["all_gather_object"] = [g["rank"] * g["lr"] for g in gathered]
    dist.barrier()

    r = torch.arange(3, dtype=torch.float32) + rank * 0.5
    dist.reduce(r, dst=0)  # only rank 0's buffer holds the sum afterwards
    if rank == 0:
        results["reduce"] = r.tolist()

    chunks = [torch.full((2,), 1.5 * i) for i in range(world)] if rank == 0 else None
    got = torch.empty(2)
    dist.scatter(got, scatter_list=chunks, src=0)
    got += rank  # every rank changes its piece before gathering it back
    bucket = [torch.empty(2) for _ in range(world)] if rank == 0 else None
    dist.gather(got, gather_list=bucket, dst=0)
    if rank == 0:
        results["scatter_gather"] = [v for b in bucket for v in b.tolist()]

    if rank == 0:
        for name, values in results.items():
            print(f"result {name} {fmt(values)}", flush=True)
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
