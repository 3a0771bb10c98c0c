"""The `dtsim` c10d backend: a process group whose collectives meet between the simulated ranks' threads.

Each rank's thread holds its own `SimProcessGroup` for a group, as each real rank holds its own; the group's ranks
share one `GroupChannel`. A collective is an arrival at the channel's next operation (the rank's own sequence number
on that group). The last rank to arrive checks that every rank called the same collective (kind, reduce op, root,
dtypes and shapes, all_to_all splits that pair up) and computes every rank's result in ascending rank order, so a
reduction sums in one fixed order. The others wait on the scheduler in the meantime (scheduler.py).

Point-to-point sends are buffered (a send completes at once, with a copy of the tensor), and a receive completes when
its message is there, so pipelines that send before they receive run as they do under NCCL and Gloo.

The method names are the ones c10d's Python API and its C++ ProcessGroup trampoline call on a Python process group.
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.utils._python_dispatch import _disable_current_modes

from .scheduler import RunAborted, Scheduler, Waitable, user_stack

_ReduceOp = dist.ReduceOp


_REDUCE_NAMES = (("sum", _ReduceOp.SUM), ("avg", _ReduceOp.AVG), ("product", _ReduceOp.PRODUCT),
                 ("min", _ReduceOp.MIN), ("max", _ReduceOp.MAX), ("band", _ReduceOp.BAND), ("bor", _ReduceOp.BOR),
                 ("bxor", _ReduceOp.BXOR))


class _PreMulSum(str):
    """The name of NCCL's premultiplied sum (`dist._make_nccl_premul_sum(factor)`, FSDP2's reduce-scatter where a
    gradient divide factor is set), carrying its factor (a number, or a one-element tensor). The name shows the factor,
    so that peers that call it with another factor do not meet."""

    factor: object

    def __new__(cls, factor) -> "_PreMulSum":
        value = factor.item() if isinstance(factor, torch.Tensor) else float(factor)
        name = super().__new__(cls, f"premul_sum({value!r})")
        name.factor = factor
        return name

    def scale(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` times the factor in its own dtype, as NCCL premultiplies each rank's input."""
        factor = self.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.to(device=tensor.device, dtype=tensor.dtype)
        return tensor * factor


def _reduce_name(op) -> str:
    for name, kind in _REDUCE_NAMES:
        if op == kind:
            return name
    if op == _ReduceOp.PREMUL_SUM and getattr(op, "factor", None) is not None:
        return _PreMulSum(op.factor)
    raise RuntimeError(f"dtsim run: reduce op {op} is not supported by the simulated backend "
                       "(supported: sum, avg, product, min, max, band, bor, bxor, premul_sum)")


class _ReferenceFlag(threading.local):
    active = False  # set while --check-ops computes an op on the global tensors (check_ops.py)


_REFERENCE = _ReferenceFlag()


def _reduce(tensors: Sequence[torch.Tensor], op_name: str) -> torch.Tensor:
    """Every rank's tensor reduced in ascending rank order (a fixed order, as one ring pass would give)."""
    if isinstance(op_name, _PreMulSum):
        acc = op_name.scale(tensors[0])
        for t in tensors[1:]:
            acc.add_(op_name.scale(t))
        return acc
    acc = tensors[0].clone()
    if op_name in ("sum", "avg"):
        for t in tensors[1:]:
            acc.add_(t)
        if op_name == "avg":
            if acc.is_floating_point() or acc.is_complex():
                acc.div_(len(tensors))
            else:
                acc = torch.div(acc, len(tensors), rounding_mode="floor")
        return acc
    combine: Dict[str, Callable] = {
        "product": torch.mul,
        "min": torch.minimum,
        "max": torch.maximum,
        "band": torch.bitwise_and,
        "bor": torch.bitwise_or,
        "bxor": torch.bitwise_xor,
    }
    if op_name not in combine:
        raise RuntimeError(f"dtsim run: reduce op {op_name} is not supported by the simulated backend")
    for t in tensors[1:]:
        acc = combine[op_name](acc, t)
    return acc


def _done(result) -> dist.Work:
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


