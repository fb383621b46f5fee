"""Block pool and paged KV manager: their rules, each from its definition, and their invariants under
random operation sequences (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from labkit.kv.block_pool import BlockPool
from labkit.kv.kv_cache_manager import KVCacheManager
from labkit.kv.snapshot import KVWaste


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


def test_rolling_back_a_request_with_no_table_releases_nothing():
    """The draft model's manager trims before its first draft of a request (it has no table yet)."""
    kv = KVCacheManager(num_blocks=4, block_size=2)
    assert kv.trim("new", 0) == [] and kv.trim("new", 5) == []
    assert kv.pool.num_free_blocks() == 4 and "new" not in kv.block_tables


def test_a_rollback_never_reaches_a_block_registered_in_the_prefix_cache():
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    table = kv.allocate_slots("a", 0, 5)
    kv.cache_blocks("a", [1, 2, 3, 4, 5], 5)             # blocks 0 and 1 full and registered, 2 not
    with pytest.raises(ValueError, match="registered in the prefix cache"):
        kv.trim("a", 3)                                  # into block 1: its hash would lie
    assert kv.trim("a", 4) == table[2:]                  # down to the registered blocks: allowed
    kv.check_invariants()


def test_blocks_filled_after_a_rollback_are_registered_in_the_prefix_cache():
    """Drafts rejected before the first block filled: that block, filled later, is still cached."""
    kv = KVCacheManager(num_blocks=4, block_size=4, enable_prefix_caching=True)
    prompt = [1, 2]
    table = kv.allocate_slots("a", 0, 2 + 3)             # the prompt and 3 drafts: two blocks
    assert kv.trim("a", 3) == table[1:]                  # 1 draft accepted (3 tokens), 2 rejected
    assert kv.allocate_slots("a", 3, 1) == []            # the 4th token fills block 0
    kv.cache_blocks("a", prompt + [3, 4], 4)
    hits, num_tokens = kv.get_computed_blocks("b", [1, 2, 3, 4, 9])
    assert hits == table[:1] and num_tokens == 4


def test_a_block_is_a_prefix_hit_only_after_the_same_tokens_before_it():
    """A block's hash chains on its parent's: the same tokens at another place in the prompt are other K/V."""
    kv = KVCacheManager(num_blocks=8, block_size=2, enable_prefix_caching=True)
    a, b = [1, 2], [3, 4]
    kv.allocate_slots("x", 0, 4)
    kv.cache_blocks("x", a + b, 4)
    assert kv.get_computed_blocks("y", b + a + [9]) == ([], 0)
    hits, n = kv.get_computed_blocks("z", a + b + [9])
    assert hits == kv.block_table("x") and n == 4


def test_a_block_filled_by_decoding_is_a_prefix_hit_for_the_next_request():
    """The lookup at admission hashes the prompt's full blocks only; the partly filled last block is
    hashed when decoding fills it, from its tokens then."""
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    prompt = [1, 2, 3, 4, 5, 6]
    assert kv.get_computed_blocks("a", prompt) == ([], 0)
    kv.allocate_slots("a", 0, 6)
    kv.cache_blocks("a", prompt, 6)
    kv.allocate_slots("a", 6, 2)                          # two decoded tokens fill block 1
    kv.cache_blocks("a", prompt + [7, 8], 8)
    hits, n = kv.get_computed_blocks("b", prompt + [7, 8, 9])
    assert hits == kv.block_table("a") and n == 8


def test_cache_blocks_registers_only_the_blocks_that_became_full_since_its_last_call():
    """Each full block is registered once, when it fills (vLLM's num_cached_blocks): a twin block already
    registered by another request keeps the hash, and a later call does not look back at it."""
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    prompt = [1, 2, 3]
    kv.allocate_slots("a", 0, 3)
    kv.allocate_slots("b", 0, 3)                          # admitted in the same step: no hit for b
    kv.cache_blocks("a", prompt, 3)
    kv.cache_blocks("b", prompt, 3)                       # b's block 0 is a's twin: not registered
    twin = kv.block_table("b")[0]
    assert kv.pool.blocks[twin].block_hash is None
    kv.free("a")
    kv.pool.allocate(kv.pool.num_free_blocks())           # a's blocks handed out again: the hash is gone
    kv.cache_blocks("b", prompt + [4], 4)                 # b's block 1 fills
    assert kv.pool.blocks[twin].block_hash is None        # block 0 did not fill now: not looked at again
    assert kv.pool.blocks[kv.block_table("b")[1]].block_hash is not None


