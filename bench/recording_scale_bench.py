"""Replay and export of a recording of 2^16 ranks (issue 36: sizes and times linear in ranks).

    python bench/recording_scale_bench.py DTSIM_BIN [RANKS]      prints one JSON object

The recording (written here, as `dtsim.record` writes one; no shard data) holds one S(0) -> R redistribution of an
[N] float32 tensor over N ranks: every rank's state before and after, and one all_gather over all of them. `dtsim
replay` checks its layouts, replicas and collectives; `dtsim export --format perfetto` writes every rank's slice. The
bench line is 10 s over the two together; the peak resident memory of each and the export's size are reported too.
"""
import json
import os
import resource
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


def timed(argv):
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return time.monotonic() - start, out


def main():
    dtsim = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 16
    with tempfile.TemporaryDirectory() as tmp:
        path, exported = os.path.join(tmp, "r.json"), os.path.join(tmp, "p.json")
        with open(path, "w") as f:
            json.dump(recording(n), f)
        replay_s, replay = timed([dtsim, "replay", path])
        replay_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if replay.returncode != 3:  # no shard data: nothing recomputed, which replay says (exit 3)
            raise SystemExit(f"recording_scale_bench: replay exit {replay.returncode}: {replay.stdout[-500:]}")
        export_s, export = timed([dtsim, "export", "--format", "perfetto", path, exported])
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if export.returncode != 0:
            raise SystemExit(f"recording_scale_bench: export exit {export.returncode}: {export.stderr[-500:]}")
        print(json.dumps({"ranks": n, "replay_s": replay_s, "export_s": export_s,
                          "replay_peak_mib": replay_kib / 1024, "peak_mib": peak_kib / 1024,
                          "recording_mib": os.path.getsize(path) / 2**20,
                          "export_mib": os.path.getsize(exported) / 2**20,
                          "recording_65536": 10.0 / (replay_s + export_s)}))


if __name__ == "__main__":
    main()
