"""The baton: every simulated rank is a Python thread, and exactly one of them runs at a time.

A rank runs until it must wait for another (a collective whose peers have not arrived, a receive whose message has not
been sent, the end of its program); it then hands the baton to the next rank that can go on, in ascending rank order
after itself. A run is therefore deterministic: the same program prints the same lines in the same order every time.

Process-wide state that a real rank owns alone (the global RNGs, the rank's environment variables, `sys.argv`,
`sys.modules["__main__"]`) is saved when a rank hands the baton on and restored when it gets it back (`RankContext`);
so are its imported modules, standard streams and builtins (rank_state.py's `ProcessState`).

When the rank that holds the baton must wait and no rank can go on, the program would hang on a real cluster: the
scheduler ends the run with a report of every rank's pending call and Python stack (`hang_report`).
"""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from typing import Callable, Dict, List, Optional

import torch


class Waitable:
    """Something a rank can wait for; `ready()` is read under the scheduler's lock."""

    def ready(self) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


class RunAborted(BaseException):
    """Raised in a rank's thread when the run is ended while that rank waits (a hang, a mismatch, a failure)."""


def _dtensor_dispatcher():
    module = sys.modules.get("torch.distributed.tensor._api")
    return module.DTensor._op_dispatcher if module is not None else None


class RankContext:
    """What a rank owns alone in a real job but a process shares: swapped in and out with the baton.

    Besides the RNGs, `sys.argv` and `__main__`: DTensor's custom op handlers (which `loss_parallel()` adds and removes
    around its block) and its implicit-replication flag (`implicit_replication()`), process-wide in upstream.
    """

    def __init__(self, env: Dict[str, str], main_module, argv: List[str]):
        self.env = env
        self.main_module = main_module
        self.argv = argv
        self.torch_rng: Optional[torch.Tensor] = None
        self.python_rng = None
        self.numpy_rng = None
        self.dtensor_handlers = None
        self.dtensor_implicit = False

    def save(self) -> None:
        dispatcher = _dtensor_dispatcher()
        if dispatcher is not None:
            self.dtensor_handlers = dict(dispatcher._custom_op_handlers)
            self.dtensor_implicit = torch._C._get_dtensor_allow_implicit_replication()
        self.torch_rng = torch.get_rng_state()
        self.python_rng = random.getstate()
        # NumPy's global generator costs ~0.2 ms to save and restore; it exists only once numpy.random is imported.
        numpy_random = sys.modules.get("numpy.random")
        self.numpy_rng = numpy_random.get_state() if numpy_random is not None else None
        self.argv = list(sys.argv)

    def restore(self, environ) -> None:
        for key, value in self.env.items():
            if environ.get(key) != value:
                environ[key] = value
        sys.modules["__main__"] = self.main_module
        sys.argv[:] = self.argv
        dispatcher = _dtensor_dispatcher()
        if dispatcher is not None and self.dtensor_handlers is not None:
            handlers = dispatcher._custom_op_handlers
            if handlers != self.dtensor_handlers:
                handlers.clear()
                handlers.update(self.dtensor_handlers)
            torch._C._set_dtensor_allow_implicit_replication(self.dtensor_implicit)
        if self.torch_rng is not None:
            torch.set_rng_state(self.torch_rng)
            random.setstate(self.python_rng)
            numpy_random = sys.modules.get("numpy.random")
            if numpy_random is not None and self.numpy_rng is not None:
                numpy_random.set_state(self.numpy_rng)


class RankState:
    RUNNING, WAITING, DONE, FAILED = "running", "waiting", "done", "failed"

    def __init__(self, rank: int, context: RankContext):
        self.rank = rank
        self.context = context
        self.status = RankState.WAITING  # waits for its first turn
        self.waiting_for: Optional[Waitable] = None
        self.thread: Optional[threading.Thread] = None
        self.exit_code: Optional[int] = None
        self.error: Optional[str] = None  # the traceback of a failed rank


