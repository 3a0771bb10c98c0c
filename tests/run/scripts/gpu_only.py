"""GPU-only features dtsim run refuses at the line that reaches them (exit 1), by the feature named in argv[1]:

- symm_mem: torch's symmetric memory for a group (async TP's first step);
- fsdp_symm_mem: FSDP2's symmetric-memory collectives;
- scaled_mm: a float8 matmul on the GPU (float8 training's kernel);
- cpu_scaled_mm: the same matmul in a CPU program, which torch computes on the CPU and dtsim run must leave alone:
  it prints the result's sum beside the sum of the matmul of the dequantized operands, its closed form.
"""
import sys

import torch
import torch.distributed as dist

feature = sys.argv[1]
device = "cpu" if feature.startswith("cpu_") else "cuda"
dist.init_process_group("gloo" if device == "cpu" else "nccl")
if device == "cuda":
    torch.cuda.set_device(dist.get_rank())


def float8(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-8, 9, (rows, cols), generator=g).float() / 4).to(device).to(torch.float8_e4m3fn)


if feature == "symm_mem":
    import torch.distributed._symmetric_memory as symm_mem

    symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name)  # refused here
elif feature == "fsdp_symm_mem":
    from torch.distributed.fsdp import fully_shard

    model = fully_shard(torch.nn.Linear(8, 8, device=device))
    model.set_symm_mem_for_comm()  # refused here
elif feature in ("scaled_mm", "cpu_scaled_mm"):
    a, b = float8(16, 32, 1), float8(16, 32, 2)
    scale = torch.tensor(1.0, device=device)
    out = torch._scaled_mm(a, b.t(), scale_a=scale, scale_b=scale, out_dtype=torch.float32)  # refused on the GPU
    closed = a.float() @ b.float().t()
    print(f"rank {dist.get_rank()}: scaled_mm sum {out.sum().item()} dequantized matmul sum {closed.sum().item()}")
else:
    raise SystemExit(f"gpu_only.py: unknown feature {feature!r}")
dist.destroy_process_group()
