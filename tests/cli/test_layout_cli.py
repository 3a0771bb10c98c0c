"""`dtsim layout` from the outside: JSON field names, the text grid against the global tensor, and the bad-input
table (each a clear error naming the field and the value, exit code 2, nothing on stdout)."""
import json
import os
import subprocess

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")


def run(*args, stdin=None):
    return subprocess.run([DTSIM, *args], capture_output=True, text=True, input=stdin, timeout=60)


def test_json_fields_and_readme_example():
    out = run("layout", "--mesh", "2x4", "--names", "dp,tp", "--shape", "5,10", "--placements", "S(0),S(1)", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert obj["mesh"] == {"shape": [2, 4], "names": ["dp", "tp"], "ranks": list(range(8))}
    assert obj["shape"] == [5, 10]
    assert obj["placements"] == "[S(0), S(1)]"
    # Closed form: rows chunk(5, 2) = 3,2; cols chunk(10, 4) = 3,3,3,1.
    rows, cols = [(0, 3), (3, 5)], [(0, 3), (3, 6), (6, 9), (9, 10)]
    for r, rank in enumerate(obj["ranks"]):
        i, j = divmod(r, 4)
        assert rank["rank"] == r and rank["coordinate"] == [i, j]
        assert rank["local_shape"] == [rows[i][1] - rows[i][0], cols[j][1] - cols[j][0]]
        assert rank["global_offset"] == [rows[i][0], cols[j][0]]
        assert rank["intervals"] == [[list(rows[i])], [list(cols[j])]]


def test_text_grid_lists_owners_of_each_block():
    out = run("layout", "--mesh", "4", "--shape", "9", "--placements", "S(0)")
    assert out.returncode == 0, out.stderr
    # 9 over 4 ranks: 3,3,3,0 — rank 3 holds nothing.
    assert "| 0:3 | 3:6 | 6:9 |" in out.stdout
    assert "| 0   | 1   | 2   |" in out.stdout
    assert "Ranks holding empty shards: [3]" in out.stdout


def test_text_grid_strided_and_replicated():
    out = run("layout", "--mesh", "2x2", "--shape", "8,8", "--placements", "_S(0,2),R")
    assert out.returncode == 0, out.stderr
    # _S(0,2) over 2: rank coordinate 0 holds rows 0:2 and 4:6, replicated over the second mesh dim.
    lines = {line.split("|")[0].strip(): line for line in out.stdout.splitlines() if "|" in line}
    assert "0,1" in lines["0:2"] and "0,1" in lines["4:6"]
    assert "2,3" in lines["2:4"] and "2,3" in lines["6:8"]


def test_huge_split_factor_is_instant():
    # _S(0, 10^11) on 4 elements: chunk size 1, four one-element pieces, each split over 2 ranks: rank 0 gets them all.
    out = run("layout", "--mesh", "2", "--shape", "4", "--placements", "_S(0,100000000000)", "--json")
    assert out.returncode == 0, out.stderr
    ranks = json.loads(out.stdout)["ranks"]
    assert ranks[0]["intervals"] == [[[0, 4]]] and ranks[1]["local_shape"] == [0]
    assert ranks[1]["global_offset"] == [4]


def test_batch_mode_reports_errors_per_line():
    out = run("layout", "--batch", "-", stdin='{"mesh": [2], "shape": [4], "placements": "S(0)"}\nnot json\n'
                                                 '{"mesh": [2], "shape": [4], "placements": "S(5)"}\n')
    assert out.returncode == 1, out.stderr  # some line failed
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 3
    assert lines[0]["ranks"][1]["global_offset"] == [2]
    assert "line 2 is not valid JSON" in lines[1]["error"] and lines[1]["field"] == "batch"
    assert "'S(5)' shards dim 5" in lines[2]["error"]


BAD_INPUTS = [
    # (arguments, field, text the message must contain)
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),Q(1)"], "placements", "'Q(1)' is not a placement"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),S(2)"], "placements", "'S(2)' shards dim 2 but the tensor has 2 dims"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),S(-3)"], "placements", "'S(-3)' shards dim -3"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0)"], "placements", "1 placement [S(0)] for mesh[2, 4] of 2 dims"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),R,R"], "placements", "3 placements"),
    (["--mesh", "2x0", "--shape", "5,10", "--placements", "S(0),R"], "mesh", "dim 1 has size 0"),
    (["--mesh", "-2", "--shape", "5,10", "--placements", "S(0)"], "mesh", "dim 0 has size -2"),
    (["--mesh", "2xq", "--shape", "5,10", "--placements", "S(0),R"], "mesh", "'q' is not an integer"),
    (["--mesh", "2x4", "--names", "dp", "--shape", "5,10", "--placements", "S(0),R"], "names", "1 names given for a mesh of 2 dims"),
    (["--mesh", "2x4", "--names", "dp,dp", "--shape", "5,10", "--placements", "S(0),R"], "names", "duplicate mesh dim name 'dp'"),
    (["--mesh", "2x4", "--shape", "5,-10", "--placements", "S(0),R"], "shape", "dim 1 has size -10"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "_S(0,0),R"], "placements", "split factor 0"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "P(mean),R"], "placements", "unknown reduce op 'mean'"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),R", "--dtype", "float7"], "dtype", "unknown dtype 'float7'"),
    (["--mesh", "2x4", "--shape", "5,10"], "placements", "missing"),
    (["--mesh", "1024x1024x2", "--shape", "5", "--placements", "S(0),R,R"], "mesh", "more than 1048576 ranks"),
    (["--mesh", "2", "--shape", "4294967296,4294967296", "--placements", "S(0)"], "shape", "more than 2^62 elements"),
    (["--mesh", "2x4", "--shape", "5,10", "--placements", "S(0),R", "--bogus"], "options", "bogus"),
]


@pytest.mark.parametrize("args,field,message", BAD_INPUTS, ids=[" ".join(a) for a, _, _ in BAD_INPUTS])
def test_bad_input_is_a_clear_error(args, field, message):
    out = run("layout", *args)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stdout == ""
    assert out.stderr.startswith(f"dtsim: error: {field}: "), out.stderr
    assert message in out.stderr, out.stderr


def test_unknown_command():
    out = run("layot")
    assert out.returncode == 2
    assert "unknown command 'layot'" in out.stderr
