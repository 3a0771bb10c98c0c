"""`dtsim run --check-ops`: every DTensor op of the program against the same op on the global tensors.

Each rank runs under `OpCheckMode`, a dispatch mode that sees every op whose arguments or results are DTensors
before DTensor's own dispatch does. The mode lets the op run, then hands the checker what the rank saw: the op, every
DTensor argument's placements and local tensor (as it was before the op), every DTensor result's, the module and pass
the op ran in and the program's line. Ranks of a mesh run that mesh's DTensor ops in the same order, so the n-th op a
rank runs on a mesh meets the n-th op of every other rank of that mesh; the rank that completes the set checks it:

1. **Replicas agree.** Ranks whose coordinates differ only on Replicate mesh dims hold the same replica: their local
   tensors must be equal, bit for bit, in every argument and result (a script that wrote one replica in place, a
   gradient one rank did not reduce). The odd ranks out are named.
2. **The sharded result is the unsharded one.** The global arguments are rebuilt from the ranks' local tensors (dtsim's
   layouts, checked against upstream's: Shard, _StridedShard, Replicate, Partial), the op runs on them as a plain
   tensor op, and every result's global tensor (rebuilt the same way; Partial sums as upstream reduces) must equal it:
   integers and booleans exactly, floats within `rtol * max(1, max |expected|)` (float64 1e-9, float32 1e-4,
   bfloat16 and float16 2e-2: a sharded op sums in another order than the unsharded one; NaN equals NaN). A result
   that differs while its arguments agree is a sharding bug in that op: a wrong strategy, an uneven-shard reduction, a
   custom op or `local_map` that computes on the wrong shard.
   A `local_map` call is checked as one op: its function on the global tensors, run as the one rank of a world of one
   (`dist.get_rank()` 0, `get_world_size()` 1, a mesh's local rank and coordinate 0, its size 1), against its global
   results; a function that communicates is not checked.
3. **Every rank ran the same op.** Ranks of one mesh that reach different ops, or a different number of them, are
   reported.

Not checked, and counted as such in the summary: random ops (their draws are per rank), ops whose results hold no
values yet (`empty`, `new_empty`, ...; their layouts are checked), ops without a DTensor result, the backward ops that
`loss_parallel()` fuses (its nll_loss_backward returns the gradient of log_softmax's input), and ops the unsharded
tensors make raise. The first divergence is reported with the op,
its placements, the strategy upstream chose (the argument placements it redistributed to), the module and pass, the
ranks and the line; later ones are counted by op. A run that diverged exits with 5.
"""

from __future__ import annotations

import collections
import inspect
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import patches

_RTOL = {torch.float64: 1e-9, torch.complex128: 1e-9, torch.float32: 1e-4, torch.complex64: 1e-4,
         torch.bfloat16: 2e-2, torch.float16: 2e-2}
_SLOT = object()  # where a DTensor argument goes in an op's flattened arguments
# Ops whose results have no defined values: only their layouts are compared.
_UNINITIALIZED = ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided")


def _is_random(func) -> bool:
    from torch.distributed.tensor import DTensor

    return func in DTensor._op_dispatcher._random_ops or torch.Tag.nondeterministic_seeded in func.tags


def _fused_by_loss_parallel(func) -> bool:
    """Inside `loss_parallel()`, upstream's handler for nll_loss_backward returns the gradient of log_softmax's input
    (softmax minus the target), and the one for _log_softmax_backward_data passes it on: each alone is not the op."""
    from torch.distributed.tensor import DTensor

    handler = DTensor._op_dispatcher._custom_op_handlers.get(func)
    return handler is not None and getattr(handler, "__module__", "") == "torch.distributed.tensor.parallel.loss" \
        and "backward" in func.name()


def _placements(placements) -> str:
    """Upstream placements in dtsim's text: "[S(0), _S(0,2), R, P(sum)]"."""
    from .. import _one_placement_text

    return "[" + ", ".join(_one_placement_text(p, "placements") for p in placements) + "]"


