"""A custom op defined at import (torch.library.custom_op, as torchtitan's deterministic scatter-add is): under real
torchrun each rank's process defines it once; under dtsim run each rank's copy of this module defines it again."""
import torch

QUALNAME = "rank_lib::scatter_rows"


@torch.library.custom_op(QUALNAME, mutates_args=())
def scatter_rows(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """out with each row of src added to the row `index` names."""
    return out.index_add(0, index, src)


@scatter_rows.register_fake
def _(out, index, src):
    return torch.empty_like(out)


def _backward(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad, None, grad.index_select(0, index)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


scatter_rows.register_autograd(_backward, setup_context=_setup_context)
