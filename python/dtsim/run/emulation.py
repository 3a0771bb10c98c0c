"""What turns one process into a torchrun job of N ranks: the tables of torch replacements that the launcher installs
through the registry (patches.py) before any rank runs.

- c10d's state (`torch.distributed.distributed_c10d._world`: the default group, group names, ranks) is kept per rank
  (in the rank's program thread and in the threads it starts), and so is the C++ registry of groups by name (c10d's
  thread isolation mode);
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

from . import patches

_GPU_TYPES = ("cuda", "xpu", "mps", "hpu", "mtia")
# Whether the program asked for a GPU (a tensor, a module or a device mesh on one): its tensors then stand for GPU
# tensors, and torch.optim picks its implementation as on CUDA (_optimizer_defaults).
_program_on_gpu = False


def program_on_gpu() -> bool:
    """Whether the program asked for a GPU so far (its tensors stand for GPU tensors)."""
    return _program_on_gpu


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
    """Stands in for c10d's `_world`: every rank sees a `_RankWorld` of its own, in its program's thread and in the
    threads it starts (rank_state.py binds them to the rank); a thread of no rank (the launcher's) has its own."""

    def __init__(self, rank_of: Callable[[], Optional[int]]) -> None:
        object.__setattr__(self, "_rank_of", rank_of)
        object.__setattr__(self, "_ranks", {})
        object.__setattr__(self, "_local", threading.local())

    def _world(self) -> _RankWorld:
        # Kept per thread once found: a thread's rank is bound before its first use of c10d and never changes.
        local = object.__getattribute__(self, "_local")
        try:
            return local.world
        except AttributeError:
            pass
        rank = object.__getattribute__(self, "_rank_of")()
        if rank is None:
            world = _RankWorld()
        else:
            ranks = object.__getattribute__(self, "_ranks")
            world = ranks.get(rank)
            if world is None:
                world = ranks[rank] = _RankWorld()
        local.world = world
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
        index = device_index(device)
        if index is None:
            return
        if not 0 <= index < self.count:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} (dtsim run emulates {self.count} devices "
                               "on this node: --nproc-per-node)")
        self._current[threading.get_ident()] = index


def device_index(device) -> Optional[int]:
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


# The option of a library that turns a refused GPU-only feature off, named in the refusal when the call comes from
# that library: (the library's top-level package, the feature) -> the option.
_OPTION_TO_CHANGE = {
    ("torchtitan", "torch.cuda.CUDAGraph"): "--training.disable_cuda_graphs",
    ("torchtitan", "torch.cuda.graph"): "--training.disable_cuda_graphs",
    ("torchtitan", "torch.distributed._symmetric_memory.enable_symm_mem_for_group"):
        "--compile.no-enable-async-tensor-parallel",
    ("torchtitan", "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm"): "--parallelism.no-enable-fsdp-symm-mem",
    ("torchtitan", "torch._scaled_mm"): "a --config without a float8 or MX converter (llama3_debugmodel for "
                                        "llama3_debugmodel_float8)",
    ("torchtitan", "torch._scaled_grouped_mm"): "a --config without a float8 or MX converter",
}


def _option_hint(name: str) -> str:
    frame = sys._getframe(2)
    while frame is not None:
        root = str(frame.f_globals.get("__name__", "")).split(".", 1)[0]
        option = _OPTION_TO_CHANGE.get((root, name))
        if option is not None:
            return f"; {root} turns it off with {option}"
        frame = frame.f_back
    return ""


def _cannot_emulate(name: str, why: str) -> Callable[..., Any]:
    def refuse(*args, **kwargs):
        raise RuntimeError(f"dtsim run: {name} cannot run on the simulated devices: {why}{_option_hint(name)} "
                           "(docs/run.md, \"GPU scripts on a CPU machine\")")

    return refuse


class _NoCudaGraph:
    """torch.cuda.CUDAGraph: refused where it is made."""

    def __init__(self, *args, **kwargs):
        _cannot_emulate("torch.cuda.CUDAGraph", "a CUDA graph replays captured GPU kernels, and the simulated ranks' "
                        "tensors live on the CPU")()



# The emulated device's memory, as torch.cuda.get_device_properties and mem_get_info report it: an 80 GiB GPU (an
# H100's), which is what torchtitan's memory monitor divides its percentages by.
EMULATED_TOTAL_MEMORY = 80 * 1024 ** 3


