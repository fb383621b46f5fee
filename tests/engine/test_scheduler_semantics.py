"""Scheduler and KV rules against their definitions (vLLM v1), not against another labkit path.

    stop tokens      a sequence ends with the first sampled token in ``stop_token_ids`` (kept in the output,
                     finish reason "stop"), on every host path (list-built or persistent batch, sync or async)
    freeing order    a finished request's blocks go back to the free queue tail first: the queue hands out
                     its head (least recently freed) first, so the tail is evicted before the prefix, and a
                     later request with the same prefix still finds it cached (vLLM's ``free_blocks(reversed)``)
    preemption       a step that preempted admits no waiting request (vLLM v1 ``schedule``: waiting requests
                     are scheduled only ``if not preempted_reqs``), or the victim would be readmitted at once
"""

from __future__ import annotations

import pytest

from labkit import LLM, EngineConfig, SamplingParams
from labkit.kv.block_pool import BlockPool
from labkit.kv.kv_cache_manager import KVCacheManager
from labkit.kv.snapshot import KVLayout
from labkit.request import Request
from labkit.scheduler.continuous import ContinuousScheduler
from labkit.scheduler_output import SampledTokens

# ------------------------------------------------------------------ stop tokens, on every host path

HOST_PATHS = {"lists": {}, "persistent batch": {"persistent_batch": True}, "async": {"async_scheduling": True},
              "async, persistent batch": {"async_scheduling": True, "persistent_batch": True}}
PROMPTS = [[97 + i] * (3 + i) for i in range(6)]


