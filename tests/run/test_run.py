"""`dtsim run` against real torchrun: the same unmodified scripts under both launchers must print the same losses and
parameter checksums; injected bugs must be reported with the rank and the line; bad input has documented exits.

The reference for every script is the script itself under real `torchrun --standalone` with Gloo on this machine
(examples/python/run/). Values are compared within float rounding (relative 1e-5), and the test also reports which
scripts agree bit for bit (in the printed 10 significant digits).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "python", "run")
SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
DTSIM = os.environ.get("DTSIM_BIN", os.path.join(ROOT, "build", "dtsim"))
PYTHON = sys.executable
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")

# script (examples/python/run/, or tests/run/scripts/ for p2p_ring.py and implicit_init_tp.py) -> world size (the
# docstrings say so too)
BOTH_WAYS = {
    "tp_mlp.py": 4,
    "tp_sp.py": 4,
    "tp_fsdp_adamw.py": 4,
    "ddp.py": 4,
    "loss_parallel.py": 4,
    "pipeline_2stage.py": 2,
    "moe_all_to_all.py": 4,
    "rank_branches.py": 4,
    "p2p_ring.py": 4,
    "optimizers.py": 4,  # SGD/AdamW foreach, Adam fused, the default backend, torch.accelerator (tests/run/scripts/)
    "uneven_views.py": 4,  # ops whose propagation reads the rank, and op outputs redistributed per rank: what the
                           # propagation cache that the ranks share (python/dtsim/run/propagation.py) must keep exact
    "rank_modules.py": 4,  # module-level caches, class state, counters and import-time registries are each rank's own;
                           # a thread pool the rank starts runs collectives on its groups (rank_state.py)
    "accelerate_ddp.py": 2,  # accelerate's class-level rank state, per rank; DDP(device_ids=[i]) on an emulated GPU
    "titan_patterns.py": 4,  # torchtitan's patterns: meta init, vocabulary-parallel embedding, complex RoPE, clipping
    "process_state.py": 4,  # builtins.print and sys.stdout replaced on some ranks change those ranks' own view only
    "implicit_init_tp.py": 4,  # no init_process_group: init_device_mesh makes the default group (device_mesh.py's own
                               # reference to init_process_group, which dtsim run replaces too)
    "rank_process_calls.py": 2,  # each rank's own signal handlers, object collectives, monitored_barrier on Gloo
    "checkpointed_exchange.py": 2,  # a custom op each rank's module copy defines, and an uneven all-to-all inside a
                                    # selective-activation-checkpointing region (torchtitan's MoE dispatch)
}


# Scripts whose printed values must equal real torchrun's bit for bit: every float sum in them is over two ranks
# (a + b is the same in any order) or of exactly representable values, and nothing else reduces. The others sum
# floats over 4 ranks, which Gloo's ring adds in another order than dtsim's ascending ranks.
BITWISE = {"tp_fsdp_adamw.py", "pipeline_2stage.py", "rank_branches.py", "p2p_ring.py", "rank_modules.py",
           "process_state.py", "accelerate_ddp.py", "rank_process_calls.py", "checkpointed_exchange.py"}


def script_path(script):
    path = os.path.join(EXAMPLES, script)
    return path if os.path.exists(path) else os.path.join(SCRIPTS, script)
NUMBER = re.compile(r"[-+]?\d+\.\d+e[-+]\d+|[-+]?\d+\.\d+|[-+]?\d+")


def run(argv, timeout=300, env=ENV, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT, **kwargs)


# The reference runs' processes wait at exit until Gloo's worker threads are done (reference_site/sitecustomize.py):
# without it, under load, real torchrun lost a rank to upstream's teardown race in 18 of 30 runs of loss_parallel.py
# beside two busy loops; with it, in none of 30 (docs/run.md).
REFERENCE_ENV = dict(ENV, PYTHONPATH=os.pathsep.join(
    [os.path.join(os.path.dirname(__file__), "reference_site")] + [p for p in [ENV.get("PYTHONPATH")] if p]))


def compared_lines(stdout):
    """The lines both launchers must agree on: step losses, parameter checksums, results, done."""
    return [line for line in stdout.splitlines() if line.split(" ", 1)[0] in ("step", "param", "result", "done")]


def assert_same_values(real, sim, what):
    assert len(real) == len(sim), (what, real, sim)
    for r, s in zip(real, sim):
        assert NUMBER.sub("#", r) == NUMBER.sub("#", s), (what, r, s)
        for a, b in zip(NUMBER.findall(r), NUMBER.findall(s)):
            x, y = float(a), float(b)
            assert abs(x - y) <= 1e-5 * max(abs(x), abs(y)) + 1e-7, (what, r, s)


_torchrun_cache = {}


def died_in_gloo_teardown(out):
    """True when real torchrun failed only through upstream's Gloo teardown race, after the program had finished: a
    Gloo worker thread destroys a finished collective's work after the rank's interpreter began to finalize; releasing
    what it holds (its tensors' Python objects, backward's contextvars Context) takes the GIL, which ends the thread
    through a noexcept frame, and the rank dies of std::terminate (SIGABRT) with its output complete
    (docs/recording.md has the core-dump analysis). The reference ranks wait for their threads at exit
    (REFERENCE_ENV), which keeps them out of it unless a worker is still runnable after the wait's limit.
    Every other failure of the reference is a failure of the test."""
    failed = re.findall(r"exitcode\s*:\s*(-?\d+)", out.stderr)
    return (compared_lines(out.stdout)[-1:] == ["done"]
            and "terminate called without an active exception" in out.stderr
            and "]: Traceback" not in out.stderr  # no rank raised (torch prefixes a rank's traceback with [rankN]:)
            and any(code == "-6" for code in failed)
            and all(code in ("-6", "-15") for code in failed))


def torchrun_lines(script, nproc):
    if script not in _torchrun_cache:
        out = run(TORCHRUN + ["--standalone", f"--nproc_per_node={nproc}", script_path(script)], env=REFERENCE_ENV)
        if out.returncode != 0 and died_in_gloo_teardown(out):
            print(f"{script}: real torchrun lost a rank to Gloo's teardown race after 'done' (upstream defect)")
        else:
            # what the test needs to tell why: the last lines printed, any abort, and the ranks' exit codes
            why = [line for line in out.stderr.splitlines()
                   if "terminate called" in line or "exitcode" in line or "]: Traceback" in line]
            assert out.returncode == 0, (compared_lines(out.stdout)[-2:], why, out.stderr[-3000:])
        _torchrun_cache[script] = compared_lines(out.stdout)
    return _torchrun_cache[script]


@pytest.mark.parametrize("script", sorted(BOTH_WAYS))
def test_script_matches_real_torchrun(script):
    nproc = BOTH_WAYS[script]
    real = torchrun_lines(script, nproc)
    assert real and real[-1] == "done", real
    sim = run([DTSIM, "run", "--nproc-per-node", str(nproc), script_path(script)])
    assert sim.returncode == 0, sim.stderr[-3000:]
    lines = compared_lines(sim.stdout)
    assert_same_values(real, lines, script)
    print(f"{script}: {len(real)} lines equal within 1e-5; bit for bit in print: {real == lines}")
    if script in BITWISE:
        assert real == lines, (script, real, lines)


def test_gpu_script_runs_unedited_and_matches_the_cpu_run():
    """A tensor-parallel tutorial written for GPUs (nccl, cuda devices, set_device, synchronize) runs unedited, and
    its values equal the same model's CPU script under real torchrun."""
    real = torchrun_lines("tp_mlp.py", 4)
    sim = run([DTSIM, "run", "--nproc_per_node", "4", "--standalone", "--nnodes", "1",
               os.path.join(EXAMPLES, "gpu_tp_tutorial.py")])
    assert sim.returncode == 0, sim.stderr[-3000:]
    assert_same_values(real, compared_lines(sim.stdout), "gpu_tp_tutorial.py")
    # Unmetered (no --memory): 0, and a notice that says so.
    assert re.search(r"^mem 0$", sim.stdout, re.M) and "pass --memory to count" in sim.stderr, sim.stderr[-2000:]
    metered = run([DTSIM, "run", "--nproc_per_node", "4", "--memory", os.path.join(EXAMPLES, "gpu_tp_tutorial.py")])
    assert metered.returncode == 0, metered.stderr[-3000:]
    assert compared_lines(metered.stdout) == compared_lines(sim.stdout)
    # The meter's peak holds at least what the script provably holds at once: the full model (1072 floats), x and
    # target (128 floats each) and rank 0's parameter shards (280 floats), while parallelize_module builds them.
    peak = int(re.search(r"^mem (\d+)$", metered.stdout, re.M).group(1))
    assert peak >= 4 * (1072 + 2 * 128 + 280), peak