def _meta(tensors) -> Tuple:
    """The shapes and dtypes a collective's peers must agree on."""
    return tuple((tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in tensors)


class _Arrival:
    def __init__(self, group_rank: int, signature: Tuple, payload, describe: str):
        self.group_rank = group_rank
        self.signature = signature
        self.payload = payload
        self.describe = describe
        self.sent_bytes = 0  # what this rank sends into the collective (--report)
        self.before = None  # --trace: (shape, bytes, hash) of what it sends, taken when it arrives
        self.received: List = []  # --trace: the tensors its result is written to
        self.internal = False  # --trace: the recording's own gather (not logged)
        self.event = None  # --trace: this rank's event of it (events.py), completed with the collective
        self.log = None  # --trace: the EventLog holding it
        self.module_keys: List = []  # the modules the rank issued it in (--report)


class _Operation(Waitable):
    """One collective of one group: the n-th call of every member."""

    def __init__(self, channel: "GroupChannel", seq: int):
        self.channel = channel
        self.seq = seq
        self.arrivals: Dict[int, _Arrival] = {}
        self.done = False
        self.report_row = None  # the report's row for this collective (--report)

    def ready(self) -> bool:
        return self.done

    def describe(self) -> str:
        first = next(iter(self.arrivals.values()))
        missing = [self.channel.ranks[r] for r in range(len(self.channel.ranks)) if r not in self.arrivals]
        return (f"{first.describe} (collective #{self.seq} of group {self.channel.label()}); "
                f"not yet called by rank(s) {_ranges(missing)}")


class _Message(Waitable):
    """A receive: ready when a matching send is in the mailbox."""

    def __init__(self, channel: "GroupChannel", dst: int, src: Optional[int], tag: int, shape, dtype):
        self.channel, self.dst, self.src, self.tag = channel, dst, src, tag
        self.shape, self.dtype = shape, dtype

    def _box(self):
        if self.src is not None:
            return self.channel.mailbox(self.src, self.dst, self.tag)
        for src in range(len(self.channel.ranks)):
            box = self.channel.mailbox(src, self.dst, self.tag)
            if box:
                return box
        return None

    def ready(self) -> bool:
        return bool(self._box())

    def describe(self) -> str:
        src = "any rank" if self.src is None else f"rank {self.channel.ranks[self.src]}"
        return (f"recv of {list(self.shape)} {str(self.dtype).replace('torch.', '')} from {src} (tag {self.tag}) "
                f"in group {self.channel.label()}; no such message was sent")


class GroupChannel:
    """The state a group's members share: its operations in call order, and its point-to-point mailboxes."""

    def __init__(self, name: str, ranks: List[int]):
        self.name = name
        self.desc: Optional[str] = None  # c10d's description: "default_pg", "mesh_tp", ... (set at first use)
        self.ranks = ranks
        self.next_seq = [0] * len(ranks)
        self.operations: Dict[int, _Operation] = {}
        self._mail: Dict[Tuple[int, int, int], collections.deque] = {}

    def label(self) -> str:
        desc = f" ({self.desc})" if self.desc and self.desc != "undefined" else ""
        return f"{self.name!r}{desc} ranks {_ranges(self.ranks)}"

    def mailbox(self, src: int, dst: int, tag: int) -> collections.deque:
        return self._mail.setdefault((src, dst, tag), collections.deque())


class Mismatch(Exception):
    pass


class World:
    """Every group's channel, by name and ranks, for one run."""

    def __init__(self, scheduler: Scheduler, world_size: int):
        self.scheduler = scheduler
        self.world_size = world_size
        self._channels: Dict[Tuple[str, Tuple[int, ...]], GroupChannel] = {}
        self.collective_count = 0
        self.report = None  # a report.Report under --report / --report-json
        self.tracker = None  # the ranks' memory and modules (modules.Tracker)
        self.collective_log: Optional[List[Dict]] = None  # --trace: every collective, as recordings list them

    def log_collective(self, kind: str, channel: "GroupChannel", arrivals: List["_Arrival"]) -> None:
        """A completed collective, in the recording's "collectives" form: its group, and each member's input (hashed
        when it arrived) and output (hashed now)."""
        after = [_digest(a.received) for a in arrivals]
        order = sorted(range(len(arrivals)), key=lambda i: channel.ranks[i])
        self.collective_log.append({
            "op": _RECORDED_KINDS.get(kind, kind), "groups": [sorted(channel.ranks)],
            "ranks": [channel.ranks[i] for i in order],
            "input_shapes": [arrivals[i].before[0] for i in order], "output_shapes": [after[i][0] for i in order],
            "input_bytes": [arrivals[i].before[1] for i in order], "output_bytes": [after[i][1] for i in order],
            "input_hashes": [arrivals[i].before[2] for i in order], "output_hashes": [after[i][2] for i in order]})

    def unreceived(self) -> List[str]:
        """Every message sent and still in a mailbox (never received), as the report's lines."""
        lines = []
        for channel in self._channels.values():
            for (src, dst, tag), box in channel._mail.items():
                for sent in box:
                    lines.append(f"rank {channel.ranks[src]} sent {_tensor_text(sent.tensor)} to rank "
                                 f"{channel.ranks[dst]} (tag {tag}) in group {channel.label()} at {sent.line}; no "
                                 "rank received it")
        return lines

    def channel(self, name: str, ranks: List[int]) -> GroupChannel:
        key = (name, tuple(ranks))
        if key not in self._channels:
            self._channels[key] = GroupChannel(name, list(ranks))
        return self._channels[key]

    def create(self, backend_options, _pg_options=None) -> "SimProcessGroup":
        ranks = list(backend_options.global_ranks_in_group) or list(range(self.world_size))
        channel = self.channel(str(backend_options.group_id), ranks)
        return SimProcessGroup(self, channel, backend_options.group_rank, backend_options.group_size)


# The simulated backend's collectives as recorded events name them (events.py: c10d's ops by dtsim's kinds); a barrier
# moves no data and is no event.
_EVENT_KINDS = {"all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce", "all_gather": "all_gather",
                "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
                "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
                "all_to_all_single": "all_to_all", "all_to_all": "all_to_all", "gather": "gather", "scatter": "scatter"}
# The simulated backend's collectives by dtsim's collective kinds (the trace format's vocabulary).
_RECORDED_KINDS = {"all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
                   "reduce_scatter_tensor": "reduce_scatter"}


def _from_recorder() -> bool:
    """True when dtsim.record's finish issues the collective (--trace gathering its recording), not the program (its
    redistributions run inside the recorder's hooks: those are the program's)."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "finish" and code.co_filename.endswith(("dtsim/recorder.py", "dtsim\\recorder.py")):
            return True
        frame = frame.f_back
    return False


def _digest(tensors) -> Tuple[List[int], int, str]:
    """(shape, bytes, hash) of what one rank hands to or gets from a collective: its tensor, or the bytes of its
    tensors one after another (flattened) when it has several."""
    from .. import _C

    tensors = [t for t in tensors if t is not None]
    if len(tensors) == 1:
        t = tensors[0].detach()
        return list(t.shape), t.numel() * t.element_size(), _C.shard_hash(t)
    flat = torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors]) if tensors \
        else torch.empty(0, dtype=torch.uint8)
    return [flat.numel()], flat.numel(), _C.shard_hash(flat)


def _ranges(ranks: Sequence[int]) -> str:
    ranks = list(ranks)
    if not ranks:
        return "none"
    out, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)


class SimProcessGroup(dist.ProcessGroup):
    """One rank's handle on a group of the simulated world."""

    def __init__(self, world: World, channel: GroupChannel, group_rank: int, group_size: int):
        super().__init__(group_rank, group_size)
        self._world = world
        self._channel = channel
        self._group_rank = group_rank
        self._group_size = group_size

    # ---- identity ------------------------------------------------------------------------------------------------

    # The simulated group is its own backend on every device. c10d asks a group's backend what it supports (torch
    # 2.15's batch_isend_irecv: coalescing), and the simulated one coalesces nothing, as Gloo's.
    supports_coalescing = False
    supports_splitting = False

    def _get_backend(self, device) -> "SimProcessGroup":
        return self

    def getBackendName(self) -> str:
        return "dtsim"

    @property
    def group_name(self) -> str:
        return self._channel.name

    def size(self) -> int:
        return self._group_size

    def rank(self) -> int:
        return self._group_rank

    def __repr__(self) -> str:
        return f"SimProcessGroup(group {self._channel.label()}, rank {self._group_rank})"

    # ---- the meeting point ---------------------------------------------------------------------------------------

    def _meet(self, kind: str, signature: Tuple, payload, compute: Callable[[List], None], sent=(),
              received=()) -> None:
        """Arrives at this rank's next collective on the group; returns when every member's result is written.
        `sent`: the tensors this rank sends into it (the report's bytes); `received`: the tensors its result is
        written to (with --trace, both are hashed: before and after)."""
        if _REFERENCE.active:
            raise RuntimeError(f"dtsim run --check-ops: the unsharded reference of an op called {kind}: a function that "
                               "communicates has no single-tensor meaning")
        channel = self._channel
        if channel.desc is None:
            channel.desc = self.group_desc
        seq = channel.next_seq[self._group_rank]
        channel.next_seq[self._group_rank] += 1
        op = channel.operations.get(seq)
        if op is None:
            op = channel.operations[seq] = _Operation(channel, seq)
            if self._world.report is not None:
                op.report_row = self._world.report.record(
                    kind if not signature or not isinstance(signature[0], str) else f"{kind} {signature[0]}",
                    channel.name, channel.desc, channel.ranks)
        describe = f"{kind} {_describe_signature(signature)}".rstrip()
        arrival = _Arrival(self._group_rank, (kind,) + signature, payload, describe)
        if self._world.collective_log is not None:
            arrival.before = _digest(sent)
            arrival.received = list(received)
            arrival.internal = _from_recorder()
            if not arrival.internal and kind in _EVENT_KINDS:
                from .. import recorder

                current = recorder._current()
                log = current.event_log if current is not None else None
                if log is not None:
                    arrival.event = log.arrive(channel.ranks[self._group_rank], _EVENT_KINDS[kind],
                                               list(channel.ranks), list(sent), arrival.received)
                    arrival.log = log
        if op.report_row is not None:
            arrival.sent_bytes = sum(t.numel() * t.element_size() for t in sent)
            arrival.module_keys = self._world.tracker.collective_keys(channel.ranks[self._group_rank])
        for other in op.arrivals.values():
            if other.signature != arrival.signature:
                self._mismatch(op, other, arrival)
            break
        op.arrivals[self._group_rank] = arrival
        if len(op.arrivals) == self._group_size:
            payloads = [op.arrivals[r].payload for r in range(self._group_size)]
            tracker = self._world.tracker
            try:
                if tracker is not None:
                    tracker.paused = True  # the backend's temporaries are not the program's memory
                # A backend writes its results outside autograd (a leaf that requires grad is a valid buffer), and
                # outside the program's dispatch modes: the last rank to arrive writes every member's results, and
                # a mode of its program (selective activation checkpointing's, which counts the ops it caches)
                # must not see the copies into its peers' tensors.
                with torch.no_grad(), _disable_current_modes():
                    compute(payloads)
            except Mismatch as e:
                self._world.scheduler.abort(
                    f"collective #{seq} of group {channel.label()}: {e}\n" + self._where(op), 4)
                raise RunAborted(str(e))
            finally:
                if tracker is not None:
                    tracker.paused = False
            op.done = True
            del channel.operations[seq]
            if self._world.collective_log is not None and not any(a.internal for a in op.arrivals.values()):
                self._world.log_collective(kind, channel, [op.arrivals[r] for r in range(self._group_size)])
                for a in op.arrivals.values():
                    if a.event is not None:
                        a.log.complete(a.event, a.received)
            if op.report_row is not None:
                self._world.report.completed(op.report_row, kind, [
                    (channel.ranks[r], a.module_keys, a.sent_bytes) for r, a in sorted(op.arrivals.items())])
            self._world.collective_count += 1
            return
        self._world.scheduler.wait(op)

    def _where(self, op: _Operation) -> str:
        """Every rank that arrived at `op`: its call and its program's stack (the calling rank's too)."""
        frames = sys._current_frames()
        lines = []
        for group_rank, arrival in sorted(op.arrivals.items()):
            rank = self._channel.ranks[group_rank]
            lines.append(f"  rank {rank}: {arrival.describe}")
            thread = self._world.scheduler.ranks[rank].thread
            lines.extend(f"      at {f}" for f in user_stack(frames.get(thread.ident) if thread else None))
        return "\n".join(lines)

    def _mismatch(self, op: _Operation, first: _Arrival, arrival: _Arrival) -> None:
        channel = self._channel
        rank = channel.ranks[arrival.group_rank]
        if first.signature[0] != arrival.signature[0]:
            why = (f"rank {rank} called {arrival.signature[0]} where its peers called {first.signature[0]}: a rank "
                   "skipped or added a collective before this one, or called it on another group")
        else:
            why = f"rank {rank}'s {arrival.signature[0]} differs from its peers' in its arguments (reduce op, root, " \
                  "shapes or dtypes)"
        lines = [f"collective mismatch at collective #{op.seq} of group {channel.label()}: {why}", self._where(op),
                 f"  rank {rank}: {arrival.describe}"]
        lines.extend(f"      at {f}" for f in user_stack(sys._getframe()))
        self._world.scheduler.abort("\n".join(lines), 4)
        raise RunAborted("collective mismatch")

    # ---- collectives ---------------------------------------------------------------------------------------------

    # ---- what a real backend refuses at the call (Gloo's checks, as strict as the strictest backend) ---------------

    def _refuse(self, call: str, what: str) -> None:
        raise ValueError(f"dtsim run: {call} on rank {self._channel.ranks[self._group_rank]} (group "
                         f"{self._channel.label()}): {what}")

    def _check_peer(self, call: str, field: str, peer: int) -> None:
        n = len(self._channel.ranks)
        if not 0 <= peer < n:
            self._refuse(call, f"{field} {peer} is not a rank of the group, which has {n} (group ranks 0 to {n - 1})")

    def _check_lists(self, call: str, field: str, lists, count: int) -> None:
        n = len(self._channel.ranks)
        if len(lists) != count:
            self._refuse(call, f"{field} holds {len(lists)} lists for {count} tensors")
        for i, tensors in enumerate(lists):
            if len(tensors) != n:
                self._refuse(call, f"{field}[{i}] holds {len(tensors)} tensors; the group has {n} ranks")

    def allreduce(self, tensors, opts=None):
        op_name = _reduce_name(opts.reduceOp) if opts is not None else "sum"

        def compute(payloads):
            for i in range(len(tensors)):
                result = _reduce([p[i] for p in payloads], op_name)
                for p in payloads:
                    p[i].copy_(result)

        self._meet("all_reduce", (op_name, _meta(tensors)), list(tensors), compute, sent=tensors, received=tensors)
        return _done(list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def barrier(self, opts=None):
        self._meet("barrier", (), None, lambda payloads: None)
        return _done([])

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        self._check_peer("broadcast", "src (its group rank)", root)

        def compute(payloads):
            for i in range(len(tensors)):
                for r, p in enumerate(payloads):
                    if r != root:
                        p[i].copy_(payloads[root][i])

        self._meet("broadcast", (f"root {root}", _meta(tensors)), list(tensors), compute, sent=tensors,
                   received=tensors)
        return _done(list(tensors))

    def reduce(self, tensors, opts):
        root, op_name = opts.rootRank, _reduce_name(opts.reduceOp)
        self._check_peer("reduce", "dst (its group rank)", root)

        def compute(payloads):
            for i in range(len(tensors)):
                payloads[root][i].copy_(_reduce([p[i] for p in payloads], op_name))

        self._meet("reduce", (f"root {root}", op_name, _meta(tensors)), list(tensors), compute, sent=tensors,
                   received=tensors)
        return _done(list(tensors))

    def allgather(self, output_lists, input_tensors, opts=None):
        self._check_lists("all_gather", "tensor_list", output_lists, len(input_tensors))

        def compute(payloads):
            for outs, _ in payloads:
                for i in range(len(outs)):
                    for r, (_, ins) in enumerate(payloads):
                        _copy_checked(outs[i][r], ins[i], f"all_gather output {r}")

        self._meet("all_gather", (_meta(input_tensors),), (output_lists, input_tensors), compute,
                   sent=input_tensors, received=[t for outs in output_lists for t in outs])
        return _done(output_lists)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        return self.allgather(output_lists, input_tensors, opts)

    def all_gather_single(self, output, input, opts=None):
        def compute(payloads):
            gathered = torch.cat([p[1].reshape(-1) for p in payloads])
            for out, _ in payloads:
                _copy_checked(out, gathered.view(out.shape) if gathered.numel() == out.numel() else gathered,
                              "all_gather_into_tensor output")

        self._meet("all_gather_into_tensor", (_meta([input]),), (output, input), compute, sent=[input],
                   received=[output])
        return _done([output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        def compute(payloads):
            for i in range(len(outputs)):
                gathered = torch.cat([p[1][i].reshape(-1) for p in payloads])
                for outs, _ in payloads:
                    _copy_checked(outs[i], gathered.view(outs[i].shape) if gathered.numel() == outs[i].numel()
                                  else gathered, "all_gather_into_tensor output")

        self._meet("all_gather_into_tensor_coalesced", (_meta(inputs),), (list(outputs), list(inputs)), compute,
                   sent=inputs, received=outputs)
        return _done(list(outputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op_name = _reduce_name(opts.reduceOp) if opts is not None else "sum"

        def compute(payloads):
            for i in range(len(outputs)):
                for r, (outs, _) in enumerate(payloads):
                    _copy_checked(outs[i], _reduce([p[1][i][r] for p in payloads], op_name), "reduce_scatter output")

        self._meet("reduce_scatter", (op_name, _meta(outputs)), (list(outputs), input_lists), compute,
                   sent=[t for ts in input_lists for t in ts], received=outputs)
        return _done(list(outputs))

    def reduce_scatter_single(self, output, input, opts=None):
        op_name = _reduce_name(opts.reduceOp) if opts is not None else "sum"
        n = self._group_size

        def compute(payloads):
            if any(p[1].numel() % n for p in payloads):
                raise Mismatch(f"reduce_scatter_tensor: an input's size is not divisible by the group size {n}")
            # One reduction of the whole inputs, then each rank's chunk of it: every element is still summed in
            # ascending rank order, with n calls where a reduction per chunk would take n * n.
            reduced = _reduce([p[1].reshape(n, -1) for p in payloads], op_name)
            for r, (out, _) in enumerate(payloads):
                _copy_checked(out, reduced[r], "reduce_scatter_tensor output")

        self._meet("reduce_scatter_tensor", (op_name, _meta([input])), (output, input), compute, sent=[input],
                   received=[output])
        return _done([output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        for out, inp in zip(outputs, inputs):
            self.reduce_scatter_single(out, inp, opts)
        return _done(list(outputs))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self._group_size

        def splits(sizes, tensor, what, rank):
            sizes = list(sizes)
            if not sizes:
                if tensor.dim() == 0 or tensor.shape[0] % n:
                    raise Mismatch(f"rank {rank}'s all_to_all_single {what} of {list(tensor.shape)} does not split "
                                   f"evenly into {n}")
                return [tensor.shape[0] // n] * n
            if len(sizes) != n or sum(sizes) != tensor.shape[0]:
                raise Mismatch(f"rank {rank}'s all_to_all_single {what}_split_sizes {sizes} do not split its "
                               f"{what} of {list(tensor.shape)} into {n}")
            return sizes

        def compute(payloads):
            ins = [torch.split(p[1], splits(p[3], p[1], "input", self._channel.ranks[r]))
                   for r, p in enumerate(payloads)]
            for r, (out, _, out_splits, _) in enumerate(payloads):
                sizes = splits(out_splits, out, "output", self._channel.ranks[r])
                for s in range(n):
                    if ins[s][r].shape[0] != sizes[s]:
                        raise Mismatch(f"rank {self._channel.ranks[s]} sends {ins[s][r].shape[0]} rows to rank "
                                       f"{self._channel.ranks[r]}, which expects {sizes[s]} (output_split_sizes)")
                pieces = [ins[s][r] for s in range(n)]
                out.copy_(torch.cat(pieces) if pieces else out)

        self._meet("all_to_all_single", (str(input.dtype).replace("torch.", ""),),
                   (output, input, list(output_split_sizes or []), list(input_split_sizes or [])), compute,
                   sent=[input], received=[output])
        return _done([output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        def compute(payloads):
            for r, (outs, _) in enumerate(payloads):
                for s, (_, ins) in enumerate(payloads):
                    _copy_checked(outs[s], ins[r], f"all_to_all output {s}")

        self._meet("all_to_all", (len(input_tensors),), (list(output_tensors), list(input_tensors)), compute,
                   sent=input_tensors, received=output_tensors)
        return _done(list(output_tensors))

    def gather(self, output_lists, input_tensors, opts):
        root = opts.rootRank
        self._check_peer("gather", "dst (its group rank)", root)
        if self._group_rank == root:
            self._check_lists("gather", "gather_list", output_lists, len(input_tensors))

        def compute(payloads):
            outs = payloads[root][0]
            for i in range(len(input_tensors)):
                for r, (_, ins) in enumerate(payloads):
                    _copy_checked(outs[i][r], ins[i], f"gather output {r}")

        self._meet("gather", (f"root {root}", _meta(input_tensors)), (output_lists, input_tensors), compute,
                   sent=input_tensors, received=[t for outs in output_lists for t in outs])
        return _done(output_lists)

    def scatter(self, output_tensors, input_lists, opts):
        root = opts.rootRank
        self._check_peer("scatter", "src (its group rank)", root)
        if self._group_rank == root:
            self._check_lists("scatter", "scatter_list", input_lists, len(output_tensors))

        def compute(payloads):
            ins = payloads[root][1]
            for i in range(len(output_tensors)):
                for r, (outs, _) in enumerate(payloads):
                    _copy_checked(outs[i], ins[i][r], f"scatter input {r}")

        self._meet("scatter", (f"root {root}", _meta(output_tensors)), (list(output_tensors), input_lists), compute,
                   sent=[t for ts in input_lists for t in ts], received=output_tensors)
        return _done(list(output_tensors))

    # ---- point to point ------------------------------------------------------------------------------------------

    def send(self, tensors, dst, tag):
        self._check_peer("send", "dst (its group rank)", dst)
        stack = user_stack(sys._getframe(1), limit=1)
        for t in tensors:
            self._channel.mailbox(self._group_rank, dst, tag).append(
                _Sent(t.detach().clone(), stack[0] if stack else "?"))
        return _done(list(tensors))

    def recv(self, tensors, src, tag):
        self._check_peer("recv", "src (its group rank)", src)
        return _RecvWork(self, tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        return _RecvWork(self, tensors, None, tag)


class _Sent:
    """A message in a mailbox: the tensor sent, and the sender's program line."""

    __slots__ = ("tensor", "line")

    def __init__(self, tensor: torch.Tensor, line: str):
        self.tensor, self.line = tensor, line


def _tensor_text(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"


class _RecvWork(dist.Work):
    """A receive that completes when its message is in the mailbox: `wait()` lets the other ranks run until then."""

    def __init__(self, group: SimProcessGroup, tensors, src: Optional[int], tag: int):
        super().__init__()
        self._group, self._tensors, self._src, self._tag = group, list(tensors), src, tag
        self._message = _Message(group._channel, group._group_rank, src, tag, tensors[0].shape, tensors[0].dtype)
        self._done = False
        self._source: Optional[int] = None

    def is_completed(self) -> bool:
        return self._done or self._message.ready()

    def wait(self, timeout=None) -> bool:
        if self._done:
            return True
        self._group._world.scheduler.wait(self._message)
        channel = self._group._channel
        for t in self._tensors:
            src = self._src
            if src is None:
                src = next(s for s in range(len(channel.ranks)) if channel.mailbox(s, self._group._group_rank,
                                                                                   self._tag))
            sent = channel.mailbox(src, self._group._group_rank, self._tag).popleft()
            data = sent.tensor
            if data.dtype != t.dtype or (data.shape != t.shape and data.numel() != t.numel()):
                raise RuntimeError(f"dtsim run: rank {channel.ranks[self._group._group_rank]} receives "
                                   f"{_tensor_text(t)} from rank {channel.ranks[src]}, which sent {_tensor_text(data)}"
                                   f" at {sent.line}: a real backend refuses a receive of another size or dtype")
            with torch.no_grad():
                t.copy_(data.view(t.shape))
            self._source = src
        self._done = True
        return True

    def _source_rank(self) -> int:
        self.wait()
        return self._source if self._source is not None else -1

    def result(self):
        return self._tensors


def _copy_checked(dst: torch.Tensor, src: torch.Tensor, what: str) -> None:
    if dst.numel() != src.numel():
        raise Mismatch(f"{what} holds {list(dst.shape)}, the data is {list(src.shape)}")
    dst.copy_(src.view(dst.shape) if dst.shape != src.shape else src)


def _describe_signature(signature: Tuple) -> str:
    parts = []
    for item in signature:
        if isinstance(item, tuple):
            parts.append(", ".join(f"{dtype}{list(shape)}" for shape, dtype in item) if item and isinstance(
                item[0], tuple) else str(item))
        else:
            parts.append(str(item))
    return " ".join(parts)
