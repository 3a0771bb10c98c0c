"""Oracle test: `dtsim op --batch -` (sharding propagation of one ATen op on DTensor arguments) gives upstream PyTorch
DTensor's answer under LocalTensorMode, on thousands of random cases.

Per case both sides run one ATen op (`mm`, `add.Tensor`, `sum.dim_IntList`, ...) on DTensor arguments with given
placements on a 1-D or 2-D mesh of up to 8 ranks, and the test compares:
  1. refusal: both refuse, or both answer;
  2. the placements of every output;
  3. the set of input redistributions (tensor argument index, from, to) that the selected strategy needed;
  4. the collective counts (all_gather / all_reduce / reduce_scatter / all_to_all, zero counts ignored);
  5. every rank's local shard of every output: shape equal, values close (see VALUE TOLERANCE below).

Inputs (the `dtsim op` contract): tensor argument k (0-based, counting tensor arguments only) holds the global values
(arange(numel) + 3k) mod 7 - 3 in the line's dtype, distributed with its placements (distribute_tensor with
src_data_rank=None, i.e. every rank splits the same global tensor). An argument with Partial placements is built the
way dtsim's arange cases build a Partial source (src/core/arange_case.cc, test_redistribute_oracle.py): each rank holds its
shard of the global values with the Partial mesh dims read as Replicate, times prod(1 + coordinate[m]) over the
Partial mesh dims m, handed to DTensor.from_local. (So the reduction of a Partial argument is NOT the listed global
values but those values times sum/avg/max/min of the factors; both sides build the same thing, which is what matters.)

How upstream's answer is read (all in one Python process per worker, one fake process group per mesh shape):
  * redistributions: torch.distributed.tensor._dispatch.redistribute_local_tensor is wrapped while the op runs; each
    call names (current spec, target spec) of one flat argument, identified by the identity of its local tensor
    (_redistribute's own name of it too, which DTensor.redistribute inside custom handlers such as argmax's reaches).
  * collectives: CommDebugMode does count correctly under LocalTensorMode on torch 2.13 (checked with `--crosscheck`,
    which also counts the functional collectives by wrapping them), but it intercepts every dispatched op and costs
    time, so the test counts by wrapping the functional-collective entry points DTensor calls
    (funcol.all_gather_single/all_gather_tensor/reduce_scatter_single/reduce_scatter_tensor/all_reduce/
    all_to_all_single and shard_dim_alltoall), counting only the outermost call of a nest.
  * outputs: the DTensor results (tuples/lists flattened in order; an output the op did not compute stays in its
    place as None, as dtsim's null), their placements and every rank's local tensor (LocalTensor._local_tensors).

Families of ops are switched on by name (FAMILIES below); DTSIM_OP_FAMILIES (comma list, or "all") picks the ones the
test runs, default DEFAULT_FAMILIES (the ones dtsim passes today). DTSIM_OP_ORACLE_CASES is the number of cases per
family (default FAMILY_CASES, 750 for a family it does not list), DTSIM_OP_ORACLE_JOBS the number of upstream
worker processes (default 2).

Refusals: upstream's exception is classified. "invalid": the op fails on the global tensors too; "refusal": a DTensor
user-facing refusal (REFUSALS) — dtsim must refuse both. "crash": upstream fails on a valid op (amax over empty
shards, expand of a sharded size-1 dim, ...) — then dtsim may refuse, or answer with shards whose reassembled global
tensor equals the op on the global tensors ("judged by the global op"). "timeout": upstream hung (CASE_TIMEOUT).

Standalone, to iterate: python tests/oracle/test_op_oracle.py --family matrix --cases 50 --show
(uses DTSIM_BIN or build/dtsim; without one, or with --upstream-only, it prints upstream's expected answers instead).
--jobs N upstream workers, --op NAME only that op, --dump FILE / --answers FILE save and reuse upstream's answers
(cases not in the file are asked), --crosscheck compares the collective counts with CommDebugMode's.
"""
import argparse
import collections
import concurrent.futures
import contextlib
import json
import math
import multiprocessing
import os
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import release_differences  # noqa: E402
import upstream  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------------

MESHES = [[2], [4], [8], [3], [2, 2], [2, 4], [4, 2], [2, 3]]
# Families the ctest entry runs when DTSIM_OP_FAMILIES is not set: those dtsim passes today. Add a family here when
# its C++ lands and passes.
DEFAULT_FAMILIES = ["matrix", "pointwise", "math", "view", "tensor_list", "pointwise2", "backward", "tensor",
                    "reductions2", "argminmax"]
# Cases per family: DTSIM_OP_ORACLE_CASES for every family when set, else FAMILY_CASES (default 750) — the newer
# families run fewer so the ctest entry stays within a few minutes on 2 cores.
CASES_PER_FAMILY = int(os.environ["DTSIM_OP_ORACLE_CASES"]) if os.environ.get("DTSIM_OP_ORACLE_CASES") else None
FAMILY_CASES = {"backward": 300, "tensor": 300, "reductions2": 300, "pointwise2": 300, "argminmax": 100}
# Ops whose output values are unspecified (uninitialised memory): shapes, placements, redistributions and collectives
# are compared, values are not.
NO_VALUES_OPS = {"empty_like", "new_empty", "new_empty_strided", "empty_strided"}
# Keyword-only schema arguments (add's alpha, var's correction/keepdim, addmm's beta/alpha): upstream gets them as
# keywords; dtsim's batch format takes every argument positionally in schema order, so wire() places them there
# (arguments between the last given one and a keyword take their schema defaults).
# Seconds one upstream op call may take (a few ms is usual): upstream has hung on some empty reshapes; such a case
# has no oracle and is counted as "upstream timed out", not compared.
CASE_TIMEOUT = 20
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# VALUE TOLERANCE. The inputs are small integers (-3..3, times Partial factors up to 8), so matmuls and sums are exact
# in float32 whatever the order, and both sides run the same LibTorch kernels on the same local shards when they pick
# the same strategy. What can differ is the order of a reduction across ranks (an all_reduce summing ranks in another
# order, a local mean/var/softmax of a shard followed by a cross-rank combine) and the rounding of intermediate
# results in the output dtype. A sum of n terms in another order differs by at most about n * eps * sum|x|; with at
# most a few hundred terms per output element here, float32 (eps 2^-23) stays under 1e-5 relative to the largest
# output magnitude, hence rtol = atol/scale = 1e-5 with scale = max(1, max|expected|). bfloat16 (eps 2^-7) rounds each
# partial result, so a reordered reduction differs by a few ulps: rtol = atol/scale = 2^-5 (4 ulps). NaN equals NaN
# (rsqrt/pow of negatives); dtsim's JSON writes NaN and +-inf as null, so upstream's non-finite values read as null
# too. Integer outputs (max.dim indices) must be equal.
TOLERANCE = {"float32": 1e-5, "bfloat16": 2.0 ** -5}

COLLECTIVE_KINDS = {
    # CommDebugMode keys → dtsim kinds (used by --crosscheck).
    "all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter", "all_reduce": "all_reduce",
    "all_to_all_single": "all_to_all", "shard_dim_alltoall": "all_to_all",
}


# ---------------------------------------------------------------------------------------------------------------------
# Case generation
# ---------------------------------------------------------------------------------------------------------------------

def rand_dim(rng, mesh):
    """A dim size: mostly small and uneven against the mesh, sometimes 1, rarely 0."""
    r = rng.random()
    if r < 0.04:
        return 0
    if r < 0.12:
        return 1
    if r < 0.4:
        return rng.randint(1, max(mesh) + 1)
    if r < 0.7:
        return max(mesh) * rng.randint(1, 3)  # even on the largest mesh dim
    return rng.randint(2, 13)


