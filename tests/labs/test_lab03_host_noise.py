"""Lab 03 §7's host-path verdicts under injected contention.

The simulated engine runs for real; its host path is timed by the engine's own timers, which read
``labkit.host_clock`` (the injected clock inside ``measure.clock_override``). Here the scheduler's
work advances a work clock by a known cost per step (a fixed part and a part per running request)
and the simulator's stand-in for the model by another, which the lab must leave out of the host
path. Contention stretches are 0.5–5 steps of host work long.
"""

from __future__ import annotations

import time

import pytest

from labkit import host_clock
from labkit.labs.common import measure
from labkit.labs.lab03_batching import overhead, overhead_view
from tests.labs.noise import WorkClock, assert_never_clearly_opposite

PROFILE = "Llama-3-8B / H100"          # its accelerator step (~7 ms) is longer than the host path here
RUNNING = 16
STAND_IN_S = 1e-3                      # the simulated runner's own work per step (not host work)


@pytest.fixture
def work():
    return WorkClock()


def host_path_costs(monkeypatch, work: WorkClock, host_s: float) -> None:
    """Every engine the lab builds spends ``host_s`` of host work per step at ``RUNNING`` requests
    (a quarter fixed, the rest per running request) in its scheduler, and ``STAND_IN_S`` in the
    simulator's stand-in for the model."""
    build = overhead.overhead_engine

    def engine_on_work_clock(*args, **kwargs):
        llm = build(*args, **kwargs)
        engine = llm.engine
        schedule, next_byte = engine.scheduler.schedule, engine.runner.next_byte

        def timed_schedule(now):
            out = schedule(now)
            work.advance(host_s / 4 + 3 * host_s / 4 * len(engine.scheduler.running) / RUNNING)
            return out

        def timed_next_byte(request_id, position):
            work.advance(STAND_IN_S / RUNNING)
            return next_byte(request_id, position)

        engine.scheduler.schedule, engine.runner.next_byte = timed_schedule, timed_next_byte
        return llm

    monkeypatch.setattr(overhead, "overhead_engine", engine_on_work_clock)


def _accelerator_step(sweep: overhead.HostSweep) -> float:
    return overhead.model_step_s(RUNNING, *overhead.PROFILES[PROFILE], sweep.context_len)


def test_the_engines_host_timers_read_the_injected_clock_and_only_inside_the_block(work):
    with measure.clock_override(measure.Clock("work clock", work)):
        work.advance(2.5)
        assert host_clock.now() == 2.5
        with measure.clock_override(lambda: 7.0):
            assert host_clock.now() == 7.0
        assert host_clock.now() == 2.5               # the outer override again
    assert host_clock.now is time.perf_counter


def test_the_host_path_counts_the_engines_work_and_leaves_the_stand_in_out(work, monkeypatch):
    host_path_costs(monkeypatch, work, 2e-3)
    with measure.clock_override(measure.Clock("work clock", work)):
        sweep = overhead.host_sweep([1, RUNNING], rounds=2, steps=3)
    assert sweep.rows[-1].engine_host_s == pytest.approx(2e-3)
    assert sweep.rows[0].engine_host_s == pytest.approx(2e-3 / 4 + 3 * 2e-3 / 4 / RUNNING)


def test_contention_never_makes_the_host_path_clearly_longer_than_the_accelerator_step(work, monkeypatch):
    host_s = 4e-3                                  # quiet: host ÷ accelerator step ≈ 0.6
    host_path_costs(monkeypatch, work, host_s)
    monkeypatch.setattr(measure, "machine_load", lambda: 0.0)      # contention comes from the clock alone

    def run():
        sweep = overhead.host_sweep([1, RUNNING], rounds=2, steps=5)
        return sweep, overhead_view.host_vs_step_verdict(sweep.rounds, PROFILE, sweep.context_len, sweep.load)

    # a bare stopwatch (all timed steps ÷ their number) is what contention fools
    assert_never_clearly_opposite(
        work, run, "less", verdict_of=lambda r: r[1], episode=(0.5 * host_s, 5 * host_s),
        round_ratios_of=lambda r: [rows[-1].engine_host_mean_s / _accelerator_step(r[0]) for rows in r[0].rounds])


def test_contention_never_makes_async_scheduling_clearly_lengthen_the_step(work, monkeypatch):
    host_s = 7e-3                                  # about the accelerator step: overlap halves the step
    host_path_costs(monkeypatch, work, host_s)
    monkeypatch.setattr(measure, "machine_load", lambda: 0.0)
    (sync, _), (asynchronous, _) = overhead.RUNGS[-2], overhead.RUNGS[-1]

    def run():
        remedy = overhead.remedies(RUNNING, PROFILE, steps=4, rounds=3)   # as the lab runs it
        return remedy, overhead_view.async_verdict(remedy, remedy.load)

    assert_never_clearly_opposite(
        work, run, "less", verdict_of=lambda r: r[1], episode=(0.5 * host_s, 5 * host_s),
        round_ratios_of=lambda r: r[0].step_ratio(asynchronous, sync))
