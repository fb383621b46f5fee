"""Question banks as data: one row per multiple-choice question, rendered by one function.

A row holds the question, its options, which option is right, why each option is right or wrong,
and, for every distractor, the misconception it stands for. Writing banks this way keeps each lab's
quiz a table a reader can scan, and lets one test check every bank at once: at least four options,
every option explained, every distractor named, and the length cue (is the right option the
longest one?) measured per lab.

    ROWS = [
        Row("kv-what", ("KV 缓存里存的是什么？", "What does the KV cache hold?"),
            [("每层每个 KV 头的 K 和 V", "K and V of every layer and KV head", "对：……", "Right: ...", ""),
             ("每个 token 的 Q 向量", "The Q vector of every token", "Q 只用一次……", "Q is used once ...",
              "Q is cached too")]),
    ]
    questions = render(ROWS)

An option is ``(zh, en, why_zh, why_en, misconception)``; the right option's misconception is "".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from labkit.assess.questions import MultipleChoice, Numeric
from labkit.report.results import read_summary

Option = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Row:
    """One multiple-choice question as data; ``answer`` indexes ``options``."""

    id: str
    question: tuple[str, str]
    options: Sequence[Option]
    answer: int = 0
    shuffle: bool = True            # False when the order means something (N, N log N, N², 2^N)

    def __post_init__(self) -> None:
        for i, option in enumerate(self.options):
            if len(option) != 5:
                raise ValueError(f"row {self.id!r}: option {i} must be (zh, en, why_zh, why_en, misconception), "
                                 f"got {len(option)} fields")
            if (i == self.answer) == bool(option[4]):
                raise ValueError(f"row {self.id!r}: option {i} " + ("is the answer and must not name a misconception"
                                                                   if i == self.answer else
                                                                   "is a distractor and must name its misconception"))


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def render(rows: Iterable[Row]) -> list[MultipleChoice]:
    """The rows as ``MultipleChoice`` questions (one function draws every bank)."""
    return [MultipleChoice(question=_t(*row.question),
                           options=[_t(o[0], o[1]) for o in row.options],
                           answer=row.answer,
                           explanations=[_t(o[2], o[3]) for o in row.options],
                           shuffle=row.shuffle, id=row.id,
                           misconceptions=tuple(o[4] for o in row.options))
            for row in rows]


def _length(text, language: str) -> int:
    return len(text if isinstance(text, str) else text.get(language, ""))


def answer_is_longest(question: MultipleChoice, language: str) -> bool:
    """True when the right option is at least as long as every other and not all options are equally long
    (a tie for longest still narrows a guess; options all of one length, such as numbers, give no cue)."""
    lengths = [_length(o, language) for o in question.options]
    return lengths[question.answer] >= max(lengths) > min(lengths)


def longest_share(questions: Iterable, language: str) -> float:
    """The share of multiple-choice questions whose right option is the longest (0 when there are none)."""
    choices = [q for q in questions if isinstance(q, MultipleChoice)]
    return sum(answer_is_longest(q, language) for q in choices) / len(choices) if choices else 0.0


def measured(lab: str, prediction_id: str) -> float | None:
    """The value the learner's own run measured for a recorded prediction, or None before the run."""
    summary = read_summary(lab) or {}
    value = summary.get("predictions", {}).get(prediction_id, {}).get("measured")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def on_own_result(lab: str, prediction_id: str, make) -> list[Numeric]:
    """``[make(value)]`` with the value this learner's run measured (a question on their own numbers),
    or ``[]`` while the lab has not measured it yet."""
    value = measured(lab, prediction_id)
    return [] if value is None else [make(value)]