def test_a_forked_child_registers_only_the_blocks_that_fill_after_the_fork():
    """The child shares its parent's blocks and their registration: what the parent left unregistered (a
    twin's hash) stays so, as for the parent itself."""
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    prompt = [1, 2, 3]
    kv.allocate_slots("a", 0, 3)
    kv.allocate_slots("p", 0, 3)
    kv.cache_blocks("a", prompt, 3)
    kv.cache_blocks("p", prompt, 3)                       # p's block 0 is a's twin: not registered
    twin = kv.block_table("p")[0]
    kv.free("a")
    kv.pool.free(kv.pool.allocate(2)[:1])                 # a's blocks handed out (the hash is gone), one back
    kv.fork("p", "c")
    assert kv.allocate_slots("c", 3, 1) is not None      # the child writes its shared block 1: a copy
    kv.cache_blocks("c", prompt + [5], 4)                 # and fills it
    assert kv.pool.blocks[twin].block_hash is None
    assert kv.pool.blocks[kv.block_table("c")[1]].block_hash is not None


def test_a_child_forked_before_any_block_filled_registers_its_own_first_block():
    """Forked with a partly filled first block, the child writes into it (a copy) and, once it is full,
    registers it: its tokens are a prefix a later request can reuse."""
    kv = KVCacheManager(num_blocks=4, block_size=4, enable_prefix_caching=True)
    prompt = [1, 2, 3]
    kv.allocate_slots("p", 0, 3)
    kv.cache_blocks("p", prompt, 3)                       # nothing full yet
    kv.fork("p", "c")
    assert kv.allocate_slots("c", 3, 1) is not None      # the child's first token: a copy of block 0
    kv.cache_blocks("c", prompt + [8], 4)
    hits, n = kv.get_computed_blocks("d", prompt + [8, 9])
    assert hits == kv.block_table("c")[:1] and n == 4


def test_a_block_holds_only_computed_slots_and_waste_counts_every_allocated_slot_without_kv():
    """Fill: a block's slots with a computed K/V entry, the most any sharer has (none for a block allocated
    ahead of the computed tokens, or held by a request with nothing computed yet, absent from the counts).
    Waste: 1 - filled slots / allocated slots, with or without sharing."""
    kv = KVCacheManager(num_blocks=8, block_size=4)
    kv.allocate_slots("a", 0, 12)                         # blocks 0, 1, 2: 5 tokens computed, 7 slots ahead
    kv.allocate_slots("b", 0, 3)                          # block 3: admitted, nothing computed yet
    computed = {"a": 5}
    assert kv.filled_per_block(computed) == [4, 1, 0, 0, 0, 0, 0, 0]
    assert kv.waste(computed) == KVWaste(waste=pytest.approx(1 - 5 / 16), internal=pytest.approx(1 - 5 / 16))
    kv.fork("a", "c")                                     # c shares a's three blocks: no new slot
    assert kv.pool.num_extra_refs == 3
    assert kv.filled_per_block({"a": 5, "c": 6}) == [4, 2, 0, 0, 0, 0, 0, 0]
    assert kv.waste({"a": 5, "c": 6}).waste == pytest.approx(1 - 6 / 16)
    assert KVCacheManager(num_blocks=2, block_size=4).waste({}).waste == 0.0      # nothing allocated
    kv = KVCacheManager(num_blocks=4, block_size=4)       # the least sharing there is: one extra reference
    kv.allocate_slots("a", 0, 3)                          # block 0: 3 tokens computed
    kv.fork("a", "b")
    assert kv.pool.num_extra_refs == 1
    assert kv.waste({"a": 3, "b": 3}).waste == pytest.approx(1 - 3 / 4)          # its 3 slots counted once


def test_the_invariant_checks_fail_on_each_kind_of_broken_state():
    """The checks the random operation sequences rely on must themselves catch what they claim to."""
    def broken(how):
        kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
        kv.allocate_slots("a", 0, 4)                      # blocks 0, 1
        kv.cache_blocks("a", [1, 2, 3, 4], 4)
        kv.fork("a", "b")                                 # both shared: ref_cnt 2
        kv.check_invariants()
        how(kv)
        return kv

    cases = {
        "a table holds a block its count does not know": lambda kv: kv.block_tables["a"].append(2),
        "negative ref count": lambda kv: setattr(kv.pool.blocks[3], "ref_cnt", -1),
        "misfiled: held but in the free queue": lambda kv: kv.pool.free_queue.__setitem__(0, None),
        "misfiled: free but not in the queue": lambda kv: kv.pool.free_queue.pop(3),
        "a cached hash on another block": lambda kv: kv.pool.cached.__setitem__(kv.pool.blocks[0].block_hash, 1),
        "extra refs miscounted": lambda kv: setattr(kv.pool, "num_extra_refs", 1),
    }
    for name, how in cases.items():
        kv = broken(how)
        with pytest.raises(AssertionError):
            kv.check_invariants()
            pytest.fail(f"not caught: {name}")


