"""GPU kernels a program on the emulated GPUs calls that torch has only for a GPU, answered on the CPU for `dtsim run`
(the registry's "gpu_kernels" table; docs/run.md, "GPU scripts on a CPU machine").

- **FlexAttention's backward.** torch refuses `flex_attention` on CPU tensors that require grad (its
  `_validate_device`), and its compiled CPU kernel (inductor's C++ template) is inference only. On the emulated GPUs
  `flex_attention` calls the flex_attention higher-order op directly instead: its dense implementation
  of the same `score_mod` and block mask (scores materialized, masked, softmax, with its autograd and its
  `flex_attention_backward`), which is the math the GPU's fused kernel computes. A program that is not on the
  emulated GPUs (a CPU program) keeps torch's refusal, as under torchrun.
- **`torch.compile` of `flex_attention` and of `create_block_mask`** (torchtitan compiles both where it imports
  them): on the emulated GPUs the call runs the eager function, for the reason above; `create_block_mask`'s result is
  the same integers and booleans either way. Every other `torch.compile` goes to torch's.
- **What dynamo asks of CUDA** around every frame it compiles. `torch.cuda.is_current_stream_capturing()` is False
  (CUDA graphs are refused, emulation.py). `torch.cuda.get_rng_state` and `set_rng_state` (and their `_all` forms),
  which it saves and restores, keep one state per rank and device. Random numbers of the emulated GPUs
  are drawn from the rank's CPU generator, so this state is what the program last set, never a draw's.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Dict, Tuple

import torch

from . import emulation, patches

_FLEX = "torch.nn.attention.flex_attention"
# torch's own switch between its eager flex_attention's two paths: True calls the higher-order op directly, False
# (torch's default) runs it through dynamo with an eager backend, whose tracing asks the accelerator for its current
# stream, which an emulated GPU's CPU tensors cannot answer. Both paths compute the op's dense implementation; the
# direct one also skips torch's warning that the call is not compiled (_say_eager says what runs instead).
_DIRECT_SWITCH = "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"
_said: set = set()
_said_lock = threading.Lock()


def _on_emulated_gpu() -> bool:
    return emulation.program_on_gpu()


def _say_eager(name: str, how: str) -> None:
    """Says once per run that the program's `name` runs eagerly on the emulated GPUs, and `how`."""
    with _said_lock:
        if name in _said:
            return
        _said.add(name)
    print(f"dtsim run: {name} runs eagerly on the emulated GPUs: {how}", file=sys.__stderr__)


_FLEX_HOW = ("upstream's dense FlexAttention of the same score_mod and block mask, with its backward (torch has no "
             "FlexAttention backward on a CPU)")


def _validate_device(session, original):
    def validate_device(query, key, value):
        if query.device.type in ("cpu", "meta") and _on_emulated_gpu():
            return None
        return original(query, key, value)

    return validate_device


def _flex_attention(session, original):
    module = sys.modules[_FLEX]

    def flex_attention(*args, **kwargs):
        if not _on_emulated_gpu():
            return original(*args, **kwargs)
        _say_eager("flex_attention", _FLEX_HOW)
        before = getattr(module, _DIRECT_SWITCH)
        setattr(module, _DIRECT_SWITCH, True)
        try:
            return original(*args, **kwargs)
        finally:
            setattr(module, _DIRECT_SWITCH, before)

    flex_attention.__wrapped__ = original
    flex_attention.__name__ = original.__name__
    flex_attention.__doc__ = original.__doc__
    session.extra["flex_attention"] = (original, flex_attention)
    return flex_attention


