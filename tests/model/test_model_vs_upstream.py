"""`dtsim model` against upstream PyTorch: the same Llama-style model and plan run by upstream's own
parallel styles and FSDP2 under LocalTensorMode (llama_twin.py), its collectives counted per module by
upstream's CommDebugMode. Every module's forward and backward counts, the parameters' placements and
every parameter gradient's placements must be equal."""
import contextlib
import io
import json
import os
import random
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import llama_twin  # noqa: E402

DTSIM = os.environ.get("DTSIM_BIN", "build/dtsim")

# (mesh, names, plan, dim, heads, layers, vocab, seq, batch, ffn[, loss_parallel])
CASES = [
    ("1", "tp", "tp+sp", 32, 4, 1, 50, 8, 2, 0),
    ("2", "tp", "tp+sp", 32, 4, 2, 50, 8, 2, 0),
    ("4", "tp", "tp+sp", 64, 4, 2, 100, 8, 2, 0),
    ("8", "tp", "tp+sp", 64, 8, 1, 101, 8, 2, 0),   # uneven vocab over 8
    ("4", "tp", "tp+sp", 60, 4, 1, 101, 8, 1, 0),   # head_dim 15, uneven vocab
    ("3", "tp", "tp+sp", 48, 6, 1, 37, 6, 2, 96),   # tp 3
    ("1", "tp", "tp", 32, 4, 1, 50, 8, 2, 0),
    ("4", "tp", "tp", 64, 4, 2, 100, 8, 2, 0),
    ("8", "tp", "tp", 64, 8, 1, 101, 4, 2, 0),
    ("2", "dp", "fsdp", 32, 4, 2, 50, 8, 2, 0),
    ("4", "dp", "fsdp", 32, 4, 2, 101, 8, 4, 90),   # uneven FSDP shards
    ("2x2", "dp,tp", "fsdp+tp", 32, 4, 2, 50, 8, 2, 0),
    ("2x4", "dp,tp", "fsdp+tp", 64, 4, 1, 100, 8, 2, 0),
    # Loss parallelism: the logits stay vocab-sharded, cross entropy all-reduces (upstream's loss_parallel()).
    ("4", "tp", "tp+sp", 64, 4, 2, 100, 8, 2, 0, True),
    ("1", "tp", "tp+sp", 8, 1, 2, 18, 4, 1, 71, True),  # tp of 1: upstream still counts the handlers' all-reduces
    ("8", "tp", "tp+sp", 64, 8, 1, 101, 8, 2, 0, True),
    ("4", "tp", "tp", 64, 4, 1, 100, 8, 2, 0, True),
    ("2x2", "dp,tp", "fsdp+tp", 32, 4, 2, 50, 8, 2, 0, True),
]

TWIN_PLAN = {"fsdp+tp": "fsdp+tp+sp"}  # dtsim's fsdp+tp is torchtitan's: TP with sequence parallelism


def run_twin(mesh, names, plan, dim, heads, layers, vocab, seq, batch, ffn, loss_parallel=False):
    argv = ["--mesh", mesh, "--names", names, "--plan", TWIN_PLAN.get(plan, plan), "--dim", str(dim),
            "--heads", str(heads), "--layers", str(layers), "--vocab", str(vocab), "--seq", str(seq),
            "--batch", str(batch), "--backward"]
    if ffn:
        argv += ["--ffn", str(ffn)]
    if loss_parallel:
        argv.append("--loss-parallel")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert llama_twin.main(argv) == 0
    return json.loads(out.getvalue())


def run_dtsim(mesh, names, plan, dim, heads, layers, vocab, seq, batch, ffn, loss_parallel=False):
    cmd = [DTSIM, "model", "--mesh", mesh, "--names", names, "--plan", plan, "--dim", str(dim),
           "--heads", str(heads), "--layers", str(layers), "--vocab", str(vocab), "--seq", str(seq),
           "--batch", str(batch), "--ffn", str(ffn), "--backward", "--json"] + (["--loss-parallel"] if loss_parallel else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout[-2000:]
    return json.loads(p.stdout)


def dtsim_nodes(report):
    nodes = {}

    def visit(n):
        nodes[n["fqn"]] = n
        for c in n["children"]:
            visit(c)

    visit(report["tree"])
    return nodes


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c[:3])) + f"-L{c[5]}-v{c[6]}" + ("-lp" if c[10:] else "")
                                             for c in CASES])
