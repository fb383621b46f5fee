"""Triton paged attention: the fast backend, with the same contract as ``reference.py``.

Two kernels. ``write_kv`` scatters the new tokens' K/V into their cache slots. ``paged_attention``
computes causal attention for a ragged batch (prefill chunks, decode tokens and verification runs
mixed, see ``metadata.py``) reading K/V through each sequence's block table, the way vLLM's
PagedAttention does (Kwon et al., SOSP 2023, §4.1): the context is never copied into one
contiguous tensor.

Tiling: one program per (sequence, query tile, kv head)::

    grid = (num_seqs, cdiv(max_query_len, BLOCK_Q), num_kv_heads)

    rows of the program's Q tile (BLOCK_M = BLOCK_Q * G rows, padded to a power of two)
    row r  ->  query token q_tile * BLOCK_Q + r // G,  query head kv_head * G + r % G

With grouped-query attention (G = num_heads / num_kv_heads query heads share one kv head) the G
heads of a token are stacked as extra rows, so every K/V tile loaded from the cache is used by all
of them (the layout of vLLM's unified Triton attention kernel). A decode token alone still fills
G rows of a matrix multiply.

The program walks the keys 0 .. last position its tile can see, BLOCK_N positions at a time.
Key position p lives in physical block ``block_tables[seq, p // block_size]`` at offset
``p % block_size``; consecutive positions of a tile may sit in different, scattered blocks.

Online softmax (FlashAttention, Dao et al. 2022, Alg. 1; Milakov & Gimelshein 2018). Scores of
one row arrive tile by tile, S_j = scale * q K_j^T. Keep a running max m, a running sum l of
exp(s - m) and an unnormalised output acc::

    m_new = max(m, rowmax(S_j))
    alpha = exp(m - m_new)                     # rescales everything summed so far
    P_j   = exp(S_j - m_new)
    l     = alpha * l + rowsum(P_j)
    acc   = alpha * acc + P_j V_j
    out   = acc / l                            # after the last tile

which equals softmax(S) V (in exact arithmetic) without ever holding a whole row of scores.
Masked scores (future positions, past the context) are -inf, so they contribute exp(-inf) = 0.
Every row can see key position 0, which sits in the first tile, so m is finite from the first
tile on and no 0/0 appears. m, l and acc are fp32 whatever the input dtype; the matrix
multiplies take fp16/bf16 inputs as they are and accumulate in fp32 (fp32 inputs use IEEE fp32,
not TF32).

No split over the context (FlashDecoding): a single long decode runs on num_kv_heads programs.
That keeps the kernel short; it is the next optimisation, not a correctness matter.

With ``TRITON_INTERPRET=1`` set before triton is imported, the same kernels run on CPU tensors under
Triton's interpreter (slow, numpy underneath): that is how the tests check them without a GPU.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from labkit.attention.metadata import AttentionMetadata

try:
    import triton
    import triton.language as tl
    TRITON_AVAILABLE = True
except ImportError:  # CPU-only installs: the reference backend still works
    triton = None
    tl = None
    TRITON_AVAILABLE = False


def _jit(fn):
    """``triton.jit`` when Triton is installed; otherwise keep the plain function (never launched)."""
    return triton.jit(fn) if TRITON_AVAILABLE else fn


# ----------------------------------------------------------------------------- write_kv

@_jit
def _write_kv_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_key_tok, stride_key_head, stride_value_tok, stride_value_head,
    stride_kc_block, stride_kc_slot, stride_kc_head,
    stride_vc_block, stride_vc_slot, stride_vc_head,
    block_size, num_kv_heads, head_dim,
    HEADS_PADDED: tl.constexpr, HEAD_DIM_PADDED: tl.constexpr,
):
    """One program per new token: copy its [num_kv_heads, head_dim] K and V into its slot."""
    tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:  # vLLM's convention for padding tokens: nothing to store
        return
    block, offset = slot // block_size, slot % block_size
    h = tl.arange(0, HEADS_PADDED)[:, None]                      # [HEADS_PADDED, 1]
    d = tl.arange(0, HEAD_DIM_PADDED)[None, :]                   # [1, HEAD_DIM_PADDED]
    mask = (h < num_kv_heads) & (d < head_dim)

    k = tl.load(key_ptr + tok * stride_key_tok + h * stride_key_head + d, mask=mask)
    v = tl.load(value_ptr + tok * stride_value_tok + h * stride_value_head + d, mask=mask)
    kc = key_cache_ptr + block * stride_kc_block + offset * stride_kc_slot + h * stride_kc_head + d
    vc = value_cache_ptr + block * stride_vc_block + offset * stride_vc_slot + h * stride_vc_head + d
    tl.store(kc, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(vc, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
             value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store new K/V: flat token i goes to slot ``slot_mapping[i]`` of the cache.

    key, value: [num_tokens, num_kv_heads, head_dim]; caches: [num_blocks, block_size, kv_heads, head_dim].
    A negative slot (vLLM's padding marker) is skipped.
    """
    _require_triton()
    _require_device(key.device)
    key, value = _unit_last_stride(key), _unit_last_stride(value)
    _require_unit_last_stride(key_cache=key_cache, value_cache=value_cache)
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    _, block_size, num_kv_heads, head_dim = key_cache.shape
    _write_kv_kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_size, num_kv_heads, head_dim,
        HEADS_PADDED=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM_PADDED=triton.next_power_of_2(head_dim),
    )


