"""The fast CPU backend: the reference's attention, every query row against exactly its own prefix.

``reference.py`` is the specification (one sequence at a time, one screen); this backend computes
the same thing for the whole batch and is tested against it.

Batch invariance: a row's result depends on its own query, context and position only, never on what
else shares the step (other sequences, their lengths, the row count, how a prompt was cut into
chunks). So a request gets the same bits alone or in any batch, and the scheduler's choices (async
scheduling's one-step-late admissions, static or continuous batching, preemption, speculative
verification) never change a token. A batched kernel breaks this: PyTorch's SDPA splits its work by
the shape it is given (sequences padded to the longest query and context of the group, a mask), so
its rounding depends on the other sequences in the batch; in bf16, or at a greedy near-tie in fp32,
that flips tokens (seen: async scheduling changed the greedy output of 2 of 8 prompts;
tests/kernels/test_batch_invariance.py holds it).

- Where labkit's C kernel builds (``native.decode_attention``, fp32 or bf16 K/V): one call a step
  for the decode rows, one call per multi-token sequence (a prefill chunk, a verification), each
  row reading its own prefix from the pool in place. It is also the fast path: batch-16 decode
  attention 10.7 -> 4.2 ms a step against batched SDPA; a 700-token prefill no slower than SDPA's.
- Elsewhere: one SDPA call per query row, over a view of its own prefix, the very call a decode
  step makes at that position.

Everything except the attention itself depends only on the metadata, not on the layer, so it is
planned once per forward pass (``_plan``) and reused by all layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from labkit.attention.metadata import AttentionMetadata
from labkit.attention.reference import KV_POOL_LAYOUT, write_kv  # noqa: F401  (writing K/V has one form)
from labkit.kernels import native


def _work_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype SDPA runs in: fp32 for bf16/fp16 queries on the CPU, rounded back afterwards. PyTorch's
    CPU SDPA in bf16 took 1.4 ms where fp32 took 0.24 ms with the casts included (batch 16, 9 heads,
    120 positions, one thread, AMD EPYC; 40 of a bf16 batch-16 step's 64 ms were attention). Every
    call (batched decode, row-by-row verification) does the same, so a verified row still equals
    its decode step to the bit."""
    return torch.float32 if query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16) else query.dtype


@dataclass(frozen=True)
class _DecodePlan:
    """Every single-token query of the step, for one call of the C kernel."""

    slots: torch.Tensor              # [B, L] cache slot of each context position (past a context's end: its position 0)
    lens: torch.Tensor               # [B] int64 context length of each sequence
    tok: torch.Tensor                # [B] flat query-token index of each row
    contiguous: bool                 # tok is exactly 0..num_tokens-1 (the output is the whole result)


@dataclass(frozen=True)
class _RowsPlan:
    """One sequence's query rows, each attended against its own prefix."""

    slots: torch.Tensor              # [1, seq_len] cache slots of the whole context
    first_token: int                 # flat index of the query's first token
    context_lens: tuple[int, ...]    # row j sees positions 0 .. context_lens[j] - 1
    first_slot: int | None = None    # the context's slots are consecutive: read K/V in place from here
    lens: torch.Tensor | None = None  # context_lens as an int64 tensor (the C kernel)


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query: [num_tokens, num_heads, head_dim] -> output of the same shape."""
    call = one_kernel_call(query, key_cache, meta)
    if call is not None:
        return _kernel_rows(query, key_cache, value_cache, *call, scale)
    kernel = uses_decode_kernel(query, key_cache)
    plans = _plan(meta, query.shape[0], query.device, kernel)
    out = torch.empty_like(query)
    for plan in plans:
        if isinstance(plan, _RowsPlan):
            _attend_rows(query, key_cache, value_cache, plan, scale, out, kernel)
        else:
            out[plan.tok] = _kernel_rows(query[plan.tok], key_cache, value_cache, plan.slots, plan.lens, scale)
    return out


def one_kernel_call(rows: torch.Tensor, key_cache: torch.Tensor, meta: AttentionMetadata
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(slots [B or 1, L], lens [B]) where this step's attention is one call of the C kernel over all its
    query rows in order (``rows``: any tensor with a row per query token): every row a single new token,
    or every row one sequence's (its verification rows, or its prefill). Else None. The whole-layer C
    call (``labkit.kernels.ops.native_ops.NativeOps.decode_plan``, which finds this function on the backend
    by its name) runs exactly where this is not None."""
    if not uses_decode_kernel(rows, key_cache):
        return None
    plans = _plan(meta, rows.shape[0], rows.device, True)
    if len(plans) != 1:
        return None
    plan = plans[0]
    whole = (plan.contiguous if isinstance(plan, _DecodePlan) else
             plan.first_token == 0 and len(plan.context_lens) == rows.shape[0])
    return (plan.slots, plan.lens) if whole else None


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
    """Query rows go through labkit's C kernel (``native.decode_attention``) where it built: it reads the
    pool in place through the slots, where SDPA needs a gathered copy of each context. Every row takes
    it (decode, verification, prefill), so a row's bits never depend on the step it ran in."""
    return (query.device.type == "cpu" and key_cache.is_contiguous() and native.available()
            and key_cache.dtype in (torch.float32, torch.bfloat16))