def sim_tokens(params: list[SamplingParams], **config) -> list[tuple[list[int], str]]:
    """Each request's (output tokens, finish reason); the tokens the steps streamed must be the same."""
    engine = LLM(model="sim", config=EngineConfig(**config), progress=False).engine
    ids = [engine.add_request(p, sp) for p, sp in zip(PROMPTS, params)]
    streamed: dict[str, list[int]] = {rid: [] for rid in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed[out.request_id] += out.new_token_ids
    reqs = [engine.get_request(rid) for rid in ids]
    assert [streamed[r.request_id] for r in reqs] == [r.output_token_ids for r in reqs]
    return [(r.output_token_ids, r.status.value) for r in reqs]


@pytest.fixture(scope="module")
def unstopped() -> list[list[int]]:
    return [tokens for tokens, _ in sim_tokens([SamplingParams(max_tokens=24)] * len(PROMPTS))]


def cut_at_first_stop(tokens: list[int], stops: tuple[int, ...]) -> tuple[list[int], str]:
    """The definition: up to and including the first stop token; else the whole run, ended by length."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[:i + 1], "stop"
    return tokens, "length"


@pytest.mark.parametrize("path", list(HOST_PATHS))
def test_a_sequence_ends_at_its_first_stop_token_on_every_host_path(unstopped, path):
    stops = []
    for i, tokens in enumerate(unstopped):
        if i == 0:
            stops.append((tokens[0],))                    # on the prompt's last row (prefill)
        elif i == 5:
            stops.append(())                              # no stop: ends by length
        else:
            stops.append((tokens[3 * i], 255))            # in steady decode, with a token it never samples
    params = [SamplingParams(max_tokens=24, stop_token_ids=s, ignore_eos=True) for s in stops]
    expected = [cut_at_first_stop(tokens, s) for tokens, s in zip(unstopped, stops)]
    assert sum(reason == "stop" for _, reason in expected) == 5
    assert sim_tokens(params, **HOST_PATHS[path]) == expected


# ------------------------------------------------------------------ the order blocks are freed in


def test_the_free_queue_hands_out_the_least_recently_freed_block_first():
    pool = BlockPool(4)
    blocks = pool.allocate(4)
    pool.free([blocks[2], blocks[0]])
    pool.free([blocks[3]])
    assert pool.allocate(3) == [blocks[2], blocks[0], blocks[3]]


def test_a_finished_request_frees_its_tail_first_so_its_prefix_stays_cached_longest():
    kv = KVCacheManager(num_blocks=3, block_size=2, enable_prefix_caching=True)
    prompt = [11, 12, 13, 14, 15, 16]
    table = kv.allocate_slots("a", 0, 6)
    kv.cache_blocks("a", prompt, 6)                       # three full, computed blocks
    assert kv.free("a") == table
    assert kv.allocate_slots("b", 0, 2) == [table[2]]     # the pool's only free-queue choice: a's tail
    hits, num_tokens = kv.get_computed_blocks("a2", prompt + [17])
    assert hits == table[:2] and num_tokens == 4          # a's first two blocks still answer the prefix
    kv.check_invariants()


def test_a_rolled_back_request_frees_its_last_block_first():
    kv = KVCacheManager(num_blocks=4, block_size=2)
    table = kv.allocate_slots("a", 0, 8)
    assert kv.trim("a", 3) == table[2:]                   # 3 tokens keep 2 blocks
    assert kv.pool.allocate(2) == [table[3], table[2]]


# ------------------------------------------------------------------ no admission in a step that preempted


def run_step(sched: ContinuousScheduler, now: float, token: int = 7):
    out = sched.schedule(now)
    sampled = SampledTokens.of(out, {s.request_id: (token,) for s in out.scheduled if s.num_logits})
    sched.update_from_output(out, sampled, now)
    return out


def test_a_step_that_preempts_admits_no_waiting_request():
    """Pool of 4 blocks of 2 slots, a budget of 3 tokens a step. A (2-token prompt) and B (1) run until A
    needs a block at step 4: B is preempted, its 2 blocks freed, A takes one. The budget left (2) and the
    free block would fit a 2-token chunk of B: it must still wait for the next step."""
    config = EngineConfig(block_size=2, num_blocks=4, max_num_seqs=4, max_num_batched_tokens=3)
    sched = ContinuousScheduler(config, KVCacheManager(4, 2), max_model_len=64)
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    for rid, prompt in (("A", [1, 2]), ("B", [3])):
        sched.add(Request(rid, prompt, params, 0.0))
    for now in (1.0, 2.0, 3.0):
        out = run_step(sched, now)
        assert [s.request_id for s in out.scheduled] == ["A", "B"] and not out.preempted
    sched.add(Request("C", [4], params, 3.5))             # a one-token prompt that would fit as well
    b = sched.running[1]
    out = run_step(sched, 4.0)
    assert out.preempted == ["B"]
    assert [s.request_id for s in out.scheduled] == ["A"]
    assert [r.request_id for r in sched.waiting] == ["B", "C"]
    # What the step reports: B's 3 computed tokens (its prompt and two outputs) are lost and its whole table
    # (blocks 1 and 3) freed; it got no block this step. Each preemption is counted on the request and in all.
    assert out.lost_tokens == {"B": 3} and out.freed_blocks == {"B": [1, 3]} and "B" not in out.new_blocks
    assert (b.num_preemptions, sched.num_preemptions, b.num_computed_tokens) == (1, 1, 0)
    out = run_step(sched, 5.0)                            # the next step admits again, the victim first
    assert not out.preempted and [s.request_id for s in out.scheduled] == ["A", "B"]
    out = run_step(sched, 6.0)                            # A needs a block again: B, recomputed to 2 tokens, goes
    assert out.preempted == ["B"] and out.lost_tokens == {"B": 2}
    assert (b.num_preemptions, sched.num_preemptions) == (2, 2)


# ------------------------------------------------------------------ what the contiguous layout shows observers


def test_the_contiguous_snapshot_cuts_the_arena_into_blocks_and_counts_each_regions_computed_slots():
    """Arena of 40 slots in blocks of 8, exact reservations, first fit: x = [0, 16) and c = [16, 20); x leaves;
    a = [0, 6) and b = [20, 33) (b does not fit in [6, 16)). Block 1 is free; block 2 holds c and the start
    of b (its owner: the first holder by position, c). Regions are listed by start, not by age, and a
    region's computed slots (capped at its reservation; none for a request not listed) fill its blocks."""
    from labkit.kv.contiguous import ContiguousKVManager
    from labkit.kv.snapshot import Region

    kv = ContiguousKVManager(num_slots=40, block_size=8, reserve="needed", max_model_len=40)
    for rid, needed in (("x", 16), ("c", 4)):
        assert kv.allocate_slots(rid, 0, needed) is not None
    kv.free("x")
    for rid, needed in (("a", 6), ("b", 13)):
        assert kv.allocate_slots(rid, 0, needed) is not None
    snap = kv.snapshot({"a": 7, "b": 9})
    assert (snap.layout, snap.block_size, snap.num_blocks) == ("contiguous", 8, 5)
    assert snap.layout is KVLayout.CONTIGUOUS is kv.layout      # the enum member, not a string that reads alike
    assert snap.owner == ("a", None, "c", "b", "b")
    assert snap.filled == (6, 0, 4, 5, 0)                 # a: 6 of 6; b: slots 20-28 = 4 in block 2, 5 in block 3
    assert snap.ref_cnt == (1, 0, 1, 1, 1) and snap.cached == (False,) * 5
    assert snap.regions == (Region("a", 0, 6, 6, 6), Region("c", 16, 4, 0, 4), Region("b", 20, 13, 9, 13))
    # a's computed slots end just past a block boundary's start (slot 0 only), b's one short of one (slot 30),
    # and block 2 holds computed slots of two regions: c's 16-17 and b's 20-23.
    again = kv.snapshot({"a": 1, "c": 2, "b": 11})
    assert again.filled == (1, 0, 6, 7, 0)
    with pytest.raises(ValueError, match=r"^parallel sampling \(n > 1\) shares blocks and needs kv_cache='paged'$"):
        kv.fork("a", "a#1")


def test_a_contiguous_regions_block_table_ends_at_its_computed_tokens_after_a_rollback():
    """Rejected drafts are rolled back (``trim``): the region keeps its reservation (it never shrinks), but
    its table covers only the tokens still computed, so no row reads a rolled-back slot."""
    from labkit.kv.contiguous import ContiguousKVManager

    kv = ContiguousKVManager(num_slots=64, block_size=8, reserve="max_model_len", max_model_len=32)
    kv.allocate_slots("a", 0, 4)
    kv.allocate_slots("b", 0, 6)
    start = kv.regions["b"].start
    assert kv.allocate_slots("b", 6, 4) == [] and kv.block_table("b") == list(range(start, start + 10))
    assert kv.trim("b", 7) == [] and kv.block_table("b") == list(range(start, start + 7))
    assert kv.block_table("a") == list(range(kv.regions["a"].start, kv.regions["a"].start + 4))   # a untouched
    assert kv.usage() == 64 / 64


def test_a_contiguous_region_fills_to_its_last_slot_and_lists_every_block_it_touches():
    """A region may be filled exactly to its reservation (one slot more is refused); the blocks it returns
    are every block any of its slots lies in, so a region of 9 slots from slot 0 with 8-slot blocks is
    blocks 0 and 1, and one from slot 9 of 7 slots ends in block 1 (slots 9-15)."""
    from labkit.kv.contiguous import ContiguousKVManager

    kv = ContiguousKVManager(num_slots=32, block_size=8, reserve="needed", max_model_len=32)
    assert kv.allocate_slots("a", 0, 4, num_reserve_tokens=9) == [0, 1]
    assert kv.allocate_slots("a", 4, 5) == []                  # 9 of 9: the last slot is the region's own
    assert kv.allocate_slots("a", 9, 1) is None               # the 10th is not
    assert kv.allocate_slots("b", 0, 7) == [1]                # slots 9-15
    assert kv.free("a") == [0, 1] and kv.free("b") == [1]


def test_contiguous_holes_are_the_free_gaps_only_never_empty_ones():
    """``holes()`` lists free (start, length) gaps in address order: two regions side by side leave no gap
    between them, and a full arena has no hole at its end."""
    from labkit.kv.contiguous import ContiguousKVManager

    kv = ContiguousKVManager(num_slots=24, block_size=8, reserve="needed", max_model_len=24)
    assert kv.holes() == [(0, 24)]
    kv.allocate_slots("a", 0, 8)
    kv.allocate_slots("b", 0, 6)                               # b at 8, right after a
    assert kv.holes() == [(14, 10)]
    kv.allocate_slots("c", 0, 10)                              # the arena is full
    assert kv.holes() == []
    kv.free("b")
    assert kv.holes() == [(8, 6)]


# ------------------------------------------------------------------ what the paged layout shows observers


def test_the_paged_snapshot_names_each_blocks_first_holder_its_fill_sharers_and_cached_state():
    """Pool of 6 blocks of 4 slots, prefix caching on. A computes 9 tokens (3 blocks: 0, 1, 2) and registers
    its two full blocks; B's prompt shares A's first 8 tokens, so B's table starts with A's blocks 0 and 1
    (ref_cnt 2) and gets block 3. A block's owner is the first table holding it (A, listed first); its fill
    the most computed slots any sharer has in it; cached, whether its hash is registered."""
    kv = KVCacheManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    a = list(range(100, 109))
    assert kv.allocate_slots("A", 0, 9) == [0, 1, 2]
    kv.cache_blocks("A", a, 9)
    hit, hit_tokens = kv.get_computed_blocks("B", a[:8] + [7, 7])
    assert (hit, hit_tokens) == ([0, 1], 8)
    assert kv.allocate_slots("B", 8, 2, computed_blocks=hit) == [3]
    snap = kv.snapshot({"A": 9, "B": 9})
    assert (snap.layout, snap.block_size, snap.num_blocks) == ("paged", 4, 6)
    assert snap.layout is KVLayout.PAGED is kv.layout
    assert snap.owner == ("A", "A", "A", "B", None, None)
    assert snap.filled == (4, 4, 1, 1, 0, 0)
    assert snap.ref_cnt == (2, 2, 1, 1, 0, 0)
    assert snap.cached == (True, True, False, False, False, False)
    assert snap.block_tables == (("A", (0, 1, 2)), ("B", (0, 1, 3)))


def test_drop_forgets_a_finished_request_and_keeps_one_still_running():
    from labkit.request import RequestStatus

    sched = ContinuousScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), KVCacheManager(8, 4),
                                max_model_len=64)
    for rid, prompt in (("R", [1, 2, 3]), ("F", [1, 2])):
        sched.add(Request(rid, prompt, SamplingParams(max_tokens=4), 0.0))
    sched.requests["F"].status = RequestStatus.FINISHED_LENGTH
    sched.drop("F")
    sched.drop("R")                                       # still running: kept
    sched.drop("nobody")                                  # an unknown id is ignored
    assert set(sched.requests) == {"R"}


