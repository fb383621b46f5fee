"""Lab 03's helpers (labkit/labs/lab03_batching) compute what the lab says they compute.

Simulated runs use small traces; real-model checks use a handful of tokens.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from labkit.config import EngineConfig
from labkit.labs.exercises import exercise
from labkit.labs.lab03_batching import (
    chunked,
    offline,
    online,
    overhead,
    preemption,
    scaling,
    solutions,
    views,
    workloads,
)
from labkit.labs.lab03_batching.quiz import questions
from labkit.replay import static_decode_occupancy
from labkit.traces import TraceRequest

NOTEBOOK = Path(__file__).resolve().parents[2] / "labs" / "03_batching.ipynb"


def sim_factory(max_num_seqs: int, budget: int = 1024):
    from labkit import LLM, EngineConfig

    def make(scheduler: str):
        return LLM(model="sim", config=EngineConfig(scheduler=scheduler, max_num_seqs=max_num_seqs, max_model_len=512,
                                                    max_num_batched_tokens=budget))
    return make


# ----------------------------------------------------------------------------- workloads

def test_anyscale_trace_has_512_token_prompts_and_capped_exponential_outputs():
    trace = workloads.anyscale_trace(4000, 1536, seed=1)
    assert {r.prompt_len for r in trace} == {512} and {r.arrival_s for r in trace} == {0.0}
    outputs = [r.output_len for r in trace]
    assert max(outputs) <= 1536 and min(outputs) >= 1
    assert 120 < statistics.mean(outputs) < 136          # Exp(mean 128), nearly uncapped at 1536
    assert max(r.output_len for r in workloads.anyscale_trace(200, 32)) == 32


def test_gamma_arrivals_keep_the_mean_rate_and_burstiness_raises_the_spread():
    base = [TraceRequest(0.0, 4, 4)] * 4000
    poisson = workloads.gamma_arrivals(base, rate=5.0, burstiness=1.0, seed=0)
    bursty = workloads.gamma_arrivals(base, rate=5.0, burstiness=0.25, seed=0)

    def gaps(trace):
        return [b.arrival_s - a.arrival_s for a, b in zip(trace, trace[1:])]
    for trace in (poisson, bursty):
        assert trace[0].arrival_s == 0.0 and statistics.mean(gaps(trace)) == pytest.approx(0.2, rel=0.1)
    cv = [statistics.pstdev(gaps(t)) / statistics.mean(gaps(t)) for t in (poisson, bursty)]
    assert cv[0] == pytest.approx(1.0, abs=0.1) and cv[1] == pytest.approx(2.0, abs=0.25)   # 1/sqrt(shape)


@pytest.mark.parametrize("kwargs, field", [(dict(rate=0), "rate"), (dict(rate=1, burstiness=-1), "burstiness")])
def test_gamma_arrivals_reject_bad_knobs_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        workloads.gamma_arrivals([TraceRequest(0.0, 1, 1)], **kwargs)


# ----------------------------------------------------------------------------- static occupancy

def test_exercise_solution_is_the_engines_prediction():
    rng = random.Random(3)
    for _ in range(50):
        lens = [rng.randint(1, 60) for _ in range(rng.randint(1, 30))]
        seqs = rng.randint(1, 9)
        assert solutions.static_decode_occupancy(lens, seqs) == static_decode_occupancy(lens, seqs)


def test_predicted_static_occupancy_equals_the_sim_engines_decode_occupancy():
    """Whole batches prefilled in one step (a budget that fits them): the decode-only steps are exactly
    the formula's slot-steps."""
    trace = [TraceRequest(0.0, 8, o) for o in (30, 3, 7, 12, 2, 25, 9, 1, 4, 16)]
    comparison = offline.compare_offline(sim_factory(4, budget=4 * 8), trace)
    assert comparison.static.decode_occupancy_perc == pytest.approx(comparison.predicted_static_occupancy_perc, abs=1e-9)
    assert comparison.predicted_static_occupancy_perc == pytest.approx(
        100 * (29 + 2 + 6 + 11 + 1 + 24 + 8 + 0 + 3 + 15) / (4 * 29 + 4 * 24 + 4 * 15))


# ----------------------------------------------------------------------------- offline