class DeviceProperties:
    """torch.cuda.get_device_properties(i) of an emulated device: the fields torch and torchtitan read."""

    def __init__(self, index: int):
        self.name = "dtsim simulated GPU (CPU tensors)"
        self.major, self.minor = 9, 0
        self.total_memory = EMULATED_TOTAL_MEMORY
        self.multi_processor_count = 132
        self.is_integrated = 0
        self.is_multi_gpu_board = 0
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.shared_memory_per_block = 49152
        self.shared_memory_per_block_optin = 232448
        self.shared_memory_per_multiprocessor = 233472
        self.L2_cache_size = 50 * 1024 ** 2
        self.uuid = f"dtsim-{index:04d}"
        self.pci_bus_id = index
        self.pci_device_id = 0
        self.pci_domain_id = 0
        self.gcnArchName = "NVIDIA H100 (dtsim)"

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 1024 ** 2}MB, multi_processor_count={self.multi_processor_count})")


def _memory_functions(session) -> Dict[str, Callable[..., Any]]:
    """torch.cuda's (and torch.accelerator's) memory statistics, answered from the rank's meter (modules.py): the bytes
    of the tensors the rank's program holds. Nothing is cached, so reserved equals allocated. Without the meter (no
    --memory, --report, --report-json or --meta) they answer 0, and say so once."""
    tracker = session.tracker
    rank_of = session.rank_of

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
                "active_bytes.all.current": now, "active_bytes.all.peak": most,
                "num_alloc_retries": 0, "num_ooms": 0}

    def mem_get_info(*args, **kwargs):
        used = current()
        return (EMULATED_TOTAL_MEMORY - used, EMULATED_TOTAL_MEMORY)

    return {"memory_allocated": current, "max_memory_allocated": peak, "memory_reserved": current,
            "max_memory_reserved": peak, "reset_peak_memory_stats": reset, "reset_max_memory_allocated": reset,
            "reset_accumulated_memory_stats": _does_nothing(), "memory_stats": stats, "mem_get_info": mem_get_info}


def _memory(name: str) -> Callable[[Any, Any], Any]:
    def make(session, original):
        functions = session.extra.get("memory_functions")
        if functions is None:
            functions = session.extra["memory_functions"] = _memory_functions(session)
        return functions[name]

    return make


def _const(value) -> Callable[[Any, Any], Any]:
    return lambda session, original: (lambda *a, **k: value)


def _value(value) -> Callable[[Any, Any], Any]:
    return lambda session, original: value


def _no_op_factory(session, original):
    return _does_nothing()


def _stream_factory(session, original):
    return lambda *a, **k: _NoOpStream()


def devices(session) -> _RankDevices:
    if session.devices is None:
        session.devices = _RankDevices(session.local_rank_of, session.config.nproc_per_node)
    return session.devices


def _mesh_on_cpu(session, original):
    def __init__(self, device_type, *args, **kwargs):
        global _program_on_gpu
        if isinstance(device_type, str) and device_type in _GPU_TYPES:
            device_type = "cpu"
            _program_on_gpu = True
        original(self, device_type, *args, **kwargs)

    return __init__


def _ddp_init(session, original):
    """DDP(module, device_ids=[i], output_device=i) of a module on an emulated GPU: its parameters are CPU tensors, for
    which DDP takes no device ids, so they are dropped (the module's device is the rank's GPU, as the program asked)."""

    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None or output_device is not None:
            devices = {p.device.type for p in module.parameters()}
            if devices <= {"cpu", "meta"}:
                device_ids = output_device = None
        original(self, module, device_ids, output_device, *args, **kwargs)

    return __init__


def _optimizer_defaults(session, original):
    """torch.optim's optimizers pick their implementation from their parameters' device when the program does not
    (`foreach=None`): the foreach kernels on CUDA, one tensor at a time on the CPU. A program on the emulated GPUs gets
    CUDA's choice, so its ops are those of its GPU run (the foreach ops run on the CPU tensors as they would on CUDA's)."""

    def foreach_devices() -> list:
        devices = list(original())
        return devices + ["cpu"] if _program_on_gpu and "cpu" not in devices else devices

    return foreach_devices


