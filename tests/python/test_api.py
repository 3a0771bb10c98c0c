"""The Python API's contract beyond the upstream comparison (test_api_vs_upstream.py): tensors cross without copies,
bad input is a ValueError naming the argument (never a crash), plans are data that can be edited and run, traces load
with the CLI's validation, and `import dtsim` works in the project venv without any path set."""
import glob
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.distributed.tensor import Replicate as UpstreamReplicate
from torch.distributed.tensor import Shard as UpstreamShard

import dtsim
from dtsim import DTensor, Partial, Replicate, Shard

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.fixture
def mesh():
    return dtsim.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))


def test_import_in_the_venv_without_a_path():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import dtsim, os; print(os.path.realpath(dtsim.__file__))"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    # The project venv's editable install, or a pip install's site-packages copy (scripts/compat.sh names it).
    package = os.environ.get("DTSIM_EXPECT_PACKAGE", os.path.join(ROOT, "python", "dtsim"))
    assert out.stdout.strip() == os.path.realpath(os.path.join(package, "__init__.py"))


@pytest.mark.parametrize("setup, message", [
    # An unsupported release: the error names it and the supported ones.
    ("torch.__version__ = '2.12.0+cpu'", "torch 2.12.0+cpu is not supported; supported releases: 2.11.0, 2.13.0"),
    # A supported release other than the one dtsim._C was built with (it would fail to load, or load wrongly).
    ("import dtsim._versions as v; torch.__version__ = next(t for t in v.TESTED_TORCH "
     "if v.torch_minor(t) != v.torch_minor(orig))", "was built against torch "),
])
def test_import_refuses_another_torch(setup, message):
    """`import dtsim` under a torch it does not support, or not the one its extension was built with, is an
    ImportError saying so, before the extension is loaded."""
    code = ("import sys, torch; orig = torch.__version__\n" + setup + "\n"
            "for m in [m for m in sys.modules if m == 'dtsim' or m.startswith('dtsim.')]: del sys.modules[m]\n"
            "try:\n    import dtsim\nexcept ImportError as e:\n    print('ImportError:', e)\n"
            "else:\n    print('imported')\n"
            "print('extension loaded:', 'dtsim._C' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError: dtsim: "), out.stdout
    assert message in out.stdout, out.stdout
    assert out.stdout.endswith("extension loaded: False\n"), out.stdout


def test_import_loads_torch_only_when_the_api_is_used(tmp_path):
    """`import dtsim` loads neither torch nor the extension (dtsim record checks its outputs and starts its job
    without them); the first use of an API name loads both."""
    code = ("import sys, dtsim\n"
            "from dtsim import _files\n"
            "_files.check_outputs([(sys.argv[1], 'output')])\n"
            "try:\n    _files.check_outputs([(sys.argv[2], 'output')])\n"
            "except ValueError as e:\n    print('refused:', e)\n"
            "print('after import:', 'torch' in sys.modules, 'dtsim._C' in sys.modules)\n"
            "mesh = dtsim.init_device_mesh('cpu', (2,))\n"
            "print('after use:', 'torch' in sys.modules, 'dtsim._C' in sys.modules, type(mesh).__module__)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.json"), str(tmp_path)],
                         capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"refused: output: '{tmp_path}' is a directory; give a file path",
                                       "after import: False False", "after use: True True dtsim"], out.stdout


def test_import_refuses_an_installed_torch_it_does_not_support_without_loading_it():
    """With torch not loaded yet, `import dtsim` reads the installed release from its metadata, and refuses an
    unsupported one as when torch is loaded."""
    code = ("import sys, importlib.metadata as md\n"
            "md.version = lambda name: '2.12.0+cpu' if name == 'torch' else None\n"
            "try:\n    import dtsim\nexcept ImportError as e:\n    print('ImportError:', e)\n"
            "print('torch loaded:', 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError: dtsim: torch 2.12.0+cpu is not supported"), out.stdout
    assert out.stdout.endswith("torch loaded: False\n"), out.stdout


