"""Paged attention equals dense causal attention on fresh random inputs: the readable reference
(the specification) and the fast CPU path, which is also checked against the reference."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.attention import cpu_batched, reference
from labkit.attention.backend import AttentionBackend, get_backend
from labkit.attention.metadata import AttentionMetadata
from labkit.attention.reference import write_kv

BACKENDS = {"reference": reference, "cpu_batched": cpu_batched}


def dense_causal(q, k, v, num_computed: int):
    """q: [ql, H, D], k/v: [L, Hkv, D]; query j sits at position num_computed + j."""
    heads, kv_heads = q.shape[1], k.shape[1]
    k = k.repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
    v = v.repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
    scores = q.transpose(0, 1) @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    key_pos = torch.arange(k.shape[1])
    q_pos = num_computed + torch.arange(q.shape[0])
    scores = scores.masked_fill(key_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1)


def run_case(seqs, heads, kv_heads, head_dim, block_size, seed, backend=cpu_batched):
    """seqs: list of (context length, query length). Blocks are scattered at random in the pool."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-L // block_size) for L, _ in seqs) + 3
    key_cache = torch.full((num_blocks, block_size, kv_heads, head_dim), float("nan"))
    value_cache = key_cache.clone()
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables, slots, keys, values, queries = [], [], [], [], []
    for L, ql in seqs:
        table = [free.pop() for _ in range(-(-L // block_size))]
        k, v = torch.randn(L, kv_heads, head_dim, generator=gen), torch.randn(L, kv_heads, head_dim, generator=gen)
        ctx = torch.tensor([table[p // block_size] * block_size + p % block_size for p in range(L)])
        write_kv(k, v, key_cache, value_cache, ctx)      # cached context and new tokens alike
        tables.append(table)
        slots += ctx[L - ql:].tolist()
        keys.append(k), values.append(v), queries.append(torch.randn(ql, heads, head_dim, generator=gen))
    meta = AttentionMetadata.build([ql for _, ql in seqs], [L for L, _ in seqs], tables, slots, block_size)
    out = backend.paged_attention(torch.cat(queries), key_cache, value_cache, meta, head_dim ** -0.5)
    expected = torch.cat([dense_causal(q, k, v, L - ql) for q, k, v, (L, ql) in zip(queries, keys, values, seqs)])
    return out, expected


@pytest.mark.parametrize("name", BACKENDS)
def test_mixed_prefill_decode_and_verify_in_one_call(name):
    seqs = [(9, 9), (12, 1), (10, 4), (33, 7), (1, 1)]   # prefill, decode, verify, chunk, 1-token prompt
    out, expected = run_case(seqs, heads=6, kv_heads=2, head_dim=16, block_size=4, seed=0, backend=BACKENDS[name])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_verified_row_equals_plain_decoding_at_its_position_to_the_bit(dtype, layout):
    # Speculative decoding reproduces plain greedy output only if verifying k drafts computes each row
    # exactly as a decode step would (in bf16 a last-bit difference flips greedy near-ties).
    gen = torch.Generator().manual_seed(1)
    heads, kv_heads, head_dim, bs, context, rows = 9, 3, 64, 16, 50, 5
    key_cache = torch.randn(8, bs, kv_heads, head_dim, generator=gen).to(dtype)
    value_cache = torch.randn(8, bs, kv_heads, head_dim, generator=gen).to(dtype)
    table = [3, 1, 5, 0]
    q = torch.randn(rows, heads, head_dim, generator=gen).to(dtype)
    if layout == "strided":     # what the model hands over: a view of a transposed matmul output
        q = q.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    verify = AttentionMetadata.build([rows], [context], [table], list(range(rows)), bs)
    together = cpu_batched.paged_attention(q, key_cache, value_cache, verify, head_dim ** -0.5)
    for j in range(rows):
        decode = AttentionMetadata.build([1], [context - rows + 1 + j], [table], [0], bs)
        alone = cpu_batched.paged_attention(q[j:j + 1], key_cache, value_cache, decode, head_dim ** -0.5)
        assert torch.equal(alone[0], together[j]), j


@settings(max_examples=40, deadline=None)
@given(
    seqs=st.lists(st.integers(1, 70).flatmap(lambda L: st.tuples(st.just(L), st.integers(1, L))),
                  min_size=1, max_size=6),
    gqa=st.sampled_from([(4, 4), (6, 2), (8, 1), (9, 3)]),
    head_dim=st.sampled_from([8, 16, 64]),
    block_size=st.sampled_from([1, 3, 8, 16]),
    seed=st.integers(0, 2**16),
)
def test_paged_equals_dense_on_random_ragged_batches(seqs, gqa, head_dim, block_size, seed):
    for backend in BACKENDS.values():
        out, expected = run_case(seqs, gqa[0], gqa[1], head_dim, block_size, seed, backend)
        assert not out.isnan().any(), "garbage outside a sequence's context leaked into its output"
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    seqs=st.lists(st.integers(1, 70).flatmap(lambda L: st.tuples(st.just(L), st.integers(1, L))),
                  min_size=1, max_size=6),
    block_size=st.sampled_from([1, 4, 16]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 2**16),
)
def test_the_fast_cpu_path_equals_the_reference(seqs, block_size, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-L // block_size) for L, _ in seqs) + 2
    caches = [torch.randn(num_blocks, block_size, 2, 16, generator=gen).to(dtype) for _ in range(2)]
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [[free.pop() for _ in range(-(-L // block_size))] for L, _ in seqs]
    meta = AttentionMetadata.build([q for _, q in seqs], [L for L, _ in seqs], tables,
                                   [0] * sum(q for _, q in seqs), block_size)
    query = torch.randn(sum(q for _, q in seqs), 6, 16, generator=gen).to(dtype)
    fast = cpu_batched.paged_attention(query, *caches, meta, 0.25)
    spec = reference.paged_attention(query, *caches, meta, 0.25)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(fast, spec, rtol=tol, atol=tol)


def test_every_backend_meets_the_protocol_and_cpu_defaults_to_the_fast_path():
    assert all(isinstance(b, AttentionBackend) for b in BACKENDS.values())
    assert get_backend("auto", torch.device("cpu")) is cpu_batched
    assert get_backend("reference", torch.device("cpu")) is reference


def test_the_reference_fits_on_one_screen():
    import inspect
    assert len(inspect.getsource(reference.paged_attention).splitlines()) <= 25


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("query_len", [1, 3])
def test_a_sequence_on_consecutive_blocks_is_read_in_place_with_the_same_bits(dtype, query_len):
    # The same context stored on consecutive blocks (read as a view) and scattered (gathered):
    # SDPA must see the same values with the same strides, so the outputs are equal to the bit.
    gen = torch.Generator().manual_seed(query_len)
    block_size, L, num_blocks = 4, 13, 8
    k, v = torch.randn(L, 2, 16, generator=gen).to(dtype), torch.randn(L, 2, 16, generator=gen).to(dtype)
    query = torch.randn(query_len, 6, 16, generator=gen).to(dtype)
    outs = {}
    for name, table in {"consecutive": [3, 4, 5, 6], "scattered": [6, 0, 5, 2]}.items():
        caches = [torch.full((num_blocks, block_size, 2, 16), float("nan"), dtype=dtype) for _ in range(2)]
        ctx = torch.tensor([table[p // block_size] * block_size + p % block_size for p in range(L)])
        write_kv(k, v, *caches, ctx)
        meta = AttentionMetadata.build([query_len], [L], [table], ctx[L - query_len:].tolist(), block_size)
        outs[name] = cpu_batched.paged_attention(query, *caches, meta, 0.25)
        (plan,) = cpu_batched._plan(meta, query_len, query.device, kernel=False)   # SDPA reads the view
        assert (plan.first_slot is not None) == (name == "consecutive")
    assert torch.equal(outs["consecutive"], outs["scattered"])


def test_layer_cache_views_are_built_once_and_follow_the_pool_tensor():
    # The runner asks for the per-layer views every step; they are cached per layout, and rebuilt
    # only if the pool tensor itself is replaced.
    from labkit.kv.paged_kv import PagedKVCache

    pool = PagedKVCache(num_layers=3, num_blocks=4, block_size=8, num_kv_heads=2, head_dim=4,
                        dtype=torch.float32, device="cpu")
    first = pool.layer_caches(8)
    assert pool.layer_caches(8) is first and len(first) == 3
    first[1][0][2, 3] = 1.5                    # a view: writes reach the pool
    assert pool.tensor[1, 0, 2, 3].eq(1.5).all()
    slots = pool.layer_caches(1)               # another layout: its own views
    assert slots[0][0].shape == (32, 1, 2, 4)
    pool.tensor = torch.zeros_like(pool.tensor)
    assert pool.layer_caches(8) is not first and pool.layer_caches(8)[1][0].eq(0).all()


@settings(max_examples=30, deadline=None)
@given(
    seqs=st.lists(st.integers(1, 60).flatmap(lambda L: st.tuples(st.just(L), st.integers(1, L))),
                  min_size=2, max_size=6),
    cut=st.integers(1, 59),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    kernel=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_row_gets_the_same_bits_alone_in_any_batch_and_in_any_chunk(seqs, cut, dtype, kernel, seed):
    """Batch invariance: each query row of a ragged batch equals, to the bit, the same row
    computed with its sequence alone, and with that sequence's query cut into two chunks; with
    labkit's C kernel and with the SDPA path."""
    if kernel and not cpu_batched.native.available():
        kernel = False
    gen = torch.Generator().manual_seed(seed)
    block_size, heads, kv_heads, head_dim = 4, 6, 2, 16
    num_blocks = sum(-(-L // block_size) for L, _ in seqs) + 2
    caches = [torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen).to(dtype) for _ in range(2)]
    free = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [[free.pop() for _ in range(-(-L // block_size))] for L, _ in seqs]
    queries = [torch.randn(ql, heads, head_dim, generator=gen).to(dtype) for _, ql in seqs]

    def attend(parts):
        """parts: (sequence index, first query row, last query row) -> the rows' outputs, concatenated."""
        q_lens = [b - a for _, a, b in parts]
        s_lens = [seqs[i][0] - seqs[i][1] + b for i, _, b in parts]
        meta = AttentionMetadata.build(q_lens, s_lens, [tables[i] for i, _, _ in parts], [0] * sum(q_lens), block_size)
        query = torch.cat([queries[i][a:b] for i, a, b in parts])
        return cpu_batched.paged_attention(query, *caches, meta, 0.25)

    original = cpu_batched.uses_decode_kernel
    cpu_batched.uses_decode_kernel = lambda q, k: kernel and original(q, k)
    try:
        together = attend([(i, 0, ql) for i, (_, ql) in enumerate(seqs)]).split([ql for _, ql in seqs])
        for i, (_, ql) in enumerate(seqs):
            assert torch.equal(attend([(i, 0, ql)]), together[i]), f"sequence {i} alone"
            c = min(cut, ql - 1)
            if c:
                chunks = torch.cat([attend([(i, 0, c)]), attend([(i, c, ql)])])
                assert torch.equal(chunks, together[i]), f"sequence {i} in two chunks at {c}"
    finally:
        cpu_batched.uses_decode_kernel = original
