"""Paged attention, the specification: one sequence at a time, gather K/V through its block table,
then causal scaled-dot-product attention. Every other backend (``cpu_batched``, ``triton_paged``)
computes the same thing faster and is tested against this file.

Position p of sequence s lives in cache slot ``block_tables[s][p // B] * B + p % B`` (B = block
size), the "address translation" of PagedAttention (Kwon et al., SOSP'23, §4.1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from labkit.attention.metadata import AttentionMetadata

# The pool is [..., kv_heads, head_dim] addressed by slot, written by `write_kv` below: a model may
# write it in a fused call of its own (``labkit.kernels.native.rope_write_kv``).
KV_POOL_LAYOUT = "slots"


def write_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
             value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store new K/V: flat token i goes to slot ``slot_mapping[i]``.
    key, value: [num_tokens, kv_heads, head_dim]; caches: [num_blocks, block_size, kv_heads, head_dim]."""
    kv_heads, head_dim = key_cache.shape[-2:]
    if key.dtype != key_cache.dtype:
        key, value = key.to(key_cache.dtype), value.to(value_cache.dtype)
    key_cache.view(-1, kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    value_cache.view(-1, kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query: [num_tokens, heads, head_dim], sequence s owning rows query_start_loc[s]:[s+1] -> same shape."""
    kv_heads, head_dim = key_cache.shape[-2:]
    keys, values = key_cache.view(-1, kv_heads, head_dim), value_cache.view(-1, kv_heads, head_dim)
    B = meta.block_size
    out = torch.empty_like(query)
    start = 0
    for s, (q_len, seq_len) in enumerate(zip(meta.query_lens_list, meta.seq_lens_list)):
        pos = torch.arange(seq_len, device=query.device)
        slots = meta.block_tables[s, pos // B].long() * B + pos % B              # [seq_len]
        k = keys[slots].transpose(0, 1).to(query.dtype)                         # [kv_heads, seq_len, D]
        v = values[slots].transpose(0, 1).to(query.dtype)
        q = query[start:start + q_len].transpose(0, 1)                          # [heads, q_len, D]
        q_pos = pos[seq_len - q_len:]                                           # the queries' positions
        causal = pos[None, :] <= q_pos[:, None]                                 # [q_len, seq_len]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scale, enable_gqa=True)
        out[start:start + q_len] = o.transpose(0, 1)
        start += q_len
    return out
