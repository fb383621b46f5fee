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
from typing import Any, Sequence, Union

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


def _text_key(text: Text) -> str:
    return text if isinstance(text, str) else text.get("zh") or next(iter(text.values()), "")


def _seeded_order(n: int, key: str, learner: str | None) -> list[int]:
    indices = list(range(n))
    seed = hashlib.sha256(f"{learner or learner_id()}|{key}".encode()).digest()
    random.Random(seed).shuffle(indices)
    return indices


@dataclass(frozen=True)
class Ordering:
    """Put ``items`` in order; ``items`` is written in the right order.

    ``reasons[i]`` says why item i can only come after the item before it (shown when the learner
    puts it too early), ``explanation`` is shown with the right order. ``check(order)`` takes the
    learner's arrangement as item indices (as written) or item texts; it is exact, and a wrong
    arrangement is told the first item placed before the one it must follow, and that item's reason.
    The widget starts from a shuffled order (per learner, no item already in its place).
    """

    question: Text
    items: Sequence[Text]
    reasons: Sequence[Text] = ()
    explanation: Text = ""
    id: str | None = None

    def __post_init__(self) -> None:
        if not 3 <= len(self.items) <= len(LETTERS):
            raise ValueError(f"items must have 3 to {len(LETTERS)} entries, got {len(self.items)}")
        if self.reasons and len(self.reasons) != len(self.items):
            raise ValueError(f"reasons must have one entry per item, got {len(self.reasons)} for "
                             f"{len(self.items)} items")
        texts = [_text_key(i) for i in self.items]
        if len(set(texts)) != len(texts):
            raise ValueError("items must be distinct")

    @property
    def answer(self) -> list[int]:
        return list(range(len(self.items)))

    def key(self) -> str:
        return self.id if self.id is not None else _text_key(self.question)

    def start_order(self, learner: str | None = None) -> list[int]:
        """The order the widget shows first: shuffled per learner with no item already in its place
        (a derangement), so no step is given away."""
        order = _seeded_order(len(self.items), self.key(), learner)
        for attempt in range(1, 100):
            if all(i != j for i, j in enumerate(order)):
                return order
            order = _seeded_order(len(self.items), f"{self.key()}#{attempt}", learner)
        return self.answer[1:] + self.answer[:1]          # a rotation is always a derangement

    def _index_of(self, item: Union[int, str]) -> int | None:
        if isinstance(item, int) and not isinstance(item, bool):
            return item if 0 <= item < len(self.items) else None
        if isinstance(item, str):
            for i, text in enumerate(self.items):
                if item.strip() in ([text] if isinstance(text, str) else list(text.values())):
                    return i
        return None

    def parse(self, order: Sequence[Union[int, str]]) -> list[int] | None:
        """The arrangement as item indices, or None when it is not each item exactly once."""
        if isinstance(order, (str, bytes)) or not hasattr(order, "__len__"):
            return None
        indices = [self._index_of(x) for x in order]
        if None in indices or sorted(indices) != self.answer:
            return None
        return indices

    def check(self, order: Sequence[Union[int, str]]) -> Feedback:
        indices = self.parse(order)
        if indices is None:
            return Feedback(False, t(f"请把 {len(self.items)} 项各排一次（收到 {list(order)!r}）。",
                                     f"Arrange each of the {len(self.items)} items once (got {list(order)!r})."))
        if indices == self.answer:
            done = t("✓ 顺序正确。", "✓ Right order.")
            return Feedback(True, f"{done} {localize(self.explanation)}".strip())
        # The first item placed before the one it must follow: the pair named is the pair its reason explains.
        position = {item: i for i, item in enumerate(indices)}
        late = next(j for j in range(1, len(indices)) if position[j] < position[j - 1])
        early = late - 1
        placed = sum(i == j for i, j in zip(indices, self.answer))
        pair = t(f"✗ 顺序不对：「{localize(self.items[early])}」应排在「{localize(self.items[late])}」之前。",
                 f"✗ Not the right order: '{localize(self.items[early])}' comes before "
                 f"'{localize(self.items[late])}'.")
        why = localize(self.reasons[late]) if self.reasons else ""
        where = t(f"（{placed}/{len(self.items)} 项已在正确位置）", f"({placed}/{len(self.items)} items in place)")
        return Feedback(False, t("", " ").join(p for p in (pair, why, where) if p))


@dataclass(frozen=True)
class WhichFigure:
    """Pick the figure that shows a stated phenomenon, among two to four labelled A, B, C, D.

    ``figures[i]`` is a plotly figure or a zero-argument function building one (called when the
    question is drawn); figures are built from the lab's own data and carry no title that tells.
    ``explanations[i]`` says why figure i does or does not show it; ``misconceptions[i]`` names the
    misreading a wrong figure stands for ("" for the answer). Shown shuffled per learner like
    ``MultipleChoice``; ``check`` addresses figures by original index or letter in that order.
    """

    question: Text
    figures: Sequence[Any]
    answer: int
    explanations: Sequence[Text]
    misconceptions: Sequence[str]
    shuffle: bool = True
    id: str | None = None

    def __post_init__(self) -> None:
        if not 2 <= len(self.figures) <= 4:
            raise ValueError(f"figures must have 2 to 4 entries, got {len(self.figures)}")
        if not 0 <= self.answer < len(self.figures):
            raise ValueError(f"answer must be a figure index in [0, {len(self.figures) - 1}], got {self.answer!r}")
        for name in ("explanations", "misconceptions"):
            if len(getattr(self, name)) != len(self.figures):
                raise ValueError(f"{name} must have one entry per figure, got {len(getattr(self, name))} for "
                                 f"{len(self.figures)} figures")
        for i, m in enumerate(self.misconceptions):
            if (i == self.answer) == bool(m.strip()):
                raise ValueError(f"figure {i} " + ("is the answer and must not name a misconception"
                                                   if i == self.answer else
                                                   "is a distractor and must name its misconception"))

    def key(self) -> str:
        return self.id if self.id is not None else _text_key(self.question)

    def order(self, learner: str | None = None) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.figures)))
        return _seeded_order(len(self.figures), self.key(), learner)

    def figure(self, index: int):
        """Figure ``index`` (original order), built if it was given as a function."""
        figure = self.figures[index]
        return figure() if callable(figure) else figure

    def check(self, choice: Union[int, str]) -> Feedback:
        index = choice if isinstance(choice, int) and not isinstance(choice, bool) else None
        if isinstance(choice, str) and len(choice.strip()) == 1 and choice.strip().upper() in LETTERS[:len(self.figures)]:
            index = LETTERS.index(choice.strip().upper())
        if index is None or not 0 <= index < len(self.figures):
            return Feedback(False, t(f"没有这张图：{choice!r}", f"No such figure: {choice!r}"))
        correct = index == self.answer
        verdict = t("✓ 正确。", "✓ Correct.") if correct else t("✗ 不对。", "✗ Not quite.")
        return Feedback(correct, f"{verdict} {localize(self.explanations[index])}".strip())
