"""The exercise checker's verdicts against its documented rules (``labkit/assess/exercise.py``, ``checks.py``).

    a case passes   only when its comparison returns true; a comparison that raises fails the case
    sequences       ``same_sequence``: a list or a tuple with the expected entries in the expected order
    traces          compared step by step, in order; the first wrong step is the one reported, and the
                    expected steps shown stop there (later ones stay hidden); a sequence that went wrong
                    before it raised is reported as wrong at that step, not as the error it caused later
    the verdict     the first failing case is described; every case is counted (``num_passed``); a case
                    with no outcome is a time-out (or memory, when it was still growing) or a crash
    hidden cases    (``reveal=False``) say how the result is wrong, never the expected value

The verdict is computed from plain outcomes (what the sandbox's child sends back), so most rules are
checked on hand-made outcomes; one test runs a learner's functions through the real sandbox.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from labkit import set_language
from labkit.assess.checks import (
    Check,
    Ref,
    Step,
    as_trace,
    call_check,
    first_wrong_step,
    ops_check,
    run_ops,
    same_sequence,
)
from labkit.assess.exercise import CheckResult, Exercise, Hint, find_stub, first_failure
from labkit.assess.sandbox import RunReport
from labkit.assess.wire import ErrorInfo, NotPlain, Outcome


@pytest.fixture
def english():
    set_language("en")
    yield
    set_language("zh")


def check(**kw) -> Check:
    return Check(label="case", run=lambda fn, _e: fn(), **kw)


def verdict(checks: list[Check], expected: list, outcomes: list[Outcome], memory_limit_mb: float | None = None,
            **report):
    """(first failure, number passed) for these outcomes of ``checks`` (``report``: RunReport's other fields)."""
    return first_failure(checks, expected, RunReport(tuple(outcomes), len(checks), **report), memory_limit_mb)


def raising(_got, _expected):
    raise TypeError("unorderable")


# ------------------------------------------------------------------ comparisons


def test_a_comparison_that_raises_fails_the_case():
    failure, passed = verdict([check(compare=raising)], [[1, 2]], [Outcome(value=[1, 2])])
    assert passed == 0 and failure.kind == "wrong" and failure.got == [1, 2]


def test_a_case_passes_only_when_its_comparison_is_true():
    checks = [check(), check(), check(compare=lambda g, e: abs(g - e) < 0.5)]
    failure, passed = verdict(checks, [3, 3, 3.0], [Outcome(value=3), Outcome(value=4), Outcome(value=3.2)])
    assert passed == 2 and failure.index == 1 and (failure.expected, failure.got) == (3, 4)


@pytest.mark.parametrize("got, same", [
    ([1, 2, 3], True), ((1, 2, 3), True),                  # a list or a tuple
    ([3, 2, 1], False), ([1, 3, 2], False),                # the order matters
    ([1, 2], False), ([1, 2, 3, 3], False),                # so does the length
    ({1, 2, 3}, False), ("123", False), (None, False), ({0: 1, 1: 2, 2: 3}, False),
])
def test_same_sequence_wants_the_expected_entries_in_the_expected_order(got, same):
    assert same_sequence(got, [1, 2, 3]) is same


def test_a_sequence_in_another_order_fails_the_case():
    failure, passed = verdict([check(compare=same_sequence)], [[5, 7, 9]], [Outcome(value=[9, 7, 5])])
    assert passed == 0 and failure.kind == "wrong"


# ------------------------------------------------------------------ operation sequences (traces)

EXPECTED = [Step("allocate(4)", 0), Step("allocate(2)", 4), Step("free(0)", None), Step("allocate(1)", 0)]


def as_plain(steps: list[Step]) -> list[tuple]:
    return [tuple(s) for s in steps]                       # what the child sends: plain tuples


def test_the_first_wrong_step_is_found_in_order():
    got = [Step("allocate(4)", 0), Step("allocate(2)", 5), Step("free(0)", None), Step("allocate(1)", 9)]
    assert first_wrong_step(EXPECTED, as_plain(got)) == Step("allocate(2)", 5)
    assert first_wrong_step(EXPECTED, as_plain(EXPECTED)) is None
    assert first_wrong_step(EXPECTED, as_plain([EXPECTED[1], EXPECTED[0], *EXPECTED[2:]])) == EXPECTED[1]


def test_a_trace_shows_the_expected_steps_up_to_the_first_wrong_one_and_no_further():
    got = [EXPECTED[0], Step("allocate(2)", 5), EXPECTED[2], EXPECTED[3]]
    failure, passed = verdict([check(trace=True)], [EXPECTED], [Outcome(value=as_plain(got))])
    assert passed == 0 and failure.kind == "wrong"
    assert failure.expected == EXPECTED[:2] and failure.got == got


def test_a_trace_with_its_steps_swapped_fails():
    swapped = [EXPECTED[1], EXPECTED[0], *EXPECTED[2:]]
    failure, _ = verdict([check(trace=True)], [EXPECTED], [Outcome(value=as_plain(swapped))])
    assert failure.kind == "wrong" and failure.expected == EXPECTED[:1]


def test_a_sequence_that_went_wrong_before_it_raised_is_reported_at_the_wrong_step():
    partial = as_plain([EXPECTED[0], Step("allocate(2)", 5)])
    error = ErrorInfo("KeyError", "0", during="free(0)")
    failure, _ = verdict([check(trace=True)], [EXPECTED], [Outcome(error=error, partial=partial)])
    assert failure.kind == "wrong" and failure.expected == EXPECTED[:2] and failure.got == as_trace(partial)


def test_an_error_after_only_right_steps_is_reported_as_the_error():
    error = ErrorInfo("KeyError", "0", during="free(0)")
    failure, _ = verdict([check(trace=True)], [EXPECTED], [Outcome(error=error, partial=as_plain(EXPECTED[:2]))])
    assert failure.kind == "error" and failure.error == error


def test_an_exception_in_a_case_that_is_not_a_sequence_is_the_exception_whatever_steps_it_carries():
    error = ErrorInfo("ValueError", "bad")
    failure, _ = verdict([check()], [[1, 2]], [Outcome(error=error, partial=[("step()", 5)])])
    assert failure.kind == "error" and failure.error == error


# ------------------------------------------------------------------ the verdict over all cases


def test_every_case_is_counted_and_the_first_failure_is_the_one_described():
    checks = [check() for _ in range(5)]
    outcomes = [Outcome(value=v) for v in (1, 0, 1, 0, 1)]
    failure, passed = verdict(checks, [1] * 5, outcomes)
    assert passed == 3 and failure.index == 1


@pytest.mark.parametrize("error, kind", [("ValueError", "error"), ("MemoryError", "memory"),
                                          ("ReferenceSolutionUsed", "reference"), ("NotAllowedWhileChecked", "guarded")])
def test_an_exception_fails_the_case_with_its_kind(error, kind):
    failure, passed = verdict([check(), check()], [1, 1], [Outcome(value=1), Outcome(error=ErrorInfo(error, ""))])
    assert passed == 1 and failure.index == 1 and failure.kind == kind


def test_a_result_that_is_not_plain_data_fails_as_a_type_error():
    failure, _ = verdict([check()], [1], [Outcome(not_plain=NotPlain("generator", "<generator>"))])
    assert failure.kind == "type"


@pytest.mark.parametrize("report, kind", [(dict(timed_out=True), "timeout"), (dict(exit_code=-9), "crash"),
                                           (dict(timed_out=True, grown_mb=600.0, memory_limit_mb=1000), "memory"),
                                           (dict(timed_out=True, grown_mb=400.0, memory_limit_mb=1000), "timeout")])
def test_cases_that_never_reported_fail_at_the_first_missing_one(report, kind):
    failure, passed = verdict([check(), check(), check()], [1, 1, 1], [Outcome(value=1)], **report)
    assert passed == 1 and failure.index == 1 and failure.kind == kind


def test_a_case_that_never_reported_still_fails_an_attempt_whose_reported_cases_passed():
    failure, passed = verdict([check(), check(), check()], [1, 1, 1], [Outcome(value=1), Outcome(value=1)],
                              exit_code=1)
    assert passed == 2 and failure is not None and failure.index == 2


def test_a_hidden_case_says_how_it_is_wrong_but_not_what_is_right():
    failure, _ = verdict([check(reveal=False)], [[1, 2, 3]], [Outcome(value=[1, 2, 4])])
    assert failure.kind == "wrong" and failure.hidden and failure.expected is None and failure.difference


def test_a_hidden_trace_that_went_wrong_before_it_raised_says_where_without_the_expected_steps():
    partial = as_plain([EXPECTED[0], Step("allocate(2)", 5)])
    error = ErrorInfo("KeyError", "0", during="free(0)")
    failure, _ = verdict([check(trace=True, reveal=False)], [EXPECTED], [Outcome(error=error, partial=partial)])
    assert failure.kind == "wrong" and failure.hidden and failure.expected is None
    assert failure.got == as_trace(partial)
    assert "allocate(2) → 5  ✗" in failure.difference                   # the first wrong step, marked
    assert "free(0)" not in failure.difference and "→ 4" not in failure.difference   # nothing expected shown


def test_a_trace_case_whose_result_is_not_a_trace_fails_showing_the_result_as_returned():
    failure, _ = verdict([check(trace=True)], [EXPECTED], [Outcome(value=5)])
    assert failure.kind == "wrong" and failure.got == 5 and failure.expected == EXPECTED   # no step to stop at


def test_a_trace_that_stops_early_shows_the_expected_steps_up_to_the_first_missing_one():
    failure, _ = verdict([check(trace=True)], [EXPECTED], [Outcome(value=as_plain(EXPECTED[:2]))])
    assert failure.kind == "wrong" and failure.expected == EXPECTED[:3]


@pytest.mark.parametrize("expected, got, words", [
    ([1, 2, 3], [1, 2, 4], "Entry 2 (from 0) is wrong: The result is too high."),
    ([1, 2, 3], [1, 2], "Wrong number of entries (too few)."),
    (7, 3, "The result is too low."),
])
def test_a_hidden_case_describes_the_difference_between_the_result_and_the_expected_value(english, expected, got,
                                                                                          words):
    failure, _ = verdict([check(reveal=False)], [expected], [Outcome(value=got)])
    assert failure.hidden and failure.expected is None and failure.got == got
    assert failure.difference == words


def test_a_plain_case_shows_a_list_of_pairs_as_returned_not_as_steps():
    got = [("a", 1), ("b", 2)]
    failure, _ = verdict([check()], [[("a", 1)]], [Outcome(value=got)])
    assert failure.got == got and not any(isinstance(s, Step) for s in failure.got)


PRINTED = "what the learner printed\n"
FAILING_OUTCOMES = {
    "not plain data": (check(), 1, Outcome(not_plain=NotPlain("generator", "<generator>"), stdout=PRINTED)),
    "an exception": (check(), 1, Outcome(error=ErrorInfo("ValueError", "bad"), stdout=PRINTED)),
    "wrong then raised": (check(trace=True), EXPECTED,
                          Outcome(error=ErrorInfo("KeyError", "0"), partial=as_plain([Step("allocate(4)", 9)]),
                                  stdout=PRINTED)),
    "wrong then raised, hidden": (check(trace=True, reveal=False), EXPECTED,
                                  Outcome(error=ErrorInfo("KeyError", "0"),
                                          partial=as_plain([Step("allocate(4)", 9)]), stdout=PRINTED)),
    "wrong": (check(), 1, Outcome(value=2, stdout=PRINTED)),
    "wrong, hidden": (check(reveal=False), 1, Outcome(value=2, stdout=PRINTED)),
}


@pytest.mark.parametrize("how", list(FAILING_OUTCOMES))
def test_every_failure_names_its_case_and_keeps_what_the_learner_printed(how):
    """The message heads a failure with the case's number and label and shows the learner's prints."""
    failing, expected, outcome = FAILING_OUTCOMES[how]
    failing = dataclasses.replace(failing, label="the second case")
    failure, passed = verdict([check(), failing], [1, expected], [Outcome(value=1), outcome])
    assert passed == 1
    assert (failure.index, failure.label, failure.stdout) == (1, "the second case", PRINTED)


# ------------------------------------------------------------------ through the real sandbox


def test_a_learners_verify_is_checked_in_order_through_the_sandbox():
    from labkit.labs.lab04_speculative.exercises import greedy_verify_exercise

    def accepts_in_order(drafts, target):                 # right, returned as a tuple (allowed)
        out = []
        for d, t in zip(drafts, target):
            out.append(t)
            if d != t:
                return tuple(out)
        return tuple(out + [target[len(drafts)]])

    def reversed_order(drafts, target):                   # the right tokens, the wrong order
        return list(reversed(accepts_in_order(drafts, target)))

    ex = greedy_verify_exercise()
    ex.lab = None                                          # keep the results summary out of it
    assert ex.check(accepts_in_order).passed
    result = ex.check(reversed_order)
    assert not result.passed and result.failure.kind == "wrong" and result.num_passed == 3   # 3 read the same reversed


# ------------------------------------------------------------------ operation sequences (run in the child)


class _Store:
    """A learner's class: ``get`` of a missing key raises KeyError."""

    def __init__(self, size):
        self.items, self.size = {}, size

    def put(self, key, value):
        self.items[key] = value
        return len(self.items)

    def get(self, key):
        return self.items[key]


def test_an_operation_sequence_records_each_call_with_its_arguments_and_result():
    steps = run_ops(_Store, (4,), [("put", (1, "a")), ("put", (2, "b")), ("get", (Ref(0),))])
    assert steps == [Step("put(1, 'a')", 1), Step("put(2, 'b')", 2), Step("get(1)", "a")]


def test_an_operation_that_raises_keeps_the_learners_exception_with_the_call_and_the_steps_before_it():
    with pytest.raises(KeyError) as info:
        run_ops(_Store, (4,), [("put", (1, "a")), ("get", (7,)), ("put", (2, "b"))])
    assert info.value.labkit_during == "get(7)"
    assert info.value.labkit_steps == [Step("put(1, 'a')", 1)]


def test_an_ops_check_keeps_its_other_settings():
    check = ops_check("store", (4,), [("put", (1, "a"))], hint=2, reveal=False)
    assert (check.hint, check.reveal, check.trace) == (2, False, True)
    assert check.run(_Store, None) == [Step("put(1, 'a')", 1)]


@pytest.mark.parametrize("value", [[(1, 2)], [("put(1)", 1, 2)], [["put(1)", 1]], ("put(1)", 1), [("put(1)",)]])
def test_only_a_list_of_call_result_pairs_is_a_trace(value):
    assert as_trace(value) is None
    assert as_trace([("put(1)", 1)]) == [Step("put(1)", 1)]


def test_a_call_checks_label_is_the_call_with_its_note_in_each_language():
    plain = call_check("best_k", (0.3, 0.5))
    assert plain.label == {"zh": "best_k(0.3, 0.5)", "en": "best_k(0.3, 0.5)"}
    assert plain.run(lambda a, c: a + c, None) == 0.8
    noted = call_check("f", (30, "x"), "一个注", hint=1)
    assert noted.label == {"zh": "f(30, 'x')  # 一个注", "en": "f(30, 'x')  # 一个注"} and noted.hint == 1
    both = call_check("f", (), {"zh": "零个参数", "en": "no arguments"})
    assert both.label == {"zh": "f()  # 零个参数", "en": "f()  # no arguments"}


# ------------------------------------------------------------------ the exercise around the verdict
# Exercise's documented rules: nothing to check (None, ..., a placeholder body) fails at once with the first
# hint and does not move the hint count; the reference itself gets no hint; a wrong answer or an exception
# gets the hint its case names (the count moves past it), other failures none; every check is an attempt;
# self_test runs the reference under the exercise's own limits.

def double(x):
    return 2 * x


def slow_double(x):
    time.sleep(3)
    return 2 * x


def hungry_double(x):
    blocks = [bytearray(64 * 2 ** 20) for _ in range(16)]          # about a gigabyte, kept
    return 2 * x + 0 * len(blocks)


def placeholder(x):
    """Return twice x."""
    ...


def not_written_yet(x):
    raise NotImplementedError("write this")


HINTS = [{"zh": "先想一想", "en": "Think first"}, {"zh": "乘以二", "en": "Multiply by two"},
         {"zh": "第三条", "en": "The third"}]


def toy(reference: str = "double", **kw) -> Exercise:
    checks = [Check(label="double(2)", run=lambda fn, _e: fn(2)), Check(label="double(5)", run=lambda fn, _e: fn(5), hint=1)]
    return Exercise("toy", checks, f"tests.assess.test_checker_semantics:{reference}", **{"hints": HINTS, **kw})


NOTHING_YET = "✗ Nothing to check yet: define the function/class, then pass it to check()."


@pytest.mark.parametrize("target", [None, Ellipsis, placeholder, not_written_yet],
                         ids=["None", "Ellipsis", "...", "raise NotImplementedError(...)"])
def test_nothing_to_check_fails_at_once_with_the_first_hint_and_the_hint_count_unmoved(english, target):
    ex = toy()
    result = ex.check(target)
    assert (result.exercise, result.num_passed, result.num_checks) == ("toy", 0, 2) and result.passed is False
    assert result.hint == "Hint 1/3: Think first"
    assert result.message.startswith("✗ ") and result.message.endswith("\n\nHint 1/3: Think first")
    assert str(ex.hint()) == "Hint 1/3: Think first"                  # .hint() still starts at the first
    assert ex.attempts == 0                                             # nothing ran: not an attempt


def test_a_placeholder_raising_not_implemented_with_a_message_is_still_a_placeholder():
    assert find_stub(not_written_yet) == "not_written_yet"
    assert find_stub(double) is None


def test_nothing_to_check_without_hints_is_the_message_alone(english):
    result = toy(hints=()).check(None)
    assert result.message == NOTHING_YET and result.hint is None and result.passed is False


def test_the_reference_itself_is_refused_without_a_hint(english):
    result = toy().check(double)
    assert result.passed is False and result.hint is None and "Hint" not in result.message


def test_a_wrong_answer_gets_the_hint_its_case_names_and_the_next_hint_follows_it(english):
    ex = toy()
    result = ex.check(lambda x: 2 * x if x == 2 else 0)                 # the second case (hint=1) fails
    assert (result.passed, result.num_passed) == (False, 1)
    assert result.hint == "Hint 2/3: Multiply by two" and result.message.endswith("\n\nHint 2/3: Multiply by two")
    assert str(ex.hint()) == "Hint 3/3: The third"


def test_an_exception_gets_the_hint_its_case_names(english):
    def fails_on_five(x):
        if x == 5:
            raise ValueError("five")
        return 2 * x

    result = toy().check(fails_on_five)
    assert result.failure.kind == "error" and result.hint == "Hint 2/3: Multiply by two"


def test_a_failure_that_is_not_about_the_algorithm_gets_no_hint(english):
    def a_generator(x):
        yield 2 * x

    result = toy().check(a_generator)
    assert result.failure.kind == "type" and result.hint is None and "Hint" not in result.message


def test_a_hint_index_past_the_last_hint_gives_no_hint_and_does_not_move_the_count(english):
    ex = toy(diagnose=lambda expected, got, check: len(HINTS))
    result = ex.check(lambda x: 0)
    assert result.passed is False and result.hint is None
    assert "Use .hint() when you want a hint." in result.message
    assert str(ex.hint()) == "Hint 1/3: Think first"


def test_every_check_is_an_attempt_and_the_labs_summary_keeps_the_first_pass(tmp_path, monkeypatch):
    from labkit.report.results import read_summary

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))
    ex = toy(lab="02")
    assert not ex.check(lambda x: 0).passed
    assert ex.check(lambda x: x + x).passed
    assert ex.attempts == 2
    assert read_summary("02")["exercises"]["toy"] == {
        "passed": True, "attempts": 2, "passed_at_attempt": 2, "last_passed": True, "num_passed": 2, "num_checks": 2}


