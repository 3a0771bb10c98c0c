"""The Python API behind `import dtsim` (the package's __init__ loads this module, and with it torch and the
extension, on first use of any of its names: docs/python.md)."""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import torch  # loads LibTorch (and libtorch_python) before the extension below needs them
from torch.utils._python_dispatch import _disable_current_modes

from . import _check_torch

_check_torch(torch.__version__)

from . import _C  # noqa: E402 (after the version check, which explains what loading it would only fail at)

from . import __all__  # noqa: E402  (the public names: the package owns the list)

_REDUCE_OPS = ("sum", "avg", "min", "max", "product", "band", "bor", "bxor")
def _planner_arg(planner: Any) -> str:
    """A planner name; the simulation itself names an unknown one (ValueError "planner: unknown planner ...")."""
    if not isinstance(planner, str):
        raise ValueError(f"planner: expected a planner name (greedy, min-cost or graph), got {planner!r}")
    return planner


_T = TypeVar("_T")


def _simulate(fn: Callable[..., _T], *args: Any) -> _T:
    """Runs a call into the simulation outside the caller's torch dispatch modes: dtsim's C++ runs ATen ops on the
    shards, which an active mode (LocalTensorMode, FakeTensorMode, DebugMode, a recorder) would otherwise see as the
    program's own ops, run through its Python (100x slower) or refuse (FakeTensorMode: real tensors)."""
    if torch._C._len_torch_dispatch_stack() == 0:
        return fn(*args)
    with _disable_current_modes():
        return fn(*args)


def _no_grad_arg(tensor: torch.Tensor, field: str) -> None:
    _strided_arg(tensor, field)
    if tensor.requires_grad:
        raise ValueError(f"{field}: the tensor requires grad, and dtsim's Python API has no autograd; "
                         "pass tensor.detach()")


def _strided_arg(tensor: torch.Tensor, field: str) -> None:
    """A shard is a plain strided tensor with storage: nested, sparse and fake tensors are refused by name."""
    if tensor.is_nested:
        raise ValueError(f"{field}: a nested tensor has no single shape to shard; pass a strided tensor")
    if tensor.layout != torch.strided:
        raise ValueError(f"{field}: {str(tensor.layout).replace('torch.', '')} tensors are not supported; pass a "
                         "strided tensor (tensor.to_dense())")
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(tensor):
        raise ValueError(f"{field}: a FakeTensor has no values; pass a real tensor, or use the meta device for "
                         "shapes only")


# ---- placements -------------------------------------------------------------------------------


class Placement:
    """Base of Shard, _StridedShard, Replicate and Partial (upstream's Placement)."""

    __slots__ = ()

    def is_shard(self, dim: Optional[int] = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: Optional[str] = None) -> bool:
        return False

    def _text(self) -> str:  # dtsim's canonical text form
        raise NotImplementedError

    def __str__(self) -> str:
        return self._text()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._text() == other._text()

    def __hash__(self) -> int:
        return hash(self._text())


class Shard(Placement):
    """Split tensor dim `dim` over the mesh dim the way torch.chunk does (upstream's Shard)."""

    __slots__ = ("dim",)

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"Shard.dim: expected an int, got {dim!r}")
        self.dim = dim

    def is_shard(self, dim: Optional[int] = None) -> bool:
        return dim is None or dim == self.dim

    def _text(self) -> str:
        return f"S({self.dim})"

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"


class _StridedShard(Shard):
    """Upstream's _StridedShard: dim `dim` in `split_factor` pieces, each chunked over the mesh dim."""

    __slots__ = ("split_factor",)

    def __init__(self, dim: int, split_factor: int) -> None:
        super().__init__(dim)
        if isinstance(split_factor, bool) or not isinstance(split_factor, int) or split_factor < 1:
            raise ValueError(f"_StridedShard.split_factor: expected an int >= 1, got {split_factor!r}")
        self.split_factor = split_factor

    def _text(self) -> str:
        return f"_S({self.dim},{self.split_factor})"

    def __repr__(self) -> str:
        return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"


