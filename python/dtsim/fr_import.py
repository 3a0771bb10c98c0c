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
import stat
import sys
from typing import Any, Dict, List, Optional, Sequence

from ._files import check_outputs, write_output

_MAX_DUMP_BYTES = 1 << 30
_MAX_WORLD = 1 << 20
_MAX_COUNT = 1 << 63  # sequence numbers, record ids, lines, times (ns)
_MAX_MICROS = 1e15  # a recording's largest time (its reader's bound)
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


# What a dump may build, counted as if every shared reference were a copy (a pickle's memo lets a few hundred bytes
# refer to one list from 2^40 places, which every later walk would expand): containers, numbers and strings, a string
# costing one more unit per _STRING_UNIT characters. A real dump builds well under one unit per byte of its file
# (torch's pickler shares repeated strings), so a dump may build _UNITS_PER_BYTE units per byte and _BASE_UNITS more;
# and it nests at most _MAX_DEPTH containers deep (a real one nests five).
_UNITS_PER_BYTE, _BASE_UNITS, _STRING_UNIT, _MAX_DEPTH = 4, 200_000, 64, 32


def _check_bounds(path: str, doc: Any, file_bytes: int) -> None:
    """BadInput unless `doc`, expanded, stays within what its file's size allows (above), naming where it ends."""
    budget = _UNITS_PER_BYTE * file_bytes + _BASE_UNITS
    used = 0
    stack = [(doc, 0, "")]
    while stack:
        value, depth, where = stack.pop()
        used += 1
        if used > budget:
            raise BadInput(f"dump: '{path}': what it builds passes {budget} values (shared references counted at "
                           f"each place they appear; at {where or 'the top'}): refused as a pickle bomb")
        if isinstance(value, (str, bytes, bytearray)):
            used += len(value) // _STRING_UNIT
            continue
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            if depth >= _MAX_DEPTH:
                raise BadInput(f"dump: '{path}': {where or 'the top'} nests more than {_MAX_DEPTH} containers deep")
            if isinstance(value, dict):
                for k, v in value.items():
                    name = k if isinstance(k, str) and len(k) <= 40 else "?"
                    stack.append((k, depth + 1, where))
                    stack.append((v, depth + 1, (f"{where}.{name}" if where else name) if len(where) < 60
                                  else where.rstrip(".") + "..."))
            else:
                for i, v in enumerate(value):
                    stack.append((v, depth + 1, f"{where}[{i}]" if len(where) < 60 else where.rstrip(".") + "..."))
        elif not (value is None or isinstance(value, (bool, int, float, complex))):
            raise BadInput(f"dump: '{path}': {where or 'the top'}: a {type(value).__name__} is not plain data")


def _load(path: str) -> Dict[str, Any]:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"dump: '{path}' is not a regular file")
        size = st.st_size
        if size > _MAX_DUMP_BYTES:
            raise BadInput(f"dump: '{path}' is {size} bytes, over the limit of {_MAX_DUMP_BYTES}")
        with open(path, "rb") as f:
            blob = f.read(_MAX_DUMP_BYTES + 1)
    except OSError as e:
        raise BadInput(f"dump: cannot read '{path}': {e.strerror}") from None
    if not blob:
        raise BadInput(f"dump: '{path}' is empty")
    if len(blob) > _MAX_DUMP_BYTES:
        raise BadInput(f"dump: '{path}' is over the limit of {_MAX_DUMP_BYTES} bytes")
    try:
        if blob.lstrip()[:1] in (b"{", b"["):
            doc = json.loads(blob)
        else:
            doc = _PlainUnpickler(io.BytesIO(blob)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, MemoryError,
            RecursionError, UnicodeDecodeError, AttributeError, OverflowError) as e:
        raise BadInput(f"dump: '{path}' is not a Flight Recorder dump (pickle or JSON): "
                       f"{type(e).__name__}: {_shown(e)}") from None
    _check_bounds(path, doc, len(blob))
    if not isinstance(doc, dict):
        raise BadInput(f"dump: '{path}': expected a dict with 'entries', got {type(doc).__name__}")
    for key in ("version", "entries"):
        if key not in doc:
            raise BadInput(f"dump: '{path}': no '{key}'")
    if not isinstance(doc["version"], str) or not re.fullmatch(r"2\.\d{1,4}", doc["version"]):
        raise BadInput(f"dump: '{path}': version {_shown(doc['version'])} is not supported (2.x: torch 2.13 to 2.15)")
    if not isinstance(doc["entries"], list):
        raise BadInput(f"dump: '{path}': 'entries' is not a list")
    return doc


