"""Events: what each one says is true of the engine when it arrives, and no observer
can hurt the engine.

Workloads run on the simulated model with a shadow KV cache (``tests/sim_oracle.py``) and a small
pool, so one run goes through prefill chunks, decodes, prefix hits, parallel sampling, preemption
and (separately) speculative verification.
"""

from __future__ import annotations

import dataclasses
import random
import warnings

import pytest

from labkit import EngineConfig, SamplingParams, SpecConfig
from labkit import events as ev
from labkit.events import EventBus, HookError
from labkit.request import RequestStatus
from labkit.scheduler_output import StepKind
from tests.sim_oracle import shadow_llm

EVENT_TYPES = (ev.RequestAdded, ev.RequestScheduled, ev.BlocksAllocated, ev.BlocksFreed, ev.PrefixHit,
               ev.Preempted, ev.SpecVerified, ev.TokensAppended, ev.RequestFinished, ev.StepEnd)

PAGED = EngineConfig(block_size=4, num_blocks=12, max_num_seqs=4, max_num_batched_tokens=24, max_model_len=48,
                     enable_prefix_caching=True)
CONTIGUOUS = EngineConfig(block_size=4, num_blocks=24, max_num_seqs=4, max_num_batched_tokens=24,
                          max_model_len=48, kv_cache="contiguous", contiguous_reserve="max_tokens")
SPEC = EngineConfig(block_size=2, num_blocks=64, max_num_seqs=4, max_model_len=48,
                    speculative=SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1))


def workload(engine, n: int = 1, num: int = 8, seed: int = 0) -> None:
    rng = random.Random(seed)
    shared = rng.choices(range(97, 101), k=12)
    for i in range(num):
        prompt = (shared if i % 2 else []) + rng.choices(range(97, 101), k=rng.randint(3, 14))
        engine.add_request(prompt, SamplingParams(max_tokens=rng.randint(2, 16), n=n if i % 3 == 0 else 1),
                           request_id=f"r{i}")


def run(config: EngineConfig, subscribers=(), n: int = 1, seed: int = 0):
    llm = shadow_llm(config)
    engine = llm.engine
    for fn in subscribers:
        engine.hooks.subscribe(fn)
    workload(engine, n=n, seed=seed)
    while engine.has_unfinished_requests():
        engine.step()
    return engine


class Recorder:
    def __init__(self):
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def steps(self) -> list[list]:
        """Events grouped by engine step, each group ending with its StepEnd."""
        groups, current = [], []
        for e in self.events:
            current.append(e)
            if isinstance(e, ev.StepEnd):
                groups.append(current)
                current = []
        return groups


@pytest.fixture(scope="module", params=["paged", "contiguous", "speculative"])
def recorded(request):
    config = {"paged": PAGED, "contiguous": CONTIGUOUS, "speculative": SPEC}[request.param]
    rec = Recorder()
    engine = run(config, [rec], n=2 if request.param == "paged" else 1)
    return request.param, engine, rec


# ------------------------------------------------------------------------- the events themselves

def test_the_paged_run_emits_every_event_type():
    rec = Recorder()
    run(PAGED, [rec], n=2)
    spec = Recorder()
    run(SPEC, [spec])
    emitted = {type(e) for e in rec.events + spec.events}
    assert emitted == set(EVENT_TYPES)


