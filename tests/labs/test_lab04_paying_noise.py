"""Lab 04's paying-regime row under injected contention: ``paying.measure_pair``
runs the real target and its n-gram engine on a copy-heavy prompt, their forward passes advance a
work clock (1 unit per pass plus 0.1 per row, so a verify step of k + 1 rows costs more than a plain
step, as on a CPU), and a contended clock over it never makes the row clearly slower than plain."""

from __future__ import annotations

import functools

import pytest

from labkit.labs.common import measure
from labkit.labs.lab04_speculative import paying
from tests.labs.noise import WorkClock, assert_never_clearly_opposite

K = 4
TARGET = paying.choose_target()


@pytest.fixture(scope="module")
def engines():
    engines = paying.Engines(TARGET.config)
    for name in ("plain", paying.engine_name("ngram", K)):
        engines.timed(name)                    # built and warmed up outside the timed test
    return engines


@pytest.fixture
def work(engines, monkeypatch):
    clock = WorkClock()
    runners = {id(llm.engine.runner): llm.engine.runner for llm in engines.llms.values()}
    for runner in runners.values():
        real = runner.execute

        def execute(decision, real=real):
            out = real(decision)
            clock.advance(1.0 + 0.1 * (out.shape[0] if out is not None else 0))
            return out

        monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(paying, "compare", functools.partial(measure.compare, load=lambda: 0.0))  # the clock's noise only
    return clock


def test_contention_never_makes_the_paying_row_clearly_slower_than_plain(engines, work):
    def row():
        return paying.measure_pair(engines, TARGET.name, "ngram", "copy", K, num_prompts=1, max_tokens=8, rounds=2)

    assert_never_clearly_opposite(work, row, "greater")