def test_continuous_needs_fewer_steps_and_the_ceiling_is_bounded_by_the_longest_request():
    trace = [TraceRequest(0.0, 8, o) for o in [40] + [3] * 15]
    c = offline.compare_offline(sim_factory(4), trace)
    assert c.continuous.steps < c.static.steps
    assert c.continuous.steps >= c.longest_output
    assert c.step_ceiling == c.static.steps / c.continuous.steps <= c.longest_bound
    assert c.time_ratio == pytest.approx(c.continuous.tokens_per_s / c.static.tokens_per_s)
    assert c.static.output_tokens == c.continuous.output_tokens == 40 + 45
    assert c.static.simulated and c.continuous.simulated
    assert c.continuous.occupancy_while_waiting_perc == 100.0      # queued requests refill every freed slot
    assert c.static.occupancy_while_waiting_perc < 100.0            # static batches idle while others wait


def test_real_model_static_and_continuous_give_the_same_greedy_tokens(llm):
    trace = [TraceRequest(0.0, p, o) for p, o in ((6, 5), (9, 2), (4, 3))]
    c = offline.compare_offline(offline.real_engine_factory(2, max_model_len=64), trace)
    assert offline.same_outputs(c)
    assert [len(v) for v in c.static.outputs.values()] == [5, 2, 3]
    assert not c.static.simulated and c.static.seconds > 0


def test_anyscale_static_batch_is_what_max_length_reservations_fit():
    llm = offline.anyscale_engine("static, max-length reservation", max_model_len=544)
    assert llm.engine.config.max_num_seqs == offline.pool_slots() // 544
    assert offline.anyscale_engine("continuous, paged KV", 544).engine.config.max_num_seqs == 256
    with pytest.raises(ValueError, match="system"):
        offline.anyscale_engine("dynamic", 544)


# ----------------------------------------------------------------------------- online

def test_goodput_counts_requests_that_meet_both_objectives():
    trace = workloads.gamma_arrivals([TraceRequest(0.0, 32, 8)] * 12, rate=20.0)
    everything = online.serve_trace(sim_factory(4)("continuous"), trace, 20.0, online.SLO(1e9, 1e9), "c")
    nothing = online.serve_trace(sim_factory(4)("continuous"), trace, 20.0, online.SLO(0.0, 0.0), "c")
    assert (everything.num_requests, everything.num_good, nothing.num_good) == (12, 12, 0)
    assert everything.goodput == pytest.approx(12 / everything.duration_s)
    assert everything.simulated and everything.ttft_p50_s <= everything.ttft_p99_s


def test_slo_capacity_is_the_highest_rate_before_attainment_first_drops():
    def result(rate, good):
        return online.ServingResult("x", rate, 10, 10.0, 0, 0, 0, 0, 0, 0, good, 0, True)
    results = [result(1, 10), result(2, 9), result(4, 5), result(8, 10)]
    assert online.slo_capacity(results) == 2
    assert online.slo_capacity([result(1, 5)]) is None
    assert online.saturated_throughput(results).rate in (1, 2, 4, 8)


def test_the_sweep_is_extended_until_continuous_batching_saturates():
    base = workloads.azure_like_trace("conv", 40, seed=0, max_total_tokens=4096)
    slo = online.SLO(ttft_s=2.0, tpot_s=0.1)
    start = online.rate_sweep(online.sim_server, lambda r: workloads.gamma_arrivals(base, r), [1, 4], slo)
    assert not online.saturates(start["continuous"][-1])            # the lab's first rates stop too early
    sweep = online.extend_to_saturation(start, online.sim_server, lambda r: workloads.gamma_arrivals(base, r), slo)
    rates = [r.rate for r in sweep["continuous"]]
    assert rates[:2] == [1, 4] and all(b == 2 * a for a, b in zip(rates[1:], rates[2:]))
    assert [r.rate for r in sweep["static"]] == rates and len(start["continuous"]) == 2   # a copy
    last = sweep["continuous"][-1]
    assert online.saturates(last) and last.goodput < last.throughput
    assert not any(online.saturates(r) for r in sweep["continuous"][:-1])
    assert online.saturation_rate(sweep["continuous"]) == last.rate


