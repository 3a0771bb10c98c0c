"""Every rank's events, in the order the rank ran them: each DTensor op and each collective, the one vocabulary that
`dtsim.record(path, ops=True)` (real ranks), `dtsim record -- torchrun ...` and `dtsim run --trace` (simulated ranks)
write as a recording's "events" and `dtsim trace-diff` aligns rank by rank (docs/recording.md, "Events").

An event is one of:
- **op**: a DTensor op as the rank dispatched it (`aten.mm.default`), with the module and pass it ran in, the
  program's line, every DTensor argument's and result's placements, and a digest of every argument's and result's
  local tensor on this rank (taken before and after the op);
- **collective**: a c10d collective as the rank issued it (`dist.all_reduce`, FSDP2's all-gathers and
  reduce-scatters, DDP's all-reduces, functional collectives issued outside DTensor op dispatch), with its process
  group's ranks and a digest of what the rank sent and what it received.

A collective issued *inside* a DTensor op (an implicit redistribution) belongs to that op: the op's result digest
covers it, and the recording's redistribution rows list it. Point-to-point sends and receives are not events.

A digest is the local tensor's shape, dtype, XXH3 hash of its bytes and, for floating-point tensors, a sketch: the
sum of its elements weighted by a fixed sequence (w(i) = 2 frac(0.618... i + 0.25) - 1: ShardDigest in
include/dtsim/core/trace_recorder.h), with the same weighted sum of absolute values as its scale. Two digests of
floating-point tensors whose hashes differ are still equal within rounding when their sketches
differ by at most the dtype's tolerance times the scale (the diff's rule: docs/recording.md); a corrupted element, a
permutation or a scaled tensor moves the sketch far past it.

A collective's received bytes are digested when the rank waits for its work (the recorder hooks `Work.wait`), when
the work is found complete at the rank's next event, or at the end; an event whose result the rank never waited for
before the end says so (`"at": "end"`). An output buffer written in place before then (its version counter moved: DDP
divides its buckets once its own C++ wait returns) is marked `"written": true`: the diff then counts a differing output
as not checked, never as a divergence.

Provenance, for a diff's *input* cause (an argument differs while everything the rank recorded agreed):
- `"from"`, beside an event's inputs where one is known: per input, the index in the rank's events of the last event
  that wrote that input's storage (a collective's received bytes, a DTensor op's results or the arguments it wrote);
  `{"event": I, "op": ..., "line": ...}` where a plain-tensor op not recorded as an event (FSDP2's copy-out
  `fsdp.split_with_sizes_copy`, a `copy_`) wrote it since, from that event's bytes or over them; null where no event
  wrote it;
- `"first_read"` on a collective: its received bytes hashed again (no sketch: the hash is compared with the digest at
  completion, bit for bit) when an op first touches them after that digest, with that op and its line, so a diff tells bytes changed after the collective completed (a transport
  or a program writing them outside the recorded ops) from bytes the collective delivered.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _library_files

from . import _C

# c10d's dispatcher ops (torch.ops.c10d.*), the collectives every ProcessGroup call goes through, by dtsim's collective
# kinds: op name -> (kind, argument holding the outputs, argument holding the inputs, argument holding the group).
# In-place collectives read and write the same argument.
_C10D = {
    "allreduce_": ("all_reduce", 0, 0, 1),
    "allreduce_coalesced_": ("all_reduce", 0, 0, 1),
    "broadcast_": ("broadcast", 0, 0, 1),
    "allgather_": ("all_gather", 0, 1, 2),
    "_allgather_base_": ("all_gather", 0, 1, 2),
    "allgather_coalesced_": ("all_gather", 0, 1, 2),
    "allgather_into_tensor_coalesced_": ("all_gather", 0, 1, 2),
    "reduce_scatter_": ("reduce_scatter", 0, 1, 2),
    "_reduce_scatter_base_": ("reduce_scatter", 0, 1, 2),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 0, 1, 2),
    "alltoall_base_": ("all_to_all", 0, 1, 2),
    "alltoall_": ("all_to_all", 0, 1, 2),
    "reduce_": ("reduce", 0, 0, 1),
    "gather_": ("gather", 0, 1, 2),
    "scatter_": ("scatter", 0, 1, 2),
}
# Functional collectives (torch.ops._c10d_functional.*) issued outside DTensor op dispatch: (kind, group argument).
_FUNCTIONAL = {
    "all_gather_into_tensor": ("all_gather", 2),
    "reduce_scatter_tensor": ("reduce_scatter", 3),
    "all_reduce": ("all_reduce", 2),
    "all_to_all_single": ("all_to_all", 3),
    "broadcast": ("broadcast", 2),
}
try:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor as _AsyncCollectiveTensor
except ImportError:  # a torch without distributed: no functional collectives to wait for
    class _AsyncCollectiveTensor:  # noqa: D101
        pass


_DTYPE_NAMES: Dict[Any, str] = {}  # torch.float32 -> "float32"


def digest(t: torch.Tensor, sketch: bool = True) -> Dict[str, Any]:
    """One local tensor's digest (module docstring; the hash and sketch are dtsim._C.shard_digest's, one pass in C++).
    `sketch=False`: the hash alone (dtsim._C.shard_hash, several times faster), for a comparison with an earlier digest
    of the same bytes. Runs no op a dispatch mode above would record."""
    if isinstance(t, _AsyncCollectiveTensor):
        # A functional collective's result not yet waited for (RowwiseParallel's output under a dispatch mode, such
        # as dtsim run's memory meter): a wrapper without data of its own. Its value is the waited tensor, which the
        # op about to read it waits for anyway.
        t = t.trigger_wait()
    dtype = _DTYPE_NAMES.get(t.dtype)
    if dtype is None:
        dtype = _DTYPE_NAMES[t.dtype] = str(t.dtype).removeprefix("torch.")
    if t.is_meta:
        return {"shape": list(t.shape), "dtype": dtype, "hash": None, "unavailable": "meta tensor"}
    try:
        if not sketch:
            return {"shape": list(t.shape), "dtype": dtype, "hash": _C.shard_hash(t)}
        hash_, weighted, scale = _C.shard_digest(t)  # reads the data only: no autograd, no op dispatched
    except RuntimeError as e:  # a tensor whose data is not readable (storage not allocated): not digested
        return {"shape": list(t.shape), "dtype": dtype, "hash": None, "unavailable": str(e).split("\n")[0][:200]}
    out: Dict[str, Any] = {"shape": list(t.shape), "dtype": dtype, "hash": hash_}
    if weighted is not None:
        out["sketch"], out["scale"] = weighted, scale
    return out


def _tensors(value) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _joined(tensors: List[torch.Tensor]) -> torch.Tensor:
    """Several buffers as one digestible tensor: their bytes one after another (one tensor as it is)."""
    if len(tensors) == 1:
        return tensors[0]
    if not tensors:
        return torch.empty(0, dtype=torch.uint8)
    if len({t.dtype for t in tensors}) == 1:
        return torch.cat([t.detach().reshape(-1) for t in tensors])
    return torch.cat([t.detach().reshape(-1).view(torch.uint8) for t in tensors])


_OP_NAMES: Dict[Any, str] = {}  # an OpOverload -> "aten.mm.default"


def _op_name(func) -> str:
    name = _OP_NAMES.get(func)
    if name is None:
        name = _OP_NAMES[func] = str(func)
    return name


_PLACEMENT_TEXTS: Dict[Any, str] = {}  # a DTensor's placements (a tuple of Placements) -> "[S(0), R]"


def _placements(dt) -> str:
    placements = dt.placements
    try:
        return _PLACEMENT_TEXTS[placements]
    except KeyError:
        pass
    except TypeError:  # placements that do not hash: not cached
        return _placements_text(placements)
    text = _PLACEMENT_TEXTS[placements] = _placements_text(placements)
    return text


def _placements_text(placements) -> str:
    from . import _one_placement_text

    return "[" + ", ".join(_one_placement_text(p, "placements") for p in placements) + "]"


_DTENSOR: List[type] = []


def _dtensor_type() -> type:
    """torch.distributed.tensor.DTensor, imported on first use (an import statement costs microseconds per op)."""
    if not _DTENSOR:
        from torch.distributed.tensor import DTensor

        _DTENSOR.append(DTensor)
    return _DTENSOR[0]


_library_files.add_library_dir(os.path.dirname(torch.__file__))
is_library_file = _library_files.is_library_file


def program_line(depth: int = 1) -> str:
    """The innermost frame of the caller's stack that is the program's own (not torch's, dtsim's or the standard
    library's wrappers), as `file:line`; "?" when there is none."""
    import sys

    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not is_library_file(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class _Waiting:
    """A collective's event whose received bytes are digested when the program waits for its work, or when a later
    event finds it complete. A buffer written in place since the collective was issued (`versions`: its version
    counters then; a communication hook's post-processing, as DDP's division of its buckets once its own C++ wait
    returns) may no longer hold what the collective delivered: the event is marked `"written"`."""
    __slots__ = ("event", "outputs", "versions")

    def __init__(self, event: Dict[str, Any], outputs: List[torch.Tensor]):
        self.event = event
        self.outputs = outputs
        self.versions = [t._version for t in outputs]

    def _written(self) -> bool:
        return any(t._version != v for t, v in zip(self.outputs, self.versions))

    def digest(self, log: "EventLog") -> None:
        self.event["outputs"] = [digest(_joined(self.outputs))]
        if self._written():
            # The bytes may no longer be what the collective delivered: the diff judges them equal or not
            # checked, never different.
            self.event["written"] = True
        log._await_first_read(self.event, self.outputs)


class _Unread:
    """A collective's received buffers, digested at completion and not touched by an op since: the op that first
    touches one of their storages (views aside) has them digested again first, as the event's "first_read". Holds the
    buffers weakly: a buffer gone before any op touched it leaves the event without a first read."""
    __slots__ = ("event", "buffers", "storages")

    def __init__(self, event: Dict[str, Any], buffers: List[Any], storages: Tuple[int, ...]):
        self.event = event
        self.buffers = buffers  # weak references to the received tensors
        self.storages = storages  # their storages' data addresses


class EventLog:
    """The events of the ranks this process runs, per rank. `where(rank)` names the module and pass a rank runs now
    ((path, "forward" | "backward")); `line()` the program's line."""

    def __init__(self, where: Callable[[int], Tuple[str, str]], line: Callable[[], str],
                 t0: Optional[float] = None):
        self.where = where
        self.line = line
        # Events' "t_us" count from here (time.perf_counter(): the recorder's start, each rank's own clock).
        self.t0 = time.perf_counter() if t0 is None else t0
        self.events: Dict[int, List[Dict[str, Any]]] = {}
        # rank -> its memory at module boundaries, in order (the recording's "memory"); where the bytes come from.
        self.memory: Dict[int, List[Dict[str, Any]]] = {}
        self.memory_source: Optional[str] = None
        # A real CPU rank's memory meter (run.modules.Tracker, metered): told every op's outputs; None elsewhere.
        self.meter: Any = None
        self.waiting: Dict[int, _Waiting] = {}  # id(work) -> the event waiting for it
        self.works: Dict[int, Any] = {}  # id(work) -> work (kept alive while waiting)
        self.lock = threading.Lock()
        self.groups: Dict[int, Tuple[Any, List[int]]] = {}  # id(ProcessGroup) -> (it, its ranks)
        self.meshes: Dict[int, Tuple[Any, List[Any]]] = {}  # id(DeviceMesh) -> (it, its ranks as nested lists)
        self.in_op: Dict[int, int] = {}  # rank -> DTensor ops it is inside (their collectives are the op's)
        self.simulated = False  # dtsim run: the simulated process group reports collectives (arrive, complete)
        self.unsupported: Optional[str] = None  # why ops were not recorded (LocalTensorMode)
        # A tensor's layout (its storage, that storage's data address, its offset, shape, strides, dtype and device)
        # -> (a weak reference to the tensor digested, its version, its digest, epoch); an entry goes when that
        # tensor does. Two tensors with one layout over one storage hold the same bytes, so a view that another
        # tensor already showed (`detach`, a transpose transposed back) reuses its digest. A digest is reused while
        # the tensor digested lives and still holds that storage at that address (so neither the storage's nor the
        # data's address can name another's: a storage freed in place, as FSDP2's resize_(0), leaves its data's
        # address to the next allocation), both tensors keep the version it was taken at, and no op wrote the
        # storage since. Versions alone do not see every write: a local tensor written by DTensor's dispatch keeps
        # its version (the write runs below autograd's version bump), FSDP2 copies its all-gathered parameters out
        # with their versions preserved and frees and reallocates their storage in place (resize_). So every op
        # that writes a tensor (its schema's mutable arguments) counts one epoch and marks the storages it wrote; a
        # digest older than its storage's last write is redone.
        self.digests: Dict[Tuple[Any, ...], Tuple[Any, int, Dict[str, Any], int]] = {}
        # DTSIM_RECORD_DIGEST_CACHE=0: every tensor digested at every use (the cache's reference, for tests).
        self.cache_digests = os.environ.get("DTSIM_RECORD_DIGEST_CACHE", "1") != "0"
        self.epoch = 0
        self.writes: Dict[int, int] = {}  # storage address -> the epoch of the last op that wrote it
        # Collectives whose work has not completed: id(work) -> (work, event, storage addresses of what it writes).
        # An op that touches one of those storages before the work completes reads (or writes) bytes that may not
        # have arrived: the collective's event gets "read_before_wait" (the op and its line), once.
        self.pending: Dict[int, Tuple[Any, Dict[str, Any], frozenset]] = {}
        self.pending_storages: frozenset = frozenset()  # every pending collective's storages, for the per-op test
        # Provenance (the module docstring's "from"): rank -> storage address -> (a weak reference to the storage, the
        # index of the event that last wrote it in the rank's events, the plain op that wrote it since: {"op",
        # "line"} or None). An entry is valid while that storage lives at that address (FSDP2's resize_(0) frees
        # the data in place: the next allocation's address names another's bytes).
        self.producers: Dict[int, Dict[int, Tuple[Any, int, Optional[Dict[str, str]]]]] = {}
        self.producers_kept: Dict[int, int] = {}  # rank -> its live entries at the last pruning
        # Collectives digested at completion whose received bytes no op touched since: storage address -> _Unread.
        self.unread: Dict[int, _Unread] = {}

    def _digest(self, t: torch.Tensor) -> Dict[str, Any]:
        if not self.cache_digests:
            return digest(t)
        where = _storage_identity(t)
        if not where[1]:  # nothing to key it by (meta, a wrapper without storage): digested at every use
            return digest(t)
        key = (where, t.storage_offset(), t.shape, t.stride(), t.dtype, t.device)
        version = t._version
        known = self.digests.get(key)
        if known is not None and known[1] == version and self.writes.get(where[1], 0) <= known[3]:
            held = known[0]()
            if held is not None and held._version == version and _storage_identity(held) == where:
                return known[2]
        d = digest(t)
        try:
            ref = weakref.ref(t, functools.partial(_forget_digest, self.digests, key))
        except TypeError:  # a tensor that takes no weak reference: not cached
            return d
        self.digests[key] = (ref, version, d, self.epoch)
        return d

    def _wrote(self, tensors: List[torch.Tensor]) -> None:
        """`tensors` were just written in place (by an op's mutable arguments; a DTensor op's: their local tensors)."""
        self.epoch += 1
        for t in tensors:
            self.writes[_storage_of(t)] = self.epoch

    def _add(self, rank: int, event: Dict[str, Any]) -> int:
        """Appends `event` to the rank's events, with its module, pass and line; returns its index there."""
        module, pass_ = self.where(rank)
        event["module"], event["pass"], event["line"] = module, pass_, self.line()
        events = self.events.setdefault(rank, [])
        events.append(event)
        return len(events) - 1

    # ---- provenance ----
    def _produced(self, rank: int, index: int, tensors: List[torch.Tensor]) -> None:
        """Event `index` of `rank` wrote the storages of `tensors`."""
        producers = self.producers.setdefault(rank, {})
        for t in tensors:
            storage = _live_storage(t)
            if storage is not None:
                producers[storage.data_ptr()] = (weakref.ref(storage), index, None)
        if len(producers) > self.producers_kept.get(rank, 0) * 2 + 4096:
            # Entries of storages gone: dropped once they outnumber the live ones (an address reused overwrites its
            # own, so this runs rarely).
            for ptr in [p for p, known in producers.items() if known[0]() is None]:
                del producers[ptr]
            self.producers_kept[rank] = len(producers)

    def _producer(self, rank: int, t: torch.Tensor) -> Optional[Tuple[Any, int, Optional[Dict[str, str]]]]:
        producers = self.producers.get(rank)
        if not producers:
            return None
        storage = _live_storage(t)
        if storage is None:
            return None
        known = producers.get(storage.data_ptr())
        if known is None or known[0]() is not storage:
            return None
        return known

    def _sources(self, rank: int, tensors: List[torch.Tensor]) -> Optional[List[Any]]:
        """The event's "from": per tensor, the index of the event that last wrote its storage, with the plain op
        that wrote it since where one did; None where no tensor's is known."""
        if not self.producers.get(rank):
            return None
        out: List[Any] = []
        for t in tensors:
            known = self._producer(rank, t)
            if known is None:
                out.append(None)
            elif known[2] is None:
                out.append(known[1])
            else:
                out.append(dict(known[2], event=known[1]))
        return out if any(x is not None for x in out) else None

    def _plain_write(self, rank: int, func, read: List[torch.Tensor], written: List[torch.Tensor]) -> None:
        """A plain-tensor op (no event) wrote `written` from `read`: their storages' producer becomes that of the
        first read tensor with one (a copy from an event's bytes), else stays their own (a write over them), with
        this op as the writer since; storages no event wrote stay without one."""
        if not self.producers.get(rank):
            return
        source = None
        for t in read:
            source = self._producer(rank, t)
            if source is not None:
                break
        via = None
        producers = self.producers[rank]
        for t in written:
            known = source if source is not None else self._producer(rank, t)
            storage = _live_storage(t)
            if known is None or storage is None:
                continue
            if via is None:
                via = {"op": _op_name(func), "line": self.line()}
            producers[storage.data_ptr()] = (weakref.ref(storage), known[1], via)

    def _await_first_read(self, event: Dict[str, Any], received: List[torch.Tensor]) -> None:
        """`event`'s received bytes were digested: the first op that touches them has them digested again. The
        entry goes when a buffer does (nothing of it is left to read)."""
        storages = tuple(p for p in (_storage_of(t) for t in received) if p)
        if not storages:
            return
        unread = _Unread(event, [], storages)
        forget = functools.partial(_forget_unread, self.unread, unread)
        try:
            unread.buffers = [weakref.ref(t, forget) for t in received]
        except TypeError:  # a tensor that takes no weak reference: no first read
            return
        for ptr in storages:
            self.unread[ptr] = unread

    def check_first_reads(self, func, tensors: List[torch.Tensor]) -> None:
        """Digests again the received bytes of each collective whose storage `func` is first to touch since their
        digest at completion (before it runs), as that event's "first_read"."""
        unread = self.unread
        for t in tensors:
            local = getattr(t, "_local_tensor", None)
            if local is not None:
                t = local
            entry = unread.get(_storage_of(t))
            if entry is None:
                continue
            _forget_unread(unread, entry)
            buffers = [ref() for ref in entry.buffers]
            if any(b is None for b in buffers):
                continue  # a buffer is gone: what the op reads is another tensor's
            # The hash alone: it is compared with the digest at completion, bit for bit.
            entry.event["first_read"] = {"op": _op_name(func), "line": self.line(),
                                         "outputs": [digest(_joined(buffers), sketch=False)]}

    def _group(self, pg) -> List[int]:
        """The ranks of `pg`, a ProcessGroup or the boxed one c10d's dispatcher ops hand. The box is a new object per
        call, so the cache is keyed by the group it holds, and holds that group (its id cannot be reused while it is a
        key; unboxing one group again returns the same object): a key by id() of a box that was freed is reused by the
        next box, whatever group it holds."""
        from torch.distributed import distributed_c10d as c10d

        if isinstance(pg, torch.ScriptObject):
            pg = c10d.ProcessGroup.unbox(pg)
        known = self.groups.get(id(pg))
        if known is None:
            known = self.groups[id(pg)] = (pg, [int(r) for r in c10d.get_process_group_ranks(pg)])
        return known[1]

    # ---- ops ----
    def op(self, rank: int, func, dtensors_in: List[Any], run: Callable[[], Any], written: List[Any] = ()) -> Any:
        """Records one DTensor op. `written`: the DTensor arguments the op writes in place (its schema's mutable
        arguments); their digests after the op are its outputs where it returns no DTensor (the in-place foreach
        ops)."""
        DTensor = _dtensor_type()
        if type(dtensors_in[0]._local_tensor).__name__ == "LocalTensor":
            self.unsupported = "LocalTensorMode (every rank's shard in one tensor)"
            return run()
        self.settle()
        if self.unread:  # a collective settled just now: this op may be the first to touch its bytes
            self.check_first_reads(func, dtensors_in)
        inputs = [self._digest(x._local_tensor) for x in dtensors_in]
        sources = self._sources(rank, [x._local_tensor for x in dtensors_in])
        args = [_placements(x) for x in dtensors_in]
        self.in_op[rank] = self.in_op.get(rank, 0) + 1
        start = time.perf_counter()
        try:
            out = run()
        finally:
            self.in_op[rank] -= 1
        end = time.perf_counter()
        if written:
            self._wrote([x._local_tensor for x in written])
        results = [x for x in _tensors(out) if isinstance(x, DTensor)] or list(written)
        event = {"kind": "op", "op": _op_name(func), "mesh": self._mesh(dtensors_in[0]), "args": args,
                 "results": [_placements(x) for x in results], "inputs": inputs,
                 "outputs": [self._digest(x._local_tensor) for x in results],
                 "t_us": self._us(start), "dur_us": (end - start) * 1e6}
        if sources is not None:
            event["from"] = sources
        index = self._add(rank, event)
        # What the op wrote: its results, unless it is a view (its result is its argument's storage, which it did
        # not write), and the arguments it wrote in place.
        self._produced(rank, index, ([] if func.is_view else [x._local_tensor for x in results]) +
                       [x._local_tensor for x in written if not any(x is r for r in results)])
        return out

    def _mesh(self, dt) -> List[Any]:
        """The ranks of the op's device mesh as nested lists (its shape), one list object per mesh; the recording
        writes each mesh once ("meshes") and the events refer to it by index."""
        mesh = dt.device_mesh
        known = self.meshes.get(id(mesh))
        if known is None or known[0] is not mesh:
            known = self.meshes[id(mesh)] = (mesh, mesh.mesh.tolist())
        return known[1]

    def boundary(self, rank: int, module: str, pass_: str, at: str, live: Optional[int], peak: Optional[int]) -> None:
        """A module boundary of `rank`: its live bytes then (the meter of dtsim run, or of a real rank without CUDA),
        else the CUDA allocator's where this process uses CUDA; nothing where neither measures."""
        source = self.memory_source
        if live is None:
            if not torch.cuda.is_initialized():  # a cheap flag: a CPU rank records no memory
                return
            live, peak, source = int(torch.cuda.memory_allocated()), None, "torch.cuda.memory_allocated"
        sample = {"module": module, "pass": pass_, "at": at, "bytes": int(live), "t_us": self._us(time.perf_counter())}
        if peak is not None:
            sample["peak"] = int(peak)
        self.memory_source = source or "dtsim run"
        self.memory.setdefault(rank, []).append(sample)

    def _us(self, t: float) -> float:
        """`t` (a time.perf_counter() reading) as an event's "t_us"."""
        return max(0.0, (t - self.t0) * 1e6)

    def took(self, event: Optional[Dict[str, Any]], start: float) -> None:
        """Sets a collective's "dur_us": from `start` (its issue) until now."""
        if event is not None:
            event["dur_us"] = (time.perf_counter() - start) * 1e6

    # ---- collectives ----
    def arrive(self, rank: int, kind: str, group: List[int], sent: List[torch.Tensor],
               received: Optional[List[torch.Tensor]] = None) -> Optional[Dict[str, Any]]:
        """A collective `rank` issues now: its event (outputs to come), or None inside a DTensor op (the op's).
        `received`: the buffers it writes, where known before it runs (their storages' producer is this event)."""
        if self.in_op.get(rank):
            return None
        self.settle()
        event = {"kind": "collective", "op": kind, "group": group, "inputs": [digest(_joined(sent))],
                 "outputs": None, "t_us": self._us(time.perf_counter())}
        sources = self._sources(rank, sent)
        if sources is not None:
            # One digest of every buffer sent: its source is the first buffer's that has one.
            event["from"] = [next(x for x in sources if x is not None)]
        index = self._add(rank, event)
        if received is not None:
            self._produced(rank, index, received)
        return event

    def complete(self, event: Dict[str, Any], received: List[torch.Tensor], rank: Optional[int] = None,
                 index: Optional[int] = None) -> None:
        """`event`'s collective delivered `received` (complete now): their digest; with `index` (the event's in the
        rank's events, where `received` was not known at arrive), their storages' producer."""
        event["outputs"] = [digest(_joined(received))]
        if index is not None:
            self._produced(rank, index, received)
        self._await_first_read(event, received)

    def collective(self, rank: int, kind: str, group: List[int], sent: List[torch.Tensor],
                   received: List[torch.Tensor], run: Callable[[], Any], work_of: Callable[[Any], Any]) -> Any:
        event = self.arrive(rank, kind, group, sent, received)
        start = time.perf_counter()
        out = run()
        self.took(event, start)
        if event is None:
            return out
        work = work_of(out)
        if work is None:
            self.complete(event, received)
        else:
            # Digested when the program waits, or at its next event once complete: what it then reads (a work
            # complete already may still be written before the program looks, as a faulty transport would).
            event["outputs"] = None
            waiting = _Waiting(event, received)
            storages = frozenset() if _delivered(work) else \
                frozenset(p for p in (_storage_of(t) for t in received) if p)
            with self.lock:
                self.waiting[id(work)] = waiting
                self.works[id(work)] = work
                if storages:
                    self.pending[id(work)] = (work, event, storages)
                    self.pending_storages = self.pending_storages | storages
        return out

    def forget(self, work_ids) -> None:
        """Drops pending collectives (their program waited, or their work completed): call with the lock held."""
        for k in work_ids:
            self.pending.pop(k, None)
        self.pending_storages = frozenset().union(*(s for _, _, s in self.pending.values()))

    def check_reads(self, func, tensors: List[torch.Tensor]) -> None:
        """Marks the pending collectives whose output storage `func` touches now, before their work completed (the
        first such op); forgets those found completed. Costs a storage lookup per tensor argument while any
        collective is pending."""
        pending = self.pending_storages
        touched = []
        for t in tensors:
            local = getattr(t, "_local_tensor", None)
            if local is not None:
                t = local
            ptr = _storage_of(t)
            if ptr in pending:
                touched.append(ptr)
        if not touched:
            return
        with self.lock:
            items = [(k, v) for k, v in self.pending.items() if any(p in v[2] for p in touched)]
        done = []
        for k, (work, event, _) in items:
            if _delivered(work):
                done.append(k)
            elif "read_before_wait" not in event:
                event["read_before_wait"] = {"op": str(func), "line": self.line()}
        if done:
            with self.lock:
                self.forget(done)

    def on_wait(self, work) -> None:
        with self.lock:
            waiting = self.waiting.pop(id(work), None)
            self.works.pop(id(work), None)
            if id(work) in self.pending:
                self.forget([id(work)])
        if waiting is not None:
            waiting.digest(self)

    def settle(self, at_end: bool = False) -> None:
        """Digests the received bytes of every collective whose work has completed (at the end: of all)."""
        if not self.waiting:
            return
        with self.lock:
            done = [k for k, w in self.works.items() if at_end or _completed(w)]
            items = [(self.waiting.pop(k), self.works.pop(k)) for k in done]
            if at_end:
                self.forget(list(self.pending))
        for waiting, work in items:
            if at_end:
                try:
                    work.wait()
                except Exception:  # noqa: BLE001  a failed collective: its bytes are not what the program got
                    waiting.event["outputs"] = None
                    waiting.event["unavailable"] = "its work failed"
                    continue
                waiting.event["at"] = "end"
            waiting.digest(self)


def _forget_unread(unread: Dict[int, Any], entry: Any, ref=None) -> None:
    """A collective's entry in EventLog.unread goes (its first read was taken, or one of its buffers is gone)."""
    for ptr in entry.storages:
        if unread.get(ptr) is entry:
            del unread[ptr]


def _forget_digest(digests: Dict[Tuple[Any, ...], Any], key: Tuple[Any, ...], ref) -> None:
    """A cached digest's tensor is gone: its entry goes (unless the layout already names a newer tensor's)."""
    entry = digests.get(key)
    if entry is not None and entry[0] is ref:
        del digests[key]


def _storage_identity(t: torch.Tensor) -> Tuple[int, int]:
    """(the address of a tensor's storage object, the address of its data); (0, 0) for one without (meta, sparse)."""
    try:
        storage = t.untyped_storage()
        return storage._cdata, storage.data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0, 0


def _live_storage(t: torch.Tensor) -> Any:
    """A tensor's storage object (one per storage while it lives), or None for one without data (meta, a wrapper),
    not yet allocated, or that takes no weak reference."""
    try:
        storage = t.untyped_storage()
        if not storage.data_ptr():
            return None
        weakref.ref(storage)
        return storage
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _storage_of(t: torch.Tensor) -> int:
    """The address of a tensor's storage's data; 0 for one without (meta, sparse)."""
    return _storage_identity(t)[1]


def _delivered(work) -> bool:
    """Whether a collective's result is there for the program to read: its work completed, or its future is done
    (a backend marks the future first, and a waiter on the future, as DDP's reducer, may read before the work says
    it completed)."""
    if _completed(work):
        return True
    try:
        return bool(work.get_future().done())
    except Exception:  # noqa: BLE001  a work without a future
        return False


def _completed(work) -> bool:
    try:
        return bool(work.is_completed())
    except Exception:  # noqa: BLE001
        return False


class EventMode(TorchDispatchMode):
    """One rank's event recorder: every op with DTensor arguments, every c10d collective and every functional
    collective outside DTensor dispatch goes to the log."""

    def __init__(self, log: EventLog, rank: int):
        super().__init__()
        self.log = log
        self.rank = rank

    # torch hands higher-order ops to a dispatch mode only where the mode says it takes them.
    supports_higher_order_operators = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):  # FlexAttention: run, not recorded (docs/recording.md)
            return func(*args, **kwargs)
        written_arguments = _written_arguments(func)
        if not written_arguments:
            return self._dispatch(func, types, args, kwargs, ())
        written = []
        for i, name in written_arguments:
            written += _tensors(args[i] if i < len(args) else kwargs.get(name))
        out = self._dispatch(func, types, args, kwargs, written)
        # A plain tensor's write: marked for the digest cache (a DTensor op's writes are marked in EventLog.op, before
        # its outputs are digested). Its version may not have moved (torch.autograd._unsafe_preserve_version_counter,
        # as FSDP2 copies its all-gathered parameters out).
        DTensor = _dtensor_type()
        plain = [t for t in written if not isinstance(t, DTensor)]
        if plain:
            self.log._wrote(plain)
            if self.log.producers.get(self.rank) and func.namespace not in ("c10d", "_c10d_functional"):
                read = [t for t in _tensors(list(args) + list(kwargs.values()))
                        if not isinstance(t, DTensor) and not any(t is w for w in plain)]
                self.log._plain_write(self.rank, func, read, plain)
        return out

    def _dispatch(self, func, types, args, kwargs, written: List[torch.Tensor]):
        namespace = func.namespace
        if self.log.simulated and namespace in ("c10d", "_c10d_functional"):
            return func(*args, **kwargs)
        if self.log.pending_storages and namespace != "c10d" and not func.is_view:
            self.log.check_reads(func, _tensors(list(args) + list(kwargs.values())))
        if self.log.unread and namespace != "c10d" and not func.is_view:
            self.log.check_first_reads(func, _tensors(list(args) + list(kwargs.values())))
        if namespace == "c10d":
            spec = _C10D.get(func._opname)
            if spec is not None:
                kind, out_arg, in_arg, group_arg = spec
                group = self.log._group(args[group_arg])
                # What the rank sends is digested before the call (an in-place collective overwrites it).
                return self.log.collective(self.rank, kind, group, _tensors(args[in_arg]), _tensors(args[out_arg]),
                                           lambda: func(*args, **kwargs),
                                           _work_of)
            return func(*args, **kwargs)
        if namespace == "_c10d_functional":
            spec = _FUNCTIONAL.get(func._opname)
            if spec is not None:
                kind, group_arg = spec
                from torch.distributed import distributed_c10d as c10d

                group = self.log._group(c10d._resolve_process_group(args[group_arg]))
                event = self.log.arrive(self.rank, kind, group, [args[0]])
                if event is None:  # inside a DTensor op: the op's result digest covers it, and the op waits
                    return func(*args, **kwargs)
                start = time.perf_counter()
                out = func(*args, **kwargs)
                # The result is complete once waited for: the functional op's own wait, issued here so the event
                # holds what the rank received (functional results are waited for before any use).
                torch.ops._c10d_functional.wait_tensor(out)
                self.log.took(event, start)
                self.log.complete(event, [out], self.rank, len(self.log.events[self.rank]) - 1)
                return out
            return func(*args, **kwargs)
        DTensor = _dtensor_type()
        if not any(issubclass(t, DTensor) for t in types):
            return func(*args, **kwargs)
        dtensors = [x for x in _tensors(list(args) + list(kwargs.values())) if isinstance(x, DTensor)]
        return self.log.op(self.rank, func, dtensors, lambda: func(*args, **kwargs),
                           [x for x in written if isinstance(x, DTensor)])


_WRITTEN_ARGUMENTS: Dict[Any, Tuple[Tuple[int, str], ...]] = {}  # op -> (position, name) of each argument it writes


def _written_arguments(func) -> Tuple[Tuple[int, str], ...]:
    """The arguments an ATen op writes in place (`Tensor(a!)` in its schema: self of `mul_`, the lists of
    `_foreach_add_`, `out=`)."""
    known = _WRITTEN_ARGUMENTS.get(func)
    if known is None:
        schema = getattr(func, "_schema", None)  # None: an operator without one (a higher-order op): no writes known
        known = () if schema is None else tuple(
            (i, a.name) for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write)
        _WRITTEN_ARGUMENTS[func] = known
    return known


class MeteredEventMode(EventMode):
    """EventMode that also tells the rank's memory meter (log.meter) every op's outputs: a real rank without CUDA
    recording its memory (dtsim.record(memory=True), dtsim record --memory)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        meter = self.log.meter
        if not meter.paused:
            meter.observe(self.rank, out)
        return out


def _work_of(out) -> Any:
    """The Work of a c10d op's result, as the program will hold it: the dispatcher hands a ScriptObject, and unboxing it
    gives the Python object the caller gets (pybind keeps one per C++ work while it lives), so `Work.wait` finds it."""
    work = out[-1] if isinstance(out, (tuple, list)) else out
    if isinstance(work, torch.ScriptObject):
        from torch._C._distributed_c10d import Work

        work = Work.unbox(work)
    return work


_WORK_PATCH: List[Any] = []
_LOGS: List[EventLog] = []


def watch_waits(log: EventLog) -> None:
    """Hooks `Work.wait` (once per process) so a waiting collective's bytes are digested when the program waits."""
    from torch._C._distributed_c10d import Work

    _LOGS.append(log)
    if _WORK_PATCH:
        return
    original = Work.wait

    def wait(self, *args, **kwargs):
        # The program waits: what runs from here on (a backend's own copies inside the wait) is no early read.
        for each in list(_LOGS):
            if id(self) in each.pending:
                with each.lock:
                    each.forget([id(self)])
        result = original(self, *args, **kwargs)
        for each in list(_LOGS):
            if each.waiting:
                each.on_wait(self)
        return result

    _WORK_PATCH.append(original)
    Work.wait = wait


def unwatch_waits(log: EventLog) -> None:
    from torch._C._distributed_c10d import Work

    if log in _LOGS:
        _LOGS.remove(log)
    if not _LOGS and _WORK_PATCH:
        Work.wait = _WORK_PATCH.pop()
