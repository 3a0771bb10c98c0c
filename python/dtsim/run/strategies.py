"""DTensor sharding strategies for CPU kernels whose GPU twins have one upstream: without them, a script written for
GPUs fails on the simulated (CPU) devices where it runs on real ones.

Registered with upstream's strategy registry (`register_op_strategy`) when `dtsim run` starts:

| CPU op (torch 2.13)                                   | GPU op with an upstream strategy           |
|-------------------------------------------------------|--------------------------------------------|
| aten._scaled_dot_product_flash_attention_for_cpu       | aten._scaled_dot_product_flash_attention   |
| aten._scaled_dot_product_flash_attention_for_cpu_backward | aten._scaled_dot_product_flash_attention_backward |

The placements offered are the tensor-parallel ones of the GPU op: everything replicated, everything sharded on the
heads dim (1), or everything sharded on the batch dim (0); an attention mask, when given, follows the same dims.
The kernels are the CPU ones, so every rank's values are what the unsharded CPU op computes on its shard.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._op_schema import OpSchema, OpStrategy, RuntimeSchemaInfo
from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy

aten = torch.ops.aten


def _attention_strategy(op_schema: OpSchema, outputs: int) -> OpStrategy:
    tensors = sum(1 for arg in op_schema.args_schema if isinstance(arg, OpStrategy))
    mask = op_schema.kwargs_schema.get("attn_mask")
    if isinstance(mask, OpStrategy):
        tensors += 1
    width = outputs + tensors
    per_dim = [[Replicate()] * width, [Shard(1)] * width, [Shard(0)] * width]
    return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, per_dim, input_index=outputs)


def install() -> None:
    @register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default,
                          schema_info=RuntimeSchemaInfo(3, static_kwargkey=["scale"]))
    def _flash_cpu(op_schema: OpSchema) -> OpStrategy:
        return _attention_strategy(op_schema, outputs=2)

    @register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                          schema_info=RuntimeSchemaInfo(6, static_kwargkey=["scale"]))
    def _flash_cpu_backward(op_schema: OpSchema) -> OpStrategy:
        return _attention_strategy(op_schema, outputs=3)