class Replicate(Placement):
    """Every rank of the mesh dim holds the whole (remaining) tensor."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def _text(self) -> str:
        return "R"

    def __repr__(self) -> str:
        return "Replicate()"


class Partial(Placement):
    """Every rank holds a partial value; the tensor is their reduction by `reduce_op`."""

    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op: str = "sum") -> None:
        if reduce_op not in _REDUCE_OPS:
            raise ValueError(f"Partial.reduce_op: expected one of {', '.join(_REDUCE_OPS)}, got {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self, reduce_op: Optional[str] = None) -> bool:
        return reduce_op is None or reduce_op == self.reduce_op

    def _text(self) -> str:
        return f"P({self.reduce_op})"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"


#: What a `placements` argument accepts: text ("S(0),R" or "[S(0), R]"), one placement, or a sequence with one
#: placement per mesh dim — dtsim's (Shard(0)), upstream's (torch.distributed.tensor.Shard(0)) or text ("S(0)").
PlacementsLike = Union[str, Placement, Sequence[Any]]


def _one_placement_text(p: Any, field: str) -> str:
    if isinstance(p, Placement):
        return p._text()
    if isinstance(p, str):
        return p
    # upstream's torch.distributed.tensor placements, read by their public attributes
    kind = type(p).__name__
    if kind == "_StridedShard":
        return f"_S({int(p.dim)},{int(p.split_factor)})"
    if kind == "Shard":
        return f"S({int(p.dim)})"
    if kind == "Replicate":
        return "R"
    if hasattr(p, "reduce_op"):  # Partial and its subclasses (_NormPartial, MaskPartial)
        return f"P({p.reduce_op})"
    raise ValueError(f"{field}: {p!r} is not a placement (Shard, Replicate, Partial or text such as 'S(0)')")


def _placements_text(placements: Any, field: str = "placements") -> str:
    if placements is None:
        raise ValueError(f"{field}: required")
    if isinstance(placements, str):
        return placements
    if isinstance(placements, Placement) or type(placements).__name__ in ("Shard", "_StridedShard", "Replicate",
                                                                         "Partial"):
        placements = [placements]
    try:
        items = list(placements)
    except TypeError:
        raise ValueError(f"{field}: expected a sequence of placements, got {placements!r}") from None
    return ",".join(_one_placement_text(p, field) for p in items)


_PLACEMENT_RE = re.compile(r"^(?:S\((-?\d+)\)|_S\((-?\d+),(\d+)\)|R|P\((\w+)\))$")


def _parse_placements(text: str) -> Tuple[Placement, ...]:
    """The placements of dtsim's canonical text "[S(0), R, P(sum), _S(0,2)]"."""
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    out: List[Placement] = []
    for item in (s.strip().replace(" ", "") for s in inner.split(", ") if s.strip()):
        m = _PLACEMENT_RE.match(item)
        if m is None:  # cannot happen for text dtsim printed; kept loud
            raise RuntimeError(f"dtsim: unexpected placement text {item!r}")
        if m.group(1) is not None:
            out.append(Shard(int(m.group(1))))
        elif m.group(2) is not None:
            out.append(_StridedShard(int(m.group(2)), int(m.group(3))))
        elif m.group(4) is not None:
            out.append(Partial(m.group(4)))
        else:
            out.append(Replicate())
    return tuple(out)


def _dtype_name(dtype: Any, field: str = "dtype") -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    if isinstance(dtype, str):
        return dtype
    raise ValueError(f"{field}: expected a torch.dtype, got {dtype!r}")


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _int_list(values: Any, field: str) -> List[int]:
    if isinstance(values, int) and not isinstance(values, bool):
        return [values]
    try:
        out = list(values)
    except TypeError:
        raise ValueError(f"{field}: expected a sequence of ints, got {values!r}") from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{field}: expected ints, got {v!r} in {values!r}")
    return out


# ---- meshes -----------------------------------------------------------------------------------


