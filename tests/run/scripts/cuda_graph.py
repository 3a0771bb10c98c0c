"""A GPU script that captures a CUDA graph: dtsim run cannot emulate it and must say so at this line (exit 1)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
x = torch.ones(4, device="cuda")
graph = torch.cuda.CUDAGraph()  # refused here
with torch.cuda.graph(graph):
    y = x * 2
dist.destroy_process_group()