def test_prefix_hits_waiting_in_the_free_queue_stop_being_free_when_admitted():
    """Blocks a hit revives from the free queue are no longer free: admission fits only if the new blocks
    fit beside them, and a refusal changes nothing."""
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    prompt = [1, 2, 3, 4]
    table = kv.allocate_slots("a", 0, 4)
    kv.cache_blocks("a", prompt, 4)
    kv.free("a")                                          # 4 free blocks, 2 of them a's cached prefix
    longer = prompt + [5, 6, 7, 8, 9]                     # 9 tokens: 5 blocks, 2 of them hits
    hits, n = kv.get_computed_blocks("c", longer)
    assert (hits, n) == (table, 4)
    assert kv.allocate_slots("c", n, len(longer) - n, hits) is None      # 3 new + 2 revived > 4 free
    assert kv.pool.num_free_blocks() == 4 and "c" not in kv.block_tables
    assert [kv.pool.lookup(kv.pool.blocks[b].block_hash) for b in table] == table   # still cached
    exact = prompt + [5, 6, 7]                            # 7 tokens: 4 blocks, 2 of them hits
    hits, n = kv.get_computed_blocks("b", exact)
    new = kv.allocate_slots("b", n, len(exact) - n, hits)
    assert len(new) == 2 and kv.block_table("b") == table + new and kv.pool.num_free_blocks() == 0
    kv.check_invariants()


def test_a_write_into_a_shared_partly_filled_block_copies_it_first():
    """Copy-on-write: the writer gets a fresh block in that slot of its table (its old table, handed out
    before, stays as it was), the copy (src, dst) is queued for the runner, and the other holder keeps src."""
    kv = KVCacheManager(num_blocks=4, block_size=4)
    kv.allocate_slots("p", 0, 6)                          # blocks 0 (full) and 1 (2 of 4 slots)
    kv.fork("p", "c")
    before = kv.block_table("c")
    new = kv.allocate_slots("c", 6, 1)                    # c writes slot 2 of the shared block 1
    src = before[1]
    (dst,) = new
    assert kv.block_table("c") == [before[0], dst] and before == kv.block_table("p")
    assert kv.take_pending_copies() == [(src, dst)] and kv.take_pending_copies() == []
    assert kv.pool.blocks[src].ref_cnt == 1 and kv.pool.blocks[before[0]].ref_cnt == 2
    assert kv.allocate_slots("p", 6, 1) == []             # p holds block 1 alone now: no copy
    assert kv.take_pending_copies() == []
    kv.check_invariants()


def test_the_decode_shortcut_gives_the_table_only_when_the_token_has_a_slot_of_its_own():
    """``decode_table(rid, p)``: the table when ``allocate_slots(rid, p, 1)`` would allocate nothing (room in
    the last block and no block shared anywhere), else None."""
    kv = KVCacheManager(num_blocks=4, block_size=4)
    kv.allocate_slots("a", 0, 3)
    assert kv.decode_table("a", 3) == kv.block_table("a")     # slot 3 of block 0
    assert kv.decode_table("a", 4) is None                    # needs block 1
    assert kv.decode_table("unknown", 0) is None
    kv.fork("a", "b")                                         # now something is shared
    assert kv.decode_table("a", 3) is None and kv.decode_table("b", 3) is None


def test_prefix_lookups_count_tokens_asked_and_found_only_with_prefix_caching():
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    kv.record_prefix_lookup(7, 4)
    kv.record_prefix_lookup(3, 0)
    assert (kv.prefix_queries, kv.prefix_hits) == (10, 4)
    off = KVCacheManager(num_blocks=4, block_size=2)
    off.record_prefix_lookup(7, 4)
    assert (off.prefix_queries, off.prefix_hits) == (0, 0)
    assert off.get_computed_blocks("x", [1, 2, 3, 4, 5]) == ([], 0)


