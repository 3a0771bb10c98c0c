"""Type stubs of dtsim._C, the C++ extension behind the dtsim package (python/src/module.cc).

Use the dtsim package, not this module: it speaks upstream's names and types (Shard, DeviceMesh, ...), while this
module only converts. Placements cross as dtsim's text form ("S(0),R" in, "[S(0), R]" out), dtypes as names
("float32"), JSON reports as the Python values json.loads gives, tensors through torch's own caster (no copies).
dtsim's InputError becomes ValueError (its message names the argument), any other dtsim error RuntimeError.
"""

from typing import Any, List, Optional, Sequence, Tuple

import torch

class DeviceMesh:
    """An n-D grid of simulated ranks with optional dim names; valid once constructed."""

    def __init__(self, shape: Sequence[int], names: Sequence[str] = ..., ranks: Sequence[int] = ...) -> None:
        """`ranks` empty: 0..N-1 in row-major order; `names` empty: unnamed dims."""
        ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def names(self) -> List[str]:
        """The dim names ([] on a mesh without names)."""
        ...
    @property
    def ranks(self) -> List[int]:
        """Every rank in row-major order of the mesh."""
        ...
    @property
    def ndim(self) -> int: ...
    def size(self) -> int:
        """The number of ranks."""
        ...
    def dim_label(self, mesh_dim: int, /) -> str:
        """The name of a mesh dim, or its index as text on a mesh without names."""
        ...
    def get_dim(self, name: str, /) -> int:
        """The index of the dim called `name` (ValueError if there is none)."""
        ...
    def coordinate(self, rank: int, /) -> List[int]:
        """The coordinate of `rank` (ValueError if it is not in the mesh)."""
        ...
    def groups_along(self, mesh_dim: int, /) -> List[List[int]]:
        """The rank groups along a mesh dim: on 2x4, groups_along(1) == [[0, 1, 2, 3], [4, 5, 6, 7]]."""
        ...
    def submesh(self, names: Sequence[str], /) -> DeviceMesh:
        """The submesh of the named dims cut at this mesh's first rank; in simulation it stands for the whole
        family of such submeshes (its DTensors hold every rank of the root)."""
        ...
    @property
    def is_root(self) -> bool:
        """False for a submesh."""
        ...
    @property
    def root(self) -> DeviceMesh:
        """The mesh this one was cut from (itself for a root mesh)."""
        ...
    def __eq__(self, other: DeviceMesh, /) -> bool: ...  # type: ignore[override]

class DTensor:
    """A simulated DTensor: a spec and every rank's shard (one LocalTensor). Made by the functions below."""

    @property
    def mesh(self) -> DeviceMesh: ...
    @property
    def placements(self) -> str:
        """The canonical text, "[S(0), R]"."""
        ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def stride(self) -> List[int]: ...
    @property
    def dtype(self) -> str:
        """The dtype's name, "float32"."""
        ...
    @property
    def spec(self) -> str:
        """The spec's text: mesh, placements, shape, dtype."""
        ...
    def ranks(self) -> List[int]:
        """The ranks that hold a shard, ascending (every rank of the root mesh)."""
        ...
    def shards(self) -> List[torch.Tensor]:
        """Every rank's shard in ascending rank order; views of the DTensor's own tensors, no copies."""
        ...
    def redistribute(self, placements: str, planner: str, /) -> DTensor:
        """Plans with `planner` ("greedy", "min-cost", "graph") and runs the plan; releases the GIL."""
        ...
    def full_tensor(self) -> torch.Tensor:
        """The global tensor; releases the GIL."""
        ...

def distribute_tensor(tensor: torch.Tensor, mesh: DeviceMesh, placements: str, src_data_rank: Optional[int], /
                      ) -> DTensor:
    """Every rank's part of `tensor` (each its own buffer, replicas copy-on-write); releases the GIL."""
    ...

def from_local(shards: Sequence[torch.Tensor], mesh: DeviceMesh, placements: str, shape: Optional[Sequence[int]],
               stride: Optional[Sequence[int]], /) -> DTensor:
    """Wraps one tensor per rank of the root mesh, in ascending rank order, as given (no copies)."""
    ...

def plan(mesh: DeviceMesh, src: str, dst: str, shape: Sequence[int], dtype: str, planner: str, /
         ) -> Tuple[Any, str]:
    """(the plan's JSON as Python values, its explanation text)."""
    ...

def explain_plan(plan: Any, /) -> str:
    """The explanation of a plan given as JSON-like Python values (ValueError naming `plan` if invalid)."""
    ...

def execute_plan(dtensor: DTensor, plan: Any, /) -> DTensor:
    """Runs a plan given as JSON-like Python values, after checking it fits `dtensor`; releases the GIL."""
    ...

def layout(mesh: DeviceMesh, placements: str, shape: Sequence[int], dtype: str, ranks: str, /) -> Tuple[Any, str]:
    """(the layout's JSON as `dtsim layout --json` prints it, the text `dtsim layout` prints)."""
    ...

def normalize_placements(text: str, /) -> str:
    """The canonical text of placements: "S(0),R" -> "[S(0), R]"."""
    ...

def load_trace(path: str, /) -> Any:
    """A trace or op trace read (bounded) and validated, as JSON-like Python values."""
    ...

def estimate_collective_us(kind: str, group_size: int, message_bytes: int, /) -> Optional[float]:
    """The planner's alpha-beta estimate (microseconds) of one collective of `kind` ("all_gather", "reduce_scatter",
    "all_reduce", "all_to_all") over `group_size` ranks whose largest message is `message_bytes`; None for kinds
    the cost model does not estimate."""
    ...

def shard_hash(tensor: torch.Tensor, /) -> str:
    """"xxh3:" + 16 hex digits over dtype, shape and bytes: the hash traces record."""
    ...

def dtype_name(tensor: torch.Tensor, /) -> str:
    """dtsim's name of the tensor's dtype ("float32")."""
    ...