def test_per_module_counts_and_placements_equal_upstream(case):
    check_equal(case, run_twin(*case), run_dtsim(*case))


def random_case(rng):
    """A configuration drawn from what the command accepts: any plan, tp 1-8 (also 3, 5, 6), dp 1-8, heads a multiple
    of tp, uneven vocabularies and FFN sizes, seq a multiple of tp (sequence parallelism needs even shards)."""
    plan = rng.choice(["tp+sp", "tp+sp", "tp", "fsdp", "fsdp+tp"])
    dp, tp = 1, 1
    if plan in ("tp", "tp+sp"):
        tp = rng.choice([1, 2, 3, 4, 5, 6, 8])
        mesh, names = str(tp), "tp"
    elif plan == "fsdp":
        dp = rng.choice([1, 2, 3, 4, 8])
        mesh, names = str(dp), "dp"
    else:
        dp, tp = rng.choice([(2, 2), (2, 4), (4, 2), (2, 3), (3, 2), (1, 2), (2, 1)])
        mesh, names = f"{dp}x{tp}", "dp,tp"
    heads = tp * rng.choice([1, 2]) if plan != "fsdp" else rng.choice([2, 4])
    dim = heads * rng.choice([4, 6, 8])
    ffn = rng.choice([0, tp * rng.randint(1, 12), rng.randint(tp, 100)])
    return (mesh, names, plan, dim, heads, rng.choice([1, 2]), rng.randint(tp, 130), tp * rng.randint(1, 3),
            dp * rng.randint(1, 2), ffn, plan != "fsdp" and rng.random() < 0.3)


RANDOM_CASES = int(os.environ.get("DTSIM_MODEL_RANDOM_CASES", "24"))


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_random_configurations_equal_upstream(seed):
    """Configurations no one chose: where upstream runs the case its counts and placements are the judge; where it
    fails (its LocalTensorMode cannot run some uneven shards: 'unhashable type: non-nested SymInt', an empty vocab
    shard in index_select), dtsim's own verdict against the unsharded model must be OK."""
    case = random_case(random.Random(9100 + seed))
    ours = run_dtsim(*case)
    try:
        twin = run_twin(*case)
    except (RuntimeError, AttributeError, AssertionError) as e:
        assert ours["verdict"] == "OK", (case, [c for c in ours["checks"] if not c["ok"]])
        print(f"{case}: upstream fails ({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}); "
              "dtsim checked against the unsharded model")
        return
    check_equal(case, twin, ours)


def check_equal(case, twin, ours):
    assert ours["verdict"] == "OK", [c for c in ours["checks"] if not c["ok"]]
    nodes = dtsim_nodes(ours)
    root = "Transformer"
    twin_fqns = set()
    for m in twin["modules"]:
        fqn = root if m["fqn"] == "" else m["fqn"]
        twin_fqns.add(fqn)
        assert fqn in nodes, f"dtsim has no module {fqn}"
        n = nodes[fqn]
        for phase in ("forward", "backward"):
            want = {k: v for k, v in m["collectives_" + phase].items() if v}
            got = {k: v for k, v in n["collectives_" + phase]}
            assert got == want, f"{fqn} {phase}: dtsim {got}, upstream {want}"
    assert set(nodes) == twin_fqns
    # Gradient placements of every parameter.
    assert ours["grad_placements"] == twin["grad_placements"]
    # Parameter placements as the plan leaves them (tensor parallelism; FSDP's sharded form below).
    for m in twin["modules"]:
        fqn = root if m["fqn"] == "" else m["fqn"]
        got = dict(nodes[fqn]["parameters"])
        if "fsdp" not in case[2]:
            assert got == m["parameters"], fqn
    # The loss the twin computes (its own weights) is not ours; the value check is dtsim's own verdict
    # against the unsharded model.
