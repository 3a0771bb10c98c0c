"""torchtitan's trainer under `dtsim run`, unmodified and with no shim, against real torchrun + Gloo (issue 59).

The lane's venv (scripts/titan_venv.sh: torch 2.15.0, torchtitan 0.3.0) runs both. The program is torchtitan's own
`python -m torchtitan.train`: its graph_trainer llama3 debug config on SDPA (simple_fsdp, DTensor TP), its default
llama3 debug config (FlexAttention, which dtsim run computes densely with its backward on the emulated GPUs) and
qwen3's MoE debug config, on assets made here (tests/titan/make_assets.py: torchtitan's wheel ships no tokenizer or
c4_test data). The reference run alone has tests/titan/reference_site/ on its path: torchtitan has
no CPU device, and that shim gives it one. Every step's loss and gradient norm, as every rank logs them, must equal the
reference's: to the printed digit on SDPA, within float tolerance where the two dense attentions round differently.

dtsim runs as a user installs it: scripts/titan_venv.sh pip-installs this checkout into the lane's venv, built against
its torch 2.15.0, and the runs call that venv's `python -m dtsim run`.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
TITAN_PY = os.environ.get("DTSIM_TITAN_PYTHON") or os.path.expanduser(
    "~/.cache/dtsim/titan-venv-2.15.0/bin/python")
RUN_ARGS = ["--training.steps", "3", "--training.seq_len", "256", "--training.local_batch_size", "2",
            "--checkpoint.no-enable", "--validator.no-enable", "--debug.seed", "42"]
COMMON = ["--module", "graph_trainer.llama3", "--config", "graph_trainer_llama3_debugmodel_sdpa_eager"] + RUN_ARGS
# torchtitan's default llama3 debug config: FlexAttention with its block-causal document mask, selective activation
# checkpointing, and (with TP) the spmd_types path.
DEFAULT = ["--module", "llama3", "--config", "llama3_debugmodel"] + RUN_ARGS
NO_GRAPHS = ["--training.disable_cuda_graphs"]
STEP = re.compile(r"step:\s+(\d+)\s+loss:\s+([-\d.]+)\s+grad_norm:\s+([-\d.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not os.path.exists(TITAN_PY):
        pytest.fail(f"the torchtitan lane's venv is missing ({TITAN_PY}): run scripts/titan_venv.sh (scripts/test.sh "
                    "does)")
    root = tmp_path_factory.mktemp("titan")
    subprocess.run([TITAN_PY, os.path.join(HERE, "make_assets.py"), str(root)], check=True)
    installed = subprocess.run([TITAN_PY, "-c", "import torch, dtsim._C, dtsim; print(dtsim.__file__)"],
                               capture_output=True, text=True, cwd=root, env=env_for(root, False))
    assert installed.returncode == 0, f"dtsim is not installed in the lane's venv: {installed.stderr[-2000:]}"
    assert "site-packages" in installed.stdout, installed.stdout
    return root


def env_for(workdir, reference: bool):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", HF_HOME=str(workdir / "hf"),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("VIRTUAL_ENV", None)
    if reference:
        env["PYTHONPATH"] = os.path.join(HERE, "reference_site")
    else:
        env.pop("PYTHONPATH", None)
    return env


def steps(text):
    """{(step, loss, grad_norm)} as the ranks log them (each rank logs its own line)."""
    return sorted({m.groups() for m in STEP.finditer(ANSI.sub("", text))})


def reference(workdir, nproc, args, common=COMMON):
    out = subprocess.run([TITAN_PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                          "-m", "torchtitan.train"] + common + NO_GRAPHS + args, capture_output=True, text=True,
                         cwd=workdir, env=env_for(workdir, True), timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    return steps(out.stdout + out.stderr)


def simulated(workdir, nproc, args, extra=(), graphs_off=True, common=COMMON):
    started = time.monotonic()
    out = subprocess.run([TITAN_PY, "-m", "dtsim", "run", "--nproc-per-node", str(nproc)] + list(extra)
                         + ["-m", "torchtitan.train"] + common + (NO_GRAPHS if graphs_off else []) + args,
                         capture_output=True, text=True, cwd=workdir, env=env_for(workdir, False), timeout=900)
    return out, time.monotonic() - started


FSDP4_TP2 = ["--parallelism.data_parallel_shard_degree", "4", "--parallelism.tensor_parallel_degree", "2"]


def checked_ops(stderr):
    """The number of DTensor ops --check-ops checked, asserting that none diverged."""
    found = re.search(r"dtsim run --check-ops: (\d+) DTensor ops? checked", stderr)
    assert found and "  no divergence" in stderr, stderr[-4000:]
    return int(found.group(1))


def test_fsdp_tp_on_8_ranks_trains_as_under_torchrun_with_check_ops_clean(workdir):
    """FSDP 4 x TP 2 over 8 ranks (simple_fsdp and DTensor TP) under --check-ops: every step's loss and gradient norm
    equal real torchrun + Gloo's to the printed digit, and every DTensor op torchtitan runs (meta-device init, to_empty
    and its initializers, the vocabulary-parallel embedding, rotary embeddings, SDPA, clipping, AdamW) equals the same
    op on the global tensors, with no shim in dtsim run's path. The check only reads the ranks' tensors, so the steps
    it leaves are those of the run without it."""
    want = reference(workdir, 8, FSDP4_TP2)
    assert [s[0] for s in want] == ["1", "2", "3"], want
    out, seconds = simulated(workdir, 8, FSDP4_TP2, extra=["--check-ops"])
    assert out.returncode == 0, out.stderr[-4000:]
    got = steps(out.stdout + out.stderr)
    assert got == want, (got, want)
    count = checked_ops(out.stderr)
    assert count > 1000, count
    print(f"torchtitan FSDP 4 x TP 2 on 8 ranks under --check-ops: {got} equal, {count} ops checked, no divergence; "
          f"dtsim run {seconds:.1f} s for 3 steps")


def test_hsdp_with_gradient_accumulation_trains_as_under_torchrun(workdir):
    """HSDP (dp_replicate 2 x dp_shard 2) on 4 ranks with two gradient-accumulation microbatches a step (a global
    batch of 8 over 2 x 2 ranks of 2): every step's loss and gradient norm equal real torchrun + Gloo's."""
    args = ["--parallelism.data_parallel_replicate_degree", "2", "--parallelism.data_parallel_shard_degree", "2",
            "--training.global_batch_size", "8"]
    want = reference(workdir, 4, args)
    assert [s[0] for s in want] == ["1", "2", "3"], want
    out, seconds = simulated(workdir, 4, args)
    assert out.returncode == 0, out.stderr[-4000:]
    got = steps(out.stdout + out.stderr)
    assert got == want, (got, want)
    print(f"torchtitan HSDP 2 x 2 with gradient accumulation on 4 ranks: {got} equal; dtsim run {seconds:.1f} s")


@pytest.mark.parametrize("args,graphs_off,common,feature,option,site", [
    (["--parallelism.data_parallel_shard_degree", "2"], False, COMMON, "torch.cuda.CUDAGraph",
     "--training.disable_cuda_graphs", "torchtitan/distributed/cudagraph.py"),
    (["--parallelism.tensor_parallel_degree", "2", "--compile.enable", "--compile.enable-async-tensor-parallel"], True,
     DEFAULT, "torch.distributed._symmetric_memory.enable_symm_mem_for_group",
     "--compile.no-enable-async-tensor-parallel", "torchtitan/distributed/compile.py"),
    (["--parallelism.data_parallel_shard_degree", "2", "--parallelism.enable-fsdp-symm-mem"], True, DEFAULT,
     "torch.distributed.fsdp.FSDPModule.set_symm_mem_for_comm", "--parallelism.no-enable-fsdp-symm-mem",
     "torchtitan/distributed/fsdp.py"),
], ids=["cuda_graphs", "async_tp", "fsdp_symm_mem"])
def test_gpu_only_features_are_refused_naming_torchtitans_option(workdir, args, graphs_off, common, feature, option,
                                                                 site):
    """What cannot run on the emulated GPUs' CPU tensors is refused at the line of torchtitan that reached it, naming
    torchtitan's option that turns it off: CUDA graphs (torchtitan 0.3.0 captures them by default), async TP and
    FSDP2's symmetric-memory collectives (both symmetric memory)."""
    out, _ = simulated(workdir, 2, args, graphs_off=graphs_off, common=common)
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"{feature} cannot run on the simulated devices" in out.stderr, out.stderr[-3000:]
    assert f"torchtitan turns it off with {option}" in out.stderr, out.stderr[-3000:]
    assert site in out.stderr, out.stderr[-3000:]


