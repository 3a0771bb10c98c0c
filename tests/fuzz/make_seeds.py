#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed-*) from the texts the tests use and
the golden traces in traces/. Run it again after adding seeds here. It writes only the files it makes and deletes none:
seeds written by hand (model_options, recording, trace/seed-op-*, ...) and regression inputs of findings
(corpus/<target>/regression-*) are kept as they are; a seed that should go (say, of a golden trace removed from traces/)
is deleted by hand. Deterministic: the same files every run."""
import hashlib
import json
import pathlib
import random

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"

PLACEMENTS = [
    "S(0),R", "[S(0), R]", "_S(0,2),S(0)", "P(avg),S(1)", " [ _S(0,2) , S(0), P(avg) ] ", "S(-1)", "S(-3),R", "R",
    "P", "P(sum)", "P(max),R", "P(product)", "P(band),P(bor),P(bxor)", "P(min)", "Shard(0)", "Shard(dim=0)",
    "_StridedShard(0, split_factor=2)", "_StridedShard(dim=1, sf=4)", "StridedShard(0,2)", "Replicate()",
    "Partial(sum)", "Partial(reduce_op='avg')", "S(0),S(1)", "[_S(0,4), S(0)]", "_S(0,1)", "_S(1,100000000000)",
    "S(0", "S(0))", "S(0),,R", "[S(0), R", "[S(]", "S(a)", "_S(0)", "_S(0,0)", "Q(1)", "P(mean),R", "S(0) R",
    "S(99999999999999999999)", "R,_S(0,1000000000000)", "", "[]", "S(+1)", "S(--1)", "P()", "R()", "R(1)",
]
MESH_OPTIONS = [
    "2x4\ndp,tp\n5,10", "8\n\n5", "2,4\n\n[5, 10]", "2x2x2\na,b,c\n(4,4)", "1\nx\n", "2x0\n\n5", "-2\n\n5",
    "2xq\n\n5", "2x4\ndp,dp\n5,10", "2x4\ndp\n5,10", "1048576\n\n1", "1048577\n\n1", "2x4\n dp , tp \n0,0",
    "99999999999999999999\n\n1", "2\n\xff\n4", "4\ntp\n4611686018427387904", "4\ntp\n4611686018427387905,2",
    "1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1"
    "x1x1x1x1x1x1x1x1x1x1\n\n1",
]
LAYOUT_LINES = [
    {"mesh": [2, 4], "names": ["dp", "tp"], "shape": [5, 10], "placements": "S(0),S(1)"},
    {"mesh": "2x4", "names": "dp,tp", "shape": "5,10", "placements": "_S(0,2),S(0)", "dtype": "float64"},
    {"mesh": [2], "shape": [4], "placements": "S(5)"},
    {"mesh": [2], "shape": [], "placements": "P(avg)"},
    {"mesh": [2], "shape": [4], "placements": "S(0)", "x": 1},
    {"shape": [4], "placements": "S(0)"},
    {"mesh": [2], "shape": [1e20], "placements": "S(0)"},
    {"mesh": [2], "shape": [18446744073709551615], "placements": "S(0)"},
    {"mesh": [2.5], "shape": [4], "placements": "S(0)"},
    {"mesh": [2], "shape": [4], "placements": ["S(0)"]},
]
PLAN_LINES = [
    {"mesh": [2, 4], "shape": [5, 10], "from": "S(0),R", "to": "R,S(1)"},
    {"mesh": [2, 2], "shape": [8, 8], "from": "S(0),S(1)", "to": "S(1),S(0)", "planner": "min-cost"},
    {"mesh": [2, 2], "shape": [8, 8], "from": "_S(0,2),S(0)", "to": "R,S(0)", "planner": "graph"},
    {"mesh": [2, 2], "shape": [6], "from": "P(sum),R", "to": "R,S(0)", "dtype": "int32"},
    {"mesh": [2], "shape": [2305843009213693952], "from": "S(0)", "to": "R", "dtype": "float64"},
    {"mesh": [2, 4], "shape": [5, 10], "from": "S(0),R", "to": "R,P(sum)"},
    {"mesh": [2, 4], "shape": [5, 10], "from": "P(sum),P(max)", "to": "R,R"},
    {"mesh": [2, 4], "shape": [5, 10], "from": "S(0),R", "to": "R,R", "planner": "fastest"},
]
REDISTRIBUTE_LINES = [
    {"mesh": [2], "shape": [4], "from": "S(0)", "to": "R"},
    {"mesh": [2, 2], "shape": [5, 3], "from": "S(0),S(1)", "to": "S(1),S(0)", "values": False},
    {"mesh": [2, 2], "shape": [4, 4], "from": "P(avg),R", "to": "S(1),R", "dtype": "float64"},
    {"mesh": [2, 2], "shape": [8], "from": "_S(0,2),S(0)", "to": "R,R", "planner": "min-cost"},
    {"mesh": [3], "shape": [7], "from": "S(0)", "to": "R", "dtype": "bool"},
    {"mesh": [2], "shape": [4], "from": "S(0)", "to": "R", "values": "yes"},
    {"mesh": [2], "shape": [4], "from": "S(0)", "to": "P(sum)"},
    {"mesh": [2, 2], "shape": [4, 4], "from": "S(0),S(1)", "to": "R,R", "trace": "t.json"},
    {"mesh": [2], "shape": [4], "from": "P(bor)", "to": "R", "dtype": "int32"},
]
RAW_LINES = ["not json", "\xff", "[1, 2]", "1e400", '{"mesh": [2], "mesh": [2]}', "[" * 600 + "]" * 600, "{}",
             '{"mesh": [2], "shape": [4], "placements": "S(0)"', "null", '"text"']


SEEDS = {}  # (target, file name) -> bytes, written by main() once all are made


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    SEEDS[(target, f"seed-{name}")] = data


def write_seeds():
    """Writes SEEDS, each file only where its bytes differ; deletes nothing."""
    for (target, name), data in SEEDS.items():
        path = CORPUS / target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)


def raw(text):
    """Text whose \\xNN escapes stand for single bytes (for invalid UTF-8 seeds)."""
    return text.encode("latin-1") if any(ord(c) > 0x7F for c in text) else text.encode()


def main():
    for i, text in enumerate(PLACEMENTS):
        write("placements", f"{i:03d}", text)
    for i, text in enumerate(MESH_OPTIONS):
        write("mesh_options", f"{i:03d}", raw(text))
    for target, lines in (("batch_layout", LAYOUT_LINES), ("batch_plan", PLAN_LINES),
                          ("batch_redistribute", REDISTRIBUTE_LINES)):
        for i, line in enumerate(lines):
            write(target, f"{i:03d}", json.dumps(line))
        for i, line in enumerate(RAW_LINES):
            write(target, f"raw-{i:03d}", raw(line))
        write(target, "multi", "\n".join(json.dumps(line) for line in lines[:3]))
    traces = sorted((ROOT / "traces").glob("*.json"))
    for t in traces:
        text = t.read_text()
        write("trace", t.stem, text)
        write("trace", t.stem + "-truncated", text[: len(text) // 2])
        compact = json.dumps(json.loads(text), separators=(",", ":"))
        write("trace", t.stem + "-compact", compact)
    for a in traces:
        for b in traces:
            if a.stem <= b.stem:
                sa = json.dumps(json.loads(a.read_text()), separators=(",", ":"))
                sb = json.dumps(json.loads(b.read_text()), separators=(",", ":"))
                write("trace_diff", f"{a.stem}--{b.stem}", sa + "\0" + sb)
    # trace_semantic reads programs: byte 0 picks the golden trace, byte 1 the flags (indented or compact text), then
    # each mutation an op byte and its operands (trace_semantic_fuzzer.cc); these name each kind once.
    programs = {
        "golden-0": [0, 0], "golden-1": [1, 1], "golden-2": [2, 0], "golden-3": [3, 1],
        "number": [0, 0, 0, 0, 5, 6], "drop-rank": [1, 0, 3, 0, 2, 0, 1, 0, 0],
        "relabel-mpi": [3, 1, 11, 0, 0, 0, 7, 8], "meta-only": [2, 0, 11, 4],
        "times": [0, 1, 12, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8], "steps": [1, 0, 15, 0, 0, 2],
        "placements": [2, 1, 10, 0, 1, 3], "swap-same-name": [3, 0, 7, 0, 40, 0, 9],
    }
    for name, program in programs.items():
        write("trace_semantic", name, bytes(program))
    # The structured target decodes bytes; random seeds cover every kind of placement and dtype.
    rng = random.Random(10)
    for i in range(48):
        write("redistribute", f"{i:03d}", bytes(rng.randrange(256) for _ in range(24)))
    write_seeds()


if __name__ == "__main__":
    main()
