"""Model traces (`dtsim model --trace`) end to end: the Perfetto export of fresh runs validated event by event against
the Trace Event Format (test_viewer_cli.validate_trace_events: nesting per track, names, times on the nanosecond grid)
and against the trace (every event of the run on every exported rank's track, each op's collectives inside it); a
4,096-rank metadata run exported as a sample of ranks and opened in the viewer; and (label mpi) a real 8-rank MPI run
with a fault beside the simulation, in the viewer (opening at trace-diff's first difference) and in the export."""
import json
import os
import shutil
import subprocess
import time
from collections import defaultdict

import pytest

from test_viewer_cli import validate_trace_events

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
VIEWER = os.environ.get("DTSIM_VIEWER_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(ROOT, "tests", "backends", "mpirun.sh")
SMALL = ["--mesh", "2x4", "--names", "dp,tp", "--plan", "fsdp+tp", "--backward", "--dim", "32", "--heads", "4",
         "--layers", "2", "--vocab", "40", "--seq", "8", "--batch", "2"]
BIG = ["--mesh", "512x8", "--names", "dp,tp", "--plan", "fsdp+tp", "--dim", "8192", "--heads", "64", "--ffn", "28672",
       "--seq", "8192", "--batch", "512", "--layers", "1", "--vocab", "128256", "--meta", "--backward"]

needs_viewer = pytest.mark.skipif(not VIEWER or shutil.which("xvfb-run") is None,
                                  reason="needs dtsim-viewer and xvfb-run")


def run(*args, timeout=300):
    return subprocess.run([DTSIM, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def model_trace(path, *args):
    r = run("model", *args, "--trace", path)
    assert r.returncode == 0, r.stderr
    return json.loads(open(path).read())


def export(tmp_path, trace, *extra):
    out = tmp_path / "out.json"
    r = run("export", "--format", "perfetto", trace, out, *extra)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    return json.loads(out.read_text())


def in_group(collective, rank):
    return not collective["groups"] or any(rank in g for g in collective["groups"])


def check_every_event(trace, slices, rank):
    """Every event of `trace` is on the track of `rank` once: module calls and backward as module slices, ops with each
    collective they caused as its children (inside it), standalone collectives, parameters, loss, gradients."""
    by_event = defaultdict(list)
    for s in slices:
        if s["cat"] != "phase":
            by_event[s["args"]["event"]].append(s)
    for i, e in enumerate(trace["events"]):
        got = by_event.get(i, [])
        if e["event"] == "module_end":
            assert not got, (i, e)
            continue
        if e["event"] == "collective" and not in_group(e["collectives"][0], rank):
            assert not got
            continue
        mine = [c for c in e.get("collectives", []) if in_group(c, rank)] if e["event"] == "op" else []
        assert len(got) == 1 + len(mine), (rank, i, e["event"], [s["name"] for s in got])
        head = got[0]
        if e["event"] in ("module_begin", "backward_begin"):
            assert head["cat"] == "module" and head["name"] == e["module"]
        elif e["event"] == "op":
            assert head["cat"] == "op" and head["name"] == e["op"]
            assert head["args"]["placements"] == e["placements"]
            end = head["ts"] + head["dur"]
            for s, c in zip(got[1:], mine):
                assert s["cat"] == "collective" and s["args"]["cause"] == c["cause"]
                assert s["args"]["implicit"] == c["implicit"]
                assert head["ts"] < s["ts"] and s["ts"] + s["dur"] < end
                assert rank in s["args"]["group"]
        elif e["event"] == "collective":
            assert head["cat"] == "collective"
            assert head["args"]["groups"] == len(e["collectives"][0]["groups"])
            assert head["args"]["bytes_sent"] == e["collectives"][0]["bytes_sent_per_rank"]
        tensor = e.get("tensor")
        if tensor and "hashes" in tensor:
            key = {"module_begin": "input", "backward_begin": "output_gradient"}.get(e["event"], "tensor")
            assert head["args"][key]["hash"] == tensor["hashes"][rank]
            assert head["args"][key]["shape"] == tensor["shape"]


def tracks(doc):
    out = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            out[e["pid"]].append(e)
    return out


def test_export_nests_every_event_of_a_run(tmp_path):
    trace = model_trace(tmp_path / "sim.json", *SMALL)
    doc = export(tmp_path, tmp_path / "sim.json")
    by_ph, names = validate_trace_events(doc)
    assert sorted(names) == list(range(1, 9))
    assert names[4] == "rank 3 [dp=0, tp=3]"
    for pid, slices in tracks(doc).items():
        check_every_event(trace, slices, pid - 1)
    phases = [s["name"] for s in tracks(doc)[1] if s["cat"] == "phase"]
    assert phases == ["setup", "forward", "backward", "end"]
    info = doc["otherData"]["traces"][0]
    assert info["ranks_exported"] == list(range(8)) and info["rank_selection"] == "all 8 ranks"


def test_export_two_runs_side_by_side(tmp_path):
    model_trace(tmp_path / "a.json", *SMALL)
    model_trace(tmp_path / "b.json", *SMALL)
    doc = export(tmp_path, tmp_path / "a.json", "--with", tmp_path / "b.json")
    by_ph, names = validate_trace_events(doc)
    assert len(names) == 16
    assert names[1].startswith("simulated (local) a.json: rank 0")
    assert names[10_000_001].startswith("simulated (local) b.json: rank 0")


def test_a_4096_rank_metadata_run_exports_a_sample_and_opens_fast(tmp_path):
    trace = model_trace(tmp_path / "big.json", *BIG)
    assert trace["meta"]["data"] is False and trace["meta"]["world_size"] == 4096
    start = time.monotonic()
    doc = export(tmp_path, tmp_path / "big.json")
    seconds = time.monotonic() - start
    by_ph, names = validate_trace_events(doc)
    assert sorted(names) == [r + 1 for r in (0, 1, 7, 8, 4088, 4095)]
    assert "6 of 4096 ranks" in doc["otherData"]["traces"][0]["rank_selection"]
    for pid, slices in tracks(doc).items():
        check_every_event(trace, slices, pid - 1)
    assert seconds < 30, seconds  # about 1 s here
    if VIEWER and shutil.which("xvfb-run"):
        records = tmp_path / "records.json"
        start = time.monotonic()
        r = subprocess.run(["xvfb-run", "-a", VIEWER, tmp_path / "big.json", "--select-rank", "4095", "--screenshot",
                            tmp_path / "big.png", "--dump-records", records], capture_output=True, text=True,
                           timeout=120)
        seconds = time.monotonic() - start
        assert r.returncode == 0, r.stderr
        dump = json.loads(records.read_text())
        assert dump["model"]["rank"] == 4095
        assert dump["model"]["rows"][0]["label"] == "Global"
        assert seconds < 30, seconds  # about 1.5 s with Xvfb's start


def real_pair(tmp_path, *fault):
    sim, real = tmp_path / "sim.json", tmp_path / "real.json"
    model_trace(sim, *SMALL)
    r = subprocess.run(["bash", MPIRUN, "8", DTSIM, "model", *SMALL, "--backend", "mpi", "--trace", str(real), *fault],
                       capture_output=True, text=True, timeout=600)
    assert real.exists(), r.stdout + r.stderr
    return sim, real


@pytest.mark.skipif(os.environ.get("DTSIM_HAVE_MPI") not in ("1", "ON", "TRUE"), reason="MPI backend not built")
@needs_viewer
def test_mpi_real_run_with_a_fault_in_the_viewer_and_the_export(tmp_path):
    sim, real = real_pair(tmp_path, "--inject-fault", "wrong-offset:2@3")
    diff = run("trace-diff", sim, real)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    first = diff.stdout.splitlines()[0]  # "model traces differ; first at event N: ..."
    event = int(first.split("first at event ")[1].split(":")[0]) - 1
    records = tmp_path / "records.json"
    r = subprocess.run(["xvfb-run", "-a", VIEWER, sim, real, "--screenshot", tmp_path / "pair.png", "--dump-records",
                        records], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    model = json.loads(records.read_text())["model"]
    assert model["first_event"] == event
    assert model["summary"].startswith("differ: first at event %d: " % (event + 1))
    [selected] = [row for row in model["rows"] if row["key"] == model["selected"]]
    assert selected["differs"]
    doc = export(tmp_path, sim, "--with", real)
    by_ph, names = validate_trace_events(doc)
    assert len(names) == 16
    assert any(n.startswith("real (mpi) real.json: rank 2 ") for n in names.values())
    real_trace = json.loads(real.read_text())
    for pid, slices in tracks(doc).items():
        if pid > 10_000_000:
            check_every_event(real_trace, slices, pid - 10_000_001)
