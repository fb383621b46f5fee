"""The quiz's widgets from what a learner does with them (``labkit/assess/quiz.py``): which button answers
which option, which one is coloured and how, what a click on "check" sends, how the ordering rows move and
where they stop, what the figures are drawn as; the labels in both languages. No browser: the widgets'
own ``click()`` runs the handlers a click in the page runs."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from labkit.assess.questions import MultipleChoice, Numeric, Ordering, WhichFigure
from labkit.assess.quiz import ChoiceView, FigureView, NumericView, OrderingView
from labkit.i18n import get_language, set_language


@pytest.fixture(autouse=True)
def english():
    before = get_language()
    set_language("en")
    yield
    set_language(before)


class Calls:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1


def choice_view() -> tuple[ChoiceView, Calls]:
    q = MultipleChoice("Which?", ["zero", "one", "two", "three"], answer=2, id="views-mc",
                       explanations=["no 0", "no 1", "yes 2", "no 3"])
    calls = Calls()
    return ChoiceView(q, 4, calls), calls


def test_a_choice_views_rows_are_lettered_and_each_button_answers_its_rows_option():
    view, calls = choice_view()
    assert [b.description for b in view.buttons] == ["A", "B", "C", "D"]
    assert [label.value for label in view.labels] == [["zero", "one", "two", "three"][i] for i in view.order]
    assert view.choice is None and view.result is None and view.feedback.value == ""
    assert view.title.value == "<b>4.</b> Which?"
    wrong_row = next(row for row, index in enumerate(view.order) if index != 2)
    view.buttons[wrong_row].click()
    assert view.choice == view.order[wrong_row] and calls.n == 1
    assert [b.button_style for b in view.buttons] == ["danger" if r == wrong_row else "" for r in range(4)]
    right_row = view.order.index(2)
    view.buttons[right_row].click()
    assert view.result.correct and calls.n == 2
    assert [b.button_style for b in view.buttons] == ["success" if r == right_row else "" for r in range(4)]
    assert "yes 2" in view.feedback.value and "attempt 2" in view.feedback.value


def numeric_view() -> tuple[NumericView, Calls]:
    calls = Calls()
    return NumericView(Numeric("How many?", 42.0, unit="tokens", id="views-n"), 2, calls), calls


def test_check_sends_what_is_typed_and_colours_the_button_by_the_verdict():
    view, calls = numeric_view()
    assert view.submitted is None and view.result is None and view.feedback.value == ""
    assert (view.entry.placeholder, view.button.description) == ("type a number", "Check")
    assert view.title.value == "<b>2.</b> How many?" and "tokens" in view.unit.value
    view.entry.value = "41"
    view.button.click()
    assert view.submitted == "41" and not view.result.correct and view.button.button_style == "danger"
    assert calls.n == 1 and view.attempts.count == 1 and "41 is too low" in view.feedback.value
    view.entry.value = "forty-two"                       # not a number: told so, and no attempt
    view.button.click()
    assert view.attempts.count == 1 and view.button.button_style == "danger" and "Please enter" in view.feedback.value
    view.entry.value = "42"
    view.button.click()
    assert view.result.correct and view.button.button_style == "success" and calls.n == 3
    assert "attempt 2" in view.feedback.value
    set_language("zh")
    view.relabel()
    assert (view.entry.placeholder, view.button.description) == ("输入一个数", "检查")
    assert view.title.value == "<b>2.</b> How many?" and "第 2 次作答" in view.feedback.value


def ordering_view(start: list[int]) -> tuple[OrderingView, Calls]:
    calls = Calls()
    view = OrderingView(Ordering("Order them", ["a", "b", "c", "d"], id="views-o"), 3, calls)
    view.arrangement = list(start)
    view.relabel()
    return view, calls


def test_the_arrows_swap_a_row_with_its_neighbour_and_stop_at_either_end():
    view, _ = ordering_view([3, 2, 1, 0])
    view.downs[1].click()                                # row 1 down: swaps with row 2
    assert view.arrangement == [3, 1, 2, 0]
    view.ups[1].click()                                  # row 1 up: swaps with row 0
    assert view.arrangement == [1, 3, 2, 0]
    view.move(0, -1)                                     # nothing above the first row
    view.move(3, +1)                                     # nothing below the last
    assert view.arrangement == [1, 3, 2, 0]
    view.move(3, -1)
    assert view.arrangement == [1, 3, 0, 2]
    assert [(u.disabled, d.disabled) for u, d in zip(view.ups, view.downs)] == \
        [(True, False), (False, False), (False, False), (False, True)]
    assert [label.value for label in view.labels] == [f"<span class='labkit-order-item'>{r + 1}. {x}</span>"
                                                      for r, x in enumerate("bdac")]


def test_check_the_order_sends_the_rows_as_they_stand_and_colours_the_verdict():
    view, calls = ordering_view([1, 0, 2, 3])
    assert view.button.description == "Check the order" and view.result is None
    view.button.click()
    assert view.submitted == [1, 0, 2, 3] and not view.result.correct and view.button.button_style == "danger"
    view.ups[1].click()
    view.button.click()
    assert view.submitted == [0, 1, 2, 3] and view.result.correct and view.button.button_style == "success"
    assert calls.n == 2 and view.attempts.count == 2


def test_each_figure_is_drawn_under_its_letter_as_a_plotly_output_and_its_button_answers_it():
    figs = [go.Figure(go.Bar(y=[i, i + 1])) for i in range(3)]
    q = WhichFigure("Which shows it?", figs, answer=1, explanations=["a", "b", "c"],
                    misconceptions=["m0", "", "m2"], id="views-f")
    calls = Calls()
    view = FigureView(q, 5, calls)
    assert view.choice is None and view.result is None and view.feedback.value == ""     # nothing said before a click
    assert [b.description for b in view.buttons] == ["A", "B", "C"]
    grid = view.box.children[1]
    for row, (cell, index) in enumerate(zip(grid.children, view.order)):
        (output,) = cell.children[0].outputs
        figure = output["data"]["application/vnd.plotly.v1+json"]
        assert output["output_type"] == "display_data" and output["data"]["text/plain"] == "<plotly figure>"
        assert figure["config"] == {"displayModeBar": False, "responsive": False}
        assert figure["layout"]["title"]["text"] == f"<b>{'ABC'[row]}</b>"
        assert figure["data"][0]["y"] == [index, index + 1]         # the figure of the option on this row
        assert cell.children[1] is view.buttons[row]
    view.buttons[view.order.index(1)].click()
    assert view.result.correct and calls.n == 1 and view.title.value == "<b>5.</b> Which shows it?"
    assert [b.button_style for b in view.buttons] == ["success" if i == 1 else "" for i in view.order]


def test_a_quiz_numbers_its_questions_from_one_and_records_them_under_its_id(tmp_path, monkeypatch):
    from labkit.assess.quiz import Quiz, QuizView, _view_for
    from labkit.report.results import read_summary

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    questions = [MultipleChoice("First?", ["a", "b"], answer=0, id="v-1", shuffle=False),
                 Numeric("Second?", 2.0, id="v-2"), Ordering("Third?", ["x", "y", "z"], id="v-3")]
    view = QuizView(questions, None, lab="07")
    assert [v.title.value.split("</b>")[0] for v in view.views] == ["<b>1.", "<b>2.", "<b>3."]
    assert view.box.children == (view.header, *[v.box for v in view.views], view.score)
    view.views[0].buttons[0].click()
    assert read_summary("07")["quiz"]["v-1"]["quiz"] == "quiz"          # the default id of a lab's final quiz
    Quiz(questions[1:2], lab="07").view().views[0].answer("2")
    assert read_summary("07")["quiz"]["v-2"]["quiz"] == "quiz"
    with pytest.raises(TypeError, match="^a quiz question must be MultipleChoice, Numeric, Ordering or WhichFigure, "
                                        "got str$"):
        _view_for("not a question", 1, lambda: None)


def test_the_ordering_rows_carry_their_arrows_and_label():
    view, _ = ordering_view([0, 1, 2, 3])
    assert [(u.description, d.description) for u, d in zip(view.ups, view.downs)] == [("▲", "▼")] * 4
    rows = view.box.children[1:5]
    assert [row.children for row in rows] == [(u, d, label) for u, d, label in zip(view.ups, view.downs, view.labels)]


def test_a_figure_output_is_display_data_with_empty_metadata():
    from labkit.assess.quiz import _plotly_output

    out = _plotly_output(go.Figure(go.Bar(y=[1])))
    assert out["metadata"] == {} and set(out) == {"output_type", "metadata", "data"}


def figure_view(figures=None) -> tuple[FigureView, Calls]:
    figures = figures or [go.Figure(go.Bar(y=[i, i + 1])) for i in range(4)]
    q = WhichFigure("Which shows it?", figures, answer=1, explanations=[f"why figure {i}" for i in range(len(figures))],
                    misconceptions=["m" if i != 1 else "" for i in range(len(figures))], id="views-f2")
    calls = Calls()
    return FigureView(q, 5, calls), calls


def test_a_click_on_a_figure_says_why_in_the_verdicts_colour_and_a_second_answer_counts_its_attempt():
    view, _ = figure_view()
    view.buttons[view.order.index(3)].click()
    assert "why figure 3" in view.feedback.value and "color:#b3261e" in view.feedback.value
    assert "attempt" not in view.feedback.value
    view.buttons[view.order.index(1)].click()
    assert "why figure 1" in view.feedback.value and "color:#1b7f3b" in view.feedback.value
    assert "(attempt 2; the score counts the first)" in view.feedback.value


def drawn(cell) -> dict:
    (output,) = cell.children[0].outputs
    return output["data"]["application/vnd.plotly.v1+json"]["layout"]


def test_each_figure_fits_inside_its_cell_and_draws_no_legend_whose_names_could_tell():
    named = [go.Figure([go.Scatter(y=[1, 2], name="thrashing"), go.Scatter(y=[2, 1], name="steady")]) for _ in range(3)]
    view, _ = figure_view(named)
    for cell in view.box.children[1].children:
        width = cell.children[0].layout.width.lower()
        assert width.endswith("px") and drawn(cell)["width"] <= float(width[:-2])   # not clipped, not overlapping
        assert drawn(cell)["showlegend"] is False


PLOTLY_MARGINS = {"l": 80, "r": 80, "t": 100, "b": 80}     # plotly.js's defaults, sized for a 700 x 450 figure


def test_a_small_figure_sets_margins_narrower_than_plotlys_which_would_leave_its_plot_a_fifth_of_it():
    view, _ = figure_view()
    for cell in view.box.children[1].children:
        margin = drawn(cell).get("margin", {})
        assert all(margin.get(side, default) < default for side, default in PLOTLY_MARGINS.items()), margin


def test_the_figures_wrap_onto_further_rows_rather_than_run_off_the_quizs_box():
    view, _ = figure_view()
    grid = view.box.children[1]
    assert "wrap" in grid.layout.flex_flow.lower().split()   # four cells side by side are wider than the box


def test_the_ordering_check_button_is_labelled_in_the_learners_language():
    view, _ = ordering_view([0, 1, 2, 3])
    assert view.button.description == "Check the order"
    set_language("zh")
    view.relabel()
    assert view.button.description == "检查顺序"


def test_a_quiz_without_a_title_is_headed_concept_check_in_the_learners_language():
    from labkit.assess.quiz import QuizView

    view = QuizView([Numeric("How many?", 1.0, id="views-t")], None)
    assert view.header.value == "<h4 style='margin:2px 0'>Concept check</h4>"
    set_language("zh")
    view.relabel()
    assert view.header.value == "<h4 style='margin:2px 0'>概念检查</h4>"


def test_a_quiz_keeps_a_reading_width_that_holds_two_figures_side_by_side():
    """A quiz is a column, not the page's width: its box has a maximum width in px, wide enough for two of
    its figure cells side by side (four figures sit as two rows of two), and no wider than a reading column
    (800 px; on a full-width notebook a line of its text would run past 150 characters)."""
    from labkit.assess.quiz import QuizView

    view, _ = figure_view()
    cell = view.box.children[1].children[0].children[0].layout.width.lower()
    width = (QuizView([MultipleChoice("Q?", ["a", "b"], answer=0, shuffle=False)], None).box.layout.max_width
             or "").lower()
    assert width.endswith("px") and cell.endswith("px"), (width, cell)
    assert 2 * float(cell[:-2]) <= float(width[:-2]) <= 800
