"""What the learner reads about a failing case: input, expected vs actual, their line, or time-out.

Only the first failing case is described, so the hidden tests are not all revealed at once.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from labkit.assess.checks import Check, Step
from labkit.assess.sandbox import ErrorInfo
from labkit.i18n import t


@dataclass(frozen=True)
class CaseFailure:
    """The first failing case: which one, how it failed, and what to show about it."""

    index: int
    label: str
    kind: str                      # "wrong" | "error" | "timeout" | "crash"
    expected: Any = None
    got: Any = None
    error: ErrorInfo | None = None
    stdout: str = ""



def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " …"


def describe_failure(failure: CaseFailure, check: Check, time_limit_s: float) -> str:
    """What the learner reads about the failing case, in the current language."""
    head = t(f"测试 {failure.index + 1}：{failure.label}", f"Test {failure.index + 1}: {failure.label}")
    if failure.kind == "timeout":
        body = t(f"运行超过 {time_limit_s:g} 秒，已停止（内核没事）。是不是有一个永远不结束的循环？",
                 f"Still running after {time_limit_s:g} s, so it was stopped (your kernel is fine). "
                 "Is there a loop that never ends?")
    elif failure.kind == "crash":
        body = t(f"运行你代码的子进程意外退出（退出码 {failure.got}）。",
                 f"The process running your code exited unexpectedly (exit code {failure.got}).")
    elif failure.kind == "error":
        body = describe_error_info(failure.error)
    else:
        body = describe_mismatch(failure.expected, failure.got, check)
    printed = failure.stdout.strip()
    if printed:
        body += "\n" + t("你的 print 输出：\n", "What your code printed:\n") + textwrap.indent(printed[-600:], "  ")
    return f"{head}\n{body}"


def describe_error_info(error: ErrorInfo) -> str:
    if error.during:
        text = t(f"在调用 {error.during} 时，你的代码抛出了 {error.summary()}",
                 f"While calling {error.during}, your code raised {error.summary()}")
    else:
        text = t(f"你的代码抛出了 {error.summary()}", f"Your code raised {error.summary()}")
    if error.lineno is not None:
        where = t(f"\n  第 {error.lineno} 行（{error.function} 中）：", f"\n  line {error.lineno} (in {error.function}): ")
        text += where + (error.line or "")
    return text


def describe_mismatch(expected: Any, got: Any, check: Check) -> str:
    if _is_trace(expected) and _is_trace(got):
        text = describe_trace_mismatch(expected, got)
    else:
        text = t(f"  期望：{_short(expected)}\n  得到：{_short(got)}", f"  expected: {_short(expected)}\n  got:      {_short(got)}")
        if got is None and expected is not None:
            text += t("\n  （你的函数返回了 None：是不是忘了 return？）", "\n  (Your function returned None: a missing `return`?)")
    extra = check.explain(expected, got) if check.explain else ""
    return text + (f"\n  {extra}" if extra else "")


def _is_trace(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(s, Step) for s in value)


def _shown(step: Step) -> str:
    return step.call if step.result is None else f"{step.call} → {_short(step.result, 80)}"


def describe_trace_mismatch(expected: list[Step], got: list[Step], context: int = 6) -> str:
    """The calls before the first wrong step (✓) and that step with expected vs actual (✗)."""
    k = next((i for i, (e, g) in enumerate(zip(expected, got)) if e != g), min(len(expected), len(got)))
    lines = [f"  {_shown(s)}  ✓" for s in got[max(0, k - context):k]]
    if k > context:
        lines.insert(0, t(f"  …（前 {k - context} 步正确）", f"  … ({k - context} earlier steps correct)"))
    if k < len(expected) and k < len(got):
        lines.append(t(f"  {got[k].call} → 期望 {_short(expected[k].result, 80)}，得到 {_short(got[k].result, 80)}  ✗",
                       f"  {got[k].call} → expected {_short(expected[k].result, 80)}, got {_short(got[k].result, 80)}  ✗"))
    else:
        lines.append(t("  （操作序列长度不一致）", "  (the sequences have different lengths)"))
    return "\n".join(lines)