class _Tensor:
    """One rank's view of a DTensor argument or result, as the checker rebuilds it: a Partial subclass of upstream's is
    brought to the plain Partial it reduces as (`_MaskPartial`: the rank's mask applied to its copy now, while the
    mask is there; `_NormPartial(p)`: the local value raised to p, its global result to 1/p afterwards, in `post`).
    `unknown`: the name of a Partial subclass the checker cannot rebuild (its op is not checked)."""

    __slots__ = ("placements", "shape", "dtype", "local", "post", "unknown", "_partials", "empty")

    def __init__(self, dt, local: torch.Tensor):
        from torch.distributed.tensor.placement_types import Partial

        self.shape = tuple(dt.shape)
        self.dtype = dt.dtype
        self.post: List[Callable[[torch.Tensor], torch.Tensor]] = []
        self.unknown: Optional[str] = None
        self.empty = False  # holds no values yet: made by `empty` and its kin, or a view of such a tensor
        self._partials: list = []
        placements = []
        for p in dt.placements:
            if isinstance(p, Partial) and type(p) is not Partial:
                p, local = self._plain_partial(p, local)
            placements.append(p)
        self.placements = tuple(placements)
        self.local = local

    def _plain_partial(self, p, local: torch.Tensor):
        from torch.distributed.tensor.placement_types import Partial

        name = type(p).__name__
        if name == "_MaskPartial":
            buffer = getattr(p, "mask_buffer", None)
            if buffer is None or getattr(buffer, "data", None) is None or local.is_meta:
                self.unknown = f"{name} whose mask is not materialized"
                return Partial(p.reduce_op), local
            local = local.clone()
            buffer.apply_mask(local)
            return Partial(p.reduce_op), local
        pre, post = getattr(p, "_pre_reduce_transform", None), getattr(p, "_post_reduce_transform", None)
        if name == "_NormPartial" and pre is not None and post is not None:
            # x^p on every mesh dim it is partial over, summed once over all of them, then ^(1/p) once.
            norms = {getattr(q, "norm_type", None) for q in self._partials}
            if norms and norms != {p.norm_type}:
                self.unknown = f"{name} of two norm types"
            elif not norms:
                self.post.append(post)
                local = pre(local)
            self._partials.append(p)
            return Partial(p.reduce_op), local
        if type(p)._reduce_value is not Partial._reduce_value or \
                type(p)._reduce_shard_value is not Partial._reduce_shard_value:
            self.unknown = name  # reduces in its own way: not rebuilt as a plain Partial
        return Partial(p.reduce_op), local


class _Arrival:
    __slots__ = ("rank", "position", "op", "reference", "args", "results", "template", "module", "line", "strategy")

    def __init__(self, rank, position, op, reference, args, results, template, module, line, strategy):
        self.rank = rank
        self.position = position  # the rank's index in the mesh's ranks (row-major)
        self.op = op  # its name in reports: "aten.mm.default", "local_map(fn)"
        self.reference = reference  # what computes the op on plain (global) tensors: (*args, **kwargs)
        self.args = args  # List[_Tensor], in the order of the flattened arguments
        self.results = results  # List[_Tensor]
        self.template = template  # (flat arguments with DTensors as _SLOT, tree spec)
        self.module = module
        self.line = line
        self.strategy = strategy


