"""The bad-input table: every subcommand and option given hostile input, as a new user or another tool would.

Each row of BAD_INPUTS runs `dtsim <args>` in a fresh directory (holding only the row's input files) and requires
  * exit code 2,
  * a message `dtsim: error: <field>: ...` naming the field and containing the offending value (or its excerpt),
  * nothing on stdout,
  * no file left behind: the directory listing (temporaries `*.tmp*` included) is exactly the row's input files,
  * bounded peak memory (ru_maxrss of the child, from os.wait4; DTSIM_BAD_INPUT_MAX_RSS_MB, default 1024) and time.
BATCH_ROWS do the same for `--batch` lines: every line is answered (the bad one with {"error", "field", "line"}, never
"internal"), the exit code is 1, and the answers are flushed line by line.

Adding rows for a command or option of another branch (export, layout --svg/--png, --backend, compare,
--inject-fault, --timeout): append Row(...) entries below; rows whose command does not exist in this build are
skipped (see `command_exists`), so they can land before the command does.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field as dc_field

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
MAX_RSS_MB = int(os.environ.get("DTSIM_BAD_INPUT_MAX_RSS_MB", "1024"))
TIMEOUT_S = 120


@dataclass
class Row:
    id: str
    args: list
    field: str                      # the field the message must start with
    says: list                      # substrings the message must contain (the value, the rule)
    files: dict = dc_field(default_factory=dict)  # input files created in the run directory: name -> bytes/str
    stdin: bytes = b""
    code: int = 2


def trace_text(**changes):
    """A valid golden trace with top-level or nested changes applied: changes maps a dotted path to a value."""
    root = os.path.join(os.path.dirname(__file__), "..", "..", "traces", "uneven_2x4_S0R_to_RS1.json")
    with open(root) as f:
        t = json.load(f)
    for path, value in changes.items():
        node = t
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return json.dumps(t)


GOOD_TRACE = trace_text()


def _fr_bomb() -> bytes:
    """A Flight Recorder 'dump' whose one list is referred to from 2^26 places through the pickle's memo."""
    import pickle

    x = [0]
    for _ in range(26):
        x = [x, x]
    return pickle.dumps({"version": "2.10", "entries": [{"record_id": 0, "profiling_name": x}]}, protocol=2)


FR_BOMB = _fr_bomb()
# One all-reduce entry as a Gloo dump writes it (tests/run/fr_dumps/), for the import-fr rows.
FR_ENTRY = {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
            "profiling_name": "gloo:all_reduce", "input_sizes": [[4]], "input_dtypes": ["Float"],
            "time_created_ns": 1000, "state": "scheduled"}


def dtsim_output_text(name, argv, changes):
    """The JSON file a dtsim command writes (argv, with "{out}" standing for its path; run once per `name`, then kept)
    with changes: a dotted path ("events.5.tensor.hashes.1") to a value, or to None to delete the key."""
    if name not in dtsim_output_text.made:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.json")
            subprocess.run([DTSIM] + [path if a == "{out}" else a for a in argv], capture_output=True, check=True,
                           timeout=120)
            with open(path) as f:
                dtsim_output_text.made[name] = f.read()
    t = json.loads(dtsim_output_text.made[name])
    for path, value in changes.items():
        node = t
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = int(keys[-1]) if isinstance(node, list) else keys[-1]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return json.dumps(t)


dtsim_output_text.made = {}


def model_trace_text(**changes):
    """A valid model trace (a 2-rank tp+sp run of a tiny model, made once by dtsim model --trace) with changes."""
    return dtsim_output_text("model", ["model", "--mesh", "2", "--names", "tp", "--dim", "8", "--heads", "2", "--layers",
                                       "1", "--vocab", "10", "--seq", "2", "--batch", "1", "--backward", "--trace",
                                       "{out}"], changes)


def op_trace_text(**changes):
    """A valid op trace (`dtsim op add.Tensor` of an S(0) and an S(1) operand on 2 ranks: one implicit
    redistribution, made once by --trace) with changes."""
    return dtsim_output_text("op", ["op", "add.Tensor", "--mesh", "2", "--arg", "4x4:S(0)", "--arg", "4x4:S(1)",
                                    "--trace", "{out}"], changes)