def _assert_immutable(value, path: str) -> None:
    assert not isinstance(value, (list, dict, set, bytearray)), f"{path} is a mutable {type(value).__name__}"
    if dataclasses.is_dataclass(value):
        assert value.__dataclass_params__.frozen, f"{path} ({type(value).__name__}) is not frozen"
        for f in dataclasses.fields(value):
            _assert_immutable(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            _assert_immutable(item, f"{path}[{i}]")


def test_every_event_is_a_frozen_snapshot_made_of_immutable_values(recorded):
    _, _, rec = recorded
    for e in rec.events:
        _assert_immutable(e, type(e).__name__)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.of(ev.StepEnd)[0].step = 99


def test_steps_are_numbered_one_after_another_and_each_ends_with_one_step_end(recorded):
    _, engine, rec = recorded
    groups = rec.steps()
    assert [g[-1].step for g in groups] == list(range(1, engine.step_count + 1))
    assert all(sum(isinstance(e, ev.StepEnd) for e in g) == 1 for g in groups)


def test_request_added_describes_the_request_as_queued():
    seen = []
    llm = shadow_llm(PAGED)
    engine = llm.engine
    engine.hooks.subscribe(lambda e: seen.append((e, engine.get_request(e.request_id).status)),
                           ev.RequestAdded)
    engine.add_request([97, 98, 99], SamplingParams(max_tokens=5), request_id="x", arrival_time=1.5)
    (added, status), = seen
    assert added == ev.RequestAdded("x", 3, 5, 1.5) and status is RequestStatus.WAITING


def test_scheduled_events_match_the_step_end_batch_and_token_count(recorded):
    _, _, rec = recorded
    for group in rec.steps():
        end = group[-1]
        scheduled = [(e.request_id, e.num_tokens, e.kind) for e in group if isinstance(e, ev.RequestScheduled)]
        batch = [(b.request_id, b.num_tokens, b.kind) for b in end.batch if b.kind is not StepKind.IDLE]
        assert scheduled == batch
        assert all(e.step == end.step for e in group if isinstance(e, ev.RequestScheduled))
        assert sum(n for _, n, _ in scheduled) == end.stats.num_scheduled_tokens
        assert [b.slot for b in end.batch] == list(range(len(end.batch)))


def test_tokens_appended_add_up_to_each_requests_output(recorded):
    _, engine, rec = recorded
    streamed: dict[str, list[int]] = {}
    for e in rec.of(ev.TokensAppended):
        streamed.setdefault(e.request_id, []).extend(e.token_ids)
    assert streamed == {rid: r.output_token_ids for rid, r in engine.requests.items()}


def test_request_finished_carries_the_final_status_and_timings(recorded):
    _, engine, rec = recorded
    finished = {e.request_id: e for e in rec.of(ev.RequestFinished)}
    assert set(finished) == set(engine.requests)
    for rid, e in finished.items():
        req = engine.get_request(rid)
        assert e.reason == req.status.value
        assert e.timings == req.timings()


@pytest.mark.parametrize("config", [PAGED, CONTIGUOUS], ids=["paged", "contiguous"])
def test_blocks_freed_lists_exactly_what_the_kv_manager_released(config):
    # (Speculative rollbacks release blocks too: see test_blocks_allocated_minus_blocks_freed_...)
    llm = shadow_llm(config)
    engine, rec = llm.engine, Recorder()
    released = []
    free = engine.kv.free
    engine.kv.free = lambda rid: released.append((rid, tuple(free(rid)))) or list(released[-1][1])
    engine.hooks.subscribe(rec)
    workload(engine, n=2 if config is PAGED else 1)
    engine.abort("r2")
    while engine.has_unfinished_requests():
        engine.step()
    # Aborting a waiting request releases nothing, and then there is no BlocksFreed event.
    assert [(e.request_id, e.block_ids) for e in rec.of(ev.BlocksFreed)] == [r for r in released if r[1]]


def test_prefix_hits_are_whole_blocks_short_of_the_prompts_last_token(recorded):
    mode, engine, rec = recorded
    hits = rec.of(ev.PrefixHit)
    if mode != "paged":
        assert hits == []
        return
    assert hits
    for e in hits:
        req = engine.get_request(e.request_id)
        assert e.num_cached_tokens % PAGED.block_size == 0
        assert 0 < e.num_cached_tokens < req.num_tokens


def test_preempted_reports_the_tokens_it_threw_away_then_frees_their_blocks():
    rec = Recorder()
    run(PAGED, [rec], n=2)
    pre = rec.of(ev.Preempted)
    assert pre, "the small pool should force preemption"
    for group in rec.steps():
        for i, e in enumerate(group):
            if isinstance(e, ev.Preempted):
                freed = group[i + 1]
                assert isinstance(freed, ev.BlocksFreed) and freed.request_id == e.request_id
                assert e.num_computed_tokens_lost > 0
                computed_before = _filled_by(e.request_id, rec, group[-1].step - 1)
                assert e.num_computed_tokens_lost == computed_before


def _filled_by(request_id: str, rec: Recorder, step: int) -> int:
    """Tokens a request had computed at the end of ``step`` (from that StepEnd's block map)."""
    ends = {e.step: e for e in rec.of(ev.StepEnd)}
    snap = ends[step].block_map
    table = dict(snap.block_tables)[request_id]
    return sum(min(snap.filled[b], snap.block_size) for b in table) if table else 0


def test_spec_verified_counts_agree_with_its_per_position_flags_and_the_tokens_appended():
    rec = Recorder()
    engine = run(SPEC, [rec])
    verified = rec.of(ev.SpecVerified)
    assert verified and any(e.accepted for e in verified) and any(e.accepted < e.drafted for e in verified)
    for group in rec.steps():
        appended = {e.request_id: e for e in group if isinstance(e, ev.TokensAppended)}
        for e in (x for x in group if isinstance(x, ev.SpecVerified)):
            assert len(e.per_position) == e.drafted and 0 <= e.accepted <= e.drafted
            assert e.per_position == (True,) * e.accepted + (False,) * (e.drafted - e.accepted)
            tokens = appended[e.request_id]
            assert tokens.num_accepted_draft == min(e.accepted, len(tokens.token_ids))
    stats = engine.stats()
    assert stats["spec_decode_num_accepted_tokens"] == sum(e.accepted for e in verified)
    assert stats["spec_decode_num_draft_tokens"] == sum(e.drafted for e in verified)


# ---------------------------------------------------------------- emitted once state is consistent

class ConsistencyChecker:
    """At every StepEnd, compare the event with the engine as it stands at that moment."""

    def __init__(self, engine):
        self.engine = engine
        self.checked = 0

    def __call__(self, e) -> None:
        engine = self.engine
        computed = {r.request_id: r.num_computed_tokens for r in engine.scheduler.running}
        engine.kv.check_invariants()
        assert e.block_map == engine.kv.snapshot(computed)
        assert e.stats == engine.metrics.last
        assert e.stats.num_requests_running == len(engine.scheduler.running)
        assert e.stats.num_requests_waiting == len(engine.scheduler.waiting)
        snap = e.block_map
        if snap.layout == "paged":
            assert dict(snap.block_tables) == {rid: tuple(t) for rid, t in engine.kv.block_tables.items()}
            used = sum(1 for c in snap.ref_cnt if c > 0)
            assert e.stats.kv_cache_usage_perc == pytest.approx(100.0 * used / snap.num_blocks)
        else:
            reserved = sum(r.reserved for r in snap.regions)
            assert e.stats.kv_cache_usage_perc == pytest.approx(100.0 * reserved / engine.kv.num_slots)
        self.checked += 1


@pytest.mark.parametrize("config", [PAGED, CONTIGUOUS, SPEC], ids=["paged", "contiguous", "speculative"])
def test_step_end_block_map_and_stats_match_the_kv_manager_when_delivered(config):
    llm = shadow_llm(config)
    checker = ConsistencyChecker(llm.engine)
    llm.engine.hooks.subscribe(checker, ev.StepEnd)
    workload(llm.engine, n=2 if config is PAGED else 1)
    while llm.engine.has_unfinished_requests():
        llm.engine.step()
    assert checker.checked == llm.engine.step_count > 0


def test_a_finished_request_has_already_released_its_kv_when_its_event_arrives():
    llm = shadow_llm(PAGED)
    engine = llm.engine
    seen = []

    def on_finish(e):
        req = engine.get_request(e.request_id)
        seen.append((req.is_finished, e.request_id in engine.kv.block_tables, req in engine.scheduler.running))

    engine.hooks.subscribe(on_finish, ev.RequestFinished)
    workload(engine, n=2)
    engine.abort("r1")
    while engine.has_unfinished_requests():
        engine.step()
    assert seen and all(state == (True, False, False) for state in seen)


def test_a_step_end_subscriber_is_needed_for_the_engine_to_build_block_maps():
    llm = shadow_llm(PAGED)
    engine = llm.engine
    calls = []
    original = engine.kv.snapshot
    engine.kv.snapshot = lambda computed: calls.append(1) or original(computed)
    engine.hooks.subscribe(lambda e: None, ev.TokensAppended)
    workload(engine)
    for _ in range(3):
        engine.step()
    assert calls == []
    engine.hooks.subscribe(lambda e: None, ev.StepEnd)
    engine.step()
    assert calls == [1]


def test_blocks_allocated_minus_blocks_freed_is_what_each_request_holds():
    rec = Recorder()
    run(EngineConfig(block_size=1, num_blocks=64, max_num_seqs=4, max_model_len=48,
                     speculative=SpecConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_min=1)), [rec])
    replica: dict[str, set[int]] = {}
    for e in rec.events:
        if isinstance(e, ev.BlocksAllocated):
            replica.setdefault(e.request_id, set()).update(e.block_ids)
        elif isinstance(e, ev.BlocksFreed):
            replica[e.request_id] = replica.get(e.request_id, set()) - set(e.block_ids)
        elif isinstance(e, ev.StepEnd):
            held = {rid: set(t) for rid, t in e.block_map.block_tables}
            assert {rid: b for rid, b in replica.items() if b} == held


