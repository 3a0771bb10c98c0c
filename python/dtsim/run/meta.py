"""`dtsim run --meta`: the program on meta tensors, for shapes, collectives and per-rank memory at large rank counts.

Every tensor the program makes lives on the meta device (MetaForAll below), so ops compute shapes, dtypes and sizes
and no values. What still runs as in a data run: every rank's Python code, the process groups, every collective
(checked against its peers and counted in the report: the simulated backend meets meta tensors as it meets others),
DTensor's sharding propagation, FSDP2 and the memory meter (a meta tensor counts its size).

Two things upstream does differently on meta tensors are made to run as on data:
- c10d's functional collectives (DTensor's redistributions, the parallel styles) have meta kernels that return an
  empty result without calling the process group: install() replaces them by kernels that call the group, so these
  collectives are met, checked and counted as in a data run;
- FSDP2 refuses meta parameters at its lazy init (a real job must materialize them): the check is switched off.
What has no values: a read of them (`.item()`, `.tolist()`, `bool(tensor)`, `int(tensor)`, control flow on them)
answers a placeholder, recorded by line for the summary after the run (ValueReads); `distribute_tensor` of a meta
tensor skips its scatter from the source rank, as upstream does.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from .emulation import _is_gpu
from . import patches


def _is_backward(func, args) -> bool:
    """Tensor.backward(...) or torch.autograd.backward(...)."""
    return getattr(func, "__name__", "") == "backward" and bool(args) and (
        isinstance(args[0], torch.Tensor) or func is torch.autograd.backward)


def _backward_under(mode: TorchFunctionMode, args, kwargs):
    """A backward pass with `mode` on. Torch takes a mode off while it handles a call, but the hooks a backward pass
    runs (FSDP2's unshard and reduce-scatter, the program's own) make tensors too: so the pass is started here, from
    the engine, as torch.autograd.backward starts it, under the mode."""
    from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
    from torch.autograd.graph import _engine_run_backward

    if isinstance(args[0], torch.Tensor):  # Tensor.backward(gradient, retain_graph, create_graph, inputs)
        bound = dict(zip(("gradient", "retain_graph", "create_graph", "inputs"), args[1:]), **kwargs)
        bound["grad_tensors"] = bound.pop("gradient", None)
        tensors = (args[0],)
    else:  # torch.autograd.backward(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)
        bound = dict(zip(("grad_tensors", "retain_graph", "create_graph", "grad_variables", "inputs"), args[1:]),
                     **kwargs)
        tensors = (args[0],) if isinstance(args[0], torch.Tensor) else tuple(args[0])
    inputs = bound.get("inputs")
    inputs = () if inputs is None else (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    create_graph = bool(bound.get("create_graph", False))
    retain_graph = bound.get("retain_graph")
    with mode:
        grads = _make_grads(tensors, _tensor_or_tensors_to_tuple(bound.get("grad_tensors"), len(tensors)),
                            is_grads_batched=False)
        _engine_run_backward(tensors, grads, create_graph if retain_graph is None else retain_graph, create_graph,
                             inputs, allow_unreachable=True, accumulate_grad=True)


def _is_meta(device) -> bool:
    return (isinstance(device, torch.device) and device.type == "meta") or device == "meta"


def _is_device(value) -> bool:
    return isinstance(value, (str, torch.device, int)) and not isinstance(value, bool)


# Constructors whose values come from their data (a list, an array): without a device or on the CPU they stay on the
# CPU, so values the program gives (an optimizer's step count) can still be read.
_DATA_CONSTRUCTORS = frozenset({"tensor", "as_tensor", "asarray", "scalar_tensor"})
# Methods that hand a tensor's values to Python: on a meta tensor they answer a placeholder (ValueReads).
_VALUE_READERS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__", "numpy",
                            "__array__"})
# The calls __torch_function__ below looks at by name (besides any call with a device and the factories).
_SPECIAL_NAMES = _VALUE_READERS | {"backward", "to", "cuda", "cpu"}
# Modules whose tensors carry values the program needs back (c10d's object collectives pickle into byte tensors; a
# device mesh's rank tensor): their devices are the CPU's even in a metadata-only run.
# torch.utils.data's loaders and samplers draw their seeds and orders as CPU tensors and read them (`.item()`), as
# they do on a GPU run: their tensors keep their values too.
_HOST_MODULES = frozenset({"torch.distributed.distributed_c10d", "torch.distributed.device_mesh",
                           "torch.distributed._mesh_layout", "torch.utils.data.dataloader",
                           "torch.utils.data.sampler", "torch.utils.data.distributed",
                           "torch.utils.data._utils.worker", "torch.utils.data.dataset"})


# Torch's own function modes between the program and this one (`with torch.device(...)` blocks): the call's origin is
# the frame above them.
_PASS_THROUGH = frozenset({"torch.utils._device", "torch.overrides"})


def _from_host_module() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in _PASS_THROUGH:
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__") in _HOST_MODULES


def _in_meta_block() -> bool:
    """Whether the call comes through a `with torch.device("meta")` block of the program (torch's DeviceContext mode,
    the frame above this mode's): what the program itself made meta, as opposed to a meta device read off a tensor
    that stands for a GPU one (`device=x.device`)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == "torch.overrides":
        frame = frame.f_back
    if frame is None or frame.f_globals.get("__name__") != "torch.utils._device":
        return False
    context = frame.f_locals.get("self")
    device = getattr(context, "device", None)
    return isinstance(device, torch.device) and device.type == "meta"


class ValueReads:
    """The values a metadata-only run's programs read from meta tensors, which it does not compute. Each read answers
    a placeholder, so that a step goes on past a logged loss or token count: one for a number (finite, as trainers
    check a loss to be, and never a zero to divide by), False for a truth value. Each read is recorded under the
    program's line, for the summary after the run: control flow that depended on a placeholder is not the job's."""

    def __init__(self, rank_of: Callable[[], Optional[int]]) -> None:
        self._rank_of = rank_of
        self._lock = threading.Lock()
        self._sites: Dict[Tuple[str, str], Set[int]] = {}
        self._counts: Dict[Tuple[str, str], int] = {}

    def answer(self, reader: str, tensor: torch.Tensor) -> Any:
        from .scheduler import user_stack

        where = (user_stack(sys._getframe(2), limit=1) or ["(no line of the program)"])[0]
        key = (where, reader)
        with self._lock:
            self._sites.setdefault(key, set()).add(self._rank_of())
            self._counts[key] = self._counts.get(key, 0) + 1
        one = _placeholder(reader, tensor.dtype)
        if reader == "tolist":
            value: Any = one
            for size in reversed(tensor.shape):
                value = [value] * size if not isinstance(value, list) else [list(value) for _ in range(size)]
            return value
        if reader in ("numpy", "__array__"):
            import numpy

            return numpy.full(tuple(tensor.shape), one)
        return one

    def summary(self) -> Optional[str]:
        """What the program read, by line and reader, with its ranks and count; None when it read nothing."""
        if not self._counts:
            return None
        lines = [f"dtsim run --meta: the program read {sum(self._counts.values())} values that a metadata-only run "
                 "does not compute; each answered a placeholder (1 for a number, False for a truth value), so what it "
                 "printed or decided from them is not the job's:"]
        for (where, reader), count in sorted(self._counts.items()):
            ranks = sorted(r for r in self._sites[(where, reader)] if r is not None)
            lines.append(f"  {where}: Tensor.{reader}() x{count} on {_ranks_text(ranks)}")
        return "\n".join(lines)


def _placeholder(reader: str, dtype: torch.dtype) -> Any:
    if reader == "__bool__" or (dtype == torch.bool and reader not in ("__int__", "__index__", "__float__")):
        return False
    if reader in ("__int__", "__index__") or not (dtype.is_floating_point or dtype.is_complex):
        return 1
    if reader == "__float__":
        return 1.0
    return complex(1.0, 0.0) if dtype.is_complex or reader == "__complex__" else 1.0


def _ranks_text(ranks: List[int]) -> str:
    if not ranks:
        return "no rank"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


class MetaForAll(TorchFunctionMode):
    """`dtsim run --meta`: every tensor the program makes lives on the meta device (shapes, dtypes and sizes; no
    values). Factories without a device or with any device, `.to(<a GPU>)`, `.cuda()` give meta tensors; `.to("cpu")`
    and `.cpu()` of a meta tensor keep it meta. Constructors from data (`torch.tensor([...])`) without a device or on
    the CPU, a device mesh's rank tensor and c10d's object collectives stay on the CPU with their values. Reading a meta
    tensor's values (`.item()`, `.tolist()`, `bool()`, ...) answers a placeholder and is recorded (`ValueReads`)."""

    def __init__(self, reads: "ValueReads", program_meta: Optional[Callable[[Any], None]] = None):
        """`reads`: the run's record of the values the program read (every rank's). `program_meta(out)`: told of the
        tensors the program itself put on the meta device (inside a `with torch.device("meta")` block, or
        `.to("meta")`), which hold nothing on a GPU (the memory meter's `uncount`)."""
        super().__init__()
        self._reads = reads
        from torch.utils._device import _device_constructors

        self._factories = _device_constructors()
        self._program_meta = program_meta

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _SPECIAL_NAMES and "device" not in kwargs and func not in self._factories:
            return func(*args, **kwargs)  # most calls: nothing below applies to them
        if _is_backward(func, args):
            return _backward_under(self, args, kwargs)
        if name in _VALUE_READERS and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            return self._reads.answer(name, args[0])
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            positional = len(args) > 1 and _is_device(args[1])
            target = args[1] if positional else kwargs.get("device")
            if target is not None and _is_meta(target) and self._program_meta is not None:
                out = func(*args, **kwargs)
                self._program_meta(out)
                return out
            if target is not None and not _is_meta(target) and (_is_gpu(target) or isinstance(target, int)
                                                                   or args[0].is_meta):
                if positional:
                    args = (args[0], "meta") + tuple(args[2:])
                else:
                    kwargs = dict(kwargs, device="meta")
            return func(*args, **kwargs)
        if name in ("cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
            return args[0] if args[0].is_meta or name == "cpu" else args[0].to("meta")
        device = kwargs.get("device")
        if device is not None and _is_meta(device) and self._program_meta is not None and _in_meta_block():
            out = func(*args, **kwargs)
            self._program_meta(out)
            return out
        if device is not None:
            if not _is_meta(device) and not (name in _DATA_CONSTRUCTORS and not _is_gpu(device)):
                kwargs = dict(kwargs, device="cpu" if _from_host_module() else "meta")
        elif func in self._factories and name not in _DATA_CONSTRUCTORS and not _from_host_module():
            kwargs = dict(kwargs, device="meta")
        return func(*args, **kwargs)


def _group(name):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)


def _op(name: str):
    return getattr(dist.ReduceOp, name.upper())


def _gathered_shape(t: torch.Tensor, n: int):
    return (t.shape[0] * n,) + tuple(t.shape[1:])


def _scattered_shape(t: torch.Tensor, n: int):
    return (t.shape[0] // n,) + tuple(t.shape[1:])


def _all_reduce(input, reduce_op, group_name):
    out = input.clone()
    dist.all_reduce(out, op=_op(reduce_op), group=_group(group_name))
    return out


def _all_reduce_(input, reduce_op, group_name):
    dist.all_reduce(input, op=_op(reduce_op), group=_group(group_name))
    return input


def _all_reduce_coalesced(inputs, reduce_op, group_name):
    return [_all_reduce(t, reduce_op, group_name) for t in inputs]


def _all_gather_into_tensor(input, group_size, group_name):
    out = input.new_empty(_gathered_shape(input, group_size))
    dist.all_gather_into_tensor(out, input.contiguous(), group=_group(group_name))
    return out


def _all_gather_into_tensor_out(input, group_size, group_name, *, out):
    dist.all_gather_into_tensor(out, input.contiguous(), group=_group(group_name))
    return out


def _all_gather_into_tensor_coalesced(inputs, group_size, group_name):
    return [_all_gather_into_tensor(t, group_size, group_name) for t in inputs]


def _reduce_scatter_tensor(input, reduce_op, group_size, group_name):
    out = input.new_empty(_scattered_shape(input, group_size))
    dist.reduce_scatter_tensor(out, input.contiguous(), op=_op(reduce_op), group=_group(group_name))
    return out


def _reduce_scatter_tensor_coalesced(inputs, reduce_op, group_size, group_name):
    return [_reduce_scatter_tensor(t, reduce_op, group_size, group_name) for t in inputs]


def _all_to_all_single(input, output_split_sizes, input_split_sizes, group_name):
    rows = sum(output_split_sizes) if output_split_sizes else input.shape[0]
    out = input.new_empty((rows,) + tuple(input.shape[1:]))
    dist.all_to_all_single(out, input.contiguous(), list(output_split_sizes) or None, list(input_split_sizes) or None,
                           group=_group(group_name))
    return out


def _broadcast(input, src, group_name):
    out = input.clone()
    dist.broadcast(out, group_src=src, group=_group(group_name))
    return out


def _broadcast_(input, src, group_name):
    dist.broadcast(input, group_src=src, group=_group(group_name))
    return input


# c10d's functional collectives, by op name: the kernel that calls the group (the coalesced forms as one collective
# per tensor).
_FUNCTIONAL_KERNELS = {
    "all_reduce": _all_reduce,
    "all_reduce_": _all_reduce_,
    "all_reduce_coalesced": _all_reduce_coalesced,
    "all_gather_into_tensor": _all_gather_into_tensor,
    "all_gather_into_tensor_out": _all_gather_into_tensor_out,
    "all_gather_into_tensor_coalesced": _all_gather_into_tensor_coalesced,
    "reduce_scatter_tensor": _reduce_scatter_tensor,
    "reduce_scatter_tensor_coalesced": _reduce_scatter_tensor_coalesced,
    "all_to_all_single": _all_to_all_single,
    "broadcast": _broadcast,
    "broadcast_": _broadcast_,
}
_libraries = []  # the registrations live as long as the process


def _stream_ids(session):
    # FSDP2 (torch 2.15) hands the current stream of its device to an op when a gradient buffer is not on the CPU. Its
    # device is the CPU under dtsim run and the buffer a meta tensor here, so it reads the ids every torch.Stream
    # carries from torch.cpu's stream, which has none: it gets those of the CPU's one stream.
    added = [name for name in ("stream_id", "device_index", "device_type") if not hasattr(torch.cpu.Stream, name)]
    for name in added:
        setattr(torch.cpu.Stream, name, 0)

    def undo() -> None:
        for name in added:
            delattr(torch.cpu.Stream, name)

    return undo


def _functional_meta_kernels(session):
    library = torch.library.Library("_c10d_functional", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": on purpose
        for name, kernel in _FUNCTIONAL_KERNELS.items():
            library.impl(name, kernel, "Meta")
    _libraries.append(library)
    return None  # the registrations live as long as the process: upstream's own Meta kernels are not restorable


def _meta_run(config) -> bool:
    return config.meta


def _foreach_on_meta(session, original):
    """clip_grad_norm_(foreach=True), clip_grad_value_ and the foreach and fused optimizers accept meta tensors: their
    kernels have meta kernels, and the run has the program's GPU tensors on the meta device."""

    def devices() -> list:
        found = list(original())
        return found + ["meta"] if "meta" not in found else found

    return devices


def _object_to_tensor_on_host(session, original):
    """c10d's object collectives pickle into `torch.ByteTensor(storage)`, a legacy constructor whose empty tensor the
    metadata-only mode would make meta (which cannot take a CPU storage): it runs without the run's function modes,
    and gives a CPU tensor with the pickle's bytes, as on a GPU run's CPU side."""

    def _object_to_tensor(obj, device, group, *args, **kwargs):  # torch 2.15 adds weights_only
        with torch._C.DisableTorchFunction():
            return original(obj, "cpu", group, *args, **kwargs)

    return _object_to_tensor


META_ENTRIES = patches.register("meta", [
    patches.Replace("torch.distributed.distributed_c10d._object_to_tensor", _object_to_tensor_on_host,
                    when=_meta_run, why="object collectives under --meta (all_gather_object, broadcast_object_list)"),
    patches.Replace("torch.utils._foreach_utils._get_foreach_kernels_supported_devices", _foreach_on_meta,
                    when=_meta_run),
    patches.Replace("torch.utils._foreach_utils._get_fused_kernels_supported_devices", _foreach_on_meta,
                    by_name=True, when=_meta_run,
                    why="fused optimizers (torchtitan's AdamW on a GPU) on meta: _fused_adam[w]_ have meta kernels"),
    patches.Replace("torch.distributed.fsdp._fully_shard._fsdp_param_group.FSDPParamGroup._validate_no_meta_params",
                    lambda session, original: (lambda self: None), when=_meta_run,
                    why="FSDP2 runs on meta parameters (its lazy-init check that they were materialized is off)"),
    patches.Custom("torch.cpu.Stream", _stream_ids, when=_meta_run),
    patches.Custom("torch.ops._c10d_functional", _functional_meta_kernels, when=_meta_run),
])
