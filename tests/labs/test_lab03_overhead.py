"""Lab 03 §7: the host line, its crossover with each profile's own step, and the remedies ladder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.labs.common.measure import Verdict
from labkit.labs.lab03_batching import overhead, overhead_view


def rows(points):
    return [overhead.OverheadRow(n, s, 0.0, 0.0) for n, s in points]


@given(st.floats(1e-7, 1e-5), st.floats(-1e-3, 1e-3))
def test_the_host_line_never_has_a_negative_intercept(slope, intercept):
    ns = [1, 64, 256, 1024]
    a, b = overhead.fit_linear(rows([(n, max(0.0, intercept + slope * n)) for n in ns]))
    assert a >= 0 and b >= 0


def test_an_exact_line_is_recovered():
    a, b = overhead.fit_linear(rows([(n, 2e-4 + 3e-6 * n) for n in (1, 10, 100)]))
    assert a == pytest.approx(2e-4) and b == pytest.approx(3e-6)


def test_the_crossover_meets_the_simulators_own_step_and_comes_earlier_for_a_small_model():
    host = [overhead.OverheadRow(n, 3e-6 * n, 0.0, 0.0) for n in (1, 64, 256, 1024, 4096)]   # 3 µs per request
    small = overhead.measured_crossover(host, "smollm2-135m", "h100-sxm", 16)
    large = overhead.measured_crossover(host, "llama-3-8b", "h100-sxm", 16)
    assert small.reached and small.below < small.n < small.above
    assert 3e-6 * small.below < overhead.model_step_s(small.below, "smollm2-135m", "h100-sxm", 16)
    assert 3e-6 * small.above >= overhead.model_step_s(small.above, "smollm2-135m", "h100-sxm", 16)
    # Llama-3-8B's decode step costs ~23 µs more per request (2 FLOPs x 8B parameters per token at 70 %
    # of 989 TFLOP/s): a 3 µs-per-request host path never reaches it.
    assert not large.reached and large.below == 4096


def test_saturation_accepts_the_step_as_a_function_of_concurrency():
    host = rows([(n, 3e-6 * n) for n in (1, 1024)])
    step = 0.005
    assert overhead.saturation_concurrency(host, step) == pytest.approx(step / 3e-6, rel=0.01)
    n = overhead.saturation_concurrency(host, lambda n: 1e-3 + 1e-6 * n)
    assert 3e-6 * n == pytest.approx(1e-3 + 1e-6 * n, rel=0.01)


def test_the_remedies_ladder_measures_every_rung_on_the_virtual_clock():
    run = overhead.remedies(16, "SmolLM2-135M / H100", steps=2, rounds=1)
    assert list(run.rows) == [name for name, _ in overhead.RUNGS]
    for r in run.rows.values():
        assert r.step_s > 0 and 0 < r.busy_share <= 1 and r.tokens_per_s > 0
    sync, asynchronous = run.rows["+ persistent batch"], run.rows["+ async scheduling"]
    assert sync.step_s >= sync.model_s                   # synchronous: host + model
    assert asynchronous.step_s >= asynchronous.model_s   # overlapped: never shorter than the accelerator
    assert len(run.step_ratio("+ async scheduling", "+ persistent batch")) == 1
    verdict = overhead_view.async_verdict(run, load=None)
    assert isinstance(verdict, Verdict) and overhead_view.async_sentence(verdict, run)


def test_the_host_sweep_keeps_every_round_and_the_context_it_ran_at():
    sweep = overhead.host_sweep([1, 8], rounds=2, steps=2)
    assert [r.num_running for r in sweep.rows] == [1, 8] and len(sweep.rounds) == 2
    assert sweep.context_len > overhead.PROMPT_LEN
    table = overhead_view.host_vs_step_table(sweep.rows, sweep.context_len)
    assert len(table.rows) == 2
    lines = overhead_view.crossover_lines(sweep.rows, sweep.context_len)
    assert len(lines) == 1 + len(overhead.PROFILES)
    for profile in overhead.PROFILES:
        v = overhead_view.host_vs_step_verdict(sweep.rounds, profile, sweep.context_len, None)
        assert overhead_view.host_vs_step_sentence(v, profile, 8)
