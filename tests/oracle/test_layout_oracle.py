"""Oracle test: every rank's local shape and global offset from `dtsim layout` equal upstream PyTorch's
compute_local_shape_and_global_offset on thousands of random cases (meshes of 1-3 dims up to 64 ranks, dims smaller
than the mesh, zero dims, every placement kind including _StridedShard, negative dims).

Two ways of asking upstream, both run:
  * _compute_local_shape_and_global_offset(global_shape, mesh_shape, coordinate, placements) — upstream's own
    rank-by-rank function on plain data, for all NUM_CASES cases (fast);
  * compute_local_shape_and_global_offset(shape, DeviceMesh, placements) under LocalTensorMode with a fake process
    group — the public API with a real mesh, all ranks at once — for a subset.
"""
import itertools

import pytest
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor._utils import (_compute_local_shape_and_global_offset,
                                             compute_local_shape_and_global_offset)

import upstream

NUM_CASES = 2400
NUM_PUBLIC_API_CASES = 240


def make_cases(seed, count, max_ranks=64):
    rng = upstream.new_rng(seed)
    cases = []
    for _ in range(count):
        mesh = upstream.random_mesh_shape(rng, max_ranks)
        shape = upstream.random_shape(rng, mesh)
        placements = [upstream.random_placement(rng, len(shape)) for _ in mesh]
        cases.append({"mesh": mesh, "shape": shape, "placements": ",".join(placements), "list": placements})
    return cases


def normalise(text, ndim):
    """Upstream expects non-negative shard dims in these internal functions; dtsim normalises itself."""
    p = upstream.to_upstream(text)
    if hasattr(p, "dim") and p.dim < 0:
        p = upstream.to_upstream(text.replace(f"({p.dim}", f"({p.dim + ndim}"))
    return p


def dtsim_cases(cases):
    """The batch lines dtsim reads: a line holds only the command's keys ("list" is this test's own)."""
    return [{k: v for k, v in c.items() if k != "list"} for c in cases]


def coordinates(mesh):
    return list(itertools.product(*[range(s) for s in mesh]))


def test_layout_matches_upstream_rank_by_rank():
    cases = make_cases(2026, NUM_CASES)
    results = upstream.run_batch("layout", dtsim_cases(cases))
    mismatches = []
    for case, result in zip(cases, results):
        assert "error" not in result, (case, result)
        placements = [normalise(p, len(case["shape"])) for p in case["list"]]
        for coordinate, got in zip(coordinates(case["mesh"]), result["ranks"]):
            assert got["coordinate"] == list(coordinate)
            shape, offset = _compute_local_shape_and_global_offset(case["shape"], case["mesh"], list(coordinate),
                                                                  placements)
            if got["local_shape"] != list(shape) or got["global_offset"] != list(offset):
                mismatches.append((case, coordinate, (list(shape), list(offset)),
                                   (got["local_shape"], got["global_offset"])))
    assert not mismatches, f"{len(mismatches)} rank layouts differ from upstream, first: {mismatches[:3]}"


def test_layout_matches_upstream_public_api_under_local_tensor_mode():
    cases = make_cases(7, NUM_PUBLIC_API_CASES, max_ranks=16)
    results = upstream.run_batch("layout", dtsim_cases(cases))
    by_world = {}
    for case, result in zip(cases, results):
        world = 1
        for s in case["mesh"]:
            world *= s
        by_world.setdefault(world, []).append((case, result))
    checked = 0
    for world, items in sorted(by_world.items()):
        with upstream.fake_world(world):
            meshes = {}
            for case, result in items:
                key = tuple(case["mesh"])
                if key not in meshes:
                    meshes[key] = init_device_mesh("cpu", key)
                placements = [normalise(p, len(case["shape"])) for p in case["list"]]
                with LocalTensorMode(world):
                    shape, offset = compute_local_shape_and_global_offset(case["shape"], meshes[key], placements)
                for got in result["ranks"]:
                    rank = got["rank"]
                    want_shape = [upstream.per_rank(v, rank) for v in shape]
                    want_offset = [upstream.per_rank(v, rank) for v in offset]
                    assert got["local_shape"] == want_shape, (case, rank)
                    assert got["global_offset"] == want_offset, (case, rank)
                    checked += 1
    assert checked > 1000


def test_intervals_agree_with_upstream_offsets():
    """The owned intervals of each dim start at upstream's offset and add up to its local size."""
    cases = make_cases(99, 400)
    for case, result in zip(cases, upstream.run_batch("layout", dtsim_cases(cases))):
        for got in result["ranks"]:
            for d, intervals in enumerate(got["intervals"]):
                size = sum(hi - lo for lo, hi in intervals)
                assert size == got["local_shape"][d], (case, got)
                if intervals and any(p.startswith(("S", "_S")) for p in case["list"]):
                    assert intervals[0][0] == got["global_offset"][d] or got["global_offset"][d] == 0, (case, got)


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
