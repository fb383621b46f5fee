"""Concept-check questions: what is right, and what to say about each answer.

Pure Python, no widgets: ``question.check(answer) -> Feedback`` is what the quiz widget calls on a
click, and what tests and headless runs call directly. Drawing lives in ``quiz.py``.

    q = MultipleChoice(
        question={"zh": "KV 缓存里存的是什么？", "en": "What does the KV cache hold?"},
        options=[{"zh": "每层的 K 和 V", "en": "K and V of every layer"}, ...],
        answer=0,
        explanations=[{"zh": "对：……", "en": "Right: ..."}, ...])
    q.check(1)  # Feedback(correct=False, message="✗ 不对。……")

``check`` always addresses options by their original identity (index as written, its letter in
that order, or its text). The widget shows them shuffled, per learner and per question
(``MultipleChoice.order``): the same learner sees the same order after a reload, another learner
another one, so "the answer is always A" stops working. A wrong number that is right up to a power
of ten or of 1024 is told to check its unit.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Sequence, Union

from labkit.assess.learner import learner_id
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
    shuffle: bool = True               # False for options whose order means something (1×, 2×, 4×)
    id: str | None = None              # stable key for the shuffle and the results; default: the text
    misconceptions: Sequence[str] = ()  # per option: the misreading a distractor stands for ("" for the answer)

    def __post_init__(self) -> None:
        if not 2 <= len(self.options) <= len(LETTERS):
            raise ValueError(f"options must have 2 to {len(LETTERS)} entries, got {len(self.options)}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer must be an option index in [0, {len(self.options) - 1}], "
                             f"got {self.answer!r}")
        if self.explanations and len(self.explanations) != len(self.options):
            raise ValueError("explanations must have one entry per option, got "
                             f"{len(self.explanations)} for {len(self.options)} options")
        if self.misconceptions and len(self.misconceptions) != len(self.options):
            raise ValueError("misconceptions must have one entry per option, got "
                             f"{len(self.misconceptions)} for {len(self.options)} options")

    def check(self, choice: Union[int, str]) -> Feedback:
        """``choice`` is an option index, its letter ("B") or its text in either language."""
        index = self._index_of(choice)
        if index is None:
            return Feedback(False, t(f"没有这个选项：{choice!r}", f"No such option: {choice!r}"))
        correct = index == self.answer
        verdict = t("✓ 正确。", "✓ Correct.") if correct else t("✗ 不对。", "✗ Not quite.")
        why = localize(self.explanations[index]) if self.explanations else ""
        return Feedback(correct, f"{verdict} {why}".strip())

    def key(self) -> str:
        if self.id is not None:
            return self.id
        texts = [self.question, *self.options]
        return "|".join(t if isinstance(t, str) else t.get("zh") or next(iter(t.values()), "") for t in texts)

    def order(self, learner: str | None = None) -> list[int]:
        """Original option indices in the order this learner sees them (stable per learner)."""
        indices = list(range(len(self.options)))
        if self.shuffle:
            seed = hashlib.sha256(f"{learner or learner_id()}|{self.key()}".encode()).digest()
            random.Random(seed).shuffle(indices)
        return indices

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
    id: str | None = None              # stable key in the results summary; default: the question's text

    def key(self) -> str:
        if self.id is not None:
            return self.id
        return self.question if isinstance(self.question, str) else self.question.get("zh") or \
            next(iter(self.question.values()), "")

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
        return Feedback(False, t("", " ").join(p for p in (wrong, self.unit_hint(x), localize(self.hint)) if p))

    def unit_hint(self, x: float) -> str:
        """A note when ``x`` is right up to a power of ten or of 1024 (a unit slip), else ""."""
        factor = scale_factor(x, self.answer, max(self.tol, self.rel_tol * abs(self.answer)))
        if factor is None:
            return ""
        unit = localize(self.unit)
        in_unit = t(f"（答案以「{unit}」为单位）", f" (the answer is in {unit})") if unit else ""
        return t(f"它与答案正好差了 {factor} 倍：是单位或数量级出了错吗{in_unit}？",
                 f"It is off by exactly a factor of {factor}: did a unit or an order of magnitude slip{in_unit}?")

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


_SCALES = [(10 ** k, str(10 ** k) if k <= 6 else f"10^{k}") for k in range(1, 13)] + \
          [(1024 ** k, "1024" if k == 1 else f"1024^{k}") for k in range(1, 5)]


def scale_factor(x: float, answer: float, allowed: float) -> str | None:
    """The power of ten or of 1024 that turns ``x`` into ``answer`` (closest fit), or None."""
    if x == 0 or answer == 0 or (x > 0) != (answer > 0):
        return None
    slack = max(allowed, 0.01 * abs(answer))
    fits = [(abs(x * f - answer) / abs(answer), name) for factor, name in _SCALES
            for f in (factor, 1 / factor) if abs(x * f - answer) <= slack]
    return min(fits)[1] if fits else None