class Scheduler:
    def __init__(self, contexts: List[RankContext], environ):
        # One lock; a condition per rank, so that handing the turn on wakes the one rank that gets it, and one for
        # the launcher's thread, which waits for the end of the run.
        self._cv = threading.Condition()
        self._turn = [threading.Condition(self._cv._lock) for _ in contexts]
        self.ranks = [RankState(r, c) for r, c in enumerate(contexts)]
        self._environ = environ
        self.holder: Optional[int] = None
        self.turn_started = time.monotonic()
        self.abort_reason: Optional[str] = None  # set once: the run is over
        self.abort_code = 0
        self._local = threading.local()
        self.first_failure: Optional[RankState] = None
        self.process_state = None  # rank_state.ProcessState: each rank's modules, streams and builtins
        self.holder_cell = None  # a memoryview of one int32 that mirrors `holder` (the launcher's C watchdog reads it)

    # ---- the current rank ----------------------------------------------------------------------------------------

    def current_rank(self) -> Optional[int]:
        return getattr(self._local, "rank", None)

    def bind(self, rank: int) -> None:
        self._local.rank = rank

    # ---- turns ---------------------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._cv:
            self._give_turn(0)

    def wait_first_turn(self, rank: int) -> None:
        with self._cv:
            self._wait_for_turn(rank)

    def wait(self, waitable: Waitable) -> None:
        """The calling rank waits until `waitable` is ready, letting the other ranks run meanwhile."""
        rank = self.current_rank()
        with self._cv:
            if self.abort_reason is not None:
                raise RunAborted(self.abort_reason)
            if waitable.ready():
                return
            state = self.ranks[rank]
            state.status = RankState.WAITING
            state.waiting_for = waitable
            state.context.save()
            if self.process_state is not None:
                self.process_state.leave(rank)
            self._pass_on(rank)
            self._wait_for_turn(rank)

    def finish(self, rank: int, exit_code: int, error: Optional[str]) -> None:
        with self._cv:
            state = self.ranks[rank]
            state.exit_code = exit_code
            state.error = error
            if self.process_state is not None and self.holder == rank:
                self.process_state.leave(rank)
            state.waiting_for = None
            if exit_code != 0:
                state.status = RankState.FAILED
                if self.first_failure is None:
                    self.first_failure = state
                # As torchrun's agent does when a worker fails: the whole job ends now.
                self._abort(f"rank {rank} failed (exit code {exit_code})", 1)
                return
            state.status = RankState.DONE
            if self.abort_reason is None:
                self._pass_on(rank)

    def abort(self, reason: str, code: int) -> None:
        with self._cv:
            self._abort(reason, code)

    def wait_until_over(self, poll_s: float, on_poll: Callable[[], None]) -> None:
        """The launcher's thread: returns when every rank is done or the run was ended."""
        with self._cv:
            while self.abort_reason is None and not all(
                    s.status in (RankState.DONE, RankState.FAILED) for s in self.ranks):
                self._cv.wait(poll_s)
                if self.abort_reason is None:
                    self._cv.release()
                    try:
                        on_poll()
                    finally:
                        self._cv.acquire()

    # ---- under the lock ------------------------------------------------------------------------------------------

    def _abort(self, reason: str, code: int) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
            self.abort_code = code
        self.holder = None
        self._cv.notify_all()
        for turn in self._turn:
            turn.notify_all()

    def _wait_for_turn(self, rank: int) -> None:
        while self.holder != rank:
            if self.abort_reason is not None:
                raise RunAborted(self.abort_reason)
            self._turn[rank].wait()
        state = self.ranks[rank]
        state.status = RankState.RUNNING
        state.waiting_for = None
        state.context.restore(self._environ)
        if self.process_state is not None:
            self.process_state.enter(rank)

    def _give_turn(self, rank: int) -> None:
        self.holder = rank
        if self.holder_cell is not None:
            self.holder_cell[0] = rank
        self.turn_started = time.monotonic()
        self._turn[rank].notify()

    def _can_go_on(self, state: RankState) -> bool:
        if state.status != RankState.WAITING:
            return False
        return state.waiting_for is None or state.waiting_for.ready()

    def _pass_on(self, rank: int) -> None:
        n = len(self.ranks)
        for step in range(1, n + 1):
            candidate = self.ranks[(rank + step) % n]
            if self._can_go_on(candidate):
                self._give_turn(candidate.rank)
                return
        if all(s.status == RankState.DONE for s in self.ranks):
            self.holder = None
            self._cv.notify_all()  # the launcher's thread
            return
        self._abort(self.hang_report(), 4)

    # ---- reports -------------------------------------------------------------------------------------------------

    def hang_report(self) -> str:
        frames = sys._current_frames()
        lines = ["every rank waits and none can go on: on a real cluster this job would hang here"]
        for s in self.ranks:
            if s.status == RankState.DONE:
                lines.append(f"  rank {s.rank}: finished its program")
                continue
            what = s.waiting_for.describe() if s.waiting_for is not None else "running"
            lines.append(f"  rank {s.rank}: waits for {what}")
            stack = user_stack(frames.get(s.thread.ident) if s.thread is not None else None)
            lines.extend(f"      at {frame}" for frame in stack)
        return "\n".join(lines)

    def running_report(self, rank: int) -> List[str]:
        state = self.ranks[rank]
        frames = sys._current_frames()
        return user_stack(frames.get(state.thread.ident) if state.thread is not None else None)


_INTERNAL = ("/torch/", "/dtsim/run/", "/threading.py", "/contextlib.py")


def user_stack(frame, limit: int = 6) -> List[str]:
    """The innermost frames of `frame`'s stack that are the program's own (not torch's or dtsim's), innermost first,
    as `file:line in function`; the innermost library frame is kept when it called into the wait."""
    if frame is None:
        return []
    entries = traceback.extract_stack(frame)
    own = [e for e in entries if not any(part in e.filename for part in _INTERNAL)]
    picked = own[-limit:] if own else entries[-limit:]
    return [f"{e.filename}:{e.lineno} in {e.name}" for e in reversed(picked)]
