"""Reading a trace is bounded by its size (issue 19): a valid trace of about 58 MB, written by dtsim, is read by
`trace-diff` at a peak RSS of at most 3 x its size above the binary's own (measured on a tiny trace), so the
documented 1 GiB limit is safe. Peak RSS is ru_maxrss of the child, from os.wait4 (as in test_bad_input.py).

The reader keeps the file's text and builds the Trace from it one rank state or collective at a time; reading the
whole JSON into a DOM first (as before) cost about 4 x the file for these traces and 5-20 x for compact ones, and
fails these bounds. docs/reliability.md has the figures.
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "traces", "partial_2x2_Psum_to_S0.json")
FACTOR = 3  # peak RSS above the baseline, in multiples of the bytes read
SLACK_MB = 16  # allocator and page granularity
TIMEOUT_S = 300


def run(*args):
    """Runs dtsim; returns (exit code, stdout, stderr, peak RSS in MiB)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([DTSIM, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                pytest.fail(f"dtsim {args[:3]} ran longer than {TIMEOUT_S} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss / 1024


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A metadata-only trace of 32,768 ranks (three all_gather steps, every rank's state after each): ~58 MB."""
    path = tmp_path_factory.mktemp("memory") / "big.json"
    code, _, err, _ = run("redistribute", "--mesh", "32x64x16", "--shape", "1024,1024,64", "--from", "S(0),S(1),S(2)",
                          "--to", "R,R,R", "--meta", "--trace", str(path))
    assert code == 0, err
    assert path.stat().st_size >= 50 * 2**20
    return path


@pytest.fixture(scope="module")
def baseline_mb():
    code, out, err, rss = run("trace-diff", TINY, TINY)
    assert code == 0, (out, err)
    return rss


def bound_mb(baseline, nbytes):
    return baseline + FACTOR * nbytes / 2**20 + SLACK_MB


def test_one_big_trace_costs_at_most_three_times_its_size(big, baseline_mb):
    size = big.stat().st_size
    code, out, err, rss = run("trace-diff", str(big), TINY)
    assert code == 1 and out.startswith("traces differ; first at initial:"), (code, out[:300], err)
    assert rss <= bound_mb(baseline_mb, size), (
        f"peak RSS {rss:.0f} MiB reading a {size / 2**20:.0f} MiB trace (baseline {baseline_mb:.0f} MiB): "
        f"{(rss - baseline_mb) * 2**20 / size:.2f} x its size")


def test_two_big_traces_cost_at_most_three_times_their_sizes(big, baseline_mb, tmp_path):
    copy = tmp_path / "copy.json"
    shutil.copyfile(big, copy)
    size = 2 * big.stat().st_size
    code, out, err, rss = run("trace-diff", str(big), str(copy))
    assert code == 0 and out.startswith("traces agree: 3 steps"), (code, out[:300], err)
    assert rss <= bound_mb(baseline_mb, size), (
        f"peak RSS {rss:.0f} MiB reading {size / 2**20:.0f} MiB of traces (baseline {baseline_mb:.0f} MiB)")


def test_a_lie_at_the_end_of_a_big_trace_is_refused_in_the_same_bound(big, baseline_mb, tmp_path):
    # The last rank state of the last step claims a rank outside the mesh: every element is validated, however far
    # into the file, and the refusal names its path.
    text = big.read_bytes()
    cut = text.rindex(b'"rank": 32767')
    bad = tmp_path / "bad.json"
    bad.write_bytes(text[:cut] + b'"rank": 99999' + text[cut + len(b'"rank": 32767'):])
    del text
    code, out, err, rss = run("trace-diff", str(bad), TINY)
    assert code == 2 and out == "", (code, out[:300], err)
    assert err.startswith("dtsim: error: trace: '") and "steps[2].ranks_after[32767].rank: rank 99999 is not in" in err, err
    assert rss <= bound_mb(baseline_mb, bad.stat().st_size), rss
