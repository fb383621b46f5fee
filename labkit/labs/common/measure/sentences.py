"""A verdict read out: conclusion sentences and table marks in the reader's language (Chinese with the
English term, or English: ``labkit.i18n``). The hedge around a finding comes from the verdict's
confidence, never from the caller: a lab passes the finding as if it were certain.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Protocol

from labkit.i18n import t

CONFIDENCE_LABELS = {"clear": ("明确（clear）", "clear"), "within noise": ("噪声之内（within noise）", "within noise"),
                     "machine busy": ("机器正忙（machine busy）", "machine busy")}


class Outcome(Protocol):
    """What a sentence reads from a verdict (``verdict.Verdict`` has these fields)."""

    direction: str
    confidence: str
    ratio: float
    ratio_min: float
    ratio_max: float
    clock: str
    rounds: int
    load_before: float | None
    load_after: float | None
    cores: int
    spread: float | None
    deterministic: bool


def fast_mode() -> bool:
    """Whether the labs run in fast mode (``LABKIT_FAST=1``, read now: a hint never suggests the mode on)."""
    return os.environ.get("LABKIT_FAST") == "1"


def _fmt(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if math.isfinite(x) else "∞"


def render(verdict: Outcome, *, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str],
           unit: str = "×", digits: int = 2, warn: bool = True) -> str:
    """A conclusion sentence from ``verdict`` (see ``Verdict.sentence``)."""
    nums = {"ratio": _fmt(verdict.ratio, digits) + unit, "lo": _fmt(verdict.ratio_min, digits) + unit,
            "hi": _fmt(verdict.ratio_max, digits) + unit}
    zh, en = {"greater": greater, "less": less, "same": same}[verdict.direction]
    clause = t(zh, en).format(**nums)
    if verdict.deterministic:
        return clause + t("。", ".")
    span = nums["lo"] if nums["lo"] == nums["hi"] else f"{nums['lo']}–{nums['hi']}"
    where = t(f"{nums['ratio']}，{verdict.rounds} 轮在 {span}", f"{nums['ratio']}; {verdict.rounds} rounds {span}")
    if verdict.clock:
        where += t(f"，{_clock_zh(verdict.clock)}", f"; {verdict.clock}")
    lower = clause[:1].lower() + clause[1:]
    if verdict.confidence == "clear":     # the clause states the ratio; add the rounds and the clock
        rounds = t(f"{verdict.rounds} 轮在 {span}", f"{verdict.rounds} rounds {span}")
        clock = t(f"，{_clock_zh(verdict.clock)}", f"; {verdict.clock}") if verdict.clock else ""
        return clause + t(f"（{rounds}{clock}）。", f" ({rounds}{clock}).")
    if verdict.confidence == "within noise" and verdict.rounds < 2:
        return t(f"只测了一轮（{where}），看不出噪声有多大：看起来{clause}，但这一轮不足以下结论；"
                 "多测几轮（重跑这一格）才能确定。",
                 f"Only one round ({where}), so the noise is unknown: it suggests that {lower}, but one round "
                 "is not enough to conclude; measure more rounds (rerun this cell) to be sure.")
    if verdict.confidence == "within noise":
        return t(f"测得 {where}：差别在噪声之内，这次测量不能说明「{clause}」。",
                 f"Measured {where}: the difference is within noise; this measurement does not show "
                 f"that {lower}.")
    if not warn:
        return t(f"测得 {where}，看起来{clause}（机器正忙，不可靠）。",
                 f"Measured {where}, which suggests that {lower} (machine busy: not reliable).")
    loads = [x for x in (verdict.load_before, verdict.load_after) if x is not None]
    if loads and max(loads) > verdict.cores:
        load_zh = f"负载 {max(loads):.1f}，{verdict.cores} 个核"
        load_en = f"load {max(loads):.1f} on {verdict.cores} cores"
    else:
        spread = verdict.spread or math.nan
        load_zh = f"同一件事各轮用时相差到 {spread:.1f} 倍"
        load_en = f"the same work took up to {spread:.1f}× longer in one round than in another"
    zh_do, en_do = _what_to_do("然后再运行这个单元格", "then run this cell again")
    return t(f"测得 {where}，看起来{clause}；但测量时机器正忙（{load_zh}），这个结论不可靠。{zh_do}",
             f"Measured {where}, which suggests that {lower}; but the machine was "
             f"busy while measuring ({load_en}), so this is not reliable. {en_do}")


def _what_to_do(zh_then: str, en_then: str) -> tuple[str, str]:
    """The advice after a busy measurement, (zh, en): fast mode is suggested only while it is off."""
    if fast_mode():
        return f"关掉别的程序，{zh_then}。", f"Close other programs, {en_then}."
    return (f"关掉别的程序，或在第一个单元格之前设置 LABKIT_FAST=1，{zh_then}。",
            f"Close other programs, or set LABKIT_FAST=1 before the first cell, {en_then}.")


def busy_warning(verdicts: Iterable[Outcome | None]) -> str:
    """One warning for a section whose sentences were rendered with ``warn=False``: "" when none of
    ``verdicts`` was measured on a busy machine."""
    busy = [v for v in verdicts if v is not None and v.confidence == "machine busy"]
    if not busy:
        return ""
    zh_do, en_do = _what_to_do("然后重跑本节", "then rerun this section")
    return t(f"本节 {len(busy)} 个结论测量时机器正忙（负载高于核数，或同一件事各轮用时相差太大），上面标着“不可靠”或“机器正忙”的结论和表格行不要当真。{zh_do}",
             f"{len(busy)} conclusion(s) in this section were measured while the machine was busy (load above the cores, "
             "or rounds of the same work far apart); do not trust the conclusions and table rows marked 'not reliable' or "
             f"'machine busy'. {en_do}")


def mark(verdict: Outcome, *, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str]) -> str:
    """A short table mark (see ``Verdict.mark``): the direction's (zh, en) word when clear, else the hedge."""
    if verdict.confidence == "within noise":
        return t("（噪声之内）", " (within noise)")
    if verdict.confidence == "machine busy":
        return t("（机器正忙）", " (machine busy)")
    return t(*{"greater": greater, "less": less, "same": same}[verdict.direction])


def confidence_label(confidence: str) -> str:
    """The confidence in the reader's language, Chinese with the English term (a table cell)."""
    return t(*CONFIDENCE_LABELS[confidence])


def _clock_zh(clock: str) -> str:
    if clock.startswith("CPU time"):
        return "CPU 时间"
    if clock.startswith("wall clock after torch.cuda"):
        return "墙钟时间（同步 GPU 后）"
    if clock.startswith("wall clock"):
        return "墙钟时间（客户端计时）" if "client" in clock else "墙钟时间"
    return clock
