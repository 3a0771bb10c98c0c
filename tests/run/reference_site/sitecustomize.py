"""On PYTHONPATH of the both-ways tests' real torchrun runs only (tests/run/test_run.py): every process of the
reference job waits at exit, before Python finalizes and with the GIL free, until no other thread of it is runnable.
That keeps the reference ranks out of upstream's Gloo teardown race (docs/run.md), in which a Gloo worker thread that
releases a finished work after finalization began aborts the rank. It runs after the program's own exit handlers
and changes nothing the program computes or prints."""
import atexit

from dtsim.recorder import _wait_for_quiet_threads

atexit.register(_wait_for_quiet_threads)
