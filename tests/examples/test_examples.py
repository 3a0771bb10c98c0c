"""The examples/ programs are written once against the DTensor API: each runs on the simulated world and, where the
MPI backend is built, unchanged under mpirun; each checks its own result against a direct computation (exit 0), and
the traces of the two runs are equal (`dtsim trace-diff` exit 0). The Python examples (examples/python/) run with
this test's interpreter (the project venv) and are checked against values computed here (torch.chunk sizes)."""
import glob
import os
import re
import subprocess
import sys

import pytest
import torch

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
EXAMPLE = os.environ.get("DTSIM_EXAMPLE_TP_FSDP", "")
HAVE_MPI = os.environ.get("DTSIM_HAVE_MPI", "0") == "1"
MPIRUN = os.path.join(os.path.dirname(__file__), "..", "backends", "mpirun.sh")


def test_simulated_and_mpi_runs_write_equal_traces(tmp_path):
    sim = subprocess.run([EXAMPLE, "--trace-prefix", str(tmp_path / "sim")], capture_output=True, text=True,
                         timeout=120)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert "equal to the direct product" in sim.stdout
    if not HAVE_MPI:
        pytest.skip("the MPI backend is not built")
    real = subprocess.run([MPIRUN, "8", EXAMPLE, "--trace-prefix", str(tmp_path / "real")], capture_output=True,
                          text=True, timeout=300)
    assert real.returncode == 0, real.stdout + real.stderr
    assert "on 8 mpi ranks" in real.stdout and "equal to the direct product" in real.stdout
    for name in ("weight", "output"):
        diff = subprocess.run([DTSIM, "trace-diff", str(tmp_path / f"sim_{name}.json"),
                               str(tmp_path / f"real_{name}.json")], capture_output=True, text=True, timeout=60)
        assert diff.returncode == 0 and "traces agree" in diff.stdout, diff.stdout + diff.stderr


# ---- examples/python/debug_redistribution.py: `import dtsim`, run with the test's own Python (the project venv) ----
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PY_EXAMPLE = os.path.join(ROOT, "examples", "python", "debug_redistribution.py")


