"""A coding exercise: hidden checks, a reference solution out of sight, hints one at a time.

    ex = exercise("kv_bytes_per_token")      # from labkit.assess
    def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype_bytes): ...
    ex.check(kv_bytes_per_token)            # → CheckResult, drawn as a coloured box
    ex.hint()                               # the next hint

A ``Check`` (``checks.py``) runs the learner's function (or class) on one hidden input in a
forked child (``sandbox.py``) and compares the result with what the reference solution in
``labkit/assess/solutions/`` gives on the same input. The learner sees, for the first failing case
only, its input, the expected and the actual value (or the exception at their own line, or that
it ran out of time) and the next hint, worded in ``report.py``; never the reference code.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import textwrap
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Sequence

from labkit.assess.checks import FROM_REFERENCE, Check
from labkit.assess.report import CaseFailure, describe_failure
from labkit.assess.sandbox import Outcome, RunReport, run_cases
from labkit.assess.source import show_source
from labkit.assess.text import Text, localize
from labkit.i18n import t


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
    if inspect.isfunction(target):
        return [target]
    if inspect.isclass(target):
        return [m for name, m in vars(target).items() if inspect.isfunction(m) and name != "__init__"]
    return []


def _is_placeholder(statement: ast.stmt) -> bool:
    """``pass``, ``...``, a docstring, or ``raise NotImplementedError``: what a starter body holds."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def find_stub(target: Any) -> str | None:
    """The name of a function or method whose body is still a placeholder (see above)."""
    for fn in _own_functions(target):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = getattr(tree.body[0], "body", []) if tree.body else []
        if body and all(_is_placeholder(s) for s in body):
            return fn.__qualname__
    return None


@dataclass
class Exercise:
    """Hidden checks against a reference solution named ``"module:attribute"`` (loaded lazily)."""

    name: str
    checks: Sequence[Check]
    reference: str
    hints: Sequence[Text] = ()
    title: Text = ""
    task: Text = ""
    time_limit_s: float = 5.0
    hints_given: int = field(default=0, init=False)

    def reference_solution(self) -> Any:
        module, _, attribute = self.reference.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def expected_values(self) -> list[Any]:
        solution = self.reference_solution()
        return [c.run(solution, None) if c.expected is FROM_REFERENCE else c.expected for c in self.checks]

    def hint(self) -> Hint | None:
        """The next hint (the last one repeats); None when the exercise has none."""
        if not self.hints:
            return None
        number = min(self.hints_given, len(self.hints) - 1) + 1
        self.hints_given += 1
        return Hint(number, len(self.hints), localize(self.hints[number - 1]))

    def check(self, target: Any) -> CheckResult:
        """Run every hidden check on ``target`` (a function or class) in a child process."""
        if target is None or target is Ellipsis:
            return self._early_failure(t("还没有可检查的代码：请先定义函数/类，再把它传给 check()。",
                                         "Nothing to check yet: define the function/class, then pass it to check()."))
        stub = find_stub(target)
        if stub is not None:
            return self._early_failure(t(f"{stub} 还只是占位（pass / ... / NotImplementedError）：请先写出它的实现。",
                                         f"{stub} is still a placeholder (pass / ... / NotImplementedError): "
                                         "write its body first."))
        expected = self.expected_values()
        cases = [partial(_run_case, check, exp) for check, exp in zip(self.checks, expected)]
        report = run_cases(target, cases, self.time_limit_s)
        return self._result(report, expected)

    def _early_failure(self, text: str) -> CheckResult:
        hint = self.hint()
        message = f"✗ {text}" + (f"\n\n{hint}" if hint else "")
        return CheckResult(self.name, False, message, 0, len(self.checks), hint=str(hint) if hint else None)

    def _result(self, report: RunReport, expected: list[Any]) -> CheckResult:
        failure, num_passed = first_failure(self.checks, expected, report)
        if failure is None:
            message = t(f"✓ 全部 {len(self.checks)} 个隐藏测试通过！", f"✓ All {len(self.checks)} hidden tests passed!")
            return CheckResult(self.name, True, message, num_passed, len(self.checks), elapsed_s=report.elapsed_s)
        hint = self.hint()
        head = t(f"✗ 通过 {num_passed}/{len(self.checks)} 个隐藏测试。",
                 f"✗ {num_passed}/{len(self.checks)} hidden tests passed.")
        body = describe_failure(failure, self.checks[failure.index], self.time_limit_s)
        message = f"{head}\n{body}" + (f"\n\n{hint}" if hint else "")
        return CheckResult(self.name, False, message, num_passed, len(self.checks), failure,
                           str(hint) if hint else None, report.elapsed_s)

    def show_solution(self):
        """Display the reference solution's source (for after the attempt, or for instructors)."""
        return show_source(self.reference_solution())

    def _repr_html_(self) -> str:
        title = html.escape(localize(self.title) or self.name)
        task = html.escape(localize(self.task)).replace("\n", "<br>")
        more = t(f"{len(self.checks)} 个隐藏测试，{len(self.hints)} 条提示。用 .check(你的函数) 检查，.hint() 看提示。",
                 f"{len(self.checks)} hidden tests, {len(self.hints)} hints. Use .check(your_function), .hint().")
        return f"<div><b>{title}</b><br>{task}<br><i>{html.escape(more)}</i></div>"


def _run_case(check: Check, expected: Any, target: Any) -> Any:
    return check.run(target, expected)


def first_failure(checks: Sequence[Check], expected: list[Any], report: RunReport) -> tuple[CaseFailure | None, int]:
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
        failure = CaseFailure(done, localize(checks[done].label), kind, got=report.exit_code)
    return failure, passed


def _judge(index: int, check: Check, expected: Any, outcome: Outcome) -> CaseFailure | None:
    label = localize(check.label)
    if outcome.error is not None:
        return CaseFailure(index, label, "error", error=outcome.error, stdout=outcome.stdout)
    try:
        same = bool(check.compare(outcome.value, expected))
    except Exception:
        same = False
    return None if same else CaseFailure(index, label, "wrong", expected, outcome.value, stdout=outcome.stdout)