def _init_process_group(session, original_init):
    world = session.world

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           group_name="", pg_options=None, device_id=None, **kwargs):
        own_rank = session.rank_of()
        if world_size not in (-1, None) and world_size != world.world_size:
            raise ValueError(f"init_process_group: world_size={world_size}, but dtsim run simulates "
                             f"{world.world_size} ranks (--nproc-per-node x --nnodes)")
        if rank not in (-1, None) and rank != own_rank:
            raise ValueError(f"init_process_group: rank={rank} on the rank dtsim run started as rank {own_rank}")
        options = {"timeout": timeout} if timeout is not None else {}
        # The backend the program asked for, as c10d would keep it ("undefined" when none was named); "dtsim" is this
        # function calling itself through c10d's module (both names are replaced).
        asked = str(backend).lower() if backend else "undefined"
        if asked != "dtsim":
            session.extra.setdefault("asked_backend", {})[own_rank] = asked
        return original_init("dtsim", world_size=world.world_size, rank=own_rank, store=session.store,
                             group_name=group_name, **options, **kwargs)

    return init_process_group


def _monitored_barrier_refusal(asked: str) -> Optional[str]:
    """c10d's refusal of monitored_barrier on a group whose program asked for backend `asked`, by torch release: up
    to 2.14 only "gloo" passes; from 2.15 any backend with a CPU device ("cpu:gloo,cuda:nccl", and no name, whose
    default has Gloo for the CPU). None where c10d runs it."""
    if _torch_minor() < 15:
        return None if asked == "gloo" else "monitored_barrier is only implemented for GLOO backend."
    cpu = asked in ("gloo", "mpi", "ucc", "undefined") or any(
        part.strip().startswith("cpu:") for part in asked.split(","))
    return None if cpu else "monitored_barrier requires a group with a CPU-capable backend (e.g. GLOO)."


def _torch_minor() -> int:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(minor) if major == "2" else 99


def _monitored_barrier(session, original):
    """monitored_barrier as c10d's: where the program asked for a backend this torch runs it on (Gloo; from 2.15 any
    with a CPU device), else c10d's own refusal; on the simulated backend it is a barrier (a rank that never comes is
    the run's hang report)."""

    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        asked = session.extra.get("asked_backend", {}).get(session.rank_of())
        refusal = _monitored_barrier_refusal(asked) if asked is not None else None
        if refusal is not None:
            raise ValueError(refusal)
        if group is not None and c10d._rank_not_in_group(group):
            return None
        (group or c10d._get_default_group()).barrier().wait()
        return None

    return monitored_barrier


def _rank_worlds(session, original):
    return _RankWorlds(session.rank_of)


def _thread_isolation(session):
    # The C++ registry of groups by name, kept per thread (c10d's thread isolation mode); a rank's own threads get its
    # groups registered when they start (rank_state.py).
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    return lambda: torch._C._distributed_c10d._set_thread_isolation_mode(False)


def _single_threaded_backward(session):
    # Backward runs on the thread that calls it (the rank's), never on autograd's device threads.
    torch.autograd.set_multithreading_enabled(False)
    return lambda: torch.autograd.set_multithreading_enabled(True)


def _register_backend(session):
    dist.Backend.register_backend("dtsim", session.world.create, extended_api=True, devices=["cpu", "cuda"])
    importlib.import_module("torch.distributed.device_mesh")  # imported before the by-name scans, so it is among them

    def undo() -> None:
        if "dtsim" in dist.Backend.backend_list:
            dist.Backend.backend_list.remove("dtsim")
        dist.Backend._plugins.pop("DTSIM", None)
        for table in (dist.Backend.backend_capability, dist.Backend.backend_type_map):
            table.pop("dtsim", None)
        if getattr(dist.Backend, "DTSIM", None) == "dtsim":
            delattr(dist.Backend, "DTSIM")

    return undo


def _refused(name: str, why: str):
    """A registry factory: `name` raises dtsim's refusal (`why`) wherever it is called."""
    return lambda session, original: _cannot_emulate(name, why)


_GRAPH_WHY = "it captures GPU kernels into {}, and the simulated ranks' tensors live on the CPU"
_SYMM_MEM_WHY = ("symmetric memory maps every peer GPU's buffer into each rank's address space for kernels that read "
                 "and write it directly, and the simulated ranks' tensors live on the CPU")
# torch's symmetric-memory entry points: async TP (inductor's micro-pipeline pass) and FSDP2's symmetric-memory
# collectives start from one of them.
_SYMM_MEM = ("enable_symm_mem_for_group", "rendezvous", "empty")
_LOW_PRECISION_WHY = ("the emulated GPUs compute on CPU tensors, where float8 and MX matmuls neither round as a "
                      "GPU's tensor cores do nor run its kernels")


