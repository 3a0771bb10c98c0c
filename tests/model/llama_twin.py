#!/usr/bin/env python3
"""Upstream-PyTorch twin of dtsim's built-in Llama-style model.

Builds the model with torch.nn (torchtitan Llama 3 module names, no RoPE, no GQA), parallelizes it with upstream's
APIs (parallelize_module with torchtitan's tensor/sequence-parallel plan, fully_shard), runs forward (and backward)
for every rank at once under LocalTensorMode with the fake process group, and prints one JSON object: the collectives
CommDebugMode attributed to every module (forward and backward), the parameters' placements, the gradients'
placements, the loss and, with --time, the seconds per step. See tests/model/README.md.

    python tests/model/llama_twin.py --mesh 4 --names tp --plan tp+sp --backward
"""
import argparse
import itertools
import json
import logging
import math
import re
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)
from torch.distributed.tensor.placement_types import _StridedShard

logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
# The embedding's input (token ids) needs no gradient, so its full backward pre-hook (CommDebugMode's backward marker)
# fires on the output's gradient: expected, not a problem.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed with respect to "
                                          "module outputs")
# FSDP2 warns that the root returns a view (logits.view); the twin does no in-place op on it.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")

PLANS = ["none", "tp", "tp+sp", "fsdp", "fsdp+tp", "fsdp+tp+sp"]


# ---------------------------------------------------------------------------------------------------------------------
# The model (torchtitan Llama 3 names; no RoPE, n_kv_heads = n_heads, bias=False, RMSNorm eps 1e-5)
# ---------------------------------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        # -1 heads: under tensor parallelism each rank holds heads/tp of them (plain local tensors).
        xq = xq.view(bs, seqlen, -1, self.head_dim).transpose(1, 2)
        xk = xk.view(bs, seqlen, -1, self.head_dim).transpose(1, 2)
        xv = xv.view(bs, seqlen, -1, self.head_dim).transpose(1, 2)
        o = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        o = o.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(o)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.attention = Attention(dim, heads)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, h):
        h = h + self.attention(self.attention_norm(h))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, vocab, dim, heads, layers, hidden):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(dim, heads, hidden) for i in range(layers)})
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


def default_ffn(dim):
    """The feed-forward hidden size when --ffn is not given: 4 * dim (torchtitan's rounding to multiple_of 256 would
    make tiny models' hidden size 256 or more; pass --ffn to match another choice)."""
    return 4 * dim


def make_inputs(batch, seq, vocab):
    """tokens[b, s] = (b * seq + s) * 7 % vocab; labels = tokens rolled by one along seq."""
    idx = torch.arange(batch * seq, dtype=torch.int64).reshape(batch, seq)
    tokens = (idx * 7) % vocab
    labels = torch.roll(tokens, shifts=-1, dims=1)
    return tokens, labels


# ---------------------------------------------------------------------------------------------------------------------
# Plans (upstream APIs only)
# ---------------------------------------------------------------------------------------------------------------------

def apply_tp(model, tp_mesh, sequence_parallel, loss_par):
    """torchtitan's apply_tp (sequence_parallel=True), or the same without sequence parallelism."""
    if sequence_parallel:
        root_plan = {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1) if loss_par else Replicate(),
                                      use_local_output=not loss_par),
        }
    else:
        root_plan = {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "output": ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1) if loss_par else Replicate(),
                                      use_local_output=not loss_par),
        }
    parallelize_module(model, tp_mesh, root_plan)
    for block in model.layers.values():
        if sequence_parallel:
            plan = {
                "attention_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
                "feed_forward.w3": ColwiseParallel(),
            }
        else:
            plan = {
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(),
                "feed_forward.w3": ColwiseParallel(),
            }
        parallelize_module(block, tp_mesh, plan)


def apply_fsdp(model, dp_mesh):
    """torchtitan's order: every block, then the root (fp32, no mixed precision, default reshard_after_forward)."""
    from torch.distributed.fsdp import fully_shard
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)


