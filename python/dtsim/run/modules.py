"""Per-rank memory and module tracking for `dtsim run`: what `torch.cuda.memory_allocated()` answers, and the report's
per-module tree (forward and backward) with each rank's peak memory and the collectives issued inside each module.

**Memory.** Each rank's program runs under a `MemoryMeter` (a TorchDispatchMode of that rank's thread). Every tensor an
op returns is followed to its storage; a storage is counted once, for the rank that first held it, with its size in
bytes, until it is freed (a finalizer on the storage, which torch keeps alive as long as any tensor uses it). Storage
resizes (`untyped_storage().resize_()`, as FSDP2 frees and refills its unsharded parameters) change the count by the
difference. A DTensor counts its local shard; other wrapper subclasses count their inner tensors. A rank's count is
the bytes of the tensors its program holds at op boundaries: temporaries an op allocates and frees inside itself,
the collectives' internal buffers and the backend's own staging are not in it (the simulated backend writes into the
program's tensors). A meta tensor the program makes itself (`with torch.device("meta")`, `.to("meta")`) holds nothing,
as on a GPU, and neither does what is computed from such tensors alone; in a metadata-only run (`--meta`) the meta
tensors that stand for the program's GPU tensors count their sizes, so it measures memory without values.

**Modules.** A global forward pre-hook on every module of the program, a hook of each call that runs after the
module's own forward hooks (so a parallel style's output redistribution counts in its module), and, for backward,
hooks on the gradients of a module's outputs (entered) and inputs (left, or at the end of the backward pass) keep, per rank, the modules that are running. A
module is named by its path from the outermost module that ran (`MLP.fc1`); a module that runs outside every other
is a root, named by its class. Like upstream's CommDebugMode, a collective counts in every module it was issued in,
and `Global` holds them all.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import patches

FORWARD, BACKWARD = "forward", "backward"
GLOBAL = "Global"


class _Entry:
    """One running module of one rank: its key and the peak bytes seen since it was entered."""

    __slots__ = ("key", "peak")

    def __init__(self, key: Tuple[str, str], peak: int):
        self.key = key
        self.peak = peak


class _Rank:
    __slots__ = ("live", "peak", "run_peak", "active", "names", "backward_task")

    def __init__(self) -> None:
        self.live = 0  # bytes of storages counted for this rank and not freed
        self.peak = 0  # the most `live` since the last reset_peak_memory_stats()
        self.run_peak = 0  # the most `live` over the whole run
        self.active: List[_Entry] = []  # running modules, outermost first
        self.names: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # module -> path
        self.backward_task = -1  # the backward pass whose end closes the modules still open in it


class ModuleStats:
    """One module and pass: the collectives each rank issued inside it, by kind, and each rank's peak bytes."""

    def __init__(self, path: str, type_name: str, depth: int, pass_: str):
        self.path = path
        self.type_name = type_name
        self.depth = depth
        self.pass_ = pass_
        # kind -> rank -> [calls, bytes sent, estimated us, calls without an estimate]
        self.collectives: Dict[str, Dict[int, List]] = {}
        self.peak: Dict[int, int] = {}

    def add_collective(self, kind: str, rank: int, sent_bytes: int, est_us: Optional[float]) -> None:
        row = self.collectives.setdefault(kind, {}).setdefault(rank, [0, 0, 0.0, 0])
        row[0] += 1
        row[1] += sent_bytes
        if est_us is None:
            row[3] += 1
        else:
            row[2] += est_us