def rand_shape(rng, mesh, ndim):
    return [rand_dim(rng, mesh) for _ in range(ndim)]


def rand_placement(rng, ndim):
    r = rng.random()
    if r < 0.1:
        return "P(sum)"
    if r < 0.12:
        return rng.choice(["P(max)", "P(avg)", "P(min)"])
    if r < 0.42 or ndim == 0:
        return "R"
    d = rng.randrange(ndim)
    if rng.random() < 0.05:
        d -= ndim  # a negative dim: dtsim normalises it
    return f"S({d})"


def rand_placements(rng, mesh, ndim, partial=True):
    out = []
    for _ in mesh:
        p = rand_placement(rng, ndim)
        while not partial and p.startswith("P"):
            p = rand_placement(rng, ndim)
        out.append(p)
    return ",".join(out)


def T(rng, mesh, shape, partial=True):
    """A tensor argument."""
    return {"shape": list(shape), "placements": rand_placements(rng, mesh, len(shape), partial)}


def rand_dims(rng, ndim):
    """A non-empty list of distinct dims (some negative)."""
    k = rng.randint(1, ndim)
    dims = rng.sample(range(ndim), k)
    return [d - ndim if rng.random() < 0.1 else d for d in dims]


def broadcast_partner(rng, shape):
    """A shape that broadcasts against `shape`: a suffix of it, with some dims set to 1."""
    k = rng.randint(0, len(shape))
    sub = list(shape[len(shape) - k:])
    return [1 if rng.random() < 0.3 else s for s in sub]


# Each generator: (rng, mesh) → (op name, args, kwargs).

def g_mm(rng, mesh):
    m, k, n = (rand_dim(rng, mesh) for _ in range(3))
    return "mm", [T(rng, mesh, [m, k]), T(rng, mesh, [k, n])], {}


def g_addmm(rng, mesh):
    m, k, n = (rand_dim(rng, mesh) for _ in range(3))
    bias = rng.choice([[n], [m, n], [1, n]])
    kw = {"beta": rng.choice([1, 0.5]), "alpha": rng.choice([1, 2])} if rng.random() < 0.3 else {}
    return "addmm", [T(rng, mesh, bias), T(rng, mesh, [m, k]), T(rng, mesh, [k, n])], kw


def g_bmm(rng, mesh):
    b, m, k, n = (rand_dim(rng, mesh) for _ in range(4))
    return "bmm", [T(rng, mesh, [b, m, k]), T(rng, mesh, [b, k, n])], {}


def g_baddbmm(rng, mesh):
    b, m, k, n = (rand_dim(rng, mesh) for _ in range(4))
    bias = rng.choice([[b, m, n], [b, m, n], [n], [1, m, n]])
    return "baddbmm", [T(rng, mesh, bias), T(rng, mesh, [b, m, k]), T(rng, mesh, [b, k, n])], {}


def binary(op, alpha=False, inplace=False):
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rng.randint(1, 3))
        other = broadcast_partner(rng, shape)
        kw = {"alpha": rng.choice([2, -1, 0.5])} if alpha and rng.random() < 0.3 else {}
        a, b = [shape, other] if inplace or rng.random() < 0.6 else [other, shape]
        return op, [T(rng, mesh, a), T(rng, mesh, b)], kw
    return gen


def unary(op, *extra):
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rng.randint(1, 3))
        return op, [T(rng, mesh, shape)] + [rng.choice(e) if isinstance(e, list) else e for e in extra], {}
    return gen


def g_clamp(rng, mesh):
    shape = rand_shape(rng, mesh, rng.randint(1, 3))
    lo, hi = rng.choice([(-1.5, 2.0), (None, 1.0), (-2, None), (0, 0)])
    return "clamp", [T(rng, mesh, shape), lo, hi], {}


def reduction(op, with_dims=True, keepdim=True, single_dim=False):
    def gen(rng, mesh):
        ndim = rng.randint(1, 3)
        args = [T(rng, mesh, rand_shape(rng, mesh, ndim))]
        if single_dim:
            args.append(rng.randrange(-ndim, ndim))
        elif with_dims:
            args.append(rand_dims(rng, ndim))
        if keepdim:
            args.append(rng.random() < 0.4)
        return op, args, {}
    return gen


def g_var(rng, mesh):
    ndim = rng.randint(1, 3)
    args = [T(rng, mesh, rand_shape(rng, mesh, ndim)), rand_dims(rng, ndim)]
    kw = {"correction": rng.choice([0, 1]), "keepdim": rng.random() < 0.4} if rng.random() < 0.5 else {}
    return "var.correction", args, kw


def softmax(op):
    def gen(rng, mesh):
        ndim = rng.randint(1, 3)
        return op, [T(rng, mesh, rand_shape(rng, mesh, ndim)), rng.randrange(-ndim, ndim), False], {}
    return gen


