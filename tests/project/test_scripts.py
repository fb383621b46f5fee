"""The maintainers' scripts (``scripts/``) still import after the code and the tests they reach move: each is
imported as a module (its ``main`` is not run), and the learner's walk builds its exercise answers from the
exercise audit in the tests. A script is not run by ``make test`` otherwise, so a moved module would only be
found the next time someone records the labs or walks them."""

from __future__ import annotations

import importlib
import json
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


def test_the_timings_file_never_mixes_two_cpus(tmp_path, monkeypatch):
    """A lab's Run All time from one CPU next to another CPU's times would be printed under one CPU line:
    a file written on another CPU is replaced, one written on this CPU keeps its other mode and conversion."""
    from scripts import time_labs

    path = tmp_path / "lab-timings.json"
    monkeypatch.setattr(time_labs, "_cpu_line", lambda: "CPU A")
    time_labs.write_timings(path, [{"lab": "01_kv", "wall_s": 10.0, "load_before": 0.5}], fast=False, convert_s=5.0)
    time_labs.write_timings(path, [{"lab": "01_kv", "wall_s": 3.0, "load_before": 0.5}], fast=True, convert_s=None)
    same = json.loads(path.read_text(encoding="utf-8"))
    assert (same["full_s"], same["fast_s"], same["convert_s"]) == ({"01": 10.0}, {"01": 3.0}, 5.0)
    monkeypatch.setattr(time_labs, "_cpu_line", lambda: "CPU B")
    time_labs.write_timings(path, [{"lab": "02_pa", "wall_s": 20.0, "load_before": 0.5}], fast=True, convert_s=None)
    other = json.loads(path.read_text(encoding="utf-8"))
    assert other["cpu"].startswith("CPU B") and other["fast_s"] == {"02": 20.0}
    assert other["full_s"] == {} and "convert_s" not in other