def let_fsdp_free_local_tensors():
    """FSDP2 frees an unsharded parameter with `tensor.untyped_storage().resize_(0)` (and allocates it again with
    resize_(size)); a LocalTensor is a wrapper subclass without storage of its own, so upstream raises
    "RuntimeError: Attempted to call resize_() on an invalid python storage." after the first FSDP module's forward.
    Wraps upstream's own free_storage/alloc_storage so that they run on every rank's tensor instead (the storage
    handling is all they do: no collective changes)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group

    def per_rank(fn):
        def on_every_rank(tensor):
            shards = getattr(tensor, "_local_tensors", None)
            if shards is None:
                return fn(tensor)
            for t in shards.values():
                fn(t)
        on_every_rank.__wrapped__ = fn
        return on_every_rank

    if not hasattr(_fsdp_param.free_storage, "__wrapped__"):
        _fsdp_param.free_storage = per_rank(_fsdp_param.free_storage)
        _fsdp_param.alloc_storage = per_rank(_fsdp_param.alloc_storage)
        _fsdp_param_group.alloc_storage = _fsdp_param.alloc_storage


def rank_shards(t):
    """{rank: plain tensor} of a LocalTensor or of a DTensor over LocalTensors."""
    if isinstance(t, DTensor):
        t = t._local_tensor
    return dict(t._local_tensors)


def fix_fsdp_shard_values(model, before, mesh, lm):
    """FSDP2 picks a rank's chunk with the process group's rank(), which is 0 for every simulated rank under the fake
    process group: each rank would hold chunk 0 (right shapes and collectives, wrong values). Writes chunk
    `dp coordinate` of every rank's own tensor into FSDP's padded sharded storage instead, so that the loss equals the
    unsharded model's. `before`: {fqn: {rank: tensor}} taken before fully_shard."""
    from torch.distributed.fsdp import FSDPModule
    names = {id(m): n for n, m in model.named_modules()}
    dp_dim = mesh.mesh_dim_names.index("dp")
    ranks = mesh.mesh
    dp_size = mesh.size(dp_dim)
    coordinate = {int(ranks[idx]): idx[dp_dim] for idx in itertools.product(*map(range, ranks.shape))}
    with lm.disable():
        for module in model.modules():
            if not isinstance(module, FSDPModule):
                continue
            group = module._get_fsdp_state()._fsdp_param_group
            for fp in (group.fsdp_params if group else []):
                owner = names[id(fp._module_info.module)]
                fqn = (owner + "." if owner else "") + fp._module_info.param_name
                shard_dim = fp.fsdp_placement.dim
                if shard_dim != 0:
                    raise RuntimeError(f"{fqn}: FSDP shard dim {shard_dim} (the fix-up handles dim 0)")
                storage = fp._sharded_param_data._local_tensors
                for r, full in before[fqn].items():
                    chunks = torch.chunk(full, dp_size, dim=0)
                    d = coordinate[r]
                    piece = chunks[d].reshape(-1) if d < len(chunks) else full.new_zeros(0)
                    storage[r].zero_()
                    storage[r][:piece.numel()].copy_(piece)


# ---------------------------------------------------------------------------------------------------------------------
# Spelling (dtsim's)
# ---------------------------------------------------------------------------------------------------------------------

def placement_text(p):
    if isinstance(p, _StridedShard):
        return f"_S({p.dim},{p.split_factor})"
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Partial):
        return f"P({p.reduce_op})"
    return str(p)


def placements_text(placements):
    return "[" + ", ".join(placement_text(p) for p in placements) + "]"


COLLECTIVE_KINDS = {
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_to_all_single": "all_to_all", "shard_dim_alltoall": "all_to_all",
    "broadcast": "broadcast",
    # c10d (process-group) ops
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "broadcast_": "broadcast",
}


def collective_kind(op):
    """An op overload packet CommDebugMode counted → dtsim's kind (the raw name where it has none)."""
    name = getattr(op, "__name__", str(op)).split(".")[-1]
    return COLLECTIVE_KINDS.get(name, str(op))


def kinds(counts):
    out = {}
    for op, n in counts.items():
        k = collective_kind(op)
        out[k] = out.get(k, 0) + n
    return dict(sorted(out.items()))


