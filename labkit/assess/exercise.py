"""A coding exercise: hidden checks, a reference solution out of sight, hints matched to the failure.

    ex = exercise("kv_bytes_per_token")      # from labkit.labs.exercises
    def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype_bytes): ...
    ex.check(kv_bytes_per_token)            # → CheckResult, drawn as a coloured box
    ex.hint()                               # the next hint

``check`` runs the learner's function (or class) on every hidden input in a forked grandchild
(``sandbox.py``) that holds no expected value and can use neither the reference solution nor the
engine's own function for the answer (``guard.py``); results come back as plain data. Only then,
in the kernel, does the reference solution run on the same inputs, and the two are compared. The
learner sees, for the first failing case only, its input, the expected and the actual value (for
a random hidden case: how it is wrong, not the expected value), or the exception at their own
line, or that it ran out of time or memory, and the hint chosen for how it failed, worded in
``report.py``; never the reference code, which only ``show_solution()`` shows.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from labkit.assess import guard
from labkit.assess.checks import FROM_REFERENCE, Check, as_trace
from labkit.assess.plain import to_plain
from labkit.assess.reference import class_dict, is_reference, kind_of
from labkit.assess.report import CaseFailure, describe_difference, describe_failure
from labkit.assess.sandbox import (
    DEFAULT_MEMORY_LIMIT_MB,
    GROWING_SHARE,
    Outcome,
    RunReport,
    run_cases,
)
from labkit.assess.source import show_source
from labkit.assess.text import Text, localize
from labkit.i18n import t
from labkit.report.results import read_summary, record


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one ``exercise.check(fn)``; drawn as HTML in a notebook."""

    exercise: str
    passed: bool
    message: str
    num_passed: int
    num_checks: int
    failure: CaseFailure | None = None
    hint: str | None = None
    elapsed_s: float = 0.0

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, printer, cycle: bool) -> None:   # IPython's plain-text view
        printer.text(self.message)

    def _repr_html_(self) -> str:
        colour, background = ("#1b7f3b", "#eef8f0") if self.passed else ("#b3261e", "#fdf0ef")
        return (f'<div style="border-left:4px solid {colour};background:{background};padding:6px 10px;'
                f'margin:4px 0;white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace);'
                f'font-size:90%">{html.escape(self.message)}</div>')


@dataclass(frozen=True)
class Hint:
    number: int
    total: int
    text: str

    def __str__(self) -> str:
        return t(f"提示 {self.number}/{self.total}：", f"Hint {self.number}/{self.total}: ") + self.text

    def _repr_html_(self) -> str:
        return (f'<div style="border-left:4px solid #b8860b;background:#fff8e6;padding:6px 10px;'
                f'white-space:pre-wrap">{html.escape(str(self))}</div>')


def _own_functions(target: Any) -> list:
    """The functions to look at for placeholders; nothing of the learner's runs to find them."""
    kind = kind_of(target)
    if kind == "function":
        return [target]
    if kind == "class":
        return [m for name, m in class_dict(target).items() if kind_of(m) == "function" and name != "__init__"]
    return []