def test_static_batching_has_longer_ttft_than_continuous_under_arrivals():
    base = [TraceRequest(0.0, 16, o) for o in [60, 4, 4, 4, 4, 4, 4, 4]]
    trace = workloads.gamma_arrivals(base, rate=50.0, seed=2)
    results = online.rate_sweep(sim_factory(4), lambda _r: trace, [50.0], online.SLO(1.0, 1.0))
    assert results["static"][0].ttft_p99_s > results["continuous"][0].ttft_p99_s


# ----------------------------------------------------------------------------- scaling

def test_prefill_slope_knee_and_calibration_follow_the_roofline():
    prefill = [scaling.StepTiming("prefill", n, 0.001 * n + 0.01) for n in (32, 64, 128)]
    decode = [scaling.StepTiming("decode", 1, 0.05), scaling.StepTiming("decode", 8, 0.06)]
    assert scaling.prefill_slope(prefill) == pytest.approx(0.001)
    assert scaling.knee_tokens(decode, prefill) == pytest.approx(50)
    hw = scaling.calibrate(decode, prefill)
    from labkit.sim.cost import MODELS, step_time
    model = MODELS["smollm2-135m"]
    assert hw.mem_bandwidth == pytest.approx(model.weight_bytes / 0.05)
    assert step_time(model, hw, [1], [1]) == pytest.approx(0.05, rel=0.01)
    assert hw.compute == pytest.approx(2 * model.num_params / 0.001)


def test_decode_and_prefill_timings_come_from_real_engine_steps():
    llm = scaling.scaling_engine(max_batch=2, max_prompt=32)
    decode = scaling.decode_step_times(llm, [1, 2], steps=1, prompt_len=4)
    prefill = scaling.prefill_step_times(llm, [8, 32], repeats=1)
    assert [d.size for d in decode] == [1, 2] and all(d.step_s > 0 for d in decode + prefill)
    assert all(d.all_s and min(d.all_s) == d.step_s for d in decode)       # every step kept, for the spread
    assert not llm.engine.has_unfinished_requests()


# ----------------------------------------------------------------------------- chunked prefill

def test_chunking_caps_the_step_and_no_chunking_runs_the_prompt_in_one_step():
    whole, chunk = chunked.compare_chunking(long_len=48, budget=16, num_decoders=2, decode_tokens=12)
    assert whole.max_step_tokens >= 48 and chunk.max_step_tokens <= 16
    assert len(whole.decoder_itl_s) == len(chunk.decoder_itl_s) == 2 * 11
    assert whole.long_ttft_s > 0 and chunk.long_ttft_s > 0


# ----------------------------------------------------------------------------- scheduler overhead

def test_scheduler_overhead_rows_carry_the_measured_and_simulated_split():
    rows = overhead.scheduler_overhead([1, 16], steps=2)
    assert [r.num_running for r in rows] == [1, 16]
    for r in rows:
        assert r.simulated and r.scheduler_s > 0 and r.model_s > 0 and r.other_s >= 0
        assert 0 < r.scheduler_share(0.005) < 1


def test_engine_host_time_leaves_out_the_simulated_runner_and_keeps_its_parts():
    """engine_host_s = scheduler + input preparation + stats/events; the sim runner's own work is measured
    but not counted."""
    from bench import scheduler_overhead as bench

    (r,) = overhead.scheduler_overhead([8], steps=3)
    assert 0 < r.runner_s <= r.other_s
    assert r.engine_host_s == pytest.approx(r.scheduler_s + r.prepare_s + r.stats_events_s) and r.prepare_s > 0
    assert r.engine_host_s == pytest.approx(r.host_s - r.runner_s)
    assert r.engine_host_median_s >= r.engine_host_s and r.gc_s >= 0
    assert len(bench.row(r)) == len(bench.HEADERS)


def test_the_bench_times_another_checkout_against_this_one_in_alternating_processes():
    """``--against``: the self-contained timer runs on any checkout (here: this one against itself)."""
    from bench import scheduler_overhead as bench
    from bench.common import REPO

    arms = {name: bench.HOST_PATH_ARMS[name] for name in ("list-built, sync", "persistent batch, async")}
    section = bench.against(REPO, [1, 8], steps=2, rounds=2, arms=arms)
    assert [(r[0], r[1]) for r in section.rows] == [(arm, n) for arm in arms for n in ("1", "8")]
    assert all(float(r[2].replace(",", "")) > 0 and float(r[3].replace(",", "")) > 0 for r in section.rows)
    assert "alternating" in section.notes[0]