class DeviceMesh:
    """A mesh of simulated ranks (upstream's DeviceMesh). `mesh` is a nested list or tensor of ranks.

    Indexing by dim names gives a submesh: in simulation mesh["tp"] stands for every tp group at
    once (SPMD code on each rank would see its own), so its DTensors still hold all ranks.
    """

    __slots__ = ("device_type", "_impl")

    def __init__(self, device_type: str, mesh: Any, *, mesh_dim_names: Optional[Sequence[str]] = None,
                 _impl: Optional[_C.DeviceMesh] = None) -> None:
        if device_type != "cpu":
            raise ValueError(f"device_type: dtsim simulates ranks on 'cpu', got {device_type!r}")
        self.device_type = device_type
        if _impl is not None:
            self._impl = _impl
            return
        ranks = torch.as_tensor(mesh)
        if ranks.dtype.is_floating_point or ranks.dtype == torch.bool or ranks.dim() == 0:
            raise ValueError(f"mesh: expected a nested list (or tensor) of integer ranks, got {mesh!r}")
        names = list(mesh_dim_names) if mesh_dim_names is not None else []
        self._impl = _C.DeviceMesh(list(ranks.shape), [str(n) for n in names], ranks.flatten().tolist())

    @property
    def mesh(self) -> torch.Tensor:
        """The ranks, shaped as the mesh."""
        return torch.tensor(self._impl.ranks, dtype=torch.int64).reshape(self._impl.shape)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._impl.shape)

    @property
    def ndim(self) -> int:
        return self._impl.ndim

    @property
    def mesh_dim_names(self) -> Optional[Tuple[str, ...]]:
        return tuple(self._impl.names) if self._impl.names else None

    def size(self, mesh_dim: Optional[int] = None) -> int:
        """The number of ranks, or the size of mesh dim `mesh_dim` (negative counts from the end)."""
        if mesh_dim is None:
            return self._impl.size()
        if isinstance(mesh_dim, bool) or not isinstance(mesh_dim, int) or not -self.ndim <= mesh_dim < self.ndim:
            raise ValueError(f"mesh_dim: expected an int in [-{self.ndim}, {self.ndim}), got {mesh_dim!r}")
        return self.shape[mesh_dim]

    def get_coordinate_of(self, rank: int) -> List[int]:
        """The coordinate of `rank` in this mesh (ValueError if it is not in it)."""
        return list(self._impl.coordinate(rank))

    def __getitem__(self, mesh_dim_names: Union[str, Sequence[str]]) -> "DeviceMesh":
        """The submesh of the named dims: mesh["tp"], mesh["dp", "tp"] (ValueError for an unknown name)."""
        names = [mesh_dim_names] if isinstance(mesh_dim_names, str) else mesh_dim_names
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"mesh_dim_names: expected a dim name or a tuple of them, got {mesh_dim_names!r}")
        own = self.mesh_dim_names or ()
        positions = [own.index(n) for n in names if n in own]
        if len(positions) == len(names) and positions != sorted(positions):
            # upstream's KeyError: "Mesh dim indices should be in ascending order."
            raise ValueError(f"mesh_dim_names: {tuple(names)} are not in the mesh's order {tuple(own)}: a submesh "
                             "keeps its dims in order, as upstream's does")
        return DeviceMesh(self.device_type, None, _impl=self._impl.submesh(list(names)))

    def __reduce__(self):
        root = self._impl.root
        if root != self._impl:  # a submesh: its root, then the same slice
            return (_rebuild_submesh, (DeviceMesh(self.device_type, None, _impl=root), self.mesh_dim_names))
        return (_rebuild_mesh, (self.device_type, self.mesh.tolist(), self.mesh_dim_names))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceMesh) and self._impl == other._impl

    def __hash__(self) -> int:
        return hash((self.shape, self.mesh_dim_names, tuple(self._impl.ranks)))

    def __repr__(self) -> str:
        return f"DeviceMesh({self._impl!r})"


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Optional[Sequence[str]] = None) -> DeviceMesh:
    """Upstream's init_device_mesh: ranks 0..N-1 in row-major order over `mesh_shape`."""
    shape = _int_list(mesh_shape, "mesh_shape")
    if device_type != "cpu":
        raise ValueError(f"device_type: dtsim simulates ranks on 'cpu', got {device_type!r}")
    names = [str(n) for n in mesh_dim_names] if mesh_dim_names is not None else []
    return DeviceMesh(device_type, None, _impl=_C.DeviceMesh(shape, names, []))


def _is_upstream(value: Any, kind: str) -> bool:
    """An instance of upstream's torch.distributed class `kind` ("DeviceMesh", "DTensor"), by its module."""
    return type(value).__name__ == kind and type(value).__module__.startswith("torch.distributed")


def _mesh_arg(mesh: Any, field: str = "device_mesh") -> DeviceMesh:
    if _is_upstream(mesh, "DeviceMesh"):
        # Upstream's mesh as its ranks and dim names (a submesh: the group this process sees), simulated on the CPU.
        return DeviceMesh("cpu", mesh.mesh.cpu().tolist(), mesh_dim_names=mesh.mesh_dim_names)
    if not isinstance(mesh, DeviceMesh):
        raise ValueError(f"{field}: expected a dtsim.DeviceMesh or torch's DeviceMesh, got {type(mesh).__name__}")
    return mesh