def test_the_contiguous_waste_splits_reserved_slots_by_hand_and_counts_external_fragmentation():
    """Arena of 48 slots, every request reserving max_model_len = 16: a (needs 10, computed 4) at [0, 16),
    b (needs 12, computed 12) at [16, 32), c at [32, 48) then freed. Reserved 32, filled 4 + 12 = 16: waste
    1/2; slots still to fill (a: 10 - 4 = 6) 6/32; never filled (a: 6, b: 4) 10/32. External fragmentation
    is a share of the arena, counted only when the free slots would fit the next request but no hole does."""
    from labkit.kv.contiguous import ContiguousKVManager

    kv = ContiguousKVManager(num_slots=48, block_size=8, reserve="max_model_len", max_model_len=16)
    assert kv.allocate_slots("a", 0, 4, num_reserve_tokens=10) is not None
    assert kv.allocate_slots("b", 0, 12, num_reserve_tokens=12) is not None
    w = kv.waste({"a": 4, "b": 12, "gone": 99})            # a request not holding a region counts nothing
    assert (w.waste, w.reserved_unused, w.internal, w.external) == (0.5, 6 / 32, 10 / 32, 0.0)
    assert kv.waste({"a": 40, "b": 12}).waste == 1 - (16 + 12) / 32    # computed beyond the reservation: capped
    assert kv.waste({}).waste == 1.0                                  # nothing computed yet: all reserved is waste
    assert kv.waste({}, next_waiting_need=16).external == 0.0        # [32, 48) fits the next request
    kv.free("b")
    assert kv.allocate_slots("d", 0, 1) is not None and kv.regions["d"].start == 16    # first fit
    assert kv.allocate_slots("e", 0, 1) is not None and kv.regions["e"].start == 32
    kv.free("d")                    # holes: [16, 32) of 16 slots; nothing else free
    assert kv.waste({}, next_waiting_need=16).external == 0.0        # a 16-slot hole fits 16
    empty = ContiguousKVManager(num_slots=48, block_size=8, reserve="needed", max_model_len=48)
    for rid, need in (("x", 10), ("y", 10), ("z", 10)):
        assert empty.allocate_slots(rid, 0, need) is not None       # x [0, 10), y [10, 20), z [20, 30)
    empty.free("x")
    empty.free("z")                 # holes [0, 10) and [20, 48): 38 free, largest 28
    assert empty.waste({"y": 10}, next_waiting_need=30).external == 38 / 48
    assert empty.waste({"y": 10}, next_waiting_need=38).external == 38 / 48   # exactly the free slots, in two holes
    assert empty.waste({"y": 10}, next_waiting_need=28).external == 0.0
    assert empty.waste({"y": 10}, next_waiting_need=40).external == 0.0   # would not fit even unfragmented
    assert empty.waste({"y": 10}).external == 0.0                        # nobody waiting: nothing to measure


