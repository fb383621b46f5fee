"""``labkit.metrics`` and ``labkit.events`` from their definitions, on constructed values (no engine).

Counters count tokens, not events: a finished request adds its output tokens, a verification adds the
tokens it drafted and those accepted, position by position; a step row adds each batch entry's tokens
by kind. Means are over steps; latencies are read from the request's timestamps; the event bus gives
each subscriber only its types and drops (once, with a warning) one that raises.
"""

from __future__ import annotations

import sys
import warnings

import pytest

from labkit.events import BatchEntry, EventBus, Preempted, RequestAdded, StepEnd, StepStats, TokensAppended, hooks_of
from labkit.kv.snapshot import BlockMapSnapshot, KVLayout
from labkit.metrics import MetricsCollector, StepRecorder, percentile, step_row
from labkit.request import RequestTimings
from labkit.scheduler_output import DECODE, IDLE, PREFILL, VERIFY


def stats(**values) -> StepStats:
    base = dict(step=0, num_requests_running=0, num_requests_waiting=0, num_scheduled_tokens=0,
                kv_cache_usage_perc=0.0, kv_waste_perc=0.0, kv_reserved_unused_perc=0.0, kv_internal_frag_perc=0.0,
                kv_external_frag_perc=0.0, batch_occupancy_perc=0.0, token_budget_perc=0.0, num_preemptions=0,
                host_s=0.0, model_s=0.0, step_s=0.0)
    return StepStats(**{**base, **values})


def timings(arrival, scheduled, first, finished, tokens) -> RequestTimings:
    return RequestTimings(arrival, scheduled, first, finished, tokens, 0)


EMPTY_MAP = BlockMapSnapshot(KVLayout.PAGED, 4, 0, (), (), (), ())


# ------------------------------------------------------------------------------ MetricsCollector

def test_finished_requests_add_their_output_tokens_not_one_each():
    m = MetricsCollector()
    m.record_arrival(2.0)
    m.record_arrival(1.0)                                   # an earlier arrival moves the start back
    m.record_arrival(3.0)
    m.record_finished(timings(1.0, 1.5, 2.0, 5.0, 7), [2.0, 3.0, 3.0, 5.0])
    m.record_finished(timings(2.0, 2.0, 3.0, 4.0, 3), [3.0, 4.0])
    d = m.as_dict()
    assert (d["num_finished_requests"], d["num_output_tokens"]) == (2, 10)
    assert d["elapsed_s"] == 4.0                            # last finish 5.0 (not the later-recorded 4.0) - 1.0
    assert d["output_tokens_per_s"] == 2.5 and d["requests_per_s"] == 0.5
    assert m.ttft == [1.0, 1.0] and m.e2e == [4.0, 2.0] and m.queue == [0.5, 0.0]
    assert m.tpot == [0.5, 0.5]                             # (5 - 2) / (7 - 1) and (4 - 3) / (3 - 1)
    assert m.itl == [1.0, 2.0, 1.0]                         # the two tokens at 3.0 are one step: no 0 s gap
    assert d["ttft_mean_s"] == 1.0 and d["e2e_p50_s"] == 3.0 and d["itl_p50_s"] == 1.0
    assert d["time_to_first_token_seconds"] == [1.0, 1.0] and d["inter_token_latency_seconds"] == [1.0, 2.0, 1.0]


def test_without_samples_the_counts_still_grow_but_no_latency_is_kept():
    m = MetricsCollector(keep_samples=False)
    m.record_finished(timings(0.0, 0.0, 1.0, 3.0, 5), [1.0, 2.0, 3.0])
    assert (m.num_finished, m.num_output_tokens, m.last_finish) == (1, 5, 3.0)
    assert m.ttft == m.tpot == m.e2e == m.queue == m.itl == []


def test_a_request_without_a_first_token_adds_no_latency_sample():
    m = MetricsCollector()
    m.record_finished(timings(0.0, None, None, None, 0), [])
    assert m.ttft == m.tpot == m.e2e == m.queue == [] and m.last_finish is None
    d = m.as_dict()
    assert d["elapsed_s"] is None and d["output_tokens_per_s"] is None and d["requests_per_s"] is None
    assert d["ttft_p50_s"] is None and d["ttft_mean_s"] is None


