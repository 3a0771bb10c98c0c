"""Attention written for GPUs: scaled_dot_product_attention on DTensors sharded on the heads dim, forward and
backward, compared with the unsharded computation on every rank (prints the largest differences)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("nccl")
mesh = init_device_mesh("cuda", (dist.get_world_size(),))
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 8, 16, device="cuda", requires_grad=True) for _ in range(3))
reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
reference.sum().backward()
dq, dk, dv = (distribute_tensor(t.detach(), mesh, [Shard(1)]).requires_grad_() for t in (q, k, v))
out = F.scaled_dot_product_attention(dq, dk, dv, is_causal=True)
out.sum().backward()
forward = (out.full_tensor() - reference).abs().max().item()
backward = max((d.grad.full_tensor() - t.grad).abs().max().item() for d, t in ((dq, q), (dk, k), (dv, v)))
if dist.get_rank() == 0:
    print(f"placements {out.placements} forward {forward} backward {backward}")
dist.destroy_process_group()