def _upstream_spec(dt: Any) -> Tuple[DeviceMesh, str, List[int], str]:
    """An upstream DTensor's mesh, placements, global shape and dtype."""
    return (_mesh_arg(dt.device_mesh), _placements_text(tuple(dt.placements)), list(dt.shape),
            _dtype_name(dt.dtype))


def _upstream_local(dt: Any) -> Any:
    return dt._local_tensor  # upstream's DTensor keeps its local shard here (a LocalTensor under LocalTensorMode)


# ---- DTensor ----------------------------------------------------------------------------------


def _rebuild_mesh(device_type: str, ranks: Any, mesh_dim_names: Optional[Sequence[str]]) -> "DeviceMesh":
    return DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names)


def _rebuild_submesh(root: "DeviceMesh", mesh_dim_names: Sequence[str]) -> "DeviceMesh":
    return root[tuple(mesh_dim_names)]


def _rebuild_dtensor(shards: List[torch.Tensor], mesh: "DeviceMesh", placements: str, shape: List[int],
                     stride: List[int]) -> "DTensor":
    return DTensor.from_local(shards, mesh, placements, shape=shape, stride=stride)


class DTensor:
    """A simulated DTensor: a spec (mesh, placements, global shape, dtype) and every rank's shard.

    Pickling and deepcopy keep the mesh, placements, global shape and stride, and copy every rank's shard, as
    upstream's DTensor pickles its local tensor.
    """

    __slots__ = ("_impl", "_mesh")

    def __reduce__(self):
        shards = [t.detach().clone() for t in self.to_local()]
        return (_rebuild_dtensor, (shards, self._mesh, self._impl.placements, list(self.shape), list(self.stride())))

    def __init__(self, impl: _C.DTensor, mesh: DeviceMesh) -> None:
        self._impl = impl
        self._mesh = mesh

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._mesh

    @property
    def placements(self) -> Tuple[Placement, ...]:
        return _parse_placements(self._impl.placements)

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self._impl.shape)

    def size(self, dim: Optional[int] = None) -> Union[torch.Size, int]:
        return self.shape if dim is None else self.shape[dim]

    @property
    def ndim(self) -> int:
        return len(self._impl.shape)

    def stride(self) -> Tuple[int, ...]:
        return tuple(self._impl.stride)

    @property
    def dtype(self) -> torch.dtype:
        return _torch_dtype(self._impl.dtype)

    def to_local(self) -> List[torch.Tensor]:
        """Every rank's local shard, in ascending rank order (rank r at index r on init_device_mesh's
        meshes). The tensors share storage with the DTensor (no copies); replicas share one buffer
        until written (copy-on-write)."""
        return _simulate(self._impl.shards)

    def local_shards(self) -> Dict[int, torch.Tensor]:
        """{rank: shard} for every rank."""
        return dict(zip(self._impl.ranks(), _simulate(self._impl.shards)))

    def redistribute(self, device_mesh: Optional[DeviceMesh] = None, placements: Optional[PlacementsLike] = None, *,
                     planner: str = "greedy", plan: Optional["Plan"] = None) -> "DTensor":
        """Upstream's redistribute on the same mesh. `planner`: "greedy" (upstream's sequence),
        "min-cost" or "graph"; or run a Plan from dtsim.plan (possibly edited) with `plan=`."""
        if device_mesh is not None and _mesh_arg(device_mesh) != self._mesh:
            raise ValueError(f"device_mesh: redistribute to another mesh ({device_mesh!r} from "
                             f"{self._mesh!r}) is not supported (upstream refuses it too)")
        if plan is not None:
            if placements is not None:
                raise ValueError("plan: give either placements or plan, not both")
            if not isinstance(plan, Plan):
                raise ValueError(f"plan: expected a dtsim.Plan, got {type(plan).__name__}")
            plan._check_groups(self._mesh)
            return DTensor(_simulate(_C.execute_plan, self._impl, plan.to_json()), self._mesh)
        text = _placements_text(placements)
        return DTensor(_simulate(self._impl.redistribute, text, _planner_arg(planner)), self._mesh)

    def full_tensor(self) -> torch.Tensor:
        """The global tensor (redistribute to all-Replicate; every rank's copy must agree)."""
        return _simulate(self._impl.full_tensor)

    @staticmethod
    def from_upstream(dtensor: Any) -> "DTensor":
        """A dtsim DTensor of an upstream DTensor made under LocalTensorMode (its local tensor is a LocalTensor that
        holds every rank's shard): the same mesh, placements, shape and stride, every rank's shard shared. A DTensor
        of a real rank holds only its own shard: ValueError."""
        if not _is_upstream(dtensor, "DTensor"):
            raise ValueError(f"dtensor: expected torch's DTensor, got {type(dtensor).__name__}")
        local = _upstream_local(dtensor)
        shards = getattr(local, "_local_tensors", None)
        if not isinstance(shards, dict):
            raise ValueError("dtensor: its local tensor is one rank's shard (a real rank's DTensor); dtsim needs every "
                             "rank's: make it under LocalTensorMode, or use dtsim.plan / dtsim.layout, which need "
                             "only its spec")
        mesh = _mesh_arg(dtensor.device_mesh)
        return DTensor.from_local({int(r): t for r, t in shards.items()}, mesh, tuple(dtensor.placements),
                                  shape=list(dtensor.shape), stride=list(dtensor.stride()))

    @staticmethod
    def from_local(local_tensor: Union[Sequence[torch.Tensor], Mapping[int, torch.Tensor]],
                   device_mesh: Optional[DeviceMesh] = None, placements: Optional[PlacementsLike] = None, *,
                   run_check: bool = False, shape: Optional[Sequence[int]] = None,
                   stride: Optional[Sequence[int]] = None) -> "DTensor":
        """Wraps every rank's shard without communication: a list in ascending rank order or a dict
        {rank: tensor}. The tensors are kept as given (no copies). Every local shape must match the
        layout (ValueError naming the rank otherwise); `shape` defaults to even sharding."""
        mesh = _mesh_arg(device_mesh)
        if isinstance(local_tensor, Mapping):
            ranks = sorted(mesh._impl.root.ranks)
            missing = [r for r in ranks if r not in local_tensor]
            if missing or len(local_tensor) != len(ranks):
                raise ValueError(f"local_tensor: expected one tensor for each rank {ranks[:8]}..., "
                                 f"missing {missing[:8]}")
            shards = [local_tensor[r] for r in ranks]
        elif isinstance(local_tensor, torch.Tensor):
            raise ValueError("local_tensor: give every rank's shard (a list in rank order, or a dict "
                             "rank -> tensor), not one tensor")
        else:
            shards = list(local_tensor)
        for i, s in enumerate(shards):
            if not isinstance(s, torch.Tensor):
                raise ValueError(f"local_tensor[{i}]: expected a torch.Tensor, got {type(s).__name__}")
            _no_grad_arg(s, f"local_tensor[{i}]")
        impl = _simulate(_C.from_local, shards, mesh._impl, _placements_text(placements),
                         None if shape is None else _int_list(shape, "shape"),
                         None if stride is None else _int_list(stride, "stride"))
        return DTensor(impl, mesh)

    def __repr__(self) -> str:
        return (f"DTensor(placements={self.placements}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype}, device_mesh={self._mesh!r})")


