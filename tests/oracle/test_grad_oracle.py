"""Oracle test: gradients of small compositions on dtsim's op layer equal upstream PyTorch DTensor autograd under
LocalTensorMode.

Per case both sides build the leaves (DTensors with Replicate/Shard placements on a 1-D or 2-D mesh), run one
composition forward, call loss.backward(), and the test compares:
  1. refusal: both answer (or, where upstream raises, dtsim raises too or its answer equals the unsharded one);
  2. the placements of the forward outputs: the main intermediate ("hidden": gelu(...), the logits, layer_norm's
     output, the mlp's output) and the loss;
  3. the loss value;
  4. for every leaf that requires grad: the gradient's placements, its global shape and its gathered values.
dtsim's values are also checked against plain torch on the global tensors (the unsharded computation) in every case.

Compositions (the C++ side is tests/oracle/grad_driver.cc, which documents the case format):
  linear_gelu_sum  loss = gelu(x @ w.t() + b).sum()       x [B, in] or [B, S, in], w [out, in], b [out]
  mm_sum           loss = (x @ w).sum()                   x [B, K], w [K, N]
  softmax_nll      loss = nll_loss(log_softmax(x @ w, -1), target)    target = arange(B) mod C, replicated
  layernorm_sum    loss = layer_norm(x, [d], w, b).sum()   x [B, d] or [B, S, d], w [d], b [d]
  mlp              loss = (relu(x @ w1) @ w2).sum()        x [B, K], w1 [K, H], w2 [H, N]
Leaf k (0-based, in the case's order) holds ((arange(numel) + 3k) mod 7 - 3) * 0.25 in float32; x requires grad in
some cases and not in others, every weight and bias always does.

Upstream runs in DTSIM_GRAD_ORACLE_JOBS worker processes (default 2), each handling its share of the cases grouped by
mesh shape, one fake process group per mesh shape. dtsim runs once: DTSIM_GRAD_DRIVER (the dtsim_grad_driver
executable; ctest sets it) reads all cases as JSON lines. DTSIM_GRAD_ORACLE_CASES sets the number of cases.

Standalone, to iterate: python tests/oracle/test_grad_oracle.py --cases 60 --show
(finds build/tests/dtsim_grad_driver by itself; --comp keeps one composition; --all runs the cases the default set
leaves out too).
"""
import argparse
import collections
import concurrent.futures
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import upstream  # noqa: E402

MESHES = [[2], [4], [2, 2], [2, 4]]
CASES = int(os.environ.get("DTSIM_GRAD_ORACLE_CASES", "120"))
SEED = 20250117

# VALUE TOLERANCE (float32). The leaves are multiples of 0.25 in [-0.75, 0.75], so every matmul here (at most 12
# products per output, each a multiple of 1/16) is exact in float32 in any order. What can differ between dtsim,
# upstream and the unsharded computation is (a) the order of reductions: a sum split over ranks and finished by an
# all_reduce / a Partial, layer_norm's mean/var and its backward's row sums, log_softmax's logsumexp, the loss sum;
# and (b) elementwise transcendental kernels (erf in gelu, exp/log) run on local shards of other lengths, where
# ATen's vectorized body and scalar tail may round the same input differently by an ulp or two. A float32 sum of n
# terms in another order differs by at most about n * eps * sum|terms| (eps = 2^-23 ~ 1.2e-7); the largest reduction
# here has B * S * out <= 8 * 3 * 12 = 288 terms of comparable size, so a few 1e-5 relative to the largest magnitude
# in the compared tensor bounds it; measured on the default set: at most 2.3e-7 relative (dtsim vs upstream and vs
# the unsharded computation), 103 of the 117 answered cases bit-identical to upstream. Hence: |got - want| <=
# RTOL * max(1, max|want|) elementwise, with RTOL = 1e-4, 10x above the bound's typical value and far below what any
# wrong placement or missing/doubled reduction gives (errors of order 1, e.g. a factor of the mesh size).
RTOL = 1e-4

