"""A concept quiz drawn with ipywidgets, so it answers clicks in JupyterLab and in Voila alike.

Each click goes to the kernel, ``question.check(...)`` decides, and the per-option explanation is
written under the question. Text follows ``labkit.set_language``: a quiz on screen relabels itself.
Options are shown in this learner's shuffled order (``MultipleChoice.order``); the score counts
each question's FIRST answer (trying every option until one is green scores nothing), and a
question answered more than once says how many attempts it took.

    Quiz([MultipleChoice(...), Numeric(...)])   # last expression in a cell → the quiz is shown
    Quiz(questions, lab="02")                   # also records first answers in results/lab02.json

With ``lab``, each question's first answer (right or not) and its attempt count are written to the
lab's results summary (``labkit.labs.common.results``, section ``quiz``), keyed by the question's
id; ``labkit.assess.progress()`` reads them. Later attempts update the count, never the first verdict.
"""

from __future__ import annotations

from typing import Sequence, Union

import ipywidgets as W

from labkit.assess.questions import (
    LETTERS,
    Feedback,
    MultipleChoice,
    Numeric,
    parse_number,
)
from labkit.assess.text import Text, localize_html, relabel_on_language_change
from labkit.i18n import t
from labkit.labs.common.results import record

Question = Union[MultipleChoice, Numeric]

_GREEN, _RED = "#1b7f3b", "#b3261e"


def _feedback_html(feedback: Feedback | None, attempts: int = 1) -> str:
    if feedback is None:
        return ""
    colour = _GREEN if feedback.correct else _RED
    tries = ""
    if attempts > 1:
        tries = " " + t(f"（第 {attempts} 次作答；计分按第一次）", f"(attempt {attempts}; the score counts the first)")
    return f'<div style="color:{colour};margin:4px 0 8px 0">{localize_html(feedback.message)}{tries}</div>'


class _Attempts:
    """How often a question was answered and whether the first answer was right."""

    def __init__(self) -> None:
        self.count, self.first_correct = 0, None

    def record(self, feedback: Feedback) -> None:
        self.count += 1
        if self.first_correct is None:
            self.first_correct = feedback.correct


def record_answer(lab: str | None, question: "Question", attempts: _Attempts, quiz_size: int) -> None:
    """Write a question's first verdict and attempt count to the lab's results summary."""
    if lab is None or attempts.count == 0:
        return
    record(lab, "quiz", question.key(), {"first_attempt_correct": bool(attempts.first_correct),
                                         "attempts": attempts.count, "quiz_size": quiz_size,
                                         "kind": "choice" if isinstance(question, MultipleChoice) else "numeric"})


def _title_html(number: int, question: Text) -> str:
    return f"<b>{number}.</b> {localize_html(question)}"


class ChoiceView:
    """Option rows (letter button + text) in this learner's order; a click shows the explanation.

    ``order[i]`` is the original index of the option on row i; ``answer(index)`` takes an
    original index, as ``question.check`` does.
    """

    def __init__(self, question: MultipleChoice, number: int, on_answer) -> None:
        self.question, self.number, self.on_answer = question, number, on_answer
        self.order = question.order()
        self.choice: int | None = None
        self.attempts = _Attempts()
        self.title = W.HTML()
        self.buttons = [W.Button(description=LETTERS[i], layout=W.Layout(width="3em"))
                        for i in range(len(question.options))]
        self.labels = [W.HTML() for _ in question.options]
        for row, button in enumerate(self.buttons):
            button.on_click(lambda _b, index=self.order[row]: self.answer(index))
        self.feedback = W.HTML()
        rows = [W.HBox([b, label]) for b, label in zip(self.buttons, self.labels)]
        self.box = W.VBox([self.title, *rows, self.feedback])
        self.relabel()

    @property
    def result(self) -> Feedback | None:
        return None if self.choice is None else self.question.check(self.choice)

    def answer(self, index: int) -> None:
        self.choice = index
        result = self.result
        self.attempts.record(result)
        for row, button in enumerate(self.buttons):
            button.button_style = ("success" if result.correct else "danger") if self.order[row] == index else ""
        self.relabel()
        self.on_answer()

    def relabel(self) -> None:
        self.title.value = _title_html(self.number, self.question.question)
        for label, index in zip(self.labels, self.order):
            label.value = localize_html(self.question.options[index])
        self.feedback.value = _feedback_html(self.result, self.attempts.count)


