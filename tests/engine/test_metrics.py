"""Metric definitions, each checked on a scenario small enough to compute by hand.

The simulated model drives the real scheduler and KV managers. Where times matter the engine runs
on a hand-set clock (``step_at``), so TTFT, ITL, TPOT and throughput have exact expected values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig
from labkit import events as ev
from labkit.engine import LLMEngine
from labkit.metrics import percentile
from labkit.replay import replay, static_decode_occupancy
from labkit.request import RequestTimings
from labkit.traces import TraceRequest
from tests.sim_oracle import shadow_llm

GREEDY = dict(ignore_eos=True)


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def manual_engine(config: EngineConfig) -> LLMEngine:
    """A simulated engine whose clock only moves when the test says so."""
    engine = LLM(model="sim", config=config, progress=False).engine
    engine.clock = ManualClock()
    return engine


def step_at(engine: LLMEngine, t: float) -> None:
    engine.clock.now = t
    LLMEngine.step(engine)          # the plain step: the simulated one would advance the clock itself


def step_ends(engine) -> list[ev.StepEnd]:
    ends: list = []
    engine.hooks.subscribe(ends.append, ev.StepEnd)
    return ends


def run_to_end(engine) -> None:
    while engine.has_unfinished_requests():
        engine.step()


# ---------------------------------------------------------------------------------------- names

DESIGN_NAMES = [
    "kv_cache_usage_perc", "kv_waste_perc", "mean_kv_waste_perc", "kv_reserved_unused_perc",
    "kv_internal_frag_perc", "kv_external_frag_perc", "mean_kv_reserved_unused_perc",
    "mean_kv_internal_frag_perc", "mean_kv_external_frag_perc", "batch_occupancy_perc",
    "mean_batch_occupancy_perc", "token_budget_perc", "mean_token_budget_perc", "num_requests_running",
    "num_requests_waiting", "num_preemptions", "prefix_cache_queries", "prefix_cache_hits", "host_s",
    "model_s", "mean_host_s", "mean_model_s", "time_to_first_token_seconds",
    "inter_token_latency_seconds", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s",
    "tpot_p99_s", "e2e_p50_s", "e2e_p99_s", "queue_p50_s", "queue_p99_s", "output_tokens_per_s",
    "requests_per_s", "spec_decode_num_drafts", "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens", "spec_decode_num_accepted_tokens_per_pos",
    "spec_decode_acceptance_rate", "spec_decode_mean_acceptance_length", "simulated",
]


def test_stats_carry_every_name_design_section_5_defines():
    llm = LLM(model="sim", config=EngineConfig(max_model_len=64), progress=False)
    llm.generate([[97, 98, 99]], SamplingParams(max_tokens=3))
    stats = llm.engine.stats()
    assert [n for n in DESIGN_NAMES if n not in stats] == []
    assert stats["simulated"] is True


def test_stats_before_any_step_have_no_latencies_and_zero_means():
    stats = LLM(model="sim", config=EngineConfig(max_model_len=64), progress=False).engine.stats()
    assert stats["num_steps"] == 0 and stats["mean_kv_waste_perc"] == 0.0
    assert stats["ttft_p50_s"] is None and stats["output_tokens_per_s"] is None


# ------------------------------------------------------------------------------------- KV waste

def test_paged_waste_is_the_unfilled_tails_of_last_blocks():
    # block_size 4. A: prompt 5, B: prompt 3, four tokens each. After each step (computed / allocated):
    #   step 1  A 5/8  B 3/4   -> 1 - 8/12  = 33.3 %
    #   step 2  A 6/8  B 4/4   -> 1 - 10/12 = 16.7 %
    #   step 3  A 7/8  B 5/8   -> 1 - 12/16 = 25.0 %
    #   step 4  both finished  ->  0 (nothing allocated)
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=16, max_model_len=32)).engine
    ends = step_ends(engine)
    engine.add_request([97] * 5, SamplingParams(max_tokens=4, **GREEDY), request_id="A")
    engine.add_request([98] * 3, SamplingParams(max_tokens=4, **GREEDY), request_id="B")
    run_to_end(engine)
    waste = [e.stats.kv_waste_perc for e in ends]
    assert waste == pytest.approx([100 / 3, 100 / 6, 25.0, 0.0])
    assert engine.stats()["mean_kv_waste_perc"] == pytest.approx(sum(waste) / 4)
    assert all(e.stats.kv_reserved_unused_perc == 0.0 == e.stats.kv_external_frag_perc for e in ends)
    assert [e.stats.kv_cache_usage_perc for e in ends] == pytest.approx([100 * 3 / 16, 100 * 3 / 16, 25.0, 0.0])


def test_paged_waste_counts_a_shared_block_once():
    # n = 2 over a 6-token prompt: after the fork both sequences hold blocks [4 full, 2 filled].
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=16, max_model_len=32)).engine
    ends = step_ends(engine)
    engine.add_request([97] * 6, SamplingParams(max_tokens=3, n=2, temperature=1.0, seed=0, **GREEDY))
    engine.step()
    assert ends[0].stats.kv_waste_perc == pytest.approx(25.0)      # 1 - 6/8, not 1 - 12/8


@pytest.mark.parametrize("reserve, waste, later, internal", [
    ("max_model_len", 1 - 5 / 16, 3 / 16, 8 / 16),     # 16 reserved, 8 ever needed, 5 computed
    ("max_tokens", 1 - 5 / 8, 3 / 8, 0.0),              # 8 reserved = needed
])
def test_contiguous_waste_is_reserved_for_later_plus_internal_fragmentation(reserve, waste, later, internal):
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=8, max_model_len=16, kv_cache="contiguous",
                                     contiguous_reserve=reserve)).engine
    ends = step_ends(engine)
    engine.add_request([97] * 5, SamplingParams(max_tokens=3, **GREEDY))
    engine.step()
    s = ends[0].stats
    assert s.kv_waste_perc == pytest.approx(100 * waste)
    assert s.kv_reserved_unused_perc == pytest.approx(100 * later)
    assert s.kv_internal_frag_perc == pytest.approx(100 * internal)
    assert s.kv_waste_perc == pytest.approx(s.kv_reserved_unused_perc + s.kv_internal_frag_perc)
    assert s.kv_external_frag_perc == 0.0                                  # nobody is waiting


# ------------------------------------------------------------------------ occupancy and budget

def test_batch_occupancy_and_token_budget_use_per_step_and_their_means():
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=16, max_num_seqs=4, max_num_batched_tokens=16,
                                     max_model_len=32)).engine
    ends = step_ends(engine)
    engine.add_request([97] * 5, SamplingParams(max_tokens=2, **GREEDY))
    engine.add_request([98] * 7, SamplingParams(max_tokens=2, **GREEDY))
    run_to_end(engine)
    assert [e.stats.batch_occupancy_perc for e in ends] == [50.0, 50.0]             # 2 of 4 slots
    assert [e.stats.token_budget_perc for e in ends] == [100 * 12 / 16, 100 * 2 / 16]
    stats = engine.stats()
    assert stats["mean_batch_occupancy_perc"] == 50.0
    assert stats["mean_token_budget_perc"] == pytest.approx(100 * 14 / 32)


def _static_replay(output_lens: list[int], max_num_seqs: int, scheduler: str = "static") -> dict:
    llm = LLM(model="sim", config=EngineConfig(max_num_seqs=max_num_seqs, scheduler=scheduler,
                                               max_model_len=256, num_blocks=256), progress=False)
    trace = [TraceRequest(0.0, 3 + i % 5, o) for i, o in enumerate(output_lens)]
    return replay(llm.engine, trace).stats


def test_static_decode_occupancy_matches_what_the_lengths_predict():
    # Batches of 3: [2, 6, 4] runs 5 decode steps with 1 + 5 + 3 busy slot-steps of 15;
    # [3, 5] runs 4 with 2 + 4 of 12.  Prediction: 15 / 27.
    lens = [2, 6, 4, 3, 5]
    assert static_decode_occupancy(lens, 3) == pytest.approx(100 * 15 / 27)
    assert _static_replay(lens, 3)["mean_decode_occupancy_perc"] == pytest.approx(100 * 15 / 27)


@given(st.lists(st.integers(2, 30), min_size=1, max_size=20), st.integers(1, 6))
def test_static_decode_occupancy_matches_the_prediction_for_any_lengths(lens, max_num_seqs):
    measured = _static_replay(lens, max_num_seqs)["mean_decode_occupancy_perc"]
    assert measured == pytest.approx(static_decode_occupancy(lens, max_num_seqs))


def test_continuous_batching_keeps_decode_slots_busier_than_static_on_the_same_lengths():
    lens = [2, 30, 4, 3, 25, 2, 2, 9]
    static = _static_replay(lens, 3)["mean_decode_occupancy_perc"]
    continuous = _static_replay(lens, 3, "continuous")["mean_decode_occupancy_perc"]
    assert continuous > static


# ----------------------------------------------------------------------------------- latencies

@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_is_numpys_linear_interpolation(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def test_percentile_of_nothing_is_none():
    assert percentile([], 50) is None


def test_request_timings_define_ttft_tpot_e2e_and_queue_time():
    t = RequestTimings(arrival_time=1.0, first_scheduled_time=1.5, first_token_time=2.0, finished_time=5.0,
                       num_output_tokens=4, num_preemptions=0)
    assert (t.ttft_s, t.tpot_s, t.e2e_s, t.queue_s) == (1.0, 1.0, 4.0, 0.5)
    one = RequestTimings(0.0, 0.0, 1.0, 1.0, 1, 0)
    assert one.tpot_s is None                                    # no second token, no TPOT


def test_latencies_and_throughput_come_from_token_timestamps():
    # One slot. A (arrives 0.5) runs first, then B (arrives 0.0, queued behind A).
    # Steps happen at the listed times; a token is stamped with its step's time.
    engine = manual_engine(EngineConfig(max_num_seqs=1, max_model_len=64))
    engine.add_request([97, 98], SamplingParams(max_tokens=4, **GREEDY), request_id="A", arrival_time=0.5)
    engine.add_request([99], SamplingParams(max_tokens=2, **GREEDY), request_id="B", arrival_time=0.0)
    for t in (1.0, 1.5, 3.0, 3.25, 5.0, 7.0):
        step_at(engine, t)
    assert not engine.has_unfinished_requests()
    s = engine.stats()
    assert s["time_to_first_token_seconds"] == [0.5, 5.0]               # A: 1 - 0.5, B: 5 - 0
    assert s["inter_token_latency_seconds"] == [0.5, 1.5, 0.25, 2.0]
    assert s["tpot_p50_s"] == pytest.approx((0.75 + 2.0) / 2)          # A: 2.25 / 3, B: 2 / 1
    assert s["e2e_p50_s"] == pytest.approx((2.75 + 7.0) / 2)
    assert s["queue_p99_s"] == pytest.approx(0.5 + 0.99 * (5.0 - 0.5))  # queues 0.5 and 5
    assert s["ttft_p99_s"] == pytest.approx(0.5 + 0.99 * 4.5)
    assert s["output_tokens_per_s"] == pytest.approx(6 / 7.0)          # 6 tokens, first arrival 0 .. 7
    assert s["requests_per_s"] == pytest.approx(2 / 7.0)


def test_step_time_splits_into_scheduler_cpu_and_model_time():
    llm = LLM(model="sim", config=EngineConfig(max_model_len=64), progress=False)
    ends = step_ends(llm.engine)
    llm.generate([[97] * 8, [98] * 3], SamplingParams(max_tokens=4))
    for e in ends:
        assert e.stats.host_s > 0 and e.stats.model_s > 0
        assert e.stats.step_s == pytest.approx(e.stats.host_s + e.stats.model_s)
    s = llm.engine.stats()
    assert s["mean_step_s"] == pytest.approx(s["mean_host_s"] + s["mean_model_s"])


# ------------------------------------------------------------------------- counters and spec

def test_prefix_cache_counts_queried_and_hit_tokens_per_admission():
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=16, max_model_len=32,
                                     enable_prefix_caching=True)).engine
    prompt = [97, 98, 99, 100] * 3
    for rid in ("a", "b"):
        engine.add_request(prompt, SamplingParams(max_tokens=2, **GREEDY), request_id=rid)
        run_to_end(engine)
    s = engine.stats()
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"]) == (24, 8)


def test_preemptions_are_counted_per_event():
    engine = shadow_llm(EngineConfig(block_size=2, num_blocks=8, max_num_seqs=4, max_model_len=16)).engine
    preempted = []
    engine.hooks.subscribe(preempted.append, ev.Preempted)
    for i in range(4):
        engine.add_request([97 + i] * 3, SamplingParams(max_tokens=10, **GREEDY))
    run_to_end(engine)
    assert engine.stats()["num_preemptions"] == len(preempted) > 0


def test_speculative_counters_follow_their_definitions():
    engine = shadow_llm(EngineConfig(block_size=4, num_blocks=64, max_model_len=64,
                                     speculative=SpecConfig(method="ngram", num_speculative_tokens=3,
                                                            prompt_lookup_min=1))).engine
    verified = []
    engine.hooks.subscribe(verified.append, ev.SpecVerified)
    for i in range(3):
        engine.add_request([97, 98, 99, 97, 98, 99, 100 + i], SamplingParams(max_tokens=30))
    run_to_end(engine)
    s = engine.stats()
    drafts, drafted = len(verified), sum(e.drafted for e in verified)
    accepted = sum(e.accepted for e in verified)
    assert (s["spec_decode_num_drafts"], s["spec_decode_num_draft_tokens"],
            s["spec_decode_num_accepted_tokens"]) == (drafts, drafted, accepted)
    assert s["spec_decode_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert s["spec_decode_mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    per_pos = [sum(1 for e in verified if e.accepted > i) for i in range(3)]
    assert s["spec_decode_num_accepted_tokens_per_pos"] == per_pos
    assert 0 < accepted < drafted


def test_tokens_one_speculative_step_appends_together_make_one_itl_gap():
    # vLLM's ITL is per iteration: three tokens accepted in one step are one chunk, not two 0 s gaps
    from labkit.metrics import MetricsCollector
    from labkit.request import RequestTimings

    m = MetricsCollector()
    m.record_finished(RequestTimings(0.0, 0.5, 1.0, 3.0, 6, 0), [1.0, 1.0, 1.0, 2.0, 3.0, 3.0])
    assert m.itl == [1.0, 1.0]
