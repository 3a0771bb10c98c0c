"""dtsim.record + dtsim replay on real upstream runs: 4 Gloo ranks under torchrun run tests/python/recorded_program.py
(a ColwiseParallel/RowwiseParallel MLP forward and backward, explicit uneven redistributions on 1-D and 2-D meshes,
an implicit one from op dispatch); the recording replays as equal; its twin with rank 2's S(i) -> S(j) corrupted by a
monkeypatched upstream method replays as different, naming the redistribution and rank 2; the same program under
upstream's LocalTensorMode replays as equal; tampered recordings are caught. Expected collectives and bytes are
computed here from torch.chunk sizes, not read from dtsim. Async results (tests/python/recorded_async_program.py, 2
Gloo ranks): hashed when the program waits for them, equal to their synchronous twins' although the program writes
them in place right after; one written around the recorder's hooks is recorded as unavailable and replay reports it
as not checked (exit 3)."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "recorded_program.py")
ASYNC_PROGRAM = os.path.join(HERE, "recorded_async_program.py")
DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def torchrun(out, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    # --standalone: torchrun binds its own free port and keeps it (two jobs picking "free" ports race)
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node", "4", PROGRAM, str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, "\n".join(l for l in proc.stderr.splitlines() if "alltoall" not in l)[-8000:]
    assert os.path.exists(out) and os.path.exists(str(out) + ".data")


def replay(path, *extra):
    return subprocess.run([DTSIM, "replay", str(path), *extra], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    torchrun(d / "run.json")
    torchrun(d / "bad.json", {"DTSIM_CORRUPT_RANK": "2"})
    return d


def test_ops_true_records_every_ranks_events_in_the_block(tmp_path):
    """dtsim.record(path, ops=True) on real ranks: rank 0 gathers every rank's events with the rows; the recording
    replays as before, and diffs equal with itself event for event (a diff that compares nothing would say so)."""
    out = tmp_path / "ops.json"
    torchrun(out, {"DTSIM_RECORD_OPS": "1"})
    doc = json.load(open(out))
    assert sorted(doc["events"]) == ["0", "1", "2", "3"]
    for rank, events in doc["events"].items():
        ops = [e for e in events if e["kind"] == "op"]
        assert ops and all(e["outputs"] is not None for e in ops), rank
        # Every op's output digest is of the rank's own local tensor: the replicas of a Replicate result agree.
    replicated = [[e["outputs"][0]["hash"] for e in doc["events"][str(r)] if e["kind"] == "op"
                   and e["results"] == ["[R]"]] for r in range(4)]
    assert replicated[0] and replicated[0] == replicated[1] == replicated[2] == replicated[3]
    assert replay(out).returncode == 0
    same = subprocess.run([DTSIM, "trace-diff", str(out), str(out)], capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and "recordings agree: " in same.stdout, same.stdout
    assert f"{sum(len(v) for v in doc['events'].values())} events" in same.stdout
    # Times: each event's start and duration on its rank's clock, in the order the rank ran them, none overlapping
    # the next (a collective inside an op is the op's, not an event).
    for rank, events in doc["events"].items():
        assert all(e["t_us"] >= 0 and e["dur_us"] >= 0 for e in events), rank
        assert all(a["t_us"] + a["dur_us"] <= b["t_us"] + 1e-3 for a, b in zip(events, events[1:])), rank
    # dtsim export puts them on a track of their own, at those times.
    perfetto = tmp_path / "ops.perfetto.json"
    r = subprocess.run([DTSIM, "export", "--format", "perfetto", str(out), str(perfetto)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    slices = [e for e in json.load(open(perfetto))["traceEvents"] if e["ph"] == "X" and e["tid"] == 3]
    for rank, events in doc["events"].items():
        mine = [e for e in slices if e["pid"] == int(rank) + 1]
        assert [e["args"]["index"] for e in mine] == list(range(len(events)))
        for s, e in zip(mine, events):
            assert abs(s["ts"] - e["t_us"]) < 0.002 and abs(s["dur"] - max(e["dur_us"], 0.001)) < 0.002
            assert s["name"] == (e["op"] if e["kind"] == "op" else "collective " + e["op"])


def chunks(n, parts):
    c = -(-n // parts)
    return [max(0, min(n, (r + 1) * c) - min(n, r * c)) for r in range(parts)]


def test_the_recording_holds_what_upstream_ran(recorded):
    doc = json.load(open(recorded / "run.json"))
    assert doc["format"] == "dtsim-recording" and doc["meta"]["backend"] == "torch-gloo"
    assert doc["meta"]["world_size"] == 4 and doc["meta"]["data_complete"]
    recs = doc["redistributions"]
    calls = [(r["call"], r["op"], r["src"]["placements"], r["dst"]["placements"]) for r in recs]
    # Colwise output stays sharded; Rowwise's Partial output -> Replicate is the style's redistribute; the bias of a
    # Rowwise linear is added as Partial by addmm (R -> P, local); the explicit and implicit cases of the program.
    assert ("redistribute", None, "[P(sum)]", "[R]") in calls
    assert ("implicit", "aten::addmm", "[R]", "[P(sum)]") in calls
    assert ("redistribute", None, "[S(0)]", "[S(1)]") in calls
    assert ("full_tensor", None, "[S(1)]", "[R]") in calls
    assert ("redistribute", None, "[P(sum)]", "[S(0)]") in calls
    assert ("implicit", "aten::add.Tensor", "[S(1)]", "[S(0)]") in calls
    assert ("redistribute", None, "[S(0), S(1)]", "[R, S(0)]") in calls
    assert any(c[0] == "backward" for c in calls)
    s0s1 = recs[calls.index(("redistribute", None, "[S(0)]", "[S(1)]"))]
    # 7x5 float32, S(0) -> S(1) over 4 ranks: Gloo has no all_to_all, upstream all-gathers the padded shard
    # (rows padded to ceil(7/4) = 2, columns to a multiple of 4: 8) and chunks it
    (ag,) = s0s1["collectives"]
    assert ag["op"] == "all_gather" and ag["groups"] == [[0, 1, 2, 3]]
    assert ag["input_bytes"] == [2 * 8 * 4] * 4 and ag["output_bytes"] == [4 * 2 * 8 * 4] * 4
    assert [r["local_shape"] for r in s0s1["ranks_after"]] == [[7, c] for c in chunks(5, 4)]
    two_d = recs[calls.index(("redistribute", None, "[S(0), S(1)]", "[R, S(0)]"))]
    assert [c["groups"] for c in two_d["collectives"]] == [[[0, 1], [2, 3]], [[0, 2], [1, 3]]]
    assert all(len(r["time_us"]) == 4 for r in recs)
    # on the tp submesh of (dp=2, tp=2) every rank runs in its own tp group: 7x3 S(0) -> S(1) gathers rows padded to
    # ceil(7/2) = 4 and columns padded to a multiple of 2 (4) in both groups
    sub = [r for r in recs if r["src"].get("submesh") == ["tp"]]
    assert [(r["call"], r["src"]["placements"], r["dst"]["placements"]) for r in sub] == \
        [("redistribute", "[S(0)]", "[S(1)]"), ("full_tensor", "[S(1)]", "[R]"), ("redistribute", "[P(sum)]", "[R]")]
    (ag,) = sub[0]["collectives"]
    assert ag["groups"] == [[0, 1], [2, 3]] and ag["input_bytes"] == [4 * 4 * 4] * 4


def test_a_real_run_replays_as_equal(recorded):
    out = replay(recorded / "run.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verdict: the recorded run's redistributions equal dtsim's simulation" in out.stdout
    assert "all_to_all runs as all_gather on Gloo" in out.stdout
    js = json.loads(replay(recorded / "run.json", "--json").stdout)
    assert js["equal"] and js["redistributions_without_data"] == 0
    assert all(r["shards_checked"] == 4 and r["equal"] for r in js["redistributions"])


def test_the_corrupted_twin_names_the_step_and_rank(recorded):
    out = replay(recorded / "bad.json")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.load(open(recorded / "bad.json"))
    first = next(r["index"] for r in doc["redistributions"]
                 if r["src"]["placements"] == "[S(0)]" and r["dst"]["placements"] == "[S(1)]")
    assert f"first at redistribution #{first} (redistribute), rank 2\n" in out.stdout
    js = json.loads(replay(recorded / "bad.json", "--json").stdout)
    differing = {r["index"]: r["differing_ranks"] for r in js["redistributions"] if not r["equal"]}
    assert differing[first] == [2]
    assert all(ranks == [2] for ranks in differing.values())  # only S(i) -> S(j) steps, only rank 2


def test_a_recording_exports_to_perfetto(recorded, tmp_path):
    out = tmp_path / "p.json"
    r = subprocess.run([DTSIM, "export", "--format", "perfetto", str(recorded / "run.json"), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.load(open(recorded / "run.json"))
    events = json.load(open(out))["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 4 * len(doc["redistributions"])  # one per rank and redistribution
    for rank in range(4):
        mine = [e for e in slices if e["pid"] == rank + 1]
        assert [e["args"]["index"] for e in mine] == list(range(len(doc["redistributions"])))
        assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(mine, mine[1:]))  # in order, no overlap
        for e, rec in zip(mine, doc["redistributions"]):
            assert abs(e["dur"] - rec["time_us"][str(rank)]) < 0.002
            assert e["name"].endswith(f"{rec['src']['placements']} -> {rec['dst']['placements']}")


@pytest.mark.skipif(not os.environ.get("DTSIM_VIEWER_BIN") or not shutil.which("xvfb-run"),
                    reason="needs dtsim-viewer and xvfb-run")
def test_a_recording_opens_in_the_viewer(recorded, tmp_path):
    """Every recorded redistribution of the real 4-rank Gloo run draws, with the recorded hashes and collectives."""
    doc = json.load(open(recorded / "run.json"))
    for index in range(len(doc["redistributions"])):
        png, dump = tmp_path / f"r{index}.png", tmp_path / f"r{index}.json"
        r = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24", os.environ["DTSIM_VIEWER_BIN"],
                            str(recorded / "run.json"), "--redistribution", str(index), "--step", "final",
                            "--screenshot", str(png), "--dump-records", str(dump)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        records = json.load(open(dump))
        assert records["redistribution"] == index
        cells = [x for x in records["panels"]["mesh"]["rects"] if x["role"] == "mesh_cell"]
        assert sorted(c["rank"] for c in cells) == [0, 1, 2, 3]


def test_local_tensor_mode_run_replays_as_equal(tmp_path):
    out = tmp_path / "local.json"
    proc = subprocess.run([sys.executable, PROGRAM, str(out), "--local"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.load(open(out))["meta"]["backend"] == "torch-local"
    r = replay(out)
    assert r.returncode == 0, r.stdout + r.stderr


def test_past_the_data_cap_replay_checks_layouts_and_says_so(tmp_path):
    out = tmp_path / "capped.json"
    proc = subprocess.run([sys.executable, PROGRAM, str(out), "--local"], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, DTSIM_RECORD_CAP="400"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.load(open(out))
    assert not doc["meta"]["data_complete"]
    without = sum(r["data"] is None for r in doc["redistributions"])
    assert 0 < without < len(doc["redistributions"])
    r = replay(out)
    assert r.returncode == 0 and f"{without} redistributions past the recorder's data cap" in r.stdout, r.stdout


def test_a_replay_that_checked_no_shard_is_not_equal(tmp_path):
    """max_data_bytes=0 keeps no shard: replay compares layouts, collectives and bytes, recomputes no value, and says
    so (exit 3, "no shard was checked"), never "equals"."""
    out = tmp_path / "empty.json"
    proc = subprocess.run([sys.executable, PROGRAM, str(out), "--local"], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, DTSIM_RECORD_CAP="0"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(r["data"] is None for r in json.load(open(out))["redistributions"])
    r = replay(out)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "verdict: no shard was checked" in r.stdout and "redistributions equal dtsim's simulation" not in r.stdout, r.stdout
    js = json.loads(replay(out, "--json").stdout)
    assert js["equal"] is False and js["shards_checked"] == 0


def test_tampered_recordings_are_caught(recorded, tmp_path):
    for name in ("run.json", "run.json.data"):
        shutil.copy(recorded / name, tmp_path / name)
    doc = json.load(open(tmp_path / "run.json"))
    k = next(i for i, r in enumerate(doc["redistributions"]) if r["collectives"])
    doc["redistributions"][k]["ranks_after"][1]["hash"] = "xxh3:0123456789abcdef"
    (tmp_path / "hash.json").write_text(json.dumps(doc))
    shutil.copy(tmp_path / "run.json.data", tmp_path / "hash.json.data")
    doc2 = json.load(open(tmp_path / "hash.json"))
    doc2["meta"]["data_file"] = "run.json.data"
    (tmp_path / "hash.json").write_text(json.dumps(doc2))
    out = replay(tmp_path / "hash.json")
    assert out.returncode == 1 and f"first at redistribution #{k}" in out.stdout and "rank 1" in out.stdout
    # an edited data file: the source no longer hashes to what the run recorded, so the file is not this recording's:
    # an invalid input (exit 2, nothing printed on stdout), not a run that differs
    data = bytearray(open(tmp_path / "run.json.data", "rb").read())
    data[0] ^= 0xFF
    open(tmp_path / "run.json.data", "wb").write(bytes(data))
    out = replay(tmp_path / "run.json")
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert "dtsim: error: recording: data file: redistribution #" in out.stderr and \
        "stale or edited data file" in out.stderr, out.stderr
    # no data file: layouts, collectives and bytes only, said so
    os.unlink(tmp_path / "run.json.data")
    out = replay(tmp_path / "run.json")
    # No shard checked: not "equal" (exit 3), and the output says why.
    assert out.returncode == 3 and "is missing: shards are not recomputed" in out.stdout, out.stdout
    assert "verdict: no shard was checked" in out.stdout
    # a collective the simulation does not run
    doc["redistributions"][k]["ranks_after"][1]["hash"] = json.load(open(recorded / "run.json"))[
        "redistributions"][k]["ranks_after"][1]["hash"]
    c = doc["redistributions"][k]["collectives"][0]
    c["op"] = "all_gather" if c["op"] == "all_reduce" else "all_reduce"
    (tmp_path / "coll.json").write_text(json.dumps(doc))
    out = replay(tmp_path / "coll.json")
    assert out.returncode == 1 and "dtsim runs" in out.stdout


@pytest.mark.parametrize("mutate,words", [
    (lambda d: d.update(format="dtsim-trace"), "format"),
    (lambda d: d.update(version=2), "version 2 is not supported"),
    (lambda d: d["redistributions"][0]["ranks_after"].pop(), "ranks_after: has 3 ranks"),
    (lambda d: d["redistributions"][0].update(call="magic"), "call"),
    (lambda d: d["redistributions"][0]["src"].update(placements="[S(5)]"), "S(5)"),
    (lambda d: d["redistributions"][0]["ranks_before"][0].update(rank=9), "rank 9 is not in"),
    (lambda d: d["redistributions"][0]["data"][0].update(offset=1 << 40), "beyond the end of the data file"),
    (lambda d: d["redistributions"][0]["data"][0].update(offset=(1 << 63) - 1),
     "from offset 9223372036854775807 lie beyond the end of the data file"),
    (lambda d: d["meta"].update(data_file="../etc/passwd"), "data_file"),
    (lambda d: d["redistributions"][0].update(time_us={"0": -1}), "time"),
    (lambda d: d["redistributions"][0]["ranks_after"][0].update(unavailable="gone"),
     "a state marked unavailable has a null hash"),
    (lambda d: d["redistributions"][0]["ranks_after"][0].update(hash=None, unavailable=5), "expected the reason"),
    (lambda d: d["redistributions"][0]["ranks_after"][0].update(hash=None), "ranks_after[0].hash"),
])
def test_invalid_recordings_exit_2(recorded, tmp_path, mutate, words):
    doc = json.load(open(recorded / "run.json"))
    mutate(doc)
    (tmp_path / "x.json").write_text(json.dumps(doc))
    shutil.copy(recorded / "run.json.data", tmp_path / "run.json.data")
    out = replay(tmp_path / "x.json")
    assert out.returncode == 2 and words in out.stderr, out.stderr


def test_record_refuses_bad_arguments(tmp_path, monkeypatch):
    import torch

    import dtsim
    with pytest.raises(ValueError, match="max_data_bytes"):
        with dtsim.record(tmp_path / "r.json", max_data_bytes=-1):
            pass
    with pytest.raises(ValueError, match="not a regular file"):
        with dtsim.record("/dev/null"):
            pass
    with pytest.raises(ValueError, match="memory: expected a bool, got 'yes'"):
        with dtsim.record(tmp_path / "r.json", ops=True, memory="yes"):
            pass
    with pytest.raises(ValueError, match="memory: .*give ops=True too"):
        with dtsim.record(tmp_path / "r.json", memory=True):
            pass
    with pytest.raises(ValueError, match="cannot write .*No such file or directory"):
        with dtsim.record(tmp_path / "no" / "r.json"):
            pass
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with pytest.raises(RuntimeError, match="torch 2.99.0 is not supported"):
        with dtsim.record(tmp_path / "r.json"):
            pass
    assert not os.path.exists(tmp_path / "r.json")


@pytest.fixture(scope="module")
def async_recorded(tmp_path_factory):
    """The async program on 2 Gloo ranks, rank 1 writing result #9 around the recorder's hooks; every rank's stats."""
    d = tmp_path_factory.mktemp("async")
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node", "2", ASYNC_PROGRAM, str(d / "async.json"), "--bypass", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    # The two ranks share one stdout pipe, and one rank's line can land in the middle of the other's (seen in CI:
    # '{...}STATS 1 main {...}' on one line), so each STATS record is found by itself, not line by line.
    stats = {(int(m[1]), m[2]): json.loads(m[3])
             for m in re.finditer(r"STATS (\d+) (\w+) (\{[^{}]*\})", proc.stdout)}
    assert len(stats) == 4, proc.stdout[-6000:]
    write_failures = {int(m[1]): m[2] for m in re.finditer(r"WRITEFAIL (\d+) ([^\n]*?)(?=WRITEFAIL|STATS|\n|$)",
                                                            proc.stdout)}
    return d, stats, write_failures


