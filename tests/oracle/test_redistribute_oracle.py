"""Oracle test: `dtsim redistribute` gives, on every rank, bitwise the local shard upstream PyTorch DTensor gives
under LocalTensorMode — on thousands of random cases: meshes of 1-3 dims up to 16 ranks and some of 64, uneven shapes
including dims smaller than the mesh and 0, every placement kind (S, _S, R, P(sum/avg/min/max/product)), Partial
sources built with from_local, several dtypes — and its greedy plan has upstream's transition sequence.

Upstream builds the source the way the CLI documents: distribute_tensor(arange) for sources without Partial; for
Partial sources each rank's shard of arange (Partial read as Replicate) times prod(1 + coordinate) over the Partial
mesh dims, given to DTensor.from_local. Cases upstream refuses must be refused by dtsim (and vice versa).
Where upstream's result is not its own global tensor (a known upstream bug), dtsim must match the global tensor:
such cases are counted and listed, not silently skipped.
"""
import collections
import math
import os
import time

import torch
from torch.distributed._local_tensor import LocalTensorMode, tensor_map
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import Partial, Replicate

import release_differences
import upstream

NUM_CASES = int(os.environ.get("DTSIM_REDISTRIBUTE_ORACLE_CASES", "5200"))
DTYPES = ["float32"] * 6 + ["float64", "int64", "int32", "bfloat16"]
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
                "bfloat16": torch.bfloat16}


def random_case(rng):
    mesh = upstream.random_mesh_shape(rng, 64 if rng.random() < 0.06 else 16)
    shape = upstream.random_shape(rng, mesh)
    ndim = len(shape)
    dtype = rng.choice(DTYPES)
    ops = ["sum", "min", "max"] if dtype.startswith("int") else ["sum", "avg", "min", "max"]
    if rng.random() < 0.03:
        ops.append("product")
    op = rng.choice(ops)
    strided = rng.random() < 0.15
    src = [upstream.random_placement(rng, ndim, allow_strided=strided, partial_op=op) for _ in mesh]
    if op == "sum" and not dtype.startswith("int") and rng.random() < 0.1:  # sum with avg may be mixed
        src = [("P(avg)" if p.startswith("P") and rng.random() < 0.5 else p) for p in src]
    dst = []
    for p in src:
        r = rng.random()
        if p.startswith("P") and r < 0.3:
            dst.append(p)
        elif r < 0.02:
            dst.append(f"P({op})")
        else:
            dst.append(upstream.random_placement(rng, ndim, allow_partial=False, allow_strided=strided))
    return {"mesh": mesh, "shape": shape, "dtype": dtype, "from": ",".join(src), "to": ",".join(dst),
            "src": src, "dst": dst}


# Upstream's user-facing refusals (DTensor.redistribute, from_local, assert_no_mixed_partial_types, Partial); any
# other exception is upstream failing on a valid input.
REFUSALS = ("redistributing to Partial is for internal use only", "Mixed Partial reduce types",
            "only Shard to Partial(sum) redistribution is supported",  # torch 2.15's wording of the rule above
            "conversion is not supported", "partial type", "Cross device mesh")


def upstream_result(mesh, case, world):
    """Every rank's local shard after upstream's redistribute, or the refusal text."""
    ndim = len(case["shape"])
    src = [upstream.to_upstream(upstream.normalised_text(t, ndim)) for t in case["src"]]
    dst = [upstream.to_upstream(t) for t in case["dst"]]
    dtype = TORCH_DTYPES[case["dtype"]]
    partial_dims = [m for m, p in enumerate(src) if isinstance(p, Partial)]
    try:
        with LocalTensorMode(world):
            numel = math.prod(case["shape"])
            full = torch.arange(numel, dtype=torch.int64).to(dtype).reshape(case["shape"])
            # Every rank holds the same `full`, so splitting locally (src_data_rank=None) gives what a scatter from
            # rank 0 gives; upstream's scatter path asserts on uneven _StridedShard sources.
            if not partial_dims:
                dt = distribute_tensor(full, mesh, src, src_data_rank=None)
            else:
                read = [Replicate() if isinstance(p, Partial) else p for p in src]
                local = distribute_tensor(full, mesh, read, src_data_rank=None).to_local()

                def scale(rank, t):
                    coordinate = [rank // math.prod(case["mesh"][m + 1:]) % case["mesh"][m]
                                  for m in range(len(case["mesh"]))]
                    factor = math.prod(1 + coordinate[m] for m in partial_dims)
                    return (t * factor).to(dtype)

                local = tensor_map(local, scale)
                dt = DTensor.from_local(local, mesh, src, shape=full.shape, stride=full.stride())
            out = dt.redistribute(mesh, dst).to_local()
            shards = out._local_tensors if hasattr(out, "_local_tensors") else {r: out for r in range(world)}
            return {r: shards[r].clone() for r in range(world)}, None
    except (ValueError, RuntimeError, NotImplementedError) as e:
        if any(phrase in str(e) for phrase in REFUSALS):
            return None, f"{type(e).__name__}: {e}"  # a refusal: compared with dtsim's
        return None, f"CRASH {type(e).__name__}: {e}"  # an internal failure (torch._check, size mismatch, ...)
    except Exception as e:  # noqa: BLE001  upstream crashed (AssertionError, IndexError): not a refusal
        return None, f"CRASH {type(e).__name__}: {e}"