def _kernel_rows(query, key_cache, value_cache, slots, lens, scale) -> torch.Tensor:
    """query [R, H, D] (any float dtype): the kernel in fp32, rounded back to the query's dtype."""
    out = native.decode_attention(query.float(), key_cache, value_cache, slots, lens, scale)
    return out if query.dtype == torch.float32 else out.to(query.dtype)


def _attend_rows(query, key_cache, value_cache, plan: _RowsPlan, scale: float, out: torch.Tensor,
                 kernel: bool) -> None:
    """Row j of the query against exactly its own prefix: the call plain decoding makes there."""
    first, last = plan.first_token, plan.first_token + len(plan.context_lens)
    if kernel:
        out[first:last] = _kernel_rows(query[first:last], key_cache, value_cache, plan.slots, plan.lens, scale)
        return
    work = _work_dtype(query)
    k = _gather(key_cache, plan.slots, work, plan.first_slot)
    v = _gather(value_cache, plan.slots, work, plan.first_slot)
    rows = query[first:last].to(work).contiguous()   # CPU SDPA needs unit-stride head_dim for its fast path
    for j, length in enumerate(plan.context_lens):
        q = rows[j:j + 1].view(1, 1, *rows.shape[1:]).transpose(1, 2)                  # [1, H, 1, D]
        out[first + j] = F.scaled_dot_product_attention(
            q, k[:, :, :length], v[:, :, :length], scale=scale, enable_gqa=True)[0, :, 0]


def _plan(meta: AttentionMetadata, num_tokens: int, device, kernel: bool) -> list[_DecodePlan | _RowsPlan]:
    """With the kernel: one plan for all single-token queries, one per longer query. Without: one
    per sequence (SDPA then runs row by row)."""
    key = ("cpu_batched", num_tokens, str(device), kernel)
    if key not in meta.scratch:
        lens = meta.query_lens_list
        decode = [s for s, q in enumerate(lens) if q == 1] if kernel else []
        plans: list = [_plan_decode(meta, decode, device)] if decode else []
        plans += [_plan_rows(meta, s, device) for s, q in enumerate(lens) if q > 1 or not kernel]
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


def _plan_decode(meta: AttentionMetadata, seqs: list[int], device) -> _DecodePlan:
    starts = [0]
    for n in meta.query_lens_list:
        starts.append(starts[-1] + n)
    s_lens = [meta.seq_lens_list[s] for s in seqs]
    pos = torch.arange(max(s_lens), device=device)
    slots = _context_slots(meta, seqs, pos)
    s_len_t = torch.tensor(s_lens, device=device)
    if min(s_lens) < len(pos):
        # The kernel reads only positions 0..lens[r] - 1; the rest point at the sequence's own
        # position 0, never at a slot another request may be writing.
        slots = torch.where(pos[None, :] < s_len_t[:, None], slots, slots[:, :1])
    tok = [starts[s] for s in seqs]
    contiguous = tok == list(range(len(starts) - 1)) and starts[-1] == len(seqs)
    return _DecodePlan(slots.contiguous(), s_len_t.to(torch.int64), torch.tensor(tok, device=device), contiguous)
