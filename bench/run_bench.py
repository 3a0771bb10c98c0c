"""`dtsim run` against the launchers it replaces (issue 31), both sides measured in one run, alternating.

    python bench/run_bench.py DTSIM_BIN        prints one JSON object; scripts/bench.sh prints the bench lines:

- run_vs_torchrun: wall time of real `torchrun --standalone --nproc_per_node 4` (Gloo) running
  examples/python/run/tp_fsdp_adamw.py (a 5-step TP + FSDP2 training script with AdamW on a 2x2 mesh), over the wall
  time of `dtsim run --nproc-per-node 4` on the same script; the median of DTSIM_RUN_BENCH_ROUNDS (5) alternating runs
  of each. Both sides start a Python and import torch; torchrun starts 5 of them.
- run_vs_localtensor: the step time of upstream LocalTensorMode (with the fake process group, 4 ranks) over
  `dtsim run`'s, on the same model and step: a tensor-parallel MLP (256 -> 1024 -> 256, batch 64, Colwise/Rowwise,
  forward, backward, SGD), the median of 20 steps after 3 warm-up steps (this file, `--step`). The model is TP only:
  upstream's FSDP2 does not run under LocalTensorMode in torch 2.13 (docs/model.md). Also measured: the step of the
  same program as ONE rank under dtsim run (full-size weights): every simulated rank runs upstream's Python DTensor
  dispatch for its own ops, where LocalTensorMode runs it once for all ranks.
- run_meta_1024: 60 s over the wall time of `dtsim run --meta --nproc-per-node 1024` on
  examples/python/run/tp_fsdp_sizes.py --steps 1 (TP + FSDP2 + AdamW on a 256 x 4 mesh, metadata only), one run.
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(ROOT, "examples", "python", "run", "tp_fsdp_adamw.py")
META_SCRIPT = os.path.join(ROOT, "examples", "python", "run", "tp_fsdp_sizes.py")
DIM, HIDDEN, BATCH, WARMUP, STEPS = 256, 1024, 64, 3, 20


def step_times(mode: str) -> float:
    """Runs the TP MLP (under dtsim run or torchrun when mode == "dist", under LocalTensorMode when "local");
    returns the median step time in ms, as measured by (simulated) rank 0."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def train(world):
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, DIM))
        model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(BATCH, DIM)
        times = []
        for i in range(WARMUP + STEPS):
            start = time.perf_counter()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if i >= WARMUP:
                times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000

    if mode == "dist":
        dist.init_process_group("gloo")
        ms = train(dist.get_world_size())
        if dist.get_rank() == 0:
            print(json.dumps({"step_ms": ms}))
        dist.destroy_process_group()
        return ms
    import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers the "fake" backend
    from torch.distributed._local_tensor import LocalTensorMode

    dist.init_process_group("fake", rank=0, world_size=4, store=dist.HashStore())
    with LocalTensorMode(4):
        ms = train(4)
    dist.destroy_process_group()
    return ms


def timed(argv, env):
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"run_bench: {argv[:4]} failed: {out.stderr[-2000:]}")
    return time.monotonic() - start, out.stdout


def main():
    if sys.argv[1:2] == ["--step"]:
        step_times(sys.argv[2])
        return
    dtsim = sys.argv[1]
    rounds = int(os.environ.get("DTSIM_RUN_BENCH_ROUNDS", "5"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", SCRIPT]
    simulated = [dtsim, "run", "--nproc-per-node", "4", SCRIPT]
    real_s, sim_s = [], []
    for _ in range(rounds):
        real_s.append(timed(torchrun, env)[0])
        sim_s.append(timed(simulated, env)[0])
    # Step times: the same TP MLP under dtsim run and under upstream LocalTensorMode, alternating.
    sim_ms, local_ms, one_ms = [], [], []
    for _ in range(3):
        _, out = timed([dtsim, "run", "--nproc-per-node", "4", __file__, "--step", "dist"], env)
        sim_ms.append(json.loads(out.strip().splitlines()[-1])["step_ms"])
        # One rank alone: what one rank's program (upstream's DTensor dispatch per op) costs without peers.
        _, out = timed([dtsim, "run", "--nproc-per-node", "1", __file__, "--step", "dist"], env)
        one_ms.append(json.loads(out.strip().splitlines()[-1])["step_ms"])
        _, out = timed([sys.executable, __file__, "--step", "local"], env)
        local_ms.append(float(out.strip().splitlines()[-1]))
    meta_s, _ = timed([dtsim, "run", "--meta", "--nproc-per-node", "1024", META_SCRIPT, "--steps", "1"], env)
    result = {
        "meta_1024_s": meta_s, "run_meta_1024": 60.0 / meta_s,
        "torchrun_s": statistics.median(real_s), "dtsim_run_s": statistics.median(sim_s),
        "run_vs_torchrun": statistics.median(real_s) / statistics.median(sim_s),
        "localtensor_step_ms": statistics.median(local_ms), "dtsim_run_step_ms": statistics.median(sim_ms),
        "run_vs_localtensor": statistics.median(local_ms) / statistics.median(sim_ms), "rounds": rounds,
        "one_rank_step_ms": statistics.median(one_ms),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:3] == ["--step", "local"]:
        print(step_times("local"))
    else:
        main()
