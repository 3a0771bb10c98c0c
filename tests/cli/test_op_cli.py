"""`dtsim op` from the outside: the JSON answer's fields with closed-form placements, local shapes, values and
collective counts; the text explanation; composite ops; metadata-only runs of big meshes; --list; batch exit codes.
Upstream agreement on thousands of random cases is tests/oracle/test_op_oracle.py's job."""
import json
import os
import subprocess

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")


def run(*args, stdin=None):
    return subprocess.run([DTSIM, *args], capture_output=True, text=True, input=stdin, timeout=600)


def arg_values(numel, k):
    """The global values of tensor argument k: ((arange(numel) + 3k) mod 7) - 3."""
    return [((i + 3 * k) % 7) - 3 for i in range(numel)]


def test_json_answer_of_a_row_times_column_sharded_mm():
    out = run("op", "mm", "--mesh", "2x4", "--names", "dp,tp", "--arg", "8x16:S(0),R", "--arg", "16x12:R,S(1)",
              "--json", "--values")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    # Rows over dp and columns over tp need no communication: the output is [S(0), S(1)].
    assert obj["redistributes"] == []
    assert obj["strategy"] == "[S(0), R], [R, S(1)] -> [S(0), S(1)]"
    assert obj["reason"] == "no redistribution"
    assert all(n == 0 for n in obj["collective_counts"].values())
    (output,) = obj["outputs"]
    assert output["shape"] == [8, 12] and output["placements"] == "[S(0), S(1)]"
    a = arg_values(8 * 16, 0)
    b = arg_values(16 * 12, 1)
    full = [[sum(a[i * 16 + k] * b[k * 12 + j] for k in range(16)) for j in range(12)] for i in range(8)]
    for entry in output["ranks"]:
        dp, tp = divmod(entry["rank"], 4)
        assert entry["local_shape"] == [4, 3]  # 8 rows over 2, 12 columns over 4
        expected = [full[i][j] for i in range(4 * dp, 4 * dp + 4) for j in range(3 * tp, 3 * tp + 3)]
        assert entry["values"] == expected
    assert obj["verdict"] == "OK"


