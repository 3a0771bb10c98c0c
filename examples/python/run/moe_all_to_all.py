"""MoE-style token exchange with uneven all_to_all_single: each rank routes its 3+rank tokens to per-token experts
(one expert per rank), experts process what they receive and send results back. Only the experts train (the
exchange is not differentiable): each rank's share of the global loss, summed grads, SGD, 3 steps.

    torchrun --standalone --nproc_per_node 4 moe_all_to_all.py
    dtsim run --nproc-per-node 4 moe_all_to_all.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

DIM, STEPS = 8, 3


def main():
    dist.init_process_group("gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    torch.manual_seed(0)  # identical expert init on every rank
    expert = nn.Linear(DIM, DIM)
    opt = torch.optim.SGD(expert.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)  # per-rank tokens and routing
    n_tokens = 3 + rank
    tokens = torch.randn(n_tokens, DIM)
    expert_ids = torch.randint(0, world, (n_tokens,))

    # group tokens by destination rank, then tell every rank how many rows to expect
    order = torch.argsort(expert_ids, stable=True)
    send_counts = torch.bincount(expert_ids, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
    total = torch.tensor([n_tokens])
    dist.all_reduce(total)

    for step in range(STEPS):
        opt.zero_grad()
        received = torch.empty(sum(recv_splits), DIM)
        dist.all_to_all_single(received, tokens[order], recv_splits, send_splits)
        out = expert(received)
        # the target of a token is its reversed features; the loss is the mean over all tokens of all ranks
        local_loss = ((out - received.flip(-1)) ** 2).sum() / (total.item() * DIM)
        local_loss.backward()

        returned = torch.empty(n_tokens, DIM)  # reverse exchange: results go home in the same order
        dist.all_to_all_single(returned, out.detach(), send_splits, recv_splits)
        result = torch.empty_like(returned)
        result[order] = returned
        loss = (((result - tokens.flip(-1)) ** 2).sum() / (total.item() * DIM)).reshape(1)
        dist.all_reduce(loss)

        for p in expert.parameters():  # summed grads = exact grads of the global loss; experts stay identical
            dist.all_reduce(p.grad)
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.9e}", flush=True)

    for name, p in expert.named_parameters():
        if rank == 0:
            print(f"param {name} sum {p.sum().item():.9e} abssum {p.abs().sum().item():.9e}", flush=True)
    if rank == 0:
        print("done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
