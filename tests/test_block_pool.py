"""Block pool and paged KV manager invariants under random operation sequences (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from labkit.kv.block_pool import BlockPool
from labkit.kv.kv_cache_manager import KVCacheManager


def test_free_returns_blocks_to_the_tail_and_allocate_takes_the_head():
    pool = BlockPool(4)
    a = pool.allocate(2)
    pool.free([a[1], a[0]])
    assert list(pool.free_queue) == [2, 3, a[1], a[0]]


def test_double_free_is_refused():
    pool = BlockPool(2)
    (b,) = pool.allocate(1)
    pool.free([b])
    with pytest.raises(RuntimeError, match="double free"):
        pool.free([b])


def test_allocating_a_cached_free_block_evicts_its_hash():
    pool = BlockPool(1)
    (b,) = pool.allocate(1)
    pool.register(b, 1234)
    pool.free([b])
    assert pool.lookup(1234) == b          # still reusable while free
    pool.allocate(1)
    assert pool.lookup(1234) is None       # handed out again: evicted


def test_prefix_hit_stops_before_the_block_holding_the_last_token():
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    tokens = list(range(8))                 # exactly two full blocks
    assert kv.allocate_slots("a", 0, 8) is not None
    kv.cache_blocks("a", tokens, 8)
    hits, n = kv.get_computed_blocks("b", tokens)
    assert n == 4 and len(hits) == 1        # the last token is recomputed, so block 2 is not a hit


class PagedKVMachine(RuleBasedStateMachine):
    """Requests grow, share prefixes, fork, roll back drafts and finish in any order."""

    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4, 16]),
                prefix=st.booleans())
    def setup(self, num_blocks, block_size, prefix):
        self.kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=prefix)
        self.live: dict[str, list[int]] = {}       # request -> its token ids so far
        self.computed: dict[str, int] = {}
        self.next_id = 0

    def _new_id(self):
        self.next_id += 1
        return f"r{self.next_id}"

    @rule(length=st.integers(1, 40), vocab=st.integers(1, 3))
    def add(self, length, vocab):
        rid = self._new_id()
        tokens = [i % vocab for i in range(length)]           # small vocab: prefixes repeat
        hits, cached = self.kv.get_computed_blocks(rid, tokens)
        if self.kv.allocate_slots(rid, cached, length - cached, hits) is None:
            self.kv.block_hashes.pop(rid, None)
            return
        self.live[rid], self.computed[rid] = tokens, length
        self.kv.cache_blocks(rid, tokens, length)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 5))
    def append(self, data, n):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        if self.kv.allocate_slots(rid, self.computed[rid], n) is None:
            return
        self.kv.take_pending_copies()
        self.live[rid] += [7] * n
        self.computed[rid] += n
        self.kv.cache_blocks(rid, self.live[rid], self.computed[rid])

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.live)))
        child = self._new_id()
        self.kv.fork(parent, child)
        self.live[child], self.computed[child] = list(self.live[parent]), self.computed[parent]

    @precondition(lambda self: self.live)
    @rule(data=st.data(), drop=st.integers(0, 6))
    def rollback(self, data, drop):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        keep = max(0, self.computed[rid] - drop)
        self.kv.trim(rid, keep)
        self.computed[rid] = keep
        self.live[rid] = self.live[rid][:keep]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish_or_abort(self, data):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        self.kv.free(rid)
        del self.live[rid], self.computed[rid]

    @invariant()
    def consistent(self):
        if hasattr(self, "kv"):
            self.kv.check_invariants()
            for rid, n in self.computed.items():
                assert len(self.kv.block_table(rid)) >= self.kv.blocks_needed(n)

    def teardown(self):
        if hasattr(self, "kv"):
            for rid in list(self.live):
                self.kv.free(rid)
            self.kv.check_invariants()
            assert self.kv.pool.num_used_blocks() == 0, "blocks leaked"
            assert self.kv.usage() == 0.0


PagedKVMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPagedKV = PagedKVMachine.TestCase
