"""What the learner reads about a failing case: input, expected vs actual, their line, or time-out.

Only the first failing case is described, so the hidden tests are not all revealed at once.
"""

from __future__ import annotations

import contextlib
import signal
import textwrap
from dataclasses import dataclass
from typing import Any

from labkit.assess.checks import Check, Step
from labkit.assess.sandbox import ErrorInfo, NotPlain
from labkit.assess.text import localize
from labkit.i18n import t


@dataclass(frozen=True)
class CaseFailure:
    """The first failing case: which one, how it failed, and what to show about it."""

    index: int
    label: str
    kind: str          # "wrong" | "error" | "timeout" | "memory" | "type" | "reference" | "guarded" | "crash"
    expected: Any = None  # None for a hidden (random) case: its expected value never leaves the kernel's check
    got: Any = None
    error: ErrorInfo | None = None
    stdout: str = ""
    not_plain: NotPlain | None = None
    hidden: bool = False
    difference: str = ""  # for a hidden case: how the result is wrong, in words


# What to look at for failures that are not about the algorithm: these replace the exercise's
# hints (an endless loop is not helped by a hint about dicts), and the hint count does not move.
# A non-plain result needs no more than its own message (describe_not_plain).
ADVICE = {
    "timeout": {"zh": "检查每个循环的结束条件：每一轮都在向结束靠近吗？while 循环里的变量有没有更新？",
                "en": "Check each loop's exit condition: does every round move towards the end? "
                      "Is the variable in the while condition updated?"},
    "memory": {"zh": "看看哪里在不停地追加或复制列表/字符串：它们的大小应当与输入相当。",
               "en": "Look for a list or string that keeps growing or being copied: its size should "
                     "stay about the size of the input."},
    "reference": {"zh": "请用你自己的代码实现；做完之后可以用 .show_solution() 对照参考答案。",
                  "en": "Write it with your own code; afterwards, .show_solution() shows the reference to compare."},
    "guarded": {"zh": "检查时，参考答案和引擎里直接算出答案的函数、它们的源文件、子进程、给其他进程发信号都不可用："
                      "请用你自己的代码实现。",
                "en": "While checking, the reference, the engine's functions that compute the answer, their source "
                      "files, subprocesses and signals to other processes are unavailable: write it yourself."},
    "crash": {"zh": "你的代码是否调用了 os._exit、os.kill，或者让解释器崩溃的扩展？",
              "en": "Does your code call os._exit or os.kill, or an extension that crashes the interpreter?"},
}


def _short(value: Any, limit: int = 300) -> str:
    try:
        text = repr(value)
    except (ValueError, RecursionError):       # an int with too many digits, a deeply nested list
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + " …"


def _signal_name(exit_code: Any) -> str | None:
    if isinstance(exit_code, int) and exit_code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-exit_code).name
    return None


def describe_crash(exit_code: Any) -> str:
    name = _signal_name(exit_code)
    if name == "SIGKILL":
        return t("运行你代码的子进程被系统强行结束（SIGKILL），通常是因为内存用得太多。",
                 "The process running your code was killed by the system (SIGKILL), usually for using too much memory.")
    if name is not None:
        return t(f"运行你代码的子进程因信号 {name} 意外结束（内核没事）。",
                 f"The process running your code ended on signal {name} (your kernel is fine).")
    return t(f"运行你代码的子进程意外退出（退出码 {exit_code}）。",
             f"The process running your code exited unexpectedly (exit code {exit_code}).")


def describe_not_plain(refused: NotPlain) -> str:
    where = t(f"（位置 {refused.path}）", f" (at {refused.path})") if refused.path else ""
    during = t(f"调用 {refused.during} 时，", f"While calling {refused.during}, y") if refused.during else t("", "Y")
    kind = refused.type_name
    return t(f"{during}你的代码返回了一个 {kind} 对象{where}：{refused.text}\n"
             "  检查程序只接收普通数据：数字、字符串、列表、元组、字典（numpy/torch 的数值会自动转换）。",
             f"{during}our code returned a {kind} object{where}: {refused.text}\n"
             "  The checker accepts plain data only: numbers, strings, lists, tuples, dicts "
             "(numpy/torch values are converted).")


