"""Hand-written 2-stage pipeline (GPipe schedule, 2 microbatches): activations go forward and their gradients
backward with dist.send/dist.recv; rank 1 computes the loss and sends it to rank 0. SGD, 3 steps. TWO ranks:

    torchrun --standalone --nproc_per_node 2 pipeline_2stage.py
    dtsim run --nproc-per-node 2 pipeline_2stage.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DIM, HIDDEN, BATCH, MICRO, STEPS = 16, 32, 8, 2, 3


def print_params(stage, module):
    for name, p in module.named_parameters():
        print(f"param {stage}.{name} sum {p.sum().item():.9e} abssum {p.abs().sum().item():.9e}", flush=True)


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    assert int(os.environ["WORLD_SIZE"]) == 2, "this pipeline has exactly two stages"

    torch.manual_seed(0)  # every rank builds the whole model and the data, then keeps its own stage
    stage0 = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU())
    stage1 = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, DIM))
    x = torch.randn(BATCH, DIM)
    target = torch.linspace(-1.0, 1.0, BATCH * DIM).reshape(BATCH, DIM)
    stage = stage0 if rank == 0 else stage1
    opt = torch.optim.SGD(stage.parameters(), lr=0.1)
    mb = BATCH // MICRO

    for step in range(STEPS):
        opt.zero_grad()
        if rank == 0:
            outs = []
            for i in range(MICRO):  # all forwards
                out = stage(x[i * mb:(i + 1) * mb])
                dist.send(out.detach(), dst=1)
                outs.append(out)
            for out in outs:  # all backwards, gradients arrive in microbatch order
                grad = torch.empty_like(out)
                dist.recv(grad, src=1)
                out.backward(grad)
            loss = torch.zeros(())
            dist.recv(loss, src=1)  # rank 0 learns the step's loss too
        else:
            inputs, losses = [], []
            for i in range(MICRO):
                act = torch.empty(mb, HIDDEN)
                dist.recv(act, src=0)
                act.requires_grad_(True)
                inputs.append(act)
                losses.append(F.mse_loss(stage(act), target[i * mb:(i + 1) * mb]) / MICRO)
            for act, mb_loss in zip(inputs, losses):
                mb_loss.backward()
                dist.send(act.grad, dst=0)
            loss = sum(l.detach() for l in losses)
            dist.send(loss, dst=0)
            print(f"step {step} loss {loss.item():.9e}", flush=True)
        opt.step()

    # rank 1 prints first, then rank 0, so the interleaved output is deterministic
    if rank == 1:
        print_params("stage1", stage)
    dist.barrier()
    if rank == 0:
        print_params("stage0", stage)
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