@pytest.mark.parametrize("reference, limits, kind", [
    ("slow_double", {"time_limit_s": 0.5}, "timeout"),
    ("hungry_double", {"memory_limit_mb": 256}, "memory"),
], ids=["time", "memory"])
def test_self_test_runs_the_reference_under_the_exercises_own_limits(reference, limits, kind):
    result = toy(reference, **limits).self_test()
    assert result.passed is False and result.failure.kind == kind


def test_self_test_of_a_sound_exercise_passes():
    assert toy().self_test().passed


def test_show_solution_shows_the_reference(monkeypatch):
    import labkit.assess.exercise as module

    shown = []
    monkeypatch.setattr(module, "show_source", shown.append)
    toy().show_solution()
    assert shown == [double]


# ------------------------------------------------------------------ how a verdict, a hint and an exercise are drawn

def test_a_result_is_drawn_green_when_passed_and_red_when_not_with_its_message_escaped():
    for passed, colour, background in ((True, "#1b7f3b", "#eef8f0"), (False, "#b3261e", "#fdf0ef")):
        box = CheckResult("toy", passed, "✗ got <list> & more", 0, 2)._repr_html_().lower()
        assert f"border-left:4px solid {colour};background:{background};" in box
        assert box.endswith(">✗ got &lt;list&gt; &amp; more</div>")


