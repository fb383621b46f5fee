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

import pytest

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
from labkit.assess.exercise import first_failure
from labkit.assess.sandbox import RunReport
from labkit.assess.wire import ErrorInfo, NotPlain, Outcome


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