def _compile(session, original):
    def eager_targets() -> Dict[int, Tuple[Callable[..., Any], str]]:
        """The functions whose torch.compile runs eagerly on the emulated GPUs, by identity: (the function to call
        there, its name)."""
        from torch.nn.attention import flex_attention as flex

        targets = {id(flex.create_block_mask): (flex.create_block_mask, "create_block_mask")}
        for function in session.extra.get("flex_attention", ()):
            targets[id(function)] = (flex.flex_attention, "flex_attention")
        return targets

    def compile(model=None, **kwargs):
        if model is None:  # the decorator form: torch.compile(options=...)(fn)
            return lambda fn: compile(fn, **kwargs)
        target = eager_targets().get(id(model))
        if target is None:
            return original(model, **kwargs)
        function, name = target
        compiled = original(model, **kwargs)  # compiles on its first call, which only a CPU program makes

        def eager_on_emulated_gpu(*args, **call_kwargs):
            if not _on_emulated_gpu():
                return compiled(*args, **call_kwargs)
            _say_eager(f"torch.compile({name})", _FLEX_HOW if name == "flex_attention" else
                       "the same block mask (inductor's CPU compile of it is slow)")
            with _said_lock:
                _said.add(name)  # the eager function need not say it again
            return function(*args, **call_kwargs)

        eager_on_emulated_gpu.__wrapped__ = model
        eager_on_emulated_gpu.__name__ = getattr(model, "__name__", "compiled")
        return eager_on_emulated_gpu

    return compile


class _RankRngStates:
    """torch.cuda's RNG state per (rank, device): what the program last set, else a fresh generator's state."""

    def __init__(self, session) -> None:
        self._session = session
        self._states: Dict[Tuple[Any, int], torch.Tensor] = {}
        self._initial = torch.Generator().get_state()

    def _key(self, device) -> Tuple[Any, int]:
        index = emulation.device_index(device)
        if index is None:
            index = emulation.devices(self._session).current()
        return self._session.rank_of(), index

    def get(self, device="cuda") -> torch.Tensor:
        return self._states.get(self._key(device), self._initial).clone()

    def set(self, new_state, device="cuda") -> None:
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
            got = type(new_state).__name__ + (f" of {new_state.dtype}" if isinstance(new_state, torch.Tensor) else "")
            raise TypeError(f"torch.cuda.set_rng_state: new_state must be a torch.ByteTensor, got {got}")
        self._states[self._key(device)] = new_state.detach().clone()

    def get_all(self) -> list:
        return [self.get(i) for i in range(emulation.devices(self._session).count)]

    def set_all(self, new_states) -> None:
        for i, state in enumerate(new_states):
            self.set(state, i)


def _rng(name: str):
    def make(session, original):
        states = session.extra.get("cuda_rng_states")
        if states is None:
            states = session.extra["cuda_rng_states"] = _RankRngStates(session)
        return getattr(states, name)

    return make


ENTRIES = patches.register("gpu_kernels", [
    patches.Replace(f"{_FLEX}._validate_device", _validate_device,
                    why="FlexAttention's backward on the emulated GPUs' CPU tensors (upstream's dense path)"),
    patches.Read(f"{_FLEX}.{_DIRECT_SWITCH}"),
    patches.Replace(f"{_FLEX}.flex_attention", _flex_attention, by_name=True,
                    why="on the emulated GPUs, the higher-order op called directly (_DIRECT_SWITCH)"),
    patches.Read(f"{_FLEX}.create_block_mask"),
    patches.Replace("torch.compile", _compile,
                    why="flex_attention and create_block_mask compiled on the emulated GPUs run eagerly"),
    patches.Replace("torch.cuda.is_current_stream_capturing", lambda session, original: (lambda: False),
                    by_name=True, why="dynamo asks before every frame it compiles; no stream captures (CUDA graphs are "
                    "refused)"),
] + [patches.Replace(f"torch.cuda.{name}", _rng(method), by_name=True,
                     why="dynamo saves and restores it around every frame it compiles")
     for name, method in (("get_rng_state", "get"), ("set_rng_state", "set"), ("get_rng_state_all", "get_all"),
                          ("set_rng_state_all", "set_all"))])
