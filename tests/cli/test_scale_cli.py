"""Big worlds from the outside (issue 11): --meta on layout, plan, redistribute and distribute; --memory; --ranks and
the shape summary of big worlds; metadata-only traces that trace-diff compares with data traces; worlds beyond the
former 65,536-rank limit; recordings of 2^16 and 2^20 ranks through replay, export and the viewer (issue 36).
Expected values are closed forms (torch.chunk sizes, bytes worked out by hand) or the data run of the same case."""
import json
import os
import shutil
import subprocess
import sys

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
VIEWER = os.environ.get("DTSIM_VIEWER_BIN")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from recording_scale_bench import write_recording  # noqa: E402  (one S(0) -> R all_gather over every rank)


def run(*args):
    return subprocess.run([DTSIM, *args], capture_output=True, text=True, timeout=300)


def ok_json(*args):
    out = run(*args)
    assert out.returncode == 0, (out.returncode, out.stderr)
    return json.loads(out.stdout)


def test_layout_summarises_big_worlds_and_lists_small_ones():
    # 300 ranks over 901 rows: chunk 4 -> ranks 0..224 hold 4 rows, rank 225 holds 1, ranks 226..299 hold 0.
    obj = ok_json("layout", "--mesh", "300", "--shape", "901,2", "--placements", "S(0)", "--json")
    assert "ranks" not in obj and obj["num_ranks"] == 300
    assert obj["rank_summary"] == [
        {"local_shape": [4, 2], "count": 225, "ranks": [[0, 224]]},
        {"local_shape": [1, 2], "count": 1, "ranks": [[225, 225]]},
        {"local_shape": [0, 2], "count": 74, "ranks": [[226, 299]]},
    ]
    some = ok_json("layout", "--mesh", "300", "--shape", "901,2", "--placements", "S(0)", "--json",
                   "--ranks", "225,299")
    assert [r["rank"] for r in some["ranks"]] == [225, 299]
    assert some["ranks"][0]["global_offset"] == [900, 0] and some["ranks"][1]["global_offset"] == [901, 0]
    every = ok_json("layout", "--mesh", "300", "--shape", "901,2", "--placements", "S(0)", "--json", "--ranks", "all")
    assert len(every["ranks"]) == 300 and every["mesh"]["ranks"] == list(range(300))
    small = ok_json("layout", "--mesh", "4", "--shape", "9", "--placements", "S(0)", "--json")
    assert [r["local_shape"] for r in small["ranks"]] == [[3], [3], [3], [0]]
    text = run("layout", "--mesh", "300", "--shape", "901,2", "--placements", "S(0)").stdout
    assert "300 ranks hold 3 distinct local shapes" in text and "226-299" in text


def test_layout_meta_distributes_on_shapes():
    obj = ok_json("layout", "--mesh", "16x16x16", "--shape", "4096,4096", "--placements", "S(0),S(1),R", "--json",
                  "--meta")
    assert obj["meta"] is True and obj["ok"] is True
    assert obj["rank_summary"] == [{"local_shape": [256, 256], "count": 4096, "ranks": [[0, 4095]]}]


def test_redistribute_meta_matches_the_data_run():
    case = ["--mesh", "2x4", "--shape", "5,10", "--from", "S(0),R", "--to", "R,S(1)", "--json", "--memory"]
    data = ok_json("redistribute", *case)
    meta = ok_json("redistribute", *case, "--meta")
    assert meta["meta"] is True and meta["ok"] is True
    assert meta["plan"] == data["plan"]
    assert meta["ranks"] == data["ranks"]
    assert meta["memory"] == data["memory"]
    assert all("values" not in r for r in meta["ranks"])