class OpChecker:
    """Shared by the ranks: collects each mesh's n-th op from every rank and checks it when the last one arrives."""

    def __init__(self, module_of: Callable[[int], str]):
        self.module_of = module_of
        self.lock = threading.Lock()
        self.pending: Dict[Tuple[Tuple[int, ...], Tuple[int, ...], int], Dict[int, _Arrival]] = {}
        self.checked = 0
        self.not_checked: "collections.Counter[str]" = collections.Counter()
        self.first: Optional[str] = None
        self.diverged: "collections.Counter[str]" = collections.Counter()
        self.modes: Dict[int, "OpCheckMode"] = {}

    # ---- arrivals ----------------------------------------------------------------------------------------------
    def arrive(self, key, arrival: _Arrival) -> None:
        """`key`: (the mesh's ranks, its shape, the op's number on it)."""
        ranks, mesh_shape = key[0], key[1]
        with self.lock:
            group = self.pending.setdefault(key, {})
            group[arrival.position] = arrival
            if len(group) < len(ranks):
                return
            del self.pending[key]
        self._check(key, mesh_shape, [group[p] for p in range(len(ranks))])

    def skip(self, reason: str) -> None:
        with self.lock:
            self.not_checked[reason] += 1

    # ---- checks ------------------------------------------------------------------------------------------------
    def _diverge(self, op: str, text: str) -> None:
        with self.lock:
            self.diverged[op] += 1
            if self.first is None:
                self.first = text

    def _where(self, a: _Arrival, ranks, n: int) -> str:
        return f"DTensor op #{n} on the mesh of ranks {_ranks(ranks)}, {a.op} in {a.module}, at {a.line}"

    def _check(self, key, mesh_shape, arrivals: List[_Arrival]) -> None:
        ranks, n = key[0], key[2]
        first = arrivals[0]
        ops = {a.op for a in arrivals}
        if len(ops) > 1:
            listing = "; ".join(f"rank {a.rank}: {a.op} at {a.line}" for a in arrivals)
            self._diverge(first.op, f"ranks {_ranks(ranks)} ran different DTensor ops as their op #{n} on mesh "
                                    f"{list(mesh_shape)}: {listing}")
            return
        where = self._where(first, ranks, n)
        uninitialized = (isinstance(first.reference, torch._ops.OpOverload) and
                         first.reference._schema.name.split("::")[-1] in _UNINITIALIZED) or \
            (bool(first.results) and all(t.empty for a in arrivals for t in a.results))
        for kind, index in (("argument", "args"), ("result", "results")):
            if kind == "result" and uninitialized:
                continue  # no values yet: replicas of an empty tensor need not agree
            for k in range(len(getattr(first, index))):
                if any(getattr(a, index)[k].empty for a in arrivals):
                    continue  # an argument with no values yet (written by this op, or a view of empty memory)
                odd = _odd_replicas([getattr(a, index)[k] for a in arrivals], mesh_shape)
                if odd is not None:
                    held, others = odd
                    self._diverge(first.op, f"{where}: {kind} {k} ({_placements(getattr(first, index)[k].placements)}) "
                                            f"is a replica that differs on rank{'s' if len(held) > 1 else ''} "
                                            f"{_ranks([ranks[p] for p in held])} from its replicas on ranks "
                                            f"{_ranks([ranks[p] for p in others])}")
                    return
        if not first.results:
            self.skip("no DTensor result")
            return
        unknown = next((t.unknown for a in arrivals for t in a.args + a.results if t.unknown), None)
        if unknown is not None:
            self.skip(f"a {unknown} placement")
            return
        if any(t.local.is_meta for t in first.args + first.results):
            self.skip("meta tensors (no values; layouts checked)")
            return
        try:
            expected = self._unsharded(first, mesh_shape, arrivals)
        except CapturedShard:  # a local_map function that reads a DTensor it was not given: no global meaning
            self.skip("a local_map function reads a DTensor outside its arguments")
            return
        except Exception as e:  # the op refuses the global tensors: counted as not checked, never as equal
            self.skip(f"the unsharded op raised {type(e).__name__}")
            return
        if len(expected) != len(first.results):  # results the reference cannot be matched with: not checked
            self.skip("the unsharded op gave another number of tensors")
            return
        for k, (got_parts, want) in enumerate(zip(zip(*[a.results for a in arrivals]), expected)):
            spec = got_parts[0]
            if uninitialized:  # no values: the layout's global shape only
                if tuple(spec.shape) != tuple(want.shape):
                    self._diverge(first.op, f"{where}: result {k} {_placements(spec.placements)} has global shape "
                                            f"{list(spec.shape)}, the unsharded op gives {list(want.shape)}")
                    return
                continue
            try:
                got = _rebuild(list(got_parts), mesh_shape)
            except ValueError as e:  # the ranks' pieces make no global tensor of that layout
                self._diverge(first.op, f"{where}: result {k} ({_placements(spec.placements)}): the ranks' local "
                                        f"results do not make one global tensor: {e}" + self._strategy(first))
                return
            if tuple(got.shape) != tuple(want.shape):
                self._diverge(first.op, f"{where}: result {k} {_placements(spec.placements)} has global shape "
                                        f"{list(got.shape)}, the unsharded op gives {list(want.shape)}"
                                        + self._strategy(first))
                return
            bad = _differs(got, want)
            if bad is not None:
                args = ", ".join(_placements(t.placements) for t in first.args)
                wrong = _wrong_ranks(list(got_parts), want, mesh_shape)
                on = f" on rank{'s' if len(wrong) > 1 else ''} {_ranks([ranks[p] for p in wrong])}" if wrong else ""
                self._diverge(first.op, f"{where}: result {k} ({_placements(spec.placements)}, from arguments "
                                        f"{args}) differs from the unsharded op{on}: {bad}" + self._strategy(first))
                return
        with self.lock:
            if uninitialized:
                self.not_checked["uninitialized values (layout checked)"] += 1
            else:
                self.checked += 1

    def _strategy(self, a: _Arrival) -> str:
        if not isinstance(a.reference, torch._ops.OpOverload):  # local_map: its own in_placements
            return f"; local_map ran it on the arguments as {a.strategy}" if a.strategy else ""
        return f"; upstream's strategy redistributed the arguments to {a.strategy}" if a.strategy else \
            "; upstream's strategy ran it on the arguments as placed"

    def _unsharded(self, first: _Arrival, mesh_shape, arrivals: List[_Arrival]) -> List[torch.Tensor]:
        flat, spec = first.template
        globals_ = [_rebuild(_agreed([a.args[k] for a in arrivals], mesh_shape)
                             if any(a.args[k].empty for a in arrivals) else [a.args[k] for a in arrivals], mesh_shape)
                    for k in range(len(first.args))]
        it = iter(globals_)
        flat = [next(it) if item is _SLOT else item for item in flat]
        args, kwargs = tree_unflatten(flat, spec)
        from .process_group import _REFERENCE

        _REFERENCE.active = True
        try:
            with _disable_current_modes(), torch.no_grad():
                out = first.reference(*args, **kwargs)
        finally:
            _REFERENCE.active = False
        leaves, _ = tree_flatten(out)
        return [t for t in leaves if isinstance(t, torch.Tensor)][:len(first.results)]

    # ---- the end -----------------------------------------------------------------------------------------------
    def summary(self) -> Tuple[str, bool]:
        with self.lock:
            lines = [f"dtsim run --check-ops: {self.checked} DTensor op{'s' if self.checked != 1 else ''} checked "
                     "against the unsharded op (replicas equal, global result equal)"]
            skipped = sum(self.not_checked.values())
            if skipped:
                lines.append(f"  not checked: {skipped} (" + ", ".join(
                    f"{reason}: {count}" for reason, count in sorted(self.not_checked.items()) if count) + ")")
            if self.pending:
                waiting = sum(len(v) for v in self.pending.values())
                self.diverged["(unmatched)"] += len(self.pending)
                lines.append(f"  {len(self.pending)} op{'s' if len(self.pending) != 1 else ''} reached by some ranks "
                             f"of their mesh only ({waiting} arrivals): ranks ran different numbers of DTensor ops")
                if self.first is None:
                    key, group = next(iter(self.pending.items()))
                    a = next(iter(group.values()))
                    self.first = (f"DTensor op #{key[2]} on mesh ranks {_ranks(key[0])}, {a.op} in {a.module} at "
                                  f"{a.line}, was reached by rank{'s' if len(group) > 1 else ''} "
                                  f"{_ranks(sorted(x.rank for x in group.values()))} only")
            if self.first is None:
                lines.append("  no divergence" if self.checked or skipped else "  no DTensor op ran")
                return "\n".join(lines), False
            lines.append(f"  FIRST DIVERGENCE: {self.first}")
            total = sum(self.diverged.values())
            lines.append(f"  {total} divergent op{'s' if total != 1 else ''} in all: " + ", ".join(
                f"{op} x{count}" for op, count in self.diverged.most_common()))
            return "\n".join(lines), True


