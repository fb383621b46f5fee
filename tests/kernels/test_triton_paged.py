"""The Triton paged-attention backend computes what the reference backend computes.

Without a GPU the kernels run under Triton's interpreter on CPU tensors. The interpreter is chosen
when triton is first imported, so ``TRITON_INTERPRET=1`` is set below before that import (and, for
whole-suite runs where something else may import triton first, in ``tests/conftest.py``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import sys

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason="triton is not installed")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from labkit.attention import reference, triton_paged  # noqa: E402
from labkit.attention.metadata import AttentionMetadata  # noqa: E402

if DEVICE == "cpu" and not triton_paged._runs_interpreted():
    pytest.fail("triton was imported before TRITON_INTERPRET=1 was set, so its kernels cannot run on "
                "CPU tensors; set the variable in tests/conftest.py", pytrace=False)

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}  # atol = rtol


# ----------------------------------------------------------------------------- batch builders

def make_batch(rng: random.Random, contexts: list[tuple[int, int]], block_size: int,
               num_kv_heads: int, group: int, head_dim: int, dtype=torch.float32, spare_blocks: int = 3):
    """A ragged batch: sequence s has ``contexts[s] = (cached_len, query_len)``.

    Physical blocks are handed out in a random order (so logically adjacent blocks are scattered)
    and a few spare blocks hold values that belong to no sequence. Returns query, caches, meta.
    """
    query_lens = [q for _, q in contexts]
    seq_lens = [c + q for c, q in contexts]
    needed = [math.ceil(s / block_size) for s in seq_lens]
    physical = list(range(sum(needed) + spare_blocks))
    rng.shuffle(physical)
    block_tables, slot_mapping = [], []
    for seq_len, query_len, n in zip(seq_lens, query_lens, needed):
        table, physical = physical[:n], physical[n:]
        block_tables.append(table)
        slot_mapping += [table[p // block_size] * block_size + p % block_size
                         for p in range(seq_len - query_len, seq_len)]
    meta = AttentionMetadata.build(query_lens, seq_lens, block_tables, slot_mapping, block_size, DEVICE)
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    cache_shape = (sum(needed) + spare_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(cache_shape, generator=gen).to(DEVICE, dtype)
    value_cache = torch.randn(cache_shape, generator=gen).to(DEVICE, dtype)
    query = torch.randn(sum(query_lens), num_kv_heads * group, head_dim, generator=gen).to(DEVICE, dtype)
    return query, key_cache, value_cache, meta


def mixed_contexts(rng: random.Random, block_size: int) -> list[tuple[int, int]]:
    """(cached_len, query_len) for: a first prompt token, a decode, a prefill chunk, a verification."""
    def off_block(n: int) -> int:  # a length that is not a multiple of block_size
        return n if n % block_size else n + 1
    return [
        (0, 1),                                                  # prompt of one token
        (off_block(rng.randint(block_size + 1, 3 * block_size)) - 1, 1),  # decode, last block partial
        (rng.randint(0, 2 * block_size), off_block(rng.randint(2, 2 * block_size))),  # prefill chunk
        (rng.randint(1, 2 * block_size), 4),                     # verify k=3 draft tokens
    ]


def expected_output(query, key_cache, value_cache, meta, scale):
    """The reference backend on the same inputs in float64, so its own rounding does not count."""
    return reference.paged_attention(query.double(), key_cache.double(), value_cache.double(), meta, scale)


def assert_matches_reference(query, key_cache, value_cache, meta):
    scale = 1.0 / math.sqrt(query.shape[-1])
    out = triton_paged.paged_attention(query, key_cache, value_cache, meta, scale)
    assert out.shape == query.shape and out.dtype == query.dtype
    tol = TOLERANCE[query.dtype]
    torch.testing.assert_close(out.double(), expected_output(query, key_cache, value_cache, meta, scale),
                               atol=tol, rtol=tol)


# ----------------------------------------------------------------------------- paged_attention

@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_mixed_batch_matches_reference(block_size, head_dim, group):
    rng = random.Random(f"mixed-{block_size}-{head_dim}-{group}")
    batch = make_batch(rng, mixed_contexts(rng, block_size), block_size, num_kv_heads=2,
                       group=group, head_dim=head_dim)
    assert_matches_reference(*batch)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_accumulate_in_fp32(dtype):
    rng = random.Random(f"half-{dtype}")
    batch = make_batch(rng, mixed_contexts(rng, 16), 16, num_kv_heads=2, group=3, head_dim=64, dtype=dtype)
    assert_matches_reference(*batch)


def test_decode_only_batch_matches_reference():
    rng = random.Random("decode")
    contexts = [(rng.randint(0, 100), 1) for _ in range(5)]
    assert_matches_reference(*make_batch(rng, contexts, 16, num_kv_heads=2, group=8, head_dim=64))


def test_long_prefill_spans_several_query_and_key_tiles():
    rng = random.Random("long")
    contexts = [(75, 70), (0, 1)]  # 70 queries > one query tile, 145 keys > two key tiles
    assert_matches_reference(*make_batch(rng, contexts, 16, num_kv_heads=1, group=3, head_dim=64))


@settings(max_examples=8, deadline=None)
@given(block_size=st.sampled_from([8, 16, 32]), group=st.sampled_from([1, 3, 8]),
       contexts=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12)), min_size=1, max_size=4),
       seed=st.integers(0, 2**31 - 1))
def test_any_ragged_batch_matches_reference(block_size, group, contexts, seed):
    batch = make_batch(random.Random(seed), contexts, block_size, num_kv_heads=2, group=group, head_dim=64)
    assert_matches_reference(*batch)


def test_reads_only_slots_inside_each_context():
    """Slots past a sequence's length, and blocks outside its table, are never read: NaN there
    (what uninitialised memory may hold) leaves the output unchanged."""
    rng = random.Random("nan")
    query, key_cache, value_cache, meta = make_batch(rng, [(3, 2), (27, 1), (0, 1)], 8,
                                                     num_kv_heads=2, group=3, head_dim=64)
    scale = 0.125
    expected = expected_output(query, key_cache, value_cache, meta, scale)
    poison_unused_slots(key_cache, meta)
    poison_unused_slots(value_cache, meta)
    out = triton_paged.paged_attention(query, key_cache, value_cache, meta, scale)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def poison_unused_slots(cache: torch.Tensor, meta: AttentionMetadata) -> None:
    bs = meta.block_size
    used = torch.zeros(cache.shape[0] * bs, dtype=torch.bool)
    for s, seq_len in enumerate(meta.seq_lens_list):
        for p in range(seq_len):
            used[int(meta.block_tables[s, p // bs]) * bs + p % bs] = True
    cache.view(-1, *cache.shape[2:])[~used.to(cache.device)] = float("nan")


def test_query_may_be_a_view_into_a_fused_qkv_tensor():
    rng = random.Random("view")
    query, key_cache, value_cache, meta = make_batch(rng, mixed_contexts(rng, 16), 16,
                                                     num_kv_heads=2, group=3, head_dim=64)
    qkv = torch.cat([query, torch.zeros_like(query)], dim=1)  # [tokens, 2 * heads, head_dim]
    strided = qkv[:, : query.shape[1]]
    assert not strided.is_contiguous()
    assert_matches_reference(strided, key_cache, value_cache, meta)


def test_num_heads_must_be_a_multiple_of_num_kv_heads():
    rng = random.Random("heads")
    query, key_cache, value_cache, meta = make_batch(rng, [(2, 1)], 8, num_kv_heads=2, group=2, head_dim=64)
    with pytest.raises(ValueError, match="num_kv_heads"):
        triton_paged.paged_attention(query[:, :3], key_cache, value_cache, meta, 0.125)


# ----------------------------------------------------------------------------- write_kv

def random_slots(rng: random.Random, num_tokens: int, num_slots: int) -> torch.Tensor:
    return torch.tensor(rng.sample(range(num_slots), num_tokens), dtype=torch.int64, device=DEVICE)


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16])
def test_write_kv_matches_reference(cache_dtype):
    rng = random.Random(f"write-{cache_dtype}")
    gen = torch.Generator().manual_seed(0)
    key = torch.randn(13, 3, 64, generator=gen).to(DEVICE)
    value = torch.randn(13, 3, 64, generator=gen).to(DEVICE)
    slots = random_slots(rng, 13, 5 * 8)
    caches = [torch.randn(5, 8, 3, 64, generator=gen).to(DEVICE, cache_dtype) for _ in range(2)]
    expected = [c.clone() for c in caches]
    reference.write_kv(key, value, *expected, slots)
    triton_paged.write_kv(key, value, *caches, slots)
    assert torch.equal(caches[0], expected[0]) and torch.equal(caches[1], expected[1])


def test_write_kv_skips_negative_slots():
    key = torch.ones(2, 1, 64, device=DEVICE)
    key_cache = torch.zeros(2, 4, 1, 64, device=DEVICE)
    value_cache = torch.zeros_like(key_cache)
    triton_paged.write_kv(key, 2 * key, key_cache, value_cache, torch.tensor([5, -1], device=DEVICE))
    assert key_cache.view(-1, 64).sum(dim=1).tolist() == [0, 0, 0, 0, 0, 64, 0, 0]
    assert value_cache.view(-1, 64)[5].eq(2).all()


# ----------------------------------------------------------------------------- without triton

def test_calls_without_triton_raise_a_clear_error(monkeypatch):
    monkeypatch.setattr(triton_paged, "TRITON_AVAILABLE", False)
    with pytest.raises(RuntimeError, match="triton"):
        triton_paged.paged_attention(None, None, None, None, 1.0)


def test_module_imports_without_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` raise ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("triton_paged_without_triton", triton_paged.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TRITON_AVAILABLE is False