def distribute_tensor(tensor: torch.Tensor, device_mesh: DeviceMesh, placements: Optional[PlacementsLike] = None, *,
                      src_data_rank: Optional[int] = 0) -> DTensor:
    """Upstream's distribute_tensor: each rank takes its part of `tensor` (as held by the rank at
    coordinate `src_data_rank` on each mesh dim; None: every rank splits its own copy). As upstream's
    scatter/broadcast, every rank's shard is its own buffer: writing a shard never changes `tensor`.
    `placements` defaults to Replicate on every mesh dim."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
    if src_data_rank is not None and (isinstance(src_data_rank, bool) or not isinstance(src_data_rank, int)):
        raise ValueError(f"src_data_rank: expected an int (a mesh coordinate) or None, got {src_data_rank!r}")
    mesh = _mesh_arg(device_mesh)
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    _no_grad_arg(tensor, "tensor")
    impl = _simulate(_C.distribute_tensor, tensor, mesh._impl, _placements_text(placements), src_data_rank)
    return DTensor(impl, mesh)


# ---- plans ------------------------------------------------------------------------------------


class PlanStep:
    """One step of a plan: the mesh dim it changes, from / to, the collective, its groups, bytes
    per rank and estimated time. `step["key"]` reads any key of the step's JSON (docs/planner.md)."""

    __slots__ = ("_json",)

    def __init__(self, json: Dict[str, Any]) -> None:
        self._json = json

    @property
    def mesh_dim(self) -> int:
        """The mesh dim this step changes."""
        return self._json["mesh_dim"]

    @property
    def mesh_dim_name(self) -> str:
        """Its name ("dp"), or its index as text on a mesh without names."""
        return self._json["mesh_dim_name"]

    @property
    def src(self) -> Placement:
        """The placement on that mesh dim before the step."""
        return _parse_placements(self._json["from"])[0]

    @property
    def dst(self) -> Placement:
        """The placement on that mesh dim after the step."""
        return _parse_placements(self._json["to"])[0]

    @property
    def collective(self) -> str:
        """all_gather, all_reduce, reduce_scatter, all_to_all, local_split, local_reduce, ..."""
        return self._json["collective"]

    @property
    def groups(self) -> List[List[int]]:
        """The rank groups the collective runs in ([] for a local step)."""
        return self._json["groups"]

    @property
    def bytes_per_rank(self) -> List[int]:
        """Bytes each rank sends (padded as upstream pads), in ascending rank order."""
        return self._json["bytes_per_rank"]

    @property
    def bytes_received_per_rank(self) -> List[int]:
        """Bytes each rank receives, in ascending rank order."""
        return self._json["bytes_received_per_rank"]

    @property
    def est_us(self) -> float:
        """The cost model's estimate of the step, in microseconds."""
        return self._json["est_us"]

    @property
    def placements_after(self) -> Tuple[Placement, ...]:
        """Every mesh dim's placement after the step."""
        return _parse_placements(self._json["placements_after"])

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def to_json(self) -> Dict[str, Any]:
        return self._json

