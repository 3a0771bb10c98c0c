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