def test_the_contiguous_invariant_check_fails_on_overlap_and_on_a_region_outside_the_arena():
    from labkit.kv.contiguous import ContiguousKVManager, _Region

    kv = ContiguousKVManager(num_slots=32, block_size=8, reserve="needed", max_model_len=32)
    kv.regions = {"a": _Region(0, 10, 10), "b": _Region(12, 8, 8)}
    kv.check_invariants()
    kv.regions["b"] = _Region(9, 8, 8)
    with pytest.raises(AssertionError, match=r"regions overlap: \[0, 10\) and \[9"):
        kv.check_invariants()
    for bad in (_Region(-1, 4, 4), _Region(30, 4, 4)):
        kv.regions = {"a": bad}
        with pytest.raises(AssertionError, match="^region outside the arena$"):
            kv.check_invariants()


def test_finishing_a_request_stamps_its_status_and_the_engines_clock_and_frees_its_blocks():
    from labkit.request import RequestStatus
    from labkit.scheduler_output import StepUpdate

    sched = ContinuousScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), KVCacheManager(8, 4),
                                max_model_len=64)
    sched.add(Request("A", [1, 2, 3, 4, 5], SamplingParams(max_tokens=4), 0.0))
    run_step(sched, 1.0)
    req = sched.requests["A"]
    assert sched.kv.block_tables["A"]
    sched.finish_request(req, RequestStatus.FINISHED_ABORTED, 2.5, StepUpdate())
    assert (req.status, req.finished_time) == (RequestStatus.FINISHED_ABORTED, 2.5)
    assert "A" not in sched.kv.block_tables and req not in sched.running


