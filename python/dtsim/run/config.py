"""One run's configuration (`RunConfig`, from the command line, validated once) and the objects its ranks share
(`RunSession`): what the launcher hands down to the world, the tracker, the emulation and the patches registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, FrozenSet, Optional, Tuple


@dataclass(frozen=True)
class RunConfig:
    """What `dtsim run`'s options ask for. A RunConfig that exists is valid (launcher.py builds it after checking
    every option)."""

    nproc_per_node: int = 1  # ranks per node (--nproc-per-node)
    nnodes: int = 1  # simulated nodes (--nnodes)
    meta: bool = False  # --meta: shapes only
    memory: bool = False  # --memory
    check_ops: bool = False  # --check-ops
    report: bool = False  # --report
    report_json: Optional[str] = None  # --report-json FILE
    trace: Optional[str] = None  # --trace FILE
    rank_prefix: bool = False  # --rank-prefix
    shown_ranks: Optional[FrozenSet[int]] = None  # --local-ranks-filter; None: every rank
    timeout_s: float = 600.0  # --timeout
    timeout_text: str = "600"  # as the user gave it, for messages
    shared_modules: Tuple[str, ...] = ()  # --shared-modules: top-level packages every rank shares
    per_rank_modules: bool = True  # each rank imports its own copy of the program's modules (--shared-modules all)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def reporting(self) -> bool:
        return self.report or self.report_json is not None

    @property
    def metered(self) -> bool:
        """Whether every rank's tensor memory is counted: asked for, or needed by a report, --meta or --trace."""
        return self.memory or self.reporting or self.meta or self.trace is not None

    @property
    def tracks_modules(self) -> bool:
        return self.reporting or self.check_ops or self.trace is not None


@dataclass
class RunSession:
    """The run's shared objects, made once by the launcher. `rank_of()` is the calling thread's rank (None outside
    the ranks' threads); the patches' factories close over this session."""

    config: RunConfig
    scheduler: Any = None
    world: Any = None
    tracker: Any = None
    store: Any = None
    devices: Any = None
    checker: Any = None
    rank_modes: Optional[Callable[[int], Any]] = None  # the dispatch and function modes a rank's threads run under
    extra: dict = field(default_factory=dict)

    def rank_of(self) -> Optional[int]:
        return self.scheduler.current_rank()

    def local_rank_of(self) -> int:
        rank = self.scheduler.current_rank()
        return 0 if rank is None else rank % self.config.nproc_per_node