def test_saturation_concurrency_solves_the_fitted_line():
    rows = [overhead.OverheadRow(n, 1e-4 + 1e-5 * n, 0.01, 0.0) for n in (1, 64, 1024)]
    a, b = overhead.fit_linear(rows)
    assert (a, b) == (pytest.approx(1e-4), pytest.approx(1e-5))
    assert overhead.saturation_concurrency(rows, 0.005) == pytest.approx(490)
    flat = [overhead.OverheadRow(n, 1e-4, 0.01, 0.0) for n in (1, 64)]
    assert overhead.saturation_concurrency(flat, 0.005) is None


def test_config_overrides_are_checked_by_name():
    with pytest.raises(ValueError, match="no_such_switch"):
        overhead.overhead_engine(4, {"no_such_switch": True})
    assert overhead.overhead_engine(4, {"block_size": 32}).engine.config.block_size == 32


# ----------------------------------------------------------------------------- preemption

def test_a_small_pool_preempts_and_recomputes_exactly_the_lost_tokens():
    trace = [TraceRequest(0.0, 64, 96) for _ in range(12)]
    ample, tight = preemption.compare_pressure(trace, share=0.3)
    assert ample.num_preemptions == 0 and ample.tokens_lost == 0
    assert tight.num_preemptions > 0 and tight.tokens_lost > 0
    assert tight.tokens_computed == ample.tokens_computed + tight.tokens_lost
    assert ample.tokens_computed == sum(64 + 96 - 1 for _ in trace)


# ----------------------------------------------------------------------------- exercises, quiz, views

@pytest.mark.parametrize("name", ["static_occupancy", "preemption_victims", "schedule_step"])
def test_reference_solutions_pass_and_a_wrong_answer_fails(name):
    assert exercise(name).self_test().passed
    assert not exercise(name).check(lambda *args: 0).passed


def test_a_mean_of_per_batch_ratios_is_caught_with_the_hint_about_summing_first():
    def mean_of_ratios(output_lens, max_num_seqs):
        ratios = []
        for i in range(0, len(output_lens), max_num_seqs):
            batch = output_lens[i:i + max_num_seqs]
            if max(batch) > 1:
                ratios.append(sum(o - 1 for o in batch) / (max_num_seqs * (max(batch) - 1)))
        return 100.0 * sum(ratios) / len(ratios) if ratios else 0.0
    result = exercise("static_occupancy").check(mean_of_ratios)
    assert not result.passed and result.num_passed > 0


def test_preemption_victims_takes_the_most_recent_first():
    running = [("a", 40, 3), ("b", 30, 2), ("c", 20, 1)]
    assert solutions.preemption_victims(running, 0, 2) == (["c", "b"], 50)
    assert solutions.preemption_victims(running, 5, 2) == ([], 0)


def test_quiz_has_eight_or_more_questions_each_answerable_and_explained():
    qs = questions()
    assert len(qs) >= 8
    for q in qs:
        assert q.check(q.answer).correct
        assert getattr(q, "explanations", None) or getattr(q, "explanation", None)
        wrong = [i for i in range(len(getattr(q, "options", ()))) if i != q.answer]
        assert not any(q.check(i).correct for i in wrong)


def test_ceiling_sentence_reads_the_numbers_either_way():
    run = offline.OfflineRun("s", 1, 100, 10, 1.0, 1.0, 50.0, 50.0, 10.0, 4, True)
    fast, slow = (offline.OfflineRun("c", 1, 100, 5, s, 1.0, 90.0, 90.0, 10.0, 4, True) for s in (0.5, 2.0))
    up = views.ceiling_sentence("x", offline.OfflineComparison(run, fast, 5, 50.0))
    down = views.ceiling_sentence("x", offline.OfflineComparison(run, slow, 5, 50.0))
    assert "2.00" in up and "100%" in up
    assert "0.50" in down and "更慢" in down
    above = views.ceiling_sentence("x", offline.OfflineComparison(run, offline.OfflineRun("c", 1, 100, 5, 0.25, 1.0, 90.0, 90.0, 10.0, 4, True), 5, 50.0))
    assert "200%" in above and "超过上限" in above