def fqn_of(cdm_name, root_class):
    """CommDebugMode's module name → the model fqn: "Global" stays, the root (named by its class: "Transformer", or
    "FSDPTransformer" once fully_shard has swapped its class) becomes "", "<root class>.layers.0" becomes "layers.0"."""
    if cdm_name == "Global":
        return "Global"
    if cdm_name == root_class:
        return ""
    if cdm_name.startswith(root_class + "."):
        return cdm_name[len(root_class) + 1:]
    return cdm_name


class EntryPointCounter:
    """An independent count of the collectives, for --crosscheck: wraps the Python entry points that DTensor,
    loss_parallel and FSDP2 call (functional collectives and c10d), counting only the outermost call of a nest."""

    ENTRY_POINTS = [
        ("torch.distributed._functional_collectives", [
            ("all_gather_tensor", "all_gather"), ("all_gather_tensor_autograd", "all_gather"),
            ("all_gather_single", "all_gather"), ("reduce_scatter_tensor", "reduce_scatter"),
            ("reduce_scatter_tensor_autograd", "reduce_scatter"), ("reduce_scatter_single", "reduce_scatter"),
            ("all_reduce", "all_reduce"), ("all_to_all_single", "all_to_all"),
            ("all_to_all_single_autograd", "all_to_all"), ("broadcast", "broadcast")]),
        ("torch.distributed.tensor._collective_utils", [("shard_dim_alltoall", "all_to_all")]),
        ("torch.distributed.tensor.placement_types", [("shard_dim_alltoall", "all_to_all")]),
        ("torch.distributed.distributed_c10d", [
            ("all_gather_into_tensor", "all_gather"), ("all_gather_single", "all_gather"),
            ("all_gather", "all_gather"), ("reduce_scatter_tensor", "reduce_scatter"),
            ("reduce_scatter_single", "reduce_scatter"), ("reduce_scatter", "reduce_scatter"),
            ("all_reduce", "all_reduce"), ("all_to_all_single", "all_to_all"), ("broadcast", "broadcast")]),
        ("torch.distributed", [  # the names `dist.xxx` callers (FSDP2) look up
            ("all_gather_into_tensor", "all_gather"), ("all_gather_single", "all_gather"),
            ("all_gather", "all_gather"), ("reduce_scatter_tensor", "reduce_scatter"),
            ("reduce_scatter_single", "reduce_scatter"), ("reduce_scatter", "reduce_scatter"),
            ("all_reduce", "all_reduce"), ("all_to_all_single", "all_to_all"), ("broadcast", "broadcast")]),
    ]

    def __init__(self):
        import importlib
        self.counts = {}
        self.active = False
        self.depth = 0
        self.restore = []
        for module_name, entries in self.ENTRY_POINTS:
            module = importlib.import_module(module_name)
            for fn_name, kind in entries:
                if hasattr(module, fn_name):
                    original = getattr(module, fn_name)
                    self.restore.append((module, fn_name, original))
                    setattr(module, fn_name, self._counting(original, kind))

    def _counting(self, fn, kind):
        def wrapper(*a, **k):
            if self.active and self.depth == 0:
                self.counts[kind] = self.counts.get(kind, 0) + 1
            self.depth += 1
            try:
                return fn(*a, **k)
            finally:
                self.depth -= 1
        return wrapper

    def uninstall(self):
        for module, fn_name, original in reversed(self.restore):
            setattr(module, fn_name, original)


# ---------------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------------

def per_rank_floats(t):
    """{rank: value} of a scalar (a DTensor, or a LocalTensor under LocalTensorMode)."""
    if isinstance(t, DTensor):
        t = t.to_local()
    shards = getattr(t, "_local_tensors", None) or {0: t}
    return {r: float(v.detach().float().reshape(-1)[0].item()) for r, v in sorted(shards.items())}