class Tracker:
    """Every rank's memory count and running modules, for one run."""

    def __init__(self, world_size: int, rank_of: Callable[[], Optional[int]], modules: bool, metered: bool = True,
                 meta_run: bool = False):
        self.world_size = world_size
        self.meta_run = meta_run  # --meta: the meta tensors dtsim made stand for GPU tensors and count
        self.metered = metered  # the ranks run under their MemoryMeter (--memory, --report, --report-json, --meta)
        self._rank_of = rank_of
        self._ranks = [_Rank() for _ in range(world_size)]
        # storage (its C++ address) -> [owning rank, counted bytes, whether it holds memory]; an entry leaves when the
        # storage is freed. `empty_storages`: how many entries hold nothing (the program's own meta tensors).
        self._storages: Dict[int, List[int]] = {}
        self.empty_storages = 0
        self.paused = False  # the backend computes a collective: its temporaries are not the program's
        self.modules = modules  # the per-module tree is kept (--report); memory is counted either way
        self.stats: Dict[Tuple[str, str], ModuleStats] = {}
        self._lock = threading.Lock()
        # Told of every module boundary (rank, module path, pass, "begin" | "end", the rank's live bytes or None when
        # not metered, the module's peak bytes at its end or None): the recorder's per-rank memory.
        self.boundary: Optional[Callable[[int, str, str, str, Optional[int], Optional[int]], None]] = None

    # ---- memory ---------------------------------------------------------------------------------------------------

    def observe(self, rank: int, out, counts: bool = True) -> None:
        """Counts the storages of an op's outputs for `rank`; `counts=False`: they hold nothing (meta tensors the
        program made itself, and what is computed from them only)."""
        if isinstance(out, torch.Tensor):
            self._tensor(rank, out, counts)
        elif isinstance(out, (tuple, list)):
            for item in out:
                if isinstance(item, torch.Tensor):
                    self._tensor(rank, item, counts)

    def _storage_of(self, t: torch.Tensor):
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            if getattr(t, "__tensor_flatten__", None) is not None or torch._subclasses.fake_tensor.is_fake(t):
                return None
        try:
            return t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
            return None

    def holds_nothing(self, tensors) -> bool:
        """True when every tensor of `tensors` (at least one) is in a storage that holds nothing: an op computed from
        them alone (a view, `new_zeros`, FSDP2's shards of a meta-built module) holds nothing either."""
        seen = False
        for t in tensors:
            storage = self._storage_of(t)
            if storage is None:
                continue
            entry = self._storages.get(storage._cdata)
            if entry is None or entry[2]:
                return False
            seen = True
        return seen

    def uncount(self, rank: int, out) -> None:
        """The program itself put these tensors on the meta device (`with torch.device("meta")`, `.to("meta")`): on a
        GPU they hold nothing, so they count nothing, in a metadata-only run too."""
        for t in (out if isinstance(out, (tuple, list)) else [out]):
            if not isinstance(t, torch.Tensor) or not t.is_meta:
                continue
            storage = self._storage_of(t)
            if storage is None:
                continue
            entry = self._storages.get(storage._cdata)
            if entry is None:
                self._tensor(rank, t, False)
            elif entry[2]:
                self._add(entry[0], -entry[1])
                entry[1], entry[2] = 0, False
                self.empty_storages += 1

    def _tensor(self, rank: int, t: torch.Tensor, counts: bool = True) -> None:
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
            flatten = getattr(t, "__tensor_flatten__", None)
            if flatten is not None:
                names, _ = flatten()
                for name in names:
                    inner = getattr(t, name, None)
                    if isinstance(inner, torch.Tensor):
                        self._tensor(rank, inner, counts)
                return
            if torch._subclasses.fake_tensor.is_fake(t):
                return
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
            return
        key = storage._cdata
        entry = self._storages.get(key)
        if entry is None:
            # A meta tensor holds memory only in a metadata-only run, where it stands for the GPU tensor it would be.
            held = counts and (self.meta_run or not t.is_meta)
            size = storage.nbytes() if held else 0
            self._storages[key] = [rank, size, held]
            if not held:
                self.empty_storages += 1
            weakref.finalize(storage, self._freed, key).atexit = False  # nothing to count at exit
            if size:
                self._add(rank, size)
        elif entry[2]:
            size = storage.nbytes()
            if entry[1] != size:
                self._add(entry[0], size - entry[1])
                entry[1] = size

    def resized(self, storage) -> None:
        """After `storage.resize_(n)`: the storage's count follows its new size."""
        key = storage._cdata
        entry = self._storages.get(key)
        if entry is None:
            rank = self._rank_of()
            if rank is None or self.paused:
                return
            entry = self._storages[key] = [rank, 0, self.meta_run or storage.device.type != "meta"]
            if not entry[2]:
                self.empty_storages += 1
            weakref.finalize(storage, self._freed, key).atexit = False  # nothing to count at exit
        if not entry[2]:
            return
        size = storage.nbytes()
        self._add(entry[0], size - entry[1])
        entry[1] = size

    def _freed(self, key: int) -> None:
        entry = self._storages.pop(key, None)
        if entry is not None:
            self._ranks[entry[0]].live -= entry[1]
            if not entry[2]:
                self.empty_storages -= 1

    def _add(self, rank: int, delta: int) -> None:
        state = self._ranks[rank]
        state.live += delta
        live = state.live
        if delta > 0:
            if live > state.peak:
                state.peak = live
            if live > state.run_peak:
                state.run_peak = live
            for entry in state.active:
                if live > entry.peak:
                    entry.peak = live

    def allocated(self, rank: int) -> int:
        return self._ranks[rank].live

    def max_allocated(self, rank: int) -> int:
        return self._ranks[rank].peak

    def reset_peak(self, rank: int) -> None:
        self._ranks[rank].peak = self._ranks[rank].live

    def run_peak(self, rank: int) -> int:
        return self._ranks[rank].run_peak

    # ---- modules --------------------------------------------------------------------------------------------------

    def _path(self, state: _Rank, module) -> str:
        path = state.names.get(module)
        if path is None:
            # A module that ran outside every module named so far is a root: its submodules are named below it.
            path = type(module).__name__
            for name, sub in module.named_modules():
                if sub not in state.names:
                    state.names[sub] = f"{path}.{name}" if name else path
        return path

    def enter(self, rank: int, module, pass_: str) -> None:
        state = self._ranks[rank]
        path = self._path(state, module)
        key = (path, pass_)
        if key not in self.stats:
            self.stats[key] = ModuleStats(path, type(module).__name__, path.count("."), pass_)
        state.active.append(_Entry(key, state.live))
        if self.boundary is not None:
            self.boundary(rank, path, pass_, "begin", state.live if self.metered else None, None)

    def leave(self, rank: int, module, pass_: str) -> None:
        state = self._ranks[rank]
        key = (self._path(state, module), pass_)
        for i in range(len(state.active) - 1, -1, -1):
            if state.active[i].key == key:
                entry = state.active.pop(i)
                peaks = self.stats[key].peak
                if entry.peak > peaks.get(rank, -1):
                    peaks[rank] = entry.peak
                self._ended(rank, state, entry)
                return

    def enter_global_backward(self, rank: int) -> None:
        key = (GLOBAL, BACKWARD)
        if key not in self.stats:
            self.stats[key] = ModuleStats(GLOBAL, "", 0, BACKWARD)
        state = self._ranks[rank]
        state.active.insert(0, _Entry(key, state.live))
        if self.boundary is not None:
            self.boundary(rank, GLOBAL, BACKWARD, "begin", state.live if self.metered else None, None)

    def _ended(self, rank: int, state: _Rank, entry: _Entry) -> None:
        if self.boundary is not None:
            self.boundary(rank, entry.key[0], entry.key[1], "end", state.live if self.metered else None,
                          entry.peak if self.metered else None)

    def leave_backward(self, rank: int) -> None:
        """The backward pass ended: every module still open in backward on `rank` has ended with it."""
        state = self._ranks[rank]
        state.backward_task = -1
        for entry in reversed([e for e in state.active if e.key[1] == BACKWARD]):  # innermost first
            state.active.remove(entry)
            peaks = self.stats[entry.key].peak
            if entry.peak > peaks.get(rank, -1):
                peaks[rank] = entry.peak
            self._ended(rank, state, entry)

    def collective_keys(self, rank: int) -> List[Tuple[str, str]]:
        """The modules a collective issued now by `rank` counts in (Global first)."""
        in_backward = torch._C._current_graph_task_id() != -1
        keys = [(GLOBAL, BACKWARD if in_backward else FORWARD)]
        if self.modules:
            seen = set(keys)
            for entry in self._ranks[rank].active:
                if entry.key not in seen:
                    seen.add(entry.key)
                    keys.append(entry.key)
        return keys

    def add_collective(self, keys: List[Tuple[str, str]], kind: str, rank: int, sent_bytes: int,
                       est_us: Optional[float]) -> None:
        """`rank` took part in a collective issued in the modules `keys` (collective_keys at its call)."""
        for key in keys:
            stats = self.stats.get(key)
            if stats is None:
                stats = self.stats[key] = ModuleStats(key[0], "", 0, key[1])
            stats.add_collective(kind, rank, sent_bytes, est_us)

    def finish(self) -> None:
        """At the end of the run: Global's forward row holds each rank's peak over the whole run."""
        stats = self.stats.get((GLOBAL, FORWARD))
        if stats is None:
            stats = self.stats[(GLOBAL, FORWARD)] = ModuleStats(GLOBAL, "", 0, FORWARD)
        stats.peak = {r: self._ranks[r].run_peak for r in range(self.world_size)}