def test_when_rank_0_cannot_write_every_rank_raises_its_error(async_recorded):
    """Rank 0's verdict reaches every rank through the process group's store (python/dtsim/recorder.py, finish)."""
    d, _, write_failures = async_recorded
    assert sorted(write_failures) == [0, 1], write_failures
    for rank, message in write_failures.items():
        assert message.startswith("dtsim.record: rank 0 could not write the recording: "), (rank, message)
        assert "r.json" in message, (rank, message)
    assert not os.path.exists(str(d / "async.json") + ".gone")


def test_async_results_are_hashed_when_the_program_waits_before_it_writes_them(async_recorded):
    d, stats, _ = async_recorded
    doc = json.load(open(d / "async.json"))
    recs = doc["redistributions"]
    assert [(r["src"]["placements"], r["dst"]["placements"]) for r in recs] == \
        [("[P(sum)]", "[R]")] * 2 + [("[S(0)]", "[R]")] * 3 + [("[S(0)]", "[S(1)]")] * 2 + \
        [("[S(0)]", "[R]"), ("[R]", "[S(0)]"), ("[P(sum)]", "[R]")]
    for rank in (0, 1):
        # #1, #3, #4, #7, #8's source and #9 were pending when upstream returned; #1 and #3 were waited for by the
        # program's in-place writes, #7 and #8's source by upstream's copy in #8 (hashed at those waits), #4 and #9
        # only after the block (rank 1's #9: written around the hooks, so unavailable)
        s = stats[(rank, "main")]
        assert s["deferred"] == 6 and s["at_wait"] == 4 and s["at_bound"] == 0
        assert (s["at_end"], s["unavailable"]) == ((2, 0) if rank == 0 else (1, 1))

    def hashes(k):
        return [st["hash"] for st in recs[k]["ranks_after"]]
    # each async result hashes as its synchronous twin, although the program wrote it right after the wait
    assert hashes(1) == hashes(0) and hashes(3) == hashes(2) and hashes(4) == hashes(2)
    assert hashes(6) == hashes(5) and hashes(7) == hashes(2)
    assert [st["hash"] for st in recs[8]["ranks_before"]] == hashes(2)
    assert hashes(9)[0] == hashes(0)[0]
    # ... and the writes happened: the values after them hash otherwise (what a late hash would have recorded)
    import torch

    import dtsim
    twin = torch.arange(30.0).reshape(6, 5) * 3  # rank r holds arange * (r + 1): the sum over ranks 0 and 1
    assert dtsim.shard_hash(twin) == hashes(0)[0] and dtsim.shard_hash(twin + 1) != hashes(1)[0]
    # rank 1's #9: its buffer was written after a wait the recorder does not hook: no hash, the reason, no bytes
    gone = recs[9]["ranks_after"][1]
    assert gone["hash"] is None and "written in place before it was hashed" in gone["unavailable"]
    assert recs[9]["data_after"] is None and recs[9]["data"] is not None


