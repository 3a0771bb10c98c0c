"""What turns one process into a torchrun job of N ranks: installed once by the launcher, before any rank runs.

- c10d's state (`torch.distributed.distributed_c10d._world`: the default group, group names, ranks) is kept per rank
  thread, and so is the C++ registry of groups by name (c10d's thread isolation mode);
- `init_process_group` builds the rank's default group on the `dtsim` backend (process_group.py), whatever backend
  the program names ("nccl", "gloo", "cpu:gloo,cuda:nccl", ...), with the rank and world size of its thread;
- CUDA is emulated on the CPU: tensors asked for on "cuda" live on the CPU (a torch function mode rewrites the device
  of factories, `.to`, `.cuda()`), `torch.cuda` and `torch.accelerator` answer as an N-device node, streams and events
  are no-ops, and device meshes of a GPU device type are CPU meshes.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any, Callable, Dict, Optional

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.overrides import TorchFunctionMode

from .process_group import World

_GPU_TYPES = ("cuda", "xpu", "mps", "hpu", "mtia")
# Whether the program asked for a GPU (a tensor, a module or a device mesh on one): its tensors then stand for GPU
# tensors, and torch.optim picks its implementation as on CUDA (_install_optimizer_defaults).
_program_on_gpu = False


class _RankWorld:
    """One rank's c10d state: what c10d's `_World` keeps in module globals, kept here per rank."""

    def __init__(self) -> None:
        # What a fresh `_World` holds in itself (its properties read `self._<name>`), so that state a torch release
        # adds there (2.15: `pg_flight_recorder_hooks`) exists here too; then what older releases keep in globals.
        for name, value in vars(c10d._World()).items():
            setattr(self, name.lstrip("_"), value)
        self.default_pg = None
        self.pg_map: Dict = {}
        self.pg_names: Dict = {}
        self.pg_group_ranks: Dict = {}
        self.pg_backend_config: Dict = {}
        self.group_count = 0
        self.tags_to_pg: Dict = {}
        self.pg_to_tag: Dict = {}
        self.pg_coalesce_state: Dict = {}
        self.comms: list = []

    @property
    def pg_config_info(self) -> list:
        return [{"pg_name": self.pg_names[pg], "pg_desc": pg.group_desc, "backend_config": self.pg_backend_config[pg],
                 "ranks": list(self.pg_group_ranks[pg].keys()), "group_size": len(self.pg_group_ranks[pg]),
                 "group_count": self.group_count} for pg in self.pg_map]


class _RankWorlds:
    """Stands in for c10d's `_world`: every rank thread sees a `_RankWorld` of its own."""

    def __init__(self) -> None:
        object.__setattr__(self, "_local", threading.local())

    def _world(self) -> _RankWorld:
        local = object.__getattribute__(self, "_local")
        world = getattr(local, "world", None)
        if world is None:
            world = local.world = _RankWorld()
        return world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._world(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._world(), name, value)


class _RankDevices:
    """The emulated CUDA device index of each rank (torch.cuda.set_device / current_device)."""

    def __init__(self, local_rank_of: Callable[[], int], local_world_size: int):
        self._local_rank_of = local_rank_of
        self.count = local_world_size
        self._current: Dict[int, int] = {}
        self._lock = threading.Lock()

    def current(self) -> int:
        rank = threading.get_ident()
        return self._current.get(rank, self._local_rank_of())

    def set(self, device) -> None:
        index = _device_index(device)
        if index is None:
            return
        if not 0 <= index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} (dtsim run emulates {self.count} devices "
                               "on this node: --nproc-per-node)")
        self._current[threading.get_ident()] = index


def _device_index(device) -> Optional[int]:
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return device.index
    return None


def _is_gpu(device) -> bool:
    if isinstance(device, torch.device):
        return device.type in _GPU_TYPES
    if isinstance(device, str):
        return device.split(":")[0] in _GPU_TYPES
    return False


