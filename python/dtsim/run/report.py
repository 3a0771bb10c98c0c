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
| dtsim/recorder.py's finish (first)                 | dtsim run --trace gathering its recording       |

The site is the innermost frame of the program's own code (not torch's, not dtsim's). Bytes are what one rank sends
into the collective (its input tensors; for a rooted one such as scatter, the root's), the most of any rank of the
group, summed over the row's calls.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional, Tuple

_INTERNAL = ("/torch/", "/dtsim/run/", "/dtsim/recorder.py", "/threading.py", "/contextlib.py", "<frozen ")


def _site_path(name: str) -> str:
    """A site's file as the report names it: an installed package's from its package (`torchtitan/trainer.py`), the
    program's own relative to the current folder."""
    for installed in ("/site-packages/", "/dist-packages/"):
        if installed in name:
            return name.rsplit(installed, 1)[1]
    return os.path.relpath(name) if not name.startswith("..") else name


def _cause_and_site(frame) -> Tuple[str, str]:
    files: List[str] = []
    site = "?"
    gathering = False  # dtsim.record's finish (--trace gathering its recording to rank 0)
    while frame is not None:
        name = frame.f_code.co_filename
        files.append(name)
        gathering = gathering or (frame.f_code.co_name == "finish" and name.endswith("/dtsim/recorder.py"))
        if site == "?" and not any(part in name for part in _INTERNAL):
            site = f"{_site_path(name)}:{frame.f_lineno}"
        frame = frame.f_back
    joined = "\n".join(files)
    if gathering:
        cause = "dtsim run --trace (gathering the recording to rank 0)"
    elif "/torch/distributed/fsdp/" in joined:
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


# dtsim's cost-model kind of each collective of the simulated backend, and which message size the model takes
# (nccl-tests' convention: all_gather its gathered output, the others the largest input). Kinds not listed have no
# estimate ("est_us": null).
_COST_KINDS = {
    "all_gather": ("all_gather", "sum"),
    "all_gather_into_tensor": ("all_gather", "sum"),
    "all_gather_into_tensor_coalesced": ("all_gather", "sum"),
    "reduce_scatter": ("reduce_scatter", "max"),
    "reduce_scatter_tensor": ("reduce_scatter", "max"),
    "all_reduce": ("all_reduce", "max"),
    "all_to_all": ("all_to_all", "max"),
    "all_to_all_single": ("all_to_all", "max"),
}


def estimate_us(kind: str, sent_bytes: List[int]) -> Optional[float]:
    """The planner's alpha-beta estimate of one collective (dtsim._C.estimate_collective_us), or None."""
    cost = _COST_KINDS.get(kind)
    if cost is None:
        return None
    from .. import _C

    message = sum(sent_bytes) if cost[1] == "sum" else max(sent_bytes, default=0)
    return _C.estimate_collective_us(cost[0], len(sent_bytes), message)


class Report:
    def __init__(self, world_size: int, tracker=None):
        self.world_size = world_size
        self.rows: Dict[Tuple[str, str, str, str], Dict] = {}
        self.total = 0
        self.complete = True
        self.tracker = tracker  # modules.Tracker: the per-module tree and the ranks' peak memory

    def record(self, kind: str, group: str, desc, ranks: List[int]) -> Dict:
        """Counts one collective (at its first rank's call); returns its row, which the bytes are added to when the
        collective completes."""
        cause, site = _cause_and_site(sys._getframe(2))
        key = (group, kind, cause, site)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = {"group": group, "group_desc": desc or "", "ranks": list(ranks), "kind": kind,
                                    "cause": cause, "site": site, "count": 0, "bytes_per_rank": 0, "est_us": 0.0}
        row["count"] += 1
        self.total += 1
        return row

    def completed(self, row: Dict, kind: str, arrivals: List[Tuple[int, List, int]]) -> None:
        """A collective of `row` completed; `arrivals`: each member's (rank, modules it was issued in, bytes sent).
        Adds the busiest rank's bytes and the estimate to the row, and each rank's call to its modules."""
        sent = [a[2] for a in arrivals]
        est = estimate_us(kind, sent)
        row["bytes_per_rank"] += max(sent, default=0)
        row["est_us"] = None if est is None or row["est_us"] is None else row["est_us"] + est
        if self.tracker is not None:
            for rank, keys, sent_bytes in arrivals:
                self.tracker.add_collective(keys, row["kind"], rank, sent_bytes, est)

    def text(self) -> str:
        lines = [f"dtsim run report: {self.total} collectives on {self.world_size} ranks, by group, kind, cause and "
                 "program line (bytes: what the busiest rank sends, summed over the calls)"]
        header = ("group", "kind", "calls", "bytes/rank", "est", "cause", "site")
        table = [header] + [(_group_label(r), r["kind"], str(r["count"]), _bytes(r["bytes_per_rank"]),
                             _us(r["est_us"]), r["cause"], r["site"]) for r in self.rows.values()]
        lines.extend(_columns(table))
        if self.tracker is not None:
            lines.append("")
            lines.append("dtsim run report per module, forward and backward, as upstream CommDebugMode's tree: a "
                         "collective counts in every module it was issued in; calls, bytes and estimate are the "
                         "busiest rank's; peak memory: the most tensor bytes each rank held while the module ran "
                         "(Global forward: over the whole run)")
            header = ("module", "pass", "collectives", "bytes/rank", "est", "peak memory")
            table = [header] + [("  " * m["depth"] + m["module"], m["pass"], _kinds(m["collectives"]),
                                 _bytes(m["bytes_per_rank"]) if m["collectives"] else "",
                                 _estimate(m) if m["collectives"] else "", _peaks(m["peak_bytes"]))
                                for m in self.modules()]
            lines.extend(_columns(table))
        return "\n".join(lines)

    def modules(self) -> List[Dict]:
        """The per-module tree, in the order the modules first ran: Global first, each module's forward then its
        backward."""
        if self.tracker is None:
            return []
        self.tracker.finish()
        stats = self.tracker.stats
        paths: List[str] = []
        for path, _ in stats:
            if path not in paths:
                paths.append(path)
        paths.remove("Global")
        out = []
        for path in ["Global"] + paths:
            for pass_ in ("forward", "backward"):
                m = stats.get((path, pass_))
                if m is None:
                    continue
                # Per kind, the busiest rank's calls, bytes and estimate (as each rank's CommDebugMode counts).
                rows = [{"kind": kind, "count": max(v[0] for v in ranks.values()),
                         "bytes_per_rank": max(v[1] for v in ranks.values()),
                         "est_us": max(v[2] for v in ranks.values()),
                         "unestimated": max(v[3] for v in ranks.values())}
                        for kind, ranks in m.collectives.items()]
                totals = [[0, 0.0, 0] for _ in range(self.world_size)]
                for ranks in m.collectives.values():
                    for rank, v in ranks.items():
                        totals[rank][0] += v[1]
                        totals[rank][1] += v[2]
                        totals[rank][2] += v[3]
                out.append({"module": path, "type": m.type_name, "depth": 0 if path == "Global" else m.depth + 1,
                            "pass": pass_, "collectives": rows,
                            "bytes_per_rank": max((t[0] for t in totals), default=0),
                            "est_us": max((t[1] for t in totals), default=0.0),
                            "unestimated": max((t[2] for t in totals), default=0),
                            "peak_bytes": [m.peak.get(r) for r in range(self.world_size)]})
        return out

    def to_json(self) -> Dict:
        out = {"world_size": self.world_size, "collectives": self.total, "complete": self.complete,
               "rows": list(self.rows.values())}
        if self.tracker is not None:
            out["modules"] = self.modules()
        return out

    def write_json(self, path: str) -> None:
        """By dtsim's output policy (dtsim/_files.py): atomically for a regular or new file; ValueError when it
        cannot be written."""
        from .._files import write_output

        write_output(path, [(json.dumps(self.to_json(), indent=1) + "\n").encode()], "report-json")


def _group_label(row: Dict) -> str:
    desc = f" ({row['group_desc']})" if row["group_desc"] and row["group_desc"] != "undefined" else ""
    return f"{row['group']!r}{desc} ranks {_ranges(row['ranks'])}"


def _columns(table: List[Tuple[str, ...]]) -> List[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table]


def _estimate(module: Dict) -> str:
    text = _us(module["est_us"])
    return text + (f" + {module['unestimated']} not estimated" if module["unestimated"] else "")


def _us(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.1f} us"


def _kinds(rows: List[Dict]) -> str:
    return ", ".join(f"{r['count']} {r['kind']}" for r in rows)


def _peaks(peaks: List[Optional[int]]) -> str:
    """Each rank's peak: ranks with the same value together; above three values, the least and the most."""
    by_value: Dict[int, List[int]] = {}
    for rank, value in enumerate(peaks):
        if value is not None:
            by_value.setdefault(value, []).append(rank)
    if not by_value:
        return ""
    if len(by_value) > 3:
        low, high = min(by_value), max(by_value)
        return (f"{_bytes(low)} (rank {_ranges(by_value[low])}) to {_bytes(high)} (rank {_ranges(by_value[high])}); "
                f"{len(by_value)} values")
    return "; ".join(f"{_bytes(v)} (rank {_ranges(ranks)})" for v, ranks in
                     sorted(by_value.items(), key=lambda item: item[1][0]))


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _ranges(ranks: List[int]) -> str:
    from .process_group import _ranges as ranges

    return ranges(ranks)