def close(got, want, rel=2e-3):
    """Steps equal in number, and each loss and gradient norm within `rel` of the reference's."""
    return len(got) == len(want) and all(
        g[0] == w[0] and all(abs(float(a) - float(b)) <= rel * abs(float(b)) for a, b in zip(g[1:], w[1:]))
        for g, w in zip(got, want))


def test_default_flex_attention_config_trains_as_the_dense_reference(workdir):
    """torchtitan's default llama3 debug config (FlexAttention, block-causal document mask, selective activation
    checkpointing) with FSDP 2 x TP 2 on 4 ranks on the spmd_types path: dtsim run's emulated GPUs run torch's dense
    FlexAttention with its backward; the reference (real torchrun + Gloo) computes the attention with the harness's own
    dense masked softmax (reference_site/sitecustomize.py). Every step's loss and gradient norm agree within float
    tolerance (the two attentions round differently). The run is under --check-ops: every DTensor op it makes (FSDP2's
    storage, the optimizer, clipping; TP computes on plain tensors on this path) equals the op on the global tensors,
    and the higher-order FlexAttention op runs under the check as without it."""
    args = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"]
    want = reference(workdir, 4, args, common=DEFAULT)
    assert [s[0] for s in want] == ["1", "2", "3"], want
    out, seconds = simulated(workdir, 4, args, extra=["--check-ops"], common=DEFAULT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = steps(out.stdout + out.stderr)
    assert close(got, want), (got, want)
    assert "torch.compile(flex_attention) runs eagerly on the emulated GPUs" in out.stderr
    count = checked_ops(out.stderr)
    assert count > 100, count
    print(f"torchtitan default llama3 debug config, FSDP 2 x TP 2 under --check-ops ({count} ops checked, no "
          f"divergence): {got} against {want}; dtsim run {seconds:.1f} s")


@pytest.mark.parametrize("nproc,args", [
    (4, ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.pipeline_parallel_degree", "2",
         "--parallelism.pipeline_parallel_schedule", "1F1B"]),
    (4, ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.pipeline_parallel_degree", "2",
         "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B"]),
    (4, ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.context_parallel_degree", "2"]),
], ids=["pp2_1f1b_fsdp2", "pp2_interleaved_fsdp2", "cp2_fsdp2"])
def test_default_config_pipeline_and_context_parallel_train_as_under_torchrun(workdir, nproc, args):
    """The default llama3 debug config with pipeline parallelism over FSDP2 (1F1B: one stage a rank; Interleaved1F1B:
    two stages a rank, torchtitan's default schedule) and with context parallelism over FSDP2 (FlexAttention's K/V
    all-gathered over the CP group, the block mask sharded along the queries): every rank's logged loss and gradient
    norm (a pipeline's first stage logs torchtitan's placeholder loss) agree with real torchrun + Gloo's within float
    tolerance (the two dense attentions round differently)."""
    want = reference(workdir, nproc, args, common=DEFAULT)
    assert {s[0] for s in want} == {"1", "2", "3"}, want
    out, seconds = simulated(workdir, nproc, args, common=DEFAULT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = steps(out.stdout + out.stderr)
    assert close(got, want), (got, want)
    print(f"torchtitan default config {args} on {nproc} ranks: {got} against {want}; dtsim run {seconds:.1f} s")


def test_moe_expert_parallel_with_uneven_routing_trains_as_under_torchrun(workdir):
    """qwen3's MoE debug config with expert parallelism 2 over FSDP 2 on 2 ranks (selective activation checkpointing,
    its custom deterministic scatter-add op): its router sends each peer its own number of tokens (uneven
    all-to-alls), and every step's loss and gradient norm agree with real torchrun + Gloo's within float tolerance.
    The reference's Gloo takes the uneven list all-to-all through all_to_all_single (reference_site/)."""
    moe = ["--module", "qwen3", "--config", "qwen3_moe_debug"] + RUN_ARGS
    args = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.expert_parallel_degree", "2"]
    want = reference(workdir, 2, args, common=moe)
    assert [s[0] for s in want] == ["1", "2", "3"], want
    out, seconds = simulated(workdir, 2, args, common=moe)
    assert out.returncode == 0, out.stderr[-4000:]
    got = steps(out.stdout + out.stderr)
    assert close(got, want), (got, want)
    print(f"torchtitan qwen3 MoE, EP 2 x FSDP 2: {got} against {want}; dtsim run {seconds:.1f} s")


def test_meta_run_of_the_default_config_gives_each_ranks_peak_of_the_run_with_values(workdir, tmp_path):
    """`dtsim run --meta` of the default config, FSDP2 2 x TP 2 on 4 ranks, 2 steps: torchtitan's trainer runs its
    steps on meta tensors (FlexAttention, fused AdamW, clipping, its logged loss and token count read as placeholders,
    which the summary names), and each rank's peak memory (--report-json) is within 1 % of the same run's with
    values."""
    args = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2",
            "--training.steps", "2"]
    peaks = {}
    for mode in ("meta", "values"):
        report = tmp_path / f"{mode}.json"
        out, seconds = simulated(workdir, 4, args, common=DEFAULT,
                                 extra=["--report-json", str(report)] + (["--meta"] if mode == "meta" else []))
        assert out.returncode == 0, out.stderr[-4000:]
        if mode == "meta":  # the trainer's logged loss read a placeholder, and the summary says where
            assert re.search(r"the program read \d+ values that a metadata-only run does not compute", out.stderr)
            assert re.search(r"torchtitan/trainer\.py:\d+ in train_step: Tensor\.item\(\)", out.stderr), \
                out.stderr[-3000:]
        modules = json.loads(report.read_text())["modules"]
        peaks[mode] = [max(m["peak_bytes"][r] or 0 for m in modules) for r in range(4)]
        print(f"{mode}: each rank's peak {peaks[mode]} bytes; dtsim run {seconds:.1f} s")
    assert all(v > 0 for v in peaks["values"]), peaks
    assert all(abs(m - v) <= 0.01 * v for m, v in zip(peaks["meta"], peaks["values"])), peaks


