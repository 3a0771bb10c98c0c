"""On PYTHONPATH of the both-ways tests' real torchrun runs only (tests/run/test_run.py): every process of the
reference job waits at exit, before Python finalizes and with the GIL free, until no other thread of it is runnable.
That keeps the reference ranks out of upstream's Gloo teardown race (docs/run.md), in which a Gloo worker thread that
releases a finished work after finalization began aborts the rank. The wait (python/dtsim/_quiet_exit.py, the one
`dtsim record`'s ranks use) is loaded by its path, so the reference imports neither dtsim nor anything beyond the
standard library for it; it runs after the program's own exit handlers and changes nothing the program computes or
prints.

Each rank's standard output also writes whole lines: the reference's ranks share one pipe, and under
PYTHONUNBUFFERED=1 `print(text)` is two writes (the text, then its newline), so two ranks printing at once
interleaved them ("result rank 1 doneresult rank 0 done", seen in test_all_reduce_of_a_leaf_...). Line buffering
without write-through joins a line into one write (atomic on a pipe below PIPE_BUF), and changes no line's text."""
import atexit
import importlib.util
import os
import sys

try:
    sys.stdout.reconfigure(line_buffering=True, write_through=False)
except (AttributeError, ValueError):  # not a TextIOWrapper: leave it
    pass

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "python", "dtsim", "_quiet_exit.py")
_spec = importlib.util.spec_from_file_location("_dtsim_quiet_exit", _PATH)
_quiet_exit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_quiet_exit)
atexit.register(_quiet_exit.wait_for_quiet_threads)