def _shown(value: Any) -> str:
    """`value` for a message: an exception's text cut to 200 characters, or a value's repr cut to 60 (an int too long
    to print is named by its size). Only called on values _check_bounds let through, so no repr runs away."""
    try:
        text = str(value) if isinstance(value, BaseException) else repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"an int of {value.bit_length()} bits" if isinstance(value, int) else type(value).__name__
    limit = 200 if isinstance(value, BaseException) else 60
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _field(path: str, i: int, entry: Dict[str, Any], key: str, types, optional: bool = False) -> Any:
    """entries[i][key], of one of `types` (None where `optional` and it is missing or null); BadInput naming it."""
    if key not in entry or (optional and entry[key] is None):
        if optional:
            return None
        raise BadInput(f"dump: '{path}': entries[{i}] has no '{key}'")
    value = entry[key]
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise BadInput(f"dump: '{path}': entries[{i}].{key}: unexpected {type(value).__name__} {_shown(value)}")
    return value


def _count(path: str, where: str, value: Any, low: int = 0, high: int = _MAX_COUNT) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < high:
        raise BadInput(f"dump: '{path}': {where}: {_shown(value)} is not a whole number from {low} to {high - 1}")
    return value


def _rank_of(path: str, doc: Dict[str, Any], given: Optional[int]) -> int:
    if given is not None:
        return given
    m = re.search(r"(?<!\d)(\d{1,7})$", os.path.basename(path))
    if not m:
        raise BadInput(f"dump: '{path}': its name does not end in the rank (as the watchdog names dumps: "
                       "PREFIX<rank>)")
    return int(m.group(1))


def _frames(path: str, i: int, entry: Dict[str, Any]) -> List[Dict[str, Any]]:
    """entries[i].frames, checked: a list of {name, filename, line} (none where the dump has no stacks)."""
    frames = _field(path, i, entry, "frames", list, optional=True) or []
    for j, f in enumerate(frames):
        where = f"entries[{i}].frames[{j}]"
        if not isinstance(f, dict):
            raise BadInput(f"dump: '{path}': {where}: expected a frame {{name, filename, line}}, got {_shown(f)}")
        for key in ("name", "filename"):
            if key in f and not isinstance(f[key], str):
                raise BadInput(f"dump: '{path}': {where}.{key}: expected text, got {_shown(f[key])}")
        if "line" in f:
            _count(path, f"{where}.line", f["line"])
    return frames


def _line(frames: List[Dict[str, Any]]) -> str:
    from ._library_files import is_library_file

    for f in frames:
        if isinstance(f.get("filename"), str) and not is_library_file(f["filename"]):
            return f"{f['filename'][:1024]}:{f.get('line', '?')}"
    return ""


def _kind(entry: Dict[str, Any], frames: List[Dict[str, Any]], path: str, i: int) -> Optional[str]:
    name = _field(path, i, entry, "profiling_name", str)
    backend, _, op = name.partition(":")
    op = op.split(" ")[0]
    if op in _SKIPPED or _field(path, i, entry, "is_p2p", bool, optional=True) is True:
        return None
    if frames:
        call = _CALLS.get(str(frames[0].get("name")))
        if call is not None:
            return call
    kind = _NAMES.get(op)
    if kind is None:
        raise BadInput(f"dump: '{path}': entries[{i}].profiling_name: unknown collective {_shown(name)}")
    return kind