def test_gpu_program_optimizers_pick_cudas_implementation(tmp_path):
    """torch.optim picks its implementation from the parameters' device when the program does not (foreach=None):
    upstream's rule lists the devices with foreach kernels, CUDA among them and the CPU not. A program on the emulated
    GPUs must run CUDA's choice (its AdamW steps are the _foreach_ ops of its GPU run, which scripts/gpu_check.sh's
    ops_clean compares on a real GPU), and the same program on CPU devices the per-tensor ops."""
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    devices = _get_foreach_kernels_supported_devices()
    assert "cuda" in devices and "cpu" not in devices, devices
    script = os.path.join(ROOT, "tests", "python", "recorded_nccl_ops_program.py")
    ops = {}
    for device in ("cuda", "cpu"):
        trace = tmp_path / f"{device}.json"
        p = subprocess.run([DTSIM, "run", "--nproc-per-node", "2", "--trace", str(trace), script],
                           capture_output=True, text=True, env=dict(ENV, DTSIM_RECORD_DEVICE=device), timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        events = json.loads(trace.read_text())["events"]
        ops[device] = {e["op"] for evs in events.values() for e in evs if e["kind"] == "op"}
    assert "aten._foreach_lerp_.Scalar" in ops["cuda"] and "aten.lerp_.Scalar" not in ops["cuda"], ops["cuda"]
    assert "aten.lerp_.Scalar" in ops["cpu"] and not any("_foreach_" in op for op in ops["cpu"]), ops["cpu"]


def test_python_module_entry_point_equals_the_binary():
    script = os.path.join(EXAMPLES, "rank_branches.py")
    a = run([DTSIM, "run", "--nproc-per-node", "4", script])
    b = run([PYTHON, "-m", "dtsim", "run", "--nproc-per-node", "4", script])
    assert a.returncode == b.returncode == 0, (a.stderr[-2000:], b.stderr[-2000:])
    assert a.stdout == b.stdout


def test_runs_are_deterministic_and_rank_prefixes_on_request():
    script = os.path.join(EXAMPLES, "rank_branches.py")
    a = run([DTSIM, "run", "--nproc-per-node", "4", "--rank-prefix", script])
    b = run([DTSIM, "run", "--nproc-per-node", "4", "--rank-prefix", script])
    assert a.returncode == 0, a.stderr[-2000:]
    assert a.stdout == b.stdout
    lines = a.stdout.splitlines()
    assert lines and all(re.match(r"\[rank[0-3]\]:", line) for line in lines), lines[:5]
    only = run([DTSIM, "run", "--nproc-per-node", "4", "--local-ranks-filter", "1", "--rank-prefix", script])
    assert only.returncode == 0
    assert all(line.startswith("[rank1]:") for line in only.stdout.splitlines())


def test_environment_is_torchruns():
    """Every variable torchrun gives a worker, per rank, read by the script (2 nodes x 2 ranks)."""
    code = ("import os\nkeys = ['RANK','LOCAL_RANK','GROUP_RANK','WORLD_SIZE','LOCAL_WORLD_SIZE','GROUP_WORLD_SIZE',"
            "'ROLE_RANK','ROLE_WORLD_SIZE','MASTER_ADDR','MASTER_PORT']\n"
            "print(' '.join(k + '=' + os.environ[k] for k in keys if k in ('RANK','LOCAL_RANK','GROUP_RANK',"
            "'WORLD_SIZE','LOCAL_WORLD_SIZE','GROUP_WORLD_SIZE')), all(k in os.environ for k in keys))\n")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dtsim_env_{os.getpid()}.py")
    with open(path, "w") as f:
        f.write(code)
    try:
        out = run([DTSIM, "run", "--nnodes", "2", "--nproc-per-node", "2", path])
    finally:
        os.unlink(path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"RANK={r} LOCAL_RANK={r % 2} GROUP_RANK={r // 2} WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_WORLD_SIZE=2 True"
        for r in range(4)]


# ---- injected bugs: the run ends at once, naming the ranks and the lines ----

@pytest.mark.parametrize("script,says", [
    ("bug_group.py", ["would hang", "rank 1: waits for all_reduce", "ranks 0-1", "bug_group.py:11",
                      "rank 0: waits for all_reduce", "bug_group.py:13"]),
    ("bug_skip.py", ["collective mismatch at collective #1", "rank 2 called barrier where its peers called all_reduce",
                     "rank 2: barrier", "bug_skip.py:11", "rank 0: all_reduce", "bug_skip.py:10"]),
    ("bug_shape.py", ["collective mismatch at collective #0", "differs from its peers",
                      "rank 3: all_reduce sum float32[5]", "rank 0: all_reduce sum float32[4]", "bug_shape.py:8"]),
])
def test_injected_bug_is_reported_with_rank_and_line(script, says):
    out = run([DTSIM, "run", "--nproc-per-node", "4", os.path.join(SCRIPTS, script)], timeout=120)
    assert out.returncode == 4, out.stderr
    for text in says:
        assert text in out.stderr, (text, out.stderr)
    assert "/dtsim/run/" not in out.stderr  # the stacks show the program's frames, not the launcher's


# ---- failures and bad input: documented exit codes, never a hang ----

def test_a_rank_that_raises_fails_the_run_with_its_traceback():
    out = run([DTSIM, "run", "--nproc-per-node", "4", os.path.join(SCRIPTS, "raise_on_rank.py")], timeout=120)
    assert out.returncode == 1, out.stderr
    assert "[rank1]: ValueError: rank 1 found a bad batch" in out.stderr
    assert "raise_on_rank.py\", line 9" in out.stderr
    assert "rank 1 (local rank 1) failed with exit code 1" in out.stderr


def test_sys_exit_on_one_rank_fails_the_run_naming_its_code():
    out = run([DTSIM, "run", "--nproc-per-node", "4", os.path.join(SCRIPTS, "exit_on_rank.py")], timeout=120)
    assert out.returncode == 1, out.stderr
    assert "rank 2 (local rank 2) failed with exit code 3" in out.stderr


def test_endless_rank_is_ended_by_timeout():
    start = time.monotonic()
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--timeout", "5", os.path.join(SCRIPTS, "endless.py")],
              timeout=120)
    assert out.returncode == 4, out.stderr
    assert "rank 1 has run for more than 5 s" in out.stderr
    assert "endless.py:11" in out.stderr
    assert time.monotonic() - start < 60


