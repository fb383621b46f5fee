"""Hidden test cases: a call with fixed arguments, or an operation sequence on a class.

A ``Check`` knows how to run the learner's function or class on one hidden input; the exercise
runs the reference solution the same way to get the expected value. Sequences are recorded as
``Step(call, result)`` so a mismatch can be shown as the calls leading up to it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

from labkit.assess.text import Text


class Step(NamedTuple):
    """One call in an operation sequence and what it returned."""

    call: str
    result: Any


@dataclass(frozen=True)
class Ref:
    """An argument that stands for the value returned by operation number ``index`` (a block id)."""

    index: int


FROM_REFERENCE = object()


@dataclass(frozen=True)
class Check:
    """One hidden test case.

    ``run(target, expected)`` calls the learner's function or class on the hidden input and
    returns what it observed; ``expected`` lets a sequence stop at its first wrong step. The
    expected value is ``run(reference, None)`` unless given. ``explain(expected, got)`` may add a
    sentence about a typical mistake.
    """

    label: Text
    run: Callable[[Any, Any], Any]
    expected: Any = FROM_REFERENCE
    compare: Callable[[Any, Any], bool] = operator.eq
    explain: Callable[[Any, Any], str] | None = None


def call_check(name: str, args: tuple, note: Text = "", **kw) -> Check:
    """A check that calls ``fn(*args)``; the label shows the call, e.g. ``f(30, 3, 64, 2)  # note``."""
    call = f"{name}({', '.join(map(repr, args))})"
    notes = {"zh": note, "en": note} if isinstance(note, str) else note
    label = {lang: f"{call}  # {text}" if text else call for lang, text in notes.items()}
    return Check(label=label, run=lambda fn, _expected: fn(*args), **kw)


def run_ops(cls: Any, ctor_args: tuple, ops: Sequence[tuple], expected: Sequence[Step] | None) -> list[Step]:
    """Build ``cls(*ctor_args)``, apply ``(method, args)`` ops in order, record each result.

    Stops right after the first step that differs from ``expected``, so a wrong id returned early
    is reported there, not as a confusing error three calls later.
    """
    obj, results, steps = cls(*ctor_args), [], []
    for k, (method, args) in enumerate(ops):
        real = tuple(results[a.index] if isinstance(a, Ref) else a for a in args)
        call = f"{method}({', '.join(map(repr, real))})"
        try:
            result = getattr(obj, method)(*real)
        except Exception as exc:
            exc.labkit_during = call
            raise
        results.append(result)
        steps.append(Step(call, result))
        if expected is not None and (k >= len(expected) or expected[k] != steps[-1]):
            break
    return steps


def ops_check(label: Text, ctor_args: tuple, ops: Sequence[tuple]) -> Check:
    """A check that drives a class through an operation sequence (see ``run_ops``)."""
    return Check(label=label, run=lambda cls, expected: run_ops(cls, ctor_args, ops, expected))
