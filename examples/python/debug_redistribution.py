"""Debug a redistribution from Python: an uneven [S(0), S(0)] -> [S(1), S(1)] on a 2x4 (dp, tp) mesh.

    .venv/bin/python examples/python/debug_redistribution.py                 # 7x10: uneven, ranks with empty shards
    .venv/bin/python examples/python/debug_redistribution.py --corrupt 5     # a wrong source shard on rank 5
    .venv/bin/python examples/python/debug_redistribution.py --shape 9,5 --src "S(0),R" --dst "R,S(1)"

What it shows, in the order one debugs:
  1. where every rank's part of the global tensor is before (dtsim.layout: the block grid and per-rank table);
  2. the plan upstream's redistribute would run (dtsim.plan(...).explain(): each step's collective, groups, bytes);
  3. the plan run one step at a time (a Plan cut to one step runs with DTensor.redistribute(plan=...)), every rank's
     shard checked after each step against the slice of the global tensor its layout says it holds: the first step
     after which a rank is wrong, and which ranks, is where to look;
  4. every rank's shard shape before and after, and the global rows x cols it holds;
  5. the verdict: full_tensor() against the input.
With --corrupt RANK the source shard of RANK is written wrong first (as a bug in the program that produced it would),
and step 3 shows how the wrong values spread. Exit status: 0 when every rank ends right, 1 otherwise.
Shard and Replicate placements only (a Partial source has no global slice to check a shard against).
"""

import argparse
import sys
from typing import Dict, List, Sequence

import torch

import dtsim
from dtsim import DTensor


def expected_shard(global_tensor: torch.Tensor, rank: dtsim.RankLayout) -> torch.Tensor:
    """The part of `global_tensor` that `rank` holds: its owned index ranges on every dim (several ranges on a dim
    for a _StridedShard)."""
    out = global_tensor
    for dim, ranges in enumerate(rank.intervals):
        index = torch.cat([torch.arange(lo, hi) for lo, hi in ranges]) if ranges else torch.empty(0, dtype=torch.long)
        out = out.index_select(dim, index)
    return out


def wrong_ranks(dt: DTensor, global_tensor: torch.Tensor) -> List[int]:
    """The ranks whose shard differs from what the layout says they hold (bitwise: arange values are exact)."""
    layout = dtsim.layout(dt, ranks="all")
    shards = dt.local_shards()
    return [r.rank for r in layout.ranks if not torch.equal(shards[r.rank], expected_shard(global_tensor, r))]


def one_step_plans(plan: dtsim.Plan) -> List[dtsim.Plan]:
    """The plan cut into one plan per step, each from the placements the step starts at to those it leaves."""
    out = []
    before = plan.to_json()["from"]
    for step in plan.steps:
        json = dict(plan.to_json(), plan=[step.to_json()], **{"from": before, "to": step["placements_after"]})
        out.append(dtsim.Plan(json))
        before = step["placements_after"]
    return out


def placements_text(placements: Sequence[dtsim.Placement]) -> str:
    return "[" + ", ".join(str(p) for p in placements) + "]"  # str(Shard(0)) == "S(0)", dtsim's text form


def ranges_text(intervals: Sequence[Sequence[Sequence[int]]]) -> str:
    return " x ".join(",".join(f"{lo}:{hi}" for lo, hi in dim) or "-" for dim in intervals)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="7,10", help="global shape (default 7,10)")
    parser.add_argument("--src", default="S(0),S(0)", help="source placements (default S(0),S(0))")
    parser.add_argument("--dst", default="S(1),S(1)", help="target placements (default S(1),S(1))")
    parser.add_argument("--planner", default="greedy", choices=["greedy", "min-cost", "graph"])
    parser.add_argument("--corrupt", type=int, default=None, metavar="RANK", help="write RANK's source shard wrong")
    args = parser.parse_args(argv)
    shape = [int(s) for s in args.shape.split(",")]

    mesh = dtsim.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    x = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)  # every value tells its index
    dt = dtsim.distribute_tensor(x, mesh, args.src)
    if args.corrupt is not None:
        dt.to_local()[args.corrupt].add_(1000)  # to_local() gives the shards themselves: this writes rank's shard
    before: Dict[int, torch.Size] = {r: t.shape for r, t in dt.local_shards().items()}

    plan = dtsim.plan(dt, args.dst, planner=args.planner)
    dims = ", ".join(f"{name}={size}" for name, size in zip(mesh.mesh_dim_names or (), mesh.shape))
    print(f"mesh ({dims}), global shape {tuple(shape)} float32: {placements_text(plan.src)} -> "
          f"{placements_text(plan.dst)}\n")
    print("1. Where the tensor is before (dtsim.layout):")
    print(dtsim.layout(dt).render())

    print("2. The plan (dtsim.plan(...).explain()):")
    print(plan.explain())

    print("3. The plan one step at a time, every rank's shard checked against the global tensor:")
    wrong = wrong_ranks(dt, x)
    print(f"  source: {'every shard right' if not wrong else f'wrong on ranks {wrong}'}")
    current = dt
    for i, (step, one) in enumerate(zip(plan.steps, one_step_plans(plan)), start=1):
        current = current.redistribute(plan=one)
        wrong = wrong_ranks(current, x)
        verdict = "every shard right" if not wrong else f"wrong on ranks {wrong}"
        print(f"  after step {i} ({step.mesh_dim_name}: {step.src} -> {step.dst}, {step.collective}): {verdict}")
    out = current
    # The same in one call, as a program would write it, gives the same shards.
    direct = dt.redistribute(mesh, args.dst, planner=args.planner)
    assert all(torch.equal(a, b) for a, b in zip(direct.to_local(), out.to_local()))

    print(f"\n4. Every rank's shard, before and after {placements_text(out.placements)}:")
    print("rank  coordinate  before      after       holds (global rows x cols)")
    for r in dtsim.layout(out, ranks="all").ranks:
        print(f"{r.rank:4}  {str(r.coordinate):10}  {str(tuple(before[r.rank])):10}  "
              f"{str(tuple(out.local_shards()[r.rank].shape)):10}  {ranges_text(r.intervals)}")

    print("\n5. Verdict:")
    if not wrong:
        equal = torch.equal(out.full_tensor(), x)
        print(f"full_tensor() equals the input: {equal}")
        return 0 if equal else 1
    # Replicas that disagree have no single global tensor, so compare the shards, not full_tensor().
    print(f"full_tensor() equals the input: False (ranks {wrong} hold wrong values)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
