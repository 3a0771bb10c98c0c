"""NCCL's premultiplied sum (`dist._make_nccl_premul_sum(factor)`, which FSDP2's reduce-scatter uses where a gradient
divide factor is set, as torchtitan sets it), on 4 ranks of a GPU script: each rank's input times the factor, then
summed. The script checks every result against its closed form (rank r holds r + 1 + i / 8 at index i; every value
and product is exact in float32) and prints one line per check. Gloo has no premultiplied sum, so the reference is the
closed form, not torchrun."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank)
index = torch.arange(8, dtype=torch.float32, device=device) / 8
ranks_sum = world * (world + 1) / 2  # sum of r + 1 over the ranks

x = rank + 1 + index
dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.25))
want = 0.25 * (ranks_sum + world * index)
print(f"result all_reduce premul_sum(0.25) rank {rank} exact {torch.equal(x, want)}", flush=True)

factor = torch.tensor([0.5], device=device)  # a tensor factor, as FSDP2 may pass
inputs = (rank + 1 + torch.arange(world * 2, dtype=torch.float32, device=device) / 8)
out = torch.empty(2, device=device)
dist.reduce_scatter_tensor(out, inputs, op=dist._make_nccl_premul_sum(factor))
mine = torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32, device=device) / 8
print(f"result reduce_scatter premul_sum(tensor 0.5) rank {rank} exact "
      f"{torch.equal(out, 0.5 * (ranks_sum + world * mine))}", flush=True)

dist.barrier()  # every rank has printed before the mismatch below ends the run
try:  # peers that premultiply by different factors do not meet (a rank-dependent factor is a bug)
    dist.all_reduce(torch.ones(2, device=device), op=dist._make_nccl_premul_sum(1.0 if rank else 2.0))
except Exception as e:  # pragma: no cover - dtsim run ends the run at the mismatch
    print(f"rank {rank} {e}")
dist.destroy_process_group()
