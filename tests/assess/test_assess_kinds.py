"""Question kinds beyond multiple choice: ordering (exact, names the pair out of order) and which figure
shows a phenomenon (plotly figures labelled A–D); both as widgets, scored on the first attempt and
recorded in the lab's summary, which the progress view reads."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from labkit import set_language
from labkit.assess import Ordering, Quiz, WhichFigure
from labkit.assess.progress import read_progress
from labkit.report.results import read_summary


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    monkeypatch.setenv("LABKIT_LEARNER_ID", "test-learner")
    set_language("zh")
    return tmp_path


def _t(zh, en):
    return {"zh": zh, "en": en}


def steps() -> Ordering:
    return Ordering(_t("排序", "order"), [_t("起草", "draft"), _t("前向", "forward"), _t("比较", "compare"),
                                           _t("回滚", "roll back")],
                    reasons=[_t("起点", "start"), _t("前向要草稿", "needs drafts"), _t("比较要分布", "needs logits"),
                             _t("回滚要知道接受了几个", "needs the count")],
                    explanation=_t("每步至少一个 token", "one token at least"), id="steps")


def figures() -> WhichFigure:
    return WhichFigure(_t("哪张图在上升？", "Which one rises?"),
                       [go.Figure(go.Scatter(y=[1, 2, 3])), lambda: go.Figure(go.Scatter(y=[3, 2, 1])),
                        go.Figure(go.Scatter(y=[2, 2, 2]))],
                       answer=0, explanations=[_t("对：上升", "rises"), _t("下降", "falls"), _t("平的", "flat")],
                       misconceptions=["", "reads the axis backwards", "noise is a trend"], id="rises")


# ----------------------------------------------------------------------------- ordering

def test_an_ordering_is_right_only_in_the_exact_order():
    q = steps()
    assert q.check([0, 1, 2, 3]).correct and "每步至少一个 token" in q.check([0, 1, 2, 3]).message
    assert q.check(["起草", "前向", "比较", "回滚"]).correct                      # by text, either language
    assert not q.check([0, 1, 3, 2]).correct


def test_a_wrong_order_names_the_first_pair_out_of_order_and_why():
    message = steps().check([0, 2, 1, 3]).message
    assert "「前向」应排在「比较」之前" in message and "比较要分布" in message and "2/4 项已在正确位置" in message
    set_language("en")
    try:
        assert "'forward' comes before 'compare'" in steps().check([0, 2, 1, 3]).message
    finally:
        set_language("zh")


@pytest.mark.parametrize("order", [[0, 1, 2], [0, 1, 1, 2], [0, 1, 2, 9], "0123"])
def test_an_arrangement_that_is_not_each_item_once_is_refused_and_is_no_attempt(order):
    view = Quiz([steps()], lab="04", id="order").view().views[0]
    assert "请把 4 项各排一次" in steps().check(order).message
    view.answer(list(order))
    assert view.attempts.count == 0


def test_the_widget_starts_shuffled_never_in_the_right_order_and_moves_rows():
    for learner in ("a", "b", "c", "d", "e", "f"):
        assert steps().start_order(learner) != [0, 1, 2, 3]
    view = Quiz([steps()]).view().views[0]
    start = list(view.arrangement)
    view.move(0, +1)
    assert view.arrangement == [start[1], start[0], *start[2:]]
    view.move(0, -1)                                   # the top row cannot move up
    assert view.arrangement[0] == start[1] and view.ups[0].disabled and view.downs[-1].disabled


def test_the_first_check_of_an_order_is_what_counts_and_is_recorded():
    quiz = Quiz([steps()], lab="04", id="sd-order").view()
    view = quiz.views[0]
    wrong = view.arrangement                           # the start order is never right
    view.button.click()
    assert view.button.button_style == "danger" and "应排在" in view.feedback.value
    while view.arrangement != [0, 1, 2, 3]:            # sort by moving rows, as a learner would
        row = next(i for i in range(3) if view.arrangement[i] > view.arrangement[i + 1])
        view.move(row, +1)
    view.button.click()
    assert view.button.button_style == "success" and "第 2 次作答" in view.feedback.value
    entry = read_summary("04")["quiz"]["steps"]
    assert entry == {"first_attempt_correct": False, "attempts": 2, "quiz_size": 1, "quiz": "sd-order",
                     "kind": "ordering"} and wrong != [0, 1, 2, 3]


# ----------------------------------------------------------------------------- which figure

def test_which_figure_is_judged_by_figure_and_explains_each():
    q = figures()
    assert q.check(0).correct and q.check("A").correct and "上升" in q.check(0).message
    assert not q.check(1).correct and "下降" in q.check("b").message
    assert "没有这张图" in q.check(7).message and "没有这张图" in q.check("E").message


def test_a_which_figure_question_needs_two_to_four_figures_and_named_distractors():
    fig = go.Figure()
    with pytest.raises(ValueError, match="figures must have 2 to 4"):
        WhichFigure("q", [fig] * 5, 0, ["w"] * 5, ["", "m", "m", "m", "m"])
    with pytest.raises(ValueError, match="figure 1 is a distractor"):
        WhichFigure("q", [fig, fig], 0, ["w", "w"], ["", ""])
    with pytest.raises(ValueError, match="explanations must have one entry per figure"):
        WhichFigure("q", [fig, fig], 0, ["w"], ["", "m"])


def test_the_figure_widget_draws_each_figure_titled_by_its_letter_and_records_the_first_click():
    quiz = Quiz([figures()], lab="02", id="rises").view()
    view = quiz.views[0]
    outputs = [cell.children[0] for cell in view.box.children[1].children]
    titles = [out.outputs[0]["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for out in outputs]
    assert titles == ["<b>A</b>", "<b>B</b>", "<b>C</b>"]
    wrong_row = next(r for r, i in enumerate(view.order) if i != 0)
    view.buttons[wrong_row].click()
    view.buttons[view.order.index(0)].click()
    assert view.buttons[view.order.index(0)].button_style == "success"
    entry = read_summary("02")["quiz"]["rises"]
    assert (entry["first_attempt_correct"], entry["attempts"], entry["kind"]) == (False, 2, "figure")


def test_progress_adds_the_sizes_of_a_labs_quizzes():
    Quiz([steps()], lab="04", id="sd-order").view().views[0].answer([0, 1, 2, 3])
    final = Quiz([figures(), steps().__class__(**{**steps().__dict__, "id": "other"})], lab="04").view()
    final.views[0].answer(0)
    lab04 = read_progress()[3]
    assert (lab04.quiz_answered, lab04.quiz_first_right, lab04.quiz_size) == (2, 2, 3)


def test_a_learner_whose_shuffle_happens_to_be_the_right_order_still_starts_from_a_wrong_one():
    from labkit.assess.questions import _seeded_order

    q = Ordering("q", ["a", "b", "c"], id="three")
    lucky = next(f"l{i}" for i in range(200) if _seeded_order(3, "three", f"l{i}") == [0, 1, 2])
    assert q.start_order(lucky) != [0, 1, 2] and sorted(q.start_order(lucky)) == [0, 1, 2]


def test_the_start_order_puts_no_item_in_its_place_for_any_learner():
    for size in (3, 4, 6):
        q = Ordering("q", [f"item {i}" for i in range(size)], id=f"derange-{size}")
        for learner in (f"l{i}" for i in range(60)):
            order = q.start_order(learner)
            assert sorted(order) == q.answer and all(i != j for i, j in enumerate(order)), (size, learner, order)


def test_the_pair_named_is_the_pair_whose_reason_is_given():
    # "比较" is placed before "前向", which it must follow: the first neighbouring pair out of order is
    # (比较, 起草), but 比较's reason is about 前向, so 前向/比较 is the pair named.
    message = steps().check([2, 0, 1, 3]).message
    assert "「前向」应排在「比较」之前" in message and "比较要分布" in message
    assert "「起草」应排在「比较」之前" not in message
