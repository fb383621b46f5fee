"""The questions' rules from their definition (``labkit/assess/questions.py``), each on a constructed case:
which key a question is recorded and shuffled under; that a learner's shuffle is stable and another learner's
differs; how a typed number is read; where "right" ends (the tolerance's very edge); which power of ten or of
1024 a unit slip is named by; and the whole sentence a learner reads, in both languages."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from labkit.assess.learner import learner_id
from labkit.assess.questions import MultipleChoice, Numeric, Ordering, WhichFigure, parse_number, scale_factor
from labkit.i18n import get_language, set_language

Q = sys.modules["labkit.assess.questions"]
LEARNERS = [f"learner-{i}" for i in range(200)]


@pytest.fixture(autouse=True)
def english():
    before = get_language()
    set_language("en")
    yield
    set_language(before)


# --- keys: what a result is recorded under, and what seeds a learner's shuffle -------------------------------

@pytest.mark.parametrize("text,key", [
    ("plain", "plain"),
    ({"en": "E", "zh": "中"}, "中"),            # the Chinese text, wherever it stands in the dict
    ({"en": "E"}, "E"),                         # no Chinese: the first text there is
    ({}, ""),                                   # no text at all: the empty key, not an error
])
def test_a_question_without_an_id_is_keyed_by_its_chinese_text_else_its_first(text, key):
    assert Numeric(text, 1.0).key() == key
    assert Ordering(text, ["a", "b", "c"]).key() == key
    assert MultipleChoice(text, ["a", "b"], answer=0).key() == key + "|a|b"


def test_a_choice_questions_key_joins_the_question_and_every_option_with_a_bar():
    q = MultipleChoice({"en": "Q", "zh": "问"}, ["x", {"en": "Y", "zh": "乙"}, {"en": "Z"}], answer=0)
    assert q.key() == "问|x|乙|Z"


def test_an_id_is_the_key_whatever_the_text():
    assert Numeric("q", 1.0, id="n-1").key() == "n-1"
    assert Ordering("q", ["a", "b", "c"], id="o-1").key() == "o-1"
    assert MultipleChoice("q", ["a", "b"], answer=0, id="m-1").key() == "m-1"


# --- shuffles: stable per learner, different between learners ---------------------------------------------------

def eight_options(**kw) -> MultipleChoice:
    return MultipleChoice("Which?", [f"option {i}" for i in range(8)], answer=3, id="mc-8", **kw)


def test_a_learner_sees_the_same_option_order_every_time_and_learners_differ():
    q = eight_options()
    assert q.order("alice") == q.order("alice") == eight_options().order("alice")
    assert sorted(q.order("alice")) == list(range(8))
    assert len({tuple(q.order(x)) for x in LEARNERS[:20]}) > 10       # 8! orders: twenty learners nearly all differ
    assert q.order() == q.order(learner_id())                           # no learner named: this machine's learner
    assert eight_options(shuffle=False).order("alice") == list(range(8))


def test_a_learners_start_order_is_a_derangement_that_depends_on_the_question_too():
    items = ["a", "b", "c", "d", "e"]
    q, other = Ordering("q", items, id="first"), Ordering("q", items, id="second")
    starts = [q.start_order(x) for x in LEARNERS]
    assert all(sorted(s) == list(range(5)) and all(i != j for i, j in enumerate(s)) for s in starts)
    assert starts == [q.start_order(x) for x in LEARNERS]               # stable per learner
    # 44 derangements of five: two questions coincide for about 1 learner in 44 when both are drawn from the
    # question's key; a draw that ignored the key would coincide whenever the learner's first draw is one (~37 %).
    same = sum(q.start_order(x) == other.start_order(x) for x in LEARNERS)
    assert same < 20, same


def test_both_derangements_of_three_items_are_used_not_only_the_rotation():
    """Three items have two derangements, [1, 2, 0] (the fall-back rotation) and [2, 0, 1]. A learner whose first
    draw puts an item in its place is drawn again, so each shows for about half the learners."""
    q = Ordering("q", ["a", "b", "c"], id="three")
    seen = Counter(tuple(q.start_order(x)) for x in LEARNERS)
    assert set(seen) == {(1, 2, 0), (2, 0, 1)}
    assert 60 <= seen[(2, 0, 1)] <= 140, seen


def test_when_no_draw_is_a_derangement_the_start_order_is_the_rotation(monkeypatch):
    monkeypatch.setattr(Q, "_seeded_order", lambda n, key, learner: list(range(n)))
    assert Ordering("q", ["a", "b", "c", "d"]).start_order("alice") == [1, 2, 3, 0]


def test_a_redrawn_start_order_is_drawn_for_the_same_learner_and_question(monkeypatch):
    calls = []

    def seeded(n, key, learner):
        calls.append((key, learner))
        return [2, 0, 1] if key.startswith("three#") else [0, 1, 2]

    monkeypatch.setattr(Q, "_seeded_order", seeded)
    assert Ordering("q", ["a", "b", "c"], id="three").start_order("alice") == [2, 0, 1]
    assert calls[0] == ("three", "alice") and calls[1][1] == "alice" and calls[1][0].startswith("three#")


# --- reading a typed number ----------------------------------------------------------------------------------

@pytest.mark.parametrize("typed,value", [
    ("819,200", 819200.0), ("819，200", 819200.0), ("819_200", 819200.0), ("819 200", 819200.0),
    (" 8e5 ", 800000.0), (3, 3.0), (2.5, 2.5),
])
def test_a_typed_number_is_read_with_its_separators_dropped(typed, value):
    assert parse_number(typed) == value


@pytest.mark.parametrize("typed", ["inf", "-inf", "nan", float("inf"), True, "", "abc", None])
def test_what_is_no_finite_number_is_refused(typed):
    assert parse_number(typed) is None


# --- where "right" ends ------------------------------------------------------------------------------------------

def test_right_ends_exactly_at_the_tolerance_plus_a_rounding_margin():
    exact = Numeric("q", 0.0)                           # margin 1e-12 (relative to max(1, |answer|))
    assert exact.is_close(1e-12) and not exact.is_close(1.5e-12)
    big = Numeric("q", 1e6)                             # margin 1e-6
    assert big.is_close(1e6 + 5e-7) and not big.is_close(1e6 + 2e-6)
    tolerant = Numeric("q", 100.0, tol=1.0)
    assert tolerant.is_close(101.0) and tolerant.is_close(99.0) and not tolerant.is_close(101.001)
    relative = Numeric("q", 1000.0, tol=1.0, rel_tol=0.05)     # the larger of the two: 50
    assert relative.is_close(1050.0) and not relative.is_close(1050.1)


# --- unit slips ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x,answer,allowed,name", [
    (1, 1000, 0, "1000"), (8000, 8, 0, "1000"), (-8, -8000, 0, "1000"), (0.5, 500, 0, "1000"), (500, 0.5, 0, "1000"),
    (1, 1e6, 0, "1000000"), (1, 1e7, 0, "10^7"), (1, 1e12, 0, "10^12"), (1, 1e13, 0, None),
    (800, 819200, 0, "1024"), (1, 1024 ** 2, 0, "1024^2"), (1, 1024 ** 4, 0, "1024^4"), (1, 1024 ** 5, 0, None),
    (0, 1000, 0, None), (1000, 0, 0, None), (8, -8000, 0, None), (-8, 8000, 0, None),
    (10.05, 1000, 0, "100"),       # within 1 % of the answer
    (10.2, 1000, 0, None),         # 2 % off: no slip, a wrong number
    (10.2, 1000, 30, "100"),       # unless the question allows more
    (1, 1048, 24, "1024"),         # at the allowance's very edge (1048 - 1024 = 24)
    (1000, 1_000_000, 30000, "1000"), (1000, 1_024_000, 30000, "1024"),   # both fit: the closer one is named
])
def test_a_unit_slip_is_named_by_the_power_that_fits_best(x, answer, allowed, name):
    assert scale_factor(x, answer, allowed) == name


def kv_question(unit={"zh": "字节", "en": "bytes"}) -> Numeric:
    return Numeric("bytes per token?", 819200.0, unit=unit, hint={"zh": "数因子。", "en": "Count the factors."},
                   explanation={"zh": "每层 K 和 V。", "en": "K and V per layer."})


def test_the_whole_feedback_a_learner_reads_for_each_kind_of_answer():
    q = kv_question()
    assert q.check("819,200") == Q.Feedback(True, "✓ Correct: 819,200 bytes. K and V per layer.")
    low = q.check(800)
    assert low == Q.Feedback(False, "✗ 800 is too low. It is off by exactly a factor of 1024: did a unit or an "
                                    "order of magnitude slip (the answer is in bytes)? Count the factors.")
    assert q.check(900000) == Q.Feedback(False, "✗ 900,000 is too high. Count the factors.")
    assert q.check("abc") == Q.Feedback(False, "Please enter a number (got 'abc').")
    assert kv_question(unit="").unit_hint(800) == ("It is off by exactly a factor of 1024: did a unit or an order "
                                                   "of magnitude slip?")
    assert q.unit_hint(900000) == ""
    set_language("zh")
    assert q.check(819200).message == "✓ 正确：819,200 字节。 每层 K 和 V。"
    assert q.check(800) == Q.Feedback(False, "✗ 800 偏小。它与答案正好差了 1024 倍：是单位或数量级出了错吗（答案以「字节」为单位）？数因子。")
    assert q.check(900000).message == "✗ 900,000 偏大。数因子。"
    assert q.check("abc") == Q.Feedback(False, "请输入一个数字（收到 'abc'）。")


def test_the_unit_hint_uses_the_questions_own_allowance():
    assert Numeric("q", 1000.0).unit_hint(10.4) == ""                       # 4 % off, only 1 % allowed
    assert Numeric("q", 1000.0, rel_tol=0.05).unit_hint(10.4) != ""           # 5 % allowed: a slip
    assert Numeric("q", 1000.0, tol=50).unit_hint(10.4) != ""


# --- a question built wrong is refused, saying what is wrong ---------------------------------------------------

def figures(n: int) -> list:
    return [object()] * n


@pytest.mark.parametrize("build,message", [
    (lambda: MultipleChoice("q", ["a"], answer=0), "options must have 2 to 10 entries, got 1"),
    (lambda: MultipleChoice("q", list("abcdefghijk"), answer=0), "options must have 2 to 10 entries, got 11"),
    (lambda: MultipleChoice("q", ["a", "b", "c"], answer=3), "answer must be an option index in [0, 2], got 3"),
    (lambda: MultipleChoice("q", ["a", "b", "c"], answer=-1), "answer must be an option index in [0, 2], got -1"),
    (lambda: MultipleChoice("q", ["a", "b"], answer=0, explanations=["x"]),
     "explanations must have one entry per option, got 1 for 2 options"),
    (lambda: MultipleChoice("q", ["a", "b"], answer=0, misconceptions=["", "m", "n"]),
     "misconceptions must have one entry per option, got 3 for 2 options"),
    (lambda: Numeric("q", 1.0, tol=-1), "tol and rel_tol must be >= 0, got -1, 0.0"),
    (lambda: Numeric("q", 1.0, rel_tol=-0.5), "tol and rel_tol must be >= 0, got 0.0, -0.5"),
    (lambda: Ordering("q", ["a", "b"]), "items must have 3 to 10 entries, got 2"),
    (lambda: Ordering("q", list("abcdefghijk")), "items must have 3 to 10 entries, got 11"),
    (lambda: Ordering("q", ["a", "b", "c"], reasons=["x"]), "reasons must have one entry per item, got 1 for 3 items"),
    (lambda: Ordering("q", ["a", {"zh": "a", "en": "A"}, "c"]), "items must be distinct"),
    (lambda: WhichFigure("q", figures(1), 0, ["e"], [""]), "figures must have 2 to 4 entries, got 1"),
    (lambda: WhichFigure("q", figures(5), 0, ["e"] * 5, ["", "m", "m", "m", "m"]), "figures must have 2 to 4 entries, got 5"),
    (lambda: WhichFigure("q", figures(2), 2, ["e", "f"], ["m", ""]), "answer must be a figure index in [0, 1], got 2"),
    (lambda: WhichFigure("q", figures(2), 0, ["e"], ["", "m"]), "explanations must have one entry per figure, got 1 for 2 figures"),
    (lambda: WhichFigure("q", figures(2), 0, ["e", "f"], ["", "m", "n"]),
     "misconceptions must have one entry per figure, got 3 for 2 figures"),
    (lambda: WhichFigure("q", figures(2), 0, ["e", "f"], ["m", "m"]), "figure 0 is the answer and must not name a misconception"),
    (lambda: WhichFigure("q", figures(2), 0, ["e", "f"], ["", " "]), "figure 1 is a distractor and must name its misconception"),
])
def test_a_question_built_wrong_is_refused_by_what_is_wrong(build, message):
    with pytest.raises(ValueError) as error:
        build()
    assert str(error.value) == message


@pytest.mark.parametrize("build", [
    lambda: MultipleChoice("q", list("abcdefghij"), answer=9),
    lambda: Ordering("q", list("abcdefghij")),
    lambda: WhichFigure("q", figures(4), 3, ["e"] * 4, ["m", "m", "m", ""]),
])
def test_the_largest_question_of_each_kind_is_accepted(build):
    build()


def test_a_figure_questions_key_and_order_follow_its_id_and_shuffle():
    q = WhichFigure({"en": "E", "zh": "中"}, figures(4), 0, ["e"] * 4, ["", "m", "m", "m"])
    assert q.key() == "中" and WhichFigure("q", figures(2), 0, ["e", "f"], ["", "m"], id="f-1").key() == "f-1"
    assert WhichFigure("q", figures(4), 0, ["e"] * 4, ["", "m", "m", "m"], shuffle=False).order("a") == [0, 1, 2, 3]
    assert q.order("alice") == q.order("alice") and sorted(q.order("alice")) == [0, 1, 2, 3]
    assert len({tuple(q.order(x)) for x in LEARNERS[:20]}) > 5
    other = WhichFigure({"en": "E", "zh": "另一个"}, figures(4), 0, ["e"] * 4, ["", "m", "m", "m"])
    assert sum(q.order(x) == other.order(x) for x in LEARNERS) < 40      # 24 orders: ~8 of 200 coincide by chance


# --- the verdict a learner reads for a choice, a figure and an order -------------------------------------------

def choice_question(**kw) -> MultipleChoice:
    return MultipleChoice("Which?", ["zero", "one", {"zh": "二", "en": "two"}, "three"], answer=2, **kw)


@pytest.mark.parametrize("build", [
    lambda **kw: choice_question(**kw),
    lambda **kw: WhichFigure("Which?", figures(4), 2, **kw, misconceptions=["m", "m", "", "m"]),
])
def test_a_right_and_a_wrong_pick_read_their_verdict_then_the_picks_own_explanation(build):
    q = build(explanations=[f"why {i}" for i in range(4)])
    assert q.check(2) == Q.Feedback(True, "✓ Correct. why 2")
    assert q.check(0) == Q.Feedback(False, "✗ Not quite. why 0")
    set_language("zh")
    assert q.check(2) == Q.Feedback(True, "✓ 正确。 why 2")
    assert q.check(3) == Q.Feedback(False, "✗ 不对。 why 3")


def test_a_choice_without_explanations_reads_its_verdict_alone():
    assert choice_question().check(2) == Q.Feedback(True, "✓ Correct.")
    assert choice_question().check(1) == Q.Feedback(False, "✗ Not quite.")


@pytest.mark.parametrize("pick,index", [
    (1, 1), ("B", 1), (" b ", 1), ("D", 3), ("one", 1), (" three ", 3), ("二", 2), ("two", 2),
])
def test_an_option_is_picked_by_its_index_its_letter_in_any_case_or_its_text_in_either_language(pick, index):
    assert choice_question(explanations=[f"why {i}" for i in range(4)]).check(pick).message.endswith(f"why {index}")


@pytest.mark.parametrize("pick", [4, -1, True, "E", "AB", "x", "", "four", 2.0])
def test_what_names_no_option_is_told_so_and_is_no_right_answer(pick):
    assert choice_question().check(pick) == Q.Feedback(False, f"No such option: {pick!r}")
    set_language("zh")
    assert choice_question().check(pick) == Q.Feedback(False, f"没有这个选项：{pick!r}")


@pytest.mark.parametrize("pick", [4, -1, True, "E", "AB", "two", 1.0])
def test_what_names_no_figure_is_told_so_and_is_no_right_answer(pick):
    q = WhichFigure("Which?", figures(4), 1, ["a", "b", "c", "d"], ["m", "", "m", "m"])
    assert q.check(pick) == Q.Feedback(False, f"No such figure: {pick!r}")
    set_language("zh")
    assert q.check(pick) == Q.Feedback(False, f"没有这张图：{pick!r}")


def steps(**kw) -> Ordering:
    return Ordering("Order the steps", ["schedule", "forward", "sample", "update"], **kw)


def test_the_right_order_reads_right_order_then_the_explanation():
    assert steps(explanation="That is one step.").check([0, 1, 2, 3]) == Q.Feedback(True, "✓ Right order. That is one step.")
    assert steps().check(["schedule", " forward ", "sample", "update"]) == Q.Feedback(True, "✓ Right order.")
    set_language("zh")
    assert steps().check([0, 1, 2, 3]) == Q.Feedback(True, "✓ 顺序正确。")


def test_a_wrong_order_names_the_pair_the_reason_and_how_many_items_stand_in_place():
    reasons = ["", "needs a schedule", "needs logits", "needs a token"]
    assert steps(reasons=reasons).check([0, 2, 1, 3]) == Q.Feedback(
        False, "✗ Not the right order: 'forward' comes before 'sample'. needs logits (2/4 items in place)")
    assert steps().check([1, 0, 3, 2]) == Q.Feedback(
        False, "✗ Not the right order: 'schedule' comes before 'forward'. (0/4 items in place)")
    set_language("zh")
    assert steps(reasons=reasons).check([0, 2, 1, 3]) == Q.Feedback(
        False, "✗ 顺序不对：「forward」应排在「sample」之前。needs logits（2/4 项已在正确位置）")


@pytest.mark.parametrize("order", [[0, 1, 2], [0, 1, 2, 2], [0, 1, 2, 4], [0, 1, 2, -1], ["schedule", "x", "sample", "update"]])
def test_what_is_not_each_item_once_is_no_attempt_and_says_so(order):
    assert steps().check(order) == Q.Feedback(False, f"Arrange each of the 4 items once (got {order!r}).")


@pytest.mark.parametrize("order", ["abc", b"abc", 3, None])
def test_a_string_or_a_thing_without_a_length_is_no_arrangement_even_of_one_letter_items(order):
    assert Ordering("q", ["a", "b", "c"]).parse(order) is None


@pytest.mark.parametrize("x,answer,allowed", [
    (100, -1, 1.5),      # a power is positive: it never turns a number's sign, however much is allowed
    (-100, 1, 1.5),
    (-5, 0, 1),          # nor makes zero of anything
])
def test_no_power_turns_a_wrong_sign_or_zero_into_the_answer(x, answer, allowed):
    assert scale_factor(x, answer, allowed) is None


@pytest.mark.parametrize("typed,value", [("819__200", 819200.0), ("_819_200_", 819200.0), ("819,,200", 819200.0)])
def test_a_separator_is_dropped_wherever_it_stands_even_where_python_would_refuse_it(typed, value):
    assert parse_number(typed) == value