def recording_text(mutate=None):
    """A valid 4-rank recording (bench/recording_scale_bench.py's: one S(0) -> R all_gather, no shard data), changed
    in place by `mutate(doc)`."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from recording_scale_bench import recording

    doc = recording(4)
    if mutate:
        mutate(doc)
    return json.dumps(doc)


def first_event(kind):
    """The index of the first event of `kind` in the model trace above."""
    return next(i for i, e in enumerate(json.loads(model_trace_text())["events"]) if e["event"] == kind)
M = ["--mesh", "2x4", "--shape", "5,10"]                       # a valid mesh and shape
R = ["redistribute", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R"]  # a valid redistribution
HUGE = "S(0)," * 20000 + "R"

BAD_INPUTS = [
    # ---- dtsim itself ----
    Row("no-command", [], "command", ["missing"]),
    Row("unknown-command", ["layuot"], "command", ["unknown command 'layuot'"]),
    Row("unknown-command-binary", ["\udcff\udcfe"], "command", ["unknown command"]),
    # ---- layout: placements ----
    Row("layout-unknown-kind", ["layout", *M, "--placements", "S(0),Q(1)"], "placements", ["'Q(1)' is not a placement"]),
    Row("layout-shard-dim-out-of-range", ["layout", *M, "--placements", "S(0),S(2)"], "placements",
        ["'S(2)' shards dim 2 but the tensor has 2 dims"]),
    Row("layout-negative-dim-out-of-range", ["layout", *M, "--placements", "S(-3),R"], "placements", ["'S(-3)'"]),
    Row("layout-too-few-placements", ["layout", *M, "--placements", "S(0)"], "placements",
        ["1 placement [S(0)] for mesh[2, 4] of 2 dims"]),
    Row("layout-too-many-placements", ["layout", *M, "--placements", "S(0),R,R"], "placements", ["3 placements"]),
    Row("layout-unmatched-paren", ["layout", *M, "--placements", "S(0,R"], "placements", ["'S(0,R'", "unmatched '('"]),
    Row("layout-extra-paren", ["layout", *M, "--placements", "S(0)),R"], "placements", ["unmatched ')'"]),
    Row("layout-blank-separated", ["layout", *M, "--placements", "S(0) R"], "placements",
        ["'S(0) R'", "unexpected 'R' after 'S(0)'", "commas"]),
    Row("layout-empty-placement", ["layout", *M, "--placements", "S(0),,R"], "placements", ["empty placement"]),
    Row("layout-shard-dim-not-integer", ["layout", *M, "--placements", "S(a),R"], "placements",
        ["shard dim 'a' is not an integer"]),
    Row("layout-shard-dim-too-large", ["layout", *M, "--placements", "S(99999999999999999999),R"], "placements",
        ["'99999999999999999999' is too large"]),
    Row("layout-split-factor-zero", ["layout", *M, "--placements", "_S(0,0),R"], "placements",
        ["split factor 0 must be >= 1"]),
    Row("layout-split-factor-too-large", ["layout", *M, "--placements", "_S(0,99999999999999999999),R"],
        "placements", ["split factor '99999999999999999999' is too large"]),
    Row("layout-too-many-intervals", ["layout", "--mesh", "2", "--shape", "1000000000000", "--placements",
                                      "_S(0,500000000000)"], "placements",
        ["'_S(0,500000000000)'", "500000000000 separate index ranges", "at most 1048576"]),
    Row("layout-unknown-reduce-op", ["layout", *M, "--placements", "P(mean),R"], "placements",
        ["unknown reduce op 'mean'"]),
    Row("layout-replicate-with-arg", ["layout", *M, "--placements", "R(1),R"], "placements",
        ["Replicate takes no argument"]),
    Row("layout-huge-placement-list-capped", ["layout", *M, "--placements", HUGE], "placements",
        ["S(0),S(0)", "characters"]),
    Row("layout-placement-not-utf8", ["layout", *M, "--placements", "S(0),\udcff"], "placements",
        ["is not a placement"]),
    # Invisible characters (a no-break space pasted from a document, a zero-width space) are named and shown
    # escaped; test_invisible_characters_are_never_echoed_raw checks that no raw one reaches the message.
    Row("layout-placement-nbsp", ["layout", *M, "--placements", "S(0)\u00a0,R"], "placements",
        ["'S(0)\\u00a0' is not a placement", "invisible character U+00A0 (no-break space)"]),
    Row("layout-placement-zero-width-space", ["layout", *M, "--placements", "S(0),\u200bR"], "placements",
        ["'\\u200bR'", "invisible character U+200B (zero-width space)"]),
    Row("layout-placement-non-ascii", ["layout", *M, "--placements", "S(\u0660),R"], "placements",
        ["the character '\u0660' (U+0660)", "plain ASCII"]),
    Row("redistribute-from-nbsp", ["redistribute", "--mesh", "2", "--shape", "4", "--from", "S(0)\u00a0", "--to",
                                   "R"], "from", ["'S(0)\\u00a0'", "U+00A0"]),
    # ---- layout: mesh, names, shape, dtype ----
    Row("layout-mesh-zero", ["layout", "--mesh", "2x0", "--shape", "5", "--placements", "S(0),R"], "mesh",
        ["dim 1 has size 0"]),
    Row("layout-mesh-negative", ["layout", "--mesh", "-2", "--shape", "5", "--placements", "S(0)"], "mesh",
        ["dim 0 has size -2"]),
    Row("layout-mesh-not-integer", ["layout", "--mesh", "2xq", "--shape", "5", "--placements", "S(0),R"], "mesh",
        ["'q' is not an integer"]),
    Row("layout-mesh-too-large-integer", ["layout", "--mesh", "99999999999999999999", "--shape", "5",
                                          "--placements", "S(0)"], "mesh", ["'99999999999999999999' is too large"]),
    Row("layout-mesh-too-many-ranks", ["layout", "--mesh", "1024x1025", "--shape", "5", "--placements", "S(0),R"],
        "mesh", ["[1024, 1025]", "more than 1048576 ranks"]),
    Row("layout-mesh-too-many-dims", ["layout", "--mesh", "x".join(["1"] * 65), "--shape", "5", "--placements",
                                      ",".join(["R"] * 65)], "mesh", ["65 dims", "at most 64"]),
    Row("layout-mesh-empty", ["layout", "--mesh", "", "--shape", "5", "--placements", "S(0)"], "mesh",
        ["at least one dim"]),
    Row("layout-mesh-empty-entry", ["layout", "--mesh", "2,,4", "--shape", "5", "--placements", "S(0),R"], "mesh",
        ["'2,,4' has an empty entry"]),
    Row("layout-names-count", ["layout", *M, "--names", "dp", "--placements", "S(0),R"], "names",
        ["1 names given for a mesh of 2 dims"]),
    Row("layout-names-duplicate", ["layout", *M, "--names", "dp,dp", "--placements", "S(0),R"], "names",
        ["duplicate mesh dim name 'dp'"]),
    Row("layout-names-empty-name", ["layout", *M, "--names", "dp,", "--placements", "S(0),R"], "names",
        ["a mesh dim name is empty"]),
    Row("layout-names-not-utf8-json", ["layout", "--mesh", "2", "--names", "\udcff", "--shape", "4",
                                       "--placements", "S(0)", "--json"], "names", ["is not valid UTF-8"]),
    Row("layout-names-control-char", ["layout", "--mesh", "2", "--names", "a\tb", "--shape", "4", "--placements",
                                      "S(0)"], "names", ["control character"]),
    Row("layout-names-nbsp", ["layout", "--mesh", "2", "--names", "tp\u00a0", "--shape", "4", "--placements",
                               "S(0)"], "names", ["mesh dim name 'tp\\u00a0' holds the invisible character U+00A0"]),
    Row("layout-mesh-nbsp", ["layout", "--mesh", "2x4\u00a0", "--shape", "5", "--placements", "S(0),R"], "mesh",
        ["'2x4\\u00a0': '4\\u00a0' is not an integer: it holds the invisible character U+00A0"]),
    Row("layout-shape-nbsp", ["layout", "--mesh", "2", "--shape", "\u00a04", "--placements", "S(0)"], "shape",
        ["'\\u00a04' is not an integer"]),
    Row("layout-shape-negative", ["layout", "--mesh", "2", "--shape", "5,-3", "--placements", "S(0)"], "shape",
        ["dim 1 has size -3"]),
    Row("layout-shape-too-many-elements", ["layout", "--mesh", "2", "--shape", "4611686018427387904,2",
                                           "--placements", "S(0)"], "shape", ["more than 2^62 elements"]),
    Row("layout-shape-too-large-integer", ["layout", "--mesh", "2", "--shape", "9223372036854775808",
                                           "--placements", "S(0)"], "shape", ["'9223372036854775808' is too large"]),
    Row("layout-shape-too-many-dims", ["layout", "--mesh", "2", "--shape", ",".join(["1"] * 65), "--placements",
                                       "R"], "shape", ["65 dims", "at most 64"]),
    Row("layout-shape-bracket", ["layout", "--mesh", "2", "--shape", "[5,10", "--placements", "S(0)"], "shape",
        ["'[' without a closing ']'"]),
    Row("layout-unknown-dtype", ["layout", *M, "--placements", "S(0),R", "--dtype", "float7"], "dtype",
        ["unknown dtype 'float7'"]),
    Row("layout-missing-placements", ["layout", *M], "placements", ["missing: give --placements"]),
    Row("layout-missing-mesh", ["layout", "--shape", "5", "--placements", "S(0)"], "mesh", ["missing"]),
    Row("layout-unknown-option", ["layout", *M, "--placementz", "S(0),R"], "options", ["--placementz"]),
    Row("layout-option-twice", ["layout", *M, "--mesh", "4", "--placements", "S(0),R"], "options",
        ["'--mesh' cannot be specified more than once"]),
    Row("layout-option-without-value", ["layout", *M, "--placements", "S(0),R", "--dtype"], "options",
        ["'--dtype' is missing"]),
    Row("layout-stray-positional", ["layout", *M, "--placements", "S(0),R", "--json", "extra"], "arguments",
        ["unexpected argument 'extra'"]),
    Row("layout-stray-positional-binary", ["layout", *M, "--placements", "S(0),R", "--json", "\udcff"],
        "arguments", ["unexpected argument"]),
    Row("layout-json-with-value", ["layout", *M, "--placements", "S(0),R", "--json=yes"], "options", ["--json"]),
    # ---- layout --batch: the file and the flags ----
    Row("layout-batch-missing-file", ["layout", "--batch", "nope.jsonl"], "batch",
        ["cannot open 'nope.jsonl'", "No such file or directory"]),
    Row("layout-batch-directory", ["layout", "--batch", "."], "batch", ["'.' is a directory"]),
    Row("layout-batch-empty-path", ["layout", "--batch", ""], "batch", ["the path is empty"]),
    Row("layout-batch-with-mesh", ["layout", "--batch", "-", "--mesh", "2"], "batch",
        ["--mesh cannot be given with --batch"]),
    Row("layout-batch-with-json", ["layout", "--batch", "-", "--json"], "batch", ["--json cannot be given with --batch"]),
    # ---- plan ----
    Row("plan-unknown-planner", ["plan", *M, "--from", "S(0),R", "--to", "R,R", "--planner", "fastest"], "planner",
        ["unknown planner 'fastest'"]),
    Row("plan-to-partial", ["plan", *M, "--from", "S(0),R", "--to", "R,P(sum)"], "to",
        ["cannot redistribute R to P(sum)"]),
    Row("plan-partial-op-change", ["plan", *M, "--from", "P(sum),R", "--to", "P(max),R"], "to",
        ["cannot redistribute P(sum) to P(max)"]),
    Row("plan-mixed-partials", ["plan", *M, "--from", "P(sum),P(max)", "--to", "R,R"], "from",
        ["mixes Partial reduce ops {max, sum}"]),
    Row("plan-to-count", ["plan", *M, "--from", "S(0),R", "--to", "R"], "to", ["has 1 placement for mesh[2, 4]"]),
    Row("plan-from-count", ["plan", *M, "--from", "S(0)", "--to", "R,R"], "from", ["has 1 placement for mesh[2, 4]"]),
    Row("plan-from-dim", ["plan", *M, "--from", "S(3),R", "--to", "R,R"], "from", ["'S(3)' shards dim 3"]),
    Row("plan-to-dim", ["plan", *M, "--from", "S(0),R", "--to", "R,S(2)"], "to", ["'S(2)' shards dim 2"]),
    Row("plan-missing-to", ["plan", *M, "--from", "S(0),R"], "to", ["missing"]),
    Row("plan-byte-overflow", ["plan", "--mesh", "2", "--shape", "2305843009213693952", "--from", "S(0)", "--to",
                               "R", "--dtype", "float64"], "shape",
        ["[2305843009213693952] float64", "more than 2^63 - 1 bytes"]),
    Row("plan-search-bounded-min-cost", ["plan", "--mesh", "x".join(["2"] * 8), "--shape", "64,64", "--from",
                                         "S(0),S(1),R,S(0),S(1),R,S(0),S(1)", "--to",
                                         "R,S(0),S(1),R,S(0),S(1),R,S(0)", "--planner", "min-cost"], "planner",
        ["min-cost planner's search", "8 mesh dims, 256 ranks", "--planner greedy"]),
    Row("plan-search-bounded-graph", ["plan", "--mesh", "x".join(["2"] * 8), "--shape", "64,64", "--from",
                                      "S(0),S(1),R,S(0),S(1),R,S(0),S(1)", "--to",
                                      "R,S(0),S(1),R,S(0),S(1),R,S(0)", "--planner", "graph"], "planner",
        ["graph planner's search", "8 mesh dims"]),
    Row("plan-stray-positional", ["plan", *M, "--from", "S(0),R", "--to", "R,R", "R"], "arguments",
        ["unexpected argument 'R'"]),
    Row("plan-batch-with-planner", ["plan", "--batch", "-", "--planner", "min-cost"], "batch",
        ["--planner cannot be given with --batch"]),
    # ---- op ----
    Row("op-missing", ["op", "--mesh", "2"], "op", ["missing"]),
    Row("op-unknown", ["op", "nope", "--mesh", "2", "--arg", "4:S(0)"], "op", ["'nope' is no ATen operator"]),
    Row("op-no-mesh", ["op", "mm", "--arg", "4x4:R", "--arg", "4x4:R"], "mesh", ["missing"]),
    Row("op-bad-placement", ["op", "mm", "--mesh", "2", "--arg", "4x4:S(5)", "--arg", "4x4:R"], "args[0]",
        ["tensor argument 'self'", "'S(5)' shards dim 5"]),
    Row("op-placements-for-other-mesh", ["op", "mm", "--mesh", "2", "--arg", "4x4:S(0),R", "--arg", "4x4:R"],
        "args[0]", ["2 placements"]),
    Row("op-arg-not-json", ["op", "mm", "--mesh", "2", "--arg", "notjson", "--arg", "4x4:R"], "arg", ["'notjson'"]),
    Row("op-missing-argument", ["op", "mm", "--mesh", "2", "--arg", "4x4:R"], "args", ["'mat2'", "is required"]),
    Row("op-too-many-arguments", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--arg", "1"],
        "args", ["3 arguments"]),
    # Outputs no machine holds (4 TB, replicated on 2 ranks): refused before the run makes them.
    Row("op-outputs-too-big", ["op", "new_zeros", "--mesh", "2", "--arg", "4:S(0)", "--arg", "[1000000000000]"],
        "op", ["aten.new_zeros: its outputs ([1000000000000] float32) on 2 simulated ranks need about",
               "MiB are available"]),
    Row("op-number-for-tensor", ["op", "mm", "--mesh", "2", "--arg", "3", "--arg", "4x4:R"], "args[0]",
        ["argument 'self' is a tensor"]),
    Row("op-float-for-int", ["op", "transpose.int", "--mesh", "2", "--arg", "4x4:R", "--arg", "0.5", "--arg", "1"],
        "args[1]", ["'dim0' must be an int"]),
    Row("op-no-strategy", ["op", "renorm", "--mesh", "2", "--arg", "4x4:S(0)", "--arg", "2", "--arg", "0",
                           "--arg", "1.0"], "op", ["aten.renorm does not have a sharding strategy"]),
    Row("op-shapes-do-not-multiply", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "5x4:R"], "op",
        ["cannot be multiplied"]),
    Row("op-too-big", ["op", "mm", "--mesh", "2", "--arg", "100000x100000:R", "--arg", "100000x4:R"], "shape",
        ["MiB"]),
    Row("op-too-many-ranks", ["op", "mm", "--mesh", "1048577", "--arg", "4x4:R", "--arg", "4x4:R"], "mesh",
        ["more than 1048576 ranks"]),
    Row("op-trace-empty", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--trace", ""], "trace",
        ["empty"]),
    Row("op-trace-dir-missing", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--trace",
                                 "/nonexistent-dir/t.json"], "trace", ["/nonexistent-dir/t.json"]),
    Row("op-unknown-backend", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--backend", "tcp"],
        "backend", ["unknown backend 'tcp'"]),
    Row("op-fault-on-simulation", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--inject-fault",
                                   "wrong-op:1"], "inject-fault", ["needs a real backend"]),
    Row("op-timeout-zero", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--backend", "mpi",
                            "--timeout", "0"], "timeout", ["from 0.001 to 86400", "got 0"]),
    Row("op-meta-with-values", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--meta", "--values"],
        "values", ["--values needs data"]),
    Row("op-bad-dtype", ["op", "mm", "--mesh", "2", "--dtype", "foo", "--arg", "4x4:R", "--arg", "4x4:R"], "dtype",
        ["'foo'"]),
    Row("op-batch-with-op", ["op", "mm", "--batch", "-"], "batch", []),
    # ---- model ----
    Row("model-unknown-plan", ["model", "--plan", "pp"], "plan", ["'pp' is not one of"]),
    Row("model-negative-dim", ["model", "--dim", "-3"], "dim", ["at least 1", "-3"]),
    Row("model-dim-not-a-number", ["model", "--dim", "x"], "options", ["'x'", "--dim"]),
    Row("model-heads-do-not-divide-dim", ["model", "--dim", "10", "--heads", "3"], "heads", ["3 heads"]),
    Row("model-heads-split-mid-head", ["model", "--mesh", "8", "--dim", "256", "--heads", "4"], "heads",
        ["not whole heads"]),
    Row("model-no-tp-dim", ["model", "--mesh", "2", "--names", "dp"], "names", ["'tp'"]),
    Row("model-no-dp-dim", ["model", "--mesh", "2", "--names", "tp", "--plan", "fsdp"], "names", ["'dp'"]),
    Row("model-unused-dp-dim", ["model", "--mesh", "2x2", "--names", "dp,tp"], "mesh", ["dp of size 2"]),
    Row("model-seq-over-tp", ["model", "--mesh", "4", "--seq", "6"], "seq", ["seq 6", "tp 4"]),
    Row("model-batch-over-dp", ["model", "--mesh", "2x2", "--names", "dp,tp", "--plan", "fsdp+tp", "--batch", "3"],
        "batch", ["batch 3", "2 dp ranks"]),
    Row("model-data-too-big", ["model", "--mesh", "8", "--dim", "8192", "--heads", "64", "--vocab", "128256",
                               "--seq", "8192", "--batch", "8"], "model", ["8 GiB", "--meta"]),
    Row("model-tensor-too-big", ["model", "--dim", "1000000000000", "--heads", "1", "--meta"], "model",
        ["2^50 elements"]),
    Row("model-too-many-ranks", ["model", "--mesh", "32768", "--meta"], "mesh", ["at most 16384"]),
    # --layers 10^14 ran for ever (a metadata run grows faster than linearly in layers).
    Row("model-too-many-layers", ["model", "--layers", "99999999999999", "--meta"], "layers",
        ["99999999999999 transformer blocks", "at most 256"]),
    Row("model-layers-just-over", ["model", "--layers", "257", "--meta"], "layers", ["257", "at most 256"]),
    Row("model-zero-seq", ["model", "--seq", "0"], "seq", ["at least 1", "got 0"]),
    Row("model-negative-ffn", ["model", "--ffn", "-1"], "ffn", ["got -1"]),
    Row("model-loss-parallel-empty-vocab-shard", ["model", "--mesh", "8", "--dim", "16", "--heads", "8", "--vocab", "5",
                                                  "--plan", "tp", "--loss-parallel"], "loss-parallel",
        ["vocab 5 over tp 8", "tp rank 5"]),
    Row("model-trace-no-name", ["model", "--trace", ""], "trace", ["give a file name"]),
    Row("model-trace-into-a-folder", ["model", "--trace", "."], "trace", ["'.'"]),
    Row("model-loss-parallel-without-tp", ["model", "--mesh", "2", "--names", "dp", "--plan", "fsdp",
                                           "--loss-parallel"], "loss-parallel", ["no tensor parallelism"]),
    # ---- redistribute ----
    Row("redistribute-to-partial", [*R[:-1], "P(sum)"], "to", ["cannot redistribute S(0) to P(sum)"]),
    Row("redistribute-too-many-ranks", ["redistribute", "--mesh", "1048577", "--shape", "4", "--from", "S(0)",
                                        "--to", "R", "--meta"], "mesh", ["[1048577]", "more than 1048576 ranks"]),
    Row("redistribute-data-too-big-for-world", ["redistribute", "--mesh", "1024x1024", "--shape", "1000,1000",
                                                "--from", "S(0),R", "--to", "R,R"], "shape",
        ["[1000, 1000] float32", "1048576 simulated ranks needs about", "--meta"]),
    Row("redistribute-meta-with-values", [*R, "--meta", "--values"], "values", ["--values needs data"]),
    Row("redistribute-ranks-not-in-mesh", [*R, "--ranks", "1,99"], "ranks", ["rank 99 is not in mesh[2]"]),
    Row("redistribute-ranks-garbage", [*R, "--ranks", "1-"], "ranks", ["1-"]),
    Row("redistribute-too-much-memory", ["redistribute", "--mesh", "8", "--shape", "1000000000000", "--from", "S(0)",
                                         "--to", "R"], "shape", ["[1000000000000] float32", "MiB", "available"]),
    Row("redistribute-too-many-blocks", ["redistribute", "--mesh", "2", "--shape", "2000000", "--from", "R", "--to",
                                         "_S(0,1000000)"], "to", ["'[_S(0,1000000)]'", "1e+06 separate blocks",
                                                                  "at most 65536"]),
    Row("redistribute-too-many-blocks-2d", ["redistribute", "--mesh", "2x2", "--shape", "1000,1000", "--from",
                                            "_S(0,1000),_S(1,1000)", "--to", "R,R"], "from", ["1e+06 separate blocks"]),
    Row("redistribute-trace-empty-path", [*R, "--trace", ""], "trace", ["the output path is empty"]),
    Row("redistribute-trace-directory", [*R, "--trace", "."], "trace", ["'.' is a directory"]),
    Row("redistribute-trace-missing-dir", [*R, "--trace", "missing/t.json"], "trace",
        ["cannot write 'missing/t.json'", "No such file or directory"]),
    Row("redistribute-trace-under-a-file", [*R, "--trace", "f.txt/t.json"], "trace",
        ["cannot write 'f.txt/t.json'", "not a directory"], files={"f.txt": "x"}),
    Row("redistribute-trace-with-bad-input", [*R[:-1], "P(sum)", "--trace", "t.json"], "to", ["P(sum)"]),
    Row("redistribute-stray-positional-trace", [*R, "--trace", "t.json", "\udcff"], "arguments",
        ["unexpected argument"]),
    Row("redistribute-names-not-utf8-trace", ["redistribute", "--mesh", "2", "--names", "\udcff", "--shape", "4",
                                              "--from", "S(0)", "--to", "R", "--trace", "t.json"], "names",
        ["is not valid UTF-8"]),
    Row("redistribute-batch-with-trace", ["redistribute", "--batch", "-", "--trace", "t.json"], "batch",
        ["--trace cannot be given with --batch"]),
    Row("redistribute-unknown-dtype", [*R, "--dtype", "complex64"], "dtype", ["unknown dtype 'complex64'"]),
    # ---- distribute ----
    Row("distribute-step-no-colon", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6", "--step",
                                     "tpS(0)"], "step", ["'tpS(0)' is not <dims>:<placements>"]),
    Row("distribute-step-count", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6", "--step",
                                  "tp:S(0),R"], "step", ["2 placements for 1 mesh dim"]),
    Row("distribute-step-unknown-dim", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6",
                                        "--step", "pp:S(0)"], "step", ["'pp:S(0)'", "has no dim 'pp'"]),
    Row("distribute-step-huge-dim-index", ["distribute", "--mesh", "2x4", "--shape", "8,6", "--step",
                                           "99999999999999999999:S(0)"], "step", ["has no dim '99999999999999999999'"]),
    Row("distribute-step-dim-twice", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6", "--step",
                                      "tp:S(0)", "--step", "tp:S(1)"], "step", ["'tp:S(1)'", "already used"]),
    # A step's placements are checked against the tensor under the option the user typed (was "placements:").
    Row("distribute-step-shard-dim-out-of-range", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "4,4",
                                                   "--step", "tp:S(5)"], "step",
        ["'tp:S(5)': 'S(5)' shards dim 5 but the tensor has 2 dims"]),
    Row("distribute-second-step-out-of-range", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "4,4",
                                                "--step", "tp:S(0)", "--step", "dp:S(-3)"], "step",
        ["'dp:S(-3)'", "'S(-3)' shards dim -3"]),
    Row("distribute-step-bitwise-on-float", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "4,4",
                                             "--step", "tp:P(bor)"], "step", ["'tp:P(bor)'", "bitwise op"]),
    Row("distribute-step-nbsp", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "4,4", "--step",
                                 "tp:S(0)\u00a0"], "step", ["'S(0)\\u00a0'", "U+00A0"]),
    Row("distribute-missing-step", ["distribute", "--mesh", "2x4", "--shape", "8,6"], "step", ["missing"]),
    Row("distribute-stray-positional", ["distribute", "--mesh", "2", "--shape", "4", "--step", "0:S(0)", "x"],
        "arguments", ["unexpected argument 'x'"]),
    # ---- replay (recordings of upstream runs, dtsim.record) ----
    Row("replay-no-file", ["replay"], "file", ["give one recording, got 0"]),
    # What cannot be true of a recording is invalid (exit 2), not a run that differs (exit 1).
    Row("replay-time-of-a-rank-outside-the-mesh", ["replay", "r.json"], "recording",
        ["redistributions[0].time_us", "has a time for '99', which is no rank of the redistribution's mesh"],
        files={"r.json": recording_text(lambda d: d["redistributions"][0]["time_us"].update({"99": 1.0}))}),
    Row("replay-world-of-a-million-on-a-4-rank-mesh", ["replay", "r.json"], "recording",
        ["redistributions[0].src.mesh", "holds 4 ranks, but meta.world_size is 1000000"],
        files={"r.json": recording_text(lambda d: d["meta"].update(world_size=1000000))}),
    Row("replay-recording-group-lists-a-rank-twice", ["replay", "r.json"], "recording",
        ["redistributions[0].collectives[0].groups", "rank 0 is listed twice; a rank is in one group, once"],
        files={"r.json": recording_text(lambda d: d["redistributions"][0]["collectives"][0].update(
            groups=[[0, 0, 1, 2]]))}),
    Row("replay-recording-local-shape-not-the-specs", ["replay", "r.json"], "recording",
        ["redistributions[0].ranks_before[1].local_shape",
         "[2], but mesh[4] [S(0)] shape=[4] float32 gives rank 1 the local shape [1]"],
        files={"r.json": recording_text(lambda d: d["redistributions"][0]["ranks_before"][1].update(
            local_shape=[2]))}),
    # A recording's events (dtsim record, dtsim run --trace): validated in trace-diff as in replay.
    Row("trace-diff-events-of-a-rank-outside-the-world", ["trace-diff", "r.json", "r.json"], "recording",
        ["events", "has events for '99', which is no rank of a world of 4"],
        files={"r.json": recording_text(lambda d: d.update(events={"99": []}))}),
    Row("trace-diff-event-group-without-its-rank", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.1[0].group", "does not hold rank 1, whose event it is"],
        files={"r.json": recording_text(lambda d: d.update(events={"1": [
            {"kind": "collective", "op": "all_gather", "group": [0, 2], "module": "Global", "pass": "forward",
             "inputs": [], "outputs": []}]}))}),
    Row("trace-diff-event-bad-hash", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].outputs[0].hash", "expected \"xxh3:\" and 16 hex digits"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "op", "op": "aten.mm.default", "module": "Global", "pass": "forward", "args": ["[R]"],
             "results": ["[R]"], "inputs": [], "outputs": [{"shape": [2], "dtype": "float32", "hash": "md5:1"}]}]}))}),
    Row("trace-diff-event-sketch-beyond-its-scale", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].inputs[0].sketch", "exceeds its scale"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "op", "op": "aten.mm.default", "module": "Global", "pass": "backward", "args": ["[R]"],
             "results": ["[R]"], "inputs": [{"shape": [2], "dtype": "float32", "hash": None, "sketch": 5.0,
                                             "scale": 1.0}]}]}))}),
    # Op events' device meshes ("meshes", each event's "mesh" an index): checked by the one-file check too.
    Row("trace-diff-event-mesh-of-no-mesh", ["trace-diff", "r.json"], "recording",
        ["events.0[0].mesh", "3 is no mesh of the recording's \"meshes\" (1 of them)"],
        files={"r.json": recording_text(lambda d: d.update(meshes=[[0, 1, 2, 3]], events={"0": [
            {"kind": "op", "op": "aten.mm.default", "module": "Global", "pass": "forward", "mesh": 3,
             "args": ["[R]"], "results": ["[R]"], "inputs": [], "outputs": []}]}))}),
    Row("trace-diff-event-mesh-without-its-rank", ["trace-diff", "r.json"], "recording",
        ["events.2[0].mesh", "mesh 0 [0, 1] does not hold rank 2, whose op it is"],
        files={"r.json": recording_text(lambda d: d.update(meshes=[[0, 1]], events={"2": [
            {"kind": "op", "op": "aten.mm.default", "module": "Global", "pass": "forward", "mesh": 0,
             "args": ["[R]"], "results": ["[R]"], "inputs": [], "outputs": []}]}))}),
    Row("trace-diff-event-mesh-of-other-dims", ["trace-diff", "r.json"], "recording",
        ["events.0[0].mesh", "mesh 0 has 2 dims, but the op's placements [R] have 1"],
        files={"r.json": recording_text(lambda d: d.update(meshes=[[[0, 1], [2, 3]]], events={"0": [
            {"kind": "op", "op": "aten.mm.default", "module": "Global", "pass": "forward", "mesh": 0,
             "args": ["[R]"], "results": ["[R]"], "inputs": [], "outputs": []}]}))}),
    Row("trace-diff-event-mesh-on-a-collective", ["trace-diff", "r.json"], "recording",
        ["events.0[0].mesh", "only an op has a device mesh"],
        files={"r.json": recording_text(lambda d: d.update(meshes=[[0, 1]], events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward", "mesh": 0,
             "inputs": [], "outputs": None}]}))}),
    Row("trace-diff-meshes-ragged", ["trace-diff", "r.json"], "recording",
        ["meshes[0][1]", "has 1 entries where its siblings have 2"],
        files={"r.json": recording_text(lambda d: d.update(meshes=[[[0, 1], [2]]]))}),
    Row("trace-diff-meshes-rank-outside-the-world", ["trace-diff", "r.json"], "recording",
        ["meshes[0][1]", "9"], files={"r.json": recording_text(lambda d: d.update(meshes=[[0, 9]]))}),
    Row("trace-diff-meshes-rank-twice", ["trace-diff", "r.json"], "recording",
        ["meshes[0]", "1"], files={"r.json": recording_text(lambda d: d.update(meshes=[[1, 1]]))}),
    Row("trace-diff-event-unknown-kind", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].kind", "unknown event kind 'memory'"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [{"kind": "memory"}]}))}),
    Row("replay-bytes-that-cannot-hold-the-shape", ["replay", "r.json"], "recording",
        ["redistributions[0].collectives[0].input_bytes[0]", "9223372036854775807 bytes cannot hold [1]"],
        files={"r.json": recording_text(
            lambda d: d["redistributions"][0]["collectives"][0].update(input_bytes=[2**63 - 1] * 4))}),
    Row("replay-recording-is-its-own-data-file", ["replay", "r.json"], "recording",
        ["meta.data_file: 'r.json' is the recording itself, not its data file"],
        files={"r.json": recording_text(lambda d: d["meta"].update(data_file="r.json"))}),
    Row("replay-two-files", ["replay", "a.json", "b.json"], "file", ["give one recording, got 2"]),
    Row("replay-missing-file", ["replay", "nope.json"], "recording", ["cannot open 'nope.json'"]),
    Row("replay-directory", ["replay", "."], "recording", ["'.' is a directory"]),
    Row("replay-dev-zero", ["replay", "/dev/zero"], "recording", ["'/dev/zero' is a character device"]),
    Row("replay-empty", ["replay", "e.json"], "recording", ["'e.json' is empty"], files={"e.json": ""}),
    Row("replay-broken-json", ["replay", "b.json"], "recording", ["'b.json'"], files={"b.json": "{\"format\": "}),
    Row("replay-a-trace", ["replay", "a.json"], "recording", ["format", "expected \"dtsim-recording\""],
        files={"a.json": GOOD_TRACE}),
    Row("replay-limit-zero", ["replay", "a.json", "--limit", "0"], "limit", ["0 is out of range"],
        files={"a.json": GOOD_TRACE}),
    # ---- trace-diff ----
    Row("trace-diff-model-vs-redistribution", ["trace-diff", "m.json", "a.json"], "trace",
        ["'a.json'", "format is \"dtsim-trace\", expected \"dtsim-model-trace\""],
        files={"m.json": model_trace_text(), "a.json": GOOD_TRACE}),
    Row("trace-diff-model-bad-hash", ["trace-diff", "m.json", "h.json"], "trace",
        ["'h.json'", f"events[{first_event('module_end')}].tensor.hashes[1]", "\"xxh3:12\""],
        files={"m.json": model_trace_text(),
               "h.json": model_trace_text(**{f"events.{first_event('module_end')}.tensor.hashes.1": "xxh3:12"})}),
    Row("trace-diff-model-hashes-for-3-ranks", ["trace-diff", "m.json", "h.json"], "trace",
        ["tensor.hashes", "has 3 entries for 2 ranks"],
        files={"m.json": model_trace_text(),
               "h.json": model_trace_text(**{f"events.{first_event('loss')}.tensor.hashes":
                                             ["xxh3:0000000000000000"] * 3})}),
    Row("trace-diff-model-module-never-ends", ["trace-diff", "m.json", "e.json"], "trace",
        ["is the innermost open module"],
        files={"m.json": model_trace_text(),
               "e.json": model_trace_text(**{f"events.{first_event('module_end')}.module": "nowhere"})}),
    Row("trace-diff-model-group-outside", ["trace-diff", "m.json", "g.json"], "trace",
        ["collectives[0].groups", "9"],
        files={"m.json": model_trace_text(),
               "g.json": model_trace_text(**{f"events.{first_event('collective')}.collectives.0.groups":
                                             [[0, 9]]})}),
    # What cannot be true of a model trace is invalid (exit 2, the field named), not judged a difference (exit 1).
    Row("trace-diff-model-shard-dim-out-of-range", ["trace-diff", "m.json", "p.json"], "trace",
        ["tensor.placements", "'[S(9)]' on a 2-d tensor", "dim 9"],
        files={"m.json": model_trace_text(),
               "p.json": model_trace_text(**{f"events.{first_event('parameter')}.tensor.placements": "[S(9)]"})}),
    Row("trace-diff-model-placements-for-another-mesh", ["trace-diff", "m.json", "p.json"], "trace",
        ["tensor.placements", "has 2 placements for a mesh of 1 dims"],
        files={"m.json": model_trace_text(),
               "p.json": model_trace_text(**{f"events.{first_event('parameter')}.tensor.placements": "[S(0), R]"})}),
    Row("trace-diff-model-op-placements-without-arrow", ["trace-diff", "m.json", "o.json"], "trace",
        [f"events[{first_event('op')}].placements", "'[S(0)], [R]' is not \"ARGUMENTS -> RESULTS\""],
        files={"m.json": model_trace_text(),
               "o.json": model_trace_text(**{f"events.{first_event('op')}.placements": "[S(0)], [R]"})}),
    Row("trace-diff-model-op-placements-unbracketed", ["trace-diff", "m.json", "o.json"], "trace",
        [f"events[{first_event('op')}].placements", "is not a list of bracketed placements"],
        files={"m.json": model_trace_text(),
               "o.json": model_trace_text(**{f"events.{first_event('op')}.placements": "S(0) -> [R]"})}),
    Row("trace-diff-model-collective-on-unknown-dim", ["trace-diff", "m.json", "d.json"], "trace",
        ["collectives[0].mesh_dim", "'pp' is no dim of the mesh (dims: tp)"],
        files={"m.json": model_trace_text(),
               "d.json": model_trace_text(**{f"events.{first_event('collective')}.collectives.0.mesh_dim": "pp"})}),
    Row("trace-diff-model-group-not-the-dims", ["trace-diff", "m.json", "g.json"], "trace",
        ["collectives[0].groups[0]", "has 1 ranks; mesh dim 'tp' has 2"],
        files={"m.json": model_trace_text(),
               "g.json": model_trace_text(**{f"events.{first_event('collective')}.collectives.0.groups":
                                             [[0], [1]]})}),
    Row("trace-diff-model-duplicate-mesh-names", ["trace-diff", "m.json", "n.json"], "trace",
        ["mesh.names[1]", "'tp' names two mesh dims"],
        files={"m.json": model_trace_text(),
               "n.json": model_trace_text(**{"mesh.shape": [1, 2], "mesh.names": ["tp", "tp"]})}),
    Row("trace-diff-model-negative-dim", ["trace-diff", "m.json", "w.json"], "trace",
        ["model.dim", "-1 is not a whole number of at least 1"],
        files={"m.json": model_trace_text(), "w.json": model_trace_text(**{"model.dim": -1})}),
    Row("trace-diff-op-redistribution-on-another-world", ["trace-diff", "o.json", "w.json"], "trace",
        ["redistributions[0].trace.meta.world_size", "2 ranks, but the op ran on 4"],
        files={"o.json": op_trace_text(), "w.json": op_trace_text(**{"meta.world_size": 4})}),
    Row("trace-diff-op-arg-the-op-lacks", ["trace-diff", "o.json", "w.json"], "trace",
        ["redistributions[0]", "arg 99, but aten::add.Tensor has 2 tensor arguments (self, other)"],
        files={"o.json": op_trace_text(), "w.json": op_trace_text(**{"redistributions.0.arg": 99})}),
    Row("trace-diff-op-not-an-aten-op", ["trace-diff", "o.json", "w.json"], "trace",
        ["redistributions[0]", "op 'aten::no_such_op' is not an op of this LibTorch"],
        files={"o.json": op_trace_text(), "w.json": op_trace_text(**{"redistributions.0.op": "aten::no_such_op"})}),
    Row("trace-diff-model-version", ["trace-diff", "m.json", "v.json"], "trace", ["version 7 is not supported"],
        files={"m.json": model_trace_text(), "v.json": model_trace_text(version=7)}),
    Row("trace-diff-one-file", ["trace-diff", "a.json"], "file",
        ["give two trace files, got 1: 'a.json' is one redistribution", "checked only when it is a recording"],
        files={"a.json": GOOD_TRACE}),
    Row("trace-diff-three-files", ["trace-diff", "a.json", "a.json", "a.json"], "file",
        ["give two trace files (or one recording), got 3"], files={"a.json": GOOD_TRACE}),
    Row("trace-diff-missing-file", ["trace-diff", "a.json", "nope.json"], "trace",
        ["cannot open 'nope.json'", "No such file or directory"], files={"a.json": GOOD_TRACE}),
    Row("trace-diff-directories", ["trace-diff", ".", "."], "trace", ["'.' is a directory"]),
    Row("trace-diff-empty-file", ["trace-diff", "a.json", "e.json"], "trace", ["'e.json' is empty"],
        files={"a.json": GOOD_TRACE, "e.json": ""}),
    Row("trace-diff-truncated", ["trace-diff", "a.json", "t.json"], "trace", ["'t.json' is not valid JSON"],
        files={"a.json": GOOD_TRACE, "t.json": GOOD_TRACE[: len(GOOD_TRACE) // 2]}),
    Row("trace-diff-binary", ["trace-diff", "a.json", "b.bin"], "trace", ["'b.bin' is not valid JSON"],
        files={"a.json": GOOD_TRACE, "b.bin": bytes(range(256)) * 4}),
    Row("trace-diff-not-utf8", ["trace-diff", "a.json", "b.json"], "trace", ["'b.json' is not valid JSON"],
        files={"a.json": GOOD_TRACE, "b.json": b'{"format": "dtsim-trace", "x": "\xff"}'}),
    Row("trace-diff-wrong-version", ["trace-diff", "a.json", "v.json"], "trace", ["version 99 is not supported"],
        files={"a.json": GOOD_TRACE, "v.json": trace_text(version=99)}),
    Row("trace-diff-wrong-format", ["trace-diff", "a.json", "f.json"], "trace", ["format is \"other\""],
        files={"a.json": GOOD_TRACE, "f.json": trace_text(format="other")}),
    Row("trace-diff-not-an-object", ["trace-diff", "a.json", "l.json"], "trace", ["holds no JSON object"],
        files={"a.json": GOOD_TRACE, "l.json": "[1, 2, 3]"}),
    Row("trace-diff-rank-is-string", ["trace-diff", "a.json", "r.json"], "trace",
        ["initial.ranks[0].rank", "expected an integer", "\"0\""],
        files={"a.json": GOOD_TRACE, "r.json": trace_text(**{"initial.ranks.0.rank": "0"})}),
    Row("trace-diff-hash-number", ["trace-diff", "a.json", "h.json"], "trace", ["final.ranks[1].hash", "got 5"],
        files={"a.json": GOOD_TRACE, "h.json": trace_text(**{"final.ranks.1.hash": 5})}),
    Row("trace-diff-negative-shape", ["trace-diff", "a.json", "s.json"], "trace", ["initial.spec.shape[0]", "-5"],
        files={"a.json": GOOD_TRACE, "s.json": trace_text(**{"initial.spec.shape": [-5, 10]})}),
    Row("trace-diff-huge-shape", ["trace-diff", "a.json", "s.json"], "trace", ["initial.spec.shape[0]", "1e+20"],
        files={"a.json": GOOD_TRACE, "s.json": trace_text(**{"initial.spec.shape": [1e20, 10]})}),
    Row("trace-diff-unknown-dtype", ["trace-diff", "a.json", "d.json"], "trace", ["initial.spec.dtype",
                                                                                  "unknown dtype 'float7'"],
        files={"a.json": GOOD_TRACE, "d.json": trace_text(**{"initial.spec.dtype": "float7"})}),
    Row("trace-diff-bad-placements", ["trace-diff", "a.json", "p.json"], "trace",
        ["steps[0].placements_after", "'Q' is not a placement"],
        files={"a.json": GOOD_TRACE, "p.json": trace_text(**{"steps.0.placements_after": "[Q, R]"})}),
    Row("trace-diff-deep-nesting", ["trace-diff", "a.json", "n.json"], "trace", ["nests JSON deeper than 512"],
        files={"a.json": GOOD_TRACE, "n.json": "[" * 100000 + "]" * 100000}),
    Row("trace-diff-huge-number", ["trace-diff", "a.json", "n.json"], "trace", ["number out of range", "1e400"],
        files={"a.json": GOOD_TRACE, "n.json": '{"format": "dtsim-trace", "version": 1e400}'}),
    Row("trace-diff-duplicate-key", ["trace-diff", "a.json", "k.json"], "trace", ["the key 'version' twice"],
        files={"a.json": GOOD_TRACE, "k.json": '{"format": "dtsim-trace", "version": 1, "version": 1}'}),
    # impossible traces (issue 19): valid JSON whose numbers lie
    Row("trace-diff-nul-then-junk", ["trace-diff", "a.json", "j.json"], "trace", ["'j.json' is not valid JSON",
        "a NUL byte at offset"], files={"a.json": GOOD_TRACE, "j.json": GOOD_TRACE + "\0junk"}),
    Row("trace-diff-group-not-along-the-dim", ["trace-diff", "a.json", "g.json"], "trace",
        ["steps[1].collectives[0].groups[0]", "[0, 1] is not a group along mesh dim 0", "[0, 4]"],
        files={"a.json": GOOD_TRACE, "g.json": trace_text(**{"steps.1.collectives.0.groups":
                                                           [[0, 1], [4, 5], [2, 3], [6, 7]]})}),
    Row("trace-diff-group-twice", ["trace-diff", "a.json", "g.json"], "trace",
        ["steps[1].collectives[0].groups[1]", "the same group twice"],
        files={"a.json": GOOD_TRACE, "g.json": trace_text(**{"steps.1.collectives.0.groups":
                                                           [[0, 4], [0, 4], [2, 6], [3, 7]]})}),
    Row("trace-diff-rank-in-no-group", ["trace-diff", "a.json", "g.json"], "trace",
        ["steps[1].collectives[0].ranks", "rank 3 is in no group"],
        files={"a.json": GOOD_TRACE, "g.json": trace_text(**{"steps.1.collectives.0.groups":
                                                           [[0, 4], [1, 5], [2, 6]]})}),
    Row("trace-diff-time-too-large", ["trace-diff", "a.json", "t.json"], "trace",
        ["steps[1].collectives[0].time_us[0]", "is larger than"],
        files={"a.json": GOOD_TRACE, "t.json": trace_text(**{"steps.1.collectives.0.time_us": [1e300] * 8})}),
    Row("trace-diff-layout-not-the-specs", ["trace-diff", "a.json", "l.json"], "trace",
        ["initial.ranks[0]", "rank 0 holds [2, 10] at [0, 0], but [S(0), R]", "gives [3, 10] at [0, 0]"],
        files={"a.json": GOOD_TRACE, "l.json": trace_text(**{"initial.ranks.0.local_shape": [2, 10]})}),
    Row("export-layout-not-the-specs", ["export", "--format", "perfetto", "l.json", "o.json"], "trace",
        ["final.ranks[3]", "rank 3 holds"],
        files={"l.json": trace_text(**{"final.ranks.3.global_offset": [0, 0]})}),
    # more lies (issue 19, found by the trace_semantic fuzz target's oracle): times, plan groups, rank sets, the chain
    # of steps, the collective a transition needs, per-rank lists, offsets, the world size
    Row("trace-diff-est-us-negative", ["trace-diff", "a.json", "t.json"], "trace",
        ["steps[1].est_us", "negative time -5"],
        files={"a.json": GOOD_TRACE, "t.json": trace_text(**{"steps.1.est_us": -5})}),
    Row("trace-diff-times-add-up-beyond-an-export", ["trace-diff", "a.json", "t.json"], "trace",
        ["steps[1]", "the trace's times add up to 2e+15 us"],
        files={"a.json": GOOD_TRACE, "t.json": trace_text(**{"steps.1.est_us": 1e15,
                                                           "steps.1.collectives.0.time_us": [1e15] * 8})}),
    Row("trace-diff-plan-group-not-along-the-dim", ["trace-diff", "a.json", "g.json"], "trace",
        ["steps[1].groups[0]", "[0, 1] is not a group along mesh dim 0"],
        files={"a.json": GOOD_TRACE, "g.json": trace_text(**{"steps.1.groups": [[0, 1], [2, 3], [4, 5], [6, 7]]})}),
    Row("trace-diff-groups-not-a-partition", ["trace-diff", "a.json", "g.json"], "trace",
        ["steps[1].groups", "rank 3 is in no group", "partition mesh[dp=2, tp=4] (4 groups of 2), these are 3"],
        files={"a.json": GOOD_TRACE, "g.json": trace_text(**{"steps.1.groups": [[0, 4], [1, 5], [2, 6]]})}),
    Row("trace-diff-rank-missing-from-a-state", ["trace-diff", "a.json", "m.json"], "trace",
        ["steps[0].ranks_after", "rank 3 is missing", "every state of a trace lists the same ranks"],
        files={"a.json": GOOD_TRACE, "m.json": trace_text(**{"steps.0.ranks_after": [
            r for r in json.loads(GOOD_TRACE)["steps"][0]["ranks_after"] if r["rank"] != 3]})}),
    Row("trace-diff-collective-rank-outside-the-mesh", ["trace-diff", "a.json", "c.json"], "trace",
        ["steps[1].collectives[0].ranks", "rank 99 is not in mesh[dp=2, tp=4]"],
        files={"a.json": GOOD_TRACE, "c.json": trace_text(**{"steps.1.collectives.0.ranks": [0, 1, 2, 3, 4, 5, 6, 99]})}),
    Row("trace-diff-real-offset-beyond-the-tensor", ["trace-diff", "a.json", "o.json"], "trace",
        ["final.ranks[0].global_offset", "[6, 0] lies beyond the global shape [5, 10]"],
        files={"a.json": GOOD_TRACE, "o.json": trace_text(**{"meta.backend": "mpi",
                                                           "final.ranks.0.global_offset": [6, 0]})}),
    Row("trace-diff-world-size-lies", ["trace-diff", "a.json", "w.json"], "trace",
        ["meta.world_size", "5 ranks, but mesh[dp=2, tp=4] has 8"],
        files={"a.json": GOOD_TRACE, "w.json": trace_text(**{"meta.world_size": 5})}),
    Row("trace-diff-step-from-lies", ["trace-diff", "a.json", "f.json"], "trace",
        ["steps[0].from", "mesh dim 1 changes S(0) -> S(1) but the layout has R there"],
        files={"a.json": GOOD_TRACE, "f.json": trace_text(**{"steps.0.from": "S(0)"})}),
    Row("trace-diff-wrong-collective-for-the-transition", ["trace-diff", "a.json", "c.json"], "trace",
        ["steps[1].collective", "all_to_all is not what changes S(0) -> R on mesh dim 0 (all_gather)"],
        files={"a.json": GOOD_TRACE, "c.json": trace_text(**{"steps.1.collective": "all_to_all"})}),
    Row("trace-diff-steps-do-not-chain", ["trace-diff", "a.json", "c.json"], "trace",
        ["steps[1].placements_before", "[R, S(1)] is not where the previous step ended ([S(0), S(1)])"],
        files={"a.json": GOOD_TRACE, "c.json": trace_text(**{"steps.1.placements_before": "[R, S(1)]"})}),
    Row("trace-diff-plan-list-length", ["trace-diff", "a.json", "b.json"], "trace",
        ["steps[1].bytes_per_rank", "has 3 entries for the 8 ranks"],
        files={"a.json": GOOD_TRACE, "b.json": trace_text(**{"steps.1.bytes_per_rank": [1, 2, 3]})}),
    Row("trace-diff-limit-zero", ["trace-diff", "a.json", "a.json", "--limit", "0"], "limit",
        ["0 is out of range"], files={"a.json": GOOD_TRACE}),
    Row("trace-diff-limit-not-a-number", ["trace-diff", "a.json", "a.json", "--limit", "many"], "options",
        ["'many'", "--limit"], files={"a.json": GOOD_TRACE}),
    # ---- real backends: --backend, --timeout, --inject-fault, and compare ----
    Row("redistribute-unknown-backend", [*R, "--backend", "foo"], "backend", ["unknown backend 'foo'"]),
    Row("redistribute-timeout-zero", [*R, "--timeout", "0"], "timeout", ["from 0.001 to 86400", "got 0"]),
    Row("redistribute-timeout-nan", [*R, "--timeout", "nan"], "timeout", ["got nan"]),
    Row("redistribute-timeout-huge", [*R, "--timeout", "1e400"], "options", ["'1e400'", "--timeout"]),
    Row("redistribute-timeout-tiny", [*R, "--timeout", "1e-300"], "timeout", ["from 0.001 to 86400", "got 1e-300"]),
    Row("redistribute-timeout-negative", [*R, "--timeout", "-5"], "timeout", ["got -5"]),
    Row("redistribute-timeout-over-a-day", [*R, "--timeout", "86401"], "timeout", ["got 86401"]),
    Row("redistribute-fault-negative-rank", [*R, "--backend", "mpi", "--inject-fault", "wrong-op:-1"], "inject-fault",
        ["rank '-1' is not a non-negative integer"]),
    Row("redistribute-fault-negative-occurrence", [*R, "--backend", "mpi", "--inject-fault", "wrong-op:1@-1"],
        "inject-fault", ["occurrence '-1'"]),
    Row("redistribute-fault-stall-negative", [*R, "--backend", "mpi", "--inject-fault", "stall-rank:1:-5"],
        "inject-fault", ["seconds '-5' must be a number from 0 to 86400"]),
    Row("redistribute-fault-stall-inf", [*R, "--backend", "mpi", "--inject-fault", "stall-rank:1:inf"],
        "inject-fault", ["seconds 'inf'"]),
    Row("redistribute-fault-malformed", [*R, "--inject-fault", "bogus"], "inject-fault", ["unknown fault 'bogus'"]),
    Row("redistribute-fault-on-local", [*R, "--inject-fault", "wrong-offset:1"], "inject-fault",
        ["'wrong-offset:1' needs a real backend"]),
    Row("redistribute-batch-with-fault", ["redistribute", "--batch", "-", "--inject-fault", "wrong-offset:1"], "batch",
        ["--inject-fault cannot be given with --batch"]),
    # --device (issue 34): a name other than cpu/cuda; cuda where LibTorch has no CUDA (this table runs on CI's CPU
    # build: on a CUDA build with a GPU that row does not apply); cuda with --batch, and on compare's model form.
    Row("redistribute-device-unknown", [*R, "--device", "gpu"], "device", ["must be cpu or cuda", "'gpu'"]),
    Row("redistribute-device-cuda-without-cuda", [*R, "--device", "cuda"], "device",
        ["cuda: this dtsim's LibTorch has no CUDA"]),
    Row("redistribute-batch-with-device", ["redistribute", "--batch", "-", "--device", "cuda"], "batch",
        ["--device cannot be given with --batch"]),
    # Options checked alike in every command (issue 36).
    Row("op-list-with-an-op", ["op", "mm", "--list"], "list", ["takes none", "'mm'"]),
    Row("op-timeout-zero-on-local", ["op", "mm", "--mesh", "2", "--arg", "4x4:R", "--arg", "4x4:R", "--timeout", "0"],
        "timeout", ["from 0.001 to 86400", "got 0"]),
    Row("model-timeout-zero-on-local", ["model", "--timeout", "0"], "timeout", ["from 0.001 to 86400", "got 0"]),
    Row("model-stray-argument", ["model", "--mesh", "2", "extra"], "arguments", ["unexpected argument 'extra'"]),
    Row("compare-model-meta", ["compare", "--np", "2", "--", "model", "--mesh", "2", "--meta"], "meta",
        ["run dtsim model --meta alone"]),
    Row("redistribute-batch-with-fault-says-why", ["redistribute", "--batch", "-", "--inject-fault", "wrong-op:1"],
        "batch", ["--inject-fault cannot be given with --batch: it applies to one run"]),
    Row("compare-device-unknown", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to",
                                   "R", "--device", "tpu"], "device", ["must be cpu or cuda", "'tpu'"]),
    Row("compare-model-device", ["compare", "--np", "2", "--device", "cuda", "--", "model", "--mesh", "2"], "device",
        ["--device applies to a redistribution"]),
    Row("distribute-unknown-backend", ["distribute", "--mesh", "2", "--shape", "4", "--step", "0:S(0)", "--backend",
                                       "gloo"], "backend", ["unknown backend 'gloo'"]),
    Row("compare-np-mismatch", ["compare", "--np", "3", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R"],
        "np", ["3 ranks for mesh[2]"]),
    Row("compare-model-np-mismatch", ["compare", "--np", "3", "--", "model", "--mesh", "2"], "np",
        ["3 ranks for a model mesh of 2 ranks", "give --np 2"]),
    Row("compare-model-bad-option", ["compare", "--np", "2", "--", "model", "--mesh", "2", "--dim", "-3"], "dim",
        ["-3"]),
    Row("compare-model-np-zero", ["compare", "--np", "0", "--", "model"], "np", ["0 ranks for a model mesh of 1"]),
    Row("compare-after-dashes-not-a-model", ["compare", "--np", "2", "--", "layout", "--mesh", "2"], "arguments",
        ["'layout'"]),
    Row("compare-nothing-after-dashes", ["compare", "--np", "2", "--"], "arguments", ["got ''"]),
    Row("compare-model-sets-trace", ["compare", "--np", "2", "--", "model", "--trace", "x.json"], "arguments",
        ["compare sets --trace"]),
    Row("compare-model-sets-backend", ["compare", "--np", "2", "--", "model", "--backend=mpi"], "arguments",
        ["compare sets --backend"]),
    Row("compare-model-with-a-mesh", ["compare", "--np", "2", "--mesh", "2", "--", "model"], "mesh",
        ["a redistribution's option"]),
    Row("compare-model-without-np", ["compare", "--", "model"], "np", ["missing"]),
    Row("compare-np-zero", ["compare", "--np", "0", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R"],
        "np", ["0 ranks for mesh[2]"]),
    Row("compare-mpirun-missing", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R",
                                   "--mpirun", "no-such-mpirun"], "mpirun", ["'no-such-mpirun' is not an executable"]),
    Row("compare-mpirun-empty", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R",
                                 "--mpirun", ""], "mpirun", ["'' is not an executable"]),
    Row("compare-np-negative", ["compare", "--np", "-4", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R"],
        "np", ["-4 ranks for mesh[2]"]),
    Row("compare-np-huge", ["compare", "--np", "99999999999999999999", "--mesh", "2", "--shape", "4", "--from", "S(0)",
                            "--to", "R"], "options", ["'99999999999999999999'", "--np"]),
    Row("compare-timeout-tiny", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R",
                                 "--timeout", "0.0001"], "timeout", ["from 0.001 to 86400", "got 0.0001"]),
    Row("compare-fault-rank-outside", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to",
                                       "R", "--inject-fault", "wrong-op:2"], "inject-fault", ["names rank 2"]),
    Row("compare-local-backend", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to",
                                  "R", "--backend", "local"], "backend", ["mpi or nccl"]),
    Row("compare-keep-a-file", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to", "R",
                                "--keep", "f.txt"], "keep", ["'f.txt'", "Not a directory"], files={"f.txt": "x"}),
    Row("compare-to-partial", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to",
                               "P(sum)"], "to", ["cannot redistribute S(0) to P(sum)"]),
    Row("compare-stray-positional", ["compare", "--np", "2", "--mesh", "2", "--shape", "4", "--from", "S(0)", "--to",
                                     "R", "extra"], "arguments", ["unexpected argument 'extra'"]),
    # ---- metadata-only runs, rank selection, pictures and the Perfetto export ----
    Row("plan-ranks-word", ["plan", *M, "--from", "S(0),R", "--to", "R,R", "--meta", "--ranks", "some"], "ranks",
        ["'some'", "not an integer"]),
    Row("layout-ranks-negative", ["layout", *M, "--placements", "S(0),R", "--ranks", "-3"], "ranks", ["-3"]),
    Row("layout-meta-too-many-ranks", ["layout", "--mesh", "2048x1024", "--shape", "4", "--placements", "S(0),R",
                                       "--meta"], "mesh", ["[2048, 1024]", "more than 1048576 ranks"]),
    Row("layout-svg-directory", ["layout", *M, "--placements", "S(0),R", "--svg", "."], "svg",
        ["'.' is a directory"]),
    Row("layout-png-missing-dir", ["layout", *M, "--placements", "S(0),R", "--png", "no/such/dir/x.png"], "png",
        ["'no/such/dir/x.png'"]),
    Row("layout-svg-with-batch", ["layout", "--batch", "-", "--svg", "x.svg"], "batch",
        ["--svg cannot be given with --batch"]),
    Row("distribute-meta-with-values", ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6",
                                        "--step", "tp:S(0)", "--meta", "--values"], "values", ["--values"]),
    Row("export-unknown-format", ["export", "--format", "chrome", "t.json", "o.json"], "format",
        ["'chrome' is not supported"], files={"t.json": GOOD_TRACE}),
    Row("export-no-format", ["export", "t.json", "o.json"], "format", ["--format perfetto"],
        files={"t.json": GOOD_TRACE}),
    Row("export-one-file", ["export", "--format", "perfetto", "t.json"], "file", ["got 1 file"],
        files={"t.json": GOOD_TRACE}),
    Row("export-overwrites-input", ["export", "--format", "perfetto", "t.json", "t.json"], "file",
        ["'t.json' is the same file as the input of file"], files={"t.json": GOOD_TRACE}),
    Row("export-directory-trace", ["export", "--format", "perfetto", ".", "o.json"], "trace", ["'.' is a directory"]),
    Row("export-broken-trace", ["export", "--format", "perfetto", "t.json", "o.json"], "trace", ["t.json"],
        files={"t.json": GOOD_TRACE[: len(GOOD_TRACE) // 2]}),
    Row("export-output-directory", ["export", "--format", "perfetto", "t.json", "."], "file",
        ["'.'", "directory"], files={"t.json": GOOD_TRACE}),
    Row("export-with-invalid", ["export", "--format", "perfetto", "t.json", "o.json", "--with", "u.json"], "trace",
        ["u.json"], files={"t.json": GOOD_TRACE, "u.json": trace_text(version=99)}),
    # model traces (dtsim model --trace): exported as nested slices per rank, refused whole when invalid
    Row("export-op-trace", ["export", "--format", "perfetto", "o.json", "out.json"], "trace",
        ["'o.json' is one op's implicit redistributions (dtsim op --trace): it has no Perfetto export"],
        files={"o.json": op_trace_text()}),
    Row("export-model-negative-time", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json'", "events[3].t_us", "-1 is not a time"], files={"m.json": model_trace_text(**{"events.3.t_us": -1})}),
    Row("export-model-unnested-module", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json'", "ends \"nowhere\" while", "is the innermost open module"],
        files={"m.json": model_trace_text(**{f"events.{first_event('module_end')}.module": "nowhere"})}),
    Row("export-model-hashes-per-rank", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json'", "events[0].tensor.hashes", "has 1 entries for 2 ranks"],
        files={"m.json": model_trace_text(**{"events.0.tensor.hashes": ["xxh3:0000000000000000"]})}),
    Row("export-model-group-outside-the-world", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json'", f"events[{first_event('collective')}].collectives[0].groups"],
        files={"m.json": model_trace_text(**{f"events.{first_event('collective')}.collectives.0.groups": [[0, 2]]})}),
    Row("export-model-version", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json'", "version 7 is not supported"], files={"m.json": model_trace_text(version=7)}),
    Row("export-model-with-a-redistribution-trace", ["export", "--format", "perfetto", "m.json", "o.json", "--with",
                                                     "t.json"], "with",
        ["'t.json' is not a model trace", "\"dtsim-trace\""], files={"m.json": model_trace_text(), "t.json": GOOD_TRACE}),
    Row("export-model-with-invalid", ["export", "--format", "perfetto", "m.json", "o.json", "--with", "u.json"],
        "trace", ["'u.json'", "events[3].t_us"],
        files={"m.json": model_trace_text(), "u.json": model_trace_text(**{"events.3.t_us": -1})}),
    Row("export-model-truncated", ["export", "--format", "perfetto", "m.json", "o.json"], "trace",
        ["'m.json' is not valid JSON"], files={"m.json": model_trace_text()[:2000]}),
    # dtsim run (docs/run.md): the launcher refuses before any rank starts.
    # ---- record (a real job, every rank recorded) and import-fr (Flight Recorder dumps) ----
    Row("record-no-output", ["record", "--", "true"], "arguments", ["required: -o/--output"]),
    Row("record-no-command", ["record", "-o", "r.json"], "command", ["missing"]),
    Row("record-memory-without-ops", ["record", "-o", "r.json", "--memory", "--no-ops", "--", "true"], "memory",
        ["--no-ops"]),
    Row("record-max-data-bytes-negative", ["record", "-o", "r.json", "--max-data-bytes", "-5", "--", "true"],
        "max-data-bytes", ["-5 is out of range"]),
    # The output checks of record, import-fr and run are the C++ writers' (dtsim/_files.py, trace/files.h).
    Row("record-output-folder-missing", ["record", "-o", "no/r.json", "--", "true"], "output",
        ["cannot write 'no/r.json'", "No such file or directory"]),
    Row("record-output-is-the-script", ["record", "-o", "s.py", "--", "python3", "s.py"], "output",
        ["'s.py' is the same file as the input of the command ('s.py')"], files={"s.py": "print(1)\n"}),
    Row("record-sidecar-is-the-script", ["record", "-o", "s", "--", "python3", "./s.data"], "output (its data sidecar)",
        ["'s.data' is the same file as the input of the command ('./s.data')"], files={"s.data": "print(1)\n"}),
    Row("record-output-is-a-device", ["record", "-o", "/dev/zero", "--", "true"], "output",
        ["'/dev/zero' is not a regular file", "data sidecar ('/dev/zero.data')"]),
    Row("import-fr-output-is-a-device", ["import-fr", "-o", "/dev/zero", "rank0"], "output",
        ["'/dev/zero' is a character device other than /dev/null"],
        files={"rank0": '{"version": "2.10", "entries": []}'}),
    Row("import-fr-output-is-a-dump", ["import-fr", "-o", "./rank0", "rank0"], "output",
        ["'./rank0' is the same file as the input of dump ('rank0')"],
        files={"rank0": '{"version": "2.10", "entries": []}'}),
    Row("import-fr-output-is-a-folder", ["import-fr", "-o", ".", "rank0"], "output", ["'.' is a directory"],
        files={"rank0": '{"version": "2.10", "entries": []}'}),
    Row("record-command-records-no-rank", ["record", "-o", "r.json", "--", "true"], "recording",
        ["no rank recorded"]),
    Row("import-fr-no-dump", ["import-fr", "-o", "fr.json"], "arguments", ["required: dumps"]),
    Row("import-fr-empty-dump", ["import-fr", "-o", "fr.json", "rank0"], "dump", ["'rank0' is empty"],
        files={"rank0": ""}),
    Row("import-fr-hostile-pickle", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["refers to posix.system", "plain data"], files={"rank0": b"cposix\nsystem\n(S'true'\ntR."}),
    Row("import-fr-unknown-version", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["version '3.0' is not supported"], files={"rank0": '{"version": "3.0", "entries": []}'}),
    Row("import-fr-entry-without-kind", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["entries[0] has no 'profiling_name'"],
        files={"rank0": '{"version": "2.10", "entries": [{"record_id": 0}]}'}),
    # A pickle's memo lets 300 bytes name one list from 2^26 places: refused by what it would build, at once.
    Row("import-fr-pickle-bomb", ["import-fr", "-o", "fr.json", "rank0"], "dump", ["refused as a pickle bomb"],
        files={"rank0": FR_BOMB}),
    Row("import-fr-nested-too-deep", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["nests more than 32 containers deep"], files={"rank0": "{\"version\": \"2.10\", \"entries\": "
                                                       + "[" * 100 + "]" * 100 + "}"}),
    Row("import-fr-time-out-of-range", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["entries[0].time_created_ns", "is not a whole number from 0 to"],
        files={"rank0": json.dumps({"version": "2.10", "entries": [dict(FR_ENTRY, time_created_ns=-5)]})}),
    Row("import-fr-times-past-a-recording", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["time_created_ns span", "more than a recording's times hold"],
        files={"rank0": json.dumps({"version": "2.10", "entries": [
            dict(FR_ENTRY, time_created_ns=0), dict(FR_ENTRY, record_id=1, collective_seq_id=2,
                                                    time_created_ns=1 << 62)]})}),
    Row("import-fr-started-not-a-number", ["import-fr", "-o", "fr.json", "rank0"], "dump",
        ["pg_status.0.last_started_collective", "'x'"],
        files={"rank0": json.dumps({"version": "2.10", "entries": [FR_ENTRY], "pg_status": {
            "0": {"last_completed_collective": 0, "last_started_collective": "x"}}})}),
    Row("import-fr-two-dumps-of-one-rank", ["import-fr", "-o", "fr.json", "a1", "b1"], "dump",
        ["are both rank 1's"], files={"a1": '{"version": "2.10", "entries": []}',
                                      "b1": '{"version": "2.10", "entries": []}'}),
    Row("trace-diff-event-read-before-wait-without-op", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].read_before_wait.op", "expected an op name"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward",
             "inputs": [], "outputs": None, "read_before_wait": {"op": "", "line": "t.py:3"}}]}))}),
    Row("trace-diff-event-unknown-state", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].state", "expected scheduled, started or completed, got 'stuck'"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward",
             "inputs": [], "outputs": None, "state": "stuck"}]}))}),
    Row("trace-diff-event-negative-time", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].dur_us", "expected a finite time >= 0 (microseconds)"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward",
             "inputs": [], "outputs": None, "t_us": 5.0, "dur_us": -1.5}]}))}),
    Row("trace-diff-memory-sample-at-the-middle", ["trace-diff", "r.json", "r.json"], "recording",
        ["memory.0[0].at", "expected begin or end, got 'middle'"],
        files={"r.json": recording_text(lambda d: d.update(memory={"0": [
            {"module": "MLP", "pass": "forward", "at": "middle", "bytes": 64}]}))}),
    Row("trace-diff-memory-of-no-rank", ["trace-diff", "r.json", "r.json"], "recording",
        ["memory", "has memory for '9', which is no rank of a world of"],
        files={"r.json": recording_text(lambda d: d.update(memory={"9": []}))}),
    Row("trace-diff-memory-peak-below-bytes", ["trace-diff", "r.json", "r.json"], "recording",
        ["memory.0[0].peak", "64 is below the bytes held then, 128"],
        files={"r.json": recording_text(lambda d: d.update(memory={"0": [
            {"module": "MLP", "pass": "forward", "at": "end", "bytes": 128, "peak": 64}]}))}),
    Row("trace-diff-meta-missing-rank-outside-the-world", ["trace-diff", "r.json", "r.json"], "recording",
        ["meta.missing_ranks", "9"],
        files={"r.json": recording_text(lambda d: d["meta"].update(missing_ranks=[9]))}),
    Row("trace-diff-meta-truncated-rank-twice", ["trace-diff", "r.json", "r.json"], "recording",
        ["meta.truncated_ranks", "ranks must be listed once each, ascending"],
        files={"r.json": recording_text(lambda d: d["meta"].update(truncated_ranks=[1, 1]))}),
    Row("trace-diff-meta-tool-not-text", ["trace-diff", "r.json", "r.json"], "recording", ["meta.tool"],
        files={"r.json": recording_text(lambda d: d["meta"].update(tool=5))}),
    Row("trace-diff-meta-negative-data-cap", ["trace-diff", "r.json", "r.json"], "recording",
        ["meta.max_data_bytes", "-1"],
        files={"r.json": recording_text(lambda d: d["meta"].update(max_data_bytes=-1))}),
    Row("trace-diff-event-unavailable-without-reason", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].unavailable", "expected why the outputs were not digested"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward",
             "inputs": [], "outputs": None, "unavailable": ""}]}))}),
    Row("trace-diff-digest-unavailable-without-reason", ["trace-diff", "r.json", "r.json"], "recording",
        ["events.0[0].inputs[0].unavailable", "expected why the tensor was not hashed"],
        files={"r.json": recording_text(lambda d: d.update(events={"0": [
            {"kind": "collective", "op": "all_reduce", "group": [0, 1], "module": "", "pass": "forward",
             "inputs": [{"shape": [2], "dtype": "float32", "hash": None, "unavailable": ""}],
             "outputs": None}]}))}),
    Row("run-no-script", ["run"], "arguments", ["required: script"]),
    Row("run-missing-script", ["run", "--nproc-per-node", "2", "nope.py"], "script",
        ["cannot open 'nope.py'", "No such file or directory"]),
    Row("run-script-is-a-directory", ["run", "."], "script", ["'.' is a directory, not a regular file"]),
    Row("run-script-is-a-device", ["run", "/dev/zero"], "script", ["'/dev/zero' is a device, not a regular file"]),
    Row("run-module-without-python-code", ["run", "-m", "sys"], "module", ["'sys' has no Python code to run"]),
    Row("run-option-given-twice", ["run", "--nproc-per-node", "2", "--nproc_per_node=3", "s.py"], "nproc-per-node",
        ["given twice ('--nproc-per-node 2' and '--nproc_per_node=3')"], files={"s.py": "print(1)\n"}),
    Row("run-flag-given-twice", ["run", "--meta", "--report", "--meta", "s.py"], "meta",
        ["given twice ('--meta' and '--meta')"], files={"s.py": "print(1)\n"}),
    Row("run-missing-module", ["run", "-m", "no_such_module_dtsim"], "module", ["No module named 'no_such_module_dtsim'"]),
    Row("run-nproc-zero", ["run", "--nproc-per-node", "0", "s.py"], "nproc-per-node", ["0 is out of range"],
        files={"s.py": "print(1)\n"}),
    Row("run-nproc-text", ["run", "--nproc_per_node", "four", "s.py"], "nproc-per-node", ["'four'"],
        files={"s.py": "print(1)\n"}),
    Row("run-nproc-gpu", ["run", "--nproc-per-node", "gpu", "s.py"], "nproc-per-node", ["'gpu'"],
        files={"s.py": "print(1)\n"}),
    Row("run-too-many-ranks", ["run", "--nproc-per-node", "4096", "--nnodes", "2", "s.py"], "nproc-per-node",
        ["8192 ranks"], files={"s.py": "print(1)\n"}),
    Row("run-elastic-nodes", ["run", "--nnodes", "1:2", "s.py"], "nnodes", ["'1:2'"], files={"s.py": "print(1)\n"}),
    Row("run-timeout-zero", ["run", "--timeout", "0", "s.py"], "timeout", ["0 is out of range"],
        files={"s.py": "print(1)\n"}),
    Row("run-timeout-text", ["run", "--timeout", "soon", "s.py"], "timeout", ["'soon'"], files={"s.py": "print(1)\n"}),
    Row("run-ranks-filter", ["run", "--local-ranks-filter", "0,x", "s.py"], "local-ranks-filter", ["'0,x'"],
        files={"s.py": "print(1)\n"}),
    Row("run-ranks-filter-outside", ["run", "--nproc-per-node", "2", "--local-ranks-filter", "5", "s.py"],
        "local-ranks-filter", ["'5' names rank 5, outside the 2 ranks (0 to 1)"], files={"s.py": "print(1)\n"}),
    Row("run-nproc-non-ascii-digits", ["run", "--nproc-per-node", "\u0662", "s.py"], "nproc-per-node",
        ["'\u0662' is not a whole number"], files={"s.py": "print(1)\n"}),
    Row("run-shared-modules-not-a-name", ["run", "--shared-modules", "rank_lib,a/b", "s.py"], "shared-modules",
        ["'a/b' is not a top-level package name"], files={"s.py": "print(1)\n"}),
    Row("run-unknown-option", ["run", "--nproc-per-nod", "2", "s.py"], "arguments", ["--nproc-per-nod"],
        files={"s.py": "print(1)\n"}),
    Row("run-report-json-no-folder", ["run", "--report-json", "no/r.json", "s.py"], "report-json",
        ["cannot write 'no/r.json'"], files={"s.py": "print(1)\n"}),
    Row("run-report-json-is-the-script", ["run", "--report-json", "s.py", "s.py"], "report-json",
        ["'s.py' is the same file as the input of the program ('s.py')"], files={"s.py": "print(1)\n"}),
    Row("run-trace-no-folder", ["run", "--trace", "no/t.json", "s.py"], "trace", ["cannot write 'no/t.json'"],
        files={"s.py": "print(1)\n"}),
    Row("run-trace-is-the-script", ["run", "--trace", "s.py", "s.py"], "trace",
        ["'s.py' is the same file as the input of the program ('s.py')"], files={"s.py": "print(1)\n"}),
    Row("run-trace-sidecar-is-the-script", ["run", "--trace", "t", "t.data"], "trace",
        ["'t.data' is the same file as the input of the program ('t.data')"], files={"t.data": "print(1)\n"}),
    Row("op-arg-shape-as-typed", ["op", "neg", "--mesh", "2", "--arg", "4\u00a0x4:R"], "arg 0",
        ["'4\\u00a0x4'", "U+00A0"]),
    Row("op-arg-mixed-partials", ["op", "add.Tensor", "--mesh", "2x2", "--arg", "4:R,R", "--arg", "4:P(sum),P(max)"],
        "args[1]", ["tensor argument 'other'", "mixes Partial reduce ops"]),
    Row("op-embedding-vocab-sharded-bad-indices", ["op", "embedding", "--mesh", "2", "--arg", "10x4:S(0)", "--arg",
                                                    "12:R", "--dtype", "int64"], "op",
        ["aten.embedding: index out of range", "the op on the global tensors"]),
    Row("layout-meta-storage-overflow", ["layout", "--mesh", "4", "--shape", "2305843009213693952", "--placements",
                                         "S(0)", "--meta"], "shape", ["float32 is more than 2^63 - 1 bytes"]),
    Row("redistribute-meta-storage-overflow", ["redistribute", "--mesh", "4", "--shape", "2305843009213693952",
                                               "--from", "S(0)", "--to", "R", "--meta"], "shape",
        ["more than 2^63 - 1 bytes"]),
    # the total work of a simulated model: ranks x (layers + 2), not each alone (both are within their own limits)
    Row("model-rank-layers", ["model", "--meta", "--mesh", "2048x8", "--names", "dp,tp", "--plan", "fsdp+tp",
                              "--layers", "256", "--heads", "8", "--batch", "2048"], "layers",
        ["256 transformer blocks on 16384 simulated ranks are 4227072 rank-layers", "at most 524288"]),
    Row("run-check-ops-with-meta", ["run", "--meta", "--check-ops", "s.py"], "check-ops", ["metadata-only run"],
        files={"s.py": "print(1)\n"}),
    Row("run-trace-with-meta", ["run", "--meta", "--trace", "t.json", "s.py"], "trace", ["metadata-only run"],
        files={"s.py": "print(1)\n"}),
    Row("run-trace-is-a-folder", ["run", "--trace", ".", "s.py"], "trace", ["'.' is not a regular file"],
        files={"s.py": "print(1)\n"}),
    Row("run-trace-is-the-report", ["run", "--trace", "r.json", "--report-json", "r.json", "s.py"], "trace",
        ["'r.json' is the same file as the output of report-json ('r.json')"], files={"s.py": "print(1)\n"}),
    Row("trace-diff-recording-bad-run-collective-hash", ["trace-diff", "r.json", "r.json"], "recording",
        ["collectives[0].output_hashes[1]", "expected \"xxh3:\" and 16 hex digits"],
        files={"r.json": '{"format": "dtsim-recording", "version": 1, "meta": {"backend": "dtsim-run", '
                         '"world_size": 2}, "redistributions": [], "collectives": [{"op": "all_reduce", "groups": '
                         '[[0, 1]], "ranks": [0, 1], "input_shapes": [[2], [2]], "output_shapes": [[2], [2]], '
                         '"input_bytes": [8, 8], "output_bytes": [8, 8], "input_hashes": ["xxh3:0123456789abcdef", '
                         '"xxh3:0123456789abcdef"], "output_hashes": ["xxh3:0123456789abcdef", "xxh3:nothex"]}]}'}),
    Row("trace-diff-recording-run-collective-rank-outside", ["trace-diff", "r.json", "r.json"], "recording",
        ["collectives[0].ranks", "rank 5 is not in"],
        files={"r.json": '{"format": "dtsim-recording", "version": 1, "meta": {"backend": "dtsim-run", '
                         '"world_size": 2}, "redistributions": [], "collectives": [{"op": "barrier", "groups": '
                         '[[0, 1]], "ranks": [0, 5], "input_shapes": [[0], [0]], "output_shapes": [[0], [0]], '
                         '"input_bytes": [0, 0], "output_bytes": [0, 0]}]}'}),
    Row("trace-diff-recording-vs-trace", ["trace-diff", "r.json", "t.json"], "recording",
        ["expected \"dtsim-recording\""],
        files={"r.json": '{"format": "dtsim-recording", "version": 1, "meta": {"backend": "dtsim-run", '
                         '"world_size": 1}, "redistributions": []}', "t.json": trace_text()}),
]

# --batch: each row's lines are answered one JSON object per non-blank line; `bad` maps the index (among non-blank
# lines) of each bad line to (field, text the error must contain).
CASE = '{"mesh": [2], "shape": [4], "placements": "S(0)"}'
PLAN_CASE = '{"mesh": [2], "shape": [4], "from": "S(0)", "to": "R"}'
OP_CASE = '{"mesh": [2], "op": "neg", "args": [{"shape": [4], "placements": "S(0)"}]}'


@dataclass
class BatchRow:
    id: str
    command: str
    lines: list                      # bytes or str, joined with b"\n"
    bad: dict                        # index -> (field, text)


BATCH_ROWS = [
    BatchRow("not-json", "layout", [CASE, "not json", CASE], {1: ("batch", "line 2 is not valid JSON")}),
    BatchRow("non-utf8-line", "layout", [b"\xff", CASE], {0: ("batch", "line 1 is not valid JSON")}),
    BatchRow("non-utf8-in-string", "layout", [b'{"mesh": [2], "shape": [4], "placements": "S(0)\xff"}', CASE],
             {0: ("batch", "is not valid JSON")}),
    BatchRow("huge-number", "layout", ['{"mesh": [2], "shape": [1e400], "placements": "S(0)"}', CASE],
             {0: ("batch", "number out of range")}),
    BatchRow("too-large-integer", "layout", ['{"mesh": [2], "shape": [1e20], "placements": "S(0)"}'],
             {0: ("shape", "integer 1e+20 is too large")}),
    BatchRow("uint64-integer", "layout", ['{"mesh": [18446744073709551615], "shape": [4], "placements": "S(0)"}'],
             {0: ("mesh", "integer 18446744073709551615 is too large")}),
    BatchRow("float-dim", "layout", ['{"mesh": [2.5], "shape": [4], "placements": "S(0)"}'],
             {0: ("mesh", "expected an integer, got 2.5")}),
    BatchRow("not-an-object", "layout", ["[1, 2]", "3", CASE], {0: ("batch", "not a JSON object"),
                                                                 1: ("batch", "not a JSON object")}),
    BatchRow("unknown-key", "layout", [CASE[:-1] + ', "placement": "R"}'], {0: ("batch", "unknown key 'placement'")}),
    BatchRow("duplicate-key", "layout", ['{"mesh": [2], "mesh": [4], "shape": [4], "placements": "S(0)"}'],
             {0: ("batch", "the key 'mesh' twice")}),
    BatchRow("deep-nesting", "layout", ["[" * 1000 + "]" * 1000, CASE], {0: ("batch", "deeper than 512")}),
    BatchRow("wrong-types", "plan", ['{"mesh": [2], "shape": [4], "from": ["S(0)"], "to": "R"}',
                                     '{"mesh": {"a": 1}, "shape": [4], "from": "S(0)", "to": "R"}',
                                     '{"mesh": [2], "shape": [4], "from": "S(0)", "to": "R", "planner": 1}', PLAN_CASE],
             {0: ("from", "expected a string"), 1: ("mesh", "expected a list of integers"),
              2: ("planner", "expected a string")}),
    BatchRow("missing-key", "plan", ['{"mesh": [2], "shape": [4], "from": "S(0)"}'], {0: ("to", "missing")}),
    BatchRow("lone-surrogate-escape", "layout", ['{"mesh": [2], "names": ["\\udcff"], "shape": [4], '
                                                 '"placements": "S(0)"}'], {0: ("batch", "surrogate")}),
    BatchRow("names-control-char", "layout", ['{"mesh": [2], "names": ["a\\u0001"], "shape": [4], '
                                              '"placements": "S(0)"}'], {0: ("names", "control character")}),
    BatchRow("values-not-bool", "redistribute", [PLAN_CASE[:-1] + ', "values": "yes"}', PLAN_CASE],
             {0: ("values", "expected true or false")}),
    BatchRow("overflow", "plan", ['{"mesh": [2], "shape": [2305843009213693952], "from": "S(0)", "to": "R", '
                                  '"dtype": "float64"}'], {0: ("shape", "more than 2^63 - 1 bytes")}),
    BatchRow("huge-echo-capped", "plan", ['{"mesh": [2], "shape": [4], "from": "' + HUGE + '", "to": "R"}'],
             {0: ("from", "characters")}),
    BatchRow("redistribute-too-many-ranks", "redistribute",
             ['{"mesh": [1048577], "shape": [4], "from": "S(0)", "to": "R", "meta": true}'],
             {0: ("mesh", "more than 1048576 ranks")}),
    BatchRow("meta-not-bool", "redistribute", [PLAN_CASE[:-1] + ', "meta": "yes"}', PLAN_CASE],
             {0: ("meta", "expected true or false")}),
    BatchRow("op-unknown-tensor-key", "op", ['{"mesh": [2], "op": "neg", "args": [{"shape": [4], "placements": "R", '
                                           '"x": 1}]}', OP_CASE], {0: ("args[0]", "unknown key 'x'")}),
    BatchRow("op-args-not-list", "op", ['{"mesh": [2], "op": "neg", "args": "x"}', OP_CASE],
             {0: ("args", "must be a list")}),
    BatchRow("op-unknown-op", "op", ['{"mesh": [2], "op": "nope", "args": []}', OP_CASE],
             {0: ("op", "is no ATen operator")}),
    BatchRow("op-meta-not-bool", "op", [OP_CASE[:-1] + ', "meta": 1}', OP_CASE], {0: ("meta", "expected true or false")}),
    BatchRow("ranks-not-in-mesh", "layout", [CASE[:-1] + ', "ranks": "5"}', CASE],
             {0: ("ranks", "rank 5 is not in")}),
]


def command_exists(name):
    out = subprocess.run([DTSIM, name, "--help"], capture_output=True, timeout=60)
    return out.returncode == 0


def run_measured(args, cwd, stdin=b""):
    """Runs dtsim; returns (exit code, stdout, stderr, peak RSS in MiB, seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        inp.write(stdin)
        inp.seek(0)
        argv = [os.fsencode(a) for a in [DTSIM, *args]]
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, stdin=inp, stdout=out, stderr=err)
        deadline = start + TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"dtsim {args[:4]} ran longer than {TIMEOUT_S} s")
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss / 1024, seconds