# Cases the default set (and the other seeds tried) leave out, each with the dtsim problem it shows:
# (comp, mesh, ((leaf, shape, placements), ...)) → reason. `--all` runs them anyway.
# matmul of a 3-d input sharded on its middle dim views it as a 2-d _StridedShard ([B, S, in] -> [B*S, in]); mm then
# chooses among candidates where steps from or to a _StridedShard cost 0 (dtsim prices them as upstream does inside op
# propagation, src/ops/sharding_prop.cc), but where several candidates tie, upstream's order of the placeholder
# fillings (a set of the inputs' shard kinds) and its handling of the shard-order flag of strided specs can pick
# another one. Values equal the unsharded gradients either way; the placements of some grads differ.
STRIDED_CHOICE = ("dtsim breaks a tie among mm strategies for a _StridedShard input differently from upstream "
                  "(values agree, grad placements differ)")
KNOWN_PROBLEMS = {
    # --seed 0 --cases 300: grad w [P(sum)] vs upstream [S(0)].
    ("linear_gelu_sum", (2,), (("x", (4, 2, 6), "S(1)"), ("w", (7, 6), "S(0)"), ("b", (7,), "S(0)"))):
        STRIDED_CHOICE,
    # --seed 1 --cases 300: grad w [S(0), P(sum)] vs upstream [S(0), S(0)].
    ("linear_gelu_sum", (2, 2), (("x", (8, 2, 4), "S(1),S(1)"), ("w", (10, 4), "S(0),S(1)"),
                                 ("b", (10,), "S(0),S(0)"))): STRIDED_CHOICE,
    # --seed 2 --cases 300.
    ("linear_gelu_sum", (2, 2), (("x", (6, 3, 10), "S(1),S(2)"), ("w", (7, 10), "S(1),S(1)"),
                                 ("b", (7,), "R,S(0)"))): STRIDED_CHOICE,
    ("linear_gelu_sum", (2, 2), (("x", (6, 2, 4), "S(1),S(2)"), ("w", (8, 4), "S(1),S(1)"), ("b", (8,), "R,R"))):
        STRIDED_CHOICE,
    ("linear_gelu_sum", (2,), (("x", (6, 2, 9), "S(1)"), ("w", (5, 9), "S(1)"), ("b", (5,), "S(0)"))):
        STRIDED_CHOICE,
}

# A regression that needs two cases in one driver process: dtsim's sharding-decision cache (src/ops/dtensor_tensor.cc)
# once keyed on op, dtypes, global sizes/strides and placements but not on the mesh, so a decision made on mesh [2]
# was reused on mesh [4]: nll_loss_forward on logits [6, 10] S(0) is allowed on mesh [2] (even); the second case
# (mesh [4]: batch 6 splits 2,2,2,0) then skipped the uneven-batch refusal upstream makes ("The intermediate results
# of nll_loss cannot be evenly sharded") and the loss came out NaN. The key now holds the mesh's sizes;
# test_sharding_cache_is_per_mesh keeps the cache across the two cases.
CROSS_CASE_PROBLEMS = [
    [{"comp": "softmax_nll", "mesh": [2], "leaves": [
        {"name": "x", "shape": [6, 4], "placements": "S(0)", "requires_grad": True},
        {"name": "w", "shape": [4, 10], "placements": "R", "requires_grad": True}]},
     {"comp": "softmax_nll", "mesh": [4], "leaves": [
         {"name": "x", "shape": [6, 8], "placements": "S(0)", "requires_grad": True},
         {"name": "w", "shape": [8, 10], "placements": "S(0)", "requires_grad": True}]}],
]


# ---------------------------------------------------------------------------------------------------------------------
# Case generation
# ---------------------------------------------------------------------------------------------------------------------

def rand_placements(rng, mesh, ndim):
    """One placement per mesh dim: Replicate or Shard of one of the tensor's dims."""
    return ",".join("R" if rng.random() < 0.35 else f"S({rng.randrange(ndim)})" for _ in mesh)


def size(rng, lo, hi):
    return rng.randint(lo, hi)


def leaf(rng, mesh, name, shape, requires_grad=True):
    return {"name": name, "shape": list(shape), "placements": rand_placements(rng, mesh, len(shape)),
            "requires_grad": requires_grad}


def g_linear_gelu_sum(rng, mesh):
    b, i, o = size(rng, 4, 8), size(rng, 4, 12), size(rng, 4, 12)
    xshape = [b, i] if rng.random() < 0.75 else [b, size(rng, 2, 3), i]
    return [leaf(rng, mesh, "x", xshape, rng.random() < 0.5), leaf(rng, mesh, "w", [o, i]),
            leaf(rng, mesh, "b", [o])]


