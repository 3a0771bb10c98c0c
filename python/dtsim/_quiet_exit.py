"""The wait at exit that keeps a real Gloo rank out of upstream's teardown race (docs/recording.md, "Upstream's
teardown race"). Gloo's worker thread destroys a work after it has completed, and so releases what the work held: its
tensors (whose Python objects the tensors keep while C++ holds them) and, for a collective issued during backward
(DDP's bucket all-reduces), the thread state with backward's stashed contextvars Context. Each release takes the GIL.
A worker starved of CPU until the program has returned and Python has begun to finalize cannot take it: Python ends
the thread through a noexcept destructor and the rank dies of std::terminate ("terminate called without an active
exception", SIGABRT) with its program done. Waiting at exit, before Python finalizes and with the GIL free, until no
other thread of the process is runnable, avoids it.

Standard library only, and importable by path without the dtsim package (tests/run/reference_site/sitecustomize.py
loads it into plain torchrun ranks): it imports neither torch nor dtsim's extension.
"""
import os
import threading
import time
from typing import List

QUIET_WAIT_S = 5.0  # a thread still runnable then computes on its own (a program's daemon thread)


def runnable_threads() -> List[int]:
    """The process's threads, this one aside, that are running or waiting for a CPU (Linux's task states R and D; a
    thread blocked on a lock, a condition or a socket sleeps: S). Empty where /proc is not there."""
    me = threading.get_native_id()
    runnable = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    for tid in tasks:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread has ended
        if state in ("R", "D"):
            runnable.append(int(tid))
    return runnable


def wait_for_quiet_threads() -> None:
    """Returns once no other thread of the process was runnable at two checks in a row (sleeping between them, so the
    GIL is free for a thread that needs it to finish), or after QUIET_WAIT_S."""
    deadline = time.monotonic() + QUIET_WAIT_S
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
        quiet = 0 if runnable_threads() else quiet + 1