def listing(directory):
    return sorted(os.listdir(directory))


@pytest.mark.parametrize("row", BAD_INPUTS, ids=[r.id for r in BAD_INPUTS])
def test_bad_input_is_a_clear_error(row, tmp_path):
    if row.args and row.args[0] in ("export", "compare") and not command_exists(row.args[0]):
        pytest.skip(f"dtsim {row.args[0]} is not in this build")
    for name, content in row.files.items():
        (tmp_path / name).write_bytes(content.encode() if isinstance(content, str) else content)
    before = listing(tmp_path)
    code, stdout, stderr, rss_mb, seconds = run_measured(row.args, tmp_path, row.stdin)
    message = stderr.decode("utf-8", "replace")
    assert code == row.code, (code, message)
    assert stdout == b"", stdout[:500]
    assert message.startswith(f"dtsim: error: {row.field}: "), message
    assert message.count("\n") <= 1 or row.id.startswith(("no-command", "unknown-command")), message
    for text in row.says:
        assert text in message, (text, message)
    assert len(message) < 4096, f"the message is not capped: {len(message)} characters"
    assert listing(tmp_path) == before, listing(tmp_path)  # no output file, no *.tmp* left behind
    assert rss_mb < MAX_RSS_MB, f"peak memory {rss_mb:.0f} MiB"


