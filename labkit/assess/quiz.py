"""A concept quiz drawn with ipywidgets, so it answers clicks in JupyterLab and in Voila alike.

Each click goes to the kernel, ``question.check(...)`` decides, and the per-option explanation is
written under the question. Text follows ``labkit.set_language``: a quiz on screen relabels itself.
Options are shown in this learner's shuffled order (``MultipleChoice.order``); the score counts
each question's FIRST answer (trying every option until one is green scores nothing), and a
question answered more than once says how many attempts it took.

    Quiz([MultipleChoice(...), Numeric(...)])   # last expression in a cell → the quiz is shown
    Quiz(questions, lab="02")                   # also records first answers in results/lab02.json
    Quiz([Ordering(...)], lab="04", id="spec-steps")   # a short check inside a section, its own quiz

Kinds: ``MultipleChoice`` (letter buttons), ``Numeric`` (a box), ``Ordering`` (rows moved with ▲/▼,
then checked; the feedback names the first pair out of order) and ``WhichFigure`` (two to four
plotly figures titled A–D, a letter button under each).

With ``lab``, each question's first answer (right or not) and its attempt count are written to the
lab's results summary (``labkit.report.results``, section ``quiz``), keyed by the question's
id, with the quiz's ``id`` (so progress adds the sizes of a lab's quizzes); ``labkit.assess.progress()``
reads them. Later attempts update the count, never the first verdict, also across a re-shown quiz.
"""

from __future__ import annotations

from typing import Sequence, Union

import ipywidgets as W

from labkit.assess.questions import (
    LETTERS,
    Feedback,
    MultipleChoice,
    Numeric,
    Ordering,
    WhichFigure,
    parse_number,
)
from labkit.assess.text import Text, localize_html, relabel_on_language_change
from labkit.i18n import t
from labkit.report.results import read_summary, record

Question = Union[MultipleChoice, Numeric, Ordering, WhichFigure]
KINDS = {MultipleChoice: "choice", Numeric: "numeric", Ordering: "ordering", WhichFigure: "figure"}

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
        self.saved = 0          # how many of ``count`` are already in the results summary

    def record(self, feedback: Feedback) -> None:
        self.count += 1
        if self.first_correct is None:
            self.first_correct = feedback.correct


def record_answer(lab: str | None, question: "Question", attempts: _Attempts, quiz_size: int,
                  quiz: str = "quiz") -> None:
    """Write a question's first verdict and attempt count to the lab's results summary; ``quiz``
    names the quiz it belongs to (a lab may show short checks in its sections besides its final quiz).

    A question shown again (its cell re-run, or the notebook restarted and run again) starts a new view:
    the verdict already recorded stays the first one, and this view's new attempts are added to the
    recorded count, so showing a quiz again never replaces a first attempt."""
    if lab is None or attempts.count == 0:
        return
    summary = read_summary(lab) or {}
    before = summary.get("quiz", {}).get(question.key())
    first = attempts.first_correct
    count = attempts.count - attempts.saved
    if isinstance(before, dict) and isinstance(before.get("first_attempt_correct"), bool):
        first = before["first_attempt_correct"]
        earlier = before.get("attempts")
        count += earlier if isinstance(earlier, int) and not isinstance(earlier, bool) and earlier > 0 else 1
    else:
        count = attempts.count
    record(lab, "quiz", question.key(), {"first_attempt_correct": bool(first),
                                         "attempts": count, "quiz_size": quiz_size, "quiz": quiz,
                                         "kind": KINDS[type(question)]})
    attempts.saved = attempts.count


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


class OrderingView:
    """The items as rows with ▲/▼ buttons, starting from this learner's shuffled order, and a check
    button; every check is an attempt (the arrangement is always each item once)."""

    def __init__(self, question: Ordering, number: int, on_answer) -> None:
        self.question, self.number, self.on_answer = question, number, on_answer
        self.arrangement = question.start_order()
        self.submitted: list[int] | None = None
        self.attempts = _Attempts()
        self.title = W.HTML()
        self.labels = [W.HTML(layout=W.Layout(min_width="24em")) for _ in question.items]
        self.ups = [W.Button(description="▲", layout=W.Layout(width="3em")) for _ in question.items]
        self.downs = [W.Button(description="▼", layout=W.Layout(width="3em")) for _ in question.items]
        for row, (up, down) in enumerate(zip(self.ups, self.downs)):
            up.on_click(lambda _b, row=row: self.move(row, -1))
            down.on_click(lambda _b, row=row: self.move(row, +1))
        self.button = W.Button()
        self.button.on_click(lambda _b: self.answer(list(self.arrangement)))
        self.feedback = W.HTML()
        rows = [W.HBox([up, down, label], layout=W.Layout(align_items="center"))
                for up, down, label in zip(self.ups, self.downs, self.labels)]
        self.box = W.VBox([self.title, *rows, self.button, self.feedback])
        self.relabel()

    @property
    def result(self) -> Feedback | None:
        return None if self.submitted is None else self.question.check(self.submitted)

    def move(self, row: int, step: int) -> None:
        """Swap the item on ``row`` with its neighbour above (-1) or below (+1)."""
        other = row + step
        if 0 <= other < len(self.arrangement):
            a = self.arrangement
            a[row], a[other] = a[other], a[row]
            self.relabel()

    def answer(self, order) -> None:
        self.submitted = list(order)
        result = self.result
        indices = self.question.parse(order)
        if indices is not None:                     # an arrangement that is not each item once is no attempt
            self.arrangement = indices
            self.attempts.record(result)
        self.button.button_style = "success" if result.correct else "danger"
        self.relabel()
        self.on_answer()

    def relabel(self) -> None:
        self.title.value = _title_html(self.number, self.question.question)
        for row, (label, index) in enumerate(zip(self.labels, self.arrangement)):
            label.value = f"<span class='labkit-order-item'>{row + 1}. {localize_html(self.question.items[index])}</span>"
            self.ups[row].disabled, self.downs[row].disabled = row == 0, row == len(self.arrangement) - 1
        self.button.description = t("检查顺序", "Check the order")
        self.feedback.value = _feedback_html(self.result, self.attempts.count)