def test_keyboard_interrupt_ends_every_rank():
    """Ctrl-C while rank 1 loops and its peers wait: exit 130, where every rank was, and the process is gone."""
    proc = subprocess.Popen([DTSIM, "run", "--nproc-per-node", "3", os.path.join(SCRIPTS, "endless.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, text=True)
    assert proc.stdout.readline() == "rank 1 loops\n"  # the ranks run: rank 1 is in its loop
    # Every process of the run (the launcher and whatever it started), to check afterwards that none outlived it.
    family = [proc.pid]
    for pid in family:
        listed = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
        family += [int(x) for x in listed.split()]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "endless.py:11" in err, err

    def running(pid):  # a zombie waiting for its (new) parent to reap it runs no more
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(running(pid) for pid in family[1:]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in family[1:] if running(pid)], family


def test_exit_codes_of_bad_input():
    missing = run([DTSIM, "run", "--nproc-per-node", "2", "no_such_script.py"])
    assert missing.returncode == 2
    assert "dtsim: error: script: cannot open 'no_such_script.py'" in missing.stderr
    module = run([DTSIM, "run", "-m", "no_such_module_dtsim"])
    assert module.returncode == 2
    assert "dtsim: error: module: No module named 'no_such_module_dtsim'" in module.stderr


def test_module_runs_with_dash_m():
    out = run([DTSIM, "run", "--nproc-per-node", "2", "-m", "json.tool", "--help"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("usage:") == 2  # both ranks ran the module as __main__


def test_attention_on_cpu_kernels_has_a_strategy():
    """torch 2.13 has no DTensor strategy for the CPU flash-attention kernel (upstream fails on a CPU); dtsim run
    gives it the GPU kernel's tensor-parallel strategies, and the sharded result equals the unsharded one."""
    out = run([DTSIM, "run", "--nproc-per-node", "4", os.path.join(SCRIPTS, "sdpa_heads.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "placements (Shard(dim=1),) forward 0.0 backward 0.0" in out.stdout, out.stdout


def test_option_fuzz_never_escapes_the_error_policy(capsys, monkeypatch):
    """Random torchrun-style command lines (option names, values, stray words; the script never exists): every one
    is refused with exit 2 and one `dtsim: error: <field>: ...` line, before any rank starts; none raises. A run
    that starts would end the process (os._exit) and so the test: here that fails it instead."""
    import random

    def started(code):
        raise AssertionError(f"a command line of the fuzz started a run (exit {code})")

    monkeypatch.setattr(os, "_exit", started)

    import importlib.util
    if importlib.util.find_spec("dtsim") is None:  # a pip install (scripts/compat.sh) has its own on the path
        sys.path.insert(0, os.path.join(ROOT, "python"))
    from dtsim.run.launcher import main

    options = ["--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--standalone", "--rank-prefix",
               "--local-ranks-filter", "--timeout", "-m", "--master-port", "--rdzv-backend", "--no-python", "--",
               "--help-not", "-x", "--timeout=", "--nnodes=1:1", "--meta", "--report", "--memory", "--check-ops"]
    values = ["0", "1", "-1", "4", "1:2", "2:2", "abc_dtsim_fuzz", "", "1e9", "nan", "inf", "0.0001", "86401", "gpu", "cpu",
              "\u00a0", "0,1", "1,,2", "99999999999999999999"]
    rng = random.Random(31)
    for _ in range(300):
        argv = []
        for _ in range(rng.randrange(0, 6)):
            argv.append(rng.choice(options))
            if rng.random() < 0.7:
                argv.append(rng.choice(values))
        argv.append(f"/nonexistent/dtsim_fuzz_{rng.randrange(1000)}.py")
        if "-m" in argv:
            argv.append("no_such_module_dtsim_fuzz")
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, code, err)
        assert err.startswith("dtsim: error: ") and err.count("\n") == 1, (argv, err)


def test_report_counts_causes_and_lines(tmp_path):
    """--report-json on a script whose collectives are known (tests/run/scripts/counted.py), and on the TP+FSDP2
    script: 5 steps give 5 FSDP2 reduce-scatters per dp group, found from FSDP2's frames."""
    path = tmp_path / "report.json"
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report", "--report-json", str(path),
               os.path.join(SCRIPTS, "counted.py")])
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    report = json.loads(path.read_text())
    rows = {(r["kind"], r["cause"]): r for r in report["rows"]}
    direct = rows[("all_reduce sum", "direct call")]
    assert (direct["count"], direct["bytes_per_rank"], direct["ranks"], direct["group_desc"]) == (
        3, 48, [0, 1, 2, 3], "default_pg")
    assert direct["site"].endswith("counted.py:10")
    gathers = [r for (kind, cause), r in rows.items() if kind.startswith("all_gather") and "DTensor" in cause]
    assert [(r["count"], r["bytes_per_rank"], r["site"][-13:]) for r in gathers] == [(1, 8, "counted.py:13")]
    scatter = rows[("scatter root 0", "DTensor redistribution (explicit, full_tensor or a parallel style)")]
    assert (scatter["count"], scatter["bytes_per_rank"], scatter["site"][-13:]) == (1, 32, "counted.py:12")
    assert report["collectives"] == 5 and report["complete"] is True
    assert "dtsim run report: 5 collectives on 4 ranks" in out.stderr

    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report-json", str(path),
               os.path.join(EXAMPLES, "tp_fsdp_adamw.py")])
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(path.read_text())["rows"]
    scatters = [r for r in rows if r["kind"].startswith("reduce_scatter_tensor")]
    assert sorted(r["ranks"] for r in scatters) == [[0, 2], [1, 3]]
    assert all(r["cause"] == "FSDP2" and r["count"] == 5 and r["group_desc"] == "mesh_dp" for r in scatters), scatters


def test_report_names_an_implicit_redistribution_at_its_line(tmp_path):
    """optimizers.py line 49 adds an S(0) and an S(1) operand: upstream redistributes one of them inside the op."""
    import json

    path = tmp_path / "report.json"
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report-json", str(path),
               os.path.join(SCRIPTS, "optimizers.py")])
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [r for r in json.loads(path.read_text())["rows"] if r["cause"] == "DTensor implicit redistribution"]
    assert [(r["count"], r["site"].split("/")[-1]) for r in rows] == [(1, "optimizers.py:49")], rows


def test_report_json_output_is_checked_before_the_run(tmp_path):
    script = os.path.join(SCRIPTS, "counted.py")
    missing = run([DTSIM, "run", "--report-json", str(tmp_path / "no" / "r.json"), script])
    assert missing.returncode == 2 and "dtsim: error: report-json: cannot write" in missing.stderr
    copy = tmp_path / "s.py"
    copy.write_text(open(script).read())
    same = run([DTSIM, "run", "--report-json", str(copy), str(copy)])
    assert same.returncode == 2 and "is the same file as the input of the program" in same.stderr
    assert copy.read_text() == open(script).read()


def test_memory_counters_have_their_closed_form_and_module_peaks_are_reported(tmp_path):
    """tests/run/scripts/memory_meter.py checks torch.cuda's counters on every rank (allocations, views, resizes,
    collectives); the report's peak inside its Spike module must be the entry bytes + (rank + 1) MiB + 16."""
    import json

    path = tmp_path / "report.json"
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report-json", str(path),
               os.path.join(SCRIPTS, "memory_meter.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    entry = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^entry rank (\d) (\d+)$", out.stdout, re.M)}
    assert sorted(entry) == [0, 1, 2, 3] and out.stdout.count("memory counters ok") == 4, out.stdout
    modules = {(m["module"], m["pass"]): m for m in json.loads(path.read_text())["modules"]}
    want = [entry[r] + (r + 1) * (1 << 20) + 16 for r in range(4)]
    assert modules[("Outer.spike", "forward")]["peak_bytes"] == want
    assert modules[("Outer", "forward")]["peak_bytes"] == want  # the outer module holds no more than its child
    assert modules[("Outer.spike", "forward")]["type"] == "Spike" and modules[("Outer.spike", "forward")]["depth"] == 2
    assert all(g >= w for g, w in zip(modules[("Global", "forward")]["peak_bytes"], want))


def test_memory_at_module_boundaries_is_in_the_trace(tmp_path):
    """memory_meter.py under `dtsim run --trace`: every rank's memory at its module boundaries is in the recording, with
    the script's closed form (Spike is entered holding the printed entry bytes, and ends holding its 16-byte output,
    after a peak of (rank + 1) MiB more); `dtsim export` draws it as a counter per rank."""
    import json

    path = tmp_path / "t.json"
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", str(path), os.path.join(SCRIPTS, "memory_meter.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    entry = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^entry rank (\d) (\d+)$", out.stdout, re.M)}
    doc = json.loads(path.read_text())
    assert doc["meta"]["memory_source"] == "dtsim run" and sorted(doc["memory"]) == ["0", "1", "2", "3"]
    for r in range(4):
        samples = {(s["module"], s["pass"], s["at"]): s for s in doc["memory"][str(r)]}
        peak = entry[r] + (r + 1) * (1 << 20) + 16
        assert samples[("Outer.spike", "forward", "begin")]["bytes"] == entry[r]
        assert samples[("Outer.spike", "forward", "end")]["bytes"] == entry[r] + 16
        assert samples[("Outer.spike", "forward", "end")]["peak"] == peak
        assert samples[("Outer", "forward", "end")]["bytes"] == entry[r] + 16
        assert samples[("Outer", "forward", "end")]["peak"] == peak
        times = [s["t_us"] for s in doc["memory"][str(r)]]
        assert times == sorted(times)
    perfetto = tmp_path / "p.json"
    p = run([DTSIM, "export", "--format", "perfetto", str(path), str(perfetto)])
    assert p.returncode == 0, p.stderr
    counters = [e for e in json.loads(perfetto.read_text())["traceEvents"] if e["ph"] == "C"]
    for r in range(4):
        mine = [e["args"]["bytes"] for e in counters if e["pid"] == r + 1]
        assert mine == [s["bytes"] for s in doc["memory"][str(r)]]


