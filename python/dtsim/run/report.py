"""`dtsim run --report` / `--report-json FILE`: every collective of the run, by group, kind, cause and program line.

A collective's cause is read from the Python stack of the rank that called it first:

| the stack holds                                    | cause                                           |
|----------------------------------------------------|-------------------------------------------------|
| torch/distributed/fsdp/                            | FSDP2 (its all-gather or reduce-scatter)        |
| torch/nn/parallel/distributed.py                   | DDP                                             |
| torch/distributed/tensor/ ... _dispatch.py         | DTensor implicit redistribution (an op's input) |
| torch/distributed/tensor/                          | DTensor (redistribute, full_tensor, a style)    |
| torch/autograd/ and no torch.distributed frame     | issued from C++ during backward (DDP's reducer) |
| none of these                                      | direct call (c10d or functional collective)     |

The site is the innermost frame of the program's own code (not torch's, not dtsim's). Bytes are what one rank sends
into the collective (its input tensors; for a rooted one such as scatter, the root's), the most of any rank of the
group, summed over the row's calls.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Dict, List, Tuple

_INTERNAL = ("/torch/", "/dtsim/run/", "/threading.py", "/contextlib.py", "<frozen ")


def _cause_and_site(frame) -> Tuple[str, str]:
    files: List[str] = []
    site = "?"
    while frame is not None:
        name = frame.f_code.co_filename
        files.append(name)
        if site == "?" and not any(part in name for part in _INTERNAL):
            site = f"{os.path.relpath(name) if not name.startswith('..') else name}:{frame.f_lineno}"
        frame = frame.f_back
    joined = "\n".join(files)
    if "/torch/distributed/fsdp/" in joined:
        cause = "FSDP2"
    elif "/torch/nn/parallel/distributed.py" in joined:
        cause = "DDP"
    elif "/torch/distributed/tensor/" in joined:
        cause = ("DTensor implicit redistribution" if "/torch/distributed/tensor/_dispatch.py" in joined
                 else "DTensor redistribution (explicit, full_tensor or a parallel style)")
    elif "/torch/autograd/" in joined and "/torch/distributed/" not in joined:
        cause = "issued from C++ during backward (DDP's reducer or a hook)"
    else:
        cause = "direct call"
    return cause, site


class Report:
    def __init__(self, world_size: int):
        self.world_size = world_size
        self.rows: Dict[Tuple[str, str, str, str], Dict] = {}
        self.total = 0
        self.complete = True

    def record(self, kind: str, group: str, desc, ranks: List[int]) -> Dict:
        """Counts one collective (at its first rank's call); returns its row, which the bytes are added to when the
        collective completes."""
        cause, site = _cause_and_site(sys._getframe(2))
        key = (group, kind, cause, site)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = {"group": group, "group_desc": desc or "", "ranks": list(ranks), "kind": kind, "cause": cause, "site": site,
                                    "count": 0, "bytes_per_rank": 0}
        row["count"] += 1
        self.total += 1
        return row

    def text(self) -> str:
        lines = [f"dtsim run report: {self.total} collectives on {self.world_size} ranks, by group, kind, cause and "
                 "program line (bytes: what the busiest rank sends, summed over the calls)"]
        header = ("group", "kind", "calls", "bytes/rank", "cause", "site")
        table = [header] + [(_group_label(r), r["kind"], str(r["count"]),
                             _bytes(r["bytes_per_rank"]), r["cause"], r["site"]) for r in self.rows.values()]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        return "\n".join(lines)

    def to_json(self) -> Dict:
        return {"world_size": self.world_size, "collectives": self.total, "complete": self.complete,
                "rows": list(self.rows.values())}

    def write_json(self, path: str) -> None:
        """Atomically: a temporary file beside `path`, renamed over it."""
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".dtsim-report-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f, indent=1)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


def _group_label(row: Dict) -> str:
    desc = f" ({row['group_desc']})" if row["group_desc"] and row["group_desc"] != "undefined" else ""
    return f"{row['group']!r}{desc} ranks {_ranges(row['ranks'])}"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _ranges(ranks: List[int]) -> str:
    from .process_group import _ranges as ranges

    return ranges(ranks)
