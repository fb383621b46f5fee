"""Exercises whose named cases show their expected values also hold random hidden cases: a lookup table
grown from the feedback (every named case's input mapped to its shown answer) passes every named case
and still fails the exercise."""

from __future__ import annotations

import importlib

import pytest

from labkit.labs.exercises import exercise


def _reference(ex):
    module, _, name = ex.reference.partition(":")
    return getattr(importlib.import_module(module), name)


def _inputs(check) -> tuple:
    seen = []
    check.run(lambda *args: seen.append(args), None)
    return seen[0]


def _lookup_cheat(ex):
    """The learner's cheat: the named (revealed) cases' inputs mapped to the answers their feedback showed."""
    reference = _reference(ex)
    table = {repr(_inputs(c)): reference(*_inputs(c)) for c in ex.checks if c.reveal}

    def cheat(*args):
        return table.get(repr(args), [] if isinstance(next(iter(table.values())), list) else 0)
    return cheat


@pytest.mark.parametrize("name, kwargs", [("expected_tokens_per_step", {}), ("best_k", {}), ("ngram_propose", {}),
                                          ("pick_config", {})])
def test_a_lookup_table_of_the_shown_cases_fails_a_hidden_case(name, kwargs):
    ex = exercise(name, **kwargs)
    assert any(not c.reveal for c in ex.checks), "no hidden case"
    first_hidden = next(i for i, c in enumerate(ex.checks) if not c.reveal)
    assert all(c.reveal for c in ex.checks[:first_hidden]) and not any(c.reveal for c in ex.checks[first_hidden:])
    result = ex.check(_lookup_cheat(ex))
    assert not result.passed and result.failure.hidden and result.failure.index >= first_hidden, result.message
    assert result.failure.expected is None


def test_hidden_cases_are_drawn_afresh_for_each_exercise():
    a, b = (exercise("best_k") for _ in range(2))
    hidden = [[_inputs(c) for c in ex.checks if not c.reveal] for ex in (a, b)]
    assert hidden[0] != hidden[1]
