"""The command line on real MPI ranks: `dtsim distribute --backend mpi` gives every rank the shard the simulation
gives it; what cannot run is refused clearly (mesh/world mismatch, a fault on the simulated backend, a fault naming
a rank outside the mesh, stdin batches under mpirun, the NCCL backend without a GPU), with exit code 2 and nothing on
stdout."""
import json
import os
import subprocess

import pytest

DTSIM = os.environ.get("DTSIM_BIN", "dtsim")
MPIRUN = os.path.join(os.path.dirname(__file__), "mpirun.sh")
CASE = ["--mesh", "2x4", "--names", "dp,tp", "--shape", "5,10", "--from", "S(0),R", "--to", "R,S(1)"]


def run(*args, np=None):
    cmd = [DTSIM, *args] if np is None else [MPIRUN, str(np), DTSIM, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_distribute_on_mpi_equals_the_simulation():
    args = ["distribute", "--mesh", "2x4", "--names", "dp,tp", "--shape", "7,3", "--step", "tp:S(0)", "--step",
            "dp:S(0)", "--json", "--values"]
    sim = run(*args)
    real = run(*args, "--backend", "mpi", np=8)
    assert sim.returncode == 0 and real.returncode == 0, sim.stderr + real.stderr
    a, b = json.loads(sim.stdout), json.loads(real.stdout)
    assert a == b and b["ok"] and b["placements"] == "[_S(0,4), S(0)]"


@pytest.mark.parametrize("np,args,field,text", [
    (4, ["redistribute", *CASE, "--backend", "mpi"], "mesh", "has 8 ranks but the mpi world has 4: launch with mpirun -np 8"),
    (None, ["redistribute", *CASE, "--inject-fault", "drop-rank:1"], "inject-fault", "needs a real backend"),
    (8, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "drop-rank:8"], "inject-fault", "names rank 8"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "drop-rank"], "inject-fault", "needs 1 value"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "stall-rank:1:x"], "inject-fault", "seconds 'x'"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--timeout", "0"], "timeout", "above 0"),
    (None, ["redistribute", *CASE, "--backend", "tcp"], "backend", "unknown backend 'tcp'"),
    (2, ["redistribute", "--backend", "mpi", "--batch", "-"], "batch", "only rank 0 reads standard input"),
    (None, ["compare", "--np", "4", *CASE], "np", "4 ranks for mesh[dp=2, tp=4], which has 8 ranks"),
    (None, ["compare", "--np", "8", *CASE, "--backend", "local"], "backend", "compare runs the simulation itself"),
])
def test_what_cannot_run_is_refused_clearly(np, args, field, text):
    out = run(*args, np=np)
    assert out.returncode != 0 and out.returncode != 3, out.stderr
    assert out.stdout == ""
    assert f"dtsim: error: {field}: " in out.stderr and text in out.stderr, out.stderr


def test_nccl_without_a_gpu_is_a_clear_error():
    out = run("redistribute", "--mesh", "1", "--shape", "4", "--from", "S(0)", "--to", "R", "--backend", "nccl")
    if "not built" in out.stderr:
        pytest.skip("the NCCL backend is not built here")
    if out.returncode == 0:
        pytest.skip("a GPU is visible: tests/backends/test_nccl.py covers this machine")
    assert out.returncode == 2 and out.stdout == ""
    assert "dtsim: error: backend: nccl: no CUDA device is visible to rank 0" in out.stderr, out.stderr
