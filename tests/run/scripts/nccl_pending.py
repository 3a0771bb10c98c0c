"""One rank's collectives on NCCL (all-reduce, all-gather, reduce-scatter, broadcast, all-to-all), then an all-reduce
queued behind a long GPU kernel. On a real GPU (not under dtsim run, the reference), with DTSIM_TEST_FR_DIR set, the
rank dumps its Flight Recorder while that all-reduce is still pending, as the watchdog dumps a hung job: the pickle
of `_dump_nccl_trace` to DTSIM_TEST_FR_DIR/rank<r>, and the JSON form to DTSIM_TEST_FR_DIR/json/rank<r>.

The dumps in tests/data/fr/nccl-torch-2.11/ were written so, on one H200 (docs/recording.md, "Flight Recorder"):

    TORCH_FR_BUFFER_SIZE=2000 DTSIM_TEST_FR_DIR=fr torchrun --standalone --nproc_per_node 1 nccl_pending.py
    dtsim import-fr -o fr.json fr/rank0
    dtsim run --nproc-per-node 1 --trace sim.json nccl_pending.py
    dtsim trace-diff fr.json sim.json      # the last all-reduce: issued, never completed
"""
import os
import time

import torch
import torch.distributed as dist


def dump_api():
    import torch._C._distributed_c10d as c10d

    # NCCL's entries are in the CUDA Flight Recorder; _dump_fr_trace holds the CPU backends'.
    return (getattr(c10d, "_dump_nccl_trace", None) or c10d._dump_fr_trace,
            getattr(c10d, "_dump_nccl_trace_json", None) or c10d._dump_fr_trace_json)


def settle(dump) -> None:
    """Waits until the Flight Recorder shows every collective issued so far as completed: the watchdog marks them
    after the GPU has run them (bounded: 30 s)."""
    import pickle

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = pickle.loads(dump(True, True, False)).get("pg_status", {})
        if status and all(s["last_completed_collective"] >= s["last_enqueued_collective"] for s in status.values()):
            return
        time.sleep(0.01)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    real = os.environ.get("DTSIM_RUN") != "1"
    torch.manual_seed(0)
    x = torch.randn(4 * world, 8, device="cuda")
    dist.all_reduce(x)
    gathered = torch.empty(4 * world * world, 8, device="cuda")
    dist.all_gather_into_tensor(gathered, x)
    part = torch.empty(4, 8, device="cuda")
    dist.reduce_scatter_tensor(part, x)
    dist.broadcast(x, src=0)
    swapped = torch.empty_like(x)
    dist.all_to_all_single(swapped, x)
    total = part.sum().reshape(1)
    folder = os.environ.get("DTSIM_TEST_FR_DIR")
    if real and folder:
        dump, dump_json = dump_api()
        torch.cuda.synchronize()
        settle(dump)
        # The GPU is busy for seconds with a kernel that the all-reduce's stream must wait for: the all-reduce is
        # enqueued and never started when the rank dumps.
        torch.cuda._sleep(10_000_000_000)
    work = dist.all_reduce(total, async_op=True)
    if real and folder:
        os.makedirs(os.path.join(folder, "json"), exist_ok=True)
        with open(os.path.join(folder, f"rank{rank}"), "wb") as f:
            f.write(dump(True, True, False))
        text = dump_json(True, False)
        with open(os.path.join(folder, "json", f"rank{rank}"), "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        print(f"dumped with torch {torch.__version__}, nccl {torch.cuda.nccl.version()}", flush=True)
        os._exit(0)  # a hung job's ranks are killed after the dump, not shut down
    work.wait()
    if rank == 0:
        print(f"total {total.item():.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