def _storage_key(dt) -> int:
    try:
        return dt._local_tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return 0


def _ranks(ranks) -> str:
    ranks = list(ranks)
    return ", ".join(str(r) for r in ranks) if len(ranks) <= 8 else f"{ranks[0]}-{ranks[-1]} ({len(ranks)} ranks)"


def _coordinates(position: int, mesh_shape) -> List[int]:
    coords = []
    for size in reversed(mesh_shape):
        coords.append(position % size)
        position //= size
    return list(reversed(coords))


def _odd_replicas(parts: List[_Tensor], mesh_shape) -> Optional[Tuple[List[int], List[int]]]:
    """The positions whose local tensor differs from the majority of its replica set (ranks equal on every
    non-Replicate mesh dim), and that set's others; None when every replica set agrees."""
    from torch.distributed.tensor.placement_types import Replicate

    replicate = [isinstance(p, Replicate) for p in parts[0].placements]
    if not any(replicate):
        return None
    sets: Dict[Tuple[int, ...], List[int]] = collections.defaultdict(list)
    for position in range(len(parts)):
        coords = _coordinates(position, mesh_shape)
        sets[tuple(c for c, r in zip(coords, replicate) if not r)].append(position)
    for members in sets.values():
        groups: List[List[int]] = []
        for p in members:
            for g in groups:
                if _same(parts[g[0]].local, parts[p].local):
                    g.append(p)
                    break
            else:
                groups.append([p])
        if len(groups) > 1:
            groups.sort(key=len, reverse=True)
            odd = [p for g in groups[1:] for p in g]
            return sorted(odd), sorted(groups[0])
    return None


