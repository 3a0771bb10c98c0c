"""The registry of everything `dtsim run` replaces or reads in the process it shares with the program's ranks.

A real rank owns a process; `dtsim run`'s ranks share one, so some of torch (c10d's state, torch.cuda, DeviceMesh's
device type, torch.optim's device defaults, ...) and of Python (`threading.Thread.start`, `os._exit`) is replaced
for the run. Each replacement is an entry here: what it replaces (a dotted path), the torch releases it is known for,
an install that returns its undo, and a probe that fails loudly (`TorchContractError`, naming the entry and the
release) when a release moved what the entry names. Private torch symbols that the run layer only reads are entries
too (`read`), so that a symbol a release moved is found by the probe before any rank runs, not halfway through one.

Upstream's `_install_threaded_pg()` / `_uninstall_threaded_pg()` pair (torch/testing/_internal/distributed/
multi_threaded_pg.py) is the shape: `install(session)` applies every entry that applies to the run, in table order,
and returns an `Installed` whose `uninstall()` undoes them in reverse order, leaving torch as it was.

Where an entry goes (docs/architecture.md, "Where a new thing goes"): a replacement of one attribute is a `Replace`
row in its table below (emulation's, meta's, ...), made by a factory `make(session, original) -> replacement`; work
that is not one attribute (a backend registration, a library kernel) is a `Custom` row with its own install/undo.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

# The torch minor releases the entries are known for; an entry lists the subset it applies to.
ALL_RELEASES = ("2.11", "2.13", "2.14", "2.15")
_MISSING = object()


class TorchContractError(RuntimeError):
    """A registered torch internal is not where the entry says, on a release the entry claims to know."""


def torch_release() -> str:
    import torch

    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def resolve_owner(path: str) -> Tuple[Any, str]:
    """'torch.distributed.device_mesh.DeviceMesh.__init__' -> (the DeviceMesh class, '__init__'): the longest prefix
    that imports as a module, then attributes. Raises LookupError naming the part that is missing."""
    parts = path.split(".")
    owner, index = None, 0
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            owner = importlib.import_module(name)
        except ImportError:
            continue
        index = i
        break
    if owner is None:
        raise LookupError(f"no module of '{path}' imports")
    for part in parts[index:-1]:
        try:
            owner = getattr(owner, part)
        except AttributeError:
            raise LookupError(f"'{part}' is missing from '{'.'.join(parts[:parts.index(part)])}'") from None
    return owner, parts[-1]


class Entry:
    """One registered internal. `when(config)`: whether a run with that RunConfig installs it (all runs by default).
    `optional`: the symbol exists only in some of `releases`; its absence skips the entry instead of failing."""

    kind = "entry"

    def __init__(self, path: str, releases: Iterable[str] = ALL_RELEASES, when: Optional[Callable] = None,
                 optional: bool = False, why: str = ""):
        self.path = path
        self.releases = tuple(releases)
        self.when = when
        self.optional = optional
        self.why = why

    def applies(self, config, release: str) -> bool:
        return release in self.releases and (self.when is None or config is None or self.when(config))

    def probe(self, release: str) -> bool:
        """True when the symbol is there; False for an optional entry whose symbol is absent; raises otherwise."""
        try:
            owner, attr = resolve_owner(self.path)
            present = hasattr(owner, attr)
        except LookupError as e:
            if self.optional:
                return False
            raise TorchContractError(self._moved(release, str(e))) from None
        if not present and not self.optional:
            raise TorchContractError(self._moved(release, f"'{attr}' is missing from '{self.path.rsplit('.', 1)[0]}'"))
        return present

    def _moved(self, release: str, what: str) -> str:
        return (f"dtsim run: torch {release} moved '{self.path}' ({self.kind} entry of python/dtsim/run/patches.py, "
                f"known for torch {', '.join(self.releases)}): {what}")

    def install(self, session) -> Optional[Callable[[], None]]:  # pragma: no cover - interface
        raise NotImplementedError


class Read(Entry):
    """A private symbol the run layer reads (calls or inspects) and never replaces."""

    kind = "read"

    def install(self, session) -> None:
        return None


class Replace(Entry):
    """`path` becomes `make(session, original)`; the undo puts the original back (or deletes what was added).

    `by_name`: modules of torch that imported the attribute by name (`from c10d import init_process_group`) get the
    replacement too, and their original back on undo. `adds`: the attribute may be absent (dtsim adds it); absent, it
    is added, and present, left alone."""

    kind = "replace"

    def __init__(self, path: str, make: Callable[[Any, Any], Any], releases: Iterable[str] = ALL_RELEASES,
                 when: Optional[Callable] = None, optional: bool = False, by_name: bool = False, adds: bool = False,
                 why: str = ""):
        super().__init__(path, releases, when, optional, why)
        self.make = make
        self.by_name = by_name
        self.adds = adds

    def probe(self, release: str) -> bool:
        if self.adds:
            try:
                resolve_owner(self.path)
            except LookupError as e:
                raise TorchContractError(self._moved(release, str(e))) from None
            return True
        return super().probe(release)

    def install(self, session) -> Callable[[], None]:
        owner, attr = resolve_owner(self.path)
        own = owner.__dict__.get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if self.adds and hasattr(owner, attr):
            return lambda: None
        original = getattr(owner, attr, None)
        replacement = self.make(session, original)
        setattr(owner, attr, replacement)
        rebound: List[Any] = []
        if self.by_name and original is not None:
            for module in list(sys.modules.values()):
                if module is not owner and getattr(module, "__name__", "").startswith("torch") and \
                        getattr(module, attr, None) is original:
                    setattr(module, attr, replacement)
                    rebound.append(module)

        def undo() -> None:
            for module in rebound:
                if getattr(module, attr, None) is replacement:
                    setattr(module, attr, original)
            if own is _MISSING:
                if attr in getattr(owner, "__dict__", {}):
                    delattr(owner, attr)
            else:
                setattr(owner, attr, own)

        return undo


class Custom(Entry):
    """Work that is not one attribute: `do(session)` returns its undo (or None where the change cannot be undone: the
    entry's `why` says so)."""

    kind = "custom"

    def __init__(self, path: str, do: Callable[[Any], Optional[Callable[[], None]]],
                 releases: Iterable[str] = ALL_RELEASES, when: Optional[Callable] = None, optional: bool = False,
                 why: str = ""):
        super().__init__(path, releases, when, optional, why)
        self.do = do

    def install(self, session) -> Optional[Callable[[], None]]:
        return self.do(session)


class Installed:
    """What `install` applied, undone in reverse order by `uninstall()` (once)."""

    def __init__(self) -> None:
        self.entries: List[Entry] = []
        self._undos: List[Callable[[], None]] = []

    def uninstall(self) -> None:
        while self._undos:
            self._undos.pop()()
        self.entries.clear()


# The tables, in installation order: modules append theirs with `register` when they are imported (emulation.py, the
# process state in rank_state.py, meta.py, check_ops.py, ...).
_TABLES: Dict[str, List[Entry]] = {}


def register(table: str, entries: List[Entry]) -> List[Entry]:
    """Adds (or replaces) the named table of entries; returns them."""
    _TABLES[table] = list(entries)
    return entries


def entries() -> List[Entry]:
    return [e for table in _TABLES.values() for e in table]


def probe_all(release: Optional[str] = None, config=None) -> List[Entry]:
    """Probes every entry that applies to `release` (the running torch's by default): raises TorchContractError at the
    first that moved; returns the entries that are present (optional absent ones left out)."""
    release = release or torch_release()
    return [e for e in entries() if e.applies(config, release) and e.probe(release)]


def install(session, tables: Optional[Iterable[str]] = None) -> Installed:
    """Probes, then installs every entry of `tables` (all by default) that applies to the session's RunConfig. A
    failure halfway undoes what was installed before it, then raises."""
    release = torch_release()
    chosen = [e for name in (tables if tables is not None else list(_TABLES)) for e in _TABLES[name]]
    chosen = [e for e in chosen if e.applies(session.config, release) and e.probe(release)]
    done = Installed()
    try:
        for entry in chosen:
            undo = entry.install(session)
            done.entries.append(entry)
            if undo is not None:
                done._undos.append(undo)
    except BaseException:
        done.uninstall()
        raise
    return done


def read(path: str) -> Any:
    """The value of a registered `Read` entry (raises LookupError for a path that is not registered as read)."""
    for entry in entries():
        if entry.path == path and isinstance(entry, Read):
            owner, attr = resolve_owner(path)
            return getattr(owner, attr)
    raise LookupError(f"'{path}' is not a registered read of python/dtsim/run/patches.py")