def g_mm_sum(rng, mesh):
    b, k, n = size(rng, 4, 8), size(rng, 4, 12), size(rng, 4, 12)
    return [leaf(rng, mesh, "x", [b, k], rng.random() < 0.6), leaf(rng, mesh, "w", [k, n])]


def g_softmax_nll(rng, mesh):
    b, k, c = size(rng, 4, 8), size(rng, 4, 12), size(rng, 4, 12)
    return [leaf(rng, mesh, "x", [b, k], rng.random() < 0.6), leaf(rng, mesh, "w", [k, c])]


def g_layernorm_sum(rng, mesh):
    b, d = size(rng, 4, 8), size(rng, 4, 12)
    xshape = [b, d] if rng.random() < 0.7 else [b, size(rng, 2, 3), d]
    return [leaf(rng, mesh, "x", xshape, rng.random() < 0.7), leaf(rng, mesh, "w", [d]), leaf(rng, mesh, "b", [d])]


def g_mlp(rng, mesh):
    b, k, h, n = size(rng, 4, 8), size(rng, 4, 12), size(rng, 4, 12), size(rng, 4, 12)
    return [leaf(rng, mesh, "x", [b, k], rng.random() < 0.6), leaf(rng, mesh, "w1", [k, h]),
            leaf(rng, mesh, "w2", [h, n])]


COMPOSITIONS = {"linear_gelu_sum": g_linear_gelu_sum, "mm_sum": g_mm_sum, "softmax_nll": g_softmax_nll,
                "layernorm_sum": g_layernorm_sum, "mlp": g_mlp}


def case_key(case):
    return (case["comp"], tuple(case["mesh"]),
            tuple((l["name"], tuple(l["shape"]), l["placements"]) for l in case["leaves"]))


def generate(count, seed=SEED, comps=None, include_known=False):
    """`count` cases spread round-robin over the compositions (and meshes), seeded."""
    rng = upstream.new_rng(seed)
    names = comps or list(COMPOSITIONS)
    cases = []
    i = 0
    while len(cases) < count:
        comp = names[i % len(names)]
        mesh = MESHES[(i // len(names)) % len(MESHES)]
        i += 1
        case = {"comp": comp, "mesh": mesh, "leaves": COMPOSITIONS[comp](rng, mesh)}
        if not include_known and case_key(case) in KNOWN_PROBLEMS:
            continue
        cases.append(case)
    return cases


# ---------------------------------------------------------------------------------------------------------------------
# The compositions (torch functions: run on upstream DTensors and on plain tensors alike)
# ---------------------------------------------------------------------------------------------------------------------

def leaf_values(k, shape):
    numel = math.prod(shape)
    return (((torch.arange(numel, dtype=torch.int64) + 3 * k) % 7 - 3).to(torch.float32) * 0.25).reshape(shape)


def forward(comp, t, make_target):
    """(hidden, loss) of composition `comp` on the leaves `t` (name → tensor)."""
    if comp == "linear_gelu_sum":
        hidden = torch.nn.functional.gelu(torch.matmul(t["x"], t["w"].t()) + t["b"])
        return hidden, hidden.sum()
    if comp == "mm_sum":
        hidden = torch.matmul(t["x"], t["w"])
        return hidden, hidden.sum()
    if comp == "softmax_nll":
        hidden = torch.matmul(t["x"], t["w"])
        batch, classes = hidden.shape
        target = make_target(torch.arange(batch, dtype=torch.int64) % classes)
        return hidden, torch.nn.functional.nll_loss(torch.log_softmax(hidden, -1), target)
    if comp == "layernorm_sum":
        hidden = torch.nn.functional.layer_norm(t["x"], [t["x"].shape[-1]], t["w"], t["b"])
        return hidden, hidden.sum()
    if comp == "mlp":
        hidden = torch.matmul(torch.relu(torch.matmul(t["x"], t["w1"])), t["w2"])
        return hidden, hidden.sum()
    raise ValueError(comp)


def reference(case):
    """The unsharded computation with plain torch: {"loss", "grads": {name: {"shape", "values"}}} or {"error"}."""
    try:
        t = {}
        for k, l in enumerate(case["leaves"]):
            t[l["name"]] = leaf_values(k, l["shape"]).requires_grad_(l["requires_grad"])
        _, loss = forward(case["comp"], t, lambda v: v)
        loss.backward()
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e)}
    grads = {}
    for l in case["leaves"]:
        g = t[l["name"]].grad
        if l["requires_grad"]:
            grads[l["name"]] = None if g is None else {"shape": list(g.shape),
                                                       "values": g.double().flatten().tolist()}
    return {"loss": float(loss.detach()), "grads": grads}