def _agreed(parts: List[_Tensor], mesh_shape) -> List[_Tensor]:
    """An argument with no values yet, its replicas made to agree (each takes its replica set's first): what the
    unsharded op reads of it is then one global tensor, as it is for the op it feeds (it writes over it)."""
    from torch.distributed.tensor.placement_types import Replicate

    replicate = [isinstance(p, Replicate) for p in parts[0].placements]
    first_of: Dict[Tuple[int, ...], int] = {}
    agreed = []
    for position, part in enumerate(parts):
        coords = _coordinates(position, mesh_shape)
        key = tuple(c for c, r in zip(coords, replicate) if not r)
        source = parts[first_of.setdefault(key, position)]
        copy = _Tensor.__new__(_Tensor)
        for slot in _Tensor.__slots__:
            setattr(copy, slot, getattr(part, slot))
        copy.local = source.local
        agreed.append(copy)
    return agreed


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_meta or b.is_meta:
        return True  # no values to compare: their layouts agree
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a, b) or torch.equal(torch.isnan(a), torch.isnan(b)) and
                    torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
    return bool(torch.equal(a, b))


_MESHES: Dict[Tuple[int, ...], Any] = {}  # dtsim meshes by shape: the positions of a mesh's ranks, row-major


def _rebuild(parts: List[_Tensor], mesh_shape) -> torch.Tensor:
    """The global tensor the ranks' local tensors make up, by dtsim's layouts (Partial reduced)."""
    import dtsim

    first = parts[0]
    mesh = _MESHES.get(tuple(mesh_shape))
    if mesh is None:
        mesh = _MESHES[tuple(mesh_shape)] = dtsim.init_device_mesh("cpu", tuple(mesh_shape))
    complex_ = first.local.is_complex()
    # dtsim's layouts hold real dtypes: a complex tensor is rebuilt as its real view (a trailing dim of 2).
    locals_ = {position: (torch.view_as_real(part.local.resolve_conj()) if complex_ else part.local).contiguous()
               for position, part in enumerate(parts)}
    shape = first.shape + ((2,) if complex_ else ())
    with _disable_current_modes():
        dt = dtsim.DTensor.from_local(locals_, mesh, _placements(first.placements)[1:-1], shape=shape)
        full = dt.full_tensor()
        if complex_:
            full = torch.view_as_complex(full)
        for post in first.post:
            full = post(full)
        return full


