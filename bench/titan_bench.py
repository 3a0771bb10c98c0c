"""torchtitan under dtsim run against real torchrun + Gloo (bench titan_vs_torchrun, issue 59): the lane's graph_trainer
llama3 debug config (SDPA), FSDP 4 x TP 2 on 8 ranks, 5 steps, once each, one after the other. Run with the lane's
python (scripts/titan_venv.sh), which has torchtitan and dtsim installed; the reference run alone has
tests/titan/reference_site/ (torchtitan's CPU device) on its path, as in tests/titan/test_titan.py.

Prints one JSON object: both wall times (process start included), whether every step's loss and gradient norm were
equal to the printed digit, and the ratio torchrun / dtsim run."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TITAN = os.path.join(ROOT, "tests", "titan")
ARGS = ["-m", "torchtitan.train", "--module", "graph_trainer.llama3", "--config",
        "graph_trainer_llama3_debugmodel_sdpa_eager", "--training.steps", "5", "--training.seq_len", "256",
        "--training.local_batch_size", "2", "--checkpoint.no-enable", "--validator.no-enable", "--debug.seed", "42",
        "--training.disable_cuda_graphs", "--parallelism.data_parallel_shard_degree", "4",
        "--parallelism.tensor_parallel_degree", "2"]
STEP = re.compile(r"step:\s+(\d+)\s+loss:\s+([-\d.]+)\s+grad_norm:\s+([-\d.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def timed(argv, cwd, env):
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=1800)
    seconds = time.monotonic() - started
    if out.returncode != 0:
        sys.exit(f"titan_bench: {argv[:4]} failed ({out.returncode}): {out.stderr[-3000:]}")
    return seconds, sorted({m.groups() for m in STEP.finditer(ANSI.sub("", out.stdout + out.stderr))})


def main() -> None:
    work = tempfile.mkdtemp(prefix="dtsim-titan-bench-")
    subprocess.run([sys.executable, os.path.join(TITAN, "make_assets.py"), work], check=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", HF_HOME=os.path.join(work, "hf"),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    reference_env = dict(env, PYTHONPATH=os.path.join(TITAN, "reference_site"))
    print("titan_bench: real torchrun + Gloo, 8 ranks, 5 steps ...", file=sys.stderr)
    torchrun_s, want = timed([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8"]
                             + ARGS, work, reference_env)
    print("titan_bench: dtsim run, 8 ranks, 5 steps ...", file=sys.stderr)
    dtsim_s, got = timed([sys.executable, "-m", "dtsim", "run", "--nproc-per-node", "8"] + ARGS, work, env)
    print(json.dumps({"torchrun_s": torchrun_s, "dtsim_run_s": dtsim_s, "ratio": torchrun_s / dtsim_s,
                      "steps": len(want), "equal": got == want and len(want) == 5}))


if __name__ == "__main__":
    main()
