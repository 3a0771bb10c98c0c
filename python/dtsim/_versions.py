"""The torch releases dtsim supports: one list for `import dtsim` and dtsim.record.

dtsim reads DTensor's internals (sharding propagation, redistribution plans, the functional collectives), which
change between torch minor releases, so each supported minor release is one that scripts/compat.sh has run the
Python tests and the oracle against (docs/python.md, "Supported torch releases"). The extension dtsim._C is built
against one torch and loads only with that one (LibTorch has no stable C++ ABI across releases).
"""

from __future__ import annotations

from typing import Optional

# Minor releases, and the release of each that the compatibility runs used (2.11: the GPU machine's, issue 34).
SUPPORTED_TORCH = ("2.11", "2.13", "2.14", "2.15")
TESTED_TORCH = ("2.11.0", "2.13.0", "2.14.1", "2.15.0")


def torch_minor(version: str) -> str:
    """'2.15.0+cu130' -> '2.15'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def check_torch(version: str, built_with: Optional[str]) -> None:
    """Raises ImportError unless `version` (the interpreter's torch) is supported and is the one the extension was
    built with (`built_with`, None where the build did not say)."""
    if torch_minor(version) not in SUPPORTED_TORCH:
        raise ImportError(f"dtsim: torch {version} is not supported; supported releases: "
                          f"{', '.join(TESTED_TORCH)} (any patch release of {', '.join(SUPPORTED_TORCH)})")
    if built_with is not None and built_with.split("+")[0] != version.split("+")[0]:
        raise ImportError(f"dtsim: its extension dtsim._C was built against torch {built_with}, but this interpreter "
                          f"has torch {version}; reinstall dtsim in this venv "
                          f"(pip install --no-build-isolation <dtsim checkout>, docs/python.md)")
