"""dtsim from Python: a whole simulated world of DTensor ranks in one process, with upstream's names.

    import torch, dtsim
    from dtsim import Shard, Replicate, Partial

    mesh = dtsim.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    dt = dtsim.distribute_tensor(torch.arange(50.).reshape(5, 10), mesh, [Shard(0), Replicate()])
    out = dt.redistribute(mesh, [Replicate(), Shard(1)])
    out.to_local()[3]                                  # rank 3's shard (a torch.Tensor, no copy)
    print(dtsim.plan(dt, [Replicate(), Shard(1)]).explain())
    out.full_tensor()                                  # the global tensor

Semantics are upstream torch.distributed.tensor's (its placements, chunk sizes, planner, errors);
the ranks live in one process (dtsim's LocalTensor), so `to_local()` gives every rank's shard, as a
list in ascending rank order. Placements may be given as dtsim's classes, upstream's
(torch.distributed.tensor.Shard, ...), or text ("S(0)", "[S(0), R]", "P(avg)", "_S(0,2)").
Bad input raises ValueError naming the argument; nothing here crashes the interpreter.

The package loads lazily: `import dtsim` checks the torch release and loads nothing else; the first use of any of its
names loads the API (dtsim/_api.py), and with it torch and the extension dtsim._C. So `python -m dtsim record` starts
the job it records without waiting for torch, which the job's ranks load themselves.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional

__all__ = [
    "DTensor",
    "DeviceMesh",
    "Layout",
    "Partial",
    "Placement",
    "Plan",
    "PlanStep",
    "RankLayout",
    "Replicate",
    "Shard",
    "Trace",
    "distribute_tensor",
    "init_device_mesh",
    "layout",
    "load_trace",
    "plan",
    "record",
    "shard_hash",
]


def _check_torch(version: Optional[str] = None) -> None:
    """ImportError unless the interpreter's torch (`version`; else the loaded torch's, else the installed one's, read
    without loading it) is a release dtsim supports and the one its extension was built with."""
    import importlib

    _versions = importlib.import_module(f"{__name__}._versions")
    if version is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            version = torch.__version__
        else:
            from importlib import metadata

            try:
                version = metadata.version("torch")
            except metadata.PackageNotFoundError:
                raise ImportError("dtsim: torch is not installed in this interpreter; dtsim needs one of "
                                  f"{', '.join(_versions.TESTED_TORCH)}") from None
    try:
        built_with = importlib.import_module(f"{__name__}._build_info").TORCH_VERSION
    except ImportError:  # a build that did not write it
        built_with = None
    _versions.check_torch(version, built_with)


_check_torch()


def __getattr__(name: str) -> Any:
    """The API's names, loaded on first use; a submodule not imported yet (dtsim._C, dtsim.events), imported."""
    import importlib
    import pkgutil

    if name.startswith("__"):
        raise AttributeError(f"module 'dtsim' has no attribute '{name}'")
    if name in {m.name for m in pkgutil.iter_modules(__path__)}:
        if name == "_C":
            import torch  # noqa: F401  (loads LibTorch, which the extension needs loaded first)
        return importlib.import_module(f"{__name__}.{name}")
    api = importlib.import_module(f"{__name__}._api")
    globals().update({k: v for k, v in vars(api).items() if not k.startswith("__")})
    if name in globals():
        return globals()[name]
    raise AttributeError(f"module 'dtsim' has no attribute '{name}'")


def __dir__() -> List[str]:
    """The public names (`__all__`), not the modules and typing names the package imports for itself."""
    return sorted(__all__)