# ---------------------------------------------------------------------------------------------------------------------
# Upstream
# ---------------------------------------------------------------------------------------------------------------------

def error_text(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def canonical(placements):
    return "[" + ", ".join(upstream.placement_text(p) for p in placements) + "]"


def gathered(dt):
    """A DTensor → its global value as a plain tensor (call inside LocalTensorMode)."""
    full = dt.full_tensor()
    return full._local_tensors[0].clone() if hasattr(full, "_local_tensors") else full.clone()


def make_leaf(mesh, mesh_shape, k, spec):
    """Leaf k as an upstream DTensor (call inside LocalTensorMode): what distribute_tensor gives (every rank's shard
    of the same global values), built from per-rank shards cut with upstream's own layout function and wrapped with
    DTensor.from_local, which costs a fraction of distribute_tensor's scatter under LocalTensorMode."""
    from torch.distributed._local_tensor import LocalTensor
    from torch.distributed.tensor import DTensor
    shape = spec["shape"]
    placements = upstream.normalised(spec["placements"].split(","), len(shape))
    with torch._C._DisableTorchDispatch():  # plain tensors even inside LocalTensorMode
        full = leaf_values(k, shape)
        local = LocalTensor(upstream.shards_of(full, mesh_shape, placements))
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=full.shape, stride=full.stride())


def upstream_answer(mesh, world, case):
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import Replicate, distribute_tensor
    try:
        with LocalTensorMode(world):
            t = {}
            for k, l in enumerate(case["leaves"]):
                t[l["name"]] = make_leaf(mesh, case["mesh"], k, l).requires_grad_(l["requires_grad"])
            hidden, loss = forward(case["comp"], t,
                                   lambda v: distribute_tensor(v, mesh, [Replicate()] * len(case["mesh"])))
            answer = {"hidden_placements": canonical(hidden.placements),
                      "output_placements": canonical(loss.placements), "loss": float(gathered(loss))}
            loss.backward()
            grads = {}
            for l in case["leaves"]:
                if not l["requires_grad"]:
                    continue
                g = t[l["name"]].grad
                if g is None:
                    grads[l["name"]] = None
                    continue
                full = gathered(g)
                grads[l["name"]] = {"placements": canonical(g.placements), "shape": list(full.shape),
                                    "values": full.double().flatten().tolist()}
            answer["grads"] = grads
            return answer
    except Exception as e:  # noqa: BLE001  judged by the global tensors
        return {"error": error_text(e)}


def upstream_worker(cases):
    """Upstream's answer for a list of (index, case), in this process: one fake process group per mesh shape."""
    import logging
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    return upstream.answer_per_mesh(cases, upstream_answer)


def upstream_answers(cases, jobs=None):
    jobs = jobs or int(os.environ.get("DTSIM_GRAD_ORACLE_JOBS", "2"))
    indexed = list(enumerate(cases))
    if jobs <= 1:
        answers = upstream_worker(indexed)
    else:
        answers = {}
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            for part in pool.map(upstream_worker, [indexed[j::jobs] for j in range(jobs)]):
                answers.update(part)
    return [answers[i] for i in range(len(cases))]


# ---------------------------------------------------------------------------------------------------------------------
# dtsim
# ---------------------------------------------------------------------------------------------------------------------

def driver_path():
    path = os.environ.get("DTSIM_GRAD_DRIVER")
    if path:
        return path
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "tests",
                           "dtsim_grad_driver")
    if os.path.exists(default):
        return os.path.abspath(default)
    raise RuntimeError("DTSIM_GRAD_DRIVER is not set and build/tests/dtsim_grad_driver does not exist")