def _wrong_ranks(parts: List[_Tensor], want: torch.Tensor, mesh_shape) -> List[int]:
    """The positions whose local result differs from their piece of the unsharded result (none named for a Partial
    result: its pieces are not the ranks' own)."""
    import dtsim
    from torch.distributed.tensor.placement_types import Partial

    if any(isinstance(p, Partial) for p in parts[0].placements):
        return []
    complex_ = want.is_complex()
    with _disable_current_modes():
        pieces = dtsim.distribute_tensor((torch.view_as_real(want) if complex_ else want).contiguous(),
                                         _MESHES[tuple(mesh_shape)], _placements(parts[0].placements)[1:-1],
                                         src_data_rank=None).to_local()
        if complex_:
            pieces = [torch.view_as_complex(t.contiguous()) for t in pieces]
    return [p for p, (part, piece) in enumerate(zip(parts, pieces))
            if part.local.shape != piece.shape or _differs(part.local, piece) is not None]


def _differs(got: torch.Tensor, want: torch.Tensor) -> Optional[str]:
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, the unsharded op gives {want.dtype}"
    if not (got.is_floating_point() or got.is_complex()):
        wrong = (got != want)
        if not bool(wrong.any()):
            return None
        index = tuple(int(i) for i in wrong.nonzero()[0])
        return (f"{int(wrong.sum())} of {got.numel()} elements differ; first at {list(index)}: "
                f"{got[index].item()} vs {want[index].item()}")
    if got.is_complex():  # each of the real and imaginary parts within the dtype's tolerance
        return _differs(torch.view_as_real(got.resolve_conj()), torch.view_as_real(want.resolve_conj()))
    rtol = _RTOL.get(got.dtype, 1e-4)
    scale = max(1.0, float(want.abs().nan_to_num(0.0, 0.0, 0.0).max())) if want.numel() else 1.0
    diff = (got.double() - want.double()).abs()
    nan_mismatch = torch.isnan(got) != torch.isnan(want)
    wrong = (diff.nan_to_num(0.0) > rtol * scale) | nan_mismatch
    if not bool(wrong.any()):
        return None
    index = tuple(int(i) for i in wrong.nonzero()[0])
    nans = int(nan_mismatch.sum())
    return (f"{int(wrong.sum())} of {got.numel()} elements beyond {rtol:g} x {scale:.4g}"
            + (f" ({nans} NaN where the other is not)" if nans else "") + "; max |diff| "
            f"{float(diff.nan_to_num(0.0).max()):.6g}; first at {list(index)}: {got[index].item():.8g} vs "
            f"{want[index].item():.8g}")


