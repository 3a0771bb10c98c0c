"""Test-only, for the reference runs of tests/titan/ (real torchrun + Gloo on this CPU machine): torchtitan has no CPU
device (its device falls back to "cuda" where torch finds no accelerator), so on the reference's PYTHONPATH alone this
makes torch name the CPU as the available device and gives torch.cpu the calls torchtitan makes of its device module
(memory statistics answer 0). It is never on a user's path: dtsim run needs nothing of it."""
import types

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"
_cpu = torch.cpu


def _zero(*args, **kwargs):
    return 0


def _nothing(*args, **kwargs):
    return None


for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
    setattr(_cpu, _name, _zero)
_cpu.reset_peak_memory_stats = _nothing
_cpu.empty_cache = _nothing
_cpu.memory_stats = lambda *a, **k: {"num_alloc_retries": 0, "num_ooms": 0}
_cpu.get_device_name = lambda *a, **k: "cpu"
_cpu.get_device_properties = lambda *a, **k: types.SimpleNamespace(name="cpu", total_memory=80 * 1024 ** 3)
_cpu.set_device = _nothing
_cpu.current_device = _zero
_original_device_count = getattr(_cpu, "device_count", None)
_cpu.device_count = lambda: 1 << 16
