"""An expert-parallel exchange inside a selective-activation-checkpointing region, through a custom op that each
rank's module copy defines (torchtitan's MoE token dispatch under its selective AC), for real torchrun against dtsim
run (2 ranks):

    torchrun --standalone --nproc_per_node 2 checkpointed_exchange.py
    dtsim run --nproc-per-node 2 checkpointed_exchange.py

The region all-to-alls rows with uneven splits, concatenates them and scatters them with the custom op. Its policy
saves the collective and the concatenation and recomputes the rest, so the backward replays the concatenations it
counted in the forward by their order: a rank's count must hold only its program's own. Each rank prints whether
the op torch dispatches is the one its module defined (a real rank's is), then the loss and its input's gradient
sums (rank 0 prints every rank's lines).
"""
from functools import partial

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._library import custom_ops
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from rank_lib import ops

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2, "checkpointed_exchange.py runs on 2 ranks"
dist.barrier()  # every rank has imported rank_lib.ops
lines = [f"result rank {rank} its custom op is torch's: {custom_ops.OPDEFS.get(ops.QUALNAME) is ops.scatter_rows}"]

SENDS = [[1, 3], [2, 2]]  # rows rank r sends to each peer: uneven
SAVED = {torch.ops.aten.cat.default, torch.ops._c10d_functional.all_to_all_single.default,
         torch.ops._c10d_functional.wait_tensor.default}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def region(x):
    h = x * 1.5
    received = [SENDS[peer][rank] for peer in range(world)]
    y = funcol.all_to_all_single_autograd(h, received, SENDS[rank], dist.group.WORLD)
    y = funcol.wait_tensor(y) if isinstance(y, funcol.AsyncCollectiveTensor) else y
    buffer = torch.cat([y, y * 2])
    index = torch.arange(buffer.shape[0]) % 3
    out = ops.scatter_rows(torch.zeros(3, x.shape[1]), index, buffer)
    return out.sin()


x = (torch.arange(12.0).reshape(4, 3) / 8 + rank).requires_grad_()
out = checkpoint(region, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, policy))
loss = out.sum()
loss.backward()
lines.append(f"result rank {rank} loss {loss.item():.8f} grad {x.grad.sum().item():.8f} "
             f"{x.grad.abs().sum().item():.8f}")
every = [None] * world
dist.all_gather_object(every, lines)  # rank 0 prints every rank's lines, in rank order
if rank == 0:
    print("\n".join(line for rank_lines in every for line in rank_lines))
    print("done")
dist.destroy_process_group()
