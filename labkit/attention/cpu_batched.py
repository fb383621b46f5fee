"""The fast CPU backend: the reference's gather-then-SDPA, batched and planned once per step.

``reference.py`` is the specification (one sequence at a time, one screen); this backend computes
the same thing for the whole batch at once and is tested against it. It handles
ragged query lengths in one call (see ``metadata.py``): sequences are padded to the longest query
and the longest context in their group, and a mask keeps each query causal and inside its own
context. Decode tokens (query_len 1) form their own group so one long prefill does not pad them.

Everything except the gather and the SDPA itself depends only on the metadata, not on the layer, so
it is planned once per forward pass (``_plan``) and reused by all layers.

Short multi-token queries (up to ``ROW_BY_ROW_MAX`` tokens: verifying k drafts, or a tiny prefill
chunk) are computed one query row at a time, each against exactly its own causal prefix, with no
padding or mask. Row j then goes through the very same SDPA call that plain decoding would make at
that position, so its result is the same to the last bit. In fp32 the batched form differs only
in the seventh digit, but in bf16 such differences flip greedy near-ties: without this, speculative
decoding in bf16 would not reproduce plain greedy output (the attention kernel splits its work by
the shape it is given, so its rounding depends on the batch shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from labkit.attention.metadata import AttentionMetadata
from labkit.attention.reference import write_kv  # noqa: F401  (writing K/V has one form)
from labkit.model import native

ROW_BY_ROW_MAX = 17     # k + 1 for the largest k SpecConfig allows (16)


def _work_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype SDPA runs in: fp32 for bf16/fp16 queries on the CPU, rounded back afterwards. PyTorch's
    CPU SDPA in bf16 took 1.4 ms where fp32 took 0.24 ms with the casts included (batch 16, 9 heads,
    120 positions, one thread, AMD EPYC; 40 of a bf16 batch-16 step's 64 ms were attention). Every
    call (batched decode, row-by-row verification) does the same, so a verified row still equals
    its decode step to the bit."""
    return torch.float32 if query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16) else query.dtype


@dataclass(frozen=True)
class _GroupPlan:
    """How one group of sequences (decode, or everything else) is gathered, masked and scattered."""

    slots: torch.Tensor              # [B, L] cache slot of each context position (padding: position 0)
    tok: torch.Tensor                # [B, Q] flat query-token index of each padded query row
    mask: torch.Tensor | None        # [B, 1, Q, L] SDPA mask; None when every query sees every key
    row_valid: torch.Tensor | None   # [B, Q] real (not padding) rows; None if all are real
    contiguous: bool                 # tok is exactly 0..num_tokens-1 in order (output is a reshape)
    first_slot: int | None = None    # B == 1 and its slots are consecutive: read K/V in place from here
    lens: torch.Tensor | None = None  # [B] int64 context length of each sequence (decode groups: the C kernel)


