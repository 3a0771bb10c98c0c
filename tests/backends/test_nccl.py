"""The NCCL backend where a GPU is visible (skipped elsewhere): one rank per GPU, so on a one-GPU machine the world
is 1 — every redistribution of a 1-rank mesh through NCCL (staging to the device and back, the NCCL calls, the
agreement check over MPI) must give the simulation's trace, and a 1-D case with a Partial source must reduce."""
import os
import subprocess

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
MPIRUN = os.path.join(os.path.dirname(__file__), "mpirun.sh")


def gpus():
    probe = subprocess.run([DTSIM, "redistribute", "--mesh", "1", "--shape", "4", "--from", "S(0)", "--to", "R",
                            "--backend", "nccl"], capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not gpus(), reason="no GPU visible (or the NCCL backend is not built)")


@pytest.mark.parametrize("case", [
    ["--mesh", "1", "--shape", "5,3", "--from", "S(0)", "--to", "R"],
    ["--mesh", "1", "--shape", "5,3", "--from", "P(sum)", "--to", "R", "--dtype", "bfloat16"],
    ["--mesh", "1x1", "--shape", "4,6", "--from", "S(0),S(1)", "--to", "S(1),R"],
])
def test_nccl_world_of_one_equals_the_simulation(tmp_path, case):
    sim = subprocess.run([DTSIM, "redistribute", *case, "--trace", str(tmp_path / "sim.json")], capture_output=True,
                         text=True, timeout=120)
    real = subprocess.run([MPIRUN, "1", DTSIM, "redistribute", *case, "--backend", "nccl", "--trace",
                           str(tmp_path / "nccl.json")], capture_output=True, text=True, timeout=300)
    assert sim.returncode == 0 and real.returncode == 0, sim.stderr + real.stderr
    diff = subprocess.run([DTSIM, "trace-diff", str(tmp_path / "sim.json"), str(tmp_path / "nccl.json")],
                          capture_output=True, text=True, timeout=60)
    assert diff.returncode == 0, diff.stdout
