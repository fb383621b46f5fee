"""Question banks as data: each lab's multiple-choice questions live in a TOML file beside its quiz.

A teacher edits ``labkit/labs/<lab>/quiz.toml`` (text, options, feedback), never Python. ``load``
reads a file and refuses a malformed one with the file, the question id and the field named;
``render`` draws the rows as ``MultipleChoice`` questions, one function for every bank, so one test
checks every bank at once: at least four options, every option explained, every distractor named,
and the length cue (is the right option the longest one?) measured per lab. A question file:

    [[question]]
    id = "kv-what"                        # stable: results are recorded under it
    stem.zh = "KV 缓存里存的是什么？"
    stem.en = "What does the KV cache hold?"
    # shuffle = false                     # when the order means something (N, N log N, N², 2^N)

    [[question.option]]
    correct = true                        # exactly one option per question
    text.zh = "每层每个 KV 头的 K 和 V"
    text.en = "K and V of every layer and KV head"
    feedback.zh = "对：……"
    feedback.en = "Right: ..."

    [[question.option]]
    text.zh = "每个 token 的 Q 向量"
    text.en = "The Q vector of every token"
    feedback.zh = "Q 只用一次……"
    feedback.en = "Q is used once ..."
    misconception = "Q is cached too"     # every distractor names the misreading it stands for

What must be computed stays in the lab's ``quiz.py``: numeric questions from formulas and cited
shapes, questions on the learner's own run (``on_own_result``). ``from_file(path, after=...)``
places them after the question they follow. The file is parsed as TOML only: its text is shown
as written, never run.

An exercise's text is data the same way: ``labkit/labs/<lab>/exercises.toml`` holds each exercise's
title, task and hints, keyed by its stable name; ``ExerciseText`` reads it once and refuses a
malformed file, or one that lacks an exercise of the lab or names another, with the file, the
exercise and the field named. Its checks, case data and the feedback computed from a wrong answer
stay in the lab's ``exercises.py``. An exercise file:

    [kv_bytes_per_token]                  # the exercise's name: stable, results are recorded under it
    title.zh = "练习：每个 token 的 KV 缓存字节数"
    title.en = "Exercise: KV cache bytes per token"
    task.zh = "实现 kv_bytes_per_token(...)：……"
    task.en = "Write kv_bytes_per_token(...) returning ..."

    [[kv_bytes_per_token.hints]]          # in order: a failing check picks a hint by its position
    zh = "每一层、每个 KV 头……"
    en = "Every layer and every KV head ..."
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from labkit.assess.questions import LETTERS, MultipleChoice, Numeric
from labkit.report.results import read_summary

try:
    import tomllib
except ModuleNotFoundError:         # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

LANGUAGES = ("zh", "en")
QUESTION_FIELDS = ("id", "stem", "shuffle", "option")
OPTION_FIELDS = ("text", "feedback", "correct", "misconception")
EXERCISE_FIELDS = ("title", "task", "hints")


class Option(NamedTuple):
    """One option of a row: its text, why it is right or wrong, and (a distractor only) its misconception."""

    zh: str
    en: str
    why_zh: str
    why_en: str
    misconception: str


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
        object.__setattr__(self, "options", [Option(*option) for option in self.options])   # named fields


class BankError(ValueError):
    """A question or exercise file that cannot be used; the message names the file, the question or
    exercise, and the field."""


def _parse(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BankError(f"{path}: not valid TOML ({e})") from None


def load(path: str | Path) -> list[Row]:
    """The questions of a TOML question file, in file order; a malformed file is refused (``BankError``)."""
    path = Path(path)
    data = _parse(path)
    unknown = sorted(set(data) - {"question"})
    if unknown:
        raise BankError(f"{path}: unknown field {unknown[0]!r} at the top (a file holds [[question]] tables only)")
    questions = data.get("question")
    if not questions:
        raise BankError(f"{path}: field 'question' is missing: a file holds one or more [[question]] tables")
    if not isinstance(questions, list):
        raise BankError(f"{path}: field 'question' must be [[question]] tables (double brackets), one per question")
    rows: list[Row] = []
    seen: dict[str, int] = {}
    for n, question in enumerate(questions, 1):
        row = _row(path, n, question)
        if row.id in seen:
            raise BankError(f"{path}: question {row.id!r}: field 'id' repeats question {seen[row.id]}'s id "
                            f"(question {n}); ids must be unique")
        seen[row.id] = n
        rows.append(row)
    return rows


def _row(path: Path, n: int, question: object) -> Row:
    if not isinstance(question, dict):
        raise BankError(f"{path}: question {n}: field 'question' must be a [[question]] table")
    qid = question.get("id")
    where = f"{path}: question {qid!r}" if isinstance(qid, str) and qid.strip() else f"{path}: question {n} (no id)"
    _known(where, question, QUESTION_FIELDS)
    if not isinstance(qid, str) or not qid.strip():
        raise BankError(f"{where}: field 'id' is " + ("missing" if qid is None else "not a non-empty string"))
    shuffle = question.get("shuffle", True)
    if not isinstance(shuffle, bool):
        raise BankError(f"{where}: field 'shuffle' must be true or false, got {shuffle!r}")
    stem = _text(where, question, "stem")
    options = question.get("option")
    if options is None:
        raise BankError(f"{where}: field 'option' is missing: a question has [[question.option]] tables")
    if not isinstance(options, list) or not all(isinstance(o, dict) for o in options):
        raise BankError(f"{where}: field 'option' must be [[question.option]] tables")
    if not 2 <= len(options) <= len(LETTERS):
        raise BankError(f"{where}: field 'option': a question has 2 to {len(LETTERS)} options, got {len(options)}")
    parsed = [_option(f"{where}: option {i}", option) for i, option in enumerate(options, 1)]
    correct = [i for i, (option, right) in enumerate(parsed, 1) if right]
    if len(correct) != 1:
        found = "no option is" if not correct else f"options {', '.join(map(str, correct))} are"
        raise BankError(f"{where}: field 'correct': {found} marked correct = true; exactly one must be")
    return Row(qid, stem, [option for option, _ in parsed], answer=correct[0] - 1, shuffle=shuffle)


def _option(where: str, option: dict) -> tuple[Option, bool]:
    _known(where, option, OPTION_FIELDS)
    right = option.get("correct", False)
    if not isinstance(right, bool):
        raise BankError(f"{where}: field 'correct' must be true or false, got {right!r}")
    text, feedback = _text(where, option, "text"), _text(where, option, "feedback")
    misconception = option.get("misconception")
    if misconception is not None and not isinstance(misconception, str):
        raise BankError(f"{where}: field 'misconception' must be a string, got {misconception!r}")
    if right and misconception is not None:
        raise BankError(f"{where}: field 'misconception' on the correct option: only a distractor names one")
    if not right and not (misconception or "").strip():
        raise BankError(f"{where}: field 'misconception' is " + ("missing" if misconception is None else "empty")
                        + ": every distractor names the misconception it stands for")
    return Option(*text, *feedback, misconception or ""), right


def _text(where: str, table: dict, name: str) -> tuple[str, str]:
    value = table.get(name)
    if value is None:
        raise BankError(f"{where}: field '{name}' is missing: it needs {name}.zh and {name}.en")
    if not isinstance(value, dict):
        raise BankError(f"{where}: field '{name}' must hold {name}.zh and {name}.en, got {value!r}")
    return _languages(where, value, f"{name}.")


def _languages(where: str, value: dict, prefix: str = "") -> tuple[str, str]:
    """The text in every language, each present and non-empty; ``prefix`` names the field in messages."""
    unknown = sorted(set(value) - set(LANGUAGES))
    if unknown:
        raise BankError(f"{where}: unknown field '{prefix}{unknown[0]}' (languages: {', '.join(LANGUAGES)})")
    for language in LANGUAGES:
        text = value.get(language)
        if text is None:
            raise BankError(f"{where}: field '{prefix}{language}' is missing")
        if not isinstance(text, str) or not text.strip():
            raise BankError(f"{where}: field '{prefix}{language}' must be non-empty text, got {text!r}")
    return value["zh"], value["en"]


def _known(where: str, table: dict, fields: Sequence[str]) -> None:
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise BankError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(fields)})")


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


def load_exercises(path: str | Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The text of each exercise in a TOML exercise file, ``{name: {"title", "task", "hints"}}`` (texts as
    ``{"zh", "en"}``); the file holds exactly the exercises ``names``, else it is refused (``BankError``)."""
    path = Path(path)
    data = _parse(path)
    extra = [name for name in data if name not in names]
    if extra and extra[0] in EXERCISE_FIELDS:
        raise BankError(f"{path}: field {extra[0]!r} at the top: it belongs under its exercise's [name] table")
    if extra:
        raise BankError(f"{path}: exercise {extra[0]!r} is not an exercise of this lab "
                        f"(its exercises: {', '.join(names)})")
    missing = [name for name in names if name not in data]
    if missing:
        raise BankError(f"{path}: exercise {missing[0]!r} is missing: every exercise of the lab has a "
                        f"[{missing[0]}] table with its title, task and hints")
    return {name: _exercise(f"{path}: exercise {name!r}", name, data[name]) for name in names}


