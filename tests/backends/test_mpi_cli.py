"""The command line on real MPI ranks: `dtsim distribute --backend mpi` gives every rank the shard the simulation
gives it; what cannot run is refused clearly (mesh/world mismatch, a fault on the simulated backend, a fault naming
a rank outside the mesh, stdin batches under mpirun, the NCCL backend without a GPU), with exit code 2 and nothing on
stdout."""
import json
import os
import re
import subprocess
import time

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


# `dtsim op` on real ranks: the same answer (strategy, implicit redistributions and their plans, collective counts,
# every rank's output shard and values) as the simulation, for ops of each family; composite ops included.
OP_CASES = [
    (4, ["mm", "--mesh", "2x2", "--arg", "8x6:S(1),R", "--arg", "6x4:S(0),S(1)"]),
    (4, ["add.Tensor", "--mesh", "4", "--arg", "6x5:P(sum)", "--arg", "6x5:S(1)"]),
    (4, ["add.Tensor", "--mesh", "4", "--arg", "7x6:S(0)", "--arg", "7x6:S(1)"]),
    (4, ["sum.dim_IntList", "--mesh", "2x2", "--arg", "7x5:S(0),S(1)", "--arg", "[0]"]),
    (4, ["_softmax", "--mesh", "2x2", "--arg", "5x6:S(1),S(0)", "--arg", "1", "--arg", "false"]),
    (6, ["matmul", "--mesh", "2x3", "--names", "dp,tp", "--arg", "2x5x8:S(0),S(2)", "--arg", "8x6:R,S(0)"]),
    (3, ["native_layer_norm", "--mesh", "3", "--arg", "4x6:S(1)", "--arg", "[6]", "--arg", "6:R", "--arg", "6:R",
         "--arg", "1e-5", "--dtype", "float64"]),
    (4, ["transpose.int", "--mesh", "4", "--arg", "5x3:S(0)", "--arg", "0", "--arg", "1", "--dtype", "bfloat16"]),
]


@pytest.mark.parametrize("np,args", OP_CASES, ids=[c[1][0] + str(i) for i, c in enumerate(OP_CASES)])
def test_op_on_mpi_equals_the_simulation(np, args):
    sim = run("op", *args, "--json", "--values")
    real = run("op", *args, "--json", "--values", "--backend", "mpi", np=np)
    assert sim.returncode == 0 and real.returncode == 0, sim.stderr + real.stderr
    a, b = json.loads(sim.stdout), json.loads(real.stdout)
    # How the simulated ranks ran the local op (batched or per rank) exists in the simulation only.
    assert "local_execution" in a and "local_execution" not in b
    a.pop("local_execution")
    for entry in a.get("ops", []):
        entry.pop("local_execution", None)
    assert a == b and b["verdict"] == "OK"


def test_op_on_mpi_finds_an_injected_fault():
    args = ["op", "add.Tensor", "--mesh", "4", "--arg", "8x6:S(0)", "--arg", "8x6:S(1)", "--backend", "mpi"]
    out = run(*args, "--inject-fault", "wrong-offset:1", np=4)
    assert out.returncode == 1, out.stderr
    assert "all_to_all 1" in out.stdout and "verdict: MISMATCH" in out.stdout
    # A fault the op's collectives cannot carry is reported, not silently passed.
    missed = run("op", "mm", "--mesh", "4", "--arg", "8x6:R", "--arg", "6x4:S(0)", "--backend", "mpi",
                 "--inject-fault", "wrong-op:1", np=4)
    assert missed.returncode == 0 and "did not strike" in missed.stderr, missed.stderr