def _group_status(path: str, doc: Dict[str, Any]) -> Dict[str, Dict[str, Optional[int]]]:
    """pg_status, checked: each group's last started and completed sequence numbers (None where not tracked; a
    dump writes -1 for none yet)."""
    status = doc.get("pg_status")
    if status is None:
        return {}
    if not isinstance(status, dict):
        raise BadInput(f"dump: '{path}': pg_status: expected a dict of groups, got {_shown(status)}")
    out = {}
    for name, pg in status.items():
        if not isinstance(pg, dict):
            raise BadInput(f"dump: '{path}': pg_status.{_shown(name)}: expected a dict, got {_shown(pg)}")
        # NCCL's JSON dumps write these numbers as text ("5").
        out[str(name)] = {key: None if pg.get(key) is None else
                          _count(path, f"pg_status.{str(name)[:40]}.{key}",
                                 int(pg[key]) if isinstance(pg[key], str) and re.fullmatch(r"-?\d{1,19}", pg[key])
                                 else pg[key], -1)
                          for key in ("last_started_collective", "last_completed_collective")}
    return out


def _members(path: str, doc: Dict[str, Any], members: Dict[str, set]) -> None:
    """Adds pg_config's group members (where the backend writes them) to `members`."""
    config = doc.get("pg_config")
    if config is None:
        return
    if not isinstance(config, dict):
        raise BadInput(f"dump: '{path}': pg_config: expected a dict of groups, got {_shown(config)}")
    for name, pg in config.items():
        if not isinstance(pg, dict):
            raise BadInput(f"dump: '{path}': pg_config.{_shown(name)}: expected a dict, got {_shown(pg)}")
        text = pg.get("ranks")
        try:
            ranks = ast.literal_eval(text) if isinstance(text, str) and len(text) < (1 << 24) else text
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            ranks = None
        if ranks is None or ranks == []:
            continue
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool)
                                                  and 0 <= r < _MAX_WORLD for r in ranks):
            raise BadInput(f"dump: '{path}': pg_config.{_shown(name)}.ranks: {_shown(text)} is not a list of ranks")
        members.setdefault(str(name), set()).update(ranks)


def _entry_row(path: str, i: int, entry: Any, status: Dict[str, Dict[str, Optional[int]]]) -> Optional[tuple]:
    """entries[i] as (kind, group name, seq, sizes, dtypes, state, created, took, line), every field it reads
    checked; None for what recordings leave out (point-to-point, barriers)."""
    if not isinstance(entry, dict):
        raise BadInput(f"dump: '{path}': entries[{i}] is not a dict")
    _count(path, f"entries[{i}].record_id", _field(path, i, entry, "record_id", int))
    frames = _frames(path, i, entry)
    kind = _kind(entry, frames, path, i)
    pg = _field(path, i, entry, "process_group", (list, tuple))
    if len(pg) != 2 or not all(isinstance(x, str) and len(x) <= 1024 for x in pg):
        raise BadInput(f"dump: '{path}': entries[{i}].process_group: expected [name, desc], got {_shown(pg)}")
    name = pg[0]
    seq = _count(path, f"entries[{i}].collective_seq_id", _field(path, i, entry, "collective_seq_id", int))
    if kind is None:
        return None
    sizes = _field(path, i, entry, "input_sizes", list)
    dtypes = _field(path, i, entry, "input_dtypes", list)
    for s in sizes:
        if not isinstance(s, list) or len(s) > 64 or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < (1 << 62) for d in s):
            raise BadInput(f"dump: '{path}': entries[{i}].input_sizes: {_shown(s)} is not a shape")
    if len(dtypes) != len(sizes) or not all(isinstance(d, str) and 0 < len(d) <= 64 for d in dtypes):
        raise BadInput(f"dump: '{path}': entries[{i}].input_dtypes: {_shown(dtypes)} is not one dtype name per "
                       f"input ({len(sizes)})")
    state = _field(path, i, entry, "state", str, optional=True) or ""
    if state not in ("", "scheduled", "started", "completed"):
        raise BadInput(f"dump: '{path}': entries[{i}].state: {_shown(state)} is not scheduled, started or completed")
    pg_state = status.get(name)
    if pg_state is not None and pg_state["last_completed_collective"] is not None:
        started = pg_state["last_started_collective"]
        state = "completed" if seq <= pg_state["last_completed_collective"] else \
            ("started" if started is not None and seq <= started else "scheduled")
    created = _field(path, i, entry, "time_created_ns", int, optional=True)
    if created is not None:
        _count(path, f"entries[{i}].time_created_ns", created)
    # The collective's own time, where the dump measured it (NCCL with timing enabled: duration_ms). The
    # watchdog's time_discovered_completed_ns is when it noticed, not how long the collective took.
    duration = _field(path, i, entry, "duration_ms", (int, float), optional=True)
    if duration is not None and not 0 <= duration < 1e12:
        raise BadInput(f"dump: '{path}': entries[{i}].duration_ms: {_shown(duration)} is not a time from 0 to 1e12 ms")
    took = float(duration) * 1000.0 if duration is not None else None
    return (kind, name, seq, sizes, dtypes, state, created, took, _line(frames))