@dataclass(frozen=True)
class _RowsPlan:
    """One short multi-token query, attended row by row (see the module docstring)."""

    slots: torch.Tensor              # [1, seq_len] cache slots of the whole context
    first_token: int                 # flat index of the query's first token
    context_lens: tuple[int, ...]    # row j sees positions 0 .. context_lens[j] - 1
    first_slot: int | None = None    # the context's slots are consecutive: read K/V in place from here
    lens: torch.Tensor | None = None  # context_lens as an int64 tensor (the C kernel)


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query: [num_tokens, num_heads, head_dim] -> output of the same shape."""
    plans = _plan(meta, query.shape[0], query.device)
    if len(plans) == 1 and isinstance(plans[0], _GroupPlan) and plans[0].contiguous:
        return _attend(query, key_cache, value_cache, plans[0], scale).reshape(query.shape)
    out = torch.empty_like(query)
    for plan in plans:
        if isinstance(plan, _RowsPlan):
            _attend_rows(query, key_cache, value_cache, plan, scale, out)
            continue
        o = _attend(query, key_cache, value_cache, plan, scale)                # [B, Q, H, D]
        if plan.row_valid is None:
            out[plan.tok.reshape(-1)] = o.reshape(-1, *o.shape[2:])
        else:
            out[plan.tok[plan.row_valid]] = o[plan.row_valid]
    return out


def _gather(cache: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype, first_slot: int | None = None
            ) -> torch.Tensor:
    """This layer's K or V at ``slots`` [B, L]: returns [B, Hkv, L, D] in ``dtype``.

    One sequence whose blocks lie next to each other in the pool (a fresh pool hands them out in
    order) is read in place: a view with the same strides as the gathered copy, so SDPA computes the
    same bits, without copying the context every layer (at 1,000 tokens the copy cost as much as
    the attention itself)."""
    num_kv_heads, head_dim = cache.shape[-2:]
    if first_slot is not None and cache.is_contiguous():
        # flat[first_slot:first_slot + L].view(1, L, H, D).transpose(1, 2) as one view (one op, not four)
        row = num_kv_heads * head_dim
        rows = cache.as_strided((1, num_kv_heads, slots.shape[1], head_dim), (slots.shape[1] * row, head_dim, row, 1),
                                cache.storage_offset() + first_slot * row)
        return rows if rows.dtype == dtype else rows.to(dtype)
    flat = cache.view(-1, num_kv_heads, head_dim)
    if first_slot is not None:
        rows = flat[first_slot:first_slot + slots.shape[1]]
    else:
        # index_select copies whole rows; advanced indexing (cache[slots]) is 3-4x slower on CPU here.
        rows = flat.index_select(0, slots.view(-1))
    rows = rows.view(*slots.shape, num_kv_heads, head_dim).transpose(1, 2)
    return rows if rows.dtype == dtype else rows.to(dtype)


def _first_slot_if_consecutive(slots: torch.Tensor) -> int | None:
    """``slots[0, 0]`` when ``slots`` is one row of consecutive slot numbers, else None."""
    if slots.shape[0] != 1 or slots.shape[1] == 0:
        return None
    row = slots[0]
    first = int(row[0])
    if int(row[-1]) - first != row.numel() - 1 or not bool((row[1:] - row[:-1] == 1).all()):
        return None
    return first


def uses_decode_kernel(query: torch.Tensor, key_cache: torch.Tensor) -> bool:
    """Single query tokens go through labkit's C kernel (``native.decode_attention``) where it built: it
    reads the pool in place through the slots, where SDPA needs a gathered, padded, masked copy (a
    batch-16 decode step: 10.7 ms of attention through SDPA). Every single-token row takes it, decode
    and verification alike, so a verified row still equals its decode step to the bit."""
    return (query.device.type == "cpu" and key_cache.is_contiguous() and native.available()
            and key_cache.dtype in (torch.float32, torch.bfloat16))


def _kernel_rows(query, key_cache, value_cache, slots, lens, scale) -> torch.Tensor:
    """query [R, H, D] (any float dtype): the kernel in fp32, rounded back to the query's dtype."""
    out = native.decode_attention(query.float(), key_cache, value_cache, slots, lens, scale)
    return out if query.dtype == torch.float32 else out.to(query.dtype)


def _attend(query, key_cache, value_cache, plan: _GroupPlan, scale: float) -> torch.Tensor:
    """Gather this layer's K/V for the group and run SDPA: returns [B, Q, H, D]."""
    if plan.lens is not None and uses_decode_kernel(query, key_cache):
        rows = query if plan.contiguous else query[plan.tok.reshape(-1)]
        return _kernel_rows(rows, key_cache, value_cache, plan.slots, plan.lens, scale).unsqueeze(1)
    if plan.contiguous:
        q = query.reshape(*plan.tok.shape, *query.shape[1:]).transpose(1, 2)   # [B, H, Q, D], no gather
    else:
        q = query[plan.tok].transpose(1, 2)
    work = _work_dtype(query)
    if q.dtype != work:
        q = q.to(work)
    if q.stride(-1) != 1:
        q = q.contiguous()   # CPU flash attention needs unit-stride head_dim, else SDPA takes the slow math path
    o = F.scaled_dot_product_attention(q, _gather(key_cache, plan.slots, work, plan.first_slot),
                                       _gather(value_cache, plan.slots, work, plan.first_slot),
                                       attn_mask=plan.mask, scale=scale, enable_gqa=True)
    return o.transpose(1, 2).to(query.dtype)


def _attend_rows(query, key_cache, value_cache, plan: _RowsPlan, scale: float, out: torch.Tensor) -> None:
    """Row j of the query against exactly its own prefix: the call plain decoding makes there."""
    if uses_decode_kernel(query, key_cache):
        rows = query[plan.first_token:plan.first_token + len(plan.context_lens)]
        out[plan.first_token:plan.first_token + len(plan.context_lens)] = _kernel_rows(
            rows, key_cache, value_cache, plan.slots, plan.lens, scale)
        return
    work = _work_dtype(query)
    k = _gather(key_cache, plan.slots, work, plan.first_slot)
    v = _gather(value_cache, plan.slots, work, plan.first_slot)
    rows = query[plan.first_token:plan.first_token + len(plan.context_lens)].to(work).contiguous()   # as _attend
    for j, length in enumerate(plan.context_lens):
        q = rows[j:j + 1].view(1, 1, *rows.shape[1:]).transpose(1, 2)                  # [1, H, 1, D]
        out[plan.first_token + j] = F.scaled_dot_product_attention(
            q, k[:, :, :length], v[:, :, :length], scale=scale, enable_gqa=True)[0, :, 0]


