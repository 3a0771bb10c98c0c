"""A torchtitan-style step (4 ranks): the model built on the meta device, sharded by FSDP2, materialized with
`to_empty` on the GPU, fed by a shuffling DataLoader, clipped with `clip_grad_norm_(foreach=True)` and stepped by
AdamW(foreach=True). Every rank prints its memory after each phase; they have closed forms (the test checks them):

    built on meta, sharded   0            (meta tensors the program makes hold nothing on a GPU)
    materialized             2 x 16 x 64 x 4 = 8192 bytes   (each rank's row shard of two 64 x 64 weights)
    after the optimizer step 8192 x 3 more (the gradients, exp_avg, exp_avg_sq), the data set (8 x 64 x 4), the batch
                             (2 x 64 x 4) and scalars (the loss, AdamW's step counts)

    dtsim run --memory --nproc-per-node 4 meta_init_step.py
    dtsim run --meta --nproc-per-node 4 meta_init_step.py      the same numbers without values
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset

DIM = 64
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
with torch.device("meta"):
    model = nn.Sequential(nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM, bias=False))
for layer in model:
    fully_shard(layer)
fully_shard(model)
print(f"memory rank {rank} built {torch.cuda.memory_allocated()}")
model.to_empty(device="cuda")
for p in model.parameters():
    nn.init.constant_(p, 0.01)
print(f"memory rank {rank} materialized {torch.cuda.memory_allocated()}")
data = TensorDataset(torch.arange(8 * DIM, dtype=torch.float32).reshape(8, DIM) / 512)
loader = DataLoader(data, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=True)
for (batch,) in loader:
    loss = model(batch.cuda()).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()
    break
print(f"memory rank {rank} stepped {torch.cuda.memory_allocated()}")
dist.destroy_process_group()
