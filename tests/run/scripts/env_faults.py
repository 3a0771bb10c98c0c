"""TP + FSDP2 with AdamW, 3 steps, with an environment fault planted in the real torchrun + Gloo run only (never under
dtsim run, whose simulated backend is the reference): DTSIM_TEST_FAULT=

- allgather_corrupt: rank 1's second FSDP2 all-gather delivers one corrupted element (its bytes are changed once the
  backend has completed it, before the program's wait returns: what a faulty transport does);
- reduce_scatter_avg: every FSDP2 reduce-scatter averages where it should sum: its input is divided by the dp group's
  size on the way in (a wrong pre-divide factor, computed on plain tensors no recorder sees);
- allgather_after_wait: rank 1's second FSDP2 all-gather is delivered intact and waited for, then one element of its
  output changes before FSDP2 copies the parameters out (a stray write after the wait: the collective's own digest at
  completion is clean, its first read is not);
- async_read_early: rank 0 reads the result of the final async all-reduce (the samples the world has seen) before it
  waits for it, while the other ranks issue theirs a second late, so the read comes before the collective completes.

    dtsim record -o real.json -- torchrun --standalone --nproc_per_node 4 env_faults.py
    dtsim run --nproc-per-node 4 --trace sim.json env_faults.py
    dtsim trace-diff real.json sim.json
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

DIM, HIDDEN, BATCH, STEPS = 16, 32, 8, 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def plant(fault: str, rank: int) -> None:
    calls = {"n": 0}

    def wrap(name, faulty_of):
        original = getattr(dist, name, None)
        if original is not None:
            setattr(dist, name, faulty_of(original))

    if fault == "allgather_corrupt":
        def corrupting(original):
            def all_gather(output, input, *args, **kwargs):
                calls["n"] += 1
                if rank != 1 or calls["n"] != 2:
                    return original(output, input, *args, **kwargs)
                async_op = kwargs.pop("async_op", False)
                work = original(output, input, *args, async_op=True, **kwargs)
                # The backend finishes; the transport then corrupts an element before the program can wait.
                deadline = time.monotonic() + 10
                while not work.is_completed() and time.monotonic() < deadline:
                    time.sleep(0.0005)
                # Through NumPy, as a transport writes memory: the tensor's version counter does not move.
                output.view(-1)[:1].numpy()[0] += 1.0
                if not async_op:
                    work.wait()
                    return None
                return work

            return all_gather

        for name in ("all_gather_single", "all_gather_into_tensor"):
            wrap(name, corrupting)
    elif fault == "allgather_after_wait":
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        original_copy_out = _fsdp_param_group.foreach_all_gather_copy_out

        def copy_out(all_gather_result, *args, **kwargs):
            calls["n"] += 1
            if rank == 1 and calls["n"] == 2:
                if all_gather_result.all_gather_work is not None:
                    all_gather_result.all_gather_work.wait()  # complete, and digested as delivered
                # Through NumPy, as a stray write: the dispatcher sees nothing and no version counter moves.
                all_gather_result.all_gather_output.view(-1)[:1].numpy()[0] += 1.0
            return original_copy_out(all_gather_result, *args, **kwargs)

        _fsdp_param_group.foreach_all_gather_copy_out = copy_out
    elif fault == "reduce_scatter_avg":
        def averaging(original):
            def reduce_scatter(output, input, *args, **kwargs):
                return original(output, input / 2, *args, **kwargs)  # 2: the dp group's size

            return reduce_scatter

        for name in ("reduce_scatter_single", "reduce_scatter_tensor"):
            wrap(name, averaging)
    else:
        raise SystemExit(f"DTSIM_TEST_FAULT: unknown fault '{fault}'")


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fault = os.environ.get("DTSIM_TEST_FAULT")
    real = os.environ.get("DTSIM_RUN") != "1"
    if fault and real and fault != "async_read_early":
        plant(fault, rank)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Model()
    for block in model.layers:
        parallelize_module(block, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    torch.manual_seed(1000 + mesh.get_local_rank("dp"))
    x, target = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    # The samples the world has seen, for the log: an async all-reduce (int64: exact), waited for before its result is
    # read.
    early = real and fault == "async_read_early"
    if early and rank != 0:
        time.sleep(1.0)  # the other ranks come late: rank 0's read below is before the all-reduce can complete
    seen = torch.tensor([BATCH * STEPS])
    work = dist.all_reduce(seen, async_op=True)
    if early and rank == 0:
        print(f"samples seen {seen.item()}", flush=True)  # the planted bug: read before the wait
    work.wait()
    if rank == 0 and not early:
        print(f"samples seen {seen.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
