"""FlexAttention forward and backward, compiled as torchtitan compiles it (`torch.compile(flex_attention)`,
`torch.compile(create_block_mask)`), on 2 ranks with data-parallel gradients, against SDPA's math on the same masks.

On a GPU (or dtsim run's emulated GPUs) each rank checks three attention patterns against
`scaled_dot_product_attention` with the equal dense mask or bias, built here from the index formulas alone:
- causal (SDPA's `is_causal`);
- torchtitan's block-causal document mask (a token sees the earlier tokens of its own document), as a boolean mask;
- a causal mask with an ALiBi-like score_mod, as an additive float bias.
It prints the largest differences of the output and of the gradients of q, k and v, then all-reduces the gradients
(a data-parallel step) and prints their sum, which must equal the SDPA gradients' all-reduced sum.

`python flex_backward.py cpu` runs the same on CPU tensors, where torch has no FlexAttention backward: it must raise
torch's refusal, under torchrun and under dtsim run alike.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

ON_CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
compiled_flex = torch.compile(flex_attention)
# (On CPU tensors the block mask is made eagerly: inductor's compile of it costs half a minute, and the refusal is
# flex_attention's.)
compiled_mask = create_block_mask if ON_CPU else torch.compile(create_block_mask)

dist.init_process_group("gloo" if ON_CPU else "nccl")
rank = dist.get_rank()
device = torch.device("cpu") if ON_CPU else torch.device("cuda", rank)
torch.manual_seed(1234 + rank)
if not ON_CPU:  # the CUDA RNG state dynamo saves and restores around the frames it compiles
    state = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(state)
    assert torch.equal(torch.cuda.get_rng_state(), state) and state.dtype == torch.uint8
B, H, L, E = 2, 4, 256, 16
DOC_STARTS = (0, 37, 120, 200)  # four documents in each sequence
doc_of = torch.zeros(L, dtype=torch.long, device=device)
for start in DOC_STARTS[1:]:
    doc_of[start:] += 1


def causal(b, h, q, kv):
    return q >= kv


def block_causal(b, h, q, kv):
    return (q >= kv) & (doc_of[q] == doc_of[kv])


def alibi(score, b, h, q, kv):
    return score - (h + 1) * 0.125 * (q - kv)


index = torch.arange(L, device=device)
dense_causal = index[:, None] >= index[None, :]
dense_docs = dense_causal & (doc_of[:, None] == doc_of[None, :])
heads = torch.arange(H, device=device, dtype=torch.float32)[:, None, None]
alibi_bias = (-(heads + 1) * 0.125 * (index[:, None] - index[None, :]).float()).masked_fill(~dense_causal,
                                                                                                float("-inf"))

CASES = [
    ("causal", causal, None, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    ("block_causal", block_causal, None,
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense_docs)),
    ("alibi", causal, alibi, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias)),
]

for name, mask_mod, score_mod, reference in CASES:
    q, k, v = (torch.randn(B, H, L, E, device=device, requires_grad=True) for _ in range(3))
    block_mask = compiled_mask(mask_mod, None, None, L, L, device=device)
    out = compiled_flex(q, k, v, score_mod=score_mod, block_mask=block_mask)  # refused here on CPU tensors
    weights = torch.randn(B, H, L, E, device=device)
    (out * weights).sum().backward()
    flex_grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    want = reference(q, k, v)
    (want * weights).sum().backward()
    want_grads = [t.grad.clone() for t in (q, k, v)]
    diffs = [(out - want).abs().max().item()] + [(a - b).abs().max().item() for a, b in zip(flex_grads, want_grads)]
    summed = torch.stack([g.sum() for g in flex_grads])
    reference_summed = torch.stack([g.sum() for g in want_grads])
    dist.all_reduce(summed)
    dist.all_reduce(reference_summed)
    print(f"rank {rank} {name}: max |out - sdpa| {diffs[0]:.3g}, grads q {diffs[1]:.3g} k {diffs[2]:.3g} "
          f"v {diffs[3]:.3g}; all-reduced grad sums {summed.tolist()} sdpa {reference_summed.tolist()}", flush=True)
dist.destroy_process_group()