def test_from_local_and_to_local_share_storage(mesh):
    shards = [torch.full((3, 2), float(r)) for r in range(8)]
    dt = DTensor.from_local(shards, mesh, [Shard(0), Replicate()], shape=(6, 2))
    back = dt.to_local()
    assert [t.data_ptr() for t in back] == [t.data_ptr() for t in shards]
    shards[5].fill_(42)  # the DTensor holds the very tensors given
    assert torch.equal(dt.to_local()[5], torch.full((3, 2), 42.0))
    assert dt.to_local()[2].data_ptr() == back[2].data_ptr()  # to_local() is a view each time, never a copy
    by_rank = DTensor.from_local({r: t for r, t in enumerate(shards)}, mesh, "S(0),R", shape=(6, 2))
    assert [t.data_ptr() for t in by_rank.to_local()] == [t.data_ptr() for t in shards]
    assert list(by_rank.local_shards()) == list(range(8))


def test_shards_written_in_python_change_only_their_rank(mesh):
    x = torch.arange(12.0).reshape(6, 2)
    dt = dtsim.distribute_tensor(x, mesh, [Replicate(), Replicate()])
    before = x.clone()
    dt.to_local()[1].add_(100)
    assert torch.equal(x, before)  # the input is never written
    assert torch.equal(dt.to_local()[0], before) and torch.equal(dt.to_local()[1], before + 100)
    out = dt.redistribute(mesh, [Shard(0), Shard(1)])
    assert torch.equal(out.to_local()[1], (before + 100)[0:3, 1:2])  # rank 1 reads its own (written) copy


def test_full_tensor_and_redistribute_round_trip(mesh):
    x = torch.randn(7, 9, dtype=torch.float64)
    dt = dtsim.distribute_tensor(x, mesh, [Shard(1), Shard(0)])
    assert dt.shape == torch.Size([7, 9]) and dt.dtype == torch.float64 and dt.stride() == (9, 1)
    assert dt.placements == (Shard(1), Shard(0))
    for target in ([Replicate(), Shard(1)], "S(0),S(0)", [UpstreamShard(1), UpstreamReplicate()]):
        assert torch.equal(dt.redistribute(mesh, target).full_tensor(), x)
    assert [tuple(t.shape) for t in dt.to_local()] == [(2, 5)] * 3 + [(1, 5)] + [(2, 4)] * 3 + [(1, 4)]


def test_partial_sums_and_averages(mesh):
    shards = [torch.full((2,), float(r)) for r in range(8)]
    dt = DTensor.from_local(shards, mesh, [Replicate(), Partial()], shape=(2,))
    # each dp row sums its tp ranks: 0+1+2+3 = 6 on dp 0, 4+5+6+7 = 22 on dp 1
    assert [t.tolist() for t in dt.redistribute(mesh, "R,R").to_local()] == [[6.0, 6.0]] * 4 + [[22.0, 22.0]] * 4
    avg = DTensor.from_local(shards, mesh, [Partial("avg"), Replicate()], shape=(2,))
    assert avg.redistribute(mesh, "R,R").to_local()[0].tolist() == [2.0, 2.0]  # (0 + 4) / 2


def test_submesh_stands_for_every_group(mesh):
    x = torch.arange(8.0)
    dt = dtsim.distribute_tensor(x, mesh["tp"], [Shard(0)])
    assert len(dt.to_local()) == 8  # every rank of the root mesh
    assert [t.tolist() for t in dt.to_local()] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]] * 2
    assert torch.equal(dt.full_tensor(), x)


def test_plan_is_data_and_runs_as_edited(mesh):
    x = torch.arange(40.0).reshape(8, 5)
    dt = dtsim.distribute_tensor(x, mesh, [Shard(0), Shard(0)])
    p = dtsim.plan(dt, [Replicate(), Replicate()])
    assert [(s.mesh_dim_name, str(s.src), str(s.dst), s.collective) for s in p.steps] == \
        [("tp", "S(0)", "R", "all_gather"), ("dp", "S(0)", "R", "all_gather")]
    assert p.steps[0].groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert p.steps[0].bytes_per_rank == [20] * 8  # one 1x5 float32 row per rank
    assert "all_gather" in p.explain() and "step 2" in p.explain()
    assert torch.equal(dt.redistribute(plan=p).full_tensor(), x)
    same = dtsim.plan([Shard(0), Shard(0)], "R,R", device_mesh=mesh, shape=(8, 5))
    assert same.to_json() == p.to_json()
    edited = json.loads(json.dumps(p.to_json()))
    edited["plan"].reverse()  # dp first would read a layout right to left: refused before anything runs
    with pytest.raises(ValueError, match="plan"):
        dt.redistribute(plan=dtsim.Plan(edited))


