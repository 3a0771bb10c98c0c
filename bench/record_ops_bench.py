"""Issue 32's two bench lines, measured side by side in one run:

    python bench/record_ops_bench.py DTSIM_BIN        prints one JSON object

- record_ops_overhead: the plain step time over the step time under `dtsim record` (every rank's DTensor ops and
  collectives digested), on a 4-rank TP + FSDP2 + AdamW step under torchrun + Gloo (bench/record_ops_step.py: two
  blocks of [512 -> 2048 -> 512], batch 64). Each run times its own steps after two warm-up steps; the two runs
  alternate, three times (a busy machine's noise), and each side keeps its fastest.
- trace_diff_ops: 10 s over the time `dtsim trace-diff` takes on two recordings of 1,000,000 events (4 ranks of
  250,000: ops and collectives with digests; the second differs in one output of one op near the end, which the diff
  must find).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4"]


def step_time(argv, env):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench failed: {' '.join(argv)}\n{p.stderr[-3000:]}")
    for line in p.stdout.splitlines():
        if line.startswith("step_s "):
            return float(line.split()[1])
    raise SystemExit(f"no step time in the output of {' '.join(argv)}:\n{p.stdout[-2000:]}")


def record_overhead(dtsim, folder):
    env = dict(os.environ, OMP_NUM_THREADS="1", DTSIM_PYTHON=sys.executable)
    script = os.path.join(HERE, "record_ops_step.py")
    plain, recorded = [], []
    for _ in range(3):
        plain.append(step_time(TORCHRUN + [script], env))
        recorded.append(step_time([dtsim, "record", "-o", os.path.join(folder, "r.json"), "--"] + TORCHRUN + [script],
                                  env))
    return min(plain), min(recorded)


def events_doc(n_per_rank, ranks, changed):
    """A recording of `ranks` x `n_per_rank` events: each rank's ops and all-reduces of one layer, repeated."""
    digest = {"shape": [64, 512], "dtype": "float32", "hash": "xxh3:0123456789abcdef", "sketch": 1.5, "scale": 99.0}
    events = {}
    for r in range(ranks):
        evs = []
        for i in range(n_per_rank):
            if i % 8 == 7:
                evs.append({"kind": "collective", "op": "all_reduce", "group": list(range(ranks)),
                            "module": "Model.layers.3.mlp", "pass": "forward", "line": "train.py:40",
                            "inputs": [digest], "outputs": [digest]})
            else:
                out = digest
                if changed and r == 2 and i == n_per_rank - 100:
                    out = dict(digest, hash="xxh3:fedcba9876543210", sketch=50.0)
                evs.append({"kind": "op", "op": "aten.mm.default", "module": "Model.layers.3.mlp.w1",
                            "pass": "forward", "line": "train.py:31", "args": ["[S(0)]", "[R]"],
                            "results": ["[S(0)]"], "inputs": [digest, digest], "outputs": [out]})
        events[str(r)] = evs
    return {"format": "dtsim-recording", "version": 1,
            "meta": {"tool": "bench", "backend": "torch-gloo", "world_size": ranks, "data": False,
                     "data_file": None, "data_complete": True},
            "redistributions": [], "events": events}


def trace_diff_time(dtsim, folder, total=1_000_000, ranks=4):
    paths = []
    for changed in (False, True):
        path = os.path.join(folder, f"events-{int(changed)}.json")
        with open(path, "w") as f:
            json.dump(events_doc(total // ranks, ranks, changed), f, separators=(",", ":"))
        paths.append(path)
    start = time.monotonic()
    p = subprocess.run([dtsim, "trace-diff"] + paths, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - start
    found = p.returncode == 1 and f"rank 2, event {total // ranks - 100} (computed)" in p.stdout
    return elapsed, found, os.path.getsize(paths[0])


def main():
    dtsim = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as folder:
        plain, recorded = record_overhead(dtsim, folder)
        diff_s, found, size = trace_diff_time(dtsim, folder)
    print(json.dumps({"plain_step_s": plain, "recorded_step_s": recorded, "record_ops_overhead": plain / recorded,
                      "trace_diff_s": diff_s, "trace_diff_found": found, "trace_bytes": size,
                      "trace_diff_ops": 10.0 / diff_s}))


if __name__ == "__main__":
    main()
