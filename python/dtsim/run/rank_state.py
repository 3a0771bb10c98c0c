"""What a real rank owns alone in its process, kept per rank in the one process `dtsim run`'s ranks share.

The scheduler (scheduler.py) hands the one running turn from rank to rank; `ProcessState.leave(rank)` runs when a rank
gives the turn away (it waits, or its program ended) and `enter(rank)` when a rank gets it, so that while a rank runs,
the process looks as the rank's own process would:

- **Modules.** Every module that the program imports while a rank runs, and that is not shared (below), is that
  rank's own: rank 0's copy leaves `sys.modules` when rank 0 gives the turn away, and rank 1's first `import` of the
  same name runs the module afresh for rank 1. So a module-level cache, counter or registry, and a class's own state
  (accelerate's `PartialState`), are per rank, as on a real job. Shared by every rank: what was imported before the
  ranks started (torch, dtsim and what they import), the standard library, torch's own tree and its dependencies
  (`SHARED_ROOTS`), packages that hold a compiled extension module (most cannot be loaded twice in a process, and a
  fresh copy of such a package's Python modules would not find its extensions set up: pandas, pyarrow, tokenizers),
  and the packages named by `--shared-modules`. torch's own registries (custom ops, op strategies, pytree nodes) are process-wide: a per-rank
  copy of a module registers again, and the last registration serves every rank, as the same code does; but a
  `torch.library.custom_op` defined again by another rank's copy of the same source is the first definition
  (`_custom_op`: torch's redefinition would destroy the op the earlier ranks hold).
- **`sys.stdout`, `sys.stderr` and `builtins`**: a rank that replaces them (`builtins.print = ...` on rank 0 only,
  `sys.stdout = open(os.devnull, "w")` on the other ranks) changes its own view only.
- **Threads a rank starts belong to it** (`threading.Thread.start`): they see the rank's process groups (c10d's state
  and the groups registered by name), its emulated device, its memory meter and its environment. A thread that runs
  while another rank holds the turn sees that rank's modules and standard streams (docs/run.md).
- **Signal handlers** (`signal.signal`, `signal.getsignal`): a rank that sets one sets its own (from any of its
  threads, as a real rank's main thread may), and reads back its own. No signal calls them: a signal to `dtsim run`
  is the launcher's (SIGINT and SIGTERM end the run with its report, as a real job's agent stops its workers).
- **`os._exit(code)`** on a rank ends that rank's program at once: a non-zero code ends the run (exit 1, naming the
  rank and its code, with the report written), 0 ends the rank alone, as a real rank's process that exits early.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import signal
import sys
import threading
from typing import Any, Dict, List, Optional, Set

from . import patches

# Top-level packages every rank shares besides the standard library: torch's tree, what torch imports or is built
# with, the test runner, and dtsim itself. A per-rank copy of one of them would give torch two versions of its own
# types.
SHARED_ROOTS = frozenset({
    "torch", "torchgen", "functorch", "triton", "numpy", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
    "filelock", "fsspec", "typing_extensions", "optree", "setuptools", "pkg_resources", "_distutils_hack", "nvidia",
    "dtsim", "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "__main__", "__mp_main__",
    # Registers its Arrow extension types in pyarrow's process-wide registry at import, which refuses a second copy.
    "datasets",
    # torch's FSDP2 and DTensor import it where it is installed, and hold its types (MeshAxis, the partition specs): a
    # rank's own copy would hand torch types it does not recognize (torchtitan's spmd_types path).
    "spmd_types",
})
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_MISSING = object()


class RankExit(BaseException):
    """Raised in a rank's thread by `os._exit(code)`: the rank's program ends there (launcher.py)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class ProcessState:
    """Each rank's modules, standard streams and builtins, swapped with the turn."""

    def __init__(self, world_size: int, shared_roots=(), per_rank_modules: bool = True):
        self.per_rank_modules = per_rank_modules
        self._roots = SHARED_ROOTS | frozenset(shared_roots) | frozenset(sys.stdlib_module_names) | \
            frozenset(sys.builtin_module_names)
        self._shared: Set[str] = set(sys.modules)  # imported before the ranks start: shared
        self._compiled_roots: Dict[str, bool] = {}
        self._modules: List[Dict[str, Any]] = [{} for _ in range(world_size)]
        self._seen = len(sys.modules)
        self._streams = [(None, None)] * world_size  # a rank's own sys.stdout / sys.stderr where it replaced them
        self.run_streams = (sys.stdout, sys.stderr)  # the run's (launcher.py sets them once they are the ranks')
        self._builtins = dict(builtins.__dict__)  # as the ranks start
        self._overrides: List[Dict[str, Any]] = [{} for _ in range(world_size)]
        self._applied: Dict[str, Any] = {}  # the overrides in builtins now
        self.signal_handlers: List[Dict[int, Any]] = [{} for _ in range(world_size)]  # each rank's own
        # The process's handlers as the ranks start (before the launcher's own SIGTERM handler): what a rank reads
        # where it set none.
        self.start_handlers: Dict[int, Any] = {}
        for number in range(1, signal.NSIG):
            try:
                self.start_handlers[number] = _PROCESS_GETSIGNAL(number)
            except (ValueError, OSError):  # numbers this platform has no signal for
                pass

    # ---- modules ---------------------------------------------------------------------------------------------

    def is_shared(self, name: str, module: Any) -> bool:
        root = name.split(".", 1)[0]
        if not self.per_rank_modules or name in self._shared or root in self._roots:
            return True
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or getattr(module, "__file__", None)
        if isinstance(origin, str) and origin.endswith(_EXTENSION_SUFFIXES):
            return True
        return self._compiled(root)

    def _compiled(self, root: str) -> bool:
        """Whether the top-level package `root` holds a compiled extension module anywhere below it (pandas, pyarrow,
        tokenizers): shared whole, since a fresh copy of its Python modules would not find the extensions' parent
        packages set up (and most extensions load once per process)."""
        known = self._compiled_roots.get(root)
        if known is not None:
            return known
        module = sys.modules.get(root)
        found = False
        for folder in list(getattr(module, "__path__", None) or []):
            for _, _, files in os.walk(folder):
                if any(f.endswith(_EXTENSION_SUFFIXES) for f in files):
                    found = True
                    break
            if found:
                break
        self._compiled_roots[root] = found
        if found:
            self._roots = self._roots | {root}
        return found

    def module_names(self, rank: int) -> List[str]:
        """The names of the modules that are `rank`'s own (imported while it ran), sorted."""
        return sorted(self._modules[rank])

    def _leave_modules(self, rank: int) -> None:
        modules = sys.modules
        own = self._modules[rank]
        if len(modules) != self._seen:  # something was imported during the turn: sort the new names
            for name, module in list(modules.items()):
                if name in own or name in self._shared:
                    continue
                if self.is_shared(name, module):
                    self._shared.add(name)
                else:
                    own[name] = module
        for name in list(own):
            module = modules.pop(name, _MISSING)
            if module is _MISSING:
                del own[name]  # the program removed it itself
            else:
                own[name] = module
        self._seen = len(modules)

    def _enter_modules(self, rank: int) -> None:
        own = self._modules[rank]
        if own:
            sys.modules.update(own)
        self._seen = len(sys.modules)

    # ---- streams and builtins --------------------------------------------------------------------------------

    def _leave_globals(self, rank: int) -> None:
        out, err = self.run_streams
        self._streams[rank] = (sys.stdout if sys.stdout is not out else None,
                               sys.stderr if sys.stderr is not err else None)
        sys.stdout, sys.stderr = out, err
        now = builtins.__dict__
        base = self._builtins
        if not self._applied and len(now) == len(base) and now == base:  # the common case, compared in C
            self._overrides[rank] = {}
            return
        overrides = {k: v for k, v in now.items() if base.get(k, _MISSING) is not v}
        for k in base:
            if k not in now:
                overrides[k] = _MISSING  # deleted by the rank
        self._overrides[rank] = overrides
        for k in overrides:
            if k in base:
                now[k] = base[k]
            else:
                now.pop(k, None)
        self._applied = {}

    def _enter_globals(self, rank: int) -> None:
        out, err = self._streams[rank]
        if out is not None:
            sys.stdout = out
        if err is not None:
            sys.stderr = err
        overrides = self._overrides[rank]
        if not overrides:
            self._applied = overrides
            return
        now = builtins.__dict__
        for k, v in overrides.items():
            if v is _MISSING:
                now.pop(k, None)
            else:
                now[k] = v
        self._applied = overrides

    # ---- the turn --------------------------------------------------------------------------------------------

    def leave(self, rank: int) -> None:
        self._leave_modules(rank)
        self._leave_globals(rank)

    def enter(self, rank: int) -> None:
        self._enter_modules(rank)
        self._enter_globals(rank)

    def restore_base(self) -> None:
        """After the run: the run's own streams and the builtins as the ranks found them."""
        sys.stdout, sys.stderr = self.run_streams
        now = builtins.__dict__
        for k in list(now):
            if k not in self._builtins:
                del now[k]
        now.update(self._builtins)