class Plan:
    """A redistribution plan as data: `steps`, `explain()`, `to_json()` (the JSON of `dtsim plan
    --json`). Run it with DTensor.redistribute(plan=...); an edited plan is checked before it runs."""

    __slots__ = ("_json", "_explain")

    _REQUIRED = ("plan", "from", "to", "mesh", "shape", "dtype")
    _OPTIONAL = ("note", "num_collectives", "planner", "runs_left_to_right", "total_est_us")

    def __init__(self, json: Dict[str, Any], explain: Optional[str] = None) -> None:
        if not isinstance(json, dict):
            raise ValueError(f"plan: expected the JSON object of `dtsim plan --json` (a dict), got "
                             f"{type(json).__name__}")
        for key in json:
            if key not in self._REQUIRED + self._OPTIONAL:
                raise ValueError(f"plan: unknown key {key!r} (the JSON of `dtsim plan --json` has "
                                 f"{', '.join(self._REQUIRED + self._OPTIONAL)})")
        for key in self._REQUIRED:
            if key not in json:
                raise ValueError(f"plan: missing key {key!r} (the JSON of `dtsim plan --json` has "
                                 f"{', '.join(self._REQUIRED)} and more)")
        estimates = [("total_est_us", json.get("total_est_us"))] + [
            (f"plan[{i}].est_us", step.get("est_us")) for i, step in enumerate(json["plan"])
            if isinstance(json["plan"], list) and isinstance(step, dict)]
        for field, value in estimates:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value >= 0):
                raise ValueError(f"{field}: an estimate in microseconds is a number >= 0, got {value!r}")
        if explain is None:
            explain = _simulate(_C.explain_plan, json)  # validates it as ExecutePlan reads it (ValueError)
        self._json = json
        self._explain = explain

    @property
    def steps(self) -> List[PlanStep]:
        """The steps in the order they run."""
        return [PlanStep(s) for s in self._json["plan"]]

    @property
    def planner(self) -> str:
        """"greedy", "min-cost" or "graph"."""
        return self._json["planner"]

    @property
    def total_est_us(self) -> float:
        """The sum of the steps' estimates, in microseconds."""
        return self._json["total_est_us"]

    @property
    def num_collectives(self) -> int:
        """How many steps communicate (local splits and reductions do not)."""
        return self._json["num_collectives"]

    @property
    def note(self) -> str:
        """Why the planner chose this plan, where it says ("" otherwise)."""
        return self._json["note"]

    @property
    def src(self) -> Tuple[Placement, ...]:
        """The source placements."""
        return _parse_placements(self._json["from"])

    @property
    def dst(self) -> Tuple[Placement, ...]:
        """The target placements."""
        return _parse_placements(self._json["to"])

    def explain(self) -> str:
        """One line per step (mesh dim, from -> to, collective, groups, bytes/rank, estimate)."""
        if self._explain is None:
            self._explain = _C.explain_plan(self._json)
        return self._explain

    def to_json(self) -> Dict[str, Any]:
        return self._json

    def _check_groups(self, mesh: "DeviceMesh") -> None:
        """Every communicating step's groups must be its mesh dim's groups on `mesh` (the executor runs a mesh dim's
        groups; a plan edited to other groups would not run as printed)."""
        ranks = mesh.mesh
        for i, step in enumerate(self._json["plan"]):
            groups, dim = step.get("groups"), step.get("mesh_dim")
            if not groups or not isinstance(dim, int) or not 0 <= dim < ranks.dim():
                continue
            expected = sorted(sorted(g) for g in ranks.movedim(dim, -1).reshape(-1, ranks.shape[dim]).tolist())
            given = sorted(sorted(g) for g in groups) if all(isinstance(g, list) for g in groups) else groups
            if given != expected:
                raise ValueError(f"plan[{i}].groups: {groups} are not the groups of mesh dim {dim} of {mesh!r} "
                                 f"({expected}): a step runs over its mesh dim's groups")

    def __repr__(self) -> str:
        return (f"PlanStep({self.mesh_dim_name}: {self._json['from']} -> {self._json['to']}, "
                f"{self.collective})")

    def __len__(self) -> int:
        return len(self._json["plan"])

    def __iter__(self) -> Iterator[PlanStep]:
        return iter(self.steps)

    def __repr__(self) -> str:
        n = len(self)
        c = self._json.get("num_collectives", "?")
        return (f"Plan({self._json['from']} -> {self._json['to']}, {n} step{'s' * (n != 1)}, "
                f"{c} collective{'s' * (c != 1)}, planner={self._json.get('planner', '?')})")