class NumericView:
    """A text box, the unit and a check button; the answer is judged in the kernel."""

    def __init__(self, question: Numeric, number: int, on_answer) -> None:
        self.question, self.number, self.on_answer = question, number, on_answer
        self.submitted: str | None = None
        self.attempts = _Attempts()
        self.title = W.HTML()
        self.entry = W.Text(layout=W.Layout(width="12em"))
        self.unit = W.HTML()
        self.button = W.Button()
        self.button.on_click(lambda _b: self.answer(self.entry.value))
        self.feedback = W.HTML()
        self.box = W.VBox([self.title, W.HBox([self.entry, self.unit, self.button]), self.feedback])
        self.relabel()

    @property
    def result(self) -> Feedback | None:
        return None if self.submitted is None else self.question.check(self.submitted)

    def answer(self, value: str) -> None:
        self.submitted = value
        result = self.result
        if parse_number(value) is not None:            # a typo that is not a number is no attempt
            self.attempts.record(result)
        self.button.button_style = "success" if result.correct else "danger"
        self.relabel()
        self.on_answer()

    def relabel(self) -> None:
        self.title.value = _title_html(self.number, self.question.question)
        self.entry.placeholder = t("输入一个数", "type a number")
        self.unit.value = f"&nbsp;{localize_html(self.question.unit)}&nbsp;"
        self.button.description = t("检查", "Check")
        self.feedback.value = _feedback_html(self.result, self.attempts.count)


def _view_for(question: Question, number: int, on_answer):
    if isinstance(question, MultipleChoice):
        return ChoiceView(question, number, on_answer)
    if isinstance(question, Numeric):
        return NumericView(question, number, on_answer)
    raise TypeError(f"a quiz question must be MultipleChoice or Numeric, got {type(question).__name__}")


class QuizView:
    """The widgets of one displayed quiz plus a running score line."""

    def __init__(self, questions: Sequence[Question], title: Text | None, lab: str | None = None) -> None:
        self.title_text, self.lab = title, lab
        self.views = []
        for n, q in enumerate(questions, start=1):
            self.views.append(_view_for(q, n, self._answered(n - 1)))
        self.header, self.score = W.HTML(), W.HTML()
        self.box = W.VBox([self.header, *[v.box for v in self.views], self.score],
                          layout=W.Layout(border="1px solid #ccc", padding="8px", max_width="760px"))
        self.relabel()
        relabel_on_language_change(self.relabel_all)

    def _answered(self, index: int):
        def on_answer() -> None:
            view = self.views[index]
            record_answer(self.lab, view.question, view.attempts, len(self.views))
            self.relabel()
        return on_answer

    def relabel(self) -> None:
        answered = sum(v.attempts.count > 0 for v in self.views)
        right = sum(bool(v.attempts.first_correct) for v in self.views)
        n = len(self.views)
        title = self.title_text if self.title_text is not None else {"zh": "概念检查", "en": "Concept check"}
        self.header.value = f"<h4 style='margin:2px 0'>{localize_html(title)}</h4>"
        self.score.value = t(f"已作答 {answered}/{n}，第一次就答对 {right}/{n}",
                             f"Answered {answered}/{n}, right at the first attempt {right}/{n}")

    def relabel_all(self) -> None:
        for view in self.views:
            view.relabel()
        self.relabel()


class Quiz:
    """A list of questions shown together. ``quiz.check(answers)`` judges without any widget."""

    def __init__(self, questions: Sequence[Question], title: Text | None = None, lab: str | None = None) -> None:
        if not questions:
            raise ValueError("a quiz needs at least one question")
        for q in questions:
            if not isinstance(q, (MultipleChoice, Numeric)):
                raise TypeError(f"a quiz question must be MultipleChoice or Numeric, got {type(q).__name__}")
        self.questions = list(questions)
        self.title, self.lab = title, lab

    def check(self, answers: Sequence) -> list[Feedback]:
        if len(answers) != len(self.questions):
            raise ValueError(f"expected {len(self.questions)} answers, got {len(answers)}")
        return [q.check(a) for q, a in zip(self.questions, answers)]

    def view(self) -> QuizView:
        """Fresh widgets for this quiz (each display gets its own, with its own answers)."""
        return QuizView(self.questions, self.title, self.lab)

    def widget(self) -> W.VBox:
        return self.view().box

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)