def test_speculative_counters_count_drafted_and_accepted_tokens_per_position():
    m = MetricsCollector()
    m.record_spec(3, [True, True, False])
    m.record_spec(1, [False])
    m.record_spec(4, [True, False, False, False])
    d = m.as_dict()
    assert d["spec_decode_num_drafts"] == 3
    assert d["spec_decode_num_draft_tokens"] == 8
    assert d["spec_decode_num_accepted_tokens"] == 3
    assert d["spec_decode_num_accepted_tokens_per_pos"] == [2, 1, 0, 0]
    assert m.spec_drafted_per_pos == [3, 2, 2, 1]
    assert d["spec_decode_acceptance_rate"] == 3 / 8
    assert d["spec_decode_mean_acceptance_length"] == 1 + 3 / 3


def test_no_speculation_gives_no_rates():
    d = MetricsCollector().as_dict()
    assert d["spec_decode_acceptance_rate"] is None and d["spec_decode_mean_acceptance_length"] is None
    assert d["spec_decode_num_accepted_tokens_per_pos"] == [] and d["num_steps"] == 0


def test_means_are_over_steps_and_decode_occupancy_over_decode_only_steps():
    m = MetricsCollector()
    m.record_step(stats(step=0, kv_cache_usage_perc=10.0, batch_occupancy_perc=50.0, step_s=1.0), decode_only=False)
    m.record_step(stats(step=1, kv_cache_usage_perc=30.0, batch_occupancy_perc=100.0, step_s=3.0), decode_only=True)
    m.record_step(stats(step=2, kv_cache_usage_perc=50.0, batch_occupancy_perc=75.0, step_s=2.0), decode_only=True)
    d = m.as_dict()
    assert d["num_steps"] == 3
    assert d["mean_kv_cache_usage_perc"] == 30.0 and d["mean_step_s"] == 2.0
    assert d["mean_batch_occupancy_perc"] == 75.0
    assert d["mean_decode_occupancy_perc"] == 87.5
    assert d["step"] == 2 and d["kv_cache_usage_perc"] == 50.0    # the last step's own values
    only_prefill = MetricsCollector()
    only_prefill.record_step(stats(batch_occupancy_perc=40.0), decode_only=False)
    assert only_prefill.as_dict()["mean_decode_occupancy_perc"] is None


def test_after_one_step_each_mean_is_that_steps_value():
    m = MetricsCollector()
    m.record_step(stats(kv_cache_usage_perc=40.0, step_s=0.5), decode_only=True)
    d = m.as_dict()
    assert (d["num_steps"], d["mean_kv_cache_usage_perc"], d["mean_step_s"]) == (1, 40.0, 0.5)


def test_before_any_request_finishes_there_is_no_elapsed_time_nor_throughput():
    m = MetricsCollector()
    m.record_arrival(1.0)
    d = m.as_dict()
    assert d["elapsed_s"] is None and d["output_tokens_per_s"] is None and d["requests_per_s"] is None


