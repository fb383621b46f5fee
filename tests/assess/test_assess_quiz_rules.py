"""The quiz's scoring rules from their definition (``labkit/assess/quiz.py``): the score counts a question's
first answer, however often it is answered or shown again; the attempts add up across showings; what is
written to the results summary is exactly that; a quiz refuses what it cannot show, by name."""

from __future__ import annotations

import sys

import pytest

from labkit.assess.questions import Feedback, MultipleChoice, Numeric
from labkit.assess.quiz import Quiz, _Attempts, _feedback_html, record_answer
from labkit.i18n import get_language, set_language
from labkit.report.results import read_summary

Q = sys.modules["labkit.assess.quiz"]


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    before = get_language()
    set_language("en")
    yield tmp_path / "results"
    set_language(before)


def choice(id="q1"):
    return MultipleChoice("Which?", ["a", "b", "c"], answer=1, id=id, shuffle=False)


def attempts(*verdicts: bool) -> _Attempts:
    a = _Attempts()
    for v in verdicts:
        a.record(Feedback(v, ""))
    return a


def saved(lab="02", key="q1"):
    return (read_summary(lab) or {}).get("quiz", {}).get(key)


def test_the_first_answer_is_the_score_and_every_answer_an_attempt():
    a = attempts(False, True, True)
    assert (a.count, a.first_correct, a.saved) == (3, False, 0)
    assert (attempts(True, False).first_correct, attempts().first_correct) == (True, None)


def test_an_answer_is_written_with_its_first_verdict_attempts_quiz_and_kind():
    a = attempts(False, True)
    record_answer("02", choice(), a, quiz_size=4, quiz="s3")
    assert saved() == {"first_attempt_correct": False, "attempts": 2, "quiz_size": 4, "quiz": "s3", "kind": "choice"}
    assert a.saved == 2
    a.record(Feedback(True, ""))
    record_answer("02", choice(), a, quiz_size=4, quiz="s3")
    assert saved()["attempts"] == 3 and saved()["first_attempt_correct"] is False      # 2 saved + 1 new
    number = Numeric("How many?", 8.0, id="n1")
    record_answer("02", number, attempts(True), quiz_size=4)
    assert saved(key="n1") == {"first_attempt_correct": True, "attempts": 1, "quiz_size": 4, "quiz": "quiz",
                               "kind": "numeric"}


def test_showing_a_question_again_keeps_its_first_verdict_and_adds_the_attempts():
    record_answer("02", choice(), attempts(True), quiz_size=3)
    again = attempts(False, False)                       # a new view of the same question: wrong twice
    record_answer("02", choice(), again, quiz_size=3)
    assert saved()["first_attempt_correct"] is True and saved()["attempts"] == 3
    third = attempts(False)
    record_answer("02", choice(), third, quiz_size=3)
    assert saved()["attempts"] == 4


@pytest.mark.parametrize("earlier,total", [(True, 1 + 2), (0, 1 + 2), (-3, 1 + 2), ("5", 1 + 2), (None, 1 + 2),
                                           (4, 4 + 2)])
def test_a_recorded_attempt_count_that_is_not_a_positive_int_counts_as_one(earlier, total):
    from labkit.report.results import record
    record("02", "quiz", "q1", {"first_attempt_correct": False, "attempts": earlier})
    record_answer("02", choice(), attempts(True, True), quiz_size=3)
    assert saved()["attempts"] == total and saved()["first_attempt_correct"] is False


def test_a_recorded_entry_without_a_boolean_verdict_is_replaced():
    from labkit.report.results import record
    record("02", "quiz", "q1", {"first_attempt_correct": 1, "attempts": 7})
    record_answer("02", choice(), attempts(True, False), quiz_size=3)
    assert saved()["first_attempt_correct"] is True and saved()["attempts"] == 2


def test_nothing_is_written_without_a_lab_or_an_answer():
    record_answer(None, choice(), attempts(True), quiz_size=3)
    record_answer("02", choice(), attempts(), quiz_size=3)
    assert saved() is None


def test_the_feedback_says_which_attempt_it_is_and_is_coloured_by_its_verdict():
    assert _feedback_html(None) == ""
    right = _feedback_html(Feedback(True, "Yes."), attempts=1)
    assert right == '<div style="color:#1b7f3b;margin:4px 0 8px 0">Yes.</div>'
    wrong = _feedback_html(Feedback(False, "No."), attempts=2)
    assert wrong == '<div style="color:#b3261e;margin:4px 0 8px 0">No. (attempt 2; the score counts the first)</div>'


def test_the_score_line_counts_answered_questions_and_first_answers_right():
    quiz = Quiz([choice("a"), choice("b"), choice("c")], lab="02")
    view = quiz.view()
    assert view.score.value == "Answered 0/3, right at the first attempt 0/3"
    view.views[0].answer(0)
    view.views[0].answer(1)                 # right at the second attempt: answered, not right
    view.views[1].answer(1)
    assert view.score.value == "Answered 2/3, right at the first attempt 1/3"
    assert saved(key="a")["attempts"] == 2 and saved(key="a")["quiz_size"] == 3 and saved(key="b")["attempts"] == 1
    assert "Concept check" in view.header.value
    titled = Quiz([choice("a")], title={"zh": "小测", "en": "Check"}).view()
    assert "Check" in titled.header.value


def test_a_quiz_refuses_what_it_cannot_show_by_name():
    with pytest.raises(ValueError, match="^a quiz needs at least one question$"):
        Quiz([])
    with pytest.raises(TypeError, match="MultipleChoice, Numeric, Ordering or WhichFigure, got str$"):
        Quiz([choice(), "what?"])
    for bad in ("", 3):
        with pytest.raises(ValueError, match=f"^id must be a non-empty string, got {bad!r}$"):
            Quiz([choice()], id=bad)
    quiz = Quiz([choice("a"), choice("b")], title="T", lab="03", id="final")
    assert (quiz.title, quiz.lab, quiz.id, len(quiz.questions)) == ("T", "03", "final", 2)
    with pytest.raises(ValueError, match="^expected 2 answers, got 1$"):
        quiz.check([1])
    assert [f.correct for f in quiz.check([1, 0])] == [True, False]
    assert quiz.view().quiz_id == "final" and quiz.view().lab == "03"
    assert Q.KINDS[MultipleChoice] == "choice"