class OpCheckMode(TorchDispatchMode):
    """One rank's op checks: every op with DTensor arguments or results goes to the shared `OpChecker`. A higher-order
    op (FlexAttention, ...) runs as it would without the mode, and one with DTensor arguments is counted as not
    checked."""

    # torch hands higher-order ops to a dispatch mode only where the mode says it takes them.
    supports_higher_order_operators = True

    def __init__(self, checker: OpChecker, rank: int):
        super().__init__()
        self.checker = checker
        self.rank = rank
        checker.modes[rank] = self
        self.seq: Dict[Tuple, int] = {}
        self.empty: set = set()  # the local storages of this rank's DTensors that hold no values yet
        self.meshes: Dict[Any, Tuple[Tuple[int, ...], Tuple[int, ...], int]] = {}

    def _mesh(self, mesh):
        known = self.meshes.get(mesh)
        if known is None:
            ranks = tuple(int(r) for r in mesh.mesh.flatten().tolist())
            known = (ranks, tuple(mesh.mesh.shape), ranks.index(self.rank))
            self.meshes[mesh] = known
        return known

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor

        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        dtensors = [x for x in flat if isinstance(x, DTensor)]
        if not dtensors:
            return func(*args, **kwargs)
        reason = "random" if _is_random(func) else \
            "loss_parallel's fused backward" if _fused_by_loss_parallel(func) else \
            "a higher-order op" if isinstance(func, torch._ops.HigherOrderOperator) else None
        if reason is not None:
            if self._mesh(dtensors[0].device_mesh)[2] == 0:  # counted once per op, by the mesh's first rank
                self.checker.skip(reason)
            return func(*args, **kwargs)
        strategy = _strategy(func, args, kwargs)
        return self.record(str(func), func, flat, spec, dtensors, lambda: func(*args, **kwargs), strategy)

    def _follow_values(self, reference, dtensors, inputs, out_tensors, results) -> None:
        """Which local storages hold no values yet: the results of `empty` and its kin, and the views of them (a
        `detach`) until an op writes them (`fill_`, `copy_`, an initializer)."""
        schema = getattr(reference, "_schema", None)
        if schema is None:
            return
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            # An op that writes an argument (`fill_`, `copy_`, a foreach initializer) gives every DTensor argument
            # values from here on: for one it did not write, that errs toward comparing its replicas, never away.
            for x in dtensors:
                self.empty.discard(_storage_key(x))
        made_empty = schema.name.split("::")[-1] in _UNINITIALIZED
        for x, t in zip(out_tensors, results):
            key = _storage_key(x)
            if made_empty:
                self.empty.add(key)
            t.empty = key in self.empty

    def record(self, name: str, reference, flat, spec, dtensors, run: Callable[[], Any], strategy=None):
        """Runs `run` (the op on this rank) and hands the checker its arguments and results."""
        from torch.distributed.tensor import DTensor

        # Copies: the check runs when the mesh's last rank reaches the op, and this rank may write these tensors in
        # place before then (this op, if in place; an optimizer step; a gradient accumulation).
        inputs = [_Tensor(x, x._local_tensor.detach().clone()) for x in dtensors]
        for x, t in zip(dtensors, inputs):
            t.empty = _storage_key(x) in self.empty
        out = run()
        out_tensors = [x for x in tree_flatten(out)[0] if isinstance(x, DTensor)]
        results = [_Tensor(x, x._local_tensor.detach().clone()) for x in out_tensors]
        self._follow_values(reference, dtensors, inputs, out_tensors, results)
        ranks, mesh_shape, position = self._mesh(dtensors[0].device_mesh)
        mesh_key = (ranks, mesh_shape)
        n = self.seq.get(mesh_key, 0) + 1
        self.seq[mesh_key] = n
        template = ([_SLOT if isinstance(x, DTensor) else x for x in flat], spec)
        from .scheduler import user_stack

        stack = user_stack(sys._getframe(1), limit=1)
        arrival = _Arrival(self.rank, position, name, reference, inputs, results, template,
                           self.checker.module_of(self.rank), stack[0] if stack else "?", strategy)
        self.checker.arrive((ranks, mesh_shape, n), arrival)
        return out