def _thread_start(session, original):
    """A thread started by a rank runs as that rank: bound to it (the scheduler's current rank, hence its c10d state,
    meter and device), with its process groups registered by name in the thread's own C++ registry, under the rank's
    device and meter modes."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    register = patches.read("torch._C._distributed_c10d._register_process_group")

    def start(self):
        rank = session.rank_of()
        if rank is None or getattr(self, "_dtsim_rank", None) is not None:
            return original(self)
        self._dtsim_rank = rank
        run = self.run

        def run_as_rank():
            session.scheduler.bind(rank)
            for pg, name in list(getattr(c10d._world, "pg_names", {}).items()):
                try:
                    register(name, pg)
                except RuntimeError:  # registered in this thread already
                    pass
            torch.autograd.set_multithreading_enabled(False)
            modes = session.rank_modes(rank) if session.rank_modes is not None else None
            if modes is None:
                return run()
            with modes:
                return run()

        self.run = run_as_rank
        return original(self)

    return start


def _os_exit(session, original):
    def _exit(code):
        rank = session.rank_of()
        if rank is None:
            return original(code)
        if threading.current_thread() is not _rank_thread(session):  # a thread the rank started
            session.scheduler.abort(f"rank {rank} called os._exit({code}) in its thread "
                                    f"'{threading.current_thread().name}': its process would end here", 1)
        raise RankExit(int(code))

    return _exit


_UNCATCHABLE = ("SIGKILL", "SIGSTOP")
_PROCESS_GETSIGNAL = signal.getsignal  # the process's own (the replacement below is the ranks')


def _signal_number(signalnum) -> int:
    """`signalnum` checked as signal.signal checks it (ValueError out of range, OSError for SIGKILL and SIGSTOP)."""
    number = int(signalnum)  # TypeError for a non-integer, as signal.signal
    if not 1 <= number < signal.NSIG:
        raise ValueError("signal number out of range")
    if any(getattr(signal, name, None) == number for name in _UNCATCHABLE):
        raise OSError(22, "Invalid argument")
    return number


def _rank_handler(session, rank: int, number: int):
    """Rank `rank`'s handler of signal `number`: the one it set, else the process's as the ranks started."""
    own = session.scheduler.process_state.signal_handlers[rank]
    return own[number] if number in own else session.scheduler.process_state.start_handlers.get(number)


def _signal_signal(session, original):
    def rank_signal(signalnum, handler):
        rank = session.rank_of()
        if rank is None:
            return original(signalnum, handler)
        number = _signal_number(signalnum)
        if handler not in (signal.SIG_DFL, signal.SIG_IGN) and not callable(handler):
            raise TypeError("signal handler must be signal.SIG_IGN, signal.SIG_DFL, or a callable object")
        previous = _rank_handler(session, rank, number)
        session.scheduler.process_state.signal_handlers[rank][number] = handler
        return previous

    return rank_signal


def _signal_getsignal(session, original):
    def rank_getsignal(signalnum):
        rank = session.rank_of()
        if rank is None:
            return original(signalnum)
        return _rank_handler(session, rank, _signal_number(signalnum))

    return rank_getsignal


def _rank_thread(session) -> Optional[threading.Thread]:
    rank = session.rank_of()
    return session.scheduler.ranks[rank].thread if rank is not None else None


def _custom_op(session, original):
    """torch.library.custom_op, where each rank's copy of a module defines the same op again. torch lets a custom op
    be redefined by destroying the first definition's library, which leaves the earlier ranks' handles on an operator
    with no schema (torch then fails an internal assert, or crashes). So the first rank's definition of an op serves
    every rank whose copy of the same source (the same file and line) defines it again, as one process's module would;
    a rank that redefines its own op, or an op defined elsewhere, goes to torch's."""
    from torch._library import custom_ops

    defined: Dict[str, Any] = {}  # qualname -> (the defining rank, the function's file and line)

    def custom_op(name, fn=None, /, **kwargs):
        def define(function):
            code = getattr(function, "__code__", None)
            site = (code.co_filename, code.co_firstlineno) if code is not None else None
            rank = session.rank_of()
            first = defined.get(name)
            existing = custom_ops.OPDEFS.get(name)
            if existing is not None and first is not None and site is not None and first[1] == site and \
                    first[0] != rank:
                return existing
            opdef = original(name, function, **kwargs)
            defined[name] = (rank, site)
            return opdef

        return define if fn is None else define(fn)

    return custom_op


PROCESS_ENTRIES = patches.register("process", [
    patches.Replace("threading.Thread.start", _thread_start,
                    why="threads a rank starts see its process groups, device and meter"),
    patches.Replace("os._exit", _os_exit, why="os._exit on a rank ends that rank's program, not the whole run"),
    patches.Replace("signal.signal", _signal_signal, why="a rank's signal handlers are its own (and a rank's thread "
                    "is no main thread, where signal.signal refuses)"),
    patches.Replace("signal.getsignal", _signal_getsignal, why="a rank reads back its own signal handlers"),
    patches.Replace("torch._library.custom_ops.custom_op", _custom_op, by_name=True,
                    why="each rank's module copy defines its custom ops again; the first definition serves them all"),
    patches.Read("torch._library.custom_ops.OPDEFS"),
    patches.Read("torch.utils._python_dispatch._disable_current_modes"),  # process_group.py: results outside modes
])