@pytest.mark.parametrize("row", BATCH_ROWS, ids=[r.id for r in BATCH_ROWS])
def test_batch_bad_lines_are_answered(row, tmp_path):
    lines = [line.encode() if isinstance(line, str) else line for line in row.lines]
    code, stdout, stderr, rss_mb, _ = run_measured([row.command, "--batch", "-"], tmp_path, b"\n".join(lines) + b"\n")
    assert code == 1, (code, stderr)  # 1: some line failed
    assert stderr == b"", stderr
    answers = [json.loads(line) for line in stdout.decode("utf-8").splitlines()]
    assert len(answers) == len(lines), answers
    for i, answer in enumerate(answers):
        assert "internal" not in answer, answer
        if i in row.bad:
            field, text = row.bad[i]
            assert answer["field"] == field, answer
            assert answer["error"].startswith(f"{field}: "), answer
            assert text in answer["error"], (text, answer)
            assert answer["line"] == i + 1
            assert len(answer["error"]) < 4096
        else:
            assert "error" not in answer, answer
    assert listing(tmp_path) == []
    assert rss_mb < MAX_RSS_MB, f"peak memory {rss_mb:.0f} MiB"


def test_batch_exit_code_is_zero_when_every_line_passed(tmp_path):
    code, stdout, stderr, _, _ = run_measured(["layout", "--batch", "-"], tmp_path, (CASE + "\n\n" + CASE).encode())
    assert code == 0, stderr
    assert len(stdout.splitlines()) == 2


