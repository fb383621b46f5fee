"""Lab 03's timed verdicts under injected contention: the engines run for real
(the simulator), their time comes from a work clock (known costs), and a contended clock over it
never turns a verdict clearly the other way."""

from __future__ import annotations

import functools

import pytest

import labkit
from labkit.labs.common import measure
from labkit.labs.lab03_batching import overhead
from tests.labs.noise import WorkClock, assert_never_clearly_opposite


@pytest.fixture
def work():
    return WorkClock()


@pytest.fixture
def quiet_machine(monkeypatch):
    """Contention comes from the injected clock alone, not from this machine's load."""
    monkeypatch.setattr(measure, "compare", functools.partial(measure.compare, load=lambda: 0.0))


def test_the_real_async_comparison_reads_the_injected_clock(work, quiet_machine):
    with measure.clock_override(measure.Clock("work clock", work)):
        assert measure.wall_clock().name == "work clock"
    assert measure.wall_clock().name.startswith("wall clock")


def test_contention_never_makes_async_scheduling_clearly_slower(work, quiet_machine, monkeypatch):
    real_generate = labkit.LLM.generate

    def generate(self, prompts, params, *args, **kwargs):
        out = real_generate(self, prompts, params, *args, **kwargs)
        work.advance(0.7 if self.engine.config.async_scheduling else 1.0)   # async hides the host's work
        return out

    monkeypatch.setattr(labkit.LLM, "generate", generate)
    assert_never_clearly_opposite(
        work, lambda: overhead.real_model_async(batch=2, max_tokens=3, rounds=4, model="sim"), "greater",
        verdict_of=lambda r: r.comparison.verdict)


@pytest.fixture(scope="module")
def real_pair():
    from labkit.labs.lab03_batching import offline

    make = offline.real_engine_factory(2, max_model_len=64)
    return make("static"), make("continuous")


def test_contention_never_makes_continuous_batching_clearly_slower_on_the_real_model(work, real_pair, monkeypatch):
    from labkit.labs.lab03_batching import offline
    from labkit.traces import TraceRequest

    real_replay = offline.replay

    def replay(engine, trace, **kwargs):
        out = real_replay(engine, trace, **kwargs)
        work.advance(float(out.stats["num_steps"]))      # a step costs the same either way
        return out

    monkeypatch.setattr(offline, "replay", replay)
    monkeypatch.setattr(offline, "machine_load", lambda: 0.0)
    trace = [TraceRequest(0.0, p, o) for p, o in ((6, 3), (4, 1), (5, 3))]
    assert_never_clearly_opposite(
        work, lambda: offline.compare_engines(*real_pair, trace, rounds=2, lab=None), "greater",
        verdict_of=lambda c: c.verdict(), round_ratios_of=lambda c: c.round_ratios)