def _plan(meta: AttentionMetadata, num_tokens: int, device) -> list[_GroupPlan | _RowsPlan]:
    key = ("cpu_batched", num_tokens, str(device))
    if key not in meta.scratch:
        lens = meta.query_lens_list
        decode = [s for s, q in enumerate(lens) if q == 1]
        other = [s for s, q in enumerate(lens) if q > ROW_BY_ROW_MAX]
        plans: list = [_plan_group(meta, g, num_tokens, device) for g in (decode, other) if g]
        plans += [_plan_rows(meta, s, device) for s, q in enumerate(lens) if 1 < q <= ROW_BY_ROW_MAX]
        meta.scratch[key] = plans
    return meta.scratch[key]


def _plan_rows(meta: AttentionMetadata, seq: int, device) -> _RowsPlan:
    q_len, s_len = meta.query_lens_list[seq], meta.seq_lens_list[seq]
    slots = _context_slots(meta, [seq], torch.arange(s_len, device=device))
    first = sum(meta.query_lens_list[:seq])
    lens = tuple(range(s_len - q_len + 1, s_len + 1))
    return _RowsPlan(slots, first, lens, _first_slot_if_consecutive(slots), torch.tensor(lens, dtype=torch.int64))


def _context_slots(meta: AttentionMetadata, seqs: list[int], pos: torch.Tensor) -> torch.Tensor:
    """Cache slot of context position ``pos`` [L] of each sequence in ``seqs``: [B, L]."""
    bs = meta.block_size
    tables = meta.block_tables.index_select(0, torch.tensor(seqs, device=pos.device)).long()
    return tables[:, (pos // bs).clamp(max=tables.shape[1] - 1)] * bs + (pos % bs)


def _plan_group(meta: AttentionMetadata, seqs: list[int], num_tokens: int, device) -> _GroupPlan:
    starts = [0]
    for n in meta.query_lens_list:
        starts.append(starts[-1] + n)
    q_lens = [meta.query_lens_list[s] for s in seqs]
    s_lens = [meta.seq_lens_list[s] for s in seqs]
    Q, L = max(q_lens), max(s_lens)

    # Key/value slots for positions 0..L-1 of each sequence: [B, L]. Positions past a sequence's end
    # would read whatever another request left in those slots, and even a zero attention weight times
    # a stale NaN is NaN; point them at the sequence's own position 0 (always written, finite) instead.
    pos = torch.arange(L, device=device)
    slots = _context_slots(meta, seqs, pos)
    s_len_t = torch.tensor(s_lens, device=device)
    ragged_context = min(s_lens) < L
    if ragged_context:
        slots = torch.where(pos[None, :] < s_len_t[:, None], slots, slots[:, :1])

    # Queries padded to Q rows: flat token index of row j of sequence b.
    q_start = torch.tensor([starts[s] for s in seqs], device=device)
    q_len_t = torch.tensor(q_lens, device=device)
    j = torch.arange(Q, device=device)
    padded_rows = min(q_lens) < Q
    row_valid = j[None, :] < q_len_t[:, None]                                  # [B, Q]
    tok = (q_start[:, None] + j[None, :]).clamp(max=num_tokens - 1)           # [B, Q]

    if Q == 1 and not ragged_context:
        mask = None        # every decode query sees its whole context, and all contexts are full
    else:
        # Causal inside each context; padded rows may see position 0 only (avoids NaN rows).
        q_pos = (s_len_t - q_len_t)[:, None] + j[None, :]                      # [B, Q]
        mask = (pos[None, None, :] <= q_pos[:, :, None]) & (pos[None, None, :] < s_len_t[:, None, None])
        mask = (mask | (~row_valid[:, :, None] & (pos[None, None, :] == 0)))[:, None]
    contiguous = (not padded_rows and sum(q_lens) == num_tokens
                  and [starts[s] for s in seqs] == starts[:-1] and seqs == sorted(seqs))
    slots = slots.contiguous()
    return _GroupPlan(slots, tok, mask, row_valid if padded_rows else None, contiguous,
                      None if ragged_context else _first_slot_if_consecutive(slots),
                      s_len_t.to(torch.int64) if Q == 1 and slots.device.type == "cpu" else None)