def _gpu_refused(name: str, why: str):
    """Refused on the emulated GPUs; a CPU program (no GPU asked for) keeps torch's function, as under torchrun."""

    def make(session, original):
        refuse = _cannot_emulate(name, why)

        def on_gpu_refused(*args, **kwargs):
            if program_on_gpu():
                refuse()
            return original(*args, **kwargs)

        on_gpu_refused.__wrapped__ = original
        on_gpu_refused.__name__ = getattr(original, "__name__", name.rsplit(".", 1)[-1])
        return on_gpu_refused

    return make


_CUDA_MEMORY = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_accumulated_memory_stats",
                "memory_stats", "mem_get_info")
_ACCELERATOR_MEMORY = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                       "reset_peak_memory_stats", "memory_stats")

def before_destroy(session, hook: Callable[[Any], None]) -> None:
    """`hook(group)` runs before every `destroy_process_group(group)` of the program (every module's reference)."""
    session.extra.setdefault("destroy_hooks", []).append(hook)


def _destroy_process_group(session, original):
    def destroy_process_group(group=None):
        for hook in session.extra.get("destroy_hooks", ()):
            hook(group)
        return original(group)

    return destroy_process_group


# One row per replaced torch attribute, in installation order.
C10D_ENTRIES = patches.register("c10d", [
    patches.Replace("torch.distributed.distributed_c10d._world", _rank_worlds,
                    why="c10d's default group, group names and ranks, kept per rank"),
    patches.Custom("torch._C._distributed_c10d._set_thread_isolation_mode", _thread_isolation),
    patches.Custom("torch.autograd.set_multithreading_enabled", _single_threaded_backward),
    patches.Custom("torch.distributed.Backend.register_backend", _register_backend),
    patches.Replace("torch.distributed.distributed_c10d.init_process_group", _init_process_group, by_name=True,
                    why="every rank's default group on the dtsim backend, with its thread's rank"),
    patches.Replace("torch.distributed.init_process_group", _init_process_group),
    patches.Replace("torch.distributed.distributed_c10d.monitored_barrier", _monitored_barrier, by_name=True,
                    why="c10d checks the group's backend name (dtsim's), not the one the program asked for"),
    patches.Replace("torch.distributed.monitored_barrier", _monitored_barrier),
    patches.Replace("torch.distributed.distributed_c10d.destroy_process_group", _destroy_process_group, by_name=True,
                    why="the hooks of before_destroy (--trace ends a rank's record block there)"),
    patches.Replace("torch.distributed.destroy_process_group", _destroy_process_group),
    patches.Read("torch._C._distributed_c10d._register_process_group"),
    patches.Read("torch._C._distributed_c10d._create_work_from_future"),
    patches.Read("torch.distributed.distributed_c10d._resolve_process_group"),
])