def _is_unfinished(statement: ast.stmt) -> bool:
    """``...`` or ``raise NotImplementedError``: what a starter body holds (``pass`` is legitimate)."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def find_stub(target: Any) -> str | None:
    """The name of a function or method whose body is still a placeholder.

    Unfinished means ``...`` or ``raise NotImplementedError``, optionally after a docstring. A
    ``pass`` body is not: ``def free(self, start): pass`` may be the learner's real answer, and a
    function that only passes is told it returned None by the failing case itself.
    """
    for fn in _own_functions(target):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = getattr(tree.body[0], "body", []) if tree.body else []
        body = body[1:] if body and _is_docstring(body[0]) else body
        if len(body) == 1 and _is_unfinished(body[0]):
            return fn.__qualname__
    return None


@dataclass
class Exercise:
    """Hidden checks against a reference solution named ``"module:attribute"`` (loaded lazily).

    ``engine``: the engine's own functions (or whole modules) that compute this exercise's answer,
    ``"module:Qual.name"`` or ``"module"``; in the checked process they are as unavailable as the
    reference (``guard.py``). ``diagnose(expected, got, check)`` picks the hint for a wrong answer
    from how it is wrong (a hint index, or None: no hint fits, so none is pushed). ``lab``: record
    each check in that lab's results summary (section ``exercises``).
    """

    name: str
    checks: Sequence[Check]
    reference: str
    hints: Sequence[Text] = ()
    title: Text = ""
    task: Text = ""
    time_limit_s: float = 5.0
    memory_limit_mb: float | None = DEFAULT_MEMORY_LIMIT_MB
    engine: Sequence[str] = ()
    diagnose: Callable[[Any, Any, Check], int | None] | None = None
    lab: str | None = None
    hints_given: int = field(default=0, init=False)
    attempts: int = field(default=0, init=False)

    def reference_solution(self) -> Any:
        module, _, attribute = self.reference.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def expected_values(self) -> list[Any]:
        """Plain expected values, from the reference run here in the kernel (call it after the child)."""
        solution = self.reference_solution()
        values = [to_plain(c.run(solution, None) if c.expected is FROM_REFERENCE else c.expected) for c in self.checks]
        return [as_trace(v) if c.trace else v for c, v in zip(self.checks, values)]

    def hint(self) -> Hint | None:
        """The next hint (the last one repeats); None when the exercise has none."""
        if not self.hints:
            return None
        number = min(self.hints_given, len(self.hints) - 1) + 1
        self.hints_given += 1
        return self._hint(number - 1)

    def _hint(self, index: int) -> Hint:
        return Hint(index + 1, len(self.hints), localize(self.hints[index]))

    def check(self, target: Any) -> CheckResult:
        """Run every hidden check on ``target`` (a function or class) in a child process."""
        if target is None or target is Ellipsis:
            return self._early_failure(t("还没有可检查的代码：请先定义函数/类，再把它传给 check()。",
                                         "Nothing to check yet: define the function/class, then pass it to check()."))
        reference = self.reference_solution()
        if is_reference(target, reference):
            return self._early_failure(t(
                "这是参考答案（reference solution）本身，不是你的代码。请写出你自己的实现再检查；"
                "想对照答案时可以用 .show_solution()。",
                "This is the reference solution itself, not your code. Write your own and check that; "
                ".show_solution() shows the reference when you want to compare."), hint=False)
        stub = find_stub(target)
        if stub is not None:
            return self._early_failure(t(f"{stub} 还只是占位（... / NotImplementedError）：请先写出它的实现。",
                                         f"{stub} is still a placeholder (... / NotImplementedError): "
                                         "write its body first."))
        forbidden, protected = self.guarded()
        report = run_cases(target, [_case_for(c) for c in self.checks], self.time_limit_s,
                           self.memory_limit_mb, forbidden=(reference, *forbidden), protected=protected)
        result = self._result(report, self.expected_values())   # expectations exist only after the child is gone
        self._record(result)
        return result

    def guarded(self) -> tuple[list[Any], frozenset[str]]:
        """The engine objects disabled while checking, and the files the checked code may not read."""
        objects = [obj for spec in self.engine for obj in guard.resolve(spec)]
        modules = {self.reference.partition(":")[0], *(guard.module_of(spec) for spec in self.engine)}
        return objects, guard.protected_files(modules)

    def _record(self, result: "CheckResult") -> None:
        """Count the attempt and write it to the lab's summary (first pass and attempts kept)."""
        self.attempts += 1
        if self.lab is None:
            return
        summary = read_summary(self.lab) or {}
        before = summary.get("exercises", {}).get(self.name, {})
        attempts = int(before.get("attempts", 0)) + 1
        passed_at = before.get("passed_at_attempt") or (attempts if result.passed else None)
        record(self.lab, "exercises", self.name, {
            "passed": bool(before.get("passed")) or result.passed, "attempts": attempts,
            "passed_at_attempt": passed_at, "last_passed": result.passed,
            "num_passed": result.num_passed, "num_checks": result.num_checks})

    def self_test(self) -> CheckResult:
        """Run the reference solution through the same sandbox and checks (for authors and tests)."""
        report = run_cases(self.reference_solution(), [_case_for(c) for c in self.checks],
                           self.time_limit_s, self.memory_limit_mb)
        return self._result(report, self.expected_values())

    def _early_failure(self, text: str, hint: bool = True) -> CheckResult:
        shown = self._hint(0) if hint and self.hints else None    # the first hint; the count does not move
        message = f"✗ {text}" + (f"\n\n{shown}" if shown else "")
        return CheckResult(self.name, False, message, 0, len(self.checks), hint=str(shown) if shown else None)

    def _hint_for(self, failure: CaseFailure, expected: Any) -> Hint | None:
        """The hint for this failure, chosen by how it failed: the one the case's own ``diagnose`` picks,
        else the one the case names, else the one the exercise's ``diagnose`` picks from the
        difference. None when no hint fits (an unrelated hint misleads more than none: an exception's
        own line is its feedback), and for non-algorithmic failures (time, memory, type, crash,
        reference, guard), whose advice ``describe_failure`` gives; ``.hint()`` gives the next one."""
        if failure.kind not in ("wrong", "error") or not self.hints:
            return None
        check, wrong = self.checks[failure.index], failure.kind == "wrong"
        index = check.diagnose(expected, failure.got) if check.diagnose and wrong else None
        if index is None:
            index = check.hint
        if index is None and self.diagnose and wrong:
            index = self.diagnose(expected, failure.got, check)
        if index is not None and 0 <= index < len(self.hints):
            self.hints_given = max(self.hints_given, index + 1)
            return self._hint(index)
        return None

    def _result(self, report: RunReport, expected: list[Any]) -> CheckResult:
        failure, num_passed = first_failure(self.checks, expected, report, self.memory_limit_mb)
        if failure is None:
            message = t(f"✓ 全部 {len(self.checks)} 个隐藏测试通过！", f"✓ All {len(self.checks)} hidden tests passed!")
            return CheckResult(self.name, True, message, num_passed, len(self.checks), elapsed_s=report.elapsed_s)
        hint = self._hint_for(failure, expected[failure.index])
        head = t(f"✗ 通过 {num_passed}/{len(self.checks)} 个隐藏测试。",
                 f"✗ {num_passed}/{len(self.checks)} hidden tests passed.")
        body = describe_failure(failure, self.checks[failure.index], self.time_limit_s)
        more = "" if hint or not self.hints or failure.kind not in ("wrong", "error") else "\n\n" + t("需要时用 .hint() 看提示。", "Use .hint() when you want a hint.")
        message = f"{head}\n{body}" + (f"\n\n{hint}" if hint else more)
        return CheckResult(self.name, False, message, num_passed, len(self.checks), failure,
                           str(hint) if hint else None, report.elapsed_s)

    def show_solution(self):
        """Display the reference solution's source (for after the attempt, or for instructors)."""
        return show_source(self.reference_solution())

    def _repr_html_(self) -> str:
        title = html.escape(localize(self.title) or self.name)
        task = html.escape(localize(self.task)).replace("\n", "<br>")
        more = t(f"{len(self.checks)} 个隐藏测试，{len(self.hints)} 条提示。用 .check(你的函数) 检查，.hint() 看提示；"
                 ".show_solution() 显示参考答案（做完再看）。",
                 f"{len(self.checks)} hidden tests, {len(self.hints)} hints. Use .check(your_function), .hint(); "
                 ".show_solution() shows the reference (after your attempt).")
        return f"<div><b>{title}</b><br>{task}<br><i>{html.escape(more)}</i></div>"


