"""Type stubs of dtsim._files_c, the output-path policy of dtsim's Python writers (python/src/files_module.cc): the C++
writers' own (include/dtsim/trace/files.h), in an extension without LibTorch. Use dtsim._files, not this module."""

from typing import Any, Sequence, Tuple

def check_outputs(outputs: Sequence[Tuple[str, str]], inputs: Sequence[Tuple[str, str]], /) -> None:
    """Checks (path, field) outputs by the C++ writers' output policy (include/dtsim/trace/files.h) against the run's
    (path, field) inputs and each other; ValueError("<field>: <why>") for one that may not be written."""
    ...

def write_output(path: str, chunks: Sequence[Any], field: str, /) -> None:
    """Writes the contiguous buffers in order by that policy (atomically for a regular or new file)."""
    ...