def plan(src: Union[DTensor, PlacementsLike], placements: PlacementsLike, *,
         device_mesh: Optional[DeviceMesh] = None, shape: Optional[Sequence[int]] = None,
         dtype: torch.dtype = torch.float32, planner: str = "greedy") -> Plan:
    """The plan redistributing `src` to `placements`, without running it. `src` is a DTensor, or
    source placements together with `device_mesh` and `shape` (and `dtype`)."""
    target = _placements_text(placements)
    if isinstance(src, DTensor):
        mesh, src_text, shp, dt = src._mesh, src._impl.placements, list(src.shape), src._impl.dtype
    elif _is_upstream(src, "DTensor"):
        mesh, src_text, shp, dt = _upstream_spec(src)
    else:
        if device_mesh is None:
            raise ValueError("device_mesh: required when src is placements, not a DTensor")
        if shape is None:
            raise ValueError("shape: required when src is placements, not a DTensor")
        mesh, src_text = _mesh_arg(device_mesh), _placements_text(src, "src")
        shp, dt = _int_list(shape, "shape"), _dtype_name(dtype)
    json, text = _C.plan(mesh._impl, src_text, target, shp, dt, _planner_arg(planner))
    return Plan(json, text)


# ---- layouts ----------------------------------------------------------------------------------


class RankLayout:
    """What one rank holds: its mesh coordinate, local shape, global offset and, per tensor dim, the
    owned global index ranges [[lo, hi), ...]."""

    __slots__ = ("rank", "coordinate", "local_shape", "global_offset", "intervals")

    rank: int
    coordinate: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    global_offset: Tuple[int, ...]
    intervals: List[List[Tuple[int, int]]]

    def __init__(self, json: Dict[str, Any]) -> None:
        self.rank = json["rank"]
        self.coordinate = tuple(json["coordinate"])
        self.local_shape = tuple(json["local_shape"])
        self.global_offset = tuple(json["global_offset"])
        self.intervals = [[tuple(iv) for iv in dim] for dim in json["intervals"]]

    def __repr__(self) -> str:
        return (f"RankLayout(rank={self.rank}, coordinate={self.coordinate}, "
                f"local_shape={self.local_shape}, global_offset={self.global_offset})")


