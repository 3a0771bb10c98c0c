"""Structure-aware fuzzer of `dtsim import-fr`'s reader (python/dtsim/fr_import.py): Flight Recorder dumps.

Each program starts from the real dumps in tests/run/fr_dumps (Gloo on torch 2.14.1 and 2.15.0, clean and hung, and
NCCL's pickle and JSON), decodes them, applies up to 6 semantic mutations and writes every rank's dump back as a pickle
(protocols 2 to 5) or as JSON:
- a field of an entry, a frame, pg_status or pg_config dropped, or given a value of another type or out of range
  (None, a bool, text, a negative or 2^70 integer, NaN, a list, a dict, 100,000 characters);
- entries dropped, duplicated or swapped; profiling names unknown or skipped; process groups of another arity or of
  unknown groups; input shapes and dtypes of different lengths; group ranks that are not ranks;
- pickle bombs: a field replaced by a list that refers to one list from 2^k places (a few hundred bytes in the file),
  or by containers nested hundreds deep;
- a rank's dump dropped, or given another rank's name.

Properties: 0. every real dump, unmutated, is accepted; and for every program:
1. the reader returns a recording or raises fr_import.BadInput; any other exception is a finding;
2. a refusal names a dump ("dump: ...") in at most 600 characters, and comes within HANG_S seconds (a bomb included);
3. an accepted recording reads back in dtsim's recording reader (dtsim._files_c.check_recording, trace-diff's), and
   agrees with an oracle written apart from the reader: one event list per dump, as many events as the dump has
   collective entries (not point-to-point, not barriers), each event's group holding its rank, ranks inside the world,
   times finite and >= 0;
4. the same dumps convert to the same text twice.

    python tests/fuzz/fr_dump_fuzzer.py [--sweep N:SEED] [CORPUS_DIR]

--sweep runs N programs from SEED (ctest: fuzz_fr_dump). A corpus folder holds regression inputs: one folder per
input, with the dump files as import-fr reads them; each is checked for properties 1 and 2 and, when accepted, 3.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import pickle
import random
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from dtsim import _files_c, fr_import  # noqa: E402

HANG_S = 5.0  # the longest a refusal may take here (a hang detector; the bound measured is in docs/reliability.md)
SEEDS = [
    ["gloo-torch-2.14.1/clean"], ["gloo-torch-2.14.1/hang"], ["gloo-torch-2.15.0/clean"], ["gloo-torch-2.15.0/hang"],
    ["nccl-torch-2.11.0"], ["nccl-torch-2.11.0/json"],
]
SKIPPED = {"barrier", "send", "recv", "coalesced", "monitored_barrier"}


class Finding(Exception):
    pass


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(name)


def load_seed(folder: str) -> Dict[str, Any]:
    path = os.path.join(ROOT, "tests", "run", "fr_dumps", folder)
    dumps = {}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full) or not name.startswith("rank"):
            continue
        blob = open(full, "rb").read()
        dumps[name] = json.loads(blob) if blob[:1] == b"{" else _Plain(io.BytesIO(blob)).load()
    return dumps


ODD_VALUES = [None, True, "x", -1, -(1 << 40), 1 << 70, float("nan"), float("inf"), 1.5, [], {}, [1, [2]],
              {"a": 1}, "y" * 100_000, "", (1, 2)]


def bomb(depth: int) -> list:
    x: list = [0]
    for _ in range(depth):
        x = [x, x]
    return x


def nest(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


def places(doc: Any) -> List[tuple]:
    """Every (container, key) in `doc`, in a fixed order; a container met again (a bomb's shared lists) and what is
    nested past 50 deep are not walked again."""
    out: List[tuple] = []
    seen = set()
    stack = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > 50:
            continue
        seen.add(id(node))
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else ()
        for k in keys:
            out.append((node, k))
            stack.append((node[k], depth + 1))
    return out


def mutate(rng: random.Random, dumps: Dict[str, Any], log: List[str]) -> None:
    name = rng.choice(sorted(dumps))
    doc = dumps[name]
    roll = rng.randrange(12)
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if roll <= 3:  # one field anywhere: dropped or of another value
        spots = places(doc)
        if not spots:
            return
        where, key = rng.choice(spots)
        if rng.random() < 0.3 and isinstance(where, dict):
            del where[key]
            log.append(f"{name}: drop {key!r}")
        else:
            value = rng.choice(ODD_VALUES)
            where[key] = copy.deepcopy(value)
            log.append(f"{name}: {key!r} = {str(value)[:30]}")
    elif roll == 4 and isinstance(entries, list) and entries:  # entries dropped, duplicated, swapped
        i, j = rng.randrange(len(entries)), rng.randrange(len(entries))
        op = rng.randrange(3)
        if op == 0:
            del entries[i]
        elif op == 1:
            entries.insert(j, copy.deepcopy(entries[i]))
        else:
            entries[i], entries[j] = entries[j], entries[i]
        log.append(f"{name}: entries {('drop', 'dup', 'swap')[op]} {i} {j}")
    elif roll == 5 and isinstance(entries, list) and entries:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e["profiling_name"] = rng.choice(["gloo:frobnicate", "nccl:barrier", "gloo:send", "", "gloo:all_reduce",
                                              "nccl:_allgather_base", ":", "x" * 500])
            log.append(f"{name}: profiling_name {e['profiling_name'][:20]}")
    elif roll == 6 and isinstance(entries, list) and entries:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e["process_group"] = rng.choice([["0"], ["0", "x", "y"], ["99", "other"], [0, "d"], ["9" * 2000, ""]])
            log.append(f"{name}: process_group {str(e['process_group'])[:20]}")
    elif roll == 7 and isinstance(entries, list) and entries:
        e = rng.choice(entries)
        if isinstance(e, dict):
            e["input_dtypes"] = rng.choice([[], ["Float", "Float"], [None], ["Float"] * 3])
            log.append(f"{name}: input_dtypes {e['input_dtypes']}")
    elif roll == 8 and isinstance(doc, dict):
        cfg = doc.get("pg_config")
        if isinstance(cfg, dict) and cfg:
            g = rng.choice(sorted(cfg, key=str))
            if isinstance(cfg[g], dict):
                cfg[g]["ranks"] = rng.choice(["[0, 1", "[-1]", "[1048576]", "[True]", "x", "[[0]]", "()", 7,
                                              "[" + "0," * 5000 + "]", "9" * 5000])
                log.append(f"{name}: pg_config ranks {str(cfg[g]['ranks'])[:20]}")
    elif roll == 9:  # a pickle bomb at a field
        spots = places(doc)
        if spots:
            where, key = rng.choice(spots)
            where[key] = bomb(rng.randrange(20, 48))
            log.append(f"{name}: bomb at {key!r}")
    elif roll == 10:
        spots = places(doc)
        if spots:
            where, key = rng.choice(spots)
            where[key] = nest(rng.choice([40, 200, 300]))
            log.append(f"{name}: nest at {key!r}")
    else:  # a rank's dump dropped or renamed
        if rng.random() < 0.5 and len(dumps) > 1:
            del dumps[name]
            log.append(f"drop {name}")
        else:
            dumps[rng.choice(["rank7", "rank0", "x", "rank" + "9" * 12, "rank1048576"])] = dumps.pop(name)
            log.append(f"rename {name}")


def serialize(rng: random.Random, doc: Any, shares: bool) -> bytes:
    """The dump's file: JSON or a pickle; a dump that shares containers (a bomb) only as a pickle, since JSON would
    write every shared list out."""
    if rng.random() < 0.35 and not shares:
        try:
            return json.dumps(doc).encode()
        except (TypeError, ValueError, RecursionError):
            pass
    try:
        return pickle.dumps(doc, protocol=rng.choice([2, 3, 4, 5]))
    except RecursionError:
        return pickle.dumps(nest(10), protocol=2)


def collective_entries(doc: Any) -> int:
    """The oracle's count: entries that are collectives (fr_import's rules restated: skipped ops and p2p left out)."""
    n = 0
    for e in doc["entries"]:
        op = e["profiling_name"].partition(":")[2].split(" ")[0]
        if op not in SKIPPED and e.get("is_p2p") is not True:
            n += 1
    return n


def check(folder: str, label: str) -> str:
    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))
    started = time.monotonic()
    try:
        doc = fr_import.convert(paths)
        text = fr_import.recording_text(doc)
    except fr_import.BadInput as e:
        took = time.monotonic() - started
        message = str(e)
        if not message.startswith("dump: ") or len(message) > 600:
            raise Finding(f"{label}: refusal not naming a dump, or too long ({len(message)}): {message[:300]}")
        if took > HANG_S:
            raise Finding(f"{label}: refused after {took:.1f} s (over {HANG_S} s): {message[:200]}")
        return "refused"
    except Exception as e:  # noqa: BLE001  any other exception is a finding
        raise Finding(f"{label}: {type(e).__name__}: {str(e)[:300]}") from e
    took = time.monotonic() - started
    if took > HANG_S:
        raise Finding(f"{label}: accepted after {took:.1f} s (over {HANG_S} s)")
    _files_c.check_recording(text)  # recording_text checked it; asked again apart from the reader's own use
    rec = json.loads(text)
    world = rec["meta"]["world_size"]
    if sorted(rec["events"], key=int) != sorted((str(int(os.path.basename(p)[4:])) for p in paths), key=int):
        raise Finding(f"{label}: event lists {sorted(rec['events'])} are not one per dump")
    for rank, events in rec["events"].items():
        r = int(rank)
        if not 0 <= r < world:
            raise Finding(f"{label}: rank {r} outside the world of {world}")
        dump = next(p for p in paths if int(os.path.basename(p)[4:]) == r)
        raw = open(dump, "rb").read()
        source = json.loads(raw) if raw.lstrip()[:1] in (b"{", b"[") else _Plain(io.BytesIO(raw)).load()
        if len(events) != collective_entries(source):
            raise Finding(f"{label}: rank {r} has {len(events)} events for {collective_entries(source)} collectives")
        for ev in events:
            if r not in ev["group"] or any(not 0 <= g < world for g in ev["group"]):
                raise Finding(f"{label}: rank {r}'s event group {ev['group']} does not hold it, or leaves the world")
            for key in ("t_us", "dur_us"):
                if key in ev and not (math.isfinite(ev[key]) and ev[key] >= 0):
                    raise Finding(f"{label}: {key} {ev[key]}")
    again = fr_import.recording_text(fr_import.convert(paths))
    if again != text:
        raise Finding(f"{label}: a second conversion differs")
    return "accepted"


def program(seed: int, workdir: str) -> str:
    rng = random.Random(seed)
    dumps = copy.deepcopy(_SEED_DUMPS[rng.randrange(len(_SEED_DUMPS))])
    log: List[str] = []
    for _ in range(rng.randrange(1, 7)):
        if not dumps:
            break
        mutate(rng, dumps, log)
    folder = os.path.join(workdir, f"p{seed}")
    os.mkdir(folder)
    for name, doc in dumps.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(serialize(rng, doc, any("bomb" in line for line in log)))
    if not dumps:
        return "empty"
    try:
        return check(folder, f"program {seed} ({'; '.join(log)})")
    finally:
        for n in os.listdir(folder):
            os.remove(os.path.join(folder, n))
        os.rmdir(folder)


_SEED_DUMPS: List[Dict[str, Any]] = []


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweep", default=None, help="N:SEED programs")
    p.add_argument("corpus", nargs="?", default=None)
    args = p.parse_args(argv)
    _SEED_DUMPS.extend(load_seed(folder[0]) for folder in SEEDS)
    outcomes: Dict[str, int] = {}
    slowest = 0.0
    findings = []
    for folder in SEEDS:  # 0. every real dump, unmutated, is accepted
        path = os.path.join(ROOT, "tests", "run", "fr_dumps", folder[0])
        files = [os.path.join(path, n) for n in sorted(os.listdir(path)) if n.startswith("rank")]
        try:
            fr_import.recording_text(fr_import.convert(files))
        except fr_import.BadInput as e:
            findings.append(f"seed {folder[0]}: a real dump is refused: {e}")
    if args.corpus:
        for name in sorted(os.listdir(args.corpus)):
            started = time.monotonic()
            try:
                outcome = check(os.path.join(args.corpus, name), f"corpus {name}")
            except Finding as e:
                findings.append(str(e))
                continue
            slowest = max(slowest, time.monotonic() - started)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    if args.sweep:
        n, _, seed = args.sweep.partition(":")
        with tempfile.TemporaryDirectory(prefix="dtsim-fr-fuzz-") as work:
            for s in range(int(seed), int(seed) + int(n)):
                started = time.monotonic()
                try:
                    outcome = program(s, work)
                except Finding as e:
                    findings.append(str(e))
                    continue
                slowest = max(slowest, time.monotonic() - started)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    for f in findings[:20]:
        print(f"finding: {f}", file=sys.stderr)
    print(f"fr_dump fuzzer: {sum(outcomes.values()) + len(findings)} inputs, {outcomes}, {len(findings)} findings, "
          f"slowest {slowest:.3f} s")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
