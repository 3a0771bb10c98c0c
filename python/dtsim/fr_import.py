"""`dtsim import-fr -o FILE DUMP...`: upstream's Flight Recorder dumps (one per rank) as a dtsim recording of each
rank's collective sequence, which `dtsim trace-diff fr.json sim.json` explains against `dtsim run --trace` of the same
script: which rank is missing which collective, the first kind, size or group mismatch, and the module, op and line
behind it in the simulation (docs/recording.md, "Flight Recorder").

A dump is what `torch._C._distributed_c10d._dump_fr_trace()` returns and the watchdog writes to
`$TORCH_FR_DUMP_TEMP_FILE<rank>` (a pickle), or `_dump_fr_trace_json()`'s JSON: {"version", "entries", "pg_config",
"pg_status", ...}, format versions 2.x (torch 2.11 to 2.15 write "2.10"), of Gloo and NCCL. Pickles are read with an
unpickler that builds only plain containers and numbers (no class, no code), so a hostile file cannot run anything.

What each entry becomes: a collective event with its kind (from the c10d call behind it where the dump names it:
Gloo runs `reduce_scatter_single` as an all-reduce and names it so), its group (pg_config's ranks; Gloo's dumps carry
none, so a group's members are the ranks whose dumps hold entries of it), its per-group sequence number, the input
shape and dtype, whether it completed (the dump's `pg_status`: last completed collective per group; entries' own
state where the backend tracks it), when it was created, and the program's line (the innermost frame outside torch).
Point-to-point entries and barriers are left out, as recordings leave them out.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import pickle
import re
import sys
from typing import Any, Dict, List, Optional, Sequence

from ._files import check_outputs, write_output

_MAX_DUMP_BYTES = 1 << 30
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128", "Float8_e4m3fn": "float8_e4m3fn",
           "Float8_e5m2": "float8_e5m2"}
# The c10d call in an entry's innermost frame, by dtsim's collective kinds (what recordings call them).
_CALLS = {"all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "broadcast": "broadcast",
          "all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather", "all_gather": "all_gather",
          "_all_gather_base": "all_gather", "reduce_scatter_single": "reduce_scatter",
          "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter": "reduce_scatter",
          "_reduce_scatter_base": "reduce_scatter", "all_to_all_single": "all_to_all", "all_to_all": "all_to_all",
          "reduce": "reduce", "gather": "gather", "scatter": "scatter"}
# Profiling names ("gloo:all_gather") by dtsim's kinds.
_NAMES = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
          "broadcast": "broadcast", "all_gather": "all_gather", "allgather": "all_gather",
          "_allgather_base": "all_gather", "_all_gather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
          "all_gather_into_tensor_coalesced": "all_gather", "reduce_scatter": "reduce_scatter",
          "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
          "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all", "reduce": "reduce",
          "gather": "gather", "scatter": "scatter"}
_SKIPPED = {"barrier", "send", "recv", "coalesced", "monitored_barrier"}


class BadInput(Exception):
    pass


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refers to {module}.{name}; a Flight Recorder dump holds only plain data")


def _load(path: str) -> Dict[str, Any]:
    try:
        size = os.stat(path).st_size
        if not os.path.isfile(path):
            raise BadInput(f"dump: '{path}' is not a regular file")
        if size > _MAX_DUMP_BYTES:
            raise BadInput(f"dump: '{path}' is {size} bytes, over the limit of {_MAX_DUMP_BYTES}")
        with open(path, "rb") as f:
            blob = f.read(_MAX_DUMP_BYTES + 1)
    except OSError as e:
        raise BadInput(f"dump: cannot read '{path}': {e.strerror}") from None
    if not blob:
        raise BadInput(f"dump: '{path}' is empty")
    try:
        if blob[:1] in (b"{", b" ", b"\n"):
            doc = json.loads(blob)
        else:
            doc = _PlainUnpickler(io.BytesIO(blob)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, MemoryError,
            RecursionError, UnicodeDecodeError, AttributeError, OverflowError) as e:
        raise BadInput(f"dump: '{path}' is not a Flight Recorder dump (pickle or JSON): "
                       f"{type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"dump: '{path}': expected a dict with 'entries', got {type(doc).__name__}")
    for key in ("version", "entries"):
        if key not in doc:
            raise BadInput(f"dump: '{path}': no '{key}'")
    version = str(doc["version"])
    if not re.fullmatch(r"2\.\d+", version):
        raise BadInput(f"dump: '{path}': version '{version[:40]}' is not supported (2.x: torch 2.13 to 2.15)")
    if not isinstance(doc["entries"], list):
        raise BadInput(f"dump: '{path}': 'entries' is not a list")
    return doc


def _field(path: str, i: int, entry: Dict[str, Any], key: str, types) -> Any:
    if key not in entry:
        raise BadInput(f"dump: '{path}': entries[{i}] has no '{key}'")
    value = entry[key]
    if not isinstance(value, types) or (types is int and isinstance(value, bool)):
        raise BadInput(f"dump: '{path}': entries[{i}].{key}: unexpected {type(value).__name__} {str(value)[:60]!r}")
    return value


def _rank_of(path: str, doc: Dict[str, Any], given: Optional[int]) -> int:
    if given is not None:
        return given
    m = re.search(r"(\d+)$", os.path.basename(path))
    if not m:
        raise BadInput(f"dump: '{path}': its name does not end in the rank (as the watchdog names dumps: "
                       "PREFIX<rank>)")
    return int(m.group(1))


def _line(entry: Dict[str, Any]) -> str:
    from .events import is_library_file

    frames = entry.get("frames")
    if isinstance(frames, list):
        for f in frames:
            if isinstance(f, dict) and isinstance(f.get("filename"), str) and not is_library_file(f["filename"]):
                return f"{f['filename']}:{f.get('line', '?')}"
    return ""


def _kind(entry: Dict[str, Any], path: str, i: int) -> Optional[str]:
    name = _field(path, i, entry, "profiling_name", str)
    backend, _, op = name.partition(":")
    op = op.split(" ")[0]
    if op in _SKIPPED or entry.get("is_p2p") is True:
        return None
    frames = entry.get("frames")
    if isinstance(frames, list) and frames and isinstance(frames[0], dict):
        call = _CALLS.get(str(frames[0].get("name")))
        if call is not None:
            return call
    kind = _NAMES.get(op)
    if kind is None:
        raise BadInput(f"dump: '{path}': entries[{i}].profiling_name: unknown collective '{name[:60]}'")
    return kind


def convert(paths: Sequence[str]) -> Dict[str, Any]:
    """The recording (a dict) of the dumps' collective sequences."""
    dumps: Dict[int, tuple] = {}
    for path in paths:
        doc = _load(path)
        rank = _rank_of(path, doc, None)
        if rank in dumps:
            raise BadInput(f"dump: '{path}' and '{dumps[rank][0]}' are both rank {rank}'s")
        dumps[rank] = (path, doc)
    world = max(dumps) + 1
    if world > (1 << 20):
        raise BadInput(f"dump: rank {world - 1} is beyond 2^20 ranks")
    missing = [r for r in range(world) if r not in dumps]
    # Group members: pg_config's ranks where the backend writes them, else the ranks whose dumps use the group.
    members: Dict[str, set] = {}
    for rank, (path, doc) in dumps.items():
        config = doc.get("pg_config") or {}
        if isinstance(config, dict):
            for name, pg in config.items():
                text = pg.get("ranks") if isinstance(pg, dict) else None
                try:
                    ranks = ast.literal_eval(text) if isinstance(text, str) else text
                except (ValueError, SyntaxError):
                    raise BadInput(f"dump: '{path}': pg_config.{name}.ranks: not a list of ranks") from None
                if isinstance(ranks, list) and ranks:
                    if not all(isinstance(r, int) and 0 <= r < (1 << 20) for r in ranks):
                        raise BadInput(f"dump: '{path}': pg_config.{name}.ranks: not a list of ranks")
                    members.setdefault(str(name), set()).update(ranks)
    used: Dict[str, set] = {}
    rows: Dict[int, List[tuple]] = {}
    truncated = []
    for rank, (path, doc) in sorted(dumps.items()):
        status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
        out = []
        entries = doc["entries"]
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise BadInput(f"dump: '{path}': entries[{i}] is not a dict")
            if i == 0 and _field(path, i, entry, "record_id", int) != 0:
                truncated.append(rank)
            kind = _kind(entry, path, i)
            pg = _field(path, i, entry, "process_group", (list, tuple))
            if len(pg) != 2:
                raise BadInput(f"dump: '{path}': entries[{i}].process_group: expected [name, desc]")
            name = str(pg[0])
            seq = _field(path, i, entry, "collective_seq_id", int)
            if seq < 0:
                raise BadInput(f"dump: '{path}': entries[{i}].collective_seq_id: {seq} < 0")
            if kind is None:
                continue
            sizes = _field(path, i, entry, "input_sizes", list)
            dtypes = _field(path, i, entry, "input_dtypes", list)
            for s in sizes:
                if not isinstance(s, list) or not all(isinstance(d, int) and 0 <= d < (1 << 62) for d in s):
                    raise BadInput(f"dump: '{path}': entries[{i}].input_sizes: not a list of shapes")
            state = str(entry.get("state", ""))
            pg_state = status.get(name) if isinstance(status, dict) else None
            if isinstance(pg_state, dict) and isinstance(pg_state.get("last_completed_collective"), int):
                state = "completed" if seq <= pg_state["last_completed_collective"] else \
                    ("started" if seq <= pg_state.get("last_started_collective", -1) else "scheduled")
            used.setdefault(name, set()).add(rank)
            created = entry.get("time_created_ns")
            # The collective's own time, where the dump measured it (NCCL with timing enabled: duration_ms). The
            # watchdog's time_discovered_completed_ns is when it noticed, not how long the collective took.
            duration = entry.get("duration_ms")
            took = float(duration) * 1000.0 if isinstance(duration, (int, float)) and not isinstance(duration, bool) \
                and 0 <= duration < 1e12 else None
            out.append((kind, name, seq, sizes, dtypes, state, created, took, _line(entry)))
        rows[rank] = out
    events: Dict[str, List[Dict[str, Any]]] = {}
    for rank, out in rows.items():
        evs = []
        # Times count from the rank's first collective in its dump (each rank's own clock).
        origin = min((row[6] for row in out if isinstance(row[6], int)), default=None)
        for kind, name, seq, sizes, dtypes, state, created, took, line in out:
            group = sorted(members.get(name) or used[name])
            if rank not in group:
                group = sorted(set(group) | {rank})
            inputs = [{"shape": list(sizes[0]), "dtype": _DTYPES.get(str(dtypes[0]), str(dtypes[0]).lower()),
                       "hash": None}] if len(sizes) == 1 and dtypes else []
            ev = {"kind": "collective", "op": kind, "group": group, "module": "", "pass": "forward", "line": line,
                  "inputs": inputs, "outputs": None, "seq": seq, "state": state}
            if isinstance(created, int) and origin is not None:
                ev["t_us"] = (created - origin) / 1000.0
            if took is not None:
                ev["dur_us"] = took
            evs.append(ev)
        events[str(rank)] = evs
    return {"format": "dtsim-recording", "version": 1,
            "meta": {"tool": "dtsim import-fr", "backend": "flight-recorder", "world_size": world,
                     "argv": " ".join(paths), "data": False, "data_file": None, "data_complete": True,
                     "fr_version": str(next(iter(dumps.values()))[1]["version"]), "missing_ranks": missing,
                     "truncated_ranks": truncated},
            "redistributions": [], "events": events}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BadInput(f"arguments: {message}")


