"""The viewer and the Perfetto export on a real-vs-simulated pair: `dtsim compare` runs a redistribution simulated
and on 8 MPI ranks (with and without an injected fault) and keeps both traces; the viewer opens the pair at the first
difference and fills exactly the differing ranks with the diff colour; the export puts both runs side by side, the
real one timed by its measured times. Needs the MPI backend and xvfb-run (skipped otherwise)."""
import json
import os
import shutil
import subprocess

import pytest

from test_viewer_cli import validate_trace_events

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
VIEWER = os.environ.get("DTSIM_VIEWER_BIN", "")
DIFF_COLOR = [235, 20, 20, 255]
CASE = ["--np", "8", "--mesh", "2x4", "--names", "dp,tp", "--shape", "5,10", "--from", "S(0),R", "--to", "R,S(1)"]

pytestmark = [
    pytest.mark.skipif(os.environ.get("DTSIM_HAVE_MPI") not in ("1", "ON", "TRUE"), reason="MPI backend not built"),
    pytest.mark.skipif(not VIEWER or shutil.which("xvfb-run") is None, reason="needs dtsim-viewer and xvfb-run"),
]


def compare(tmp_path, *extra):
    keep = tmp_path / "pair"
    r = subprocess.run([DTSIM, "compare", *CASE, "--keep", str(keep), *extra], capture_output=True, text=True,
                       timeout=300)
    return r, keep / "sim.json", keep / "real.json"


def view(tmp_path, *args):
    png, records = tmp_path / "shot.png", tmp_path / "records.json"
    r = subprocess.run(["xvfb-run", "-a", VIEWER, *map(str, args), "--size", "1200x800", "--screenshot", str(png),
                        "--dump-records", str(records)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(records.read_text())


def mesh_fills(records):
    return {r["rank"]: r["fill"] for r in records["panels"]["mesh"]["rects"] if r["role"] == "mesh_cell"}


def test_a_faulty_real_run_is_drawn_where_it_parts(tmp_path):
    r, sim, real = compare(tmp_path, "--inject-fault", "wrong-offset:3")
    assert r.returncode == 1, r.stdout + r.stderr  # the traces differ
    assert json.loads(real.read_text())["meta"]["backend"] == "mpi"
    # The pair opens after the all_gather (step 2), where rank 3's wrong offset reaches ranks 3 and 7.
    records = view(tmp_path, sim, real)
    assert records["frame"] == 2
    fills = mesh_fills(records)
    assert sorted(rank for rank, fill in fills.items() if fill == DIFF_COLOR) == [3, 7]
    # Before the collective nothing differs.
    fills = mesh_fills(view(tmp_path, sim, real, "--step", "1"))
    assert not any(fill == DIFF_COLOR for fill in fills.values())
    # Side by side in Perfetto: the real run's slices carry its measured times.
    out = tmp_path / "pair.perfetto.json"
    e = subprocess.run([DTSIM, "export", "--format", "perfetto", str(sim), str(out), "--with", str(real)],
                       capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    by_ph, names = validate_trace_events(json.loads(out.read_text()))
    assert len(names) == 16
    real_trace = json.loads(real.read_text())
    [step] = [s for s in real_trace["steps"] if s["collectives"]]
    c = step["collectives"][0]
    measured = [x for x in by_ph["X"] if x["tid"] == 2 and x["args"]["time_source"] == "measured"]
    assert len(measured) == len(c["ranks"])
    for x in measured:
        i = c["ranks"].index(x["pid"] - 10_000_001)
        assert x["dur"] == pytest.approx(round(c["time_us"][i] * 1000) / 1000, abs=1e-9)


def test_an_agreeing_real_run_has_no_diff_colour(tmp_path):
    r, sim, real = compare(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    records = view(tmp_path, sim, real)
    assert records["frame"] == 0  # no difference: the pair opens at the start
    assert not any(fill == DIFF_COLOR for fill in mesh_fills(records).values())