@pytest.mark.parametrize("values, q, expected", [
    ([4.0, 1.0, 3.0, 2.0], 50, 2.5), ([4.0, 1.0, 3.0, 2.0], 0, 1.0), ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0], 99, 4.96), ([7.0], 99, 7.0),
])
def test_percentile_interpolates_between_sorted_ranks(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


# ------------------------------------------------------------------------------ step rows

def test_a_step_row_adds_each_entrys_tokens_by_kind_and_counts_busy_slots():
    batch = (BatchEntry("a", 0, 5, PREFILL), BatchEntry("b", 1, 3, PREFILL), BatchEntry("c", 2, 1, DECODE),
             BatchEntry("d", 3, 1, DECODE), BatchEntry("e", 4, 4, VERIFY), BatchEntry("", 5, 0, IDLE))
    event = StepEnd(7, stats(model_s=0.25, step_s=0.5, simulated=True), EMPTY_MAP, batch)
    row = step_row(event)
    assert (row.step, row.prefill_tokens, row.decode_tokens, row.verify_tokens, row.num_requests) == (7, 8, 2, 4, 5)
    assert (row.model_s, row.step_s, row.simulated, row.num_tokens) == (0.25, 0.5, True, 14)


def test_the_step_recorder_keeps_rows_and_preemptions_while_attached():
    bus = EventBus()
    rec = StepRecorder(type("Engine", (), {"hooks": bus})())
    bus.emit(StepEnd(0, stats(step_s=0.5), EMPTY_MAP, (BatchEntry("a", 0, 6, PREFILL),)))
    bus.emit(Preempted("a", 6))
    bus.emit(RequestAdded("b", 3, 4, 0.0))                 # neither a step nor a preemption
    bus.emit(StepEnd(1, stats(step_s=0.25), EMPTY_MAP, (BatchEntry("a", 0, 1, DECODE),
                                                         BatchEntry("b", 1, 3, PREFILL))))
    assert [r.step for r in rec.rows] == [0, 1] and rec.preempted == [Preempted("a", 6)]
    assert rec.num_tokens == 10 and rec.seconds == 0.75
    rec.detach()
    bus.emit(StepEnd(2, stats(), EMPTY_MAP, ()))
    assert len(rec.rows) == 2
    with StepRecorder(type("Engine", (), {"hooks": bus})()) as again:
        bus.emit(StepEnd(3, stats(), EMPTY_MAP, ()))
    bus.emit(StepEnd(4, stats(), EMPTY_MAP, ()))
    assert [r.step for r in again.rows] == [3] and not bus.active


# ------------------------------------------------------------------------------ the event bus

def test_a_typed_subscriber_gets_only_its_types_and_an_untyped_one_gets_all():
    bus = EventBus()
    assert not bus.active and not bus.wants(StepEnd)
    typed, every = [], []
    bus.subscribe(typed.append, Preempted, TokensAppended)
    assert bus.active and bus.wants(Preempted) and not bus.wants(StepEnd)
    bus.subscribe(every.append)
    assert bus.wants(StepEnd)
    events = [Preempted("a", 3), RequestAdded("a", 2, 5, 0.0), TokensAppended("a", (4, 5, 6), 2)]
    for e in events:
        bus.emit(e)
    assert typed == [events[0], events[2]] and every == events
    bus.unsubscribe(every.append)             # a new bound method each read: unsubscribed by ==
    assert bus.wants(Preempted) and not bus.wants(StepEnd)
    bus.unsubscribe(typed.append)
    assert not bus.active


def test_a_subscriber_that_raises_is_reported_once_and_the_others_still_get_the_event():
    bus = EventBus()
    got = []

    def broken(event):
        raise RuntimeError("observer bug")

    bus.subscribe(broken)
    bus.subscribe(got.append)
    with pytest.warns(RuntimeWarning, match="broken raised on Preempted and was unsubscribed"):
        bus.emit(Preempted("a", 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bus.emit(Preempted("b", 2))           # no second warning: it is gone
    assert got == [Preempted("a", 1), Preempted("b", 2)]
    assert len(bus.errors) == 1
    err = bus.errors[0]
    assert err.event == "Preempted" and err.subscriber.endswith("broken") and "observer bug" in err.traceback


def test_a_subscribers_warning_names_the_line_that_emitted_the_event():
    """``stacklevel=2``: the frame that called ``emit`` (the engine's line), not the bus's own. That frame is read
    from inside the subscriber: its caller is ``emit``, whose caller it is."""
    bus = EventBus()
    emitted_at = []

    def broken(event):
        caller = sys._getframe(2)
        emitted_at.append((caller.f_code.co_filename, caller.f_lineno))
        raise RuntimeError("observer bug")

    bus.subscribe(broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bus.emit(Preempted("a", 1))
    assert [(w.filename, w.lineno) for w in caught] == emitted_at
    assert not emitted_at[0][0].endswith("events.py")


def test_tokens_appended_without_speculation_accepts_no_draft():
    assert TokensAppended("a", (9,)).num_accepted_draft == 0


def test_hooks_of_finds_the_bus_on_an_engine_on_an_llm_or_as_given():
    bus, other = EventBus(), EventBus()
    engine = type("Engine", (), {"hooks": bus})()
    llm = type("LLM", (), {"engine": engine})()
    assert hooks_of(engine) is bus and hooks_of(llm) is bus
    assert hooks_of(None, other) is other and hooks_of(engine, other) is other
    with pytest.raises(TypeError, match=r"^expected an LLM or LLMEngine \(with \.hooks\), or hooks=EventBus\(\)$"):
        hooks_of(object())
    with pytest.raises(TypeError):
        hooks_of(None)


def test_a_raising_subscriber_without_a_qualified_name_is_named_by_its_repr():
    class Observer:
        def __call__(self, event):
            raise ValueError("no")

        def __repr__(self):
            return "<the observer>"

    bus = EventBus()
    bus.subscribe(Observer())
    with pytest.warns(RuntimeWarning, match="labkit hook <the observer> raised on Preempted"):
        bus.emit(Preempted("a", 1))
    assert bus.errors[0].subscriber == "<the observer>" and not bus.active