def test_memory_report_closed_form():
    # S(0) -> R on 2 ranks of a 3 x 3 float32 tensor: rank 0 holds rows 0:2 (24 B), rank 1 row 2 (12 B); rank 1 pads to
    # 2 rows (24 B), both gather 4 rows (48 B) and keep 3 rows as a view of it. Peaks: 24 + 48 and 12 + 24 + 48.
    for meta in ([], ["--meta"]):
        obj = ok_json("plan", "--mesh", "2", "--shape", "3,3", "--from", "S(0)", "--to", "R", "--memory", "--json",
                      *meta)
        start, step = obj["memory"]
        assert start["peak_bytes_per_rank"] == [24, 12]
        assert step["peak_bytes_per_rank"] == [72, 84]
        assert (step["min_bytes"], step["median_bytes"], step["max_bytes"], step["max_rank"]) == (72, 72, 84, 1)
    text = run("plan", "--mesh", "2", "--shape", "3,3", "--from", "S(0)", "--to", "R", "--memory", "--meta").stdout
    assert "peak memory per rank" in text and "max 84 B (rank 1)" in text


def test_plan_meta_lists_shapes_after_each_step():
    obj = ok_json("plan", "--mesh", "2x4", "--shape", "5,10", "--from", "S(0),R", "--to", "R,S(1)", "--meta", "--json")
    assert obj["ok"] and obj["meta"]
    # After step 1 (R -> S(1) on dim 1): rank 3 holds rows 0:3 and column 9 (chunk 3 of 10 over 4 is 1 wide).
    rank3 = next(r for r in obj["states"][0]["ranks"] if r["rank"] == 3)
    assert rank3["local_shape"] == [3, 1] and rank3["global_offset"] == [0, 9]
    assert "hash" not in rank3


def test_meta_trace_has_no_hashes_and_diffs_equal_to_the_data_trace(tmp_path):
    case = ["--mesh", "2x2", "--shape", "6,5", "--from", "S(0),S(1)", "--to", "S(1),S(0)"]
    data, meta = tmp_path / "data.json", tmp_path / "meta.json"
    assert run("redistribute", *case, "--trace", str(data)).returncode == 0
    assert run("redistribute", *case, "--meta", "--trace", str(meta)).returncode == 0
    trace = json.loads(meta.read_text())
    assert trace["meta"]["data"] is False
    assert all("hash" not in r for r in trace["final"]["ranks"])
    same = run("trace-diff", str(data), str(meta))
    assert same.returncode == 0, same.stdout + same.stderr
    other = tmp_path / "other.json"
    assert run("redistribute", "--mesh", "2x2", "--shape", "6,4", "--from", "S(0),S(1)", "--to", "S(1),S(0)",
               "--meta", "--trace", str(other)).returncode == 0
    assert run("trace-diff", str(meta), str(other)).returncode == 1


def test_big_meta_world_and_a_data_world_beyond_the_former_limit():
    obj = ok_json("redistribute", "--mesh", "16x16x16", "--shape", "4096,4096", "--from", "S(0),S(1),R",
                  "--to", "R,S(0),S(1)", "--meta", "--json", "--memory")
    assert obj["ok"] and obj["rank_summary"] == [{"local_shape": [256, 256], "count": 4096, "ranks": [[0, 4095]]}]
    # Peak of step 2 (S(0) -> R over 16 ranks of 256 x 4096 float32 pieces) on every rank: the source shard
    # (256 x 256), the step's input (256 x 4096, gathered in step 1) and the gathered 4096 x 4096 (64 MiB).
    assert obj["memory"][2]["min_bytes"] == obj["memory"][2]["max_bytes"] == (256 * 256 + 256 * 4096 + 4096 * 4096) * 4
    # 131,072 ranks on data (the limit was 65,536): S(0) -> R of [4], every rank ends with the whole tensor.
    big = ok_json("redistribute", "--mesh", "131072", "--shape", "4", "--from", "S(0)", "--to", "R", "--json")
    assert big["ok"] and big["rank_summary"] == [{"local_shape": [4], "count": 131072, "ranks": [[0, 131071]]}]


def test_distribute_meta():
    obj = ok_json("distribute", "--mesh", "64x64", "--names", "dp,tp", "--shape", "8192,6", "--step", "tp:S(0)",
                  "--step", "dp:S(0)", "--meta", "--json")
    assert obj["meta"] and obj["ok"] and obj["placements"] == "[_S(0,64), S(0)]"
    assert obj["rank_summary"] == [{"local_shape": [2, 6], "count": 4096, "ranks": [[0, 4095]]}]