def parse_mesh(text, names):
    shape = tuple(int(x) for x in text.lower().split("x"))
    names = tuple(n.strip() for n in names.split(",")) if names else None
    if names is None:
        names = ("tp",) if len(shape) == 1 else tuple(f"d{i}" for i in range(len(shape)))
    if len(names) != len(shape):
        raise SystemExit(f"llama_twin: --names has {len(names)} names for a {len(shape)}-D mesh")
    return shape, names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mesh", default="4", help="mesh shape, e.g. 4 or 2x4")
    ap.add_argument("--names", default=None, help="mesh dim names, e.g. tp or dp,tp")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=None, help="feed-forward hidden size (default 4*dim)")
    ap.add_argument("--plan", choices=PLANS, default="tp+sp")
    ap.add_argument("--loss-parallel", action="store_true")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--time", type=int, default=0, metavar="REPEATS",
                    help="also time REPEATS more steps (without CommDebugMode) and report the median")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: the per-rank ops are tiny, and with more threads a busy "
                         "machine makes steps up to 10x slower at random)")
    ap.add_argument("--crosscheck", action="store_true",
                    help="also count the collectives independently (wrapping the funcol/c10d entry points) and "
                         "report whether the totals equal CommDebugMode's")
    ap.add_argument("--table", action="store_true", help="print a Markdown table of the counts instead of JSON")
    ap.add_argument("--no-fsdp-patch", action="store_true",
                    help="run FSDP2 under LocalTensorMode as upstream ships it (fails: see README.md)")
    args = ap.parse_args(argv)

    shape, names = parse_mesh(args.mesh, args.names)
    world = math.prod(shape)
    parts = args.plan.split("+")
    uses_tp, uses_fsdp = "tp" in parts, "fsdp" in parts
    if uses_tp and "tp" not in names:
        raise SystemExit(f"llama_twin: plan {args.plan} needs a mesh dim named tp (--names)")
    if uses_fsdp and "dp" not in names:
        raise SystemExit(f"llama_twin: plan {args.plan} needs a mesh dim named dp (--names)")
    if args.loss_parallel and not uses_tp:
        raise SystemExit("llama_twin: --loss-parallel needs a tensor-parallel plan")
    if args.dim % args.heads:
        raise SystemExit("llama_twin: --dim must be a multiple of --heads")
    hidden = args.ffn or default_ffn(args.dim)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if uses_fsdp and not args.no_fsdp_patch:
        let_fsdp_free_local_tensors()

    dist.init_process_group("fake", rank=0, world_size=world, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)  # outside the mode
        tp_mesh = mesh["tp"] if uses_tp else None
        dp_mesh = mesh["dp"] if uses_fsdp else None
        torch.manual_seed(0)  # every rank starts LocalTensorMode with this RNG state: equal weights on all ranks
        with LocalTensorMode(world) as lm:
            model = Transformer(args.vocab, args.dim, args.heads, args.layers, hidden)
            if uses_tp:
                apply_tp(model, tp_mesh, sequence_parallel="sp" in parts, loss_par=args.loss_parallel)
            if uses_fsdp:
                before = {n: rank_shards(p) for n, p in model.named_parameters()}
                apply_fsdp(model, dp_mesh)
                if not args.no_fsdp_patch:
                    fix_fsdp_shard_values(model, before, mesh, lm)
            # The parameters as the plan leaves them (FSDP: sharded; CommDebugMode itself records them in the
            # forward pre-hook, where FSDP has already all-gathered them: "parameters_in_forward").
            param_placements = {n: placements_text(p.placements) if isinstance(p, DTensor) else "plain"
                                for n, p in model.named_parameters()}
            tokens, labels = make_inputs(args.batch, args.seq, args.vocab)

            def step():
                logits = model(tokens)
                if args.loss_parallel:
                    with loss_parallel():
                        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
                        if args.backward:
                            loss.backward()
                else:
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
                    if args.backward:
                        loss.backward()
                return loss

            counter = EntryPointCounter() if args.crosscheck else None
            try:
                with CommDebugMode() as comm:
                    if counter:
                        counter.active = True
                    loss = step()
                    if counter:
                        counter.active = False
            except RuntimeError as e:
                if uses_fsdp and args.no_fsdp_patch and "invalid python storage" in str(e):
                    raise SystemExit("llama_twin: upstream FSDP2 cannot run under LocalTensorMode as shipped: "
                                     f"{str(e).strip().splitlines()[0]} (run without --no-fsdp-patch)") from None
                raise
            result = report(model, comm, param_placements)
            if counter:
                counter.uninstall()
                mine = dict(sorted(counter.counts.items()))
                result["crosscheck"] = {"entry_point_counts": mine, "equal": mine == result["comm_counts"]}
            losses = per_rank_floats(loss)
            result["loss"] = losses[min(losses)]
            result["loss_equal_on_all_ranks"] = len(set(losses.values())) == 1 and len(losses) == world
            if args.time:
                times = []
                for _ in range(args.time):
                    model.zero_grad(set_to_none=True)
                    t0 = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t0)
                result["time_s"] = statistics.median(times)
                result["time_all_s"] = times
        result["config"] = {"mesh": list(shape), "names": list(names), "world": world, "plan": args.plan,
                            "tp_mesh": tp_mesh.mesh.tolist() if tp_mesh is not None else None,
                            "dp_mesh": dp_mesh.mesh.tolist() if dp_mesh is not None else None,
                            "dim": args.dim, "heads": args.heads, "layers": args.layers, "vocab": args.vocab,
                            "seq": args.seq, "batch": args.batch, "ffn": hidden,
                            "loss_parallel": args.loss_parallel, "backward": args.backward,
                            "root_name": type(model).__name__, "threads": torch.get_num_threads(),
                            "torch": torch.__version__}
    finally:
        dist.destroy_process_group()
    if args.table:
        sys.stdout.write(markdown_table(result))
    else:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    return 0


