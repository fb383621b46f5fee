"""Showing a quiz again (its cell re-run, or restart-and-run-all) keeps the recorded first attempt and
adds the new attempts; it never replaces the first verdict."""

from __future__ import annotations

import pytest

from labkit.assess import MultipleChoice, Quiz
from labkit.report.results import read_summary


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))


def _question():
    return MultipleChoice(question={"zh": "问", "en": "q"}, options=[{"zh": "对", "en": "r"}, {"zh": "错", "en": "w"}],
                          answer=0, explanations=[{"zh": "是", "en": "y"}, {"zh": "否", "en": "n"}], id="reshow-q",
                          misconceptions=("", "m"))


def _click(view, index):
    view.buttons[view.order.index(index)].click()


def _entry():
    return read_summary("04")["quiz"]["reshow-q"]


def test_a_reshown_quiz_keeps_the_first_attempt_and_adds_attempts():
    first = Quiz([_question()], lab="04").view().views[0]
    _click(first, 1)                                       # wrong first
    _click(first, 0)
    assert (_entry()["first_attempt_correct"], _entry()["attempts"]) == (False, 2)
    again = Quiz([_question()], lab="04").view().views[0]    # the cell run again: a new view
    _click(again, 0)                                       # right now, but it is the third attempt
    assert (_entry()["first_attempt_correct"], _entry()["attempts"]) == (False, 3)
    _click(again, 0)
    assert (_entry()["first_attempt_correct"], _entry()["attempts"]) == (False, 4)


def test_a_first_right_answer_stays_right_after_a_wrong_one_in_a_reshown_quiz():
    _click(Quiz([_question()], lab="04").view().views[0], 0)
    _click(Quiz([_question()], lab="04").view().views[0], 1)
    assert (_entry()["first_attempt_correct"], _entry()["attempts"]) == (True, 2)