@pytest.mark.parametrize("args,field,message", [
    (["layout", "--mesh", "8", "--shape", "4", "--placements", "R", "--ranks", "9-3"], "ranks", "runs backwards"),
    (["layout", "--mesh", "8", "--shape", "4", "--placements", "R", "--ranks", "8"], "ranks", "rank 8 is not in"),
    (["redistribute", "--mesh", "8", "--shape", "4", "--from", "S(0)", "--to", "R", "--meta", "--values"], "values",
     "--meta"),
    (["redistribute", "--mesh", "8", "--shape", "4", "--from", "S(0)", "--to", "R", "--ranks", "x"], "ranks", "x"),
    (["plan", "--mesh", "2048x1024", "--shape", "4", "--from", "S(0),R", "--to", "R,R", "--meta"], "mesh",
     "more than 1048576 ranks"),
])
def test_bad_input_is_a_clear_error(args, field, message):
    out = run(*args)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == ""
    assert out.stderr.startswith(f"dtsim: error: {field}: "), out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("n", [1 << 16, 1 << 20])
def test_recordings_of_a_big_world_replay_and_export_linear_in_ranks(tmp_path, n):
    """A recorded S(0) -> R over n ranks: replay checks the layouts and the one all_gather (no shard data: exit 3, said
    so); the Perfetto export has one slice per rank, each naming its group by id, and the group of all n ranks written
    once, so the export grows linearly (bytes per rank bounded). Time and memory bounds: bench recording_* lines."""
    path, exported = tmp_path / "r.json", tmp_path / "p.json"
    write_recording(path, n)
    out = run("replay", str(path))
    assert out.returncode == 3, out.stderr
    assert f"mesh[{n}] [{n}] float32  [S(0)] -> [R]  equal: layouts, 1 collective" in out.stdout, out.stdout
    assert "no shard was checked" in out.stdout
    out = run("export", "--format", "perfetto", str(path), str(exported))
    assert out.returncode == 0, out.stderr
    text = exported.read_text()
    assert text.count('"ph":"X"') == n  # one slice per rank
    assert text.count(f'"group":"g0 ({n} ranks)"') == n  # each names the group by id ...
    assert len(text) < 700 * n  # ... so no slice holds the group's n ranks
    tail = text[text.rindex('"otherData":'):]
    assert tail.count('"g0":[0,1,2,') == 1 and tail.count(f",{n - 1}]") == 1  # written once, whole
    if n == 1 << 16:
        doc = json.loads(text)
        slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
        assert sorted(e["pid"] for e in slices) == list(range(1, n + 1))
        assert {e["args"]["collectives"][0]["input_bytes"] for e in slices} == {4}
        assert {e["args"]["collectives"][0]["output_bytes"] for e in slices} == {4 * n}
        assert doc["otherData"]["groups"] == {"g0": list(range(n))}


@pytest.mark.skipif(not VIEWER or not shutil.which("xvfb-run"), reason="needs DTSIM_VIEWER_BIN and xvfb-run")
def test_the_viewer_opens_a_recording_of_65536_ranks(tmp_path):
    """The viewer draws the 2^16-rank recording headless, at its final frame: the mesh panel says how many ranks it
    wraps, and going to the last rank selects it."""
    n = 1 << 16
    path = tmp_path / "r.json"
    write_recording(path, n)
    records = tmp_path / "records.json"
    out = subprocess.run(["xvfb-run", "-a", VIEWER, str(path), "--screenshot", str(tmp_path / "v.png"),
                          "--dump-records", str(records), "--goto", str(n - 1), "--step", "final"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(records.read_text())
    assert d["error"] == "" and d["goto_error"] == "" and d["selected_rank"] == n - 1
    texts = [t["text"] for t in d["panels"]["mesh"]["texts"]]
    assert any(t.startswith(f"dim 0 ({n} ranks, wrapped every") for t in texts), texts[:5]