CUDA_ENTRIES = patches.register("cuda", [
    patches.Replace("torch.cuda.is_available", _const(True)),
    patches.Replace("torch.cuda.device_count", lambda s, o: (lambda: devices(s).count)),
    patches.Replace("torch.cuda.set_device", lambda s, o: devices(s).set),
    patches.Replace("torch.cuda.current_device", lambda s, o: devices(s).current),
    patches.Replace("torch.cuda.synchronize", _no_op_factory),
    patches.Replace("torch.cuda.init", _no_op_factory),
    patches.Replace("torch.cuda.is_initialized", _const(True)),
    patches.Replace("torch.cuda.get_device_name", _const("dtsim simulated GPU (CPU tensors)")),
    patches.Replace("torch.cuda.get_device_capability", _const((9, 0))),
    patches.Replace("torch.cuda.get_device_properties",
                    lambda s, o: (lambda device=None: DeviceProperties(device_index(device) or 0))),
    patches.Replace("torch.cuda.is_bf16_supported", _const(True)),
    patches.Replace("torch.cuda.manual_seed", _no_op_factory),
    patches.Replace("torch.cuda.manual_seed_all", _no_op_factory),
    patches.Replace("torch.cuda.empty_cache", _no_op_factory),
    patches.Replace("torch.cuda.Stream", _value(_NoOpStream)),
    patches.Replace("torch.cuda.Event", _value(_NoOpStream)),
    patches.Replace("torch.cuda.stream", _stream_factory),
    patches.Replace("torch.cuda.current_stream", _stream_factory),
    patches.Replace("torch.cuda.default_stream", _stream_factory),
    patches.Replace("torch.cuda.set_stream", _no_op_factory),
    patches.Replace("torch.cuda.device", _value(_NoOpStream)),
    patches.Replace("torch.cuda.CUDAGraph", _value(_NoCudaGraph)),
    patches.Replace("torch.cuda.graph", _refused("torch.cuda.graph", _GRAPH_WHY.format("a CUDA graph"))),
    patches.Replace("torch.cuda.make_graphed_callables",
                    _refused("torch.cuda.make_graphed_callables", _GRAPH_WHY.format("CUDA graphs"))),
] + [patches.Replace(f"torch.distributed._symmetric_memory.{name}",
                     _refused(f"torch.distributed._symmetric_memory.{name}", _SYMM_MEM_WHY), by_name=True,
                     optional=True, why="async TP and symmetric-memory collectives: refused, naming the option")
     for name in _SYMM_MEM]
  + [
    patches.Replace("torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm",
                    _refused("torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm", _SYMM_MEM_WHY),
                    optional=True, why="FSDP2's symmetric-memory collectives: refused, naming the option"),
] + [patches.Replace(f"torch.{name}", _gpu_refused(f"torch.{name}", _LOW_PRECISION_WHY), optional=True,
                     why="float8 and MX matmuls on the emulated GPUs: refused, naming the option")
     for name in ("_scaled_mm", "_scaled_grouped_mm")]
  + [patches.Replace(f"torch.cuda.{name}", _memory(name)) for name in _CUDA_MEMORY]
  + [patches.Replace(f"torch.cuda.memory.{name}", _memory(name)) for name in _CUDA_MEMORY]
  + [
    patches.Replace("torch.accelerator.is_available", _const(True)),
    patches.Replace("torch.accelerator.current_accelerator", _const(torch.device("cuda"))),
    patches.Replace("torch.accelerator.device_count", lambda s, o: (lambda: devices(s).count)),
    patches.Replace("torch.accelerator.set_device_index", lambda s, o: devices(s).set),
    patches.Replace("torch.accelerator.set_device_idx", lambda s, o: devices(s).set, optional=True),
    patches.Replace("torch.accelerator.current_device_index", lambda s, o: devices(s).current),
    patches.Replace("torch.accelerator.current_device_idx", lambda s, o: devices(s).current, optional=True),
    patches.Replace("torch.accelerator.synchronize", _no_op_factory),
    patches.Replace("torch.accelerator.current_stream", _stream_factory),
    patches.Replace("torch.accelerator.set_stream", _no_op_factory),
] + [patches.Replace(f"torch.accelerator.{name}", _memory(name), optional=True) for name in _ACCELERATOR_MEMORY]
  + [patches.Replace(f"torch.accelerator.memory.{name}", _memory(name), optional=True)
     for name in _ACCELERATOR_MEMORY]
  + [
    patches.Replace("torch.distributed.device_mesh.DeviceMesh.__init__", _mesh_on_cpu,
                    why="device meshes of a GPU device type are CPU meshes"),
    patches.Replace("torch.nn.parallel.DistributedDataParallel.__init__", _ddp_init,
                    why="device_ids of an emulated GPU name a CPU module's device"),
    patches.Replace("torch.numa.binding._maybe_apply_numa_binding_to_current_process", _no_op_factory, optional=True,
                    why="binding the process's threads to one rank's GPU's NUMA node would bind every simulated rank"),
    patches.Replace("torch.optim.optimizer._get_foreach_kernels_supported_devices", _optimizer_defaults,
                    optional=True, why="a torch that decides the default otherwise is left as it is"),
])


def _strategies(session):
    from . import propagation, strategies

    strategies.install()
    propagation.install()
    return None  # the op strategies and the shared propagation cache stay registered for the process's life


DTENSOR_ENTRIES = patches.register("dtensor", [
    patches.Custom("torch.distributed.tensor._ops.utils.register_op_strategy", _strategies,
                   why="upstream keeps no way to unregister an op strategy"),
    patches.Read("torch.distributed.tensor.DTensor._op_dispatcher"),
    patches.Read("torch._C._get_dtensor_allow_implicit_replication"),
    patches.Read("torch._C._set_dtensor_allow_implicit_replication"),
])