def convert(paths: Sequence[str]) -> Dict[str, Any]:
    """The recording (a dict) of the dumps' collective sequences; BadInput naming the dump and field for a dump
    that is not a Flight Recorder dump, or one that would make a recording dtsim's readers refuse."""
    dumps: Dict[int, tuple] = {}
    for path in paths:
        doc = _load(path)
        rank = _rank_of(path, doc, None)
        if rank in dumps:
            raise BadInput(f"dump: '{path}' and '{dumps[rank][0]}' are both rank {rank}'s")
        dumps[rank] = (path, doc)
    world = max(dumps) + 1
    if world > _MAX_WORLD:
        raise BadInput(f"dump: rank {world - 1} is beyond 2^20 ranks")
    missing = [r for r in range(world) if r not in dumps]
    # Group members: pg_config's ranks where the backend writes them, else the ranks whose dumps use the group.
    members: Dict[str, set] = {}
    for rank, (path, doc) in dumps.items():
        _members(path, doc, members)
    used: Dict[str, set] = {}
    rows: Dict[int, List[tuple]] = {}
    truncated = []
    for rank, (path, doc) in sorted(dumps.items()):
        status = _group_status(path, doc)
        out = []
        for i, entry in enumerate(doc["entries"]):
            row = _entry_row(path, i, entry, status)
            if i == 0 and entry["record_id"] != 0:
                truncated.append(rank)
            if row is None:
                continue
            used.setdefault(row[1], set()).add(rank)
            out.append(row)
        # Times count from the rank's first collective in its dump (each rank's own clock).
        times = [row[6] for row in out if row[6] is not None]
        if times and (max(times) - min(times)) / 1000.0 > _MAX_MICROS:
            raise BadInput(f"dump: '{path}': entries' time_created_ns span {max(times) - min(times)} ns, more than "
                           "a recording's times hold (1e15 us)")
        rows[rank] = out
    events: Dict[str, List[Dict[str, Any]]] = {}
    for rank, out in rows.items():
        evs = []
        origin = min((row[6] for row in out if row[6] is not None), default=None)
        for kind, name, seq, sizes, dtypes, state, created, took, line in out:
            group = sorted(members.get(name) or used[name])
            if rank not in group:
                group = sorted(set(group) | {rank})
            inputs = [{"shape": list(sizes[0]), "dtype": _DTYPES.get(dtypes[0], dtypes[0].lower()),
                       "hash": None}] if len(sizes) == 1 else []
            ev = {"kind": "collective", "op": kind, "group": group, "module": "", "pass": "forward", "line": line,
                  "inputs": inputs, "outputs": None, "seq": seq, "state": state}
            if created is not None:
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


def recording_text(doc: Dict[str, Any]) -> bytes:
    """The recording's text, once dtsim's recording reader (the one trace-diff, replay and the viewer use) accepted
    it: BadInput naming the reader's first problem otherwise, so that nothing is written that would not read back."""
    from . import _files_c

    text = (json.dumps(doc, separators=(",", ":")) + "\n").encode()
    try:
        _files_c.check_recording(text)
    except ValueError as e:
        raise BadInput(f"dump: the recording made of these dumps does not read back ({e}); nothing was "
                       "written") from None
    return text


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
        write_output(args.output, [recording_text(doc)], "output")
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
