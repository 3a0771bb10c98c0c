"""Issue 33's busy-machine line: the README's model command while 4 busy processes share the machine.

    python bench/busy_bench.py DTSIM_BIN        prints one JSON object

`bench model_busy_vs_serial ratio <x>`: the command's wall time with ranks run serially (DTSIM_PARALLEL_RANKS=0)
over its wall time as dtsim runs it by default, both beside 4 processes that spin on the CPU; 11 runs of each,
alternating, medians (single runs spread by about 15 % either way under that load). 1 means dtsim's rank threads
cost nothing under load; the target is >= 0.9 (the OpenMP rank threads once made it 27x slower).
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


def main():
    dtsim = os.path.abspath(sys.argv[1])
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent)
            for _ in range(4)]
    try:
        time.sleep(1.0)  # the spinners are running
        default, serial = [], []
        for _ in range(RUNS):
            default.append(timed([dtsim] + COMMAND, dict(os.environ)))
            serial.append(timed([dtsim] + COMMAND, dict(os.environ, DTSIM_PARALLEL_RANKS="0")))
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()
    d, s = statistics.median(default), statistics.median(serial)
    print(json.dumps({"default_s": d, "serial_s": s, "model_busy_vs_serial": s / d, "runs": len(default)}))


if __name__ == "__main__":
    main()