def test_contracting_dim_mismatch_moves_one_input_and_names_the_plan():
    out = run("op", "mm", "--mesh", "4", "--arg", "8x16:S(1)", "--arg", "16x12:S(1)", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert len(obj["redistributes"]) == 1
    moved = obj["redistributes"][0]
    assert moved["from"] != moved["to"] and moved["plan"], moved
    assert sum(obj["collective_counts"].values()) >= 1
    assert obj["verdict"] == "OK"


def test_text_lists_candidates_choice_and_verdict():
    out = run("op", "mm", "--mesh", "2x4", "--names", "dp,tp", "--arg", "8x16:S(0),S(1)", "--arg", "16x12:R,S(1)")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "candidates (" in text and "* = chosen" in text
    assert sum(1 for line in text.splitlines() if line.startswith("  *")) == 1
    assert "implicit redistribution of input 0" in text
    assert "all_gather" in text
    assert "verdict: OK" in text


def test_composite_op_lists_its_pieces():
    out = run("op", "matmul", "--mesh", "2x2", "--arg", "4x6x8:S(0),S(2)", "--arg", "8x10:R,S(1)", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    ops = [o["op"] for o in obj["ops"]]
    assert "aten::mm" in ops and len(ops) >= 2, ops
    assert obj["outputs"][0]["shape"] == [4, 6, 10]
    assert obj["verdict"] == "OK"


def test_meta_mode_reports_shapes_of_a_4096_rank_mesh():
    out = run("op", "mm", "--mesh", "64x64", "--arg", "8192x8192:S(0),R", "--arg", "8192x8192:R,S(1)", "--meta",
              "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    ranks = obj["outputs"][0]["ranks"]
    assert len(ranks) == 4096
    assert {tuple(r["local_shape"]) for r in ranks} == {(8192 // 64, 8192 // 64)}
    assert all("values" not in r for r in ranks)


def test_list_names_registered_ops():
    out = run("op", "--list")
    assert out.returncode == 0, out.stderr
    names = set(out.stdout.split())
    for op in ("aten::mm", "aten::add.Tensor", "aten::sum.dim_IntList", "aten::_softmax", "aten::view",
               "aten::embedding", "aten::native_dropout"):
        assert op in names, op


def test_batch_answers_every_line_and_exit_code_says_a_line_failed():
    good = {"mesh": [2], "op": "neg", "args": [{"shape": [4], "placements": "S(0)"}], "values": True}
    bad = {"mesh": [2], "op": "mm", "args": [{"shape": [4, 4], "placements": "R"}, {"shape": [5, 4], "placements": "R"}]}
    out = run("op", "--batch", "-", stdin=json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert out.returncode == 1, out.stderr
    first, second = (json.loads(line) for line in out.stdout.splitlines())
    assert first["outputs"][0]["ranks"][0]["values"] == [-v for v in arg_values(4, 0)[:2]]
    assert second["field"] == "op" and "cannot be multiplied" in second["error"]
    out = run("op", "--batch", "-", stdin=json.dumps(good) + "\n")
    assert out.returncode == 0, out.stderr


def chunks(n, k):
    """torch.chunk sizes of n over k."""
    c = -(-n // k) if n else 0
    return [max(0, min(c, n - i * c)) for i in range(k)]


def test_trace_records_each_implicit_redistribution_as_the_answer_names_it(tmp_path):
    # [S(0)] x [S(0)] on 4 ranks: mm moves its second input (S(0) -> R: one all_gather); the op trace holds that
    # redistribution as a whole dtsim trace whose steps, collectives and per-rank shapes are the plan's.
    trace = tmp_path / "op.json"
    out = run("op", "mm", "--mesh", "4", "--arg", "10x6:S(0)", "--arg", "6x4:S(0)", "--json", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    t = json.loads(trace.read_text())
    assert t["format"] == "dtsim-op-trace" and t["version"] == 1 and t["op"] == "mm" and t["ok"] is True
    assert t["strategy"] == answer["strategy"] and t["meta"]["command"] == "op"
    assert len(t["redistributions"]) == len(answer["redistributes"]) == 1
    (red,) = t["redistributions"]
    (named,) = answer["redistributes"]
    assert red["op"] == "aten::mm" and red["arg"] == named["arg"] == 1
    inner = red["trace"]
    assert inner["format"] == "dtsim-trace"
    assert inner["initial"]["spec"]["placements"] == named["from"] == "[S(0)]"
    assert inner["final"]["spec"]["placements"] == "[R]"
    assert [s["collective"] for s in inner["steps"]] == [s["collective"] for s in named["plan"]] == ["all_gather"]
    (coll,) = inner["steps"][0]["collectives"]
    assert coll["op"] == "all_gather" and coll["groups"] == [[0, 1, 2, 3]]
    # Closed form: 6 rows over 4 ranks are chunks 2, 2, 2, 0; every rank ends with the whole 6 x 4.
    assert [r["local_shape"] for r in inner["initial"]["ranks"]] == [[c, 4] for c in chunks(6, 4)]
    assert all(r["local_shape"] == [6, 4] for r in inner["final"]["ranks"])
    assert answer["collective_counts"]["all_gather"] == 1
    # The same trace compared with itself agrees; a changed hash is found and named.
    same = run("trace-diff", str(trace), str(trace))
    assert same.returncode == 0 and "op traces agree: mm, 1 implicit redistribution" in same.stdout
    t["redistributions"][0]["trace"]["final"]["ranks"][2]["hash"] = "xxh3:0000000000000000"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(t))
    differ = run("trace-diff", str(trace), str(bad))
    assert differ.returncode == 1 and "redistribution 1 (aten::mm arg 1): final: hash differs on rank 2" in differ.stdout


def test_trace_of_an_op_without_redistribution_and_of_a_composite(tmp_path):
    none = tmp_path / "none.json"
    out = run("op", "mm", "--mesh", "2x4", "--arg", "8x16:S(0),R", "--arg", "16x12:R,S(1)", "--trace", str(none))
    assert out.returncode == 0 and "trace written to" in out.stdout
    assert json.loads(none.read_text())["redistributions"] == []
    comp = tmp_path / "matmul.json"
    out = run("op", "matmul", "--mesh", "2x2", "--arg", "4x6:S(0),S(1)", "--arg", "6x4:S(1),R", "--json", "--trace",
              str(comp))
    assert out.returncode == 0, out.stderr
    answer, t = json.loads(out.stdout), json.loads(comp.read_text())
    # matmul of 2-d tensors decomposes into mm: the trace names the ATen op that moved its argument.
    assert [(r["op"], r["arg"]) for r in t["redistributions"]] == [("aten::mm", r["arg"]) for r in answer["redistributes"]]
    assert [r["trace"]["initial"]["spec"]["placements"] for r in t["redistributions"]] == [
        r["from"] for r in answer["redistributes"]]


def test_op_traces_that_are_not_valid_are_refused_naming_the_field(tmp_path):
    good = tmp_path / "good.json"
    assert run("op", "mm", "--mesh", "4", "--arg", "10x6:S(0)", "--arg", "6x4:S(0)", "--trace", str(good)).returncode == 0
    base = json.loads(good.read_text())
    cases = [
        (lambda t: t.update(version=2), "version 2 is not supported"),
        (lambda t: t.pop("redistributions"), "redistributions"),
        (lambda t: t["redistributions"][0].update(arg=-1), "redistributions[0].arg"),
        (lambda t: t["redistributions"][0]["trace"].update(format="x"), "redistributions[0].trace"),
        (lambda t: t["redistributions"][0]["trace"]["steps"][0].update(collective="gossip"), "unknown collective"),
    ]
    for mutate, words in cases:
        t = json.loads(json.dumps(base))
        mutate(t)
        path = tmp_path / "mutated.json"
        path.write_text(json.dumps(t))
        out = run("trace-diff", str(good), str(path))
        assert out.returncode == 2 and out.stdout == "", (words, out.stdout)
        assert "dtsim: error: trace: " in out.stderr and words in out.stderr, (words, out.stderr)
    # An op trace where a redistribution trace is expected says what it is.
    out = run("export", "--format", "perfetto", str(good), str(tmp_path / "p.json"))
    assert out.returncode == 2 and "is one op's implicit redistributions (dtsim op --trace): it has no Perfetto " \
        "export" in out.stderr, out.stderr


def test_batch_line_may_name_its_trace(tmp_path):
    trace = tmp_path / "line.json"
    line = {"mesh": [4], "op": "add.Tensor", "args": [{"shape": [8, 6], "placements": "S(0)"},
                                                      {"shape": [8, 6], "placements": "S(1)"}],
            "trace": str(trace)}
    out = run("op", "--batch", "-", stdin=json.dumps(line) + "\n")
    assert out.returncode == 0, out.stdout + out.stderr
    t = json.loads(trace.read_text())
    assert [r["arg"] for r in t["redistributions"]] == [1]
    assert t["redistributions"][0]["trace"]["steps"][0]["collective"] == "all_to_all"


def test_the_answer_says_how_the_local_op_ran_over_the_ranks():
    """docs/local-tensor.md, "Batched ranks": even row blocks batch into one call, and the verdict (the outputs
    against the op on the global tensors) still holds; uneven shards, zero-size shards and ops outside the batch
    table run per rank and say why, in the JSON answer and in the text."""
    cases = [
        (["add.Tensor", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "8x16:S(0)"], "batched (one call over 4 stacked"),
        (["add.Tensor", "--mesh", "4", "--arg", "9x16:S(0)", "--arg", "9x16:S(0)"], "per rank (uneven shards)"),
        (["mul.Tensor", "--mesh", "4", "--arg", "0x16:S(0)", "--arg", "0x16:S(0)"], "per rank (zero-size shards)"),
        (["mm", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "16x4:R"], "per rank (no batch rule for this op)"),
        # Every rank holds the same replica: one call, the others share its result.
        (["sigmoid", "--mesh", "4", "--arg", "8x16:R"], "computed once (every rank holds the same replica)"),
    ]
    for args, expected in cases:
        out = run("op", *args, "--json")
        assert out.returncode == 0, (args, out.stderr)
        obj = json.loads(out.stdout)
        assert expected in obj["local_execution"], (args, obj["local_execution"])
        assert obj["verdict"] == "OK", args
        text = run("op", *args)
        assert text.returncode == 0, text.stderr
        assert f"local op: aten::" in text.stdout and expected in text.stdout, text.stdout


def test_batched_and_per_rank_answers_are_equal_bit_for_bit():
    """The same DTensor ops with batched ranks on (the default) and off (DTSIM_BATCHED_RANKS=0): every rank's output
    values are the same, printed exactly, and only `local_execution` differs (docs/local-tensor.md, "Batched
    ranks"). The cases cover each op family of the batch table and its fallbacks."""
    cases = [  # (args, how the default run executes the local op)
        (["add.Tensor", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "8x16:S(0)"], "batched"),
        (["mul.Tensor", "--mesh", "2x2", "--arg", "6x8:S(0),S(1)", "--arg", "6x8:S(0),S(1)"], "batched"),
        (["sigmoid", "--mesh", "4", "--arg", "16x16:S(0)"], "batched"),
        (["sigmoid", "--mesh", "4", "--arg", "12x5:S(0)"], "per rank (shards not lane-aligned"),
        (["sum.dim_IntList", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "[1]"], "batched"),
        (["_softmax", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "1", "--arg", "false"], "batched"),
        (["transpose.int", "--mesh", "4", "--arg", "8x6:S(0)", "--arg", "0", "--arg", "1"], "batched"),
        (["mm", "--mesh", "4", "--arg", "8x16:S(0)", "--arg", "16x4:R"], "per rank (no batch rule"),
        (["add.Tensor", "--mesh", "4", "--arg", "9x16:S(0)", "--arg", "9x16:S(0)"], "per rank (uneven shards)"),
    ]
    for args, how in cases:
        batched = run("op", *args, "--json", "--values")
        per_rank = subprocess.run([DTSIM, "op", *args, "--json", "--values"], capture_output=True, text=True,
                                  timeout=600, env={**os.environ, "DTSIM_BATCHED_RANKS": "0"})
        assert batched.returncode == 0 and per_rank.returncode == 0, batched.stderr + per_rank.stderr
        a, b = json.loads(batched.stdout), json.loads(per_rank.stdout)
        assert how in a["local_execution"], (args, a["local_execution"])
        assert "per rank (batched ranks are off)" in b["local_execution"], b["local_execution"]
        a.pop("local_execution")
        b.pop("local_execution")
        assert a == b, args
        assert a["verdict"] == "OK", args