def _case_for(check: Check):
    """The case the child runs: the learner's target on the check's input, nothing else."""
    run = check.run
    return lambda target: run(target, None)


def first_failure(checks: Sequence[Check], expected: list[Any], report: RunReport,
                  memory_limit_mb: float | None = None) -> tuple[CaseFailure | None, int]:
    """The first failing case (None if all passed) and how many cases passed."""
    failure, passed = None, 0
    for i, outcome in enumerate(report.outcomes):
        case_failure = _judge(i, checks[i], expected[i], outcome)
        if case_failure is None:
            passed += 1
        elif failure is None:
            failure = case_failure
    done = len(report.outcomes)
    if failure is None and done < report.num_cases:
        kind = "timeout" if report.timed_out else "crash"
        grown = report.grown_mb
        if kind == "timeout" and memory_limit_mb and grown is not None and grown > GROWING_SHARE * memory_limit_mb:
            kind = "memory"                        # stopped on time while still allocating
        failure = CaseFailure(done, localize(checks[done].label), kind,
                              got=grown if kind == "memory" else report.exit_code)
    return failure, passed


_ERROR_KINDS = {"MemoryError": "memory", "ReferenceSolutionUsed": "reference", "NotAllowedWhileChecked": "guarded"}


def _judge(index: int, check: Check, expected: Any, outcome: Outcome) -> CaseFailure | None:
    """Compare plain data (``outcome`` holds nothing else), so no learner code runs here."""
    label = localize(check.label)
    if outcome.not_plain is not None:
        return CaseFailure(index, label, "type", not_plain=outcome.not_plain, stdout=outcome.stdout)
    if outcome.error is not None:
        wrong_first = _wrong_before_error(check, expected, outcome.partial)
        if wrong_first is not None and not check.reveal:
            shown, steps = wrong_first
            return CaseFailure(index, label, "wrong", None, steps, stdout=outcome.stdout, hidden=True,
                               difference=describe_difference(shown, steps))
        if wrong_first is not None:
            return CaseFailure(index, label, "wrong", *wrong_first, stdout=outcome.stdout)
        kind = _ERROR_KINDS.get(outcome.error.type_name, "error")
        return CaseFailure(index, label, kind, error=outcome.error, stdout=outcome.stdout)
    got = as_trace(outcome.value) if check.trace else outcome.value
    got = outcome.value if got is None else got
    try:
        same = bool(check.compare(got, expected))
    except Exception:                          # e.g. a recursive structure
        same = False
    if same:
        return None
    if not check.reveal:                       # a random case: say how it is wrong, not what is right
        return CaseFailure(index, label, "wrong", None, got, stdout=outcome.stdout, hidden=True,
                           difference=describe_difference(expected, got))
    return CaseFailure(index, label, "wrong", _shown_part(check, expected, got), got, stdout=outcome.stdout)


def _shown_part(check: Check, expected: Any, got: Any) -> Any:
    """For a sequence, the expected steps up to the first wrong one: the result keeps no more of
    the hidden answer than the message shows (later checks' code could read it back)."""
    if not check.trace or not isinstance(expected, list) or not isinstance(got, list):
        return expected
    k = next((i for i, (e, g) in enumerate(zip(expected, got)) if e != g), min(len(expected), len(got)))
    return expected[:k + 1]


def _wrong_before_error(check: Check, expected: Any, partial: Any) -> tuple | None:
    """(expected shown, steps) up to an earlier wrong step, when a sequence went wrong before it raised."""
    steps = as_trace(partial) if check.trace else None
    if not steps or not isinstance(expected, list) or not any(e != g for e, g in zip(expected, steps)):
        return None
    return _shown_part(check, expected, steps), steps