def g_layer_norm(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    normalized = shape[ndim - rng.randint(1, min(2, ndim)):]
    weight = T(rng, mesh, normalized) if rng.random() < 0.6 else None
    bias = T(rng, mesh, normalized) if rng.random() < 0.6 else None
    return "native_layer_norm", [T(rng, mesh, shape), normalized, weight, bias, 1e-5], {}


def factor_pairs(n):
    return [(a, n // a) for a in range(1, n + 1) if n % a == 0]


def new_view_shape(rng, shape):
    """A shape with the same numel: merge two adjacent dims, split one, or flatten; sometimes a -1."""
    shape = list(shape)
    r = rng.random()
    if r < 0.35 and len(shape) >= 2:
        i = rng.randrange(len(shape) - 1)
        out = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
    elif r < 0.75:
        i = rng.randrange(len(shape))
        a, b = rng.choice(factor_pairs(shape[i])) if shape[i] > 0 else (0, rng.randint(1, 3))
        out = shape[:i] + [a, b] + shape[i + 1:]
    elif r < 0.85:
        out = [math.prod(shape)]
    else:
        out = shape + [1]
    if rng.random() < 0.2 and math.prod(out) > 0:
        out[rng.randrange(len(out))] = -1
    return out


def view_like(op):
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rng.randint(1, 3))
        new = new_view_shape(rng, shape)
        if math.prod(shape) == 0:
            new = list(shape)  # upstream's view propagation loops forever on some empty reshapes ([0] → [0, 3])
        return op, [T(rng, mesh, shape), new], {}
    return gen


def g_transpose(rng, mesh):
    ndim = rng.randint(1, 3)
    return "transpose.int", [T(rng, mesh, rand_shape(rng, mesh, ndim)), rng.randrange(-ndim, ndim),
                             rng.randrange(-ndim, ndim)], {}


def g_t(rng, mesh):
    return "t", [T(rng, mesh, rand_shape(rng, mesh, rng.randint(1, 2)))], {}


def g_permute(rng, mesh):
    ndim = rng.randint(1, 3)
    perm = list(range(ndim))
    rng.shuffle(perm)
    return "permute", [T(rng, mesh, rand_shape(rng, mesh, ndim)), perm], {}


def g_unsqueeze(rng, mesh):
    ndim = rng.randint(1, 3)
    return "unsqueeze", [T(rng, mesh, rand_shape(rng, mesh, ndim)), rng.randrange(-ndim - 1, ndim + 1)], {}


def g_squeeze(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    if rng.random() < 0.7:
        shape[d] = 1
    return "squeeze.dim", [T(rng, mesh, shape), d], {}


def g_expand(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = [1 if rng.random() < 0.5 else s for s in rand_shape(rng, mesh, ndim)]
    sizes = [rand_dim(rng, mesh) if s == 1 and rng.random() < 0.7 else (-1 if rng.random() < 0.3 else s)
             for s in shape]
    if rng.random() < 0.3:
        sizes = [rng.randint(1, 4)] + sizes
    return "expand", [T(rng, mesh, shape), sizes], {}


def g_select(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    shape[d] = max(shape[d], 1)
    return "select.int", [T(rng, mesh, shape), d, rng.randrange(-shape[d], shape[d])], {}


def g_slice(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    n = shape[d]
    start = rng.choice([0, None, rng.randint(0, n), -1])
    end = rng.choice([None, n, rng.randint(0, n + 2), -1])
    return "slice.Tensor", [T(rng, mesh, shape), d, start, end, rng.choice([1, 1, 2])], {}


def g_split(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    return "split.Tensor", [T(rng, mesh, shape), rng.randint(1, max(1, shape[d])), d], {}


def g_cat(rng, mesh):
    ndim = rng.randint(1, 3)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    tensors = []
    for _ in range(rng.randint(2, 3)):
        s = list(shape)
        s[d] = rand_dim(rng, mesh)
        tensors.append(T(rng, mesh, s))
    return "cat", [tensors, d], {}


# --- Transformer forward/backward ops (families backward, tensor, reductions2, pointwise2) ---------------------------
# Not expressible in the batch format (one dtype for every tensor argument, ScalarType arguments only as null), so
# not generated: _softmax_backward_data / _log_softmax_backward_data (input_dtype is a required ScalarType),
# nll_loss_forward / nll_loss_backward, embedding_dense_backward and index_select (int64 targets/indices next to
# float tensors), masked_fill and where.self (bool masks), _to_copy/cumsum/prod with a dtype (ScalarType).
# _fused_rms_norm_backward has no CPU kernel (upstream cannot run it under LocalTensorMode on CPU).

def rand_ndim(rng, lo=1, hi=3):
    return rng.randint(lo, hi)


def same_shape(op, *extra, n=2, kw=None):
    """`n` tensor arguments of one shape (gradient and saved tensor of a pointwise backward), then `extra`."""
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rng.randint(0, 3) if rng.random() < 0.1 else rand_ndim(rng))
        args = [T(rng, mesh, shape) for _ in range(n)]
        args += [rng.choice(e) if isinstance(e, list) else e for e in extra]
        return op, args, (kw(rng) if kw else {})
    return gen


def g_gelu_backward(rng, mesh):
    op, args, _ = same_shape("gelu_backward")(rng, mesh)
    r = rng.random()
    return op, args, ({} if r < 0.3 else {"approximate": "none" if r < 0.6 else "tanh"})


def norm_shapes(rng, mesh):
    """(input shape, normalized shape, shape of the saved mean/rstd: outer dims then 1s)."""
    ndim = rand_ndim(rng)
    shape = rand_shape(rng, mesh, ndim)
    k = rng.randint(1, min(2, ndim))
    return shape, shape[ndim - k:], shape[:ndim - k] + [1] * k


def g_layer_norm_backward(rng, mesh):
    shape, normalized, stat = norm_shapes(rng, mesh)
    weight = T(rng, mesh, normalized) if rng.random() < 0.7 else None
    bias = T(rng, mesh, normalized) if rng.random() < 0.6 else None
    mask = [rng.random() < 0.8, weight is not None and rng.random() < 0.8, bias is not None and rng.random() < 0.8]
    return "native_layer_norm_backward", [T(rng, mesh, shape), T(rng, mesh, shape), normalized, T(rng, mesh, stat),
                                          T(rng, mesh, stat), weight, bias, mask], {}


def g_select_backward(rng, mesh):
    ndim = rand_ndim(rng)
    sizes = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    sizes[d] = max(sizes[d], 1)
    grad = sizes[:d] + sizes[d + 1:]
    return "select_backward", [T(rng, mesh, grad), sizes, d, rng.randrange(sizes[d])], {}


def rand_slice(rng, n):
    """(start, end, step) of a slice of a dim of size n, with end clipped as ATen clips it; the sliced length."""
    step = rng.choice([1, 1, 2, 3])
    start = rng.randint(0, n)
    end = rng.randint(start, n)
    return start, end, step, len(range(start, end, step))


def g_slice_backward(rng, mesh):
    ndim = rand_ndim(rng)
    sizes = rand_shape(rng, mesh, ndim)
    d = rng.randrange(ndim)
    start, end, step, length = rand_slice(rng, sizes[d])
    grad = list(sizes)
    grad[d] = length
    return "slice_backward", [T(rng, mesh, grad), sizes, d, start, end, step], {}


def one_tensor(op, *extra, zero_d=0.1):
    """One tensor argument (sometimes 0-d), then `extra` (a list: one of them)."""
    def gen(rng, mesh):
        ndim = 0 if rng.random() < zero_d else rand_ndim(rng)
        args = [T(rng, mesh, rand_shape(rng, mesh, ndim))]
        args += [rng.choice(e) if isinstance(e, list) else e for e in extra]
        return op, args, {}
    return gen


def new_factory(op, fill=False):
    def gen(rng, mesh):
        self_ = T(rng, mesh, rand_shape(rng, mesh, rand_ndim(rng, 0, 2)))
        args = [self_, rand_shape(rng, mesh, rand_ndim(rng, 0, 3))]
        if fill:
            args.append(rng.choice([0, 1.5, -2, 7]))
        return op, args, {}
    return gen


def g_copy_(rng, mesh):
    shape = rand_shape(rng, mesh, rand_ndim(rng))
    src = list(shape) if rng.random() < 0.8 else broadcast_partner(rng, shape)
    return "copy_", [T(rng, mesh, shape), T(rng, mesh, src)], {}


def g_slice_steps(rng, mesh):
    ndim = rand_ndim(rng)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(-ndim, ndim)
    n = shape[d]
    start = rng.choice([None, 0, rng.randint(0, n), -rng.randint(1, n + 2)])
    end = rng.choice([None, n, rng.randint(0, n + 2), -rng.randint(1, n + 2)])
    return "slice.Tensor", [T(rng, mesh, shape), d, start, end, rng.choice([1, 2, 3, 4])], {}


def g_stack(rng, mesh):
    ndim = rng.randint(0, 3)
    shape = rand_shape(rng, mesh, ndim)
    tensors = [T(rng, mesh, shape) for _ in range(rng.randint(1, 3))]
    return "stack", [tensors, rng.randrange(-ndim - 1, ndim + 1)], {}


def g_unbind(rng, mesh):
    ndim = rand_ndim(rng)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(-ndim, ndim)
    shape[d] = min(shape[d], 5)  # an output per index
    return "unbind.int", [T(rng, mesh, shape), d], {}


def g_split_with_sizes(rng, mesh):
    ndim = rand_ndim(rng)
    shape = rand_shape(rng, mesh, ndim)
    d = rng.randrange(-ndim, ndim)
    left, sizes = shape[d], []
    while left > 0 and len(sizes) < 4:
        s = rng.randint(0 if rng.random() < 0.1 else 1, left)
        sizes.append(s)
        left -= s
    if left or not sizes:
        sizes.append(left)
    return "split_with_sizes", [T(rng, mesh, shape), sizes, d], {}


def g_var_std(op):
    def gen(rng, mesh):
        ndim = rand_ndim(rng)
        args = [T(rng, mesh, rand_shape(rng, mesh, ndim)), None if rng.random() < 0.2 else rand_dims(rng, ndim)]
        kw = {}
        if rng.random() < 0.8:
            kw["correction"] = rng.choice([0, 1, 2, 0.5])
        if rng.random() < 0.6:
            kw["keepdim"] = rng.random() < 0.5
        return op, args, kw
    return gen


def g_arg_reduction(op):
    def gen(rng, mesh):
        ndim = rand_ndim(rng)
        dim = None if rng.random() < 0.25 else rng.randrange(-ndim, ndim)
        return op, [T(rng, mesh, rand_shape(rng, mesh, ndim)), dim, rng.random() < 0.4], {}
    return gen


def g_any_all_dims(rng, mesh):
    ndim = rand_ndim(rng)
    return "any.dims", [T(rng, mesh, rand_shape(rng, mesh, ndim)), rand_dims(rng, ndim), rng.random() < 0.4], {}


def binary_0d(op):
    """A broadcasting binary op where one side is often a 0-d tensor (a scalar tensor, e.g. a loss scale)."""
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rand_ndim(rng))
        r = rng.random()
        other = [] if r < 0.4 else broadcast_partner(rng, shape)
        a, b = [shape, other] if rng.random() < 0.6 else [other, shape]
        return op, [T(rng, mesh, a), T(rng, mesh, b)], {}
    return gen


def g_lerp(rng, mesh):
    shape = rand_shape(rng, mesh, rand_ndim(rng))
    a, b = [shape, broadcast_partner(rng, shape)] if rng.random() < 0.6 else [shape, shape]
    return "lerp.Scalar", [T(rng, mesh, a), T(rng, mesh, b), rng.choice([0.5, 0.25, 1, -1.5])], {}


def addc(op):
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rand_ndim(rng))
        shapes = [shape, broadcast_partner(rng, shape), broadcast_partner(rng, shape)]
        rng.shuffle(shapes)
        kw = {"value": rng.choice([0.5, -2, 1])} if rng.random() < 0.5 else {}
        return op, [T(rng, mesh, s) for s in shapes], kw
    return gen


def inplace_binary(op):
    """self (the in-place target) with the full shape, other broadcasting into it (sometimes 0-d)."""
    def gen(rng, mesh):
        shape = rand_shape(rng, mesh, rand_ndim(rng))
        other = [] if rng.random() < 0.25 else broadcast_partner(rng, shape)
        return op, [T(rng, mesh, shape), T(rng, mesh, other)], {}
    return gen


# THE FAMILY LIST: family name → its generators (each drawn with equal chance within the family).
FAMILIES = {
    "matrix": [g_mm, g_addmm, g_bmm, g_baddbmm],
    "pointwise": [
        binary("add.Tensor", alpha=True), binary("sub.Tensor", alpha=True), binary("mul.Tensor"),
        binary("div.Tensor"), unary("mul.Scalar", [2.5, -1, 0.5]), unary("neg"), unary("exp"), unary("tanh"),
        unary("relu"), unary("gelu"), unary("silu"), unary("sigmoid"), unary("rsqrt"),
        unary("pow.Tensor_Scalar", [2, 3, 0.5]), g_clamp, binary("add_.Tensor", alpha=True, inplace=True),
        # where.self needs a bool condition tensor, which the batch format cannot express: not generated.
    ],
    "math": [
        reduction("sum.default", with_dims=False, keepdim=False), reduction("sum.dim_IntList"),
        reduction("mean.dim"), reduction("amax"), reduction("amin"), reduction("max.dim", single_dim=True),
        g_var, softmax("_softmax"), softmax("_log_softmax"), g_layer_norm,
    ],
    "view": [
        view_like("view"), g_transpose, g_t, g_permute, g_unsqueeze, g_squeeze, g_expand, view_like("_unsafe_view"),
        g_select, g_slice, g_split,
    ],
    # A Tensor[] argument given as a JSON list of tensor arguments (counted in order among the tensor arguments).
    "tensor_list": [g_cat],
    # What a transformer's backward runs besides matmuls (see the comment above the generators for what the batch
    # format cannot express).
    "backward": [
        same_shape("threshold_backward", [0, 0.5, -1]), g_gelu_backward, same_shape("silu_backward"),
        same_shape("sigmoid_backward"), same_shape("tanh_backward"), g_layer_norm_backward,
        g_select_backward, g_slice_backward,
    ],
    "tensor": [
        one_tensor("clone"), one_tensor("contiguous"), one_tensor("detach"), one_tensor("alias"),
        one_tensor("_to_copy"), one_tensor("zeros_like"), one_tensor("ones_like"), one_tensor("empty_like"),
        new_factory("new_zeros"), new_factory("new_ones"), new_factory("new_empty"), new_factory("new_full", True),
        one_tensor("fill_.Scalar", [0, 1.5, -3]), one_tensor("zero_"), g_copy_, g_select, g_slice_steps, g_stack,
        g_unbind, g_split_with_sizes,
    ],
    "reductions2": [
        reduction("sum.dim_IntList"), reduction("mean.dim"), reduction("amax"), reduction("amin"),
        one_tensor("prod", zero_d=0), reduction("prod.dim_int", single_dim=True), g_var_std("var.correction"),
        g_var_std("std.correction"),
        one_tensor("cumsum", [0, -1], zero_d=0), reduction("logsumexp"), one_tensor("max", zero_d=0.2),
        one_tensor("min", zero_d=0.2), one_tensor("all"), one_tensor("any"), g_any_all_dims,
    ],
    "argminmax": [g_arg_reduction("argmax"), g_arg_reduction("argmin")],
    "pointwise2": [
        one_tensor("clamp_min", [0, -1.5, 2]), one_tensor("clamp_max", [0, 1.5, -2]), binary("maximum"),
        binary("minimum"), binary_0d("mul.Tensor"), binary_0d("div.Tensor"), binary_0d("pow.Tensor_Tensor"), g_lerp,
        addc("addcmul"), addc("addcdiv"), one_tensor("abs"), one_tensor("reciprocal"), one_tensor("erf"),
        one_tensor("sin"), one_tensor("cos"), one_tensor("log"), one_tensor("neg_"), inplace_binary("mul_.Tensor"),
        one_tensor("mul_.Scalar", [2, -0.5]),
    ],
}


def family_count(family):
    return CASES_PER_FAMILY if CASES_PER_FAMILY is not None else FAMILY_CASES.get(family, 750)


def family_cases(family, count):
    """`count` cases of one family; the seed depends only on the family name, so enabling another family does not
    change these."""
    rng = upstream.new_rng(zlib.crc32(family.encode()) ^ 0x0D75)
    cases = []
    for _ in range(count):
        mesh = list(rng.choice(MESHES))
        op, args, kwargs = rng.choice(FAMILIES[family])(rng, mesh)
        case = {"mesh": mesh, "op": op, "args": args, "values": True}
        if rng.random() < 0.15:
            case["dtype"] = "bfloat16"
        if kwargs:
            case["kwargs"] = kwargs
        case["family"] = family  # the test's own key, not sent to dtsim
        cases.append(case)
    return cases


def wire(case):
    """The batch line dtsim reads: keyword arguments folded into "args" in schema order."""
    line = {k: v for k, v in case.items() if k not in ("family", "kwargs")}
    kwargs = dict(case.get("kwargs", {}))
    if kwargs:
        name, _, overload = case["op"].partition(".")
        schema = getattr(getattr(torch.ops.aten, name), overload or "default")._schema
        args = list(case["args"])
        for argument in schema.arguments[len(args):]:
            if not kwargs:
                break
            if argument.name in kwargs:
                args.append(kwargs.pop(argument.name))
            else:
                default = argument.default_value
                assert default is None or isinstance(default, (bool, int, float)), (case["op"], argument.name)
                args.append(default)
        assert not kwargs, (case["op"], kwargs)
        line["args"] = args
    return line


# ---------------------------------------------------------------------------------------------------------------------
# Upstream
# ---------------------------------------------------------------------------------------------------------------------

def canonical(placements):
    """Upstream placement objects → dtsim's canonical text "[S(0), R]"."""
    return "[" + ", ".join(upstream.placement_text(p) for p in placements) + "]"


def is_tensor_arg(a):
    return isinstance(a, dict) and "shape" in a and "placements" in a


def resolve_op(name):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


class Recorder:
    """Wraps upstream's redistribute_local_tensor (as the dispatcher calls it) and the functional collectives while
    installed; records (local tensor, current spec, target spec) per redistribution and counts collectives."""

    COUNTED = [("torch.distributed._functional_collectives", "all_gather_single", "all_gather"),
               ("torch.distributed._functional_collectives", "all_gather_tensor", "all_gather"),
               ("torch.distributed._functional_collectives", "all_gather_tensor_autograd", "all_gather"),
               ("torch.distributed._functional_collectives", "reduce_scatter_single", "reduce_scatter"),
               ("torch.distributed._functional_collectives", "reduce_scatter_tensor", "reduce_scatter"),
               ("torch.distributed._functional_collectives", "reduce_scatter_tensor_autograd", "reduce_scatter"),
               ("torch.distributed._functional_collectives", "all_reduce", "all_reduce"),
               ("torch.distributed._functional_collectives", "all_to_all_single", "all_to_all"),
               ("torch.distributed._functional_collectives", "all_to_all_single_autograd", "all_to_all"),
               ("torch.distributed.tensor._collective_utils", "shard_dim_alltoall", "all_to_all"),
               ("torch.distributed.tensor.placement_types", "shard_dim_alltoall", "all_to_all"),
               ("torch.distributed.tensor._collective_utils", "mesh_broadcast", "broadcast"),
               ("torch.distributed.tensor._collective_utils", "mesh_scatter", "scatter")]

    def __init__(self):
        import importlib
        self.active = False
        self.timed_out = False
        self.redistributions = []
        self.counts = collections.Counter()
        self.depth = 0
        d = importlib.import_module("torch.distributed.tensor._dispatch")
        original = d.redistribute_local_tensor

        def redistribute(local, current, target, *a, **k):
            if self.active:
                self.redistributions.append((local, current, target))
            return original(local, current, target, *a, **k)
        d.redistribute_local_tensor = redistribute
        # Custom op handlers (argmin/argmax: _nonlinear_redux) redistribute a Partial input with DTensor.redistribute,
        # which reaches _redistribute's own name of the function, not _dispatch's: record those too.
        r = importlib.import_module("torch.distributed.tensor._redistribute")
        original_r = r.redistribute_local_tensor

        def redistribute_r(local, current, target, *a, **k):
            if self.active:
                self.redistributions.append((local, current, target))
            return original_r(local, current, target, *a, **k)
        r.redistribute_local_tensor = redistribute_r
        for module_name, fn_name, kind in self.COUNTED:
            module = importlib.import_module(module_name)
            if hasattr(module, fn_name):
                setattr(module, fn_name, self._counting(getattr(module, fn_name), kind))

    def _counting(self, fn, kind):
        def wrapper(*a, **k):
            outer = self.depth == 0
            if self.active and outer:
                self.counts[kind] += 1
            self.depth += 1
            try:
                return fn(*a, **k)
            finally:
                self.depth -= 1
        return wrapper

    @contextlib.contextmanager
    def recording(self):
        """Records one op call; raises TimeoutError (and sets timed_out) when it runs over CASE_TIMEOUT seconds."""
        import signal
        self.redistributions, self.counts, self.depth, self.active = [], collections.Counter(), 0, True
        self.timed_out = False

        def expire(*_):
            self.timed_out = True
            raise TimeoutError(f"over {CASE_TIMEOUT}s")
        previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(CASE_TIMEOUT)
        try:
            yield self
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            self.active = False


def global_values(k, shape, dtype):
    numel = math.prod(shape)
    return ((torch.arange(numel, dtype=torch.int64) + 3 * k) % 7 - 3).to(dtype).reshape(shape)


def make_dtensor(mesh, mesh_shape, spec, k, dtype):
    """Tensor argument k of the case as an upstream DTensor (call inside LocalTensorMode).

    Every rank's shard is cut from the global values with upstream's own layout function
    (_compute_local_shape_and_global_offset: local shape and global offset of a mesh coordinate) on plain tensors
    and wrapped in one LocalTensor for DTensor.from_local. That is what distribute_tensor(src_data_rank=None) gives,
    without running arange and the split per rank under LocalTensorMode (which cost about half of upstream's time
    per case). A Partial mesh dim is read as Replicate and the shard scaled by prod(1 + coordinate) over the Partial
    mesh dims, as src/core/arange_case.cc does."""
    from torch.distributed._local_tensor import LocalTensor
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Partial
    shape = spec["shape"]
    texts = spec["placements"].split(",") if spec["placements"] else []
    placements = upstream.normalised(texts, len(shape))
    if len(placements) != len(mesh_shape):
        raise ValueError(f"{len(placements)} placements for a {len(mesh_shape)}-D mesh")
    partial_dims = [m for m, p in enumerate(placements) if isinstance(p, Partial)]
    with torch._C._DisableTorchDispatch():  # plain tensors even inside LocalTensorMode
        full = global_values(k, shape, dtype)
        local = LocalTensor(upstream.shards_of(full, mesh_shape, placements, partial_dims, dtype))
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=full.shape, stride=full.stride())


def json_values(t):
    """A local tensor → nested lists as dtsim's JSON holds them (non-finite floats as None)."""
    if t.dtype.is_floating_point:
        t = t.double()
        values = t.tolist()
        if not bool(torch.isfinite(t).all()):
            values = _nonfinite_to_none(values)
        return values
    return t.tolist()


def _nonfinite_to_none(v):
    if isinstance(v, list):
        return [_nonfinite_to_none(x) for x in v]
    return v if math.isfinite(v) else None


# Upstream's user-facing refusals of an op on DTensors whose global op is valid: dtsim must refuse these too. Any
# other exception while the global op is valid is upstream failing (e.g. amax over a dim whose shard is empty on some
# rank raises IndexError, expand of a sharded size-1 dim raises "RuntimeError: 0"): there the global tensor judges
# dtsim's answer instead.
REFUSALS = ("Mixed Partial reduce types", "requires redistribution. Please redistribute",
            "Cannot flatten unevenly sharded", "Cannot unflatten unevenly sharded", "not supported yet",
            "redistributing to Partial is for internal use only",
            "in-place operations that require placement changes", "Cannot shard unevenly distributed tensor",
            "Attempted to unbind along the sharded dimension")


def plain(x):
    """A DTensor (or a list of them) → its global value as a plain tensor (call inside LocalTensorMode)."""
    from torch.distributed.tensor import DTensor
    if isinstance(x, list):
        return [plain(t) for t in x]
    if isinstance(x, DTensor):
        full = x.full_tensor()
        return full._local_tensors[0].clone() if hasattr(full, "_local_tensors") else full.clone()
    return x


def flat_outputs(result):
    """An op's result as a list of outputs; an output the op did not compute (native_layer_norm_backward with
    output_mask false) stays in its place as None, as dtsim's answer lists it as null."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def upstream_answer(mesh, world, case, recorder, crosscheck=False):
    """Upstream's answer to one case in the `dtsim op` answer format; a refusal is {"error", "kind"} with kind
    "invalid" (the op fails on the global tensors too), "refusal" (a DTensor refusal, see REFUSALS) or "crash" (then
    "global_outputs" holds the op's result on the global tensors, for judging dtsim's answer)."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import DTensor
    dtype = TORCH_DTYPES[case.get("dtype", "float32")]
    kwargs = case.get("kwargs", {})
    op = resolve_op(case["op"])
    mode = LocalTensorMode(world)
    with mode:
        counter = [0]
        inputs = {}  # id(local tensor) → tensor argument index

        def build(a):
            if is_tensor_arg(a):
                dt = make_dtensor(mesh, case["mesh"], a, counter[0], dtype)
                inputs[id(dt._local_tensor)] = counter[0]
                counter[0] += 1
                return dt
            if isinstance(a, list) and a and all(is_tensor_arg(x) for x in a):
                return [build(x) for x in a]
            return a
        try:
            args = [build(a) for a in case["args"]]
        except Exception as e:  # noqa: BLE001  from_local refuses mixed Partial kinds
            return {"error": error_text(e), "kind": "refusal"}
        comm = None
        # Ops upstream is known to answer wrongly (UPSTREAM_WRONG_VALUES): the global result, taken before the op
        # runs (it may mutate its arguments), judges dtsim where the two disagree on values.
        reference_first = None
        if case["op"] in UPSTREAM_WRONG_VALUES:
            try:
                reference_first = flat_outputs(op(*[plain(a) for a in args], **kwargs))
            except Exception:  # noqa: BLE001  then there is nothing to judge by; compared as usual
                reference_first = None
        try:
            with recorder.recording(), contextlib.ExitStack() as stack:
                if crosscheck:
                    from torch.distributed.tensor.debug import CommDebugMode
                    comm = stack.enter_context(CommDebugMode())
                result = op(*args, **kwargs)
            outputs = []
            for out in flat_outputs(result):
                if out is None:
                    outputs.append(None)
                    continue
                if not isinstance(out, DTensor):
                    raise RuntimeError(f"output is a {type(out).__name__}, not a DTensor")
                local = out.to_local()
                shards = local._local_tensors if hasattr(local, "_local_tensors") else \
                    {r: local for r in range(world)}
                ranks = []
                for r in range(world):
                    entry = {"rank": r, "local_shape": list(shards[r].shape)}
                    if case.get("values"):
                        entry["values"] = json_values(shards[r])
                    ranks.append(entry)
                outputs.append({"shape": list(out.shape), "placements": canonical(out.placements), "ranks": ranks,
                                "dtype": str(out.dtype).replace("torch.", "")})
            error = None
        except Exception as e:  # noqa: BLE001  classified below
            error = e
            if recorder.timed_out:
                return {"error": f"upstream took over {CASE_TIMEOUT}s", "kind": "timeout"}
            global_args = [plain(a) for a in args]
    if error is None:
        redistributes = [{"arg": inputs.get(id(local), "internal"), "from": canonical(current.placements),
                          "to": canonical(target.placements)} for local, current, target in recorder.redistributions]
        answer = {"op": case["op"], "redistributes": redistributes, "collective_counts": dict(recorder.counts),
                  "outputs": outputs}
        if reference_first is not None:
            answer["global_outputs"] = [{"shape": list(t.shape), "values": json_values(t),
                                         "dtype": str(t.dtype).replace("torch.", "")} if t is not None else None
                                        for t in reference_first]
        if comm is not None:
            answer["commdebug_counts"] = dict(collections.Counter(
                {COLLECTIVE_KINDS.get(str(k).split(".")[-1], str(k)): v for k, v in comm.get_comm_counts().items()}))
        return answer
    try:
        reference = flat_outputs(op(*global_args, **kwargs))
    except Exception:  # noqa: BLE001  the op itself refuses these arguments
        return {"error": error_text(error), "kind": "invalid"}
    if any(phrase in str(error) for phrase in REFUSALS):
        return {"error": error_text(error), "kind": "refusal"}
    return {"error": error_text(error), "kind": "crash",
            "global_outputs": [{"shape": list(t.shape), "values": json_values(t),
                                "dtype": str(t.dtype).replace("torch.", "")} if t is not None else None
                               for t in reference]}


def error_text(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def upstream_worker(cases, crosscheck=False):
    """Runs upstream on a list of (index, case) in this process: one fake process group per mesh shape.
    Returns {index: answer} and the seconds spent."""
    import logging
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    torch.set_num_threads(1)
    recorder = Recorder()
    start = time.time()
    answers = upstream.answer_per_mesh(
        cases, lambda mesh, world, c: upstream_answer(mesh, world, c, recorder, crosscheck))
    return answers, time.time() - start


def upstream_answers(cases, jobs=None, crosscheck=False):
    """Upstream's answer for every case, computed by `jobs` worker processes (mesh shapes spread over them)."""
    jobs = jobs or int(os.environ.get("DTSIM_OP_ORACLE_JOBS", "2"))
    indexed = list(enumerate(cases))
    if jobs <= 1:
        answers, _ = upstream_worker(indexed, crosscheck)
        return [answers[i] for i in range(len(cases))]
    # Split by position (not by mesh) so the shares are even; each worker still groups its share by mesh.
    shares = [indexed[j::jobs] for j in range(jobs)]
    answers = {}
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        for part, _ in pool.map(upstream_worker, shares, [crosscheck] * jobs):
            answers.update(part)
    return [answers[i] for i in range(len(cases))]


# ---------------------------------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------------------------------

def flat_values(v, out):
    if isinstance(v, list):
        for x in v:
            flat_values(x, out)
    else:
        out.append(math.nan if v is None else float(v))
    return out


def canonical_text(text):
    """Placement text with spaces normalised: "[S(0),R]" → "[S(0), R]"."""
    inner = text.strip().strip("[]")
    parts = [p.strip() for p in split_top(inner)] if inner else []
    return "[" + ", ".join(parts) + "]"


def split_top(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur)
    return parts


def counts_of(d):
    return {k: v for k, v in (d or {}).items() if v}


def values_close(a, b, integral, tol):
    """Flat float64 tensors `a` (expected) and `b` (dtsim's): None or a problem text."""
    if a.shape != b.shape:
        return f"{a.numel()} values expected, {b.numel()} from dtsim"
    scale = max(1.0, float(a.nan_to_num(0, 0, 0).abs().max())) if a.numel() else 1.0
    ok = torch.equal(a.nan_to_num(7.5e300), b.nan_to_num(7.5e300)) if integral else \
        torch.allclose(b, a, rtol=tol, atol=tol * scale, equal_nan=True)
    if ok:
        return None
    diff = (a - b).abs().nan_to_num(math.inf)
    k = int(diff.argmax())
    return f"values differ (max at flat index {k}: expected {a[k].item()}, dtsim {b[k].item()}; tolerance {tol} x {scale})"


def rank_indices(global_shape, mesh_shape, coordinate, placements):
    """The flat global indices a mesh coordinate holds, as a tensor of its local shape: an index tensor split one
    mesh dim after another with upstream's own Placement._split_tensor (what distribute_tensor does; also right for
    nested shards and _StridedShard, which the offset-based layout function does not describe)."""
    from torch.distributed.tensor.placement_types import Shard, _StridedShard
    t = torch.arange(math.prod(global_shape), dtype=torch.int64).reshape(global_shape)
    for m, p in enumerate(placements):
        if isinstance(p, (Shard, _StridedShard)):
            t = p._split_tensor(t, mesh_shape[m], with_padding=False)[0][coordinate[m]]
    return t


def assemble(mesh_shape, placements_text, global_shape, ranks):
    """dtsim's per-rank shards of one output → its global tensor (float64; Partial mesh dims reduced), or a problem
    text. Each rank's local shape must be the one upstream's split gives for those placements."""
    from torch.distributed.tensor.placement_types import Partial
    texts = [t.strip() for t in split_top(placements_text.strip().strip("[]"))]
    placements = upstream.normalised(texts, len(global_shape))
    partial_dims = [m for m, p in enumerate(placements) if isinstance(p, Partial)]
    numel = math.prod(global_shape)
    acc = torch.full([mesh_shape[m] for m in partial_dims] + [numel], math.nan, dtype=torch.float64)
    for entry in ranks:
        r = entry["rank"]
        coordinate = [r // math.prod(mesh_shape[m + 1:]) % mesh_shape[m] for m in range(len(mesh_shape))]
        indices = rank_indices(global_shape, mesh_shape, coordinate, placements)
        if list(indices.shape) != list(entry["local_shape"]):
            return f"rank {r} local shape {entry['local_shape']}, upstream's split gives {list(indices.shape)}"
        values = torch.tensor(flat_values(entry.get("values", []), []), dtype=torch.float64)
        if values.numel() != indices.numel():
            return f"rank {r}: {values.numel()} values for local shape {entry['local_shape']}"
        acc[tuple(coordinate[m] for m in partial_dims)][indices.flatten()] = values
    for m in partial_dims:
        op = placements[m].reduce_op
        acc = {"sum": lambda t: t.sum(0), "avg": lambda t: t.mean(0), "max": lambda t: t.amax(0),
               "min": lambda t: t.amin(0)}[op](acc)
    return acc.reshape(global_shape)


def judge_by_global(case, want, got):
    """Upstream crashed on a valid op: dtsim's answer must hold the op's result on the global tensors."""
    problems = []
    go, wo = got.get("outputs", []), want["global_outputs"]
    if len(go) != len(wo):
        return [f"number of outputs: global op {len(wo)}, dtsim {len(go)}"]
    for n, (w, g) in enumerate(zip(wo, go)):
        if w is None or g is None:
            if (w is None) != (g is None):
                problems.append(f"output {n}: global op {'None' if w is None else 'a tensor'}, dtsim "
                                f"{'null' if g is None else 'a tensor'}")
            continue
        if list(w["shape"]) != list(g.get("shape", [])):
            problems.append(f"output {n} shape: global op {w['shape']}, dtsim {g.get('shape')}")
            continue
        full = assemble(case["mesh"], g.get("placements", ""), w["shape"], g.get("ranks", []))
        if isinstance(full, str):
            problems.append(f"output {n}: {full}")
            continue
        if case["op"] in NO_VALUES_OPS:
            continue
        integral = not w["dtype"].startswith(("float", "bfloat"))
        p = values_close(torch.tensor(flat_values(w["values"], []), dtype=torch.float64), full.flatten(), integral,
                         TOLERANCE[case.get("dtype", "float32")])
        if p:
            problems.append(f"output {n} (judged by the global op): {p}")
    return problems


# Ops whose upstream answer can be wrong while its layout is right: native_layer_norm_backward reads a mean/rstd that a
# redistribution left non-contiguous (stride (4, 1, 1) after S(1) -> S(0)) as if contiguous, on torch 2.13 (reproduced
# on plain tensors). For these the upstream side also records the op on the global tensors, and a values-only
# difference is settled by it: dtsim must equal the global op where upstream does not.
UPSTREAM_WRONG_VALUES = {"native_layer_norm_backward"}


def compare(case, want, got):
    """The differences between upstream's answer `want` and dtsim's `got` (empty list: they agree)."""
    problems = compare_with_upstream(case, want, got)
    if problems and "global_outputs" in want and all(" rank " in p and "values" in p for p in problems):
        upstream_wrong = judge_by_global(case, want, want)
        if upstream_wrong and not judge_by_global(case, want, got):
            UPSTREAM_WRONG.append((case, upstream_wrong))
            return []
    return problems


UPSTREAM_WRONG = []  # (case, how upstream's values differ from the global op): listed, not failed


def compare_with_upstream(case, want, got):
    """The differences between upstream's answer `want` and dtsim's `got` (empty list: they agree)."""
    if got.get("internal"):
        return [f"dtsim internal error: {got.get('error')}"]
    if want.get("kind") == "timeout":
        return []
    if "error" in want and want.get("kind") == "crash":
        return [] if "error" in got else judge_by_global(case, want, got)
    if "error" in want or "error" in got:
        if ("error" in want) != ("error" in got):
            return [f"refusal differs: upstream {want.get('error', 'answers')!r}, dtsim {got.get('error', 'answers')!r}"
                    + (f" (field {got.get('field')})" if "field" in got else "")]
        return []
    problems = []
    wo, go = want["outputs"], got.get("outputs", [])
    if len(wo) != len(go):
        return [f"number of outputs: upstream {len(wo)}, dtsim {len(go)}"]
    for n, (w, g) in enumerate(zip(wo, go)):
        if w is None or g is None:
            if (w is None) != (g is None):
                problems.append(f"output {n}: upstream {'None' if w is None else 'a tensor'}, dtsim "
                                f"{'null' if g is None else 'a tensor'}")
            continue
        if canonical_text(w["placements"]) != canonical_text(g.get("placements", "")):
            problems.append(f"output {n} placements: upstream {w['placements']}, dtsim {g.get('placements')}")
        if list(w["shape"]) != list(g.get("shape", [])):
            problems.append(f"output {n} shape: upstream {w['shape']}, dtsim {g.get('shape')}")
    wr = sorted((r["arg"] if isinstance(r["arg"], int) else -1, canonical_text(r["from"]), canonical_text(r["to"]))
                for r in want["redistributes"])
    gr = sorted((r.get("arg"), canonical_text(r.get("from", "")), canonical_text(r.get("to", "")))
                for r in got.get("redistributes", []))
    if wr != gr:
        problems.append(f"redistributes: upstream {wr}, dtsim {gr}")
    if counts_of(want["collective_counts"]) != counts_of(got.get("collective_counts")):
        problems.append(f"collectives: upstream {counts_of(want['collective_counts'])}, "
                        f"dtsim {counts_of(got.get('collective_counts'))}")
    if problems:
        return problems  # values only make sense once the layout agrees
    tol = TOLERANCE[case.get("dtype", "float32")]
    for n, (w, g) in enumerate(zip(wo, go)):
        if w is None:
            continue
        granks = {r.get("rank"): r for r in g.get("ranks", [])}
        for wrank in w["ranks"]:
            grank = granks.get(wrank["rank"])
            if grank is None:
                problems.append(f"output {n} rank {wrank['rank']} missing")
                break
            if list(wrank["local_shape"]) != list(grank.get("local_shape", [])):
                problems.append(f"output {n} rank {wrank['rank']} local shape: upstream {wrank['local_shape']}, "
                                f"dtsim {grank.get('local_shape')}")
                break
            if "values" not in wrank or case["op"] in NO_VALUES_OPS:
                continue
            if "values" not in grank:
                problems.append(f"output {n} rank {wrank['rank']}: dtsim gives no values")
                break
            a = torch.tensor(flat_values(wrank["values"], []), dtype=torch.float64)
            b = torch.tensor(flat_values(grank["values"], []), dtype=torch.float64)
            integral = not w.get("dtype", "float").startswith(("float", "bfloat"))
            p = values_close(a, b, integral, tol)
            if p:
                problems.append(f"output {n} rank {wrank['rank']}: {p}")
                break
    return problems


# ---------------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------------

def enabled_families(text=None):
    text = os.environ.get("DTSIM_OP_FAMILIES") if text is None else text
    if text is None or text.strip() == "":
        return list(DEFAULT_FAMILIES)
    if text.strip() == "all":
        return list(FAMILIES)
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown op families {unknown}; known: {list(FAMILIES)}")
    return names


def run_dtsim(lines):
    """`dtsim op --batch -` on the cases: one parsed answer per case. Like upstream.run_batch, but an internal error
    on a line is that case's mismatch rather than the end of the run."""
    import subprocess
    text = "".join(json.dumps(c) + "\n" for c in lines)
    out = subprocess.run([upstream.dtsim_bin(), "op", "--batch", "-"], input=text, capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode in (0, 1), (out.returncode, out.stderr[-2000:])
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(answers) == len(lines), (len(answers), len(lines), out.stderr[-2000:])
    # The exit code is 1 exactly when some line failed.
    assert out.returncode == (1 if any("error" in r for r in answers) else 0), out.returncode
    return answers


def case_key(case):
    return json.dumps(wire(case), sort_keys=True)


def run(families, count, jobs=None, dtsim=True, crosscheck=False, dtsim_optional=False, cached=None):
    """Generates, asks both sides, compares. Returns (cases, upstream answers, dtsim answers or None, mismatches,
    timings). With dtsim_optional a failing dtsim run is reported in timings["dtsim_error"] instead of raised."""
    cases = [c for f in families for c in family_cases(f, family_count(f) if count is None else count)]
    timings = {}
    got, dtsim_error = None, None

    def ask_dtsim():
        nonlocal got, dtsim_error
        t = time.time()
        try:
            got = run_dtsim([wire(c) for c in cases])
        except Exception as e:  # noqa: BLE001  reported by the caller
            dtsim_error = e
        timings["dtsim"] = time.time() - t

    thread = threading.Thread(target=ask_dtsim) if dtsim else None
    if thread:
        thread.start()
    t = time.time()
    cached = cached or {}
    todo = [c for c in cases if case_key(c) not in cached]
    fresh = dict(zip(map(case_key, todo), upstream_answers(todo, jobs, crosscheck) if todo else []))
    want = [cached.get(case_key(c)) or fresh[case_key(c)] for c in cases]
    timings["upstream"] = time.time() - t
    if thread:
        thread.join()
        if dtsim_error is not None:
            if not dtsim_optional:
                raise dtsim_error
            timings["dtsim_error"] = f"{type(dtsim_error).__name__}: {str(dtsim_error)[-600:]}"
    mismatches = []
    if got is not None:
        for i, (c, w, g) in enumerate(zip(cases, want, got)):
            problems = compare(c, w, g)
            if problems:
                mismatches.append((i, c, w, g, problems))
    return cases, want, got, mismatches, timings


def summary(cases, want, mismatches):
    by_family = collections.Counter(c["family"] for c in cases)
    bad = collections.Counter(c["family"] for _, c, *_ in mismatches)
    kinds = collections.Counter((c["family"], w.get("kind", "answered")) for c, w in zip(cases, want))
    return {f: f"{by_family[f] - bad[f]}/{by_family[f]} agree (upstream: " +
            ", ".join(f"{n} {k}" for (g, k), n in sorted(kinds.items()) if g == f) + ")" for f in by_family}


def short(case):
    return json.dumps(wire({k: v for k, v in case.items() if k != "values"}))


def test_ops_match_upstream():
    import pytest
    families = enabled_families()
    if not families:
        pytest.skip("no op family enabled (DTSIM_OP_FAMILIES is empty and DEFAULT_FAMILIES lists none)")
    start = time.time()
    cases, want, _, mismatches, timings = run(families, None)
    print(f"\n{len(cases)} cases in {time.time() - start:.1f}s (upstream {timings['upstream']:.1f}s, dtsim "
          f"{timings.get('dtsim', 0):.1f}s): {summary(cases, want, mismatches)}")
    print(release_differences.summary("op_oracle"))
    mismatches = release_differences.unexplained(
        "op_oracle", mismatches, lambda m: m[1], lambda m: m[4][0].split(":")[0],
        full_run=not os.environ.get("DTSIM_OP_ORACLE_CASES") and not os.environ.get("DTSIM_OP_FAMILIES"))
    by_problem = collections.Counter(p.split(":")[0] for *_, problems in mismatches for p in problems[:1])
    report = "\n".join(f"  {short(c)}\n    " + "\n    ".join(problems) for _, c, _, _, problems in mismatches[:8])
    assert not mismatches, f"{len(mismatches)} mismatches ({dict(by_problem)}), first 8:\n{report}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", help="op family (repeatable, or a comma list, or 'all')")
    parser.add_argument("--cases", type=int, default=50, help="cases per family (0: the test's own counts)")
    parser.add_argument("--jobs", type=int, default=1, help="upstream worker processes")
    parser.add_argument("--show", action="store_true", help="print every mismatch (or, without dtsim, every answer)")
    parser.add_argument("--op", help="keep only cases of this op (after generation)")
    parser.add_argument("--upstream-only", action="store_true", help="do not run dtsim")
    parser.add_argument("--crosscheck", action="store_true",
                        help="also count collectives with CommDebugMode and report where it differs")
    parser.add_argument("--dump", help="write the cases and upstream's answers to this JSON-lines file")
    parser.add_argument("--answers", help="reuse upstream's answers from a --dump file (cases not in it are asked)")
    args = parser.parse_args()
    families = enabled_families(",".join(args.family or ["all"]))
    if not os.environ.get("DTSIM_BIN"):
        default = os.path.join(os.path.dirname(__file__), "..", "..", "build", "dtsim")
        if os.path.exists(default):
            os.environ["DTSIM_BIN"] = os.path.abspath(default)
    use_dtsim = bool(os.environ.get("DTSIM_BIN")) and not args.upstream_only
    global family_cases
    if args.op:
        generate = family_cases
        family_cases = lambda f, n: [c for c in generate(f, n) if c["op"] == args.op]  # noqa: E731
    start = time.time()
    cached = {}
    if args.answers:
        with open(args.answers) as f:
            for line in f:
                entry = json.loads(line)
                cached[json.dumps(entry["case"], sort_keys=True)] = entry["upstream"]
    cases, want, got, mismatches, timings = run(families, args.cases or None, args.jobs, use_dtsim, args.crosscheck,
                                                dtsim_optional=True, cached=cached)
    if "dtsim_error" in timings:
        print(f"dtsim op --batch failed ({timings['dtsim_error']}); showing upstream's side only")
    elapsed = time.time() - start
    if args.dump:
        with open(args.dump, "w") as f:
            for c, w in zip(cases, want):
                f.write(json.dumps({"case": wire(c), "upstream": w}) + "\n")
    refusals = collections.Counter(w["error"].split(":")[0] for w in want if "error" in w)
    print(f"{len(cases)} cases, upstream {timings['upstream']:.1f}s ({1000 * timings['upstream'] / max(1, len(cases)):.0f}"
          f" ms/case with {args.jobs} job(s)), total {elapsed:.1f}s; upstream refusals {dict(refusals)}")
    if args.crosscheck:
        differ = [(c, w) for c, w in zip(cases, want) if "error" not in w and
                  counts_of(w["collective_counts"]) != counts_of(w["commdebug_counts"])]
        print(f"crosscheck: CommDebugMode and the funcol wrappers differ on {len(differ)} of "
              f"{sum('error' not in w for w in want)} answered cases")
        for c, w in differ[:10]:
            print("  ", short(c), w["collective_counts"], w["commdebug_counts"])
    if got is None:
        if args.show:
            for c, w in zip(cases, want):
                print(short(c))
                print("  ->", json.dumps({k: v for k, v in w.items() if k != "outputs"}),
                      [(o["shape"], o["placements"]) for o in w.get("outputs", []) if o])
        return 0
    print(summary(cases, want, mismatches))
    problems = collections.Counter(p.split(":")[0] for *_, ps in mismatches for p in ps[:1])
    print(f"{len(mismatches)} mismatches: {dict(problems)}")
    for i, c, w, g, ps in mismatches if args.show else mismatches[:5]:
        print(f"#{i} {short(c)}")
        for p in ps:
            print("   ", p)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