def test_op_traces_of_mpi_and_simulation_agree_and_a_fault_is_located(tmp_path):
    args = ["op", "matmul", "--mesh", "2x2", "--arg", "4x6:S(0),S(1)", "--arg", "6x4:S(1),R"]
    sim, real, bad = tmp_path / "sim.json", tmp_path / "real.json", tmp_path / "bad.json"
    assert run(*args, "--trace", str(sim)).returncode == 0
    out = run(*args, "--backend", "mpi", "--trace", str(real), np=4)
    assert out.returncode == 0, out.stderr
    t = json.loads(real.read_text())
    assert t["meta"]["backend"] == "mpi" and len(t["redistributions"]) == 1
    same = run("trace-diff", str(sim), str(real))
    assert same.returncode == 0, same.stdout
    out = run(*args, "--backend", "mpi", "--trace", str(bad), "--inject-fault", "wrong-offset:2", np=4)
    assert out.returncode == 1
    differ = run("trace-diff", str(sim), str(bad))
    assert differ.returncode == 1
    assert "op traces differ; first at redistribution 1 (aten::mm arg 1): step 2" in differ.stdout, differ.stdout


def test_op_batch_on_mpi_equals_the_simulation(tmp_path):
    lines = [{"mesh": [2, 2], "op": "mm", "args": [{"shape": [4, 6], "placements": "S(0),S(1)"},
                                                   {"shape": [6, 2], "placements": "R,S(0)"}], "values": True},
             {"mesh": [4], "op": "neg", "args": [{"shape": [3, 5], "placements": "S(1)"}], "values": True}]
    batch = tmp_path / "cases.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    sim = run("op", "--batch", str(batch))
    real = run("op", "--batch", str(batch), "--backend", "mpi", np=4)
    assert sim.returncode == 0 and real.returncode == 0, sim.stderr + real.stderr
    sim_answers = [json.loads(line) for line in sim.stdout.splitlines()]
    real_answers = [json.loads(line) for line in real.stdout.splitlines()]
    assert len(real_answers) == 2
    for a, b in zip(sim_answers, real_answers):
        assert "local_execution" in a and "local_execution" not in b  # simulated ranks only
        a.pop("local_execution")
        assert a == b