def test_layout_report(mesh):
    lay = dtsim.layout(mesh, [Shard(0), Shard(1)], (5, 10))
    assert [r.local_shape for r in lay.ranks] == [(3, 3)] * 3 + [(3, 1)] + [(2, 3)] * 3 + [(2, 1)]
    assert lay.ranks[7].global_offset == (3, 9) and lay.ranks[7].intervals == [[(3, 5)], [(9, 10)]]
    assert "rows\\cols" in lay.render()
    big = dtsim.layout(dtsim.init_device_mesh("cpu", (1024, 1024)), "S(0),S(1)", (4096, 4096))
    assert big.ranks == [] and big.to_json()["num_ranks"] == 1 << 20  # summarised, not 2^20 objects


def test_load_trace_validates(tmp_path):
    goldens = sorted(glob.glob(os.path.join(ROOT, "traces", "*.json")))
    assert goldens
    for path in goldens:
        t = dtsim.load_trace(path)
        assert t.format in ("dtsim-trace", "dtsim-op-trace")
    t = dtsim.load_trace(goldens[0])
    if t.format == "dtsim-trace":
        final = t.final["ranks"][0]
        assert final["hash"].startswith("xxh3:")
    bad = json.loads(open(goldens[0]).read())
    bad["steps"] = [{"mesh_dim": "x"}]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json'.*steps\[0\]"):
        dtsim.load_trace(p)
    with pytest.raises(ValueError, match="trace"):
        dtsim.load_trace(tmp_path)  # a directory
    with pytest.raises(ValueError, match="trace"):
        dtsim.load_trace("/dev/zero")  # never read without bound


def test_load_trace_reads_model_traces(tmp_path):
    path = tmp_path / "model.json"
    subprocess.run([os.environ.get("DTSIM_BIN", "dtsim"), "model", "--mesh", "2", "--names", "tp", "--dim", "8",
                    "--heads", "2", "--layers", "1", "--vocab", "10", "--seq", "2", "--batch", "1", "--backward",
                    "--trace", str(path)], check=True, capture_output=True, timeout=120)
    t = dtsim.load_trace(path)
    assert t.format == "dtsim-model-trace" and t.mesh == {"shape": [2], "names": ["tp"]}
    ends = [e for e in t.events if e["event"] == "module_end"]
    assert ends and all(len(e["tensor"]["hashes"]) == 2 for e in ends)
    bad = t.to_json()
    ends = [e for e in bad["events"] if e["event"] == "module_end"]
    ends[0]["tensor"]["hashes"][1] = "xxh3:nothex"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad\.json'.*tensor\.hashes\[1\]"):
        dtsim.load_trace(p)


def test_load_trace_checks_op_trace_arguments_against_the_schema(tmp_path):
    path = tmp_path / "op.json"
    subprocess.run([os.environ.get("DTSIM_BIN", "dtsim"), "op", "mm", "--mesh", "2", "--arg", "4x4:S(0)", "--arg",
                    "4x4:S(0)", "--trace", str(path)], check=True, capture_output=True, timeout=120)
    t = dtsim.load_trace(path)
    assert [(r["op"], r["arg"]) for r in t.redistributions] == [("aten::mm", 1)]  # mat2 gathered to R
    bad = t.to_json()
    bad["redistributions"][0]["arg"] = 2  # mm has two tensor arguments
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"redistributions\[0\]: arg 2, but aten::mm has 2 tensor arguments"):
        dtsim.load_trace(p)


def test_shard_hash_is_the_trace_hash():
    mesh = dtsim.init_device_mesh("cpu", (4,))
    x = torch.arange(10.0)
    dt = dtsim.distribute_tensor(x, mesh, [Shard(0)])
    hashes = [dtsim.shard_hash(t) for t in dt.to_local()]
    assert len(set(hashes)) == 4 and all(h.startswith("xxh3:") and len(h) == 21 for h in hashes)
    assert dtsim.shard_hash(x[0:3]) == hashes[0]
    assert dtsim.shard_hash(x[0:3].double()) != hashes[0]  # the dtype is hashed too


