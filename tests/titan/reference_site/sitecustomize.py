"""Test-only, for the reference runs of tests/titan/ (real torchrun + Gloo on this CPU machine): torchtitan has no CPU
device (its device falls back to "cuda" where torch finds no accelerator), so on the reference's PYTHONPATH alone this
makes torch name the CPU as the available device and gives torch.cpu the calls torchtitan makes of its device module
(memory statistics answer 0). It is never on a user's path: dtsim run needs nothing of it."""
import types

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"
_cpu = torch.cpu


def _zero(*args, **kwargs):
    return 0


def _nothing(*args, **kwargs):
    return None


for _name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
    setattr(_cpu, _name, _zero)
_cpu.reset_peak_memory_stats = _nothing
_cpu.empty_cache = _nothing
_cpu.memory_stats = lambda *a, **k: {"num_alloc_retries": 0, "num_ooms": 0}
_cpu.get_device_name = lambda *a, **k: "cpu"
_cpu.get_device_properties = lambda *a, **k: types.SimpleNamespace(name="cpu", total_memory=80 * 1024 ** 3)
_cpu.set_device = _nothing
_cpu.current_device = _zero
_original_device_count = getattr(_cpu, "device_count", None)
_cpu.device_count = lambda: 1 << 16


# FlexAttention, for the reference runs of torchtitan's FlexAttention configs: torch has no FlexAttention backward on
# a CPU, so the reference computes the same attention densely here, from the block mask's mask_mod evaluated at every
# (batch, head, query, key) index, with fp32 scores and softmax as the GPU kernel accumulates them; autograd gives its
# backward. It is independent of torch's own dense FlexAttention path, which dtsim run uses on its emulated GPUs (and
# which tests/run/scripts/flex_backward.py checks against SDPA). torchtitan compiles flex_attention and
# create_block_mask; here both run eagerly (a block mask is the same integers either way).
import math  # noqa: E402

import torch.nn.attention.flex_attention as _flex  # noqa: E402


def _dense_flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                          return_lse=False, kernel_options=None, *, return_aux=None):
    if score_mod is not None:
        raise NotImplementedError("the reference's dense FlexAttention takes no score_mod")
    batch, heads, q_len, dim = query.shape
    kv_len = key.shape[-2]
    if key.shape[1] != heads:
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    scores = (query.to(work) @ key.to(work).transpose(-2, -1)) * (1.0 / math.sqrt(dim) if scale is None else scale)
    if block_mask is not None:
        device = query.device
        index = [torch.arange(n, device=device).view([-1 if d == axis else 1 for d in range(4)])
                 for axis, n in enumerate((batch, heads, q_len, kv_len))]
        allowed = block_mask.mask_mod(*index).expand(batch, heads, q_len, kv_len)
        scores = scores.masked_fill(~allowed, -float("inf"))
    lse = scores.logsumexp(dim=-1)
    out = torch.softmax(scores, dim=-1).to(query.dtype) @ value
    if return_aux is not None:
        return out, _flex.AuxOutput(lse=lse if return_aux.lse else None, max_scores=None)
    return (out, lse) if return_lse else out


_flex.flex_attention = _dense_flex_attention
_compile = torch.compile
_EAGER = (_dense_flex_attention, _flex.create_block_mask)


def _reference_compile(model=None, **kwargs):
    if model is None:
        return lambda fn: _reference_compile(fn, **kwargs)
    return model if any(model is f for f in _EAGER) else _compile(model, **kwargs)


torch.compile = _reference_compile


# Gloo has no ReduceOp.PREMUL_SUM, which FSDP2 reduce-scatters with when torchtitan sets a gradient divide factor (1.0:
# torchtitan scales by the global token count itself). The reference forces FSDP2's sum reduction instead, which then
# post-multiplies by the same factor: for torchtitan's 1.0 the same numbers as NCCL's premultiplied sum.
import torch.distributed.fsdp._fully_shard._fsdp_collectives as _fsdp_collectives  # noqa: E402

_divide_factors = _fsdp_collectives._get_gradient_divide_factors


def _sum_reduction_divide_factors(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type="", factor=None,
                                  force_sum_reduction_for_comms=False):
    return _divide_factors(reduce_scatter_group, all_reduce_group, reduce_dtype, device_type, factor, True)


_fsdp_collectives._get_gradient_divide_factors = _sum_reduction_divide_factors


# Expert parallelism's token exchange: spmd_types calls the list form of all_to_all with each peer's own number of
# tokens, which Gloo's alltoall refuses ("invalid tensor size"; NCCL takes it). The reference sends the same tensors
# through Gloo's all_to_all_single with split sizes instead: the same data to the same peers.
import torch.distributed as _dist  # noqa: E402
import torch.distributed.distributed_c10d as _c10d  # noqa: E402

_all_to_all = _c10d.all_to_all


def _uneven_all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    if async_op or len({tuple(t.shape) for t in list(output_tensor_list) + list(input_tensor_list)}) == 1:
        return _all_to_all(output_tensor_list, input_tensor_list, group=group, async_op=async_op)
    trailing = tuple(input_tensor_list[0].shape[1:])
    sent = torch.cat([t.reshape((-1,) + trailing) for t in input_tensor_list])
    received = sent.new_empty((sum(t.shape[0] for t in output_tensor_list),) + trailing)
    _dist.all_to_all_single(received, sent, [t.shape[0] for t in output_tensor_list],
                            [t.shape[0] for t in input_tensor_list], group=group)
    for out, piece in zip(output_tensor_list, received.split([t.shape[0] for t in output_tensor_list])):
        out.copy_(piece.view(out.shape))
    return None


_c10d.all_to_all = _uneven_all_to_all
_dist.all_to_all = _uneven_all_to_all