def main(argv: Sequence[str]) -> int:
    p = _Parser(prog="dtsim import-fr", allow_abbrev=False,
                description="Flight Recorder dumps (one per rank) as a dtsim recording.")
    p.add_argument("-o", "--output", required=True, help="the recording to write")
    p.add_argument("dumps", nargs="+", help="one dump per rank, named <prefix><rank>")
    try:
        args = p.parse_args(argv)
        check_outputs([(args.output, "output")], [(d, "dump") for d in args.dumps])
        doc = convert(args.dumps)
        write_output(args.output, [(json.dumps(doc, separators=(",", ":")) + "\n").encode()], "output")
    except (BadInput, ValueError) as e:
        print(f"dtsim: error: {e}", file=sys.stderr)
        return 2
    n = sum(len(v) for v in doc["events"].values())
    notes = []
    if doc["meta"]["missing_ranks"]:
        notes.append(f"no dump for ranks {doc['meta']['missing_ranks']}")
    if doc["meta"]["truncated_ranks"]:
        notes.append(f"ranks {doc['meta']['truncated_ranks']}'s ring buffers had wrapped: their first collectives "
                     "are not in the dumps")
    print(f"dtsim import-fr: {len(doc['events'])} ranks, {n} collectives written to {args.output}"
          + ("; " + "; ".join(notes) if notes else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