def _fake_distribute(mesh):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(4)
    return dtsim.distribute_tensor(fake, mesh, "R,R")


def _edited_plan(mesh, key, value):
    """A plan of [S(0), R] -> [R, R] edited: its total estimate, or its first step's groups, replaced."""
    dt = dtsim.distribute_tensor(torch.arange(16.0).reshape(8, 2), mesh, "S(0),R")
    edited = dtsim.plan(dt, "R,R").to_json()
    if key == "groups":
        edited["plan"][0]["groups"] = value
        return dt.redistribute(plan=dtsim.Plan(edited))
    edited[key] = value
    return dtsim.Plan(edited)


def _changed_in_place(mesh, change):
    """Rank 1's shard resized or transposed in place, then redistributed."""
    dt = dtsim.distribute_tensor(torch.arange(16.0).reshape(8, 2), mesh, "S(0),R")
    change(dt.to_local()[1])
    return dt.redistribute(mesh, "R,R")


BAD = [
    (lambda m: dtsim.init_device_mesh("cuda", (2,)), "device_type"),
    (lambda m: dtsim.init_device_mesh("cpu", (0, 2)), "mesh"),
    (lambda m: dtsim.init_device_mesh("cpu", "2x4"), "mesh_shape"),
    (lambda m: dtsim.init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "a")), "names"),
    (lambda m: m["pp"], "submesh: mesh mesh[dp=2, tp=4] has no dim 'pp'"),
    (lambda m: dtsim.distribute_tensor([1, 2], m, "S(0),R"), "tensor"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "S(0)"), "placements"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "S(3),R"), "placements"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "X,R"), "placements"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, [Shard(0), 5]), "placements"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), "mesh", "R,R"), "device_mesh"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "R,R").redistribute(m, "P(sum),R"), "placements"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "R,R").redistribute(m, "R,R", planner="best"), "planner"),
    (lambda m: DTensor.from_local([torch.ones(2)] * 3, m, "S(0),R"), "local_tensor"),
    (lambda m: DTensor.from_local(torch.ones(2), m, "S(0),R"), "local_tensor"),
    (lambda m: DTensor.from_local([torch.ones(2)] * 7 + [torch.ones(3)], m, "S(0),R"), "shape"),
    (lambda m: DTensor.from_local({0: torch.ones(2)}, m, "S(0),R"), "local_tensor"),
    (lambda m: dtsim.plan("S(0),R", "R,R", device_mesh=m), "shape"),
    (lambda m: dtsim.plan("S(0),R", "R,R", shape=(4,)), "device_mesh"),
    (lambda m: dtsim.plan("S(0),R", "R,R", device_mesh=m, shape=(4,), dtype=torch.complex64), "dtype"),
    (lambda m: dtsim.plan("Q,R", "R,R", device_mesh=m, shape=(4,)), "src"),
    (lambda m: dtsim.layout(m, "S(0),R", (-1, 2)), "shape"),
    (lambda m: dtsim.layout(m, "S(0),R", (4, 2), ranks="99"), "ranks"),
    (lambda m: Shard("0"), "Shard.dim"),
    (lambda m: Partial("mean"), "Partial.reduce_op"),
    (lambda m: dtsim.load_trace("/nonexistent/t.json"), "trace"),
    (lambda m: dtsim.shard_hash(3), "tensor"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "S(0),R", src_data_rank="a"), "src_data_rank: expected"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "S(0),R", src_data_rank=True), "src_data_rank: expected"),
    (lambda m: dtsim.distribute_tensor(torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), m, "R,R"),
     "tensor: a nested tensor"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4).to_sparse(), m, "R,R"), "tensor: sparse_coo tensors"),
    (lambda m: dtsim.shard_hash(torch.ones(2).to_sparse()), "tensor: sparse_coo tensors"),
    (lambda m: _fake_distribute(m), "tensor: a FakeTensor"),
    (lambda m: dtsim.Plan(None), "plan: expected the JSON object"),
    (lambda m: dtsim.Plan({"foo": 1}), "plan: unknown key 'foo'"),
    (lambda m: dtsim.Plan({"plan": []}), "plan: missing key 'from'"),
    (lambda m: _edited_plan(m, "total_est_us", -1.0), "total_est_us: an estimate in microseconds is a number >= 0"),
    (lambda m: _edited_plan(m, "groups", [[0, 5], [1, 4], [2, 7], [3, 6]]), "plan[0].groups: [[0, 5]"),
    (lambda m: dtsim.plan("S(0),R", "R,R", device_mesh=m, shape=(4,), planner=None), "planner: expected a planner name"),
    (lambda m: dtsim.distribute_tensor(torch.ones(4), m, "R,R").redistribute(m, "R,R", planner=3),
     "planner: expected a planner name"),
    (lambda m: m["tp", "dp"], "mesh_dim_names: ('tp', 'dp') are not in the mesh's order ('dp', 'tp')"),
    (lambda m: _changed_in_place(m, lambda t: t.resize_(100)), "shards: a shard no longer fits"),
    (lambda m: _changed_in_place(m, lambda t: t.resize_(0)), "shards: a shard no longer fits"),
    (lambda m: _changed_in_place(m, lambda t: t.t_()), "shards: a shard no longer fits"),
    (lambda m: dtsim.record(b"/tmp/dtsim_bytes.json").__enter__(), "path: expected a str"),
    (lambda m: dtsim._C.estimate_collective_us("all_gatherx", 4, 16), "kind: 'all_gatherx'"),
    (lambda m: dtsim._C.estimate_collective_us("all_gather", 0, 16), "group_size: 0"),
    (lambda m: dtsim._C.estimate_collective_us("all_gather", 4, -1), "message_bytes: -1"),
]