def test_redistribute_matches_upstream_bitwise():
    start = time.time()
    rng = upstream.new_rng(5150)
    cases = [random_case(rng) for _ in range(NUM_CASES)]
    results = upstream.run_batch("redistribute", [{k: c[k] for k in ("mesh", "shape", "dtype", "from", "to")}
                                                  for c in cases])
    dtsim_seconds = time.time() - start
    counts = collections.Counter()
    failures, upstream_wrong = [], []
    for mesh_shape, world, mesh, indices in upstream.by_mesh(cases):
        for i in indices:
            case, got = cases[i], results[i]
            if got.get("internal"):
                failures.append(("dtsim internal error", case, got["error"]))
                continue
            shards, refusal = upstream_result(mesh, case, world)
            if refusal is not None and refusal.startswith("CRASH"):
                # Upstream has no answer: the global tensor is the judge (dtsim's verdict).
                if "error" in got or not got["ok"]:
                    failures.append(("upstream crashed and dtsim is not ok", case, refusal, got))
                counts["upstream crashed; dtsim checked against the global tensor"] += 1
                continue
            if refusal is not None or "error" in got:
                if (refusal is None) != ("error" not in got):
                    failures.append(("refusal differs", case, refusal, got.get("error")))
                counts["both refused"] += 1
                continue
            if not got["ok"]:
                failures.append(("dtsim verdict not ok", case, got.get("problem")))
                continue
            want_plan = upstream.transform_infos(mesh, case, world)
            mine_plan = [(s["mesh_dim"], s["from"], s["to"]) for s in got["plan"]]
            if "_S(" not in case["from"] + case["to"] and [w[:3] for w in want_plan] != mine_plan:
                failures.append(("plan differs", case, [w[:3] for w in want_plan], mine_plan))
            same = True
            for rank_json in got["ranks"]:
                want = shards[rank_json["rank"]]
                if list(want.shape) != rank_json["local_shape"] or \
                        want.double().flatten().tolist() != rank_json["values"]:
                    same = False
                    break
            if same:
                counts["bitwise equal"] += 1
            else:
                # dtsim's verdict already checked its values against the global tensor. Its shapes must also be
                # what upstream's own layout function says for the target: then upstream's redistribute is the
                # one that is inconsistent.
                dst = [upstream.to_upstream(upstream.normalised_text(t, len(case["shape"]))) for t in case["dst"]]
                for rank_json in got["ranks"]:
                    shape, _ = _compute_local_shape_and_global_offset(case["shape"], case["mesh"],
                                                                     rank_json["coordinate"], dst)
                    if list(shape) != rank_json["local_shape"]:
                        failures.append(("dtsim shape differs from upstream's layout", case, rank_json))
                upstream_wrong.append(case)
                counts["upstream differs from the global tensor"] += 1
    elapsed = time.time() - start
    print(f"\n{NUM_CASES} cases in {elapsed:.1f}s (dtsim batch {dtsim_seconds:.1f}s): {dict(counts)}")
    if upstream_wrong:
        print("cases where upstream's shards differ (dtsim matches the global tensor):")
        for c in upstream_wrong[:20]:
            print("  ", {k: c[k] for k in ("mesh", "shape", "dtype", "from", "to")})
    print(release_differences.summary("redistribute_oracle"))
    failures = release_differences.unexplained("redistribute_oracle", failures, lambda f: f[1], lambda f: f[0],
                                               full_run="DTSIM_REDISTRIBUTE_ORACLE_CASES" not in os.environ)
    assert not failures, f"{len(failures)} failures, first 5:\n" + "\n".join(map(repr, failures[:5]))
    assert counts["bitwise equal"] >= 0.85 * NUM_CASES, counts
    assert len(upstream_wrong) <= 0.02 * NUM_CASES, upstream_wrong[:5]
