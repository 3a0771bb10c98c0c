"""torchtitan's parallelization patterns on a tiny Llama-like model (4 ranks: dp 2 x tp 2), for --check-ops and for
real torchrun against dtsim run.

    torchrun --standalone --nproc_per_node 4 titan_patterns.py
    dtsim run --check-ops --nproc-per-node 4 titan_patterns.py

What it has that torchtitan has: the model built on the meta device, then `to_empty` and initialized; a
vocabulary-parallel embedding (`RowwiseParallel` on `nn.Embedding`: upstream's `_MaskPartial`); complex rotary
frequencies multiplied into the queries; TP on the projections and FSDP2 over dp; `clip_grad_norm_(foreach=True)`
(upstream's `_NormPartial`); AdamW. Rank 0 prints each step's loss and gradient norm.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

VOCAB, DIM, SEQ, BATCH = 16, 8, 6, 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        freqs = 1.0 / (10000.0 ** (torch.arange(0, DIM, 2).float() / DIM))
        angles = torch.outer(torch.arange(SEQ).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def init_weights(self):
        """Every parameter from its global values (a closed form), as each rank's shard of them."""
        with torch.no_grad():
            for i, p in enumerate(self.parameters()):
                full = torch.sin(torch.arange(p.numel(), dtype=torch.float32) * (i + 1.3)).reshape(p.shape) * 0.3
                p.copy_(distribute_tensor(full, p.device_mesh, p.placements))

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        q = self.wq(h)
        q = torch.view_as_real(torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2)) * self.freqs_cis)
        h = h + self.wo(q.flatten(-2))
        return self.output(h)


dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
with torch.device("meta"):
    model = Model()
parallelize_module(model, mesh["tp"], {
    "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
    "wq": ColwiseParallel(output_layouts=Replicate()),
    "wo": RowwiseParallel(input_layouts=Replicate()),
    "output": ColwiseParallel(output_layouts=Replicate()),
})
fully_shard(model, mesh=mesh["dp"])
model.to_empty(device="cpu")
model.init_weights()
angles = torch.outer(torch.arange(SEQ).float(), 1.0 / (10000.0 ** (torch.arange(0, DIM, 2).float() / DIM)))
model.freqs_cis = torch.polar(torch.ones_like(angles), angles)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, foreach=True)
torch.manual_seed(1 + mesh["dp"].get_local_rank())
for step in range(3):
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens.roll(-1, 1).reshape(-1))
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()
    optimizer.zero_grad()
    total = loss.detach().clone()
    dist.all_reduce(total)
    norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    if rank == 0:
        print(f"step {step} loss {total.item() / 4:.6f} grad_norm {norm.item():.6f}")
dist.destroy_process_group()
if rank == 0:
    print("done")