def test_a_static_batch_counts_each_requests_n_sequences_and_stamps_when_it_was_first_scheduled():
    """Static batching forms a batch of waiting requests while their sequences fit max_num_seqs: with 4
    slots, requests of n = 2 make batches of two (four sequences), not four; the step's clock is stamped on
    the requests it schedules for the first time (their queueing time ends there)."""
    from labkit.scheduler.static import StaticScheduler

    sched = StaticScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), KVCacheManager(32, 4),
                            max_model_len=64)
    for rid in "ABC":
        req = Request(rid, [1, 2, 3], SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=3), 0.0)
        req.child_ids = (f"{rid}#1",)                     # as the engine names the second sequence
        sched.add(req)
    assert [r.request_id for r in sched._next_batch()] == ["A", "B"]
    out = sched.schedule(1.5)
    assert sorted(s.request_id for s in out.scheduled) == ["A", "B"]
    assert [sched.requests[r].first_scheduled_time for r in "ABC"] == [1.5, 1.5, None]


# ------------------------------------------------------------------ the token budget, steady decode rows included


def test_a_step_never_schedules_more_tokens_than_its_budget():
    """``max_num_batched_tokens`` caps every step (vLLM v1's token budget), steady decode rows included: A,
    verifying two drafts, takes the whole budget of 3, so B (decoding) gets no row until the next step."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=3)
    sched = ContinuousScheduler(config, KVCacheManager(32, 4), max_model_len=64)
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    for rid, prompt in (("A", [1]), ("B", [2])):
        sched.add(Request(rid, prompt, params, 0.0))
    for now in (1.0, 2.0):                               # the prefill, then a decode step each
        assert [s.request_id for s in run_step(sched, now).scheduled] == ["A", "B"]
    sched.set_drafts({"A": [5, 6]})
    out = run_step(sched, 3.0)
    assert [(s.request_id, s.num_new_tokens) for s in out.scheduled] == [("A", 3)] and out.num_scheduled_tokens == 3
    assert [s.request_id for s in run_step(sched, 4.0).scheduled] == ["A", "B"]


def test_running_requests_take_the_budget_down_to_its_last_token_before_a_waiting_one_is_admitted():
    """Running rows come first, each while one token of budget is left: under a budget of 3, A, B and C decode
    one token each every step (the last row takes the last token), and D, arriving later, waits with no row
    until one of them has finished, however small its prompt."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=3, enable_chunked_prefill=True)
    sched = ContinuousScheduler(config, KVCacheManager(32, 4), max_model_len=64)
    for rid, prompt in (("A", [1]), ("B", [2]), ("C", [3])):
        sched.add(Request(rid, prompt, SamplingParams(max_tokens=3, ignore_eos=True), 0.0))
    assert [s.request_id for s in run_step(sched, 1.0).scheduled] == ["A", "B", "C"]   # their prefills
    sched.add(Request("D", [4], SamplingParams(max_tokens=3, ignore_eos=True), 1.5))
    for now in (2.0, 3.0):
        out = run_step(sched, now)
        assert [(s.request_id, s.num_new_tokens) for s in out.scheduled] == [("A", 1), ("B", 1), ("C", 1)]
        assert out.num_scheduled_tokens == 3 and [r.request_id for r in sched.waiting] == ["D"]
    assert [s.request_id for s in run_step(sched, 4.0).scheduled] == ["D"]           # A, B and C have finished


