"""Concept-check questions: what is right, and what to say about each answer.

Pure Python, no widgets: ``question.check(answer) -> Feedback`` is what the quiz widget calls on a
click, and what tests and headless runs call directly. Drawing lives in ``quiz.py``.

    q = MultipleChoice(
        question={"zh": "KV 缓存里存的是什么？", "en": "What does the KV cache hold?"},
        options=[{"zh": "每层的 K 和 V", "en": "K and V of every layer"}, ...],
        answer=0,
        explanations=[{"zh": "对：……", "en": "Right: ..."}, ...])
    q.check(1)  # Feedback(correct=False, message="✗ 不对。……")
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

from labkit.assess.text import Text, localize
from labkit.i18n import t

LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Feedback:
    """The verdict on one answer and the words shown to the learner (current language)."""

    correct: bool
    message: str


@dataclass(frozen=True)
class MultipleChoice:
    """One right option among ``options``; ``explanations[i]`` says why option i is right or wrong."""

    question: Text
    options: Sequence[Text]
    answer: int
    explanations: Sequence[Text] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not 2 <= len(self.options) <= len(LETTERS):
            raise ValueError(f"options must have 2 to {len(LETTERS)} entries, got {len(self.options)}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer must be an option index in [0, {len(self.options) - 1}], "
                             f"got {self.answer!r}")
        if self.explanations and len(self.explanations) != len(self.options):
            raise ValueError("explanations must have one entry per option, got "
                             f"{len(self.explanations)} for {len(self.options)} options")

    def check(self, choice: Union[int, str]) -> Feedback:
        """``choice`` is an option index, its letter ("B") or its text in either language."""
        index = self._index_of(choice)
        if index is None:
            return Feedback(False, t(f"没有这个选项：{choice!r}", f"No such option: {choice!r}"))
        correct = index == self.answer
        verdict = t("✓ 正确。", "✓ Correct.") if correct else t("✗ 不对。", "✗ Not quite.")
        why = localize(self.explanations[index]) if self.explanations else ""
        return Feedback(correct, f"{verdict} {why}".strip())

    def _index_of(self, choice: Union[int, str]) -> int | None:
        if isinstance(choice, int) and not isinstance(choice, bool):
            return choice if 0 <= choice < len(self.options) else None
        if isinstance(choice, str):
            text = choice.strip()
            if len(text) == 1 and text.upper() in LETTERS[:len(self.options)]:
                return LETTERS.index(text.upper())
            for i, option in enumerate(self.options):
                texts = [option] if isinstance(option, str) else list(option.values())
                if text in texts:
                    return i
        return None


@dataclass(frozen=True)
class Numeric:
    """A number answer, right when ``|x - answer| <= max(tol, rel_tol * |answer|)``.

    ``tol`` is absolute, in ``unit``; ``hint`` is shown with every wrong answer and
    ``explanation`` with the right one.
    """

    question: Text
    answer: float
    tol: float = 0.0
    unit: Text = ""
    hint: Text = ""
    rel_tol: float = 0.0
    explanation: Text = ""

    def __post_init__(self) -> None:
        if self.tol < 0 or self.rel_tol < 0:
            raise ValueError(f"tol and rel_tol must be >= 0, got {self.tol}, {self.rel_tol}")

    def check(self, value: Union[float, str]) -> Feedback:
        """``value`` is a number or the text typed into the box ("819,200" is fine)."""
        x = parse_number(value)
        if x is None:
            return Feedback(False, t(f"请输入一个数字（收到 {value!r}）。",
                                     f"Please enter a number (got {value!r})."))
        if self.is_close(x):
            unit = localize(self.unit)
            done = t(f"✓ 正确：{format_number(self.answer)} {unit}。",
                     f"✓ Correct: {format_number(self.answer)} {unit}.")
            return Feedback(True, f"{done} {localize(self.explanation)}".strip())
        direction = t("偏大", "too high") if x > self.answer else t("偏小", "too low")
        wrong = t(f"✗ {format_number(x)} {direction}。", f"✗ {format_number(x)} is {direction}.")
        return Feedback(False, f"{wrong} {localize(self.hint)}".strip())

    def is_close(self, x: float) -> bool:
        allowed = max(self.tol, self.rel_tol * abs(self.answer))
        return abs(x - self.answer) <= allowed + 1e-12 * max(1.0, abs(self.answer))


def parse_number(value: Union[float, int, str]) -> float | None:
    """A finite float from a number or from text such as " 819,200 " or "8e5"; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip().replace(",", "").replace("，", "").replace("_", "").replace(" ", "")
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def format_number(x: float) -> str:
    """819200 → "819,200"; 0.04 → "0.04"; 1234.5 → "1,234.5"."""
    if float(x).is_integer():
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.1f}"
    return f"{x:.4g}"
