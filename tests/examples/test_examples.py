"""The examples/ programs are written once against the DTensor API: each runs on the simulated world and, where the
MPI backend is built, unchanged under mpirun; each checks its own result against a direct computation (exit 0), and
the traces of the two runs are equal (`dtsim trace-diff` exit 0)."""
import os
import subprocess

import pytest

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