def test_without_drafts_no_appended_token_counts_as_an_accepted_draft():
    """``TokensAppended.num_accepted_draft`` counts accepted draft tokens: with no speculation, none ever."""
    from labkit import events as ev

    llm = LLM(model="sim", config=EngineConfig(max_num_seqs=4), progress=False)
    seen: list = []
    llm.engine.hooks.subscribe(seen.append, ev.TokensAppended)
    llm.generate(["abc", "defgh"], SamplingParams(max_tokens=6, ignore_eos=True))
    appended = [e for e in seen if isinstance(e, ev.TokensAppended)]
    assert len(appended) == 12 and all(e.num_accepted_draft == 0 for e in appended)


def test_no_row_computes_a_position_past_max_model_len_even_with_drafts():
    """A request one token short of ``max_model_len`` verifies only the drafts that fit: its row ends at
    ``max_model_len`` (positions 0 .. max_model_len - 1 exist), the other drafts are dropped."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64)
    sched = ContinuousScheduler(config, KVCacheManager(32, 4), max_model_len=8)
    sched.add(Request("A", [1, 2, 3, 4, 5], SamplingParams(max_tokens=20, ignore_eos=True), 0.0))
    for now in (1.0, 2.0):                               # the prefill, then one decode step: 7 tokens known
        run_step(sched, now)
    sched.set_drafts({"A": [5, 6, 7, 8]})
    (row,) = run_step(sched, 3.0).scheduled
    assert (row.start, row.end, row.num_spec_tokens) == (6, 8, 1)


# ------------------------------------------------------------------ the decision's shape, by hand


def test_a_decisions_columns_hold_one_entry_per_row_and_read_back_as_the_rows_scheduled():
    """Blocks of 4. After their prefill A (prompt 2), B (prompt 4) and C (prompt 5) each decode their token 7
    at positions 2, 4 and 5: A and C have a slot left in their last block (steady decode rows), B needs a
    new block (a row through the allocator) and comes between them; D, waiting, is admitted with its 3-token
    prompt. Every column has an entry per row in row order, a row reads back as its own values (slots by
    the definition ``table[p // 4] * 4 + p % 4``), and rows rebuilt from them give the same decision."""
    from labkit.scheduler_output import DECODE, PREFILL, VERIFY, ScheduledRequest, SchedulerOutput

    kv = KVCacheManager(num_blocks=16, block_size=4)
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=8, max_num_batched_tokens=64), kv, max_model_len=64)
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    for rid, prompt in (("A", [1, 2]), ("B", [3, 3, 3, 3]), ("C", [4, 4, 4, 4, 4])):
        sched.add(Request(rid, prompt, params, 0.0))
    run_step(sched, 1.0)
    sched.add(Request("D", [9, 9, 9], params, 1.5))
    out = run_step(sched, 2.0)
    tables = [kv.block_table(rid) for rid in "ABCD"]
    assert out.request_ids == ["A", "B", "C", "D"] and out.admitted == ["D"]
    assert out.starts == [2, 4, 5, 0] and out.num_tokens == [1, 1, 1, 3] and out.token_ids == [7, 7, 7, 9, 9, 9]
    assert out.num_logits == [1, 1, 1, 1] and out.kinds == [DECODE, DECODE, DECODE, PREFILL]
    assert out.block_tables == tables and out.num_spec == {} and out.num_scheduled_tokens == 6
    assert out.new_blocks == {"B": [tables[1][1]], "D": tables[3]}
    assert out.token_offsets == [0, 1, 2, 3, 6] and out.logits_request_ids == ["A", "B", "C", "D"]

    def slots(table, start, n):
        return [table[p // 4] * 4 + p % 4 for p in range(start, start + n)]

    rows = [ScheduledRequest("A", (7,), 2, 0, DECODE, tables[0], slots(tables[0], 2, 1), 1),
            ScheduledRequest("B", (7,), 4, 0, DECODE, tables[1], slots(tables[1], 4, 1), 1),
            ScheduledRequest("C", (7,), 5, 0, DECODE, tables[2], slots(tables[2], 5, 1), 1),
            ScheduledRequest("D", (9, 9, 9), 0, 0, PREFILL, tables[3], slots(tables[3], 0, 3), 1)]
    assert [out.row(i) for i in range(4)] == rows and out.scheduled == rows
    assert [out.slot_mapping(i) for i in range(4)] == [r.slot_mapping for r in rows]
    again = SchedulerOutput.from_rows(rows, block_size=4)
    assert (again.block_size, again.request_ids, again.starts, again.num_tokens, again.token_ids, again.block_tables,
            again.num_logits, again.kinds, again.num_spec, again.num_scheduled_tokens) == \
        (4, out.request_ids, out.starts, out.num_tokens, out.token_ids, out.block_tables, out.num_logits, out.kinds,
         {}, 6)
    verify = SchedulerOutput.from_rows([ScheduledRequest("V", (7, 5, 6), 8, 2, VERIFY, [3, 4, 5], [14, 15, 16], 3)], 4)
    assert verify.num_spec == {0: 2} and verify.num_scheduled_tokens == 3


def test_sampled_tokens_by_request_id_follow_the_decisions_rows_and_keep_their_own_forks():
    """``SampledTokens.of``: row i gets its request's tokens (none when it has none), in the decision's order;
    the forks are a copy of the caller's."""
    from labkit.scheduler_output import DECODE, ScheduledRequest, SchedulerOutput

    decision = SchedulerOutput.from_rows([ScheduledRequest(rid, (1,), 0, 0, DECODE, [3], [3], 1) for rid in "XYZ"])
    assert decision.block_size == 1 and decision.slot_mapping(0) == [3]     # no block size: a table entry is a slot
    forks = {"Z": [5, 6]}
    sampled = SampledTokens.of(decision, {"Z": [3, 4], "X": (2,)}, forks)
    forks["W"] = [1]                                      # the caller's dict changes afterwards
    assert sampled.request_ids == ["X", "Y", "Z"] and sampled.token_ids == [(2,), (), (3, 4)]
    assert sampled.fork_token_ids == {"Z": [5, 6]}
    assert SampledTokens.of(decision, {}).fork_token_ids == {}
    assert sampled.as_dict() == {"X": (2,), "Z": (3, 4)} and sampled.last_tokens() == {"X": 2, "Z": 4}


# ------------------------------------------------------------------ verification and forks, by hand


def test_verifying_k_drafts_keeps_the_accepted_ones_computed_and_rolls_back_the_rest():
    """A (prompt 1 2 3, output 7: 4 tokens, 3 computed) verifies drafts 5 6 8: its row computes 7 5 6 8 at
    positions 3..6. The target accepts 5 and then samples 9: the sequence gains 5 9, and of the 7 positions
    computed, the rejected drafts' two (6 and 8 at 5, 6) are rolled back: 5 stay computed, and the table
    keeps the 3 blocks of 2 those cover (its 4th is freed). The event names the drafts and which held."""
    from labkit import events as ev

    kv = KVCacheManager(num_blocks=8, block_size=2)
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), kv, max_model_len=64)
    sched.add(Request("A", [1, 2, 3], SamplingParams(max_tokens=20, ignore_eos=True), 0.0))
    run_step(sched, 1.0)                                  # the prefill: A's first output token is 7
    sched.set_drafts({"A": [5, 6, 8]})
    out = sched.schedule(2.0)
    assert out.row(0).token_ids == (7, 5, 6, 8) and out.starts == [3] and out.num_spec == {0: 3}
    table = list(kv.block_table("A"))
    assert len(table) == 4
    update = sched.update_from_output(out, SampledTokens.of(out, {"A": (5, 9)}), 2.0)
    a = sched.requests["A"]
    assert a.output_token_ids == [7, 5, 9] and a.all_token_ids == [1, 2, 3, 7, 5, 9]
    assert a.num_computed_tokens == 5 and a.num_inflight_tokens == 0 and a.spec_token_ids == []
    assert kv.block_table("A") == table[:3]
    assert ev.BlocksFreed("A", (table[3],)) in update.events
    assert ev.SpecVerified("A", 3, 1, (True, False, False), (5, 6, 8)) in update.events
    assert ev.TokensAppended("A", (5, 9), 1) in update.events
    assert sched.schedule(3.0).starts == [5]              # the next row starts at the first uncomputed token