def test_collective_estimate_is_the_planners_closed_form():
    """planner.h's alpha-beta model: 6.6 us + hops x 0.6 us + bytes x bus factor / 87.7 GiB/s."""
    gib = float(1 << 30)
    assert dtsim._C.estimate_collective_us("all_gather", 4, 1 << 20) == pytest.approx(
        6.6 + 3 * 0.6 + (1 << 20) * 3 / 4 / (87.7 * gib) * 1e6)
    assert dtsim._C.estimate_collective_us("all_reduce", 8, 4096) == pytest.approx(
        6.6 + 14 * 0.6 + 4096 * 14 / 8 / (87.7 * gib) * 1e6)
    assert dtsim._C.estimate_collective_us("all_reduce", 1, 4096) == 0  # no peer, no collective
    assert dtsim._C.estimate_collective_us("broadcast", 4, 4096) is None  # not in the cost model


@pytest.mark.parametrize("call,field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_bad_input_is_a_value_error_naming_the_field(mesh, call, field):
    with pytest.raises(ValueError) as e:
        call(mesh)
    assert field in str(e.value), str(e.value)


def test_meshes_in_any_rank_order():
    x = torch.arange(8.0)
    mesh = dtsim.DeviceMesh("cpu", [[0, 2, 4, 6], [1, 3, 5, 7]])
    dt = dtsim.distribute_tensor(x, mesh, [Replicate(), Shard(0)])
    by_rank = dt.local_shards()
    # rank 2 sits at coordinate (0, 1): the second quarter of x; rank 1 at (1, 0): the first
    assert by_rank[2].tolist() == [2.0, 3.0] and by_rank[1].tolist() == [0.0, 1.0]
    assert torch.equal(dt.full_tensor(), x)


def test_full_tensor_of_disagreeing_replicas_is_a_value_error(mesh):
    dt = dtsim.distribute_tensor(torch.ones(4), mesh, [Replicate(), Replicate()])
    dt.to_local()[5].add_(1)
    with pytest.raises(ValueError, match="full_tensor: rank 5 disagrees with rank 0"):
        dt.full_tensor()


def test_load_trace_reads_recordings(tmp_path):
    """A recording (`dtsim run --trace` of tests/run/scripts/counted.py: distribute_tensor then full_tensor) loads
    as the CLI reads it; an impossible one (world_size 0) is a ValueError naming the field."""
    import json
    import subprocess

    dtsim_bin = os.environ.get("DTSIM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "dtsim"))
    path = tmp_path / "run.json"
    script = os.path.join(os.path.dirname(__file__), "..", "run", "scripts", "counted.py")
    out = subprocess.run([dtsim_bin, "run", "--nproc-per-node", "4", "--trace", str(path), script],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rec = dtsim.load_trace(path)
    assert rec.format == "dtsim-recording" and rec.meta["backend"] == "dtsim-run"
    assert [(r["call"], r["src"]["placements"], r["dst"]["placements"]) for r in rec.redistributions] == [
        ("full_tensor", "[S(0)]", "[R]")]
    doc = json.loads(path.read_text())
    doc["meta"]["world_size"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as e:
        dtsim.load_trace(bad)
    assert "world_size" in str(e.value), str(e.value)


def test_pickle_and_deepcopy_keep_every_shard(mesh):
    """As upstream's DTensor and DeviceMesh pickle: a DTensor (also on a submesh) comes back with its mesh,
    placements, shape and every rank's shard, as an independent copy; dir(dtsim) lists the public names only."""
    import copy
    import pickle

    x = torch.arange(32.0).reshape(8, 4)
    dt = dtsim.distribute_tensor(x, mesh, "S(0),S(1)")
    back = pickle.loads(pickle.dumps(dt))
    assert back.placements == dt.placements and back.device_mesh == mesh and torch.equal(back.full_tensor(), x)
    copied = copy.deepcopy(dt)
    copied.to_local()[0].add_(1)
    assert torch.equal(dt.full_tensor(), x) and not torch.equal(copied.full_tensor(), x)
    tp = mesh["tp"]
    on_tp = dtsim.distribute_tensor(torch.arange(8.0), tp, "S(0)")
    again = pickle.loads(pickle.dumps(on_tp))
    assert again.device_mesh == tp and torch.equal(again.full_tensor(), torch.arange(8.0))
    assert copy.deepcopy(mesh) == mesh
    assert set(dir(dtsim)) == set(dtsim.__all__)


def _random_plan_cases(n, seed=35):
    """Random redistributions on 1-3-D meshes, _StridedShard and Partial included, valid and not."""
    import random

    rng = random.Random(seed)
    meshes = [(2,), (4,), (2, 2), (2, 4), (4, 2), (2, 2, 2)]
    cases = []
    for _ in range(n):
        mesh = rng.choice(meshes)
        ndim = rng.randint(1, 3)
        shape = [rng.choice([1, 3, 4, 6, 8, 12, 16]) for _ in range(ndim)]

        def placement(allow_partial):
            kind = rng.random()
            d = rng.randrange(ndim)
            if kind < 0.3:
                return "R"
            if kind < 0.65:
                return f"S({d})"
            if kind < 0.85:
                return f"_S({d},{rng.choice([2, 3, 4])})"
            return "P(sum)" if allow_partial else "R"

        src = ",".join(placement(True) for _ in mesh)
        targets = [placement(False) for _ in mesh]
        if rng.random() < 0.08:  # a dim the tensor lacks: both must refuse
            targets[0] = "S(9)"
        dst = ",".join(targets)
        names = ",".join(["dp", "tp", "pp"][:len(mesh)])
        cases.append({"mesh": "x".join(map(str, mesh)), "names": names, "shape": shape, "from": src, "to": dst,
                      "planner": rng.choice(["greedy", "greedy", "min-cost", "graph"])})
    return cases


def test_python_plans_equal_the_cli_plans():
    """dtsim.plan and `dtsim plan` (its --batch) give the same plan JSON on 300 random cases, _StridedShard and
    Partial sources included, for every planner; a case one refuses the other refuses too."""
    cases = _random_plan_cases(300)
    dtsim_bin = os.environ.get("DTSIM_BIN", "dtsim")
    out = subprocess.run([dtsim_bin, "plan", "--batch", "-"], input="\n".join(json.dumps(c) for c in cases) + "\n",
                         capture_output=True, text=True, timeout=300)
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(answers) == len(cases), out.stderr[-2000:]
    compared = refused = 0
    for case, cli in zip(cases, answers):
        mesh = dtsim.init_device_mesh("cpu", tuple(int(s) for s in case["mesh"].split("x")),
                                      mesh_dim_names=tuple(case["names"].split(",")))
        try:
            got = dtsim.plan(case["from"], case["to"], device_mesh=mesh, shape=case["shape"],
                             planner=case["planner"]).to_json()
        except ValueError as e:
            assert "error" in cli, (case, str(e), cli)
            refused += 1
            continue
        assert "error" not in cli, (case, cli)
        assert got == cli, (case, got, cli)
        compared += 1
    assert compared >= 150 and refused > 0, (compared, refused)