def test_an_unavailable_hash_is_reported_not_checked_never_equal(async_recorded):
    d, _, _ = async_recorded
    out = replay(d / "async.json")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "#9 redistribute  mesh[2] [6, 5] float32  [P(sum)] -> [R]  NOT CHECKED on rank 1; 1 other shard equal" \
        in out.stdout
    assert "rank 1: result not checked, its hash is unavailable (written in place" in out.stdout
    assert "verdict: no difference found, but 1 shard was not checked" in out.stdout
    assert "redistributions equal dtsim's simulation" not in out.stdout
    js = json.loads(replay(d / "async.json", "--json").stdout)
    assert not js["equal"] and js["unchecked_shards"] == 1
    by_index = {r["index"]: r for r in js["redistributions"]}
    assert by_index[9]["unchecked_ranks"] == [1] and not by_index[9]["equal"] and by_index[9]["shards_checked"] == 1
    assert all(r["equal"] and r["shards_checked"] == 2 for k, r in by_index.items() if k != 9)
    # a wrong hash on the other rank of the same step is still a difference (exit 1), with the unchecked rank noted
    doc = json.load(open(d / "async.json"))
    doc["redistributions"][9]["ranks_after"][0]["hash"] = "xxh3:0123456789abcdef"
    (d / "wrong.json").write_text(json.dumps(doc))
    out = replay(d / "wrong.json")
    assert out.returncode == 1 and "first at redistribution #9 (redistribute), rank 0" in out.stdout, out.stdout
    assert "not checked: rank 1: result not checked" in out.stdout
    # a source whose hash is unavailable: no rank's result is recomputed, every rank of that step unchecked
    doc = json.load(open(d / "async.json"))
    doc["redistributions"][0]["ranks_before"][1].update(hash=None, unavailable="gone")
    (d / "source.json").write_text(json.dumps(doc))
    out = replay(d / "source.json")
    assert out.returncode == 3 and "#0 redistribute  mesh[2] [6, 5] float32  [P(sum)] -> [R]  NOT CHECKED on ranks " \
        "0, 1; layouts and 1 collective equal" in out.stdout, out.stdout
    assert "rank 1's source hash is unavailable (gone): no rank's result is recomputed" in out.stdout
    assert "3 shards were not checked" in out.stdout


