"""A tensor-parallel MLP (ColwiseParallel / RowwiseParallel on 4 ranks), 3 steps, then the mean loss over the world by
an async all-reduce. Planted in the real torchrun + Gloo run only (never under dtsim run, the reference):
DTSIM_TEST_FAULT=skip_all_reduce makes rank 1 skip that all-reduce, which would hang the job.

With DTSIM_TEST_FR_DIR (the real run), every rank then writes its Flight Recorder dump (run with
TORCH_FR_BUFFER_SIZE set) to DTSIM_TEST_FR_DIR/rank<r>, as the watchdog writes them, and leaves without waiting for
its collective once every rank has dumped.

    TORCH_FR_BUFFER_SIZE=2000 DTSIM_TEST_FR_DIR=fr DTSIM_TEST_FAULT=skip_all_reduce \\
        torchrun --standalone --nproc_per_node 4 rank_hang.py
    dtsim import-fr -o fr.json fr/rank0 fr/rank1 fr/rank2 fr/rank3
    dtsim run --nproc-per-node 4 --trace sim.json rank_hang.py
    dtsim trace-diff fr.json sim.json
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def settle_flight_recorder() -> None:
    """Waits until the Flight Recorder shows every collective this rank has waited for as completed: Gloo's worker
    thread marks one completed after the wait has returned (bounded: 30 s)."""
    import pickle

    import torch._C._distributed_c10d as c10d

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = pickle.loads(c10d._dump_fr_trace(True, True, False)).get("pg_status", {})
        if all(s["last_completed_collective"] >= s["last_enqueued_collective"] for s in status.values()):
            return
        time.sleep(0.01)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    real = os.environ.get("DTSIM_RUN") != "1"
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(4, 8), torch.randn(4, 8)
    total = torch.zeros(1)
    for _ in range(3):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        total += loss.detach()
    skip = real and os.environ.get("DTSIM_TEST_FAULT") == "skip_all_reduce" and rank == 1
    folder = os.environ.get("DTSIM_TEST_FR_DIR")
    if real and folder:
        settle_flight_recorder()
    work = None if skip else dist.all_reduce(total, async_op=True)
    if real and folder:
        import torch._C._distributed_c10d as c10d

        if work is not None and os.environ.get("DTSIM_TEST_FAULT") != "skip_all_reduce":
            work.wait()
            settle_flight_recorder()
        dump = c10d._dump_fr_trace(True, True, False)
        with open(os.path.join(folder, f".rank{rank}"), "wb") as f:
            f.write(dump)
        os.rename(os.path.join(folder, f".rank{rank}"), os.path.join(folder, f"rank{rank}"))
        # As in a hung job, no rank leaves before every rank has dumped: a rank that left earlier would close its
        # connections, and Gloo would end the others' pending all-reduce with an error, which their dumps then show
        # as completed (bounded: 60 s).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(1 for n in os.listdir(folder) if n.startswith("rank")) < 4:
            time.sleep(0.01)
        os._exit(0)  # a hung job's ranks are killed after the dump, not shut down
    work.wait()
    if rank == 0:
        print(f"mean loss {total.item() / 4 / 3:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