class CpuForGpu(TorchFunctionMode):
    """Rewrites a GPU device to the CPU in every torch call that names one (factories, `.to`, `.cuda()`). A backward
    pass runs outside it (torch takes a mode off while it handles `backward`; putting it back costs every backward
    op a Python call): a backward hook of the program that makes a tensor on "cuda" fails there (docs/run.md)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        global _program_on_gpu
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and _is_gpu(device):
            kwargs = dict(kwargs, device="cpu")
            _program_on_gpu = True
        name = getattr(func, "__name__", "")
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            _program_on_gpu = True
            return args[0]
        if name == "to" and len(args) > 1 and (_is_gpu(args[1])):
            args = (args[0], "cpu") + tuple(args[2:])
            _program_on_gpu = True
        return func(*args, **kwargs)


class _NoOpStream:
    """torch.cuda.Stream / Event stand-in: work is synchronous on the simulated devices."""

    def __init__(self, *args, **kwargs):
        self.device = torch.device("cuda", 0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __getattr__(self, name):
        return _no_op

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False

    def elapsed_time(self, other) -> float:
        return 0.0


def _no_op(*args, **kwargs):
    return None


def _does_nothing() -> Callable[..., None]:
    """A no-op of its own: torch._dynamo maps torch functions by identity, and one function under two names fails."""

    def no_op(*args, **kwargs):
        return None

    return no_op


_warned: set = set()


def _install_memory(namespace, tracker, rank_of: Callable[[], Optional[int]]) -> None:
    """torch.cuda's (and torch.accelerator's) memory statistics answer from the rank's meter (modules.py): the bytes of
    the tensors the rank's program holds. Nothing is cached, so reserved equals allocated. Without the meter (no
    --memory, --report, --report-json or --meta) they answer 0, and say so once."""

    def unmetered() -> bool:
        if tracker.metered:
            return False
        if "memory" not in _warned:
            _warned.add("memory")
            print("dtsim run: torch.cuda's memory statistics are not measured in this run (they return 0); pass "
                  "--memory to count every rank's tensors", file=sys.__stderr__)
        return True

    def current(*args, **kwargs) -> int:
        rank = rank_of()
        return 0 if rank is None or unmetered() else tracker.allocated(rank)

    def peak(*args, **kwargs) -> int:
        rank = rank_of()
        return 0 if rank is None or unmetered() else tracker.max_allocated(rank)

    def reset(*args, **kwargs) -> None:
        rank = rank_of()
        if rank is not None:
            tracker.reset_peak(rank)

    def stats(*args, **kwargs) -> Dict[str, int]:
        now, most = current(), peak()
        return {"allocated_bytes.all.current": now, "allocated_bytes.all.peak": most,
                "reserved_bytes.all.current": now, "reserved_bytes.all.peak": most,
                "active_bytes.all.current": now, "active_bytes.all.peak": most}

    for name, function in (("memory_allocated", current), ("max_memory_allocated", peak),
                           ("memory_reserved", current), ("max_memory_reserved", peak),
                           ("reset_peak_memory_stats", reset), ("reset_max_memory_allocated", reset),
                           ("reset_accumulated_memory_stats", _does_nothing()), ("memory_stats", stats)):
        if namespace is not None:
            setattr(namespace, name, function)


def _cannot_emulate(name: str, why: str) -> Callable[..., Any]:
    def refuse(*args, **kwargs):
        raise RuntimeError(f"dtsim run: {name} cannot run on the simulated devices: {why} (docs/run.md, \"GPU scripts "
                           "on a CPU machine\")")

    return refuse


class _NoCudaGraph:
    """torch.cuda.CUDAGraph: refused where it is made."""

    def __init__(self, *args, **kwargs):
        _cannot_emulate("torch.cuda.CUDAGraph", "a CUDA graph replays captured GPU kernels, and the simulated ranks' "
                        "tensors live on the CPU")()


def _install_cuda(devices: _RankDevices, tracker, rank_of: Callable[[], Optional[int]]) -> None:
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: devices.count
    cuda.set_device = devices.set
    cuda.current_device = devices.current
    cuda.synchronize = _does_nothing()
    cuda.init = _does_nothing()
    cuda.is_initialized = lambda: True
    cuda.get_device_name = lambda *a, **k: "dtsim simulated GPU (CPU tensors)"
    cuda.get_device_capability = lambda *a, **k: (9, 0)
    cuda.is_bf16_supported = lambda *a, **k: True
    cuda.manual_seed = _does_nothing()
    cuda.manual_seed_all = _does_nothing()
    cuda.empty_cache = _does_nothing()
    cuda.Stream = _NoOpStream
    cuda.Event = _NoOpStream
    cuda.stream = lambda *a, **k: _NoOpStream()
    cuda.current_stream = lambda *a, **k: _NoOpStream()
    cuda.default_stream = lambda *a, **k: _NoOpStream()
    cuda.set_stream = _does_nothing()
    cuda.device = _NoOpStream
    cuda.CUDAGraph = _NoCudaGraph
    cuda.graph = _cannot_emulate("torch.cuda.graph", "it captures GPU kernels into a CUDA graph, and the simulated "
                                 "ranks' tensors live on the CPU")
    cuda.make_graphed_callables = _cannot_emulate("torch.cuda.make_graphed_callables", "it captures GPU kernels into "
                                                  "CUDA graphs, and the simulated ranks' tensors live on the CPU")
    _install_memory(cuda, tracker, rank_of)
    _install_memory(getattr(cuda, "memory", None), tracker, rank_of)
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        accelerator.is_available = lambda: True
        accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
        accelerator.device_count = lambda: devices.count
        accelerator.set_device_index = devices.set
        accelerator.set_device_idx = devices.set
        accelerator.current_device_index = devices.current
        accelerator.current_device_idx = devices.current
        accelerator.synchronize = _does_nothing()
        accelerator.current_stream = lambda *a, **k: _NoOpStream()
        accelerator.set_stream = _does_nothing()
        _install_memory(getattr(accelerator, "memory", None), tracker, rank_of)
        for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                     "reset_peak_memory_stats", "memory_stats"):
            if hasattr(accelerator, name):
                setattr(accelerator, name, getattr(cuda, name))


def _install_mesh_on_cpu() -> None:
    from torch.distributed.device_mesh import DeviceMesh

    original = DeviceMesh.__init__

    def __init__(self, device_type, *args, **kwargs):
        global _program_on_gpu
        if isinstance(device_type, str) and device_type in _GPU_TYPES:
            device_type = "cpu"
            _program_on_gpu = True
        original(self, device_type, *args, **kwargs)

    DeviceMesh.__init__ = __init__


def _install_optimizer_defaults() -> None:
    """torch.optim's optimizers pick their implementation from their parameters' device when the program does not
    (`foreach=None`): the foreach kernels on CUDA, one tensor at a time on the CPU. A program on the emulated GPUs gets
    CUDA's choice, so its ops are those of its GPU run (the foreach ops run on the CPU tensors as they would on CUDA's)."""
    from torch.optim import optimizer

    original = getattr(optimizer, "_get_foreach_kernels_supported_devices", None)
    if original is None:  # a torch that decides otherwise: left as it is
        return

    def foreach_devices() -> list:
        devices = list(original())
        return devices + ["cpu"] if _program_on_gpu and "cpu" not in devices else devices

    optimizer._get_foreach_kernels_supported_devices = foreach_devices


def before_destroy(hook: Callable[[Any], None]) -> None:
    """`hook(group)` runs before every `destroy_process_group(group)` of the program (every module's reference)."""
    original = c10d.destroy_process_group

    def destroy_process_group(group=None):
        hook(group)
        return original(group)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("torch") and \
                getattr(module, "destroy_process_group", None) is original:
            module.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group


def install(world: World, rank_of: Callable[[], int], local_rank_of: Callable[[], int], local_world_size: int,
            store, tracker) -> None:
    """Makes torch.distributed and torch.cuda serve the simulated ranks; called once, before the ranks start."""
    c10d._world = _RankWorlds()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    # Backward runs on the thread that calls it (the rank's), never on autograd's device threads.
    torch.autograd.set_multithreading_enabled(False)
    dist.Backend.register_backend("dtsim", world.create, extended_api=True, devices=["cpu", "cuda"])

    original_init = c10d.init_process_group

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           group_name="", pg_options=None, device_id=None, **kwargs):
        own_rank = rank_of()
        if world_size not in (-1, None) and world_size != world.world_size:
            raise ValueError(f"init_process_group: world_size={world_size}, but dtsim run simulates "
                             f"{world.world_size} ranks (--nproc-per-node x --nnodes)")
        if rank not in (-1, None) and rank != own_rank:
            raise ValueError(f"init_process_group: rank={rank} on the rank dtsim run started as rank {own_rank}")
        options = {"timeout": timeout} if timeout is not None else {}
        return original_init("dtsim", world_size=world.world_size, rank=own_rank, store=_shared_store,
                             group_name=group_name, **options, **kwargs)

    _shared_store = store
    # Every module that imported the function by name gets the rank's one too: init_device_mesh calls
    # device_mesh.py's own reference when no default group exists yet (upstream's tutorials rely on it).
    importlib.import_module("torch.distributed.device_mesh")  # imported before the scan, so it is among them
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("torch") and \
                getattr(module, "init_process_group", None) is original_init:
            module.init_process_group = init_process_group
    dist.init_process_group = init_process_group
    _install_cuda(_RankDevices(local_rank_of, local_world_size), tracker, rank_of)
    from . import modules

    if tracker.metered:
        modules.install_resize_hook(tracker)
    if tracker.modules:
        modules.install_module_hooks(tracker)
    _install_mesh_on_cpu()
    _install_optimizer_defaults()
    from . import propagation, strategies

    strategies.install()
    propagation.install()