def test_notebook_is_committed_without_outputs_and_follows_the_template():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] and c["execution_count"] is None for c in code)
    headings = [line for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("## ")]
    assert [h.split()[1] for h in headings] == [str(i) for i in range(1, len(headings) + 1)]
    assert sum("predict(" in "".join(c["source"]) for c in code) >= 5
    assert any("quiz()" in "".join(c["source"]) for c in code)


# ----------------------------------------------------------------------------- make bench section

def test_bench_section_reports_time_per_step_and_the_saturation_concurrency(capsys):
    from bench import scheduler_overhead as bench

    everything = bench.main(["--tiny"])
    sections = [s for s in everything if s.title.startswith("Host time per step")]
    assert len(sections) == (1 if overhead.host_path_switch() is None else 2)
    assert all([r[0] for r in s.rows] == ["1", "64"] for s in sections)
    assert capsys.readouterr().out.count("saturation concurrency") == len(sections)
    # then the remedies, one rung at a time, per profile: sync vs async, list-built vs persistent batch
    remedies = [s for s in everything if s.title.startswith("Host-path remedies")]
    assert len(remedies) == len(overhead.PROFILES)
    assert all([r[0] for r in s.rows] == [name for name, _ in overhead.RUNGS] for s in remedies)


def test_with_a_switch_the_bench_and_the_lab_run_it_off_then_on(monkeypatch):
    """Wiring check with a stand-in bool field: one extra sweep with the switch flipped."""
    from bench import scheduler_overhead as bench

    stand_in = overhead.Switch("enable_prefix_caching")
    monkeypatch.setattr(bench, "host_path_switch", lambda: stand_in)
    sections = [s for s in bench.main(["--tiny"]) if s.title.startswith("Host time per step")]
    assert [s.title.split(", ")[-1].split(" (")[0] for s in sections] == ["enable_prefix_caching=False",
                                                                           "enable_prefix_caching=True"]
    before, after = overhead.before_after([4], stand_in, steps=1)
    assert before[0].num_running == after[0].num_running == 4
    alone, none = overhead.before_after([4], None, steps=1)
    assert none is None and [r.num_running for r in alone] == [4]


def test_host_path_switch_is_none_unless_the_engine_config_has_the_field(monkeypatch):
    monkeypatch.setattr(overhead, "HOST_PATH_SWITCH_NAMES", ("no_such_field", "enable_chunked_prefill"))
    assert overhead.host_path_switch() == overhead.Switch("enable_chunked_prefill")
    monkeypatch.setattr(overhead, "HOST_PATH_SWITCH_NAMES", ("no_such_field",))
    assert overhead.host_path_switch() is None


@pytest.mark.parametrize("params", [dict(temperature=0.0), dict(temperature=0.8, top_p=0.9, seed=7)],
                         ids=["greedy", "seeded-sampling"])
def test_the_host_path_switch_changes_no_output_on_the_real_model(llm, params):
    """The optimisation the lab measures (section 7.1) leaves every token as it was."""
    from labkit import LLM, SamplingParams

    switch = overhead.host_path_switch()
    if switch is None:
        pytest.skip("this engine has no host-path optimisation switch")
    prompts = ["Name three colours.", "What is 2 + 2?", "Write a haiku about the sea."]
    outputs = []
    for enabled in (False, True):
        other = LLM(progress=False, config=EngineConfig(num_blocks=64, **switch.overrides(enabled)))
        outs = other.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True, **params))
        outputs.append([o.outputs[0].token_ids for o in outs])
    assert outputs[0] == outputs[1]


def test_fidelity_sentence_compares_the_direction_of_both_sides():
    def result(label, ttft, simulated):
        return online.ServingResult(label, 1.0, 1, 1.0, ttft, ttft, 0, 0, 0, 0, 1, 1, simulated)
    real = [result("static", 2.0, False), result("continuous", 0.5, False)]
    agree = views.fidelity_sentence(real, [result("static", 1.5, True), result("continuous", 0.3, True)])
    disagree = views.fidelity_sentence(real, [result("static", 0.2, True), result("continuous", 0.3, True)])
    assert "4.0" in agree and "5.0" in agree and "不一致" not in agree and "不一致" in disagree