def test_a_result_prints_as_its_message_in_ipython():
    class Printer:
        def __init__(self):
            self.out = []

        def text(self, s):
            self.out.append(s)

    printer = Printer()
    CheckResult("toy", False, "✗ the message", 0, 2)._repr_pretty_(printer, False)
    assert printer.out == ["✗ the message"] and str(CheckResult("toy", False, "✗ the message", 0, 2)) == "✗ the message"


def test_a_hint_is_drawn_as_its_text_escaped(english):
    assert Hint(2, 3, "use <dict> & keys")._repr_html_().endswith(
        ">Hint 2/3: use &lt;dict&gt; &amp; keys</div>")


@pytest.mark.parametrize("language, more", [
    ("en", "2 hidden tests, 3 hints. Use .check(your_function), .hint(); .show_solution() shows the reference "
           "(after your attempt)."),
    ("zh", "2 个隐藏测试，3 条提示。用 .check(你的函数) 检查，.hint() 看提示；.show_solution() 显示参考答案（做完再看）。"),
])
def test_an_exercise_is_drawn_as_its_title_its_task_and_how_to_use_it(language, more):
    set_language(language)
    try:
        titled = toy(title={"zh": "翻倍 <x>", "en": "Double <x>"}, task={"zh": "第一行\n第二行", "en": "line 1\nline 2"})
        title, task = ("Double &lt;x&gt;", "line 1<br>line 2") if language == "en" else ("翻倍 &lt;x&gt;", "第一行<br>第二行")
        assert titled._repr_html_() == f"<div><b>{title}</b><br>{task}<br><i>{more}</i></div>"
        assert toy()._repr_html_() == f"<div><b>toy</b><br><br><i>{more}</i></div>"     # no title: the name
    finally:
        set_language("zh")