@pytest.mark.parametrize("np,args,field,text", [
    (4, ["op", "mm", "--mesh", "2x4", "--arg", "8x8:R,R", "--arg", "8x8:R,R", "--backend", "mpi"], "mesh",
     "has 8 ranks but the mpi world has 4"),
    (2, ["op", "mm", "--mesh", "2", "--arg", "8x8:R", "--arg", "8x8:R", "--backend", "mpi", "--meta"], "meta",
     "simulates every rank in this process"),
    (2, ["op", "--backend", "mpi", "--batch", "-"], "batch", "only rank 0 reads standard input"),
    (4, ["redistribute", *CASE, "--backend", "mpi"], "mesh", "has 8 ranks but the mpi world has 4: launch with mpirun -np 8"),
    (None, ["redistribute", *CASE, "--inject-fault", "drop-rank:1"], "inject-fault", "needs a real backend"),
    (8, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "drop-rank:8"], "inject-fault", "names rank 8"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "drop-rank"], "inject-fault", "needs 1 value"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--inject-fault", "stall-rank:1:x"], "inject-fault", "seconds 'x'"),
    (None, ["redistribute", *CASE, "--backend", "mpi", "--timeout", "0"], "timeout", "from 0.001 to 86400"),
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


# `dtsim model` on real ranks: every rank runs the model through the same parallel styles, fully_shard and op layer
# over MPI; rank 0's report equals the simulation's — per module every collective (kind, bytes), the gradient
# placements, the loss to the bit — and its check against the unsharded model passes on every rank. Memory is not
# compared: a real rank also counts its kernels' workspace, which the simulation leaves out (docs/model.md).
MODEL = ["model", "--dim", "32", "--heads", "4", "--layers", "2", "--vocab", "50", "--seq", "8", "--batch", "4",
         "--backward", "--json"]
MODEL_CASES = [
    ["--mesh", "4", "--names", "tp", "--plan", "tp+sp"],
    ["--mesh", "4", "--names", "tp", "--plan", "tp"],
    ["--mesh", "4", "--names", "dp", "--plan", "fsdp"],
    ["--mesh", "2x2", "--names", "dp,tp", "--plan", "fsdp+tp", "--loss-parallel"],
]


def model_tree(report):
    out = {}

    def walk(n):
        out[n["fqn"]] = (n["collectives_forward"], n["collectives_backward"],
                         [(e["kind"], e["mesh_dim"], e["bytes_sent_per_rank"], e["cause"])
                          for e in n["dtsim_collectives_forward"] + n["dtsim_collectives_backward"]])
        for c in n["children"]:
            walk(c)

    walk(report["tree"])
    return out


@pytest.mark.parametrize("case", MODEL_CASES, ids=[c[5] + ("-lp" if "--loss-parallel" in c else "") for c in MODEL_CASES])
def test_model_on_mpi_equals_the_simulation(case, tmp_path):
    sim_trace, real_trace = str(tmp_path / "sim.json"), str(tmp_path / "real.json")
    sim = run(*MODEL, *case, "--trace", sim_trace)
    real = run(*MODEL, *case, "--backend", "mpi", "--trace", real_trace, np=4)
    assert sim.returncode == 0 and real.returncode == 0, sim.stderr + real.stderr
    a, b = json.loads(sim.stdout), json.loads(real.stdout)
    assert b["verdict"] == "OK" and a["verdict"] == "OK"
    assert a["loss"] == b["loss"]
    assert model_tree(a) == model_tree(b)
    assert a["grad_placements"] == b["grad_placements"]
    assert len(b["peak_bytes"]["per_rank"]) == 4 and min(b["peak_bytes"]["per_rank"]) > 0
    # The collective-order check's cost on real ranks: one check per collective call (at least one per collective
    # the report lists), every rank's seconds; the simulation has none.
    listed = sum(len(t[2]) for t in model_tree(b).values())
    agreement = b["dtsim_agreement"]
    assert agreement["calls"] >= listed > 0 and len(agreement["seconds_per_rank"]) == 4, agreement
    assert 0 <= agreement["seconds_max"] <= b["seconds"] * 4 and "dtsim_agreement" not in a
    # The model traces: the same modules, ops and collectives in the same order, every rank's values equal at every
    # module boundary (bit for bit, or within rounding where MPI summed floats in another order).
    with open(real_trace) as f:
        t = json.load(f)
    assert t["format"] == "dtsim-model-trace" and t["meta"]["backend"] == "mpi" and t["meta"]["world_size"] == 4
    diff = run("trace-diff", sim_trace, real_trace)
    assert diff.returncode == 0 and diff.stdout.startswith("model traces agree: "), diff.stdout + diff.stderr


# A rank that sends its shard shifted by one element in one collective: the real run's model trace parts from the
# simulation's at the first module boundary after that collective, naming it, the ranks whose values differ, and the
# collective before it; the unsharded check fails too.
@pytest.mark.parametrize("case,fault", [(MODEL_CASES[0], "wrong-offset:2@1"), (MODEL_CASES[3], "wrong-offset:1@2")],
                         ids=["tp+sp", "fsdp+tp-lp"])
def test_model_trace_locates_a_fault(case, fault, tmp_path):
    sim_trace, real_trace = str(tmp_path / "sim.json"), str(tmp_path / "real.json")
    assert run(*MODEL, *case, "--trace", sim_trace).returncode == 0
    real = run(*MODEL, *case, "--backend", "mpi", "--trace", real_trace, "--inject-fault", fault, np=4)
    assert real.returncode == 1 and json.loads(real.stdout)["verdict"] == "WRONG", real.stderr
    diff = run("trace-diff", sim_trace, real_trace)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    first = diff.stdout.splitlines()[1]
    assert re.search(r"event \d+: (forward|backward) (input|output) of [a-z_.0-9]+: values differ on ranks? [0-9, ]+ "
                     r"\(rank \d+: xxh3:[0-9a-f]{16} vs xxh3:[0-9a-f]{16}, sketch off by [0-9.e-]+ of the norm\); "
                     r"the last collective before it: event \d+, [a-z_]+ on (tp|dp)", first), first


def test_model_meta_on_mpi_is_refused():
    real = run(*MODEL, "--mesh", "4", "--names", "tp", "--meta", "--backend", "mpi", np=4)
    assert real.returncode == 2 and "meta:" in real.stderr and real.stdout == ""


# `dtsim compare -- model ...`: one command runs the model simulated and on MPI ranks and diffs the model traces.
def test_compare_model_agrees_and_locates_a_fault(tmp_path):
    model = ["model", "--mesh", "2x2", "--names", "dp,tp", "--plan", "fsdp+tp", "--dim", "32", "--heads", "4",
             "--layers", "1", "--vocab", "50", "--seq", "8", "--batch", "4", "--backward"]
    same = run("compare", "--np", "4", "--keep", str(tmp_path), "--", *model)
    assert same.returncode == 0 and "\nagree: " in same.stdout, same.stdout + same.stderr
    for name in ("sim.json", "real.json"):
        with open(tmp_path / name) as f:
            assert json.load(f)["format"] == "dtsim-model-trace"
    bad = run("compare", "--np", "4", "--inject-fault", "wrong-op:1", "--", *model)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert re.search(r"differ: the mpi run parts from the simulation at event \d+: forward output of "
                     r"tok_embeddings:\n  event \d+: forward output of tok_embeddings: values differ on rank 1 ",
                     bad.stdout), bad.stdout
    missed = run("compare", "--np", "4", "--inject-fault", "wrong-offset:1@100000", "--", *model)
    assert missed.returncode == 5 and "not struck: the fault wrong-offset:1@100000" in missed.stdout, missed.stdout


@pytest.mark.parametrize("command", [
    ["redistribute", *CASE],
    ["op", "mm", "--mesh", "2x2", "--arg", "8x6:S(1),R", "--arg", "6x4:S(0),S(1)"],
    ["model", "--mesh", "4", "--dim", "32", "--heads", "4", "--layers", "1", "--vocab", "64", "--seq", "8",
     "--batch", "2"],
])
@pytest.mark.parametrize("path", ["missing-folder/t.json", "/dev/zero"])
def test_an_output_rank_0_refuses_ends_every_rank_at_once(command, path, tmp_path):
    """Rank 0 alone writes the trace; it refuses the path before the run and ends the whole job at once: exit 2 with
    rank 0's error in a few seconds, whatever --timeout says (before, the other ranks waited at the first collective
    for the whole timeout, then the run ended as stuck, exit 4)."""
    np = 4 if command[0] != "redistribute" else 8
    start = time.monotonic()
    cmd = [MPIRUN, str(np), DTSIM, *command, "--backend", "mpi", "--timeout", "120", "--trace", path]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    took = time.monotonic() - start
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    errors = [line for line in out.stderr.splitlines() if line.startswith("dtsim: error:")]
    assert len(errors) == 1 and errors[0].startswith("dtsim: error: real run: rank 0: trace: "), out.stderr[-2000:]
    assert took < 60, took
    assert os.listdir(tmp_path) == []


def test_a_batch_line_rank_0_refuses_is_skipped_by_every_rank(tmp_path):
    """--batch on real ranks: a line whose trace rank 0 refuses is answered as an error and every rank goes on to the
    next line together (no rank runs the refused line's collectives alone)."""
    line = {"mesh": [4], "shape": [8], "from": "S(0)", "to": "R"}
    batch = tmp_path / "cases.jsonl"
    batch.write_text(json.dumps(dict(line, trace="missing-folder/t.json")) + "\n" +
                     json.dumps(dict(line, trace="cases.jsonl")) + "\n" + json.dumps(dict(line, trace="ok.json")) + "\n")
    start = time.monotonic()
    out = subprocess.run([MPIRUN, "4", DTSIM, "redistribute", "--backend", "mpi", "--timeout", "120", "--batch",
                          str(batch)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert time.monotonic() - start < 60
    answers = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 1 and len(answers) == 3, out.stdout + out.stderr[-2000:]
    assert answers[0]["field"] == "trace" and answers[1]["field"] == "trace", answers
    assert answers[2]["ok"] and (tmp_path / "ok.json").exists()
