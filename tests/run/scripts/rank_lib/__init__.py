"""A library with the module-level state that real ranks each hold alone (tests/run/scripts/rank_modules.py).

Each pattern is one a real package has: a cache of wrapper classes closing over the first caller's device mesh
(torchtitan's simple_fsdp), class-level state (accelerate's PartialState), a module-level counter, and a registry
filled at import.
"""
import os

import torch
import torch.distributed as dist

# Filled at import, as a plugin registry is: a rank that shares another rank's copy finds that rank's entry.
REGISTRY = {}
REGISTRY["imported_by_rank"] = int(os.environ["RANK"])

_counter = 0


def bump() -> int:
    """A module-level counter: each rank's program calls it its own number of times."""
    global _counter
    _counter += 1
    return _counter


_wrappers = {}


def gather_wrapper(mesh):
    """The class that all-gathers over `mesh`, made once and cached by name, closing over the first mesh it saw."""
    if "gather" not in _wrappers:
        group = mesh.get_group()

        class Gather:
            @staticmethod
            def apply(t):
                out = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
                dist.all_gather(out, t, group=group)
                return torch.cat(out)

        _wrappers["gather"] = Gather
    return _wrappers["gather"]


class State:
    """Class-level state shared by every instance, set by the first: the rank the process runs as."""

    _shared = {}

    def __init__(self):
        if not self._shared:
            self._shared["rank"] = dist.get_rank()
            self._shared["world"] = dist.get_world_size()
        self.__dict__ = self._shared