def dtsim_answers(cases, shared_cache=False):
    """The driver's answers; each case starts with an empty sharding cache unless `shared_cache`."""
    text = "".join(json.dumps(c) + "\n" for c in cases)
    out = subprocess.run([driver_path()] + (["--shared-cache"] if shared_cache else []), input=text,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert len(lines) == len(cases), (len(lines), len(cases), out.stderr[-2000:])
    return [json.loads(line) for line in lines]


# ---------------------------------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------------------------------

def close(got, want):
    """Elementwise |got - want| <= RTOL * max(1, max|want|) (see VALUE TOLERANCE); the largest difference if not.
    Non-finite values (the driver's JSON writes them as null) equal only themselves (NaN equals NaN)."""
    if len(got) != len(want):
        return f"{len(got)} values, expected {len(want)}"
    got = [math.nan if v is None else v for v in got]
    want = [math.nan if v is None else v for v in want]
    for j, (g, w) in enumerate(zip(got, want)):
        if not (math.isfinite(g) and math.isfinite(w)) and not (g == w or (math.isnan(g) and math.isnan(w))):
            return f"non-finite at flat index {j}: {g} vs {w}"
    pairs = [(g, w) for g, w in zip(got, want) if math.isfinite(w)]
    got, want = [g for g, _ in pairs], [w for _, w in pairs]
    scale = max([1.0] + [abs(v) for v in want])
    worst = max([0.0] + [abs(g - w) for g, w in zip(got, want)])
    if worst > RTOL * scale:
        i = max(range(len(want)), key=lambda j: abs(got[j] - want[j]))
        return f"differs by {worst:.3g} (scale {scale:.3g}) first worst at flat index {i}: {got[i]} vs {want[i]}"
    return None


def compare_values(got, want, what):
    """Loss and gradient values (and grad shapes) of `got` against `want` (upstream's or the reference answer)."""
    problems = []
    why = close([got["loss"]], [want["loss"]])
    if why:
        problems.append(f"{what} loss: {why}")
    for name, w in want["grads"].items():
        g = got["grads"].get(name, "absent")
        if w is None or g is None or g == "absent":
            if not (w is None and g is None):
                problems.append(f"{what} grad {name}: {'none' if g is None else g} vs expected "
                                f"{'none' if w is None else 'a gradient'}")
            continue
        if g["shape"] != w["shape"]:
            problems.append(f"{what} grad {name}: shape {g['shape']} vs {w['shape']}")
            continue
        why = close(g["values"], w["values"])
        if why:
            problems.append(f"{what} grad {name}: {why}")
    extra = set(got["grads"]) - set(want["grads"])
    if extra:
        problems.append(f"{what}: grads for leaves that do not require grad: {sorted(extra)}")
    return problems


def compare(case, want, got, ref):
    """Problems of dtsim's answer `got` against upstream's `want` and the unsharded reference `ref`."""
    if "error" in want:
        # Upstream raises: dtsim may refuse too, else its answer must be the unsharded one.
        if "error" in got:
            return []
        if "error" in ref:
            return [f"refusal: upstream and plain torch raise ({want['error']}), dtsim answers"]
        return compare_values(got, ref, "vs unsharded (upstream raised)")
    if "error" in got:
        return [f"refusal: dtsim raises ({got['error'][:300]}), upstream answers"]
    problems = []
    for key in ("hidden_placements", "output_placements"):
        if got[key] != want[key]:
            problems.append(f"{key}: {got[key]} vs upstream {want[key]}")
    for name, w in want["grads"].items():
        g = got["grads"].get(name)
        if w is not None and g is not None and g["placements"] != w["placements"]:
            problems.append(f"grad {name} placements: {g['placements']} vs upstream {w['placements']}")
    problems += compare_values(got, want, "vs upstream")
    if "error" not in ref:
        problems += compare_values(got, ref, "vs unsharded")
    return problems


def run(cases, jobs=None, shared_cache=False):
    """(upstream answers, dtsim answers, references, mismatches [(index, problems)], upstream refusals, timings)."""
    timings = {}
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # dtsim runs while upstream's workers do
        dtsim_future = pool.submit(dtsim_answers, cases, shared_cache)
        want = upstream_answers(cases, jobs)
        timings["upstream"] = time.time() - start
        got = dtsim_future.result()
    refs = [reference(c) for c in cases]
    timings["total"] = time.time() - start
    mismatches = []
    for i, (c, w, g, r) in enumerate(zip(cases, want, got, refs)):
        problems = compare(c, w, g, r)
        if problems:
            mismatches.append((i, problems))
    refused = [(i, w["error"], "dtsim raises too" if "error" in got[i] else "dtsim answers")
               for i, w in enumerate(want) if "error" in w]
    # For the record (not failures): upstream's own values against the unsharded computation.
    timings["upstream_vs_unsharded"] = [(i, compare_values(w, r, "upstream vs unsharded"))
                                        for i, (w, r) in enumerate(zip(want, refs))
                                        if "error" not in w and "error" not in r and compare_values(w, r, "")]
    return want, got, refs, mismatches, refused, timings


def short(case):
    leaves = " ".join(f"{l['name']}{l['shape']}:[{l['placements']}]{'' if l['requires_grad'] else '(no grad)'}"
                      for l in case["leaves"])
    return f"{case['comp']} mesh={case['mesh']} {leaves}"


def test_grads_match_upstream():
    cases = generate(CASES)
    want, got, refs, mismatches, refused, timings = run(cases)
    by_comp = collections.Counter(c["comp"] for c in cases)
    print(f"\n{len(cases)} cases {dict(by_comp)} in {timings['total']:.1f}s (upstream {timings['upstream']:.1f}s); "
          f"upstream raised on {len(refused)}")
    # Cases where upstream raises are judged by the global tensors (see compare); listed here for the record.
    for i, err, what in refused:
        print(f"  upstream raises ({what}): {short(cases[i])}: {err}")
    for i, problems in timings["upstream_vs_unsharded"]:
        print(f"  upstream differs from the unsharded computation: {short(cases[i])}: {problems}")
    report = "\n".join(f"  #{i} {short(cases[i])}\n    " + "\n    ".join(p) for i, p in mismatches[:10])
    assert not mismatches, f"{len(mismatches)} of {len(cases)} cases differ, first 10:\n{report}"


def test_sharding_cache_is_per_mesh():
    for cases in CROSS_CASE_PROBLEMS:
        want, got, refs, mismatches, _, _ = run(cases, jobs=1, shared_cache=True)
        report = "; ".join(f"{short(cases[i])}: {problems}" for i, problems in mismatches)
        assert not mismatches, report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=CASES)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=2, help="upstream worker processes")
    parser.add_argument("--comp", action="append", help="keep only this composition (repeatable)")
    parser.add_argument("--all", action="store_true", help="include the KNOWN_PROBLEMS cases")
    parser.add_argument("--show", action="store_true", help="print every mismatch in full, and every case's answers")
    parser.add_argument("--shared-cache", action="store_true",
                        help="keep dtsim's sharding cache across cases (see CROSS_CASE_PROBLEMS)")
    args = parser.parse_args()
    cases = generate(args.cases, args.seed, args.comp, include_known=args.all)
    want, got, refs, mismatches, refused, timings = run(cases, args.jobs, args.shared_cache)
    print(f"{len(cases)} cases in {timings['total']:.1f}s (upstream {timings['upstream']:.1f}s); "
          f"upstream raised on {len(refused)}; {len(mismatches)} mismatches")
    if args.show:
        for i, c in enumerate(cases):
            w, g = want[i], got[i]
            print(f"#{i} {short(c)}")
            if "error" in w:
                print(f"   upstream: {w['error']}")
            else:
                print(f"   upstream: hidden {w['hidden_placements']} loss {w['output_placements']} {w['loss']:.6g} "
                      + " ".join(f"{n}:{v['placements'] if v else None}" for n, v in w["grads"].items()))
            if "error" in g:
                print(f"   dtsim:    {g['error'].splitlines()[0][:300]}")
            else:
                print(f"   dtsim:    hidden {g['hidden_placements']} loss {g['output_placements']} {g['loss']:.6g} "
                      + " ".join(f"{n}:{v['placements'] if v else None}" for n, v in g["grads"].items()))
    for i, err, what in refused:
        print(f"upstream raises ({what}): #{i} {short(cases[i])}: {err}")
    for i, problems in timings["upstream_vs_unsharded"]:
        print(f"upstream differs from the unsharded computation: #{i} {short(cases[i])}: {problems}")
    for i, problems in (mismatches if args.show else mismatches[:10]):
        print(f"MISMATCH #{i} {short(cases[i])}")
        print("    case: " + json.dumps(cases[i]))
        for p in problems:
            print("   ", p)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