# ----------------------------------------------------------------------------- attention

@_jit
def _paged_attention_kernel(
    out_ptr, query_ptr, key_cache_ptr, value_cache_ptr,
    block_tables_ptr, seq_lens_ptr, query_start_loc_ptr,
    scale,
    stride_q_tok, stride_q_head, stride_o_tok, stride_o_head,
    stride_kc_block, stride_kc_slot, stride_kc_head,
    stride_vc_block, stride_vc_slot, stride_vc_head,
    stride_bt_seq,
    block_size, head_dim,
    NUM_QUERIES_PER_KV: tl.constexpr,   # G, query heads per kv head
    BLOCK_Q: tl.constexpr,              # query tokens per program
    BLOCK_M: tl.constexpr,              # rows of the Q tile, >= BLOCK_Q * G, a power of two
    BLOCK_N: tl.constexpr,              # key positions per inner-loop step
    HEAD_DIM_PADDED: tl.constexpr,
    DOT_DTYPE: tl.constexpr,            # operand dtype of both matmuls (see _dot_dtype)
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq)
    query_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if q_tile * BLOCK_Q >= query_len:  # this sequence has fewer query tiles than the longest
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - query_len  # tokens already cached before this step's queries

    # Rows of the Q tile: (query token, query head) pairs sharing this kv head.
    row = tl.arange(0, BLOCK_M)
    q_idx = q_tile * BLOCK_Q + row // NUM_QUERIES_PER_KV          # [BLOCK_M] token within sequence
    head = kv_head * NUM_QUERIES_PER_KV + row % NUM_QUERIES_PER_KV  # [BLOCK_M] query head
    row_valid = (row < BLOCK_Q * NUM_QUERIES_PER_KV) & (q_idx < query_len)
    q_pos = context_len + q_idx                                    # [BLOCK_M] absolute position
    d = tl.arange(0, HEAD_DIM_PADDED)
    d_valid = d < head_dim

    q_offs = (q_start + q_idx)[:, None] * stride_q_tok + head[:, None] * stride_q_head + d[None, :]
    q = tl.load(query_ptr + q_offs, mask=row_valid[:, None] & d_valid[None, :], other=0.0)
    q = q.to(DOT_DTYPE)                                            # [BLOCK_M, HEAD_DIM_PADDED]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)     # running row max
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)                   # running sum of exp
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], dtype=tl.float32)  # running unnormalised output

    # Causal: the tile's last query sees positions up to context_len + its index; nothing beyond.
    last_q = tl.minimum((q_tile + 1) * BLOCK_Q, query_len) - 1
    kv_end = context_len + last_q + 1
    for start in range(0, kv_end, BLOCK_N):
        k_pos = start + tl.arange(0, BLOCK_N)                      # [BLOCK_N]
        k_valid = k_pos < kv_end
        # Paging: position -> physical block through this sequence's block table.
        physical = tl.load(block_tables_ptr + seq * stride_bt_seq + k_pos // block_size,
                           mask=k_valid, other=0).to(tl.int64)
        in_block = k_pos % block_size
        k_offs = physical * stride_kc_block + in_block * stride_kc_slot + kv_head * stride_kc_head
        v_offs = physical * stride_vc_block + in_block * stride_vc_slot + kv_head * stride_vc_head
        kv_mask = k_valid[:, None] & d_valid[None, :]
        k = tl.load(key_cache_ptr + k_offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(value_cache_ptr + v_offs[:, None] + d[None, :], mask=kv_mask, other=0.0)
        k = k.to(DOT_DTYPE)                                        # [BLOCK_N, HEAD_DIM_PADDED]
        v = v.to(DOT_DTYPE)

        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale   # [BLOCK_M, BLOCK_N] fp32
        visible = (k_pos[None, :] <= q_pos[:, None]) & k_valid[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(m_i, l_i, acc, s, v, query_ptr.dtype.element_ty,
                                             DOT_PRECISION)

    out = acc / l_i[:, None]
    o_offs = (q_start + q_idx)[:, None] * stride_o_tok + head[:, None] * stride_o_head + d[None, :]
    tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None] & d_valid[None, :])