def _plotly_output(fig) -> dict:
    """A plotly figure as one display_data output, in the mimetype JupyterLab's and Voila's plotly
    renderer draws (what ``fig.show()`` sends there); set on an Output widget directly, so it needs
    no running display hook and a test can read it."""
    import json

    figure = json.loads(fig.to_json())
    figure["config"] = {"displayModeBar": False, "responsive": False}
    return {"output_type": "display_data", "metadata": {},
            "data": {"application/vnd.plotly.v1+json": figure, "text/plain": "<plotly figure>"}}


class FigureView(ChoiceView):
    """The figures side by side in this learner's order, titled A, B, C, D, each with its letter
    button under it; a click shows why that figure does or does not show the phenomenon. Picking
    and marking are ``ChoiceView``'s; only the layout and the relabel differ."""

    def __init__(self, question: WhichFigure, number: int, on_answer) -> None:
        import plotly.graph_objects as go

        self.question, self.number, self.on_answer = question, number, on_answer
        self.order = question.order()
        self.choice: int | None = None
        self.attempts = _Attempts()
        self.title = W.HTML()
        self.buttons = [W.Button(description=LETTERS[row], layout=W.Layout(width="4em")) for row in range(len(self.order))]
        cells = []
        for row, index in enumerate(self.order):
            fig = go.Figure(question.figure(index))
            fig.update_layout(title=dict(text=f"<b>{LETTERS[row]}</b>", x=0.02), width=360, height=280,
                              margin=dict(l=40, r=10, t=40, b=40), showlegend=False)
            out = W.Output(layout=W.Layout(width="370px"))
            out.outputs = (_plotly_output(fig),)
            self.buttons[row].on_click(lambda _b, index=index: self.answer(index))
            cells.append(W.VBox([out, self.buttons[row]], layout=W.Layout(align_items="center")))
        self.feedback = W.HTML()
        grid = W.Box(cells, layout=W.Layout(display="flex", flex_flow="row wrap"))
        self.box = W.VBox([self.title, grid, self.feedback])
        self.relabel()

    def relabel(self) -> None:
        self.title.value = _title_html(self.number, self.question.question)
        self.feedback.value = _feedback_html(self.result, self.attempts.count)


_VIEWS = {MultipleChoice: ChoiceView, Numeric: NumericView, Ordering: OrderingView, WhichFigure: FigureView}


def _view_for(question: Question, number: int, on_answer):
    view = _VIEWS.get(type(question))
    if view is None:
        raise TypeError("a quiz question must be MultipleChoice, Numeric, Ordering or WhichFigure, "
                        f"got {type(question).__name__}")
    return view(question, number, on_answer)


class QuizView:
    """The widgets of one displayed quiz plus a running score line."""

    def __init__(self, questions: Sequence[Question], title: Text | None, lab: str | None = None,
                 quiz_id: str = "quiz") -> None:
        self.title_text, self.lab, self.quiz_id = title, lab, quiz_id
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
            record_answer(self.lab, view.question, view.attempts, len(self.views), self.quiz_id)
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

    def __init__(self, questions: Sequence[Question], title: Text | None = None, lab: str | None = None,
                 id: str = "quiz") -> None:
        if not questions:
            raise ValueError("a quiz needs at least one question")
        for q in questions:
            if type(q) not in _VIEWS:
                raise TypeError("a quiz question must be MultipleChoice, Numeric, Ordering or WhichFigure, "
                                f"got {type(q).__name__}")
        if not isinstance(id, str) or not id:
            raise ValueError(f"id must be a non-empty string, got {id!r}")
        self.questions = list(questions)
        self.title, self.lab, self.id = title, lab, id

    def check(self, answers: Sequence) -> list[Feedback]:
        if len(answers) != len(self.questions):
            raise ValueError(f"expected {len(self.questions)} answers, got {len(answers)}")
        return [q.check(a) for q, a in zip(self.questions, answers)]

    def view(self) -> QuizView:
        """Fresh widgets for this quiz (each display gets its own, with its own answers)."""
        return QuizView(self.questions, self.title, self.lab, self.id)

    def widget(self) -> W.VBox:
        return self.view().box

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)