def test_past_the_pending_bound_async_results_are_hashed_early(async_recorded):
    d, stats, _ = async_recorded
    for rank in (0, 1):
        assert stats[(rank, "bound")] == {"deferred": 3, "at_wait": 0, "at_end": 1, "at_bound": 2, "unavailable": 0}
    out = replay(d / "async.json.bound.json")
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_recording_with_an_unavailable_hash_exports_and_opens(async_recorded, tmp_path):
    """The readers of recordings besides replay (export, the viewer) accept a rank whose hash the recorder could not
    take: the rank shows no hash; the other ranks keep theirs."""
    d, _, _ = async_recorded
    out = tmp_path / "perfetto.json"
    r = subprocess.run([DTSIM, "export", "--format", "perfetto", str(d / "async.json"), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.load(open(out))["traceEvents"]
    viewer = os.environ.get("DTSIM_VIEWER_BIN")
    if viewer and shutil.which("xvfb-run"):
        dump, png = tmp_path / "r9.json", tmp_path / "r9.png"
        r = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24", viewer, str(d / "async.json"),
                            "--redistribution", "9", "--step", "final", "--screenshot", str(png),
                            "--dump-records", str(dump)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert json.load(open(dump))["redistribution"] == 9


def test_the_gpu_machines_program_on_gloo_ranks_replays_as_equal(tmp_path):
    """tests/python/recorded_nccl_program.py, the program scripts/gpu_check.sh records on NCCL ranks, run here on 2
    Gloo ranks (DTSIM_RECORD_DEVICE=cpu): every redistribution it makes is recorded (explicit, full_tensor, the MLP's
    implicit one and autograd's) and replays as equal, so the GPU check's program stays runnable between GPU loans."""
    out = tmp_path / "rec.json"
    program = os.path.join(HERE, "recorded_nccl_program.py")
    proc = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node", "2", program, str(out)],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, DTSIM_RECORD_DEVICE="cpu"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    calls = [r["call"] for r in json.load(open(out))["redistributions"]]
    # Five in the program, the sixth RowwiseParallel's output (Partial -> Replicate, upstream's explicit call).
    assert calls.count("redistribute") == 6 and calls.count("full_tensor") == 1, calls
    assert "implicit" in calls and "backward" in calls, calls
    r = replay(out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: the recorded run's redistributions equal dtsim's simulation (10 redistributions)" in r.stdout
    # a recording of real ranks lists no run-wide collectives: the verdict says they were not checked
    assert "are not in the recording, so not checked" in r.stdout, r.stdout


# ---- the digest of run events (dtsim/events.py, ShardDigest in C++) against a closed form ----

def _sketch_closed_form(t):
    """The sketch and scale of docs/recording.md, in float64 from the definition: sum of x[i] * w(i) and of
    |x[i] * w(i)|, w(i) = 2 frac(0.6180339887498949 i + 0.25) - 1, over the row-major elements."""
    import torch

    x = t.detach().contiguous().reshape(-1).to(torch.float64)
    i = torch.arange(x.numel(), dtype=torch.float64)
    v = i * 0.6180339887498949 + 0.25
    w = (v - torch.floor(v)) * 2.0 - 1.0
    if t.dtype != torch.float64:  # accumulated in float from float weights: compare against those weights
        w = w.to(torch.float32).to(torch.float64)
    p = x * w
    return float(p.sum()), float(p.abs().sum())


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "int64"])
def test_digest_is_the_logical_contents_whatever_the_layout(dtype):
    """A transposed matrix (read in place), a strided view and their contiguous copies digest alike, bit for bit; the
    sketch and scale are the closed form's within float accumulation; one changed element changes the hash."""
    import torch

    from dtsim import events

    torch.manual_seed(7)
    dt = getattr(torch, dtype)
    base = (torch.randn(37, 301) * 3).to(dt)  # sizes that leave tails at every piece boundary
    for view in (base.t(), base[:, ::2], base[5:, 3:].t(), base.reshape(-1)[1:]):
        got, copy = events.digest(view), events.digest(view.contiguous())
        assert got == copy, (view.shape, view.stride())
        assert got["shape"] == list(view.shape) and got["dtype"] == dtype
        if dtype == "int64":
            assert "sketch" not in got
            continue
        sketch, scale = _sketch_closed_form(view)
        assert got["scale"] == pytest.approx(scale, rel=1e-5)
        assert abs(got["sketch"] - sketch) <= 1e-5 * scale
    big = torch.randn(1 << 16, 8).to(dt).t()  # pieces of the transposed path and a 64 Ki-element column count
    assert events.digest(big) == events.digest(big.contiguous())
    changed = base.clone()
    changed[36, 300] += 1
    assert events.digest(changed.t())["hash"] != events.digest(base.t())["hash"]


def test_digest_cache_reuses_only_what_holds_the_same_bytes():
    """The recorder's digest cache (EventLog._digest) keys a digest by the tensor's layout over its storage: a view with
    the same layout reuses it (`detach`, a transpose transposed back); a write the dispatcher saw, a version bump, or
    another storage at the same address makes it digest again. Every answer is compared with a fresh digest of the
    same tensor."""
    import torch

    from dtsim import events

    log = events.EventLog(lambda rank: ("Global", "forward"), lambda: "")
    calls = []
    real_digest = events.digest

    def counted(t):
        calls.append(t)
        return real_digest(t)

    events.digest = counted
    try:
        w = torch.randn(64, 48)
        first = log._digest(w)
        assert len(calls) == 1 and first == real_digest(w)
        # Same bytes, same layout: reused.
        for alias in (w.detach(), w.t().t(), w.view(64, 48)):
            assert log._digest(alias) == first and len(calls) == 1
        # Another layout over the same storage is another tensor's bytes.
        assert log._digest(w.t()) == real_digest(w.t()) and len(calls) == 2
        # An in-place write bumps the version (views share it): digested again.
        w.add_(1)
        assert log._digest(w.detach()) == real_digest(w) != first and len(calls) == 3
        # A write the version does not show (.data has a counter of its own), marked by the dispatcher's write.
        d = w.data
        d.mul_(2)
        log._wrote([d])
        assert log._digest(w) == real_digest(w) and len(calls) == 4
        # Another storage over the same address (as after a storage freed in place, FSDP2's resize_(0), hands its
        # address to the next allocation; here two storages over one buffer, written where no dispatcher sees it).
        buffer = bytearray(torch.arange(12, dtype=torch.float32).numpy().tobytes())
        held = torch.frombuffer(buffer, dtype=torch.float32)
        log._digest(held)
        buffer[0:4] = torch.tensor([5.0]).numpy().tobytes()
        other = torch.frombuffer(buffer, dtype=torch.float32)
        assert other.untyped_storage().data_ptr() == held.untyped_storage().data_ptr()
        n = len(calls)
        assert log._digest(other) == real_digest(other) and len(calls) == n + 1
    finally:
        events.digest = real_digest


def test_record_never_replaces_the_running_script(tmp_path):
    """dtsim.record(__file__): the CLI's output policy, so the recording is refused before the script is touched."""
    script = tmp_path / "self_record.py"
    source = ("import dtsim\ntry:\n    with dtsim.record(__file__):\n        pass\nexcept ValueError as e:\n"
              "    print('refused:', e)\n")
    script.write_text(source)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: path:" in out.stdout and "the running program" in out.stdout, out.stdout
    assert script.read_text() == source
