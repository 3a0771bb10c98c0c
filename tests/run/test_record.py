"""`dtsim record -- torchrun` against `dtsim run --trace`: the op-level differential (docs/recording.md, "Events").

The reference is the simulation of the same script; real ranks are torchrun + Gloo on this machine. A clean real run
must agree with it event for event (every DTensor op and every collective, FSDP2's included); a fault planted in the
real run only (tests/run/scripts/env_faults.py, DTSIM_TEST_FAULT) must be located at its collective, module, pass and
rank. These tests fail if the recorder misses FSDP2's collectives, if a digest is not compared, or if the diff names
another event.
"""
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "env_faults.py")
DTSIM = os.environ.get("DTSIM_BIN", os.path.join(ROOT, "build", "dtsim"))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", DTSIM_PYTHON=sys.executable)


def run(argv, env=None, timeout=300):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env or ENV)


def simulate(folder, script, nproc=4):
    """`dtsim run --trace` of `script` on `nproc` simulated ranks: the reference recording."""
    path = str(folder / "sim.json")
    p = run([DTSIM, "run", "--nproc-per-node", str(nproc), "--trace", path, script])
    assert p.returncode == 0, p.stderr
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("sim"), SCRIPT)


def record(tmp_path, fault=None):
    path = str(tmp_path / f"real-{fault or 'clean'}.json")
    env = dict(ENV, DTSIM_TEST_FAULT=fault) if fault else ENV
    p = run([DTSIM, "record", "-o", path, "--"] + TORCHRUN + [SCRIPT], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "4 ranks recorded" in p.stderr
    return path


def diff(a, b):
    return run([DTSIM, "trace-diff", a, b])


VIEWER = os.environ.get("DTSIM_VIEWER_BIN", "")
DIFF_RED = [235, 20, 20, 255]  # viewer/model/colors.h kDiffColor


def viewer_events(tmp_path, *paths):
    """dtsim-viewer opened headless on `paths`: its events window as --dump-records gives it, and the fill of each
    rank's cell in the rank strip and of each event row (by key "e<index>"). Skips without the viewer or xvfb-run."""
    if not VIEWER or shutil.which("xvfb-run") is None:
        pytest.skip("needs dtsim-viewer and xvfb-run")
    records = tmp_path / "records.json"
    p = subprocess.run(["xvfb-run", "-a", VIEWER, *paths, "--screenshot", str(tmp_path / "events.png"),
                        "--dump-records", str(records)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    dump = json.loads(records.read_text())
    panels = dump["panels"]
    cells = {r["rank"]: r["fill"] for r in panels["event_ranks"]["rects"] if r["role"] == "mesh_cell"}
    rows = {r["key"]: r["fill"] for r in panels["event_rows"]["rects"] if r["role"] == "tree_row"}
    return dump["events"], cells, rows


def first_divergence(stdout):
    """(rank, event) of trace-diff's first line: "recordings differ; first at rank R, event I: ..."."""
    head = stdout.splitlines()[0]
    rank, event = head.split("first at rank ")[1].split(":")[0].split(", event ")
    return int(rank), int(event)


def test_clean_run_agrees_event_for_event(tmp_path, sim):
    real = record(tmp_path)
    with open(real) as f:
        doc = json.load(f)
    events = doc["events"]
    assert sorted(events) == ["0", "1", "2", "3"]
    for rank, evs in events.items():
        collectives = [(e["op"], e["module"], e["pass"]) for e in evs if e["kind"] == "collective"]
        # FSDP2: one all-gather per block in each forward, one reduce-scatter per block in each backward (the root
        # holds no parameters of its own): 2 blocks, 3 steps.
        assert sum(1 for c in collectives if c[0] == "all_gather" and c[2] == "forward"
                   and c[1].startswith("FSDPModel")) == 6, collectives
        assert sum(1 for c in collectives if c[0] == "reduce_scatter" and c[2] == "backward") == 6, collectives
        assert any(e["kind"] == "op" and e["op"] == "aten.addmm.default" and e["module"].endswith("layers.0.fc1")
                   for e in evs)
        # Every all-gather's output was digested again at its first read (FSDP2's copy-out), unchanged; every op
        # that reads an unsharded parameter names that all-gather as its input's producer, through the copy-out.
        gathers = [i for i, e in enumerate(evs) if e["kind"] == "collective" and e["op"] == "all_gather"]
        assert gathers and all(evs[i]["first_read"]["op"].startswith("fsdp.split_with_sizes_copy")
                               and [d["hash"] for d in evs[i]["first_read"]["outputs"]]
                               == [d["hash"] for d in evs[i]["outputs"]] for i in gathers), rank
        through = [s for e in evs if e["kind"] == "op" for s in e.get("from", []) if isinstance(s, dict)]
        assert any(evs[s["event"]]["op"] == "all_gather" and s["op"].startswith("fsdp.split_with_sizes_copy")
                   for s in through), rank
    with open(sim) as f:
        sim_events = json.load(f)["events"]
    assert {r: len(v) for r, v in sim_events.items()} == {r: len(v) for r, v in events.items()}
    p = diff(real, sim)
    assert p.returncode == 0, p.stdout
    assert "recordings agree" in p.stdout and "events" in p.stdout


def _digests(path):
    """Every event's input and output hashes, rank by rank: [(rank, index, op, inputs, outputs)]."""
    with open(path) as f:
        events = json.load(f)["events"]
    return [(r, i, e["op"], [d and d.get("hash") for d in e.get("inputs") or []],
             [d and d.get("hash") for d in e.get("outputs") or []])
            for r, evs in sorted(events.items()) for i, e in enumerate(evs)]


def test_cached_digests_are_the_tensors_values(tmp_path, sim):
    """The recorder reuses a tensor's digest until it may have changed. Its reference: the same run with every tensor
    digested at every use (DTSIM_RECORD_DIGEST_CACHE=0), for the real run and the simulation alike. This fails if a
    write escapes the cache: AdamW's in-place updates of DTensors (their local tensors keep their versions) and FSDP2's
    copy-out of its all-gathered parameters (versions preserved, storage reallocated in place)."""
    uncached = dict(ENV, DTSIM_RECORD_DIGEST_CACHE="0")
    real, real_ref = record(tmp_path), str(tmp_path / "real-uncached.json")
    p = run([DTSIM, "record", "-o", real_ref, "--"] + TORCHRUN + [SCRIPT], env=uncached)
    assert p.returncode == 0, p.stderr[-3000:]
    sim_ref = str(tmp_path / "sim-uncached.json")
    p = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", sim_ref, SCRIPT], env=uncached)
    assert p.returncode == 0, p.stderr[-3000:]
    for cached, reference in ((real, real_ref), (sim, sim_ref)):
        got, want = _digests(cached), _digests(reference)
        assert len(got) == len(want)
        wrong = [(g, w) for g, w in zip(got, want) if g != w]
        assert not wrong, (cached, len(wrong), wrong[:3])
    # An in-place op's outputs are its written arguments after it: AdamW's first exp_avg.lerp_(grad) turns zeros into
    # the gradient's share, so its output differs from its input 0 (the zeros).
    lerps = [d for d in _digests(real) if d[2] == "aten.lerp_.Scalar"]
    assert lerps and all(d[4] and d[4][0] != d[3][0] for d in lerps[:4]), lerps[:4]


def test_gpu_checks_program_on_gloo_ranks(tmp_path):
    """scripts/gpu_check.sh's op-level program (tests/python/recorded_nccl_ops_program.py) on 2 Gloo ranks, as it runs
    on NCCL ranks there: the clean real run agrees with its simulation, and the planted transport fault is located at
    rank 0's all-reduce of the logged loss, classed computed, with the program's line."""
    script = os.path.join(ROOT, "tests", "python", "recorded_nccl_ops_program.py")
    env = dict(ENV, DTSIM_RECORD_DEVICE="cpu")
    torchrun = TORCHRUN[:-1] + ["2", script]
    sim_path = str(tmp_path / "sim.json")
    p = run([DTSIM, "run", "--nproc-per-node", "2", "--trace", sim_path, script], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    for fault in (None, "allreduce_corrupt"):
        path = str(tmp_path / f"real-{fault}.json")
        p = run([DTSIM, "record", "-o", path, "--"] + torchrun, env=dict(env, DTSIM_TEST_FAULT=fault or ""))
        assert p.returncode == 0, p.stderr[-3000:]
        d = diff(path, sim_path)
        if fault is None:
            assert d.returncode == 0 and d.stdout.startswith("recordings agree"), d.stdout
            continue
        assert d.returncode == 1, d.stdout
        rank, event = first_divergence(d.stdout)
        assert rank == 0 and "all_reduce over [0, 1]" in d.stdout.splitlines()[0], d.stdout
        assert f"rank 0, event {event} (computed): all_reduce" in d.stdout
        assert "recorded_nccl_ops_program.py:" in d.stdout.splitlines()[0], d.stdout


def test_corrupted_all_gather_is_located_at_its_collective(tmp_path, sim):
    real = record(tmp_path, "allgather_corrupt")
    p = diff(real, sim)
    assert p.returncode == 1, p.stdout
    first = p.stdout.splitlines()[1]
    # Rank 1's second FSDP2 all-gather: layers.1's, in the first forward.
    assert first.startswith("  rank 1, event "), first
    assert "(computed): all_gather over [1, 3] in FSDPModel.layers.1 (forward)" in first, first
    assert "the collective delivered another result to this rank while this rank's input was equal" in first
    # The viewer on the same pair opens there, at rank 1; the ranks red in its rank strip are those trace-diff lists
    # (the corrupted bytes reach the others later), rank 1's diverging event is the red row, the details name the
    # cause.
    rank, event = first_divergence(p.stdout)
    listed = sorted(int(line.split()[1].rstrip(",")) for line in p.stdout.splitlines() if line.startswith("  rank "))
    events, cells, rows = viewer_events(tmp_path, real, sim)
    assert (events["rank"], events["event"]) == (rank, event) == (1, event)
    assert events["ranks_diverging"] == listed
    assert {r for r, fill in cells.items() if fill == DIFF_RED} == set(listed), cells
    assert {k for k, fill in rows.items() if fill == DIFF_RED} == {f"e{event}"}, rows
    assert any("the collective delivered another result" in line for line in events["details"]), events["details"]


def test_write_after_an_all_gathers_wait_names_the_all_gather(tmp_path, sim):
    """Rank 1's second FSDP2 all-gather completes intact, then its output changes before FSDP2 copies the parameters
    out. Every event the rank recorded agrees; the first op to read the parameter differs in its input, and the diff
    names the storage's last producer (that all-gather, through FSDP2's copy-out) and says its output changed after
    it completed in the real run only (its digest at completion against its first read)."""
    real = record(tmp_path, "allgather_after_wait")
    p = diff(real, sim)
    assert p.returncode == 1, p.stdout
    first = p.stdout.splitlines()[1]
    assert first.startswith("  rank 1, event ") and "(input): " in first, first
    rank, event = first_divergence(p.stdout)
    with open(real) as f:
        events = json.load(f)["events"]["1"]
    # The producer the diff names is the all-gather before the read: layers.1's in the first forward, the last
    # all-gather of rank 1 before the diverging event (by the recording, not by the diff's text).
    gathers = [i for i, e in enumerate(events[:event]) if e["kind"] == "collective" and e["op"] == "all_gather"]
    producer = gathers[-1]
    assert events[producer]["module"] == "FSDPModel.layers.1" and events[producer]["pass"] == "forward"
    assert f"last written by event {producer}, all_gather over [1, 3] in FSDPModel.layers.1 (forward)" in first, first
    assert "then fsdp.split_with_sizes_copy.default at " in first and "(in both runs)" in first, first
    completed = events[producer]["outputs"][0]["hash"]
    read = events[producer]["first_read"]["outputs"][0]["hash"]
    assert completed != read
    assert (f"in the first run, its output changed after it completed: {completed} at completion, {read} at its "
            "first read, by fsdp.split_with_sizes_copy") in first, first
    assert "in the second, its output was unchanged at its first read" in first, first


def test_averaging_reduce_scatter_is_located_on_every_rank(tmp_path, sim):
    p = diff(record(tmp_path, "reduce_scatter_avg"), sim)
    assert p.returncode == 1, p.stdout
    lines = p.stdout.splitlines()
    firsts = [line for line in lines[1:] if line.startswith("  rank ")]
    assert len(firsts) == 4, p.stdout
    for line in firsts:
        assert "(input): reduce_scatter over" in line and "in FSDPModel (backward)" in line, line
    # The sketches say by how much: the real input is half the simulated one.
    assert "written outside the recorded ops and collectives" in firsts[0]


def test_every_collective_names_its_own_group_though_the_groups_boxes_share_an_address(tmp_path):
    # c10d's ops hand each call's group boxed anew; a cache keyed by the box's address named the world's all-reduce
    # by a dp group whose freed box had the same address (a CI failure of the test below, at its last collective).
    path = str(tmp_path / "boxes.json")
    script = os.path.join(os.path.dirname(__file__), "scripts", "group_boxes.py")
    p = run([DTSIM, "record", "-o", path, "--"] + TORCHRUN + [script])
    assert p.returncode == 0, p.stderr[-3000:]
    with open(path) as f:
        events = json.load(f)["events"]
    assert sorted(events) == ["0", "1", "2", "3"], sorted(events)
    for rank, evs in events.items():
        dp = [0, 2] if int(rank) % 2 == 0 else [1, 3]
        groups = [e["group"] for e in evs if e.get("kind") == "collective" and e.get("op") == "all_reduce"]
        expected = [dp if i % 2 else [0, 1, 2, 3] for i in range(200)]  # group_boxes.py's CALLS
        # new_group's own store-based setup issues no all-reduce on Gloo; any other all-reduce would show here.
        assert groups == expected, (rank, [i for i, (g, e) in enumerate(zip(groups, expected)) if g != e][:5],
                                    len(groups))


def test_async_read_before_its_wait_is_located_at_the_collective_and_the_read(tmp_path, sim):
    real = record(tmp_path, "async_read_early")
    p = diff(real, sim)
    assert p.returncode == 1, p.stdout
    firsts = [line for line in p.stdout.splitlines() if line.startswith("  rank ")]
    # Rank 0 alone read the final all-reduce's result (`seen.item()`) before waiting; the recorder saw the read while
    # the work had not completed. No other rank and no earlier event diverges.
    assert len(firsts) == 1 and firsts[0].startswith("  rank 0, event "), p.stdout
    assert "(read before wait): all_reduce over [0, 1, 2, 3] in Global (forward) at" in firsts[0], firsts[0]
    assert "aten._local_scalar_dense.default at " in firsts[0] and "env_faults.py:" in firsts[0], firsts[0]
    assert "(in the first run only)" in firsts[0], firsts[0]
    # The same race in both runs is the program's bug, not a divergence: the verdict agrees and names it.
    with open(real) as f:
        raced = json.load(f)
    with open(sim) as f:
        simulated = json.load(f)
    marked = [(i, e["read_before_wait"]) for i, e in enumerate(raced["events"]["0"]) if "read_before_wait" in e]
    assert len(marked) == 1, marked
    simulated["events"]["0"][marked[0][0]]["read_before_wait"] = marked[0][1]
    both = tmp_path / "sim-raced.json"
    both.write_text(json.dumps(simulated))
    p = diff(real, str(both))
    assert p.returncode == 0, p.stdout
    assert "recordings agree" in p.stdout and "race in the program: rank 0, event " in p.stdout, p.stdout
    assert "(in both runs)" in p.stdout, p.stdout


def test_diff_is_symmetric_in_verdict(tmp_path, sim):
    real = record(tmp_path, "allgather_corrupt")
    assert diff(sim, real).returncode == 1


def test_functional_collective_results_are_digested_under_the_memory_meter(tmp_path):
    """RowwiseParallel's reduce-scatter result reaches the next op as an AsyncCollectiveTensor when a dispatch mode
    (the memory meter of --report-json) is active: its digest is the waited value's, equal to the run without the
    meter, not "unavailable" (40 of them in tp_sp.py before)."""
    script = os.path.join(ROOT, "examples", "python", "run", "tp_sp.py")
    traces = {}
    for name, extra in (("metered", ["--report-json", str(tmp_path / "r.json")]), ("plain", [])):
        path = str(tmp_path / f"{name}.json")
        p = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", path, *extra, script])
        assert p.returncode == 0, p.stderr[-3000:]
        with open(path) as f:
            traces[name] = json.load(f)["events"]
    for name, events in traces.items():
        missing = [(r, e["op"], e.get("line")) for r, evs in events.items() for e in evs
                   for d in e.get("inputs", []) + (e.get("outputs") or []) if d.get("hash") is None]
        assert not missing, (name, missing[:5])
    hashes = {name: [[d["hash"] for d in e.get("inputs", [])] for r in sorted(ev) for e in ev[r]]
              for name, ev in traces.items()}
    assert hashes["metered"] == hashes["plain"]


def test_ddp_buckets_divided_after_the_all_reduce_are_not_misjudged(tmp_path):
    """DDP divides each gradient bucket in place as soon as its all-reduce completes. The recorder digests the bucket
    when the work completes, and keeps no digest where the division came first (its version counter moved): such an
    all-reduce is not checked, never judged different. The real run agrees with the simulation."""
    script = os.path.join(ROOT, "examples", "python", "run", "ddp.py")
    real = str(tmp_path / "ddp.json")
    p = run([DTSIM, "record", "-o", real, "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node", "2", script])
    assert p.returncode == 0, p.stderr[-3000:]
    with open(real) as f:
        events = json.load(f)["events"]["0"]
    reduces = [e for e in events if e["op"] == "all_reduce" and e["pass"] == "backward"]
    assert len(reduces) == 5
    assert all(e["outputs"] is not None or "DDP" in e["unavailable"] for e in reduces), reduces
    sim = str(tmp_path / "sim.json")
    assert run([DTSIM, "run", "--nproc-per-node", "2", "--trace", sim, script]).returncode == 0
    p = diff(real, sim)
    assert p.returncode == 0, p.stdout


QUIET_PROGRAM = r"""
import hashlib, threading, time
from dtsim import recorder
# A thread that computes past the program's end without the GIL (as Gloo's worker thread, starved of CPU, runs on to
# destroy its work), then takes the GIL: the exit-time wait returns only after it finished, with the GIL free for it.
finished = []
def late():
    hashlib.pbkdf2_hmac("sha256", b"dtsim", b"salt", 500000)  # releases the GIL while it hashes
    finished.append(time.monotonic())
thread = threading.Thread(target=late, daemon=True)
thread.start()
recorder._wait_for_quiet_threads()
print("waited past its end", bool(finished) and time.monotonic() >= finished[0], flush=True)
start = time.monotonic()
recorder._wait_for_quiet_threads()
print("no wait when quiet", time.monotonic() - start < 1.0, flush=True)
"""


def test_the_rank_hook_waits_until_no_other_thread_runs():
    """Upstream's Gloo teardown race (docs/recording.md, "Upstream's teardown race"): Gloo's worker thread destroys a
    finished work, releasing its tensors' Python objects and backward's contextvars Context with the GIL; a worker
    starved until Python finalizes aborts the rank. `dtsim record`'s rank hook waits at exit, with the GIL free, until
    no other thread is runnable. Checked against a thread that computes past the program's end: the wait returns only
    after it finished, and at once when nothing runs."""
    p = run([sys.executable, "-c", QUIET_PROGRAM])
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["waited past its end True", "no wait when quiet True"], p.stdout


def test_record_refuses_bad_input(tmp_path):
    cases = [
        ([DTSIM, "record", "--", "true"], "output"),
        ([DTSIM, "record", "-o", str(tmp_path / "r.json")], "command: missing"),
        ([DTSIM, "record", "-o", str(tmp_path / "no" / "r.json"), "--", "true"], "No such file or directory"),
        ([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--max-data-bytes", "-1", "--", "true"], "max-data-bytes"),
        ([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--max-data-bytes", "x", "--", "true"], "max-data-bytes"),
        ([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--memory", "--no-ops", "--", "true"], "memory: "),
        ([DTSIM, "record", "-o", str(tmp_path), "--", "true"], "not a regular file"),
        ([DTSIM, "record", "-o", SCRIPT, "--", sys.executable, SCRIPT], "is the same file as the input of the command"),
        ([DTSIM, "record", "-o", "/dev/null", "--", "true"], "'/dev/null' is not a regular file"),
        ([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--", "/nonexistent/cmd"], "cannot run"),
        # A command that starts no rank records nothing: refused, nothing written.
        ([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--", "true"], "no rank recorded"),
    ]
    for argv, needle in cases:
        p = run(argv)
        assert p.returncode == 2, (argv, p.returncode, p.stderr)
        assert needle in p.stderr, (argv, p.stderr)
    assert not os.path.exists(tmp_path / "r.json")


def test_cpu_ranks_record_their_memory_with_the_meter(tmp_path):
    """`dtsim record --memory` on CPU ranks (torchrun + Gloo, no allocator statistics): every rank's memory at its
    module boundaries, counted by dtsim's tensor meter, against the closed form of tests/run/scripts/cpu_memory.py
    (rank r's Spike ends 16 bytes above its begin and peaks (r + 1) MiB + 16 above it). Without --memory, none."""
    script = os.path.join(os.path.dirname(__file__), "scripts", "cpu_memory.py")
    torchrun = TORCHRUN[:-1] + ["2", script]
    path = tmp_path / "mem.json"
    p = run([DTSIM, "record", "-o", str(path), "--memory", "--"] + torchrun)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(path.read_text())
    assert doc["meta"]["memory_source"] == "dtsim meter" and sorted(doc["memory"]) == ["0", "1"]
    for r in range(2):
        samples = {(s["module"], s["pass"], s["at"]): s for s in doc["memory"][str(r)]}
        begin, end = samples[("Outer.spike", "forward", "begin")], samples[("Outer.spike", "forward", "end")]
        assert end["bytes"] - begin["bytes"] == 16, (r, begin, end)
        assert end["peak"] - begin["bytes"] == (r + 1) * (1 << 20) + 16, (r, begin, end)
        outer = samples[("Outer", "forward", "end")]
        assert outer["peak"] >= end["peak"], (r, outer, end)
    p = run([DTSIM, "record", "-o", str(tmp_path / "plain.json"), "--"] + torchrun)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "memory" not in json.loads((tmp_path / "plain.json").read_text())


def test_failed_command_writes_nothing(tmp_path):
    out = tmp_path / "r.json"
    p = run([DTSIM, "record", "-o", str(out), "--", sys.executable, "-c", "import sys; sys.exit(3)"])
    assert p.returncode == 3 and "no recording written" in p.stderr
    assert not out.exists()


# ---- Flight Recorder: real Gloo dumps (torch's own _dump_fr_trace, as the watchdog writes them) ----
HANG = os.path.join(os.path.dirname(__file__), "scripts", "rank_hang.py")


@pytest.fixture(scope="module")
def hang_sim(tmp_path_factory):
    return simulate(tmp_path_factory.mktemp("hang"), HANG)


def fr_dumps(tmp_path, fault=None):
    folder = tmp_path / ("fr-" + (fault or "clean"))
    folder.mkdir()
    env = dict(ENV, TORCH_FR_BUFFER_SIZE="2000", DTSIM_TEST_FR_DIR=str(folder))
    if fault:
        env["DTSIM_TEST_FAULT"] = fault
    p = run(TORCHRUN + [HANG], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    dumps = sorted(str(f) for f in folder.iterdir())
    assert len(dumps) == 4
    out = str(tmp_path / f"fr-{fault or 'clean'}.json")
    p = run([DTSIM, "import-fr", "-o", out] + dumps)
    assert p.returncode == 0, p.stderr
    return out


def test_flight_recorder_clean_run_agrees(tmp_path, hang_sim):
    p = diff(fr_dumps(tmp_path), hang_sim)
    assert p.returncode == 0, p.stdout
    assert "collectives in the same order" in p.stdout and "values not checked" in p.stdout


def test_flight_recorder_hang_is_explained(tmp_path, hang_sim):
    fr = fr_dumps(tmp_path, "skip_all_reduce")
    with open(fr) as f:
        events = json.load(f)["events"]
    # Real Gloo dumps: the TP run's scatters, broadcasts and all-reduces, every one with its state.
    assert {e["op"] for e in events["0"]} >= {"scatter", "all_reduce"}
    p = diff(fr, hang_sim)
    assert p.returncode == 1, p.stdout
    firsts = [line for line in p.stdout.splitlines() if line.startswith("  rank ")]
    by_rank = {int(line.split()[1].rstrip(",")): line for line in firsts}
    assert set(by_rank) == {0, 1, 2, 3}, p.stdout
    # Rank 1 never issued the final all-reduce; the simulation names it, with its line.
    assert "(missing): all_reduce over [0, 1, 2, 3] in Global (forward) at" in by_rank[1], by_rank[1]
    assert "rank_hang.py:" in by_rank[1]
    for r in (0, 2, 3):
        assert "(never completed): all_reduce over [0, 1, 2, 3]" in by_rank[r], by_rank[r]
    # The viewer on the dumps alone: every rank's sequence, ranks 0, 2 and 3 red at the all-reduce they issued and
    # never completed (the dumps' states say so), rank 1 not (everything it issued completed).
    stuck = {r: next(i for i, e in enumerate(evs) if e["state"] != "completed")
             for r, evs in ((int(r), evs) for r, evs in events.items())
             if any(e["state"] != "completed" for e in evs)}
    assert set(stuck) == {0, 2, 3}, stuck
    shown, cells, rows = viewer_events(tmp_path, fr)
    assert shown["ranks_diverging"] == [0, 2, 3]
    assert (shown["rank"], shown["event"]) == (0, stuck[0])
    assert {r for r, fill in cells.items() if fill == DIFF_RED} == {0, 2, 3}, cells
    assert {k for k, fill in rows.items() if fill == DIFF_RED} == {f"e{stuck[0]}"}, rows
    # Beside the simulation: all four ranks diverge, rank 1 at the all-reduce it never issued.
    shown, cells, _ = viewer_events(tmp_path, fr, hang_sim)
    assert shown["ranks_diverging"] == [0, 1, 2, 3]
    assert {r for r, fill in cells.items() if fill == DIFF_RED} == {0, 1, 2, 3}, cells


# ---- Flight Recorder dumps that other torch releases and NCCL wrote (tests/run/fr_dumps/README.md) ----
FR_DUMPS = os.path.join(os.path.dirname(__file__), "fr_dumps")


def import_fr(tmp_path, folder, name):
    dumps = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("rank"))
    out = str(tmp_path / f"{name}.json")
    p = run([DTSIM, "import-fr", "-o", out] + dumps)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("release", ["gloo-torch-2.14.1", "gloo-torch-2.15.0"])
def test_flight_recorder_dumps_of_newer_torch_releases(tmp_path, hang_sim, release):
    # rank_hang.py's real Gloo dumps, written by those releases' own torchrun: the clean run agrees, and the hang is
    # explained as with this venv's torch.
    clean = import_fr(tmp_path, os.path.join(FR_DUMPS, release, "clean"), "clean")
    with open(clean) as f:
        doc = json.load(f)
    assert doc["meta"]["fr_version"].startswith("2.") and sorted(doc["events"]) == ["0", "1", "2", "3"]
    p = diff(clean, hang_sim)
    assert p.returncode == 0, p.stdout
    assert "collectives in the same order" in p.stdout and "every one completed" in p.stdout
    p = diff(import_fr(tmp_path, os.path.join(FR_DUMPS, release, "hang"), "hang"), hang_sim)
    assert p.returncode == 1, p.stdout
    by_rank = {int(line.split()[1].rstrip(",")): line for line in p.stdout.splitlines() if line.startswith("  rank ")}
    assert set(by_rank) == {0, 1, 2, 3}, p.stdout
    assert "(missing): all_reduce over [0, 1, 2, 3] in Global (forward) at" in by_rank[1], by_rank[1]
    for r in (0, 2, 3):
        assert "(never completed): all_reduce over [0, 1, 2, 3]" in by_rank[r], by_rank[r]
        assert "never issued by rank 1" in by_rank[r], by_rank[r]


def test_flight_recorder_nccl_dump_of_a_pending_collective(tmp_path):
    # A real NCCL dump (one rank on an H200, torch 2.11): five completed collectives, then an all-reduce queued behind
    # a long kernel. Both forms (the pickle and the JSON) give the same recording; against the simulation, the
    # collectives agree and the last one is pending with every member having issued it.
    sim = simulate(tmp_path, os.path.join(os.path.dirname(__file__), "scripts", "nccl_pending.py"), nproc=1)
    folder = os.path.join(FR_DUMPS, "nccl-torch-2.11.0")
    pickled = import_fr(tmp_path, folder, "pickled")
    from_json = import_fr(tmp_path, os.path.join(folder, "json"), "json")
    with open(pickled) as f:
        events = json.load(f)["events"]["0"]
    with open(from_json) as f:
        json_events = json.load(f)["events"]["0"]
    assert [e["op"] for e in events] == ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                                         "all_reduce"]
    assert [e["state"] for e in events] == ["completed"] * 5 + ["scheduled"]
    # Times from the dump: each collective's creation since the rank's first, and NCCL's measured duration where the
    # collective completed (the pending one has none).
    with open(os.path.join(folder, "rank0"), "rb") as f:
        entries = pickle.load(f)["entries"]
    created = [e["time_created_ns"] for e in entries]
    assert [e["t_us"] for e in events] == [(c - created[0]) / 1000.0 for c in created]
    assert [e.get("dur_us") for e in events] == [e["duration_ms"] * 1000.0 for e in entries[:5]] + [None]
    # The JSON form has no stack frames: everything but the program's line is the same.
    assert [dict(e, line="") for e in events] == json_events
    # The program's line skips torch's frames, though they are another machine's installation, and the simulation's
    # skips the deprecation wrapper around all_gather_into_tensor and reduce_scatter_tensor (typing_extensions).
    with open(sim) as f:
        sim_events = [e for e in json.load(f)["events"]["0"] if e["kind"] == "collective"]
    for e in events + sim_events:
        assert "nccl_pending.py:" in e["line"], e
    for fr in (pickled, from_json):
        p = diff(fr, sim)
        assert p.returncode == 1, p.stdout
        firsts = [line for line in p.stdout.splitlines() if line.startswith("  rank ")]
        assert len(firsts) == 1 and "rank 0, event 5 (never completed): all_reduce over [0]" in firsts[0], p.stdout
        assert "every member of the group issued it" in firsts[0], firsts[0]


def test_import_fr_refuses_bad_dumps(tmp_path):
    import pickle

    good = {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}
    evil = tmp_path / "evil0"
    # A pickle that would call os.system on load: refused by the plain-data unpickler, never run.
    evil.write_bytes(b"cos\nsystem\n(S'touch " + str(tmp_path / "pwned").encode() + b"'\ntR.")
    truncated = tmp_path / "trunc0"
    truncated.write_bytes(pickle.dumps(good)[:-5])
    (tmp_path / "empty0").write_bytes(b"")
    (tmp_path / "v0").write_text(json.dumps(dict(good, version="9.1")))
    (tmp_path / "noentries0").write_text(json.dumps({"version": "2.10"}))
    (tmp_path / "norank").write_text(json.dumps(good))
    (tmp_path / "badentry0").write_text(json.dumps(dict(good, entries=[{"profiling_name": "gloo:all_reduce"}])))
    (tmp_path / "a0").write_text(json.dumps(good))
    (tmp_path / "b0").write_text(json.dumps(good))
    out = str(tmp_path / "fr.json")
    cases = [
        (["evil0"], "plain data"), (["trunc0"], "not a Flight Recorder dump"), (["empty0"], "is empty"),
        (["v0"], "version '9.1' is not supported"), (["noentries0"], "no 'entries'"),
        (["norank"], "does not end in the rank"), (["badentry0"], "entries[0] has no 'record_id'"),
        (["a0", "b0"], "are both rank 0's"), (["missing0"], "cannot read"),
    ]
    for names, needle in cases:
        p = run([DTSIM, "import-fr", "-o", out] + [str(tmp_path / n) for n in names])
        assert p.returncode == 2, (names, p.stderr)
        assert needle in p.stderr, (names, p.stderr)
    assert not (tmp_path / "pwned").exists()
    assert not os.path.exists(out)
    p = run([DTSIM, "import-fr", "-o", str(tmp_path / "a0"), str(tmp_path / "a0")])
    assert p.returncode == 2 and "is the same file as the input of dump" in p.stderr


# ---- consistency inside one run: `dtsim trace-diff RECORDING` names the rank whose replica differs ----
REPLICAS = os.path.join(os.path.dirname(__file__), "scripts", "replicas.py")


def line_of(script, statement):
    """The script's line number of `statement` (read from the file, not from dtsim)."""
    with open(script) as f:
        return next(i for i, line in enumerate(f, 1) if line.strip() == statement)


@pytest.mark.parametrize("fault, rank, op, argument, statement", [
    ("", None, None, None, None),
    ("replica_write", 1, "aten.mm.default", "argument 1 ([R])", "z = torch.mm(y, w)"),
    ("skip_grad_reduce", 2, "aten.mul.Tensor", "argument 0 ([R])", "w = w - 0.1 * g"),
])
def test_one_recording_names_the_rank_whose_replica_differs(tmp_path, fault, rank, op, argument, statement):
    """tests/run/scripts/replicas.py under torchrun + Gloo, recorded: a replica written on one rank, or a gradient one
    rank never reduced, is named alone at the first op that reads it, with its argument, op, module and line; the
    clean run is consistent. The simulation of the faulty script (the script's own bug) finds the same."""
    path = str(tmp_path / "real.json")
    env = dict(ENV, DTSIM_TEST_FAULT=fault)
    p = run([DTSIM, "record", "-o", path, "--"] + TORCHRUN + [REPLICAS], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    sims = []
    if fault == "replica_write":
        sim = str(tmp_path / "sim.json")
        p = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", sim, REPLICAS], env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        sims.append(sim)
    for recording in [path] + sims:
        p = run([DTSIM, "trace-diff", recording])
        if not fault:
            assert p.returncode == 0, p.stdout
            assert p.stdout.startswith("recording consistent: every replica compared is equal; 4 DTensor ops on 1 mesh"), p.stdout
            continue
        assert p.returncode == 1, p.stdout
        firsts = [line for line in p.stdout.splitlines() if line.startswith("  rank ")]
        assert len(firsts) == 1, p.stdout
        assert firsts[0].startswith(f"  rank {rank}, event "), firsts[0]
        assert f"(input): {op} in Global (forward) at " in firsts[0], firsts[0]
        assert f"replicas.py:{line_of(REPLICAS, statement)}: {argument}: rank {rank} holds " in firsts[0], firsts[0]
        others = sorted({0, 1, 2, 3} - {rank})
        assert f"its replicas (ranks {others}) hold " in firsts[0], firsts[0]
        # Provenance: the planted write's own line (a plain copy_ over the broadcast replica), or, for the gradient
        # never reduced, that no event wrote this rank's storage while a replica's was written by the all-reduce.
        with open(recording) as f:
            events = json.load(f)["events"]
        if fault == "replica_write":
            planted = line_of(REPLICAS, "w.to_local()[0, 0] += 1.0  # the planted write: one replica only")
            assert f"broadcast over [0, 1, 2, 3] in Global (forward) at {REPLICAS}:" in firsts[0], firsts[0]
            assert f"then aten.copy_.default at {REPLICAS}:{planted};" in firsts[0], firsts[0]
        else:
            reduce = next(i for i, e in enumerate(events["0"]) if e["kind"] == "collective" and e["op"] == "all_reduce")
            assert ("no recorded event wrote its storage on this rank; on rank 0 (a replica) its storage was last "
                    f"written by event {reduce}, all_reduce over [0, 1, 2, 3] in Global (forward) at {REPLICAS}:"
                    f"{line_of(REPLICAS, 'dist.all_reduce(reduced)')}") in firsts[0], firsts[0]


def test_record_removes_the_folders_of_killed_records(tmp_path):
    """A `dtsim record` killed by SIGKILL leaves its working folder (dtsim-record-<pid>-*) in the temporary
    directory; the next one removes it, and leaves the folder of a record that still runs."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp / f"dtsim-record-{dead.pid}-abc"
    (stale / "boot").mkdir(parents=True)
    (stale / "boot" / "sitecustomize.py").write_text("")
    live = tmp / f"dtsim-record-{os.getpid()}-def"
    live.mkdir()
    p = run([DTSIM, "record", "-o", str(tmp_path / "r.json"), "--", "true"], env=dict(ENV, TMPDIR=str(tmp)))
    assert p.returncode == 2 and "no rank recorded" in p.stderr, p.stderr
    assert not stale.exists()
    assert live.exists()
    assert sorted(os.listdir(tmp)) == [live.name]  # its own folder is gone too