def parent_with_children(sched: ContinuousScheduler, rid: str, prompt: list[int], n: int, now: float) -> Request:
    req = Request(rid, prompt, SamplingParams(max_tokens=20, ignore_eos=True, n=n), now,
                  child_ids=tuple(f"{rid}#{i}" for i in range(1, n)))
    sched.add(req)
    return req


def test_forked_children_start_from_their_parents_prompt_times_and_take_one_slot_each():
    """A (n = 3) forks at the end of its prompt: each child holds A's prompt, has its own first token, A's
    arrival and first-scheduled times (it was scheduled as part of A), and A's computed prompt. After the fork
    A and its children take 3 of the 4 sequence slots, so B (n = 1) is admitted at the next step."""
    sched = ContinuousScheduler(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), KVCacheManager(16, 4),
                                max_model_len=64)
    parent_with_children(sched, "A", [1, 2, 3], 3, 0.5)
    out = sched.schedule(1.0)
    update = sched.update_from_output(out, SampledTokens.of(out, {"A": (7,)}, {"A": [8, 9]}), 1.0)
    assert [c.request_id for c in update.forked] == ["A#1", "A#2"]
    for child, token in zip(update.forked, (8, 9)):
        assert child.prompt_token_ids == [1, 2, 3] and child.output_token_ids == [token]
        assert (child.arrival_time, child.first_scheduled_time, child.first_token_time) == (0.5, 1.0, 1.0)
        assert child.num_computed_tokens == 3 and child.parent_id == "A" and child.status.value == "running"
    assert sched.requests["A"].num_forks_pending == 0
    sched.add(Request("B", [4], SamplingParams(max_tokens=20), 1.5))
    assert sched.schedule(2.0).admitted == ["B"]