def _strategy(func, args, kwargs) -> Optional[str]:
    """The argument placements upstream's sharding propagation redistributes to before running the op locally, or
    None when it runs the op on the arguments as placed."""
    try:
        from torch.distributed.tensor import DTensor

        dispatcher = DTensor._op_dispatcher
        info = dispatcher.unwrap_to_op_info(func, args, kwargs)
        sharding = dispatcher.sharding_propagator.propagate_op_sharding(info.schema)
        if not getattr(sharding, "needs_redistribute", False) or sharding.redistribute_schema is None:
            return None
        return ", ".join(_placements(s.placements) for s in sharding.redistribute_schema.args_spec)
    except Exception:  # an op upstream handles outside propagation (custom handlers): nothing to name
        return None


def _local_map_wrapped(session, original):
    """Checks every `local_map` call as one op: its function on the global tensors against the global results."""
    from torch.distributed.tensor import DTensor

    checker, rank_of = session.checker, session.rank_of
    # Its parameters by name: torch releases add some before the function's own arguments (2.15: enable_spmd_types).
    signature = inspect.signature(original)

    def wrapped(*all_args, **all_kwargs):
        def call():
            return original(*all_args, **all_kwargs)

        bound = signature.bind(*all_args, **all_kwargs).arguments
        func, in_placements = bound["func"], bound.get("in_placements")
        args, kwargs = bound.get("args", ()), bound.get("kwargs", {})
        rank = rank_of()
        mode = checker.modes.get(rank) if rank is not None else None
        flat, spec = tree_flatten((args, kwargs))
        dtensors = [x for x in flat if isinstance(x, DTensor)]
        if mode is None or not dtensors:
            return call()
        name = f"local_map({getattr(func, '__qualname__', type(func).__name__)})"
        try:
            placed = ", ".join(_placements(p) for p in in_placements if p is not None) if in_placements else None
        except (TypeError, ValueError):
            placed = None
        return mode.record(name, func, flat, spec, dtensors, call, placed)

    return wrapped


def _as_one_rank(value):
    """While a reference runs, the program's rank queries answer as the one rank of a world of one: a local_map
    function that offsets by its rank or mesh coordinate then computes the unsharded result."""
    from .process_group import _REFERENCE

    def make(session, original):
        def query(*args, **kwargs):
            return value(*args, **kwargs) if _REFERENCE.active else original(*args, **kwargs)

        return query

    return make


class CapturedShard(RuntimeError):
    """Raised while a reference runs when the function reads a DTensor it was not given (a module's sharded weight
    read through `self`): its global computation cannot be known from its arguments."""


def _to_local(session, original):
    from .process_group import _REFERENCE

    def to_local(self, *args, **kwargs):
        if _REFERENCE.active:
            raise CapturedShard("the unsharded reference read a DTensor's local shard outside its arguments")
        return original(self, *args, **kwargs)

    return to_local


def _checking(config) -> bool:
    return config.check_ops


CHECK_OPS_ENTRIES = patches.register("check_ops", [
    patches.Replace("torch.distributed.tensor.experimental._func_map._local_map_wrapped", _local_map_wrapped,
                    when=_checking),
    patches.Replace("torch.distributed.get_rank", _as_one_rank(lambda *a, **k: 0), when=_checking),
    patches.Replace("torch.distributed.get_world_size", _as_one_rank(lambda *a, **k: 1), when=_checking),
    patches.Replace("torch.distributed.device_mesh.DeviceMesh.get_local_rank",
                    _as_one_rank(lambda self, *a, **k: 0), when=_checking),
    patches.Replace("torch.distributed.device_mesh.DeviceMesh.get_coordinate",
                    _as_one_rank(lambda self: [0] * self.ndim), when=_checking),
    patches.Replace("torch.distributed.device_mesh.DeviceMesh.size",
                    _as_one_rank(lambda self, mesh_dim=None: 1), when=_checking),
    patches.Replace("torch.distributed.tensor.DTensor.to_local", _to_local, when=_checking,
                    why="a local_map reference that reads a captured DTensor is not checked, never called equal"),
    patches.Read("torch.distributed.tensor.DTensor._op_dispatcher"),
])
