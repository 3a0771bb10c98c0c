"""Helpers for asking upstream PyTorch (torch.distributed.tensor) what the right answer is.

Shared by the oracle tests: random case generation, the fake process group, placement conversion between dtsim's text
form and upstream objects, and running the dtsim binary in batch mode.
"""
import contextlib
import json
import logging
import os
import random
import subprocess

import torch
import torch.distributed as dist
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)

REDUCE_OPS = ["sum", "avg", "min", "max", "product"]


def dtsim_bin():
    path = os.environ.get("DTSIM_BIN")
    if not path:
        raise RuntimeError("DTSIM_BIN is not set: run this test through ctest (scripts/test.sh)")
    return path


def run_batch(command, cases, extra=()):
    """Runs `dtsim <command> --batch -` on JSON-lines cases; returns one parsed JSON object per case."""
    text = "".join(json.dumps(c) + "\n" for c in cases)
    out = subprocess.run([dtsim_bin(), command, "--batch", "-", *extra], input=text, capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode in (0, 1), out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(cases), (len(lines), len(cases), out.stderr[-2000:])
    results = [json.loads(line) for line in lines]
    # The exit code is 1 exactly when some line failed; no line is ever an internal error.
    assert out.returncode == (1 if any("error" in r for r in results) else 0), out.returncode
    assert not any(r.get("internal") for r in results), [r for r in results if r.get("internal")][:3]
    return results


def to_upstream(text):
    """One dtsim placement text (S(0), _S(0,2), R, P(avg)) → an upstream placement object."""
    text = text.strip()
    if text == "R":
        return Replicate()
    if text.startswith("_S("):
        dim, sf = text[3:-1].split(",")
        return _StridedShard(int(dim), split_factor=int(sf))
    if text.startswith("S("):
        return Shard(int(text[2:-1]))
    if text.startswith("P"):
        op = text[2:-1] if "(" in text else "sum"
        return Partial(op)
    raise ValueError(text)


def random_mesh_shape(rng, max_ranks):
    ndim = rng.choice([1, 1, 2, 2, 3])
    while True:
        shape = [rng.choice([1, 2, 2, 3, 4, 4, 5, 8]) for _ in range(ndim)]
        n = 1
        for s in shape:
            n *= s
        if n <= max_ranks:
            return shape


def random_shape(rng, mesh_shape):
    ndim = rng.choice([1, 2, 2, 3])
    biggest = max(mesh_shape)
    # Dims smaller than the mesh, zero, and larger uneven ones.
    return [rng.choice([0, 1, 2, rng.randint(1, biggest), rng.randint(1, 3 * biggest + 3), rng.randint(5, 17)])
            for _ in range(ndim)]


def random_placement(rng, ndim, allow_partial=True, allow_strided=True, partial_op=None):
    kinds = ["S", "S", "S", "R"] + (["P"] if allow_partial else []) + (["_S"] if allow_strided else [])
    kind = rng.choice(kinds)
    dim = rng.randrange(-ndim, ndim) if rng.random() < 0.15 else rng.randrange(ndim)
    if kind == "S":
        return f"S({dim})"
    if kind == "_S":
        return f"_S({dim},{rng.randint(1, 4)})"
    if kind == "R":
        return "R"
    return f"P({partial_op or rng.choice(REDUCE_OPS)})"


@contextlib.contextmanager
def fake_world(world_size):
    """A fake process group of `world_size` ranks (rank 0 is this process), torn down afterwards."""
    dist.init_process_group("fake", rank=0, world_size=world_size, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def by_mesh(cases):
    """Groups cases by mesh shape. Yields (mesh_shape, world, mesh, indices) for each shape, in order, with a fake
    process group of that world size and an upstream DeviceMesh of that shape alive while the caller handles it."""
    from torch.distributed.device_mesh import init_device_mesh
    groups = {}
    for i, c in enumerate(cases):
        groups.setdefault(tuple(c["mesh"]), []).append(i)
    for mesh_shape, indices in sorted(groups.items()):
        world = 1
        for s in mesh_shape:
            world *= s
        with fake_world(world):
            yield mesh_shape, world, init_device_mesh("cpu", mesh_shape), indices


def per_rank(value, rank):
    """An int, or a SymInt holding one int per rank under LocalTensorMode → this rank's int."""
    if isinstance(value, int):
        return value
    node = value.node
    ints = getattr(node, "_local_ints", None)
    if ints is not None:
        return int(ints[rank])
    return int(value)


def new_rng(seed):
    return random.Random(seed)


def normalised(texts, ndim):
    """Placement texts → upstream objects, negative shard dims made non-negative."""
    return [to_upstream(normalised_text(t, ndim)) for t in texts]


def normalised_text(text, ndim):
    """A placement text with a negative shard dim made non-negative: S(-1) on 2 dims → S(1)."""
    p = to_upstream(text)
    if isinstance(p, (Shard, _StridedShard)) and p.dim < 0:
        return text.replace(f"({p.dim}", f"({p.dim + ndim}", 1)
    return text


def placement_text(p):
    """An upstream placement object → dtsim's canonical text."""
    if isinstance(p, _StridedShard):
        return f"_S({p.dim},{p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    raise ValueError(p)


def contiguous_stride(shape):
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def transform_infos(mesh, case, world, graph=None, dtype=torch.float32):
    """Upstream's plan for case["src"] → case["dst"] (lists of placement texts) on `mesh`:
    [(mesh_dim, from, to, [logical shape of rank r for r in range(world)])]. `graph` is upstream's
    use_graph_based_transform argument (None: its default choice; True: its graph-based planner)."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor._redistribute import (_gen_transform_infos_non_cached,
                                                        clear_redistribute_planner_cache)
    ndim = len(case["shape"])
    meta = TensorMeta(torch.Size(case["shape"]), contiguous_stride(case["shape"]), dtype)
    src = DTensorSpec(mesh, tuple(to_upstream(normalised_text(t, ndim)) for t in case["src"]), tensor_meta=meta)
    dst = DTensorSpec(mesh, tuple(to_upstream(normalised_text(t, ndim)) for t in case["dst"]), tensor_meta=meta)
    clear_redistribute_planner_cache()  # the planner caches state across calls
    with LocalTensorMode(world):
        infos = _gen_transform_infos_non_cached(src, dst, graph)
    out = []
    for info in infos:
        a, b = info.src_dst_placements
        logical = [[per_rank(v, r) for v in info.logical_shape] for r in range(world)]
        out.append((info.mesh_dim, placement_text(a), placement_text(b), logical))
    return out


def answer_per_mesh(cases, answer):
    """answer(mesh, world, case) for each (index, case) of `cases`, one fake process group and DeviceMesh per mesh
    shape (by_mesh); returns {index: answer}."""
    answers = {}
    for _, world, mesh, positions in by_mesh([c for _, c in cases]):
        for k in positions:
            index, case = cases[k]
            answers[index] = answer(mesh, world, case)
    return answers


def shards_of(full, mesh_shape, placements, partial_dims=(), dtype=None):
    """Every rank's shard of the plain tensor `full` as upstream lays it out (its own layout function, Partial mesh
    dims read as Replicate), each contiguous with storage of its own (in-place ops may write it); with `partial_dims`
    scaled by prod(1 + coordinate[m]) over them (dtsim's arange construction of a Partial source), cast to `dtype`.
    Returns {rank: tensor}; call with torch dispatch disabled when inside LocalTensorMode."""
    import math
    import torch
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    shape = list(full.shape)
    shards = {}
    for r in range(math.prod(mesh_shape)):
        coordinate = [r // math.prod(mesh_shape[m + 1:]) % mesh_shape[m] for m in range(len(mesh_shape))]
        local_shape, offset = _compute_local_shape_and_global_offset(shape, mesh_shape, coordinate, placements)
        t = full
        for d, (o, n) in enumerate(zip(offset, local_shape)):
            t = t.narrow(d, min(o, shape[d]), n)
        if partial_dims:
            t = (t * math.prod(1 + coordinate[m] for m in partial_dims)).to(dtype or full.dtype)
        shards[r] = t.clone(memory_format=torch.contiguous_format)
    return shards