class MemoryMeter(TorchDispatchMode):
    """One rank's meter: counts the storages of every op's outputs for the rank. A higher-order op (FlexAttention)
    counts its outputs alone, as its fused GPU kernel holds nothing else: the ops inside it run below the meter."""

    # torch hands higher-order ops to a dispatch mode only where the mode says it takes them.
    supports_higher_order_operators = True

    def __init__(self, tracker: Tracker, rank: int):
        super().__init__()
        self._tracker = tracker
        self._rank = rank

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tracker = self._tracker
        if not tracker.paused:
            if tracker.meta_run and tracker.empty_storages:
                inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
                tracker.observe(self._rank, out, not tracker.holds_nothing(inputs))
            else:
                tracker.observe(self._rank, out)
        return out


def install_module_hooks(tracker: Tracker):
    """Global module hooks that keep each rank's running modules (forward, and backward through gradient hooks).
    Returns the handle that removes them."""
    from torch.autograd.graph import register_multi_grad_hook
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.utils._pytree import tree_flatten

    def grad_tensors(value) -> List[torch.Tensor]:
        leaves, _ = tree_flatten(value)
        return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]

    def on_backward(rank: int, module, enter: bool) -> Callable:
        def hook(_grads) -> None:
            if enter:
                task = torch._C._current_graph_task_id()
                if tracker._ranks[rank].backward_task != task:
                    # A module whose inputs need no gradient never sees them computed: its backward ends with the
                    # backward pass itself.
                    tracker._ranks[rank].backward_task = task
                    torch.autograd.Variable._execution_engine.queue_callback(
                        lambda: tracker.leave_backward(rank))
                    tracker.enter_global_backward(rank)
                tracker.enter(rank, module, BACKWARD)
            else:
                tracker.leave(rank, module, BACKWARD)

        return hook

    def pre_forward(module, args) -> None:
        rank = tracker._rank_of()
        if rank is None:
            return
        tracker.enter(rank, module, FORWARD)
        if torch.is_grad_enabled():
            inputs = grad_tensors(args)
            if inputs:
                # Every input's gradient computed: the module's backward is over.
                register_multi_grad_hook(inputs, on_backward(rank, module, False))
        # The module's forward ends after its own forward hooks (a parallel style's output redistribution, FSDP2's
        # reshard): a hook of this call, registered last, leaves it.
        handle = None

        def post_forward(module, args, output) -> None:
            handle.remove()
            tracker.leave(rank, module, FORWARD)
            if torch.is_grad_enabled():
                outputs = grad_tensors(output)
                if outputs:
                    # Every output's gradient computed: the module's backward begins.
                    register_multi_grad_hook(outputs, on_backward(rank, module, True))

        handle = module.register_forward_hook(post_forward)

    return register_module_forward_pre_hook(pre_forward)