def test_batch_answers_are_flushed_per_line(tmp_path):
    # The first answer must arrive while the second line has not been written yet.
    proc = subprocess.Popen([DTSIM, "layout", "--batch", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        proc.stdin.write((CASE + "\n").encode())
        proc.stdin.flush()
        first = proc.stdout.readline()
        assert json.loads(first)["shape"] == [4]
        proc.stdin.write(b"not json\n")
        proc.stdin.close()
        second = proc.stdout.readline()
        assert json.loads(second)["field"] == "batch"
    finally:
        proc.kill()
        proc.wait()


def test_batch_line_too_long_is_answered(tmp_path):
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.write(b'{"mesh": [2], "shape": [4], "placements": "' + b" " * (65 << 20) + b'S(0)"}\n')
        f.write(CASE.encode() + b"\n")
    code, stdout, stderr, rss_mb, _ = run_measured(["layout", "--batch", str(big)], tmp_path)
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert code == 1 and len(answers) == 2, (code, stderr)
    assert answers[0]["field"] == "batch" and "longer than" in answers[0]["error"]
    assert "error" not in answers[1]
    assert rss_mb < MAX_RSS_MB


def test_table_is_large_enough():
    assert len(BAD_INPUTS) + len(BATCH_ROWS) >= 60
    commands = {r.args[0] for r in BAD_INPUTS if r.args}
    assert {"layout", "plan", "redistribute", "distribute", "trace-diff"} <= commands


# Characters a terminal shows as nothing or a blank, in every kind of value: the message names the character and
# shows the value escaped (JSON's \u00a0), never the raw character, so the user sees what was typed.
INVISIBLE = ["\u00a0", "\u200b", "\u2009", "\ufeff", "\u202f", "\u00ad", "\x7f", "\u0085"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
@pytest.mark.parametrize("where", ["placements", "mesh", "names", "step"])
def test_invisible_characters_are_never_echoed_raw(tmp_path, char, where):
    args = {
        "placements": ["layout", *M, "--placements", f"S(0){char},R"],
        "mesh": ["layout", "--mesh", f"2x4{char}", "--shape", "5,10", "--placements", "S(0),R"],
        "names": ["layout", *M, "--names", f"dp,tp{char}", "--placements", "S(0),R"],
        "step": ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "8,6", "--step", f"tp:S(0){char}"],
    }[where]
    code, stdout, stderr, _, _ = run_measured(args, tmp_path)
    message = stderr.decode("utf-8")
    assert code == 2 and stdout == b"", (code, message)
    assert message.startswith(f"dtsim: error: {where}: "), message
    assert char not in message, message
    assert f"\\u{ord(char):04x}" in message and f"U+{ord(char):04X}" in message, message


def test_a_file_that_blocks_is_refused_in_bounded_time():
    """/proc/kmsg says "regular file, size 0" and blocks: it is refused (exit 2) after the input stall bound (30 s),
    not waited for forever; where the kernel refuses to open it, or it holds unread messages (not a recording), that
    is the refusal."""
    import time

    start = time.monotonic()
    out = subprocess.run([DTSIM, "replay", "/proc/kmsg"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("dtsim: error: recording: "), out.stderr
    assert time.monotonic() - start < 60  # "sent nothing for 30 s" (or the kernel's refusal, or what it held)