def test_dcp_checkpoint_resumes_into_the_same_losses_with_full_activation_checkpointing(workdir):
    """The default config with full activation checkpointing, FSDP 2 on 2 ranks, saving a DCP checkpoint at step 2
    (model, optimizer, LR scheduler, data loader): its steps agree with real torchrun's within float tolerance (the
    reference's own dense attention), and a second run that resumes from that step-2 checkpoint alone gives step 3's
    loss and gradient norm of the uninterrupted run exactly."""
    args = ["--parallelism.data_parallel_shard_degree", "2", "--checkpoint.interval", "2"]
    full_ac = ["activation-checkpoint:full"]  # torchtitan's subcommand: last on its command line
    saving = DEFAULT[:DEFAULT.index("--checkpoint.no-enable")] + DEFAULT[DEFAULT.index("--checkpoint.no-enable") + 1:]
    want = reference(workdir, 2, args + ["--dump_folder", str(workdir / "dcp_reference")] + full_ac, common=DEFAULT)
    first, _ = simulated(workdir, 2, args + ["--checkpoint.enable", "--dump_folder", str(workdir / "dcp_first")]
                         + full_ac, common=saving)
    assert first.returncode == 0, first.stderr[-4000:]
    uninterrupted = steps(first.stdout + first.stderr)
    assert close(uninterrupted, want), (uninterrupted, want)
    folder = workdir / "dcp_first" / "checkpoint"
    assert sorted(os.listdir(folder)) == ["step-2", "step-3"], os.listdir(folder)
    resumed_folder = workdir / "dcp_resumed" / "checkpoint"
    resumed_folder.mkdir(parents=True)
    os.rename(folder / "step-2", resumed_folder / "step-2")
    resumed, seconds = simulated(workdir, 2, args + ["--checkpoint.enable", "--dump_folder",
                                                     str(workdir / "dcp_resumed")] + full_ac, common=saving)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "Loading the checkpoint from" in resumed.stdout + resumed.stderr
    got = steps(resumed.stdout + resumed.stderr)
    assert got == [s for s in uninterrupted if s[0] == "3"], (got, uninterrupted)
    print(f"DCP resume at step 2: step 3 {got} as uninterrupted; resumed run {seconds:.1f} s")