def install_resize_hook(tracker: Tracker) -> Callable[[], None]:
    """`UntypedStorage.resize_` reports the new size to the meter (FSDP2 frees and refills storages this way).
    Returns what puts the original back (a record block ends; dtsim run keeps it to the end)."""
    original = torch.UntypedStorage.resize_

    def resize_(self, size):
        result = original(self, size)
        if not tracker.paused:
            tracker.resized(self)
        return result

    torch.UntypedStorage.resize_ = resize_

    def remove() -> None:
        if torch.UntypedStorage.resize_ is resize_:
            torch.UntypedStorage.resize_ = original

    return remove


def _resize_hook(session):
    return install_resize_hook(session.tracker)


def _module_hooks(session):
    return install_module_hooks(session.tracker).remove


MODULE_ENTRIES = patches.register("modules", [
    patches.Custom("torch.UntypedStorage.resize_", _resize_hook, when=lambda config: config.metered,
                   why="a storage resize (FSDP2's free and refill) is counted by the meter"),
    patches.Custom("torch.nn.modules.module.register_module_forward_pre_hook", _module_hooks,
                   when=lambda config: config.tracks_modules),
    patches.Read("torch._C._current_graph_task_id"),
    patches.Read("torch.autograd.Variable._execution_engine"),
])