def test_children_of_a_parent_preempted_while_its_last_prompt_chunk_ran_wait_to_be_recomputed():
    """Async scheduling plans step 2 before step 1's tokens are applied. Pool of 3 blocks of 2: B (prompt 1)
    runs, A (n = 2, prompt 3 3 3) is admitted in step 1 with blocks for its whole prompt. Planning step 2, B
    needs a new block: the pool is dry, so A, the newest, is preempted while its prompt's row is in flight.
    When step 1's tokens arrive, A's child is forked with nothing to share: it waits, like A, with nothing
    computed, ahead of A, and keeps its first token."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, async_scheduling=True)
    sched = ContinuousScheduler(config, KVCacheManager(3, 2), max_model_len=64)
    sched.add(Request("B", [1], SamplingParams(max_tokens=20, ignore_eos=True), 0.0))
    first = sched.schedule(0.5)
    sched.update_from_output(first, SampledTokens.of(first, {"B": (5,)}), 0.5)
    parent_with_children(sched, "A", [3, 3, 3], 2, 0.7)
    step1 = sched.schedule(1.0)                           # B decodes at position 1, A's prompt: 0..2
    assert step1.request_ids == ["B", "A"] and step1.admitted == ["A"]
    step2 = sched.schedule(2.0)                           # B's position 2 needs a third block
    assert step2.preempted == ["A"]
    update = sched.update_from_output(step1, SampledTokens.of(step1, {"B": (6,), "A": (7,)}, {"A": [8]}), 2.0)
    (child,) = update.forked
    assert child.request_id == "A#1" and child.status.value == "preempted" and child.num_computed_tokens == 0
    assert child.output_token_ids == [8] and sched.requests["A"].output_token_ids == [7]
    assert [r.request_id for r in sched.waiting] == ["A#1", "A"]
    assert sched.requests["A"].num_forks_pending == 0


def test_a_long_prompt_is_prefilled_in_chunks_no_larger_than_the_budget():
    """Chunked prefill: a 10-token prompt under a budget of 4 tokens a step is computed as 4, 4 and 2 tokens
    (the first chunk at admission, the others as a running request), then decodes one token a step."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=4, enable_chunked_prefill=True)
    sched = ContinuousScheduler(config, KVCacheManager(16, 4), max_model_len=64)
    sched.add(Request("A", list(range(1, 11)), SamplingParams(max_tokens=5, ignore_eos=True), 0.0))
    rows = [(out.starts, out.num_tokens, out.num_logits) for out in (run_step(sched, t) for t in (1.0, 2.0, 3.0, 4.0))]
    assert rows == [([0], [4], [0]), ([4], [4], [0]), ([8], [2], [1]), ([10], [1], [1])]


def test_without_chunked_prefill_a_prompt_exactly_the_budget_left_is_admitted_and_one_token_more_waits():
    """Chunked prefill off: a waiting prompt is admitted whole or not at all, and whole means within the
    budget (``num_new <= budget``). Budget 4 and A decoding (1 token): B's 3-token prompt fits exactly; C's
    4-token prompt, one more than the 3 left, waits until A has finished and the whole budget is free."""
    config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=4, enable_chunked_prefill=False)
    for late, prompt, expected in (("B", [2, 3, 4], [[("A", 1), ("B", 3)], [("B", 1)]]),
                                   ("C", [2, 3, 4, 5], [[("A", 1)], [("C", 4)]])):
        sched = ContinuousScheduler(config, KVCacheManager(16, 4), max_model_len=64)
        sched.add(Request("A", [1], SamplingParams(max_tokens=2, ignore_eos=True), 0.0))
        run_step(sched, 1.0)                                   # A's prefill; one decode step is left
        sched.add(Request(late, prompt, SamplingParams(max_tokens=4, ignore_eos=True), 1.5))
        rows = [[(s.request_id, s.num_new_tokens) for s in run_step(sched, t).scheduled] for t in (2.0, 3.0)]
        assert rows == expected, late