def _exercise(where: str, name: str, entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise BankError(f"{where}: must be a [{name}] table with title, task and hints, got {entry!r}")
    _known(where, entry, EXERCISE_FIELDS)
    title, task = _t(*_text(where, entry, "title")), _t(*_text(where, entry, "task"))
    hints = entry.get("hints")
    if hints is None:
        raise BankError(f"{where}: field 'hints' is missing: one [[{name}.hints]] table per hint "
                        "(or hints = [] for none)")
    if not isinstance(hints, list):
        raise BankError(f"{where}: field 'hints' must be a list: [[{name}.hints]] tables (double brackets), "
                        f"one per hint, got {hints!r}")
    texts = []
    for i, hint in enumerate(hints, 1):
        if not isinstance(hint, dict):
            raise BankError(f"{where}: hint {i}: field 'hints' must hold tables with zh and en, got {hint!r}")
        texts.append(_t(*_languages(f"{where}: hint {i}", hint)))
    return {"title": title, "task": task, "hints": texts}


class ExerciseText:
    """A lab's exercise text (``exercises.toml``), read and checked once, on first use; ``names`` are the
    lab's exercises. ``text(name)`` gives that ``Exercise``'s name, title, task and hints as keywords:

        TEXT = ExerciseText(Path(__file__).with_name("exercises.toml"), ("kv_bytes_per_token", ...))
        Exercise(**TEXT("kv_bytes_per_token"), checks=..., reference=...)
    """

    def __init__(self, path: str | Path, names: Sequence[str]) -> None:
        self.path, self.names = Path(path), tuple(names)
        self._texts: dict[str, dict[str, Any]] | None = None

    def __call__(self, name: str) -> dict[str, Any]:
        if name not in self.names:
            raise ValueError(f"{name!r} is not one of the exercises {self.names} of {self.path}")
        if self._texts is None:
            self._texts = load_exercises(self.path, self.names)
        text = self._texts[name]                  # copies: an exercise cannot change the next one's text
        return {"name": name, "title": dict(text["title"]), "task": dict(text["task"]),
                "hints": [dict(hint) for hint in text["hints"]]}


def render(rows: Iterable[Row]) -> list[MultipleChoice]:
    """The rows as ``MultipleChoice`` questions (one function draws every bank)."""
    return [MultipleChoice(question=_t(*row.question),
                           options=[_t(o.zh, o.en) for o in row.options],
                           answer=row.answer,
                           explanations=[_t(o.why_zh, o.why_en) for o in row.options],
                           shuffle=row.shuffle, id=row.id,
                           misconceptions=tuple(o.misconception for o in row.options))
            for row in rows]


def from_file(path: str | Path, after: Mapping[str, Sequence] | None = None) -> list:
    """The file's multiple-choice questions in file order, with the computed questions ``after[id]``
    placed right after question ``id`` (a question the file no longer has is refused by name)."""
    after = dict(after or {})
    choices = render(load(path))
    missing = sorted(set(after) - {q.id for q in choices})
    if missing:
        raise BankError(f"{path}: question {missing[0]!r} is missing: the quiz places computed questions after it")
    return [x for q in choices for x in (q, *after.get(q.id, ()))]


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