def describe_failure(failure: CaseFailure, check: Check, time_limit_s: float) -> str:
    """What the learner reads about the failing case, in the current language."""
    head = t(f"测试 {failure.index + 1}：{failure.label}", f"Test {failure.index + 1}: {failure.label}")
    if failure.kind == "timeout":
        body = t(f"运行超过 {time_limit_s:g} 秒，已停止（内核没事）。是不是有一个永远不结束的循环？",
                 f"Still running after {time_limit_s:g} s, so it was stopped (your kernel is fine). "
                 "Is there a loop that never ends?")
    elif failure.kind == "memory":
        during = failure.error.during if failure.error else None
        body = t(("在调用 " + during + " 时，" if during else "") + "你的代码用了太多内存，已停止（内核没事）。",
                 ("While calling " + during + ", y" if during else "Y") + "our code used too much memory, "
                 "so it was stopped (your kernel is fine).")
        if failure.error is None and isinstance(failure.got, (int, float)):
            body += t(f"\n  {time_limit_s:g} 秒时它已多占用约 {failure.got:,.0f} MiB，而且还在增长。",
                      f"\n  After {time_limit_s:g} s it had taken about {failure.got:,.0f} MiB more, and was still growing.")
    elif failure.kind == "crash":
        body = describe_crash(failure.got)
    elif failure.kind == "reference":
        body = t("你的代码调用了参考答案（reference solution）或引擎里直接算出答案的函数：检查时它们不可用。",
                 "Your code calls the reference solution, or the engine's own function for the answer: neither is "
                 "available while your code is checked.")
    elif failure.kind == "guarded":
        body = t(f"你的代码走了检查时不开放的路：{failure.error.message if failure.error else ''}",
                 f"Your code took a route closed while checking: {failure.error.message if failure.error else ''}")
    elif failure.kind == "type":
        body = describe_not_plain(failure.not_plain)
    elif failure.hidden:
        body = describe_hidden_mismatch(failure)
    elif failure.kind == "error":
        body = describe_error_info(failure.error)
    else:
        body = describe_mismatch(failure.expected, failure.got, check)
    advice = ADVICE.get(failure.kind)
    if advice:
        body += "\n  " + localize(advice)
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


def describe_hidden_mismatch(failure: CaseFailure) -> str:
    """A random case's failure: what came back and how it is wrong, never the expected value."""
    note = t("  （随机生成的隐藏测试：不显示期望值，只说哪里不对）",
             "  (a random hidden test: the expected value is not shown, only what is wrong)")
    if _is_trace(failure.got):
        return failure.difference + "\n" + note
    return t(f"  得到：{_short(failure.got)}\n  {failure.difference}\n", f"  got: {_short(failure.got)}\n  "
             f"{failure.difference}\n") + note


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return t("数字", "a number")
    if isinstance(value, (list, tuple)):
        return t("序列（列表或元组）", "a sequence (list or tuple)")
    if isinstance(value, dict):
        return t("字典", "a dict")
    return type(value).__name__


def _value_difference(expected: Any, got: Any) -> str:
    """How ``got`` differs from ``expected`` without stating ``expected``'s value."""
    if got is None and expected is not None:
        return t("返回了 None：是不是忘了 return？", "It returned None: a missing `return`?")
    if _type_word(expected) != _type_word(got):
        return t(f"类型不对：应当返回{_type_word(expected)}，得到的是{_type_word(got)}。",
                 f"Wrong type: it should return {_type_word(expected)}, got {_type_word(got)}.")
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return t("结果偏大。", "The result is too high.") if got > expected else t("结果偏小。", "The result is too low.")
    if isinstance(expected, (list, tuple)):
        if len(got) != len(expected):
            more = len(got) > len(expected)
            return t(f"元素个数不对（{'多了' if more else '少了'}）。",
                     f"Wrong number of entries ({'too many' if more else 'too few'}).")
        i = next(i for i, (e, g) in enumerate(zip(expected, got)) if e != g)
        inner = _value_difference(expected[i], got[i])
        return t(f"第 {i} 个元素（从 0 数）不对：{inner}", f"Entry {i} (from 0) is wrong: {inner}")
    if isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            parts = ([t(f"缺少键 {missing!r}", f"missing keys {missing!r}")] if missing else []) + \
                    ([t(f"多出键 {extra!r}", f"unexpected keys {extra!r}")] if extra else [])
            return t("；".join(parts) + "。", "; ".join(parts) + ".")
        wrong = [k for k in expected if expected[k] != got[k]]
        return t(f"这些键的值不对：{wrong!r}。", f"Wrong values at keys {wrong!r}.")
    return t("结果不对。", "The result is wrong.")


def describe_difference(expected: Any, got: Any) -> str:
    """In words, how ``got`` differs from ``expected`` (for a trace: at its first wrong step)."""
    if _is_trace(expected) and _is_trace(got):
        k = next((i for i, (e, g) in enumerate(zip(expected, got)) if e != g), min(len(expected), len(got)))
        lines = [f"  {_shown(s)}  ✓" for s in got[max(0, k - 6):k]]
        if k < len(expected) and k < len(got):
            inner = _value_difference(expected[k].result, got[k].result)
            lines.append(t(f"  {got[k].call} → {_short(got[k].result, 80)}  ✗ {inner}",
                           f"  {got[k].call} → {_short(got[k].result, 80)}  ✗ {inner}"))
        else:
            lines.append(t("  （操作序列长度不一致）", "  (the sequences have different lengths)"))
        return "\n".join(lines)
    return _value_difference(expected, got)


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