def test_the_synthesis_ties_the_fit_ratio_and_both_gains_together():
    def run(label, steps, seconds, occupancy):
        return offline.OfflineRun(label, 10, 1000, steps, seconds, seconds, occupancy, occupancy, 50.0, 10, True)
    names = list(offline.ANYSCALE_SYSTEMS)
    rows = [offline.AnyscaleRow(cap, {names[0]: run(names[0], 100, 8.0, 20.0), names[1]: run(names[1], 60, 4.0, 30.0),
                                      names[2]: run(names[2], 30, 4.0 / gain, 30.0 * gain)})
            for cap, gain in ((32, 1.5), (1536, 3.0))]
    real = offline.OfflineComparison(run("static", 50, 2.0, 40.0), run("continuous", 40, 1.6, 60.0), 20, 40.0)
    html = views.synthesis_table(rows, real)._repr_html_()
    assert "3.0×" in html and "1.5×" in html and "2.0×" in html and "6.0×" in html   # fit, memory, batching, total
    assert "1.5–3.0" in views.synthesis_sentence(rows) and "部分重合" in views.synthesis_sentence(rows)
    assert "之内" in views.synthesis_sentence(rows[1:]) and "低于" in views.synthesis_sentence(rows[:1])


# ----------------------------------------------------------------------------- sentences follow the rows they sit beside

def _host_rows(per_request_us: dict[int, float]) -> list:
    """Rows whose engine host path is ``n × per-request µs`` (scheduler time only, no runner)."""
    return [overhead.OverheadRow(n, 1e-6 * us * n, 0.0, 0.0) for n, us in per_request_us.items()]


# The shape: ~2.5 µs per request up to 1,024, but 4,096 costs 8 µs per request and drags a
# through-origin fit up, so the fitted line meets SmolLM2/H100's step below 64 while the table's
# 64 row still says "accelerator".
DRAGGED = {1: 40.0, 64: 3.0, 256: 2.5, 1024: 2.5, 4096: 8.0}
SMALL = overhead.PROFILES["SmolLM2-135M / H100"]


def test_the_crossover_is_read_from_the_measured_rows_not_from_a_fit_they_disagree_with():
    from labkit.labs.lab03_batching import overhead_view

    rows, ctx = _host_rows(DRAGGED), 12
    longer = {r.num_running: r.engine_host_s > overhead.model_step_s(r.num_running, *SMALL, ctx) for r in rows}
    assert longer == {1: False, 64: False, 256: True, 1024: True, 4096: True}
    a, b = overhead.fit_linear(rows, value=lambda r: r.engine_host_s)
    assert a + b * 64 > overhead.model_step_s(64, *SMALL, ctx)  # the fit contradicts the 64 row
    c = overhead.measured_crossover(rows, *SMALL, ctx)
    assert (c.below, c.above) == (64, 256) and 64 < c.n < 256
    text = " ".join(overhead_view.crossover_lines(rows, ctx))
    assert f"{c.n:,.0f}" in text and "64" in text and "256" in text and "主机线在" not in text
    summary = str(views.summary_table(_offline_for_summary(), _decode_for_summary(), c))
    assert f"{c.n:,.0f}" in summary


def test_a_crossover_beyond_the_measured_range_is_said_to_be_not_reached():
    from labkit.labs.lab03_batching import overhead_view

    rows = _host_rows({1: 1.0, 64: 1.0, 256: 1.0})
    c = overhead.measured_crossover(rows, *SMALL, 12)
    assert not c.reached and c.below == 256
    assert "没有追上" in overhead_view.crossover_text(c) and "256" in overhead_view.crossover_text(c)
    already = overhead.measured_crossover(_host_rows({1: 1e4, 64: 1e3}), *SMALL, 12)
    assert (already.n, already.below) == (1.0, None)


def _offline_for_summary():
    def run(label, steps, seconds):
        return offline.OfflineRun(label, 4, 100, steps, seconds, seconds, 50.0, 50.0, 10.0, 4, True)
    return offline.OfflineComparison(run("static", 50, 2.0), run("continuous", 40, 1.6), 20, 40.0)


def _decode_for_summary():
    return [scaling.StepTiming("decode", 1, 0.010, (0.010, 0.011)), scaling.StepTiming("decode", 8, 0.012, (0.012, 0.013))]


