"""Pure-PyTorch paged attention: gather K/V through block tables, then one masked SDPA.

This is the readable backend and the specification the Triton kernel is tested against. It handles
ragged query lengths in one call (see ``metadata.py``): sequences are padded to the longest query
and the longest context in their group, and a mask keeps each query causal and inside its own
context. Decode tokens (query_len 1) form their own group so one long prefill does not pad them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from labkit.attention.metadata import AttentionMetadata


def write_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
             value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store new K/V: flat token i goes to slot ``slot_mapping[i]`` of the cache.

    key, value: [num_tokens, num_kv_heads, head_dim]; caches: [num_blocks, block_size, kv_heads, head_dim].
    """
    num_kv_heads, head_dim = key_cache.shape[-2:]
    key_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key.to(key_cache.dtype))
    value_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value.to(value_cache.dtype))


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query: [num_tokens, num_heads, head_dim] -> output of the same shape."""
    out = torch.empty_like(query)
    decode = [s for s, q in enumerate(meta.query_lens_list) if q == 1]
    other = [s for s, q in enumerate(meta.query_lens_list) if q > 1]
    for group in (decode, other):
        if group:
            _attend_group(query, key_cache, value_cache, meta, scale, group, out)
    return out


def _attend_group(query, key_cache, value_cache, meta: AttentionMetadata, scale: float,
                  seqs: list[int], out: torch.Tensor) -> None:
    device = query.device
    num_kv_heads, head_dim = key_cache.shape[-2:]
    bs = meta.block_size
    starts = [0]
    for n in meta.query_lens_list:
        starts.append(starts[-1] + n)
    q_lens = [meta.query_lens_list[s] for s in seqs]
    s_lens = [meta.seq_lens_list[s] for s in seqs]
    Q, L = max(q_lens), max(s_lens)
    sel = torch.tensor(seqs, device=device)

    # Key/value slots for positions 0..L-1 of each sequence: [B, L]
    pos = torch.arange(L, device=device)
    tables = meta.block_tables.index_select(0, sel).long()                    # [B, max_blocks]
    blk_idx = (pos // bs).clamp(max=tables.shape[1] - 1)
    slots = tables[:, blk_idx] * bs + (pos % bs)                              # [B, L]
    in_context = (pos[None, :] < torch.tensor(s_lens, device=device)[:, None])[:, :, None, None]
    # Slots past a sequence's end hold whatever another request left there: zero them, since even a
    # zero attention weight times a stale NaN is NaN.
    k = key_cache.view(-1, num_kv_heads, head_dim)[slots].where(in_context, 0).transpose(1, 2)  # [B, Hkv, L, D]
    v = value_cache.view(-1, num_kv_heads, head_dim)[slots].where(in_context, 0).transpose(1, 2)

    # Queries padded to Q rows: flat token index of row j of sequence b.
    q_start = torch.tensor([starts[s] for s in seqs], device=device)
    q_len_t = torch.tensor(q_lens, device=device)
    s_len_t = torch.tensor(s_lens, device=device)
    j = torch.arange(Q, device=device)
    row_valid = j[None, :] < q_len_t[:, None]                                  # [B, Q]
    tok = (q_start[:, None] + j[None, :]).clamp(max=query.shape[0] - 1)       # [B, Q]
    q = query[tok].transpose(1, 2)                                             # [B, H, Q, D]

    # Causal mask inside each context; padded rows may see position 0 only (avoids NaN rows).
    q_pos = (s_len_t - q_len_t)[:, None] + j[None, :]                          # [B, Q]
    mask = (pos[None, None, :] <= q_pos[:, :, None]) & (pos[None, None, :] < s_len_t[:, None, None])
    mask = mask | (~row_valid[:, :, None] & (pos[None, None, :] == 0))
    o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask[:, None],
                                       scale=scale, enable_gqa=True)           # [B, H, Q, D]
    o = o.transpose(1, 2)                                                      # [B, Q, H, D]
    out[tok[row_valid]] = o[row_valid]
