"""Hidden test cases: a call with fixed arguments, or an operation sequence on a class.

A ``Check`` knows how to run the learner's function or class on one hidden input. It runs in the
sandbox's child, which holds no expected value; the exercise runs the reference solution the same
way, in the kernel, after the child is gone, and compares plain data there. Sequences are recorded
as ``Step(call, result)`` so a mismatch can be shown as the calls leading up to it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

from labkit.assess.plain import to_plain
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

    ``run(target, None)`` calls the learner's function or class on the hidden input and returns
    what it observed (the second argument is always None: the child that runs the learner's code
    never holds an expected value). The expected value is ``run(reference, None)`` unless given;
    an ``expected`` given here must be something the learner may see (it is an input, like the
    target distribution ``p``). ``compare(got, expected)`` and ``explain(expected, got)`` see plain
    data only. ``hint`` is the index of the exercise hint this case is about (None: let the
    exercise's ``diagnose`` choose); ``trace`` marks an operation sequence (a list of ``Step``).
    ``reveal=False`` marks a random hidden case: a failure says how the result is wrong (type,
    length, which entry, too high or too low) but never shows the expected value, so answers
    cannot be hard-coded case by case; named teaching cases keep ``reveal=True``.
    """

    label: Text
    run: Callable[[Any, Any], Any]
    expected: Any = FROM_REFERENCE
    compare: Callable[[Any, Any], bool] = operator.eq
    explain: Callable[[Any, Any], str] | None = None
    hint: int | None = None
    trace: bool = False
    reveal: bool = True
    diagnose: Callable[[Any, Any], int | None] | None = None   # this case's own hint picker (plain data)


def call_check(name: str, args: tuple, note: Text = "", **kw) -> Check:
    """A check that calls ``fn(*args)``; the label shows the call, e.g. ``f(30, 3, 64, 2)  # note``."""
    call = f"{name}({', '.join(map(repr, args))})"
    notes = {"zh": note, "en": note} if isinstance(note, str) else note
    label = {lang: f"{call}  # {text}" if text else call for lang, text in notes.items()}
    return Check(label=label, run=lambda fn, _expected: fn(*args), **kw)


def run_ops(cls: Any, ctor_args: tuple, ops: Sequence[tuple], _expected: Any = None) -> list[Step]:
    """Build ``cls(*ctor_args)``, apply ``(method, args)`` ops in order, record each result.

    Every result is made plain data as it comes (a non-plain one is reported with its call). On
    an exception the steps done so far travel with it (``labkit_steps``), so the kernel can report
    an earlier wrong step — the real mistake — rather than the error it caused three calls later.
    """
    obj, results, steps = cls(*ctor_args), [], []
    for method, args in ops:
        real = tuple(results[a.index] if isinstance(a, Ref) else a for a in args)
        call = f"{method}({', '.join(map(repr, real))})"
        try:
            result = to_plain(getattr(obj, method)(*real))
        except BaseException as exc:                     # re-raised, with where it happened
            exc.labkit_during, exc.labkit_steps = call, list(steps)
            raise
        results.append(result)
        steps.append(Step(call, result))
    return steps


def ops_check(label: Text, ctor_args: tuple, ops: Sequence[tuple], **kw) -> Check:
    """A check that drives a class through an operation sequence (see ``run_ops``)."""
    return Check(label=label, run=lambda cls, _expected: run_ops(cls, ctor_args, ops), trace=True, **kw)


def as_trace(value: Any) -> list[Step] | None:
    """Plain ``[(call, result), ...]`` back from the child as ``Step``s; None if it is not one."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str) for s in value):
        return None
    return [Step(*s) for s in value]


def same_sequence(got: Any, expected: Any) -> bool:
    """A list or a tuple with the expected entries in order (the task texts allow either)."""
    return isinstance(got, (list, tuple)) and list(got) == list(expected)


def first_wrong_step(expected: Any, got: Any) -> Step | None:
    """The learner's first step whose result differs from the expected trace (None if none does)."""
    expected, got = as_trace(expected) or [], as_trace(got) or []
    return next((g for e, g in zip(expected, got) if e != g), None)
