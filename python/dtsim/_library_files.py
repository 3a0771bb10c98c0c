"""Which stack frames are the program's own: the one rule behind every "line" dtsim reports (events.py for live
ranks, fr_import.py for Flight Recorder dumps written on other machines). Loads nothing but the standard library, so
`dtsim import-fr` answers without loading torch."""

from __future__ import annotations

import os
import re
from typing import Dict, Tuple

_DTSIM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_FILES = ("/threading.py", "/contextlib.py", "/functools.py", "/typing_extensions.py", "/warnings.py")
# torch's package in any installation: a Flight Recorder dump's frames are those of the machine that wrote it.
_ANY_TORCH = re.compile(r"[/\\](?:site|dist)-packages[/\\]torch[/\\]")
_KNOWN: Dict[str, bool] = {}  # file name -> the answer (a stack walk asks it of every frame)
_OWN_DIRS: Tuple[str, ...] = (_DTSIM_DIR,)


def add_library_dir(folder: str) -> None:
    """Counts the files below `folder` (this process's torch, wherever it is installed) as library files too."""
    global _OWN_DIRS
    folder = folder.rstrip(os.sep) + os.sep
    if folder not in _OWN_DIRS:
        _OWN_DIRS = _OWN_DIRS + (folder,)
        _KNOWN.clear()


def is_library_file(name: str) -> bool:
    """Whether a stack frame's file is torch's (of any installation), dtsim's, or a standard wrapper's (`functools`,
    `typing_extensions`' deprecation wrapper, ...) rather than the program's own."""
    known = _KNOWN.get(name)
    if known is None:
        known = _KNOWN[name] = (name.startswith(_OWN_DIRS) or name.endswith(_LIBRARY_FILES)
                                or name.startswith("<frozen") or _ANY_TORCH.search(name) is not None)
    return known
