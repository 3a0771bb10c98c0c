"""`dtsim export --format perfetto` and `dtsim layout --svg/--png` from the outside.

The export is validated event by event against the Trace Event Format (the JSON Object Format that Perfetto and
chrome://tracing read): phases, required fields, nesting of complete events per thread, flow events bound inside
slices, process and thread names; and checked against the trace it came from (processes = ranks, one slice per
collective row with the plan's estimate or the measured time, one flow per group). Perfetto's own Python trace
processor is not used: it downloads its trace_processor_shell binary on first use, which an offline machine cannot
(docs/viewer.md)."""
import json
import os
import struct
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
META = os.environ.get("DTSIM_META_TRACE_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = os.path.join(ROOT, "traces")
GOLDEN = sorted(f for f in os.listdir(TRACES) if f.endswith(".json"))


def run(*args):
    return subprocess.run([DTSIM, *args], capture_output=True, text=True, timeout=120)


def decimals_ok(x):
    """Times lie on a whole-nanosecond grid: x microseconds * 1000 is an integer."""
    return abs(x * 1000 - round(x * 1000)) < 1e-6


def validate_trace_events(doc):
    """Checks `doc` against the Trace Event Format (JSON Object Format) for the phases dtsim writes; returns the events
    grouped by phase."""
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)
    assert "displayTimeUnit" not in doc  # some Perfetto versions read it as the unit of "ts"
    by_ph = defaultdict(list)
    names = {}          # pid -> process name
    threads = set()     # (pid, tid) with a thread name
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        assert ph in ("X", "M", "s", "t", "f"), e
        assert isinstance(e.get("pid"), int) and e["pid"] > 0, e
        by_ph[ph].append(e)
        if ph == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name"), e
            if e["name"] == "process_name":
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
                assert e["pid"] not in names, f"two names for pid {e['pid']}"
                names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                assert isinstance(e["tid"], int)
                threads.add((e["pid"], e["tid"]))
            else:
                assert isinstance(e["args"]["sort_index"], int)
            continue
        assert isinstance(e.get("tid"), int), e
        assert isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0 and decimals_ok(e["ts"]), e
        assert isinstance(e.get("name"), str) and e["name"], e
        assert isinstance(e.get("cat"), str), e
        if ph == "X":
            assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0 and decimals_ok(e["dur"]), e
            assert isinstance(e.get("args"), dict), e
        else:
            assert isinstance(e.get("id"), int), e
    # Every process and thread with events is named.
    for e in by_ph["X"]:
        assert e["pid"] in names and (e["pid"], e["tid"]) in threads, e
    # Complete events of one thread nest or follow each other: never a partial overlap.
    tracks = defaultdict(list)
    for e in by_ph["X"]:
        tracks[(e["pid"], e["tid"])].append(e)
    for key, events in tracks.items():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in events:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            if stack:
                assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"], f"{key}: {e} overlaps {stack[-1]}"
            stack.append(e)
    # Flows: one start and one end per id, steps between, same name and category, each inside a slice of its thread,
    # the end bound to its enclosing slice.
    flows = defaultdict(list)
    for ph in ("s", "t", "f"):
        for e in by_ph[ph]:
            flows[e["id"]].append(e)
    for fid, events in flows.items():
        phases = sorted(e["ph"] for e in events)
        assert phases.count("s") == 1 and phases.count("f") == 1, (fid, phases)
        assert len({(e["name"], e["cat"]) for e in events}) == 1, fid
        for e in events:
            inside = [x for x in tracks[(e["pid"], e["tid"])] if x["ts"] <= e["ts"] <= x["ts"] + x["dur"]]
            assert inside, f"flow {fid} point {e} is in no slice of its thread"
        assert [e for e in events if e["ph"] == "f"][0].get("bp") == "e"
    return by_ph, names


def export(tmp_path, trace, *extra):
    out = tmp_path / "out.json"
    r = run("export", "--format", "perfetto", trace, str(out), *extra)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", GOLDEN)
def test_export_golden_traces(tmp_path, name):
    path = os.path.join(TRACES, name)
    trace = json.loads(open(path).read())
    by_ph, names = validate_trace_events(export(tmp_path, path))
    world = trace["meta"]["world_size"]
    assert sorted(names) == [r + 1 for r in trace["initial"]["spec"]["mesh"]["ranks"]]
    assert len(names) == world
    steps = [e for e in by_ph["X"] if e["tid"] == 1]
    collectives = [e for e in by_ph["X"] if e["tid"] == 2]
    assert len(steps) == world * len(trace["steps"])
    expected_rows, expected_flows = 0, 0
    for s, step in enumerate(trace["steps"]):
        for c in step["collectives"]:
            expected_rows += len(c["ranks"])
            expected_flows += sum(1 for g in c["groups"] if len(g) > 1)
            for i, rank in enumerate(c["ranks"]):
                [e] = [e for e in collectives if e["pid"] == rank + 1 and e["args"]["step"] == s + 1]
                assert e["name"] == c["op"]
                # Simulated: the plan step's estimate (one collective per step here), on the nanosecond grid.
                assert e["dur"] == pytest.approx(round(step["est_us"] * 1000) / 1000, abs=1e-9)
                assert e["args"]["bytes_sent"] == c["bytes_sent"][i]
                assert e["args"]["bytes_received"] == c["bytes_received"][i]
                assert e["args"]["input_shape"] == c["input_shapes"][i]
                assert e["args"]["output_shape"] == c["output_shapes"][i]
                assert rank in e["args"]["group"]
    assert len(collectives) == expected_rows
    assert len({e["id"] for e in by_ph["s"]}) == expected_flows


