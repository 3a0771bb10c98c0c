"""A GPU script whose memory statistics have a closed form (dtsim run only: it needs torch.cuda). Every rank checks
torch.cuda's counters against the bytes it allocates, views, resizes and frees; rank r's Spike module allocates a
temporary of (r + 1) MiB, so its peak inside Spike is its memory on entry + (r + 1) MiB + the 16-byte output; the test
reads that peak from --report-json and the entry value from the "entry" line printed here."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

MIB = 1 << 20


class Spike(nn.Module):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def forward(self, x):
        tmp = torch.zeros((self.rank + 1) * MIB // 4, device=x.device)  # freed when forward returns
        return x + tmp[: x.numel()].view_as(x)  # a new 16-byte tensor while tmp is alive


class Outer(nn.Module):
    def __init__(self, rank: int):
        super().__init__()
        self.spike = Spike(rank)

    def forward(self, x):
        return self.spike(x) * 2


def expect(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: {got} != {want}")


dist.init_process_group("nccl")
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(device)

base = torch.cuda.memory_allocated()
x = torch.empty(1000 * (rank + 1), device=device)  # 4000 (rank + 1) bytes
expect("after empty", torch.cuda.memory_allocated() - base, 4000 * (rank + 1))
view = x.view(-1)[:10]  # a view: no bytes of its own
expect("after a view", torch.cuda.memory_allocated() - base, 4000 * (rank + 1))
torch.cuda.reset_peak_memory_stats()
expect("peak after reset", torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
y = torch.empty(2000, dtype=torch.float64, device=device)  # 16000 bytes
del y
expect("peak", torch.cuda.max_memory_allocated() - base, 4000 * (rank + 1) + 16000)
expect("after del", torch.cuda.memory_allocated() - base, 4000 * (rank + 1))
storage = x.untyped_storage()
storage.resize_(0)  # as FSDP2 frees an unsharded parameter
expect("after resize_(0)", torch.cuda.memory_allocated() - base, 0)
storage.resize_(400)
expect("after resize_(400)", torch.cuda.memory_allocated() - base, 400)
del x, view, storage
expect("all freed", torch.cuda.memory_allocated(), base)

t = torch.ones(256, device=device)  # 1024 bytes
before = torch.cuda.memory_allocated()
dist.all_reduce(t)  # in place: the backend's temporaries are not the program's
expect("after all_reduce", torch.cuda.memory_allocated(), before)
out = torch.empty(256 * dist.get_world_size(), device=device)
dist.all_gather_into_tensor(out, t)
expect("after all_gather", torch.cuda.memory_allocated(), before + 1024 * dist.get_world_size())
expect("all_gather values", out.sum().item(), 256.0 * dist.get_world_size() ** 2)
expect("torch.accelerator", torch.accelerator.memory_allocated(), torch.cuda.memory_allocated())

model = Outer(rank)
x = torch.ones(2, 2, device=device)
print(f"entry rank {rank} {torch.cuda.memory_allocated()}", flush=True)
y = model(x)
expect("Spike output", y.sum().item(), 8.0)
print(f"result rank {rank} memory counters ok", flush=True)
dist.destroy_process_group()