def test_the_pool_refuses_more_blocks_than_it_has_free_and_counts_what_is_used():
    pool = BlockPool(3)
    assert pool.allocate(0) == [] and pool.num_used_blocks() == 0
    taken = pool.allocate(2)
    assert pool.num_used_blocks() == 2 and pool.num_free_blocks() == 1
    with pytest.raises(RuntimeError, match="asked for 2 blocks with 1 free"):
        pool.allocate(2)
    assert pool.num_free_blocks() == 1                    # nothing taken by the refusal
    pool.free(taken)
    assert pool.num_used_blocks() == 0
    with pytest.raises(ValueError, match="num_blocks must be >= 1, got 0"):
        BlockPool(0)


def test_a_freed_request_id_starts_afresh_when_it_is_admitted_again():
    """Freeing forgets everything of the id: its hashes (a later request may reuse the id with other
    tokens) and how many of its blocks were registered (a preempted request comes back with a new table)."""
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    kv.allocate_slots("a", 0, 4)
    kv.cache_blocks("a", [1, 2, 3, 4], 4)
    kv.free("a")
    assert kv.get_computed_blocks("a", [5, 6, 7, 8, 9]) == ([], 0)     # the id's old hashes are gone

    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    prompt = [1, 2, 3, 4, 5]
    assert kv.get_computed_blocks("a", prompt) == ([], 0)
    kv.allocate_slots("a", 0, 5)
    kv.cache_blocks("a", prompt, 4)                       # two blocks registered
    kv.free("a")                                          # preempted
    kv.pool.free(kv.pool.allocate(4))                     # its blocks handed out meanwhile: hashes evicted
    assert kv.get_computed_blocks("a", prompt) == ([], 0)
    kv.allocate_slots("a", 0, 5)                          # recomputed from scratch
    kv.cache_blocks("a", prompt, 4)
    hits, n = kv.get_computed_blocks("b", prompt)
    assert hits == kv.block_table("a")[:2] and n == 4     # registered again, from block 0


def test_a_block_handed_out_again_is_registered_under_its_new_content():
    """Its old hash is evicted when it is handed out; once the new holder fills it, the new tokens find it
    and the old ones do not."""
    kv = KVCacheManager(num_blocks=1, block_size=2, enable_prefix_caching=True)
    kv.allocate_slots("a", 0, 2)
    kv.cache_blocks("a", [1, 2], 2)
    kv.free("a")
    (block,) = kv.allocate_slots("b", 0, 2)               # the only block, evicted from the cache
    assert kv.get_computed_blocks("x", [1, 2, 9]) == ([], 0)
    kv.cache_blocks("b", [3, 4], 2)
    assert kv.get_computed_blocks("y", [3, 4, 9]) == ([block], 2)
    kv.free("b")
    assert kv.snapshot({}).cached == (True,)              # free, still carrying b's hash
    kv.allocate_slots("c", 0, 1)
    assert kv.snapshot({}).cached == (False,)


class PagedKVMachine(RuleBasedStateMachine):
    """Requests grow, share prefixes, fork, roll back drafts and finish in any order."""

    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4, 16]),
                prefix=st.booleans())
    def setup(self, num_blocks, block_size, prefix):
        self.kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=prefix)
        self.live: dict[str, list[int]] = {}       # request -> its token ids so far
        self.computed: dict[str, int] = {}
        self.accepted: dict[str, int] = {}         # tokens last given to cache_blocks (drafts come after)
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
        self.accepted[rid] = length

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 5), draft=st.booleans())
    def append(self, data, n, draft):
        """Accepted tokens are registered in the prefix cache; drafts wait for their verification."""
        rid = data.draw(st.sampled_from(sorted(self.live)))
        if self.kv.allocate_slots(rid, self.computed[rid], n) is None:
            return
        self.kv.take_pending_copies()
        self.live[rid] += [7] * n
        self.computed[rid] += n
        if not draft:
            self.kv.cache_blocks(rid, self.live[rid], self.computed[rid])
            self.accepted[rid] = self.computed[rid]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.live)))
        child = self._new_id()
        self.kv.fork(parent, child)
        self.live[child], self.computed[child] = list(self.live[parent]), self.computed[parent]
        self.accepted[child] = self.accepted[parent]

    @precondition(lambda self: self.live)
    @rule(data=st.data(), drop=st.integers(0, 6))
    def rollback(self, data, drop):
        """Rejected drafts: back to no earlier than the last accepted token."""
        rid = data.draw(st.sampled_from(sorted(self.live)))
        keep = max(self.accepted[rid], self.computed[rid] - drop)
        self.kv.trim(rid, keep)
        self.computed[rid] = keep
        self.live[rid] = self.live[rid][:keep]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def finish_or_abort(self, data):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        self.kv.free(rid)
        del self.live[rid], self.computed[rid], self.accepted[rid]

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