@_jit
def _online_softmax_step(m_i, l_i, acc, s, v, P_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Fold one tile of scores into the running (max, sum, output); the recurrence in the docstring.

    m_i, l_i: [BLOCK_M] fp32; acc: [BLOCK_M, HEAD_DIM_PADDED] fp32; s: [BLOCK_M, BLOCK_N] fp32 with
    -inf where masked; v: [BLOCK_N, HEAD_DIM_PADDED]. Probabilities are rounded to the input dtype
    (P_DTYPE) before the P @ V matmul, as FlashAttention kernels do.
    """
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_new = l_i * alpha + tl.sum(p, axis=1)
    p = p.to(P_DTYPE).to(v.dtype)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
    return m_new, l_new, acc


def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query: [num_tokens, num_heads, head_dim] -> output of the same shape."""
    _require_triton()
    _require_device(query.device)
    query = _unit_last_stride(query)
    _require_unit_last_stride(key_cache=key_cache, value_cache=value_cache)
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if num_tokens == 0 or meta.num_seqs == 0:
        return out
    dot_dtype = _dot_dtype(query.dtype)
    tiles = _choose_tiles(num_heads // num_kv_heads, meta.max_query_len)
    grid = (meta.num_seqs, triton.cdiv(meta.max_query_len, tiles.block_q), num_kv_heads)
    _paged_attention_kernel[grid](
        out, query, key_cache, value_cache,
        meta.block_tables, meta.seq_lens, meta.query_start_loc,
        scale,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        meta.block_tables.stride(0),
        meta.block_size, head_dim,
        NUM_QUERIES_PER_KV=num_heads // num_kv_heads,
        BLOCK_Q=tiles.block_q, BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n,
        HEAD_DIM_PADDED=triton.next_power_of_2(head_dim),
        DOT_DTYPE=dot_dtype,
        DOT_PRECISION="ieee" if dot_dtype == tl.float32 else None,  # fp32: no TF32 rounding
    )
    return out


# ----------------------------------------------------------------------------- host helpers

class _Tiles(NamedTuple):
    """Tile sizes for one launch (see the module docstring for what each one tiles)."""
    block_q: int
    block_m: int
    block_n: int


def _choose_tiles(num_queries_per_kv: int, max_query_len: int) -> _Tiles:
    """Decode-only batches get the smallest Q tile (G rows, at least 16 for ``tl.dot``); batches
    with longer queries get 64 rows, i.e. 64 // G tokens per program."""
    group = triton.next_power_of_2(num_queries_per_kv)
    rows_wanted = num_queries_per_kv * max_query_len
    block_m = max(16, min(triton.next_power_of_2(rows_wanted), max(64, group)))
    return _Tiles(block_q=block_m // num_queries_per_kv, block_m=block_m, block_n=64)


_TL_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _dot_dtype(dtype: torch.dtype):
    """The matmul operand dtype: the input dtype, except bf16 under the interpreter.

    Triton's interpreter keeps bf16 as raw uint16 bits and ``tl.dot`` multiplies those bits
    (triton-lang/triton#11584; its docs: no bf16 arithmetic, convert to fp32). Products of two bf16
    numbers are exact in fp32, so fp32 operands give the same sums as a bf16 MMA accumulating in
    fp32, up to summation order.
    """
    if dtype not in _TL_DTYPES:
        raise ValueError(f"query dtype must be float32, float16 or bfloat16, got {dtype}")
    if dtype == torch.bfloat16 and _runs_interpreted():
        return tl.float32
    return getattr(tl, _TL_DTYPES[dtype])


def _require_device(device: torch.device) -> None:
    """GPU tensors run the compiled kernels; CPU tensors need Triton's interpreter.

    Triton decides compiled vs interpreted once per ``@triton.jit`` function, when it is defined,
    from ``TRITON_INTERPRET`` (its own library functions such as ``tl.zeros`` included). So the
    variable must be set before triton is first imported in the process.
    """
    if device.type == "cpu" and not _runs_interpreted():
        raise RuntimeError("Triton kernels on CPU tensors need TRITON_INTERPRET=1 set before triton "
                           "is first imported; otherwise pass CUDA tensors")


def _runs_interpreted() -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    return all(isinstance(f, InterpretedFunction) for f in (_paged_attention_kernel, tl.zeros))


def _require_triton() -> None:
    if not TRITON_AVAILABLE:
        raise RuntimeError("labkit.attention.triton_paged needs the 'triton' package, which is not "
                           "installed; use labkit.attention.reference instead")


def _unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    """New K/V/Q may be column views of a transposed matmul output: copy only then."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _require_unit_last_stride(**tensors: torch.Tensor) -> None:
    for name, x in tensors.items():
        if x.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last (head_dim) dimension")
