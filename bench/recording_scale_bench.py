"""Replay, export and the viewer on recordings of 2^16 ranks and more (issue 36: sizes and times linear in ranks).

    python bench/recording_scale_bench.py DTSIM_BIN [VIEWER_BIN|-] [RANKS...]   prints one JSON object per size

The recording (written here, as `dtsim.record` writes one; no shard data) holds one S(0) -> R redistribution of an
[N] float32 tensor over N ranks: every rank's state before and after, and one all_gather over all of them. `dtsim
replay` checks its layouts, replicas and collectives; `dtsim export --format perfetto` writes every rank's slice; the
viewer (when given; under xvfb-run) draws it headless. Each command's time and peak resident memory (its own, from
wait4) and the files' sizes are reported per size (default 2^16 ranks).
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def recording(n):
    mesh = {"shape": [n], "names": [], "ranks": list(range(n))}

    def spec(placements):
        return {"mesh": mesh, "placements": placements, "shape": [n], "dtype": "float32"}

    gather = {"op": "all_gather", "groups": [list(range(n))], "ranks": list(range(n)), "input_shapes": [[1]] * n,
              "output_shapes": [[n]] * n, "input_bytes": [4] * n, "output_bytes": [4 * n] * n}
    rec = {"index": 0, "call": "redistribute", "op": None, "arg": None, "src": spec("[S(0)]"), "dst": spec("[R]"),
           "ranks_before": [{"rank": r, "local_shape": [1], "hash": "xxh3:%016x" % r} for r in range(n)],
           "ranks_after": [{"rank": r, "local_shape": [n], "hash": "xxh3:00000000000000aa"} for r in range(n)],
           "collectives": [gather], "time_us": {str(r): 1.0 for r in range(n)},
           "start_us": {str(r): 0.0 for r in range(n)}, "data": None, "data_after": None}
    return {"format": "dtsim-recording", "version": 1,
            "meta": {"tool": "dtsim.record", "backend": "torch-gloo", "world_size": n, "argv": "recording_scale_bench",
                     "torch_version": "2.13.0", "data": True, "data_file": None, "data_complete": False,
                     "max_data_bytes": 0},
            "redistributions": [rec]}


def write_recording(path, n):
    """recording(n), written as JSON text piece by piece: the same document without a DOM of 2^20 ranks."""
    doc = recording(1)
    ranks = ",".join(map(str, range(n)))
    mesh = f'{{"shape":[{n}],"names":[],"ranks":[{ranks}]}}'
    spec = lambda placements: f'{{"mesh":{mesh},"placements":"{placements}","shape":[{n}],"dtype":"float32"}}'
    per_rank = lambda value: "[" + ",".join([value] * n) + "]"
    before = ",".join(f'{{"rank":{r},"local_shape":[1],"hash":"xxh3:{r:016x}"}}' for r in range(n))
    after = ",".join(f'{{"rank":{r},"local_shape":[{n}],"hash":"xxh3:00000000000000aa"}}' for r in range(n))
    times = ",".join(f'"{r}":1.0' for r in range(n))
    starts = ",".join(f'"{r}":0.0' for r in range(n))
    gather = (f'{{"op":"all_gather","groups":[[{ranks}]],"ranks":[{ranks}],"input_shapes":{per_rank("[1]")},'
              f'"output_shapes":{per_rank(f"[{n}]")},"input_bytes":{per_rank("4")},'
              f'"output_bytes":{per_rank(str(4 * n))}}}')
    meta = dict(doc["meta"], world_size=n)
    with open(path, "w") as f:
        f.write(f'{{"format":"dtsim-recording","version":1,"meta":{json.dumps(meta)},"redistributions":[')
        f.write(f'{{"index":0,"call":"redistribute","op":null,"arg":null,"src":{spec("[S(0)]")},"dst":{spec("[R]")},')
        f.write(f'"ranks_before":[{before}],"ranks_after":[{after}],"collectives":[{gather}],')
        f.write(f'"time_us":{{{times}}},"start_us":{{{starts}}},"data":null,"data_after":null}}]}}')


def timed(argv, env=None):
    """(seconds, return code, stdout text, peak resident MiB) of one command: its own peak, from wait4."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - start, proc.returncode, out.decode(errors="replace"), usage.ru_maxrss / 1024


def measure(dtsim, viewer, n, tmp):
    """Replay, export and (with `viewer`) a viewer screenshot of an n-rank recording: times, peaks and sizes."""
    path, exported = os.path.join(tmp, f"r{n}.json"), os.path.join(tmp, f"p{n}.json")
    write_recording(path, n)
    out = {"ranks": n, "recording_mib": os.path.getsize(path) / 2**20}
    replay_s, code, text, out["replay_peak_mib"] = timed([dtsim, "replay", path])
    if code != 3:  # no shard data: nothing recomputed, which replay says (exit 3)
        raise SystemExit(f"recording_scale_bench: replay exit {code}: {text[-500:]}")
    export_s, code, text, out["export_peak_mib"] = timed([dtsim, "export", "--format", "perfetto", path, exported])
    if code != 0:
        raise SystemExit(f"recording_scale_bench: export exit {code}: {text[-500:]}")
    out.update(replay_s=replay_s, export_s=export_s, export_mib=os.path.getsize(exported) / 2**20)
    os.unlink(exported)
    if viewer:
        shot = os.path.join(tmp, f"v{n}.png")
        viewer_s, code, text, out["viewer_peak_mib"] = timed(
            ["xvfb-run", "-a", "/usr/bin/env", viewer, path, "--screenshot", shot])
        if code != 0 or not os.path.exists(shot):
            raise SystemExit(f"recording_scale_bench: viewer exit {code}: {text[-500:]}")
        out["viewer_s"] = viewer_s
    os.unlink(path)
    return out


def main():
    dtsim = sys.argv[1]
    viewer = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
    sizes = [int(x) for x in sys.argv[3:]] or [1 << 16]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {str(n): measure(dtsim, viewer, n, tmp) for n in sizes}
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