def test_without_sharing_or_speculation_allocations_minus_frees_track_the_block_tables():
    rec = Recorder()
    run(EngineConfig(block_size=2, num_blocks=24, max_num_seqs=4, max_num_batched_tokens=16, max_model_len=48),
        [rec])
    assert rec.of(ev.Preempted)
    replica: dict[str, set[int]] = {}
    for e in rec.events:
        if isinstance(e, ev.BlocksAllocated):
            replica.setdefault(e.request_id, set()).update(e.block_ids)
        elif isinstance(e, ev.BlocksFreed):
            assert set(e.block_ids) == replica.pop(e.request_id, set())
        elif isinstance(e, ev.StepEnd):
            held = {rid: set(t) for rid, t in e.block_map.block_tables}
            assert replica == held


# ------------------------------------------------------------------------ a subscriber that raises

def test_a_raising_subscriber_is_reported_unsubscribed_and_changes_no_output():
    clean = run(PAGED, n=2)
    good = Recorder()

    def bad(event):
        if isinstance(event, ev.StepEnd) and event.step == 3:
            raise ZeroDivisionError("observer bug")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = run(PAGED, [bad, good], n=2)
    assert {rid: r.output_token_ids for rid, r in engine.requests.items()} == \
        {rid: r.output_token_ids for rid, r in clean.requests.items()}
    (err,) = engine.hooks.errors
    assert isinstance(err, HookError) and err.event == "StepEnd" and "ZeroDivisionError" in err.traceback
    assert "bad" in err.subscriber
    assert sum(issubclass(w.category, RuntimeWarning) and "bad" in str(w.message) for w in caught) == 1
    assert len(good.of(ev.StepEnd)) == engine.step_count        # the others still got every event
    engine.kv.check_invariants()


def test_a_subscriber_that_raises_is_called_no_more():
    bus = EventBus()
    calls = []

    def bad(event):
        calls.append(event)
        raise RuntimeError("once is enough")

    bus.subscribe(bad)
    with pytest.warns(RuntimeWarning, match="once is enough"):
        bus.emit(ev.PrefixHit("a", 4))
    bus.emit(ev.PrefixHit("b", 4))
    assert len(calls) == 1 and not bus.active and len(bus.errors) == 1


def test_typed_subscriptions_receive_only_their_event_types():
    bus = EventBus()
    got = []
    bus.subscribe(got.append, ev.PrefixHit, ev.Preempted)
    for e in (ev.PrefixHit("a", 4), ev.BlocksFreed("a", (1,)), ev.Preempted("a", 3)):
        bus.emit(e)
    assert got == [ev.PrefixHit("a", 4), ev.Preempted("a", 3)]
    assert bus.wants(ev.Preempted) and not bus.wants(ev.StepEnd)
