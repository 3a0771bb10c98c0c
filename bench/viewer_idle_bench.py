"""The viewer's idle cost: `bench viewer_idle_cpu ratio <x>` with x = 0.02 / (the fraction of a core dtsim-viewer uses
over 10 idle seconds); target >= 1 (an idle window uses less than 2 % of a core).

An interactive dtsim-viewer window (no --screenshot) opens on its own Xvfb server, settles for 3 seconds, then its
CPU time (utime + stime from /proc/<pid>/stat) is read at the start and the end of 10 seconds in which nothing
happens; --close-after ends it. The window waits for events (glfwWaitEventsTimeout) and wakes once a second to see
whether the trace changed on disk, so the idle cost is that check. Runs on the 8-rank golden trace and a 4,096-rank
trace; the worse one is the ratio.

usage: viewer_idle_bench.py DTSIM_VIEWER TRACE [TRACE...]
"""
import os
import subprocess
import sys
import time

SETTLE_S = 3.0
IDLE_S = 10.0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[11], fields[12]: utime, stime (after the state field at index 0)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_xvfb():
    r, w = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        display = f.readline().strip()
    if not display:
        raise SystemExit("viewer_idle_bench: Xvfb did not start")
    return xvfb, ":" + display


def idle_fraction(viewer, trace, display):
    env = dict(os.environ, DISPLAY=display, XDG_STATE_HOME=os.environ.get("TMPDIR", "/tmp"))
    p = subprocess.Popen([viewer, trace, "--size", "1600x1000", "--close-after", str(SETTLE_S + IDLE_S + 2)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(SETTLE_S)
        if p.poll() is not None:
            raise SystemExit(f"viewer_idle_bench: dtsim-viewer exited {p.returncode}: {p.stderr.read()}")
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        if c0 <= 0:  # it did start: loading the trace and the first frames cost something
            raise SystemExit("viewer_idle_bench: no CPU time measured for the start-up; /proc not readable?")
        time.sleep(IDLE_S)
        c1, t1 = cpu_seconds(p.pid), time.monotonic()
    finally:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return (c1 - c0) / (t1 - t0), c0


def main():
    viewer, traces = sys.argv[1], sys.argv[2:]
    xvfb, display = start_xvfb()
    try:
        worst = 0.0
        for trace in traces:
            f, startup = idle_fraction(viewer, trace, display)
            print(f"viewer idle: {f * 100:.3f} % of a core over {IDLE_S:.0f} s ({os.path.basename(trace)}; "
                  f"start-up and first frames {startup:.2f} s of CPU)", file=sys.stderr)
            worst = max(worst, f)
    finally:
        xvfb.terminate()
        xvfb.wait()
    ratio = 0.02 / max(worst, 1e-4)  # 1e-4: below what /proc's clock ticks can tell over 10 s
    print(f"bench viewer_idle_cpu ratio {ratio:.2f}   ({worst * 100:.3f} % of a core idle, worst of "
          f"{len(traces)} traces, 10 s; target >= 1)")


if __name__ == "__main__":
    main()