def run_python_example(*args):
    if not glob.glob(os.path.join(ROOT, "python", "dtsim", "_C*.so")):
        pytest.skip("the Python extension dtsim._C is not built (DTSIM_BUILD_PYTHON=OFF)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    return subprocess.run([sys.executable, PY_EXAMPLE, *args], capture_output=True, text=True, timeout=300, env=env)


def nested_chunks(n, mesh=(2, 4)):
    """The global indices each rank of a row-major (dp, tp) mesh holds of a dim of size n sharded on both mesh dims
    (S(d), S(d)): torch.chunk over dp, then over tp, with upstream's empty shards where chunk returns fewer pieces."""
    out = []
    for dp_piece in pad(torch.arange(n).chunk(mesh[0]), mesh[0]):
        out += pad(dp_piece.chunk(mesh[1]), mesh[1])
    return out


def pad(pieces, k):
    return list(pieces) + [torch.arange(0)] * (k - len(pieces))


def rank_table(stdout):
    """{rank: (before shape, after shape, holds)} from the example's table in section 4."""
    lines = stdout.split("4. Every rank's shard")[1].split("5. Verdict")[0].strip().splitlines()[2:]
    rows = {}
    for line in lines:
        m = re.match(r"\s*(\d+)\s+\((\d+), (\d+)\)\s+(\(\d+, \d+\))\s+(\(\d+, \d+\))\s+(.*)$", line)
        assert m, line
        before, after = (tuple(int(v) for v in re.findall(r"\d+", m.group(i))) for i in (4, 5))
        rows[int(m.group(1))] = (before, after, m.group(6).strip())
    return rows


def ranges(indices):
    return f"{int(indices[0])}:{int(indices[-1]) + 1}" if len(indices) else "-"


@pytest.mark.parametrize("rows,cols", [(7, 10), (16, 16), (3, 5)])
def test_python_debug_example_uneven_shapes(rows, cols):
    out = run_python_example("--shape", f"{rows},{cols}")
    assert out.returncode == 0, out.stdout + out.stderr
    row_pieces, col_pieces = nested_chunks(rows), nested_chunks(cols)
    table = rank_table(out.stdout)
    assert sorted(table) == list(range(8))
    for rank, (before, after, holds) in table.items():
        assert before == (len(row_pieces[rank]), cols)  # [S(0), S(0)]: rows chunked over dp, then tp
        assert after == (rows, len(col_pieces[rank]))  # [S(1), S(1)]
        assert holds == f"0:{rows} x {ranges(col_pieces[rank])}"
    assert "full_tensor() equals the input: True" in out.stdout
    assert out.stdout.count("every shard right") == 4  # the source and each of the 3 steps
    for collective in ("all_gather", "all_to_all", "local_split"):  # upstream's S(0)->R, S(0)->S(1), R->S(1)
        assert collective in out.stdout


def test_python_debug_example_finds_a_corrupted_rank():
    out = run_python_example("--corrupt", "5")
    assert out.returncode == 1, out.stdout + out.stderr
    verdicts = {line.split(" (")[0].split(":")[0].strip(): line.rpartition(": ")[2]
                for line in out.stdout.splitlines() if re.match(r"  (source|after step \d+)", line)}
    assert verdicts["source"] == "wrong on ranks [5]"
    # Step 1 all-gathers over tp: rank 5's group on the row-major 2x4 mesh is 4..7.
    assert verdicts["after step 1"] == "wrong on ranks [4, 5, 6, 7]"
    # Step 2 exchanges over dp: rank 5's row is in every rank's columns now.
    assert verdicts["after step 2"] == f"wrong on ranks {list(range(8))}"
    # Step 3 splits the columns: every rank with a non-empty column piece holds part of that row.
    nonempty = [r for r, piece in enumerate(nested_chunks(10)) if len(piece)]
    assert verdicts["after step 3"] == f"wrong on ranks {nonempty}"
    assert "full_tensor() equals the input: False" in out.stdout


# ---- docs/python.md: its `>>>` blocks run as doctests, in order, in one namespace (the outputs shown are real) ----
RUN_DOC = r'''
import doctest, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.lstrip().startswith(">>>")]
assert blocks, "no >>> examples found"
test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "docs/python.md", sys.argv[1], 0)
runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
runner.run(test)
print(f"{runner.tries} examples, {runner.failures} failed")
sys.exit(1 if runner.failures else 0)
'''


def test_python_docs_examples_run():
    if not glob.glob(os.path.join(ROOT, "python", "dtsim", "_C*.so")):
        pytest.skip("the Python extension dtsim._C is not built (DTSIM_BUILD_PYTHON=OFF)")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", RUN_DOC, os.path.join(ROOT, "docs", "python.md")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert re.search(r"^(\d+) examples, 0 failed$", out.stdout, re.M), out.stdout


RECORD_EXAMPLE = os.path.join(ROOT, "examples", "python", "record_torchrun.py")


@pytest.mark.parametrize("bug", [False, True])
def test_record_torchrun_example_replays(tmp_path, bug):
    """examples/python/record_torchrun.py under torchrun (4 Gloo ranks), then `dtsim replay`: equal, or with --bug the
    9x10 S(0) -> S(1) (9 rows over 4 ranks: 3, 3, 3, 0) named with rank 2."""
    out = tmp_path / "run.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    # --standalone: torchrun binds its own free port and keeps it (two jobs picking "free" ports race)
    cmd = [torchrun, "--standalone", "--nproc_per_node", "4", RECORD_EXAMPLE, str(out)] + (["--bug"] if bug else [])
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, "\n".join(l for l in run.stderr.splitlines() if "alltoall" not in l)[-8000:]
    replay = subprocess.run([DTSIM, "replay", str(out)], capture_output=True, text=True, timeout=300)
    if not bug:
        assert replay.returncode == 0 and "redistributions equal dtsim's simulation" in replay.stdout, replay.stdout
        return
    assert replay.returncode == 1, replay.stdout
    line = next(l for l in replay.stdout.splitlines() if "[9, 10]" in l and "[S(0)] -> [S(1)]" in l)
    assert "DIFFERS" in line
    assert re.search(r"first at redistribution #\d+ \(redistribute\), rank 2$", replay.stdout.strip())