def markdown_table(result):
    def counts(c):
        return ", ".join(f"{k} {v}" for k, v in c.items()) or "-"
    lines = ["| module | type | parameters | forward | backward |", "|---|---|---|---|---|"]
    for m in result["modules"]:
        params = ", ".join(f"{k} {v}" for k, v in m["parameters"].items()) or "-"
        lines.append(f"| {m['fqn'] or '(root)'} | {m['module_type'] or '-'} | {params} | "
                     f"{counts(m['collectives_forward'])} | {counts(m['collectives_backward'])} |")
    lines.append("")
    lines.append("gradients: " + ", ".join(f"{k} {v}" for k, v in result["grad_placements"].items()))
    lines.append(f"loss {result['loss']:.6f}")
    return "\n".join(lines) + "\n"


def report(model, comm, param_placements):
    tracker = comm.advanced_module_tracker
    root_class = type(model).__name__
    # CommDebugMode stores str(type(mod)) ("<class '__main__.Linear'>" less the brackets); the twin reports the class
    # name alone.
    module_types = {name: re.sub(r"^class '(.*)'$", r"\1", info["module_type"]).rsplit(".", 1)[-1]
                    for name, info in tracker.module_helper_dict.items() if "module_type" in info}
    modules = []
    for name, info in tracker.module_helper_dict.items():  # insertion order: the order CommDebugMode saw them
        counts = comm.comm_module_counts.get(name, {})
        fqn = fqn_of(name, root_class)
        prefix = fqn + "." if fqn else ""
        params = {n[len(prefix):]: v for n, v in param_placements.items()
                  if fqn != "Global" and n.startswith(prefix) and "." not in n[len(prefix):]}
        in_forward = {key.rsplit(".", 1)[1]: placements_text(placements)
                      for key, placements in tracker.sharding_dict.items() if key.rsplit(".", 1)[0] == name}
        modules.append({
            "fqn": fqn,
            "name": name,
            "module_type": module_types.get(name, ""),
            "depth": info.get("depth", 0),
            "parameters": params,
            "parameters_in_forward": in_forward,
            "collectives_forward": kinds(counts.get("forward", {})),
            "collectives_backward": kinds(counts.get("backward", {})),
        })
    grads = {}
    for fqn, p in model.named_parameters():
        if p.grad is not None:
            grads[fqn] = placements_text(p.grad.placements) if isinstance(p.grad, DTensor) else "plain"
    return {"modules": modules, "grad_placements": grads, "comm_counts": kinds(comm.comm_counts),
            "comm_counts_raw": {str(op): n for op, n in comm.comm_counts.items()}}


if __name__ == "__main__":
    sys.exit(main())