def test_report_tree_attributes_collectives_to_modules(tmp_path):
    """tp_mlp.py: RowwiseParallel's output all-reduce (BATCH x DIM floats, 5 steps) counts in fc2 and in MLP, in
    forward; the input needs no gradient, so backward issues none. The estimate is planner.h's closed form."""
    import json

    path = tmp_path / "report.json"
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report", "--report-json", str(path),
               os.path.join(EXAMPLES, "tp_mlp.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    modules = {(m["module"], m["pass"]): m for m in json.loads(path.read_text())["modules"]}
    message = 8 * 16 * 4
    est = 6.6 + 2 * 3 * 0.6 + message * 2 * 3 / 4 / (87.7 * (1 << 30)) * 1e6
    for key in (("MLP.fc2", "forward"), ("MLP", "forward")):
        rows = modules[key]["collectives"]
        assert [(r["kind"], r["count"], r["bytes_per_rank"]) for r in rows] == [("all_reduce sum", 5, 5 * message)]
        assert abs(rows[0]["est_us"] - 5 * est) < 1e-6, rows
    assert modules[("MLP.fc1", "forward")]["collectives"] == []
    assert all(m["collectives"] == [] for (name, p), m in modules.items() if p == "backward" and name != "Global")
    assert all(None not in m["peak_bytes"] for m in modules.values()), modules
    assert "dtsim run report per module" in out.stderr and "    MLP.fc2" in out.stderr


SIZES = os.path.join(EXAMPLES, "tp_fsdp_sizes.py")
# tp_fsdp_sizes.py's parameters: per block up [2048, 512] + [2048] colwise, down [512, 2048] rowwise + [512]
# (replicated over tp); every parameter fully_shard-ed over dp.


def shard_floats(dp, tp, layers=2):
    return layers * (2 * 2048 * 512 // (dp * tp) + 2048 // (dp * tp) + 512 // dp)


def memory_lines(stdout):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^memory rank (\d+ \w+(?: \d+)?) (\d+)", stdout, re.M)}


def test_meta_run_equals_the_data_run_but_for_values(tmp_path):
    """TP + FSDP2 + AdamW on 4 ranks, metadata-only and with values: the same collectives (group, kind, cause, line,
    calls, bytes) but distribute_tensor's scatters, which upstream skips for meta tensors; each rank's memory after
    sharding is its parameter shards (closed form) plus the mesh's rank tensor, and within 1% of the data run's."""
    import json

    reports = {}
    outs = {}
    for mode in ("data", "meta"):
        path = tmp_path / f"{mode}.json"
        argv = [DTSIM, "run", "--nproc-per-node", "4", "--report-json", str(path)] + (["--meta"] if mode == "meta"
                                                                                      else [])
        out = run(argv + [SIZES, "--tp", "2"])
        assert out.returncode == 0, out.stderr[-3000:]
        assert "done" in out.stdout.splitlines(), out.stdout
        reports[mode] = json.loads(path.read_text())
        outs[mode] = out.stdout

    def rows(report, skip_distribute):
        keep = [(r["group"], r["kind"], r["cause"], r["site"], r["count"], r["bytes_per_rank"]) for r in report["rows"]
                if not (skip_distribute and r["kind"].split(" ")[0] in ("scatter", "broadcast"))]
        return sorted(keep)

    assert rows(reports["meta"], False) == rows(reports["data"], True)
    assert reports["meta"]["collectives"] == 2 * (2 * 6 + 2 * 3)  # per step: 2 dp groups x (4 AG + 2 RS), 2 tp x 3 AR
    meta, data = memory_lines(outs["meta"]), memory_lines(outs["data"])
    assert sorted(meta) == sorted(data) and len(meta) == 4 * 3, meta
    for rank in range(4):
        assert meta[f"{rank} sharded"] == 4 * shard_floats(2, 2) + 4 * 4, meta
    for key, value in meta.items():
        assert abs(value - data[key]) <= 0.01 * data[key], (key, value, data[key])


def test_meta_run_at_1024_ranks(tmp_path):
    """The same script on 1,024 metadata-only ranks (dp 256 x tp 4), one step: exit 0, rank 0's and rank 1023's
    memory after sharding in closed form, and every collective of the step: 4 dp groups x (4 all-gathers of 2052
    floats per rank + 2 reduce-scatters) and 256 tp groups x 3 all-reduces."""
    import json

    path = tmp_path / "r.json"
    out = run([DTSIM, "run", "--meta", "--nproc-per-node", "1024", "--report-json", str(path), SIZES, "--steps", "1"],
              timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    memory = memory_lines(out.stdout)
    assert memory["0 sharded"] == memory["1023 sharded"] == 4 * shard_floats(256, 4) + 4 * 1024, memory
    report = json.loads(path.read_text())
    assert report["collectives"] == 4 * 6 + 256 * 3
    gathers = [r for r in report["rows"] if r["kind"] == "all_gather_into_tensor"]
    assert sum(r["count"] for r in gathers) == 4 * 4 and {r["cause"] for r in gathers} == {"FSDP2"}
    assert all(r["bytes_per_rank"] == r["count"] * 4 * shard_floats(256, 4) // 2 for r in gathers), gathers


def test_meta_run_answers_value_reads_with_placeholders_naming_each_line():
    """tp_mlp.py prints loss.item() each step and two sums of each of its 4 parameters on rank 0: metadata-only, each
    read answers the placeholder 1.0 (a float), the run finishes (exit 0), and the summary names each line with its
    count and rank, and says the printed values are not the job's."""
    with open(os.path.join(EXAMPLES, "tp_mlp.py")) as f:
        steps = int(re.search(r"^DIM, HIDDEN, BATCH, STEPS = \d+, \d+, \d+, (\d+)$", f.read(), re.M).group(1))
    out = run([DTSIM, "run", "--meta", "--nproc-per-node", "4", os.path.join(EXAMPLES, "tp_mlp.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    losses = re.findall(r"^step \d+ loss (\S+)$", out.stdout, re.M)
    assert losses == [f"{1.0:.9e}"] * steps, out.stdout
    assert f"the program read {steps + 4 * 2} values that a metadata-only run does not compute" in out.stderr
    assert "so what it printed or decided from them is not the job's" in out.stderr
    sites = dict(re.findall(r"tp_mlp\.py:(\d+) in main: Tensor\.item\(\) (x\d+) on rank 0$", out.stderr, re.M))
    assert sorted(sites.values()) == sorted([f"x{steps}", "x8"]), out.stderr[-2000:]


RECORDED = os.path.join(ROOT, "tests", "python", "recorded_program.py")


def test_trace_of_the_simulated_run_diffs_against_real_torchrun(tmp_path):
    """tests/python/recorded_program.py records itself (dtsim.record) under real torchrun + Gloo and under dtsim run:
    trace-diff finds the two recordings equal in every call, spec, collective, shape and byte, and in every shard
    hash but the results of float sums (Gloo's ring adds in another order than dtsim's ascending ranks); replay finds
    the simulated one equal to dtsim's simulation. A rank corrupted in the simulated run (DTSIM_CORRUPT_RANK=2) is
    named at its redistribution."""
    real, sim, bad = (str(tmp_path / f) for f in ("real.json", "sim.json", "bad.json"))
    out = run(TORCHRUN + ["--standalone", "--nproc_per_node", "4", RECORDED, real])
    assert out.returncode == 0, out.stderr[-3000:]
    out = run([DTSIM, "run", "--nproc-per-node", "4", RECORDED, sim])
    assert out.returncode == 0, out.stderr[-3000:]
    diff = run([DTSIM, "trace-diff", real, sim, "--limit", "100"])
    assert diff.returncode == 1, diff.stdout
    lines = diff.stdout.splitlines()[1:]
    assert lines and all("[P(sum)] -> " in line and ", after: hash differs on ranks" in line for line in lines), lines
    replay = run([DTSIM, "replay", sim])
    assert replay.returncode == 0 and "redistributions equal dtsim's simulation (13 redistributions)" in replay.stdout, replay.stdout
    # dtsim.record's recording lists no run-wide collectives: the verdict says they were not checked
    assert "are not in the recording, so not checked" in replay.stdout, replay.stdout
    corrupt_env = dict(ENV, DTSIM_CORRUPT_RANK="2")
    out = subprocess.run([DTSIM, "run", "--nproc-per-node", "4", RECORDED, bad], capture_output=True, text=True,
                         env=corrupt_env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    diff = run([DTSIM, "trace-diff", sim, bad])
    assert diff.returncode == 1
    first = diff.stdout.splitlines()[0]
    assert first == ("recordings differ; first at redistribution 5 (redistribute: [S(0)] -> [S(1)]), after:"), first
    assert "hash differs on rank 2 (" in diff.stdout.splitlines()[1], diff.stdout


def test_run_trace_records_an_unmodified_script(tmp_path):
    """--trace on tp_sp.py (no dtsim in it): a recording of every rank's DTensor redistributions that replay
    finds equal to dtsim's simulation and export turns into Perfetto; the recording's own gather shows in the report
    under its own cause; bad --trace paths are refused before any rank runs."""
    import json

    trace, report = str(tmp_path / "t.json"), str(tmp_path / "r.json")
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", trace, "--report-json", report,
               os.path.join(EXAMPLES, "tp_sp.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"recording written to {trace}" in out.stderr
    doc = json.loads(open(trace).read())
    assert doc["meta"]["backend"] == "dtsim-run" and doc["meta"]["world_size"] == 4
    assert len(doc["redistributions"]) > 10
    replay = run([DTSIM, "replay", trace])
    assert replay.returncode == 0 and "redistributions equal dtsim's simulation" in replay.stdout, replay.stdout[-3000:]
    # the run's own collectives, listed by --trace: those whose groups must end equal are checked, the others named
    # as not checked by replay, never as equal
    assert re.search(r"of the run's (\d+) collectives \(FSDP2, DDP, c10d calls alike\), (\d+) leave their groups "
                     r"equal and (\d+) are not checked by replay", replay.stdout), replay.stdout
    exported = run([DTSIM, "export", "--format", "perfetto", trace, str(tmp_path / "p.json")])
    assert exported.returncode == 0, exported.stderr
    causes = {r["cause"] for r in json.loads(open(report).read())["rows"]}
    assert "dtsim run --trace (gathering the recording to rank 0)" in causes, causes
    script = os.path.join(SCRIPTS, "counted.py")
    for bad, says in ((str(tmp_path / "no" / "t.json"), "trace: cannot write"),
                      (script, "is the same file as the input of the program"),
                      (report, "is the same file as the output of report-json")):
        out = run([DTSIM, "run", "--trace", bad, "--report-json", report, script])
        assert out.returncode == 2 and says in out.stderr, (bad, out.stderr)


def test_report_names_an_installed_packages_site_from_its_package(tmp_path):
    """A collective issued inside an installed package (as torchtitan's are): the report's site is the file from the
    package down, with its line (`pkg/ops.py:5`), not a path up from the current folder."""
    import json

    package = tmp_path / "lib" / "site-packages" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("import torch\nimport torch.distributed as dist\n\n\ndef total(x):\n"
                                    "    dist.all_reduce(x)\n    return x\n")
    script = tmp_path / "uses_pkg.py"
    script.write_text("import torch\nimport torch.distributed as dist\nfrom pkg import ops\n\n"
                      "dist.init_process_group('gloo')\nops.total(torch.ones(2))\ndist.destroy_process_group()\n")
    report = tmp_path / "r.json"
    env = dict(ENV, PYTHONPATH=str(tmp_path / "lib" / "site-packages"))
    out = run([DTSIM, "run", "--nproc-per-node", "2", "--report-json", str(report), str(script)], env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    sites = {r["site"] for r in json.loads(report.read_text())["rows"] if r["kind"].startswith("all_reduce")}
    assert sites == {"pkg/ops.py:6"}, sites


def test_cuda_graphs_are_refused_at_their_line():
    out = run([DTSIM, "run", "--nproc-per-node", "2", os.path.join(SCRIPTS, "cuda_graph.py")])
    assert out.returncode == 1, out.stderr[-3000:]
    assert "dtsim run: torch.cuda.CUDAGraph cannot run on the simulated devices" in out.stderr
    assert re.search(r"cuda_graph\.py\", line 7, in <module>", out.stderr), out.stderr[-3000:]


@pytest.mark.parametrize("feature,name,line", [
    ("symm_mem", "torch.distributed._symmetric_memory.enable_symm_mem_for_group", 29),
    ("fsdp_symm_mem", "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm", 34),
    ("scaled_mm", "torch._scaled_mm", 38),
])
def test_gpu_only_features_are_refused_at_their_line(feature, name, line):
    """Symmetric memory (async TP's and FSDP2's) and float8 matmuls cannot run on the emulated GPUs' CPU tensors:
    refused at the script's line with exit 1, naming the feature."""
    out = run([DTSIM, "run", "--nproc-per-node", "2", os.path.join(SCRIPTS, "gpu_only.py"), feature])
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"dtsim run: {name} cannot run on the simulated devices" in out.stderr, out.stderr[-3000:]
    assert re.search(rf"gpu_only\.py\", line {line}, in <module>", out.stderr), out.stderr[-3000:]


def test_a_cpu_programs_float8_matmul_is_torchs():
    """A CPU program keeps torch's CPU float8 matmul under dtsim run: its sum equals the matmul of the dequantized
    operands (small integers over 4, exact in float8 and float32), on every rank."""
    out = run([DTSIM, "run", "--nproc-per-node", "2", os.path.join(SCRIPTS, "gpu_only.py"), "cpu_scaled_mm"])
    assert out.returncode == 0, out.stderr[-3000:]
    sums = re.findall(r"rank (\d): scaled_mm sum (\S+) dequantized matmul sum (\S+)", out.stdout)
    assert sorted(r for r, _, _ in sums) == ["0", "1"], out.stdout
    assert all(got == want for _, got, want in sums), sums


FLEX_LINE = re.compile(r"rank (\d) (\w+): max \|out - sdpa\| (\S+), grads q (\S+) k (\S+) v (\S+); "
                       r"all-reduced grad sums \[(.*)\] sdpa \[(.*)\]")


def test_flex_attention_trains_on_the_emulated_gpus_as_sdpa_computes_it(tmp_path):
    """torch has no FlexAttention backward on a CPU; on dtsim run's emulated GPUs, compiled flex_attention (as
    torchtitan compiles it) runs upstream's dense path with its backward. Causal, torchtitan's block-causal document
    mask and an ALiBi score_mod each equal SDPA's math on the equal dense mask or bias (built from the index formulas in
    the script), in the output and in the gradients of q, k and v on each rank, and in their all-reduced sums."""
    out = run([DTSIM, "run", "--nproc-per-node", "2", os.path.join(SCRIPTS, "flex_backward.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    rows = FLEX_LINE.findall(out.stdout)
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (str(rank), case) for rank in (0, 1) for case in ("causal", "block_causal", "alibi")), out.stdout
    for rank, case, *diffs, summed, reference in rows:
        assert max(float(d) for d in diffs) < 1e-4, (rank, case, diffs)
        got, want = ([float(x) for x in s.split(",")] for s in (summed, reference))
        assert all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(got, want)), (case, got, want)
    assert out.stderr.count("torch.compile(flex_attention) runs eagerly on the emulated GPUs: upstream's dense "
                            "FlexAttention") == 1, out.stderr
    assert "flex_attention called without torch.compile()" not in out.stderr
    # Under --check-ops, --memory and --trace the higher-order op reaches each one's dispatch mode (the check, the
    # meter, the recorder), which runs it as without the mode.
    checked = run([DTSIM, "run", "--check-ops", "--memory", "--trace", str(tmp_path / "flex.json"), "--nproc-per-node",
                   "2", os.path.join(SCRIPTS, "flex_backward.py")])
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert FLEX_LINE.findall(checked.stdout) == rows, checked.stdout


def test_flex_attention_backward_on_cpu_tensors_is_refused_as_torch_refuses_it():
    """A CPU program (Gloo, CPU tensors) keeps torch's refusal of FlexAttention's backward under dtsim run, as under
    real torchrun: both fail at the same line with torch's message."""
    says = "FlexAttention does not support backward on CPU"
    script = os.path.join(SCRIPTS, "flex_backward.py")
    real = run(TORCHRUN + ["--standalone", "--nproc-per-node", "2", script, "cpu"], env=REFERENCE_ENV)
    sim = run([DTSIM, "run", "--nproc-per-node", "2", script, "cpu"])
    line = next(i for i, text in enumerate(open(script), 1) if "# refused here" in text)
    for out in (real, sim):
        assert out.returncode == 1, out.stderr[-3000:]
        assert says in out.stderr and f'flex_backward.py", line {line}, in <module>' in out.stderr, out.stderr[-3000:]


def test_run_trace_holds_every_collective_with_hashes(tmp_path):
    """--trace on tp_fsdp_adamw.py: the recording's run-wide "collectives" hold FSDP2's all-gathers and
    reduce-scatters (5 steps per dp group) and every other collective of the program (the report's, less the
    recording's own gather), each member's input and output hashed; every all_reduce and all_gather leaves its
    members with equal bytes (equal output hashes); replay finds its redistributions equal to dtsim's simulation. Two runs
    agree in trace-diff; a flipped output hash is named."""
    import collections
    import json

    trace, report = str(tmp_path / "t.json"), str(tmp_path / "r.json")
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", trace, "--report-json", report,
               os.path.join(EXAMPLES, "tp_fsdp_adamw.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(open(trace).read())
    rows = json.loads(open(report).read())["rows"]
    own = sum(r["count"] for r in rows if r["cause"].startswith("dtsim run --trace"))
    assert own > 0 and len(doc["collectives"]) == sum(r["count"] for r in rows) - own
    kinds = collections.Counter((c["op"], tuple(c["groups"][0])) for c in doc["collectives"])
    for group in ((0, 2), (1, 3)):
        assert kinds[("reduce_scatter", group)] == 5 and kinds[("all_gather", group)] >= 5, kinds
    for c in doc["collectives"]:
        assert len(c["input_hashes"]) == len(c["output_hashes"]) == len(c["ranks"]) == len(c["groups"][0])
        if c["op"] in ("all_reduce", "all_gather"):
            assert len(set(c["output_hashes"])) == 1, c
    # Replay expects upstream's collectives, also where FSDP2 + TP's _StridedShard parameters are gathered
    # (full_tensor of [_S(0,2), S(0)]: upstream gathers dp before tp, an order dtsim's executor runs the other way).
    replay = run([DTSIM, "replay", trace])
    assert replay.returncode == 0 and "[_S(0,2), S(0)] -> [R, R]  equal" in replay.stdout, replay.stdout[-3000:]
    equal_kinds = sum(c["op"] in ("all_reduce", "all_gather", "broadcast") for c in doc["collectives"])
    assert f"run collectives: {equal_kinds} of {len(doc['collectives'])} checked" in replay.stdout, replay.stdout
    # One member of an all_gather left with other bytes (a corrupted collective on one rank): replay names it.
    k = next(i for i, c in enumerate(doc["collectives"]) if c["op"] == "all_gather")
    flipped = json.loads(json.dumps(doc))
    flipped["collectives"][k]["output_hashes"][1] = "xxh3:0000000000000000"
    (tmp_path / "flipped.json").write_text(json.dumps(flipped))
    os.symlink(os.path.join(tmp_path, "t.json.data"), tmp_path / "flipped.json.data")
    replay = run([DTSIM, "replay", str(tmp_path / "flipped.json")])
    members = doc["collectives"][k]["ranks"]  # two (a dp group): no majority, both are named
    assert replay.returncode == 1, replay.stdout
    assert f"run collective {k + 1} (all_gather over ranks {members}): its members' outputs differ, with no " \
        f"majority: rank {members[0]} {doc['collectives'][k]['output_hashes'][0]}, rank {members[1]} " \
        "xxh3:0000000000000000" in replay.stdout, replay.stdout
    assert "verdict: the recorded run's collectives are inconsistent; first at run collective " \
        f"{k + 1}, ranks {members[0]}, {members[1]}" in replay.stdout, replay.stdout
    again = str(tmp_path / "again.json")
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--trace", again, os.path.join(EXAMPLES, "tp_fsdp_adamw.py")])
    assert out.returncode == 0, out.stderr[-3000:]
    diff = run([DTSIM, "trace-diff", trace, again])
    assert diff.returncode == 0 and diff.stdout.startswith("recordings agree"), diff.stdout
    assert f"the run's {len(doc['collectives'])} collectives equal" in diff.stdout, diff.stdout
    without = dict(doc)
    del without["collectives"]
    (tmp_path / "without.json").write_text(json.dumps(without))
    os.symlink(os.path.join(tmp_path, "t.json.data"), tmp_path / "without.json.data")
    diff = run([DTSIM, "trace-diff", trace, str(tmp_path / "without.json")])
    assert diff.returncode == 0 and "the run's collectives not compared: only the first recording lists them" in \
        diff.stdout, diff.stdout
    k = next(i for i, c in enumerate(doc["collectives"]) if c["op"] == "reduce_scatter")
    doc["collectives"][k]["output_hashes"][1] = "xxh3:0000000000000000"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for data in ("t.json.data",):
        os.symlink(os.path.join(tmp_path, data), tmp_path / "bad.json.data")
    diff = run([DTSIM, "trace-diff", again, str(bad)])
    assert diff.returncode == 1, diff.stdout
    rank = doc["collectives"][k]["ranks"][1]
    assert f"run collective {k + 1} (reduce_scatter over " in diff.stdout
    assert f"output hash differs on rank {rank} (" in diff.stdout, diff.stdout


# titan_patterns.py: torchtitan's meta-device init, vocabulary-parallel embedding (_MaskPartial), complex rotary
# frequencies and clip_grad_norm_ (_NormPartial) over FSDP2 + TP, each a false divergence or a crash before issue 59
CHECKED_CLEAN = ["tp_mlp.py", "tp_sp.py", "tp_fsdp_adamw.py", "loss_parallel.py", "sharding_bugs.py",
                 "titan_patterns.py"]


@pytest.mark.parametrize("script", CHECKED_CLEAN)
def test_check_ops_finds_clean_programs_clean(script):
    """--check-ops on correct programs: every DTensor op's sharded result equals the same op on the global tensors
    (upstream's TP, SP, FSDP2 + TP with AdamW, loss parallelism, and sharding_bugs.py without a planted bug), and the
    program prints what it prints without the check."""
    path = script_path(script)
    plain = run([DTSIM, "run", "--nproc-per-node", "4", path])
    checked = run([DTSIM, "run", "--check-ops", "--nproc-per-node", "4", path])
    assert checked.returncode == 0, checked.stderr[-3000:]
    count = int(re.search(r"dtsim run --check-ops: (\d+) DTensor ops? checked", checked.stderr).group(1))
    assert count > 0 and "  no divergence" in checked.stderr, checked.stderr[-3000:]
    assert compared_lines(checked.stdout) == compared_lines(plain.stdout)


@pytest.mark.parametrize("plant,says", [
    # a custom op whose registered strategy keeps Shard(0) while the op reads global row indices
    ("wrong_strategy", ["DTensor op #1 on the mesh of ranks 0, 1, 2, 3, dtsim_planted.row_scale.default in Block "
                        "(forward), at ", "sharding_bugs.py:68 in forward: result 0 ([S(0)], from arguments [S(0)]) "
                        "differs from the unsharded op on ranks 1, 2, 3"]),
    # Shard(0) -> Partial(avg): right on the 8 even rows (checked clean before), wrong on 6 rows over 4 ranks
    ("uneven_mean", ["dtsim_planted.row_mean.default in Global (forward), at ", "sharding_bugs.py:97 in main: "
                     "result 0 ([P(avg)], from arguments [S(0)]) differs from the unsharded op"]),
    # a local_map function numbering each shard's rows from 0
    ("local_map_offset", ["local_map(_number_rows) in Block (forward), at ", "sharding_bugs.py:69 in forward: "
                          "result 0 ([S(0)], from arguments [R]) differs from the unsharded op on ranks 1, 2, 3"]),
    # rank 1 writes its replica in place: the next op's argument is a replica that differs on rank 1
    ("replica_write", ["aten.mul.Tensor in Global (forward), at ", "sharding_bugs.py:103 in main: argument 0 ([R]) "
                       "is a replica that differs on rank 1 from its replicas on ranks 0, 2, 3"]),
])
def test_check_ops_locates_planted_bugs(plant, says):
    """Each planted bug of tests/run/scripts/sharding_bugs.py is reported by --check-ops as the first divergence, at
    its op, module and pass, ranks and line, and the run exits 5; the same program runs silently without the check."""
    env = dict(ENV, DTSIM_PLANT=plant)
    path = script_path("sharding_bugs.py")
    out = subprocess.run([DTSIM, "run", "--check-ops", "--nproc-per-node", "4", path], capture_output=True,
                         text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 5, out.stderr[-3000:]
    first = next(line for line in out.stderr.splitlines() if line.startswith("  FIRST DIVERGENCE: "))
    for part in says:
        assert part in first, (part, first)
    assert "dtsim run: error: --check-ops: a DTensor op diverged from the unsharded op" in out.stderr
    silent = subprocess.run([DTSIM, "run", "--nproc-per-node", "4", path], capture_output=True, text=True, env=env,
                            timeout=300, cwd=ROOT)
    assert silent.returncode == 0 and compared_lines(silent.stdout)[-1:] == ["done"], silent.stderr[-3000:]


def test_replay_names_a_replica_written_on_one_rank(tmp_path):
    """A recording whose rank 2 wrote its Replicate shard in place (tests/run/scripts/replica_written.py): replaying
    from the recorded shards alone would pass, so replay compares the replicas' recorded hashes and names rank 2;
    the clean recording replays equal."""
    path = script_path("replica_written.py")
    clean, written = str(tmp_path / "clean.json"), str(tmp_path / "written.json")
    out = run([DTSIM, "run", "--nproc-per-node", "4", path, clean])
    assert out.returncode == 0, out.stderr[-3000:]
    replay = run([DTSIM, "replay", clean])
    assert replay.returncode == 0 and "redistributions equal dtsim's simulation" in replay.stdout, replay.stdout
    out = subprocess.run([DTSIM, "run", "--nproc-per-node", "4", path, written], capture_output=True, text=True,
                         env=dict(ENV, DTSIM_WRITE_RANK="2"), timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    replay = run([DTSIM, "replay", written])
    assert replay.returncode == 1, replay.stdout
    assert "replicas: rank 2 held xxh3:" in replay.stdout and "where its replicas ([R]: ranks [0, 1, 3]) hold" in \
        replay.stdout, replay.stdout
    assert "first at redistribution #0 (redistribute), rank 2" in replay.stdout, replay.stdout
    # The viewer opens the recording where replay names rank 2, rank 2 (alone) in the diff colour.
    viewer = os.environ.get("DTSIM_VIEWER_BIN")
    if viewer and os.path.exists(viewer) and shutil.which("xvfb-run"):
        def fills(recording):
            records = tmp_path / "records.json"
            shown = subprocess.run(["xvfb-run", "-a", viewer, recording, "--size", "1200x800", "--screenshot",
                                    str(tmp_path / "shot.png"), "--dump-records", str(records)],
                                   capture_output=True, text=True, timeout=120)
            assert shown.returncode == 0, shown.stderr
            doc = json.loads(records.read_text())
            return doc["frame"], {r["rank"] for r in doc["panels"]["mesh"]["rects"]
                                  if r["role"] == "mesh_cell" and r["fill"] == [235, 20, 20, 255]}
        assert fills(written) == (0, {2})  # before: rank 2's replica was written before the redistribution
        assert fills(clean)[1] == set()


def test_shared_modules_all_reproduces_the_shared_cache_bug():
    """With every module shared (--shared-modules all), rank_lib's cached wrapper class gathers over rank 0's tp group
    on ranks 2 and 3 (torchtitan's simple_fsdp pattern, issue 59): the run hangs there, which per-rank modules (the
    default, matching real torchrun in test_script_matches_real_torchrun) avoid."""
    out = run([DTSIM, "run", "--shared-modules", "all", "--nproc-per-node", "4", script_path("rank_modules.py")])
    assert out.returncode == 4, out.stderr[-2000:]
    assert "mesh_tp" in out.stderr and "rank_lib/__init__.py:38 in apply" in out.stderr, out.stderr[-2000:]
    shared = run([DTSIM, "run", "--shared-modules", "rank_lib", "--nproc-per-node", "4",
                  script_path("rank_modules.py")])
    assert shared.returncode == 4, shared.stderr[-2000:]


def test_threads_a_rank_starts_are_metered_as_the_rank():
    """A thread each rank starts allocates 256 float32 on its device: the rank's meter counts 1,024 bytes."""
    out = run([DTSIM, "run", "--memory", "--nproc-per-node", "4", script_path("process_state.py")])
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    for rank in range(4):
        assert f"memory rank {rank} thread allocated 1024" in text, text


def test_os_exit_on_one_rank_ends_the_run_naming_rank_and_code(tmp_path):
    """os._exit(7) on rank 1: the run ends (exit 1, as torchrun for a failed worker) naming the rank and its code,
    and the report is written, marked incomplete; no rank's later line is printed."""
    report = tmp_path / "r.json"
    env = dict(ENV, DTSIM_PLANT="exit")
    out = run([DTSIM, "run", "--nproc-per-node", "4", "--report-json", str(report), script_path("process_state.py")],
              env=env)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "rank 1 (local rank 1) failed with exit code 7" in out.stderr, out.stderr[-2000:]
    assert "os._exit(7)" in out.stderr
    assert "done" not in out.stdout
    assert json.loads(report.read_text())["complete"] is False


def test_an_active_venv_that_does_not_run_the_program_is_named(tmp_path):
    """build/dtsim run inside another activated venv: it says which interpreter runs the program and how to choose,
    before any rank starts, and a missing module's failure carries the same hint."""
    venv = tmp_path / "user-venv"
    venv.mkdir()
    script = tmp_path / "needs.py"
    script.write_text("import no_such_module_of_the_users_venv\n")
    out = run([DTSIM, "run", "--nproc-per-node", "2", str(script)], env=dict(ENV, VIRTUAL_ENV=str(venv)))
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"not with the active venv {venv}" in out.stderr.split("\n")[0], out.stderr[-2000:]
    assert "set DTSIM_PYTHON" in out.stderr.split("dtsim run: error:")[-1], out.stderr[-2000:]
    plain = run([DTSIM, "run", "--nproc-per-node", "2", str(script)],
                env={k: v for k, v in ENV.items() if k != "VIRTUAL_ENV"})
    assert "active venv" not in plain.stderr


def phases(stdout):
    """meta_init_step.py's lines: {(rank, phase): bytes}."""
    found = re.findall(r"^memory rank (\d+) (\w+) (\d+)$", stdout, re.M)
    return {(int(rank), phase): int(n) for rank, phase, n in found}


def test_meta_built_model_counts_nothing_and_meta_equals_the_data_run():
    """tests/run/scripts/meta_init_step.py builds two 64 x 64 linears on the meta device, shards them with FSDP2 over
    4 ranks, materializes them with to_empty, and takes a DataLoader batch, clip_grad_norm_(foreach=True) and an
    AdamW(foreach=True) step. The meta-built model holds nothing (as on a GPU); materializing adds each rank's
    16 x 64 x 4-byte shard of both weights (8,192 bytes); the step adds the gradients and AdamW's two moments (3 x
    8,192), the data set, the batch and scalars; and --meta reports every rank's numbers equal to the run with values."""
    data = run([DTSIM, "run", "--memory", "--nproc-per-node", "4", script_path("meta_init_step.py")])
    meta = run([DTSIM, "run", "--meta", "--nproc-per-node", "4", script_path("meta_init_step.py")])
    assert data.returncode == 0, data.stderr[-3000:]
    assert meta.returncode == 0, meta.stderr[-3000:]
    got, got_meta = phases(data.stdout + data.stderr), phases(meta.stdout + meta.stderr)
    assert len(got) == 12 and got == got_meta, (got, got_meta)
    for rank in range(4):
        built, materialized, stepped = (got[(rank, p)] for p in ("built", "materialized", "stepped"))
        assert built < 64, built  # the device mesh's rank tensors only: the meta-built model holds nothing
        assert materialized - built == 2 * 16 * 64 * 4
        # the gradients and AdamW's two moments, the data set (8 x 64 float32) and the batch (2 x 64), and scalars
        # (the loss, AdamW's step counts)
        extra = stepped - materialized - 3 * 8192 - 8 * 64 * 4 - 2 * 64 * 4
        assert 0 <= extra <= 64, stepped - materialized


@pytest.mark.parametrize("plant,code,says", [
    # Gloo reinterprets the bytes (a float32 message into int64 here); dtsim refuses, as the strictest backend
    ("recv_dtype", 1, ["rank 1 receives int64[4] from rank 0, which sent float32[4] at ", "c10d_misuse.py:21"]),
    ("send_peer", 1, ["send on rank 0 (group '0' ranks 0-1): dst (its group rank) 99 is not a rank of the group",
                      "c10d_misuse.py\", line 26"]),  # Gloo: a segmentation fault
    ("gather_list", 1, ["all_gather on rank 0 (group '0' ranks 0-1): tensor_list[0] holds 3 tensors; the group has "
                        "2 ranks"]),  # Gloo: "invalid output tensor list at index 0 (expected length 2, got 3)"
    ("bad_root", 1, ["broadcast on rank 0 (group '0' ranks 0-1): src (its group rank) 5 is not a rank of the "
                     "group"]),  # Gloo: "invalid root rank: 5"
    ("unreceived", 4, ["messages sent and never received by the end of the run", "rank 0 sent float32[4] to rank 1 "
                       "(tag 0) in group '0' (default_pg) ranks 0-1 at ", "c10d_misuse.py:32"]),
])
def test_c10d_misuse_is_refused_with_rank_call_and_line(plant, code, says):
    """tests/run/scripts/c10d_misuse.py: each misuse a real backend refuses (or turns into garbage, a crash or a
    pending send) ends the run naming the rank, the call and the program line."""
    out = run([DTSIM, "run", "--nproc-per-node", "2", script_path("c10d_misuse.py")],
              env=dict(ENV, DTSIM_PLANT=plant))
    assert out.returncode == code, out.stderr[-2000:]
    for part in says:
        assert part in out.stderr, (part, out.stderr[-2000:])


def test_all_reduce_of_a_leaf_that_requires_grad_is_accepted_as_gloo_accepts_it():
    """A backend writes outside autograd: all_reduce of a leaf tensor that requires grad runs under Gloo, and under
    dtsim run with the same values."""
    env = dict(ENV, DTSIM_PLANT="leaf_grad")
    real = run(TORCHRUN + ["--standalone", "--nproc_per_node=2", script_path("c10d_misuse.py")],
               env=dict(REFERENCE_ENV, DTSIM_PLANT="leaf_grad"))
    sim = run([DTSIM, "run", "--nproc-per-node", "2", script_path("c10d_misuse.py")], env=env)
    assert real.returncode == 0 and sim.returncode == 0, (real.stderr[-2000:], sim.stderr[-2000:])
    assert sorted(compared_lines(real.stdout)) == sorted(compared_lines(sim.stdout))
    assert "result rank 0 leaf [4.0, 4.0, 4.0]" in sim.stdout


def test_object_collectives_under_meta_equal_real_torchrun():
    """c10d's object collectives pickle into CPU byte tensors: under --meta they carry their values, and the script
    prints what real torchrun prints."""
    real = torchrun_lines("rank_process_calls.py", 2)
    out = run([DTSIM, "run", "--meta", "--nproc-per-node", "2", script_path("rank_process_calls.py")])
    assert out.returncode == 0, out.stderr[-2000:]
    assert compared_lines(out.stdout) == real, (compared_lines(out.stdout), real)


def test_monitored_barrier_of_another_backend_is_refused_as_c10d_refuses_it(tmp_path):
    """monitored_barrier is Gloo's alone: a program that asked for NCCL gets c10d's own ValueError at its line."""
    script = tmp_path / "mb.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\ndist.monitored_barrier()\n")
    out = run([DTSIM, "run", "--nproc-per-node", "2", str(script)])
    assert out.returncode == 1, out.stderr[-2000:]
    # c10d's message by release: up to 2.14 "only implemented for GLOO", from 2.15 "requires ... CPU-capable backend"
    assert ("ValueError: monitored_barrier is only implemented for GLOO backend." in out.stderr
            or "ValueError: monitored_barrier requires a group with a CPU-capable backend (e.g. GLOO)." in out.stderr)
    assert "mb.py\", line 3" in out.stderr, out.stderr[-2000:]


def test_rank_prefix_keeps_each_ranks_last_unterminated_line(tmp_path):
    script = tmp_path / "tail.py"
    script.write_text("import os, sys\nprint('first')\nsys.stdout.write(f'last of {os.environ[\"RANK\"]}')\n")
    out = run([DTSIM, "run", "--rank-prefix", "--nproc-per-node", "2", str(script)])
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(out.stdout.splitlines()) == ["[rank0]:first", "[rank0]:last of 0", "[rank1]:first",
                                               "[rank1]:last of 1"], out.stdout


def test_sigterm_ends_the_run_with_its_report(tmp_path):
    """SIGTERM while rank 1 loops: exit 143, where every rank was, the report written and marked incomplete, and
    the process gone."""
    report = tmp_path / "r.json"
    proc = subprocess.Popen([DTSIM, "run", "--nproc-per-node", "3", "--report-json", str(report),
                             os.path.join(SCRIPTS, "endless.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, text=True)
    assert proc.stdout.readline() == "rank 1 loops\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "endless.py:11" in err, err
    assert json.loads(report.read_text())["complete"] is False


def test_timeout_ends_a_rank_stuck_in_one_c_call(tmp_path):
    """A rank inside one C call that holds the GIL (a regular expression that backtracks 2^40 times): the main
    thread cannot run, and the watchdog thread (dtsim._watchdog_c) ends the run with exit 4, naming the rank and the
    script's line in its stack."""
    script = tmp_path / "stuck.py"
    script.write_text("import re, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "if dist.get_rank() == 1:\n    re.match(r'(a+)+$', 'a' * 40 + 'b')\ndist.barrier()\n")
    start = time.monotonic()
    out = run([DTSIM, "run", "--nproc-per-node", "2", "--timeout", "3", str(script)], timeout=120)
    assert out.returncode == 4, out.stderr[-3000:]
    assert "rank 1 has run for more than 3 s (--timeout) inside one call" in out.stderr, out.stderr[-3000:]
    assert f'File "{script}", line 4' in out.stderr, out.stderr[-3000:]
    assert time.monotonic() - start < 100


def test_report_json_to_redirected_stdout_follows_the_programs_output(tmp_path):
    """--report-json /dev/stdout with stdout redirected to a file: the report is written after the program's lines,
    in that file, which is not replaced; --trace there is refused (a recording has a sidecar); a report that cannot
    be written (the pipe's reader left) fails the run with exit 2."""
    script = tmp_path / "p.py"
    script.write_text("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "print('program line', dist.get_rank(), flush=True)\nt = torch.ones(2)\ndist.all_reduce(t)\n")
    log = tmp_path / "out.txt"
    with open(log, "w") as f:
        out = subprocess.run([DTSIM, "run", "--nproc-per-node", "2", "--report-json", "/dev/stdout", str(script)],
                             stdout=f, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    text = log.read_text()
    lines, rest = text.split("\n", 2)[:2], text.split("\n", 2)[2]
    assert sorted(lines) == ["program line 0", "program line 1"], text[:300]
    assert json.loads(rest)["collectives"] == 1
    with open(log, "w") as f:
        out = subprocess.run([DTSIM, "run", "--nproc-per-node", "2", "--trace", "/dev/stdout", str(script)],
                             stdout=f, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120, cwd=ROOT)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "'/dev/stdout' is this process's standard output" in out.stderr
    quiet = tmp_path / "q.py"
    quiet.write_text("import time, torch.distributed as dist\ndist.init_process_group('gloo')\ntime.sleep(1)\n")
    proc = subprocess.Popen([DTSIM, "run", "--nproc-per-node", "2", "--report-json", "/dev/stdout", str(quiet)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    proc.stdout.close()  # the reader leaves before the report is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert b"report-json: writing '/dev/stdout' failed: Broken pipe" in err, err


def test_premultiplied_sum_equals_its_closed_form_and_peers_must_agree_on_the_factor():
    """NCCL's premultiplied sum (FSDP2's reduce-scatter with a gradient divide factor, as torchtitan sets it): an
    all_reduce with a number factor and a reduce_scatter_tensor with a tensor factor equal their closed forms on every
    rank, exactly; a rank that premultiplies by another factor than its peers ends the run (exit 4) naming both."""
    out = run([DTSIM, "run", "--nproc-per-node", "4", os.path.join(SCRIPTS, "premul_sum.py")])
    assert out.returncode == 4, out.stderr[-3000:]
    for rank in range(4):
        assert f"result all_reduce premul_sum(0.25) rank {rank} exact True" in out.stdout, out.stdout
        assert f"result reduce_scatter premul_sum(tensor 0.5) rank {rank} exact True" in out.stdout, out.stdout
    assert "premul_sum(2.0)" in out.stderr and "premul_sum(1.0)" in out.stderr, out.stderr[-3000:]
