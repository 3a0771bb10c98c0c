"""Issue 33's busy-machine line: the README's model command while 4 busy processes share the machine.

    python bench/busy_bench.py DTSIM_BIN        prints one JSON object

`bench model_busy_vs_serial ratio <x>`: the command's wall time with ranks run serially (DTSIM_PARALLEL_RANKS=0)
over its wall time as dtsim runs it by default, both beside 4 processes that spin on the CPU; 11 runs of each,
alternating, medians (single runs spread by about 15 % either way under that load). 1 means dtsim's rank threads
cost nothing under load; the target is >= 0.9 (the OpenMP rank threads once made it 27x slower).

`bench redistribute_large_S0_to_S1_busy ratio <x>`: upstream's DTensor.redistribute under LocalTensorMode over
dtsim's, 8 ranks x 16 MiB S(0) -> S(1) (an all_to_all: bench/redistribute_cases.json's large_8x16MiB_S0_to_S1), both
beside 2 processes that spin on the CPU; 3 alternating runs of each, the best of each. The regression guard of issue
60: dtsim's intra-op threads once kept spinning on a machine its load reading took for quiet (511 ms against
upstream's 140 ms). Below 1, scripts/bench.sh says FAIL and exits 1.

    python bench/busy_bench.py DTSIM_BIN REDISTRIBUTE_BENCH   both lines' measurements
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

RUNS = 11
COMMAND = ["model", "--mesh", "2x4", "--names", "dp,tp", "--plan", "fsdp+tp", "--dim", "256", "--heads", "8",
           "--layers", "2", "--vocab", "1000", "--seq", "64", "--batch", "4", "--backward"]


def die_with_parent():
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def timed(argv, env):
    start = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"bench failed: {' '.join(argv)}\n{p.stderr[-2000:]}")
    return time.monotonic() - start


HERE = os.path.dirname(os.path.abspath(__file__))
CASE = "large_8x16MiB_S0_to_S1"


def spinners(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent)
            for _ in range(n)]


def stop(busy):
    for p in busy:
        p.kill()
    for p in busy:
        p.wait()


def redistribute_busy(redistribute_bench):
    """(dtsim's, upstream's) best microseconds of CASE beside 2 spinning processes."""
    def run(argv):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench failed: {' '.join(argv)}\n{p.stderr[-2000:]}")
        return p.stdout

    busy = spinners(2)
    mine, upstream = [], []
    try:
        time.sleep(1.0)
        for _ in range(3):
            out = json.loads(run([redistribute_bench, f"--benchmark_filter={CASE}/", "--benchmark_format=json"]))
            b = next(b for b in out["benchmarks"] if b["name"].startswith(f"BM_Redistribute/{CASE}/"))
            mine.append(b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]])
            upstream.append(json.loads(run([sys.executable, os.path.join(HERE, "upstream_redistribute_bench.py"),
                                            CASE]))[CASE])
    finally:
        stop(busy)
    return min(mine), min(upstream)


def main():
    dtsim = os.path.abspath(sys.argv[1])
    result = {}
    if len(sys.argv) > 2:
        mine, upstream = redistribute_busy(os.path.abspath(sys.argv[2]))
        result.update({"redistribute_busy_dtsim_us": mine, "redistribute_busy_upstream_us": upstream,
                       "redistribute_large_S0_to_S1_busy": upstream / mine})
    busy = spinners(4)
    try:
        time.sleep(1.0)  # the spinners are running
        default, serial = [], []
        for _ in range(RUNS):
            default.append(timed([dtsim] + COMMAND, dict(os.environ)))
            serial.append(timed([dtsim] + COMMAND, dict(os.environ, DTSIM_PARALLEL_RANKS="0")))
    finally:
        stop(busy)
    d, s = statistics.median(default), statistics.median(serial)
    result.update({"default_s": d, "serial_s": s, "model_busy_vs_serial": s / d, "runs": len(default)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
