"""The maintainers' scripts (``scripts/``) still import after the code and the tests they reach move: each is
imported as a module (its ``main`` is not run), and the learner's walk builds its exercise answers from the
exercise audit in the tests. A script is not run by ``make test`` otherwise, so a moved module would only be
found the next time someone records the labs or walks them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (REPO / "scripts").glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports(name, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))         # scripts run from their folder import siblings
    monkeypatch.syspath_prepend(str(REPO))
    importlib.import_module(f"scripts.{name}")


def test_the_learners_walk_answers_every_exercise_right_and_wrong(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    walk = importlib.import_module("scripts.learner_run")
    from labkit.labs.exercises import EXERCISES

    answers = walk.solutions()
    assert set(answers) == set(EXERCISES)
    assert all(callable(right) for _, right in answers.values())
    assert sum(wrong is not None for wrong, _ in answers.values()) >= len(EXERCISES) - 2