class Layout:
    """Every rank's part of a global tensor under a mesh and placements (`dtsim layout`)."""

    __slots__ = ("_json", "_text")

    def __init__(self, json: Dict[str, Any], text: str) -> None:
        self._json = json
        self._text = text

    @property
    def ranks(self) -> List[RankLayout]:
        """One entry per rank listed: every rank for worlds up to 256 ranks (ranks="auto"), those chosen by `ranks`;
        none for a bigger world with ranks="auto" (see to_json()["rank_summary"])."""
        return [RankLayout(r) for r in self._json.get("ranks", [])]

    def render(self) -> str:
        """The text `dtsim layout` prints: the block grid and the per-rank table."""
        return self._text

    __str__ = render

    def to_json(self) -> Dict[str, Any]:
        return self._json

    def __repr__(self) -> str:
        return f"Layout({self._json['placements']}, shape={self._json['shape']})"


def layout(src: Union[DTensor, DeviceMesh], placements: Optional[PlacementsLike] = None,
           shape: Optional[Sequence[int]] = None, *, dtype: torch.dtype = torch.float32,
           ranks: Union[str, Sequence[int]] = "auto") -> Layout:
    """The layout of a DTensor, or of (`device_mesh`, `placements`, `shape`): layout(mesh, [Shard(0)],
    (9, 2)). `ranks`: "auto" (every rank of a small world, a summary of a big one), "all", a
    list such as "0,3,5-7", or a sequence of ranks [0, 3]."""
    if not isinstance(ranks, str):
        ranks = ",".join(str(r) for r in _int_list(ranks, "ranks"))
    if isinstance(src, DTensor) or _is_upstream(src, "DTensor"):
        if placements is not None or shape is not None:
            raise ValueError("placements: a DTensor carries its own placements and shape")
        mesh, text, shp, dt = (src._mesh, src._impl.placements, list(src.shape), src._impl.dtype) \
            if isinstance(src, DTensor) else _upstream_spec(src)
    else:
        mesh = _mesh_arg(src, "device_mesh")
        if shape is None:
            raise ValueError("shape: required with a mesh")
        text, shp, dt = _placements_text(placements), _int_list(shape, "shape"), _dtype_name(dtype)
    json, rendered = _C.layout(mesh._impl, text, shp, dt, str(ranks))
    return Layout(json, rendered)


# ---- traces -----------------------------------------------------------------------------------


class Trace:
    """A dtsim trace read and validated as `trace-diff` reads it (docs/trace-format.md). Attributes
    follow its JSON: format, meta, initial, steps, final, ok (or op, strategy, redistributions for
    an op trace; model, mesh, events for a model trace; meta, redistributions for a recording);
    `trace["key"]` and to_json() give the JSON itself."""

    __slots__ = ("_json",)

    def __init__(self, json: Dict[str, Any]) -> None:
        self._json = json

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):  # no JSON key starts with "_"; and copy/pickle probe _json before __init__
            raise AttributeError(key)
        try:
            return self._json[key]
        except KeyError:
            raise AttributeError(key) from None

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def to_json(self) -> Dict[str, Any]:
        return self._json

    def __repr__(self) -> str:
        meta = self._json.get("meta", {})
        return f"Trace(format={self._json.get('format')!r}, backend={meta.get('backend')!r})"


def load_trace(path: Union[str, os.PathLike]) -> Trace:
    """Reads and validates a trace file (ValueError naming the file and the JSON path of the first
    problem; files over 1 GiB, directories and special files are refused as by the CLI)."""
    return Trace(_C.load_trace(os.fspath(path)))


def shard_hash(tensor: torch.Tensor) -> str:
    """The hash traces record for a shard: "xxh3:" + 16 hex digits over dtype, shape and bytes."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
    if _is_upstream(tensor, "DTensor"):  # its local shard (this rank's), as a recording hashes it
        tensor = _upstream_local(tensor)
    if type(tensor).__name__ == "LocalTensor":
        raise ValueError("tensor: an upstream LocalTensor holds every rank's shard; hash each: "
                         "{r: dtsim.shard_hash(t) for r, t in local._local_tensors.items()}, or "
                         "dtsim.DTensor.from_upstream(dt).to_local()")
    _strided_arg(tensor, "tensor")
    return _simulate(_C.shard_hash, tensor)


from .recorder import record  # noqa: E402  (the recorder of upstream runs: recorder.py)

# The package's names: repr, pickle and help name what this module defines `dtsim.X`, where users find them (and where
# pickles written before the package loaded lazily name them).
for _value in list(globals().values()):
    if callable(_value) and getattr(_value, "__module__", None) == __name__:
        _value.__module__ = "dtsim"
del _value