def test_the_decode_table_prints_each_batchs_spread_and_a_busy_flag():
    quiet = [scaling.StepTiming("decode", 1, 0.010, (0.010, 0.011, 0.0105), 0.5, 2),
             scaling.StepTiming("decode", 8, 0.004, (0.004, 0.0042, 0.0041), 0.5, 2)]
    busy = [replace(quiet[0], load=6.0), replace(quiet[1], all_s=(0.004, 0.009))]
    text = str(views.scaling_table(quiet))
    assert "1.10×" in text and "否" in text and "是：不可靠" not in text and "0.40×（0.38–0.40）" in text
    text = str(views.scaling_table(busy))
    assert text.count("是：不可靠") == 2 and "2.25×" in text and "6.0" in text
    assert "正忙" in views.calibration_note(busy) and "正忙" not in views.calibration_note(quiet)


def _remedy_run():
    rows, steps = {}, {}
    for i, (name, _) in enumerate(overhead.RUNGS):
        rows[name] = overhead.OverheadRow(64, 1e-3, 2e-3, 0.0, engine_host_mean_s=1.5e-3, step_s=3e-3)
        steps[name] = [0.003 + 0.001 * i, 0.0031 + 0.001 * i, 0.0029 + 0.001 * i]
    return overhead.RemedyRun("SmolLM2-135M / H100", 64, rows, steps, 0.5)


def test_the_async_sentence_shows_the_step_statistic_its_verdict_and_the_table_use():
    from labkit.labs.lab03_batching import overhead_view

    run = _remedy_run()
    sentence = overhead_view.async_sentence(overhead_view.async_verdict(run, 0.5), run)
    table = str(overhead_view.remedies_table([run], {}))
    sync, async_ = run.steps[overhead.RUNGS[-2][0]], run.steps[overhead.RUNGS[-1][0]]
    for value in sync + async_:
        assert f"{1e3 * value:.2f}" in sentence and f"{1e3 * value:.2f}" in table
    assert f"{1e3 * statistics.median(async_):.2f}（" in table
    assert "异步调度（async scheduling）" in table and "+ async scheduling |" not in table


def test_throughput_above_its_step_ceiling_gets_a_note_and_rows_within_it_none():
    def run(steps, seconds):
        return offline.OfflineRun("x", 10, 1000, steps, seconds, seconds, 50.0, None, 50.0, 4, True)

    rows = [offline.AnyscaleRow(32, {"static, max-length reservation": run(100, 10.0),
                                     "continuous, paged KV": run(95, 8.0)})]
    table = str(views.anyscale_table(rows))
    assert "超过上限" in table and "只在每步耗时相同时成立" in table
    rows = [offline.AnyscaleRow(32, {"static, max-length reservation": run(100, 10.0),
                                     "continuous, paged KV": run(50, 8.0)})]
    assert "超过上限" not in str(views.anyscale_table(rows))


def test_learner_visible_row_labels_are_chinese_first_with_the_english_term():
    from labkit.labs.lab03_batching import overhead_view

    assert overhead_view.rung_name("+ async scheduling") == "+ 异步调度（async scheduling）"
    pools = preemption.compare_pressure([TraceRequest(0.0, 8, 8) for _ in range(4)], share=0.5)
    assert pools[0].label.startswith("够大的池（ample pool")


@pytest.mark.parametrize("load,steps,zh", [
    (0.5, [1.0, 1.2], "各轮相差 1.20 倍"),
    (9.0, [1.0, 1.0], "机器正忙（负载 9.0，2 个核）"),
    (0.5, [1.0, 1.7], "机器正忙（各轮相差 1.70 倍）"),
    (9.0, [1.0, 1.7], "机器正忙（负载 9.0，2 个核；各轮相差 1.70 倍）"),
])
def test_a_busy_rung_says_which_made_it_busy_the_load_or_the_rounds(load, steps, zh, monkeypatch):
    from labkit.i18n import get_language, set_language
    from labkit.labs.lab03_batching import overhead_view

    monkeypatch.setattr(overhead_view, "cores", lambda: 2)
    run = overhead.RemedyRun("SmolLM2-135M / H100", 64, {}, {"plain": steps}, load)
    before = get_language()
    try:
        set_language("zh")
        assert overhead_view.rung_confidence(run, "plain") == zh
    finally:
        set_language(before)