@pytest.mark.skipif(not META, reason="needs the dtsim_make_meta_trace tool (DTSIM_META_TRACE_BIN)")
def test_export_measured_times(tmp_path):
    trace_path = tmp_path / "real.json"
    r = subprocess.run([META, "--mesh", "2x2x2", "--names", "pp,dp,tp", "--shape", "8,8", "--from", "S(0),S(1),R",
                        "--to", "R,R,S(0)", "--measured", str(trace_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    trace = json.loads(trace_path.read_text())
    assert trace["meta"]["backend"] == "nccl"
    by_ph, names = validate_trace_events(export(tmp_path, str(trace_path)))
    assert len(names) == 8
    step_start = 0.0
    for s, step in enumerate(trace["steps"]):
        slowest = 0.0
        for c in step["collectives"]:
            for i, rank in enumerate(c["ranks"]):
                [e] = [e for e in by_ph["X"] if e["tid"] == 2 and e["pid"] == rank + 1 and e["args"]["step"] == s + 1]
                assert e["args"]["time_source"] == "measured"
                assert e["dur"] == pytest.approx(round(c["time_us"][i] * 1000) / 1000, abs=1e-9)
                assert e["ts"] == pytest.approx(step_start, abs=1e-9)
                slowest = max(slowest, e["dur"])
        for e in by_ph["X"]:
            if e["tid"] == 1 and e["args"]["step"] == s + 1:
                assert e["ts"] == pytest.approx(step_start, abs=1e-9)
                assert e["dur"] == pytest.approx(slowest if step["collectives"] else 0, abs=1e-9)
        step_start += (slowest if step["collectives"] else round(step["est_us"] * 1000) / 1000) + 0.001


def test_export_two_traces_side_by_side(tmp_path):
    a = os.path.join(TRACES, "partial_2x2_Psum_to_S0.json")
    by_ph, names = validate_trace_events(export(tmp_path, a, "--with", a))
    assert len(names) == 8
    labels = sorted(names.values())
    assert labels[0].startswith("simulated (local) partial_2x2_Psum_to_S0.json: rank 0 [dp=0, tp=0]")


@pytest.mark.parametrize("args, message", [
    (["trace", "out"], "dtsim: error: format: missing: give --format perfetto"),
    (["--format", "chrome", "trace", "out"], "dtsim: error: format: 'chrome' is not supported (supported: perfetto)"),
    (["--format", "perfetto", "trace"], "dtsim: error: file: give the trace and the output file"),
    (["--format", "perfetto", "same", "same"], "dtsim: error: file: 'same' is the same file as the input of file"),
    (["--format", "perfetto", "/nonexistent.json", "OUT"], "dtsim: error: trace: cannot open '/nonexistent.json'"),
    (["--format", "perfetto", "BROKEN", "OUT"], "dtsim: error: trace: "),
    (["--format", "perfetto", "GOLDEN", "/nonexistent/dir/out.json"], "dtsim: error: file: cannot write"),
])
def test_export_bad_input(tmp_path, args, message):
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "dtsim-trace", "version": 1, "meta": {}, ')
    out = tmp_path / "out.json"
    args = [{"BROKEN": str(broken), "OUT": str(out), "GOLDEN": os.path.join(TRACES, GOLDEN[0])}.get(a, a) for a in args]
    r = run("export", *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(message), r.stderr
    assert r.stdout == ""
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["broken.json"]  # no temporary left behind


LAYOUT = ["layout", "--mesh", "4x2", "--names", "dp,tp", "--shape", "13,6", "--placements", "S(0),S(0)"]


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_layout_svg_and_png(tmp_path):
    svg, png = tmp_path / "layout.svg", tmp_path / "layout.png"
    plain = run(*LAYOUT)
    r = run(*LAYOUT, "--svg", str(svg), "--png", str(png))
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout  # the text output is unchanged
    layout = json.loads(run(*LAYOUT, "--json").stdout)
    holders = sorted(x["rank"] for x in layout["ranks"] if 0 not in x["local_shape"])
    assert holders == [0, 1, 2, 3, 4, 5, 6]  # 13 rows: rank 7 holds nothing
    root = ET.fromstring(svg.read_text())
    rects = [e.attrib for e in root.iter("{http://www.w3.org/2000/svg}rect")]
    cells = sorted(int(a["data-rank"]) for a in rects if a.get("data-role") == "mesh_cell")
    owners = sorted(int(a["data-rank"]) for a in rects if a.get("data-role") == "tensor_owner")
    empties = [int(a["data-rank"]) for a in rects if a.get("data-role") == "empty_shard"]
    assert cells == list(range(8))
    assert owners == holders
    assert empties == [7]
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "mesh[dp=4, tp=2] [S(0), S(0)] shape=[13, 6] float32" in texts
    w, h = png_size(png.read_bytes())
    assert (int(root.attrib["width"]), int(root.attrib["height"])) == (w, h)


def test_layout_picture_bad_output(tmp_path):
    r = run(*LAYOUT, "--svg", str(tmp_path / "no" / "such" / "dir.svg"))
    assert r.returncode == 2
    assert r.stderr.startswith("dtsim: error: svg: cannot write"), r.stderr
    assert r.stdout == ""
    r = run(*LAYOUT, "--png", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.startswith("dtsim: error: png: ") and "is a directory" in r.stderr, r.stderr
    r = run("layout", "--batch", "-", "--png", str(tmp_path / "x.png"))
    assert r.returncode == 2
    assert r.stderr.startswith("dtsim: error: batch: --png cannot be given with --batch"), r.stderr
    assert list(tmp_path.iterdir()) == []
