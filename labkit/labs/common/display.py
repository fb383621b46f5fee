"""Helpers every lab uses: show labkit's own source, predict-then-reveal, and the fast-mode switch.

    show_source(BlockPool.allocate)          # highlighted source with file and line numbers
    predict("你预计浪费比例是多少？", measure_waste, unit="%")   # guess first, then measure
    predict("位置 40 在第几个槽位？", 152, kind="exact", lab="02", id="slot-40")   # right or wrong
    num_requests = fast(200, 20)             # 20 when LABKIT_FAST=1 (CI), else 200

Everything is drawn as plain HTML or ipywidgets, with inline styles, so it looks the same in
JupyterLab and in Voila.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

import ipywidgets as W

from labkit.assess.questions import format_number, parse_number
from labkit.assess.source import show_source, source_html  # noqa: F401  (re-exported for labs)
from labkit.assess.text import Text, localize, localize_html, relabel_on_language_change
from labkit.i18n import t
from labkit.report.results import record

FAST = os.environ.get("LABKIT_FAST") == "1"
"""Fast mode (``LABKIT_FAST=1``): every lab and dashboard runs smaller sweeps; CI uses it."""

_T = TypeVar("_T")


def fast(full_value: _T, fast_value: _T) -> _T:
    """``fast_value`` in fast mode, else ``full_value``: ``n = fast(200, 20)``."""
    return fast_value if FAST else full_value


# ----------------------------------------------------------------------------- predict

KINDS = ("exact", "measured", "direction", "p_value")
PERCENT_UNITS = ("%", "％")          # a guess in these units is judged in percentage points
P_THRESHOLD = 0.05                   # a p-value guess is judged by its side of this line
DIRECTIONS = ("bigger", "same", "smaller")
_DIRECTION_TEXT = {"bigger": {"zh": "更大", "en": "bigger"}, "same": {"zh": "差不多", "en": "about the same"},
                   "smaller": {"zh": "更小", "en": "smaller"}}


@dataclass(frozen=True)
class PredictionResult:
    """A learner's guess beside the measured value and the judgement for the prediction's kind.

    ``correct`` is True/False for exact and direction predictions and None for a measured quantity,
    which is judged by ``relative_error`` (None when the measured value is 0) and, when the run gave
    one, whether the guess lies inside its spread ``(low, high)``.
    """

    kind: str
    guess: Any
    actual: float
    relative_error: float | None
    message: str
    correct: bool | None = None
    spread: tuple[float, float] | None = None
    judgement: str = ""


def spread_of(spread: Any) -> tuple[float, float] | None:
    """A run's spread as (low, high): from a pair, or from a verdict or a ``compare()`` result
    (``ratio_min``, ``ratio_max``: the ratio's range over the paired rounds); None stays None."""
    if spread is None:
        return None
    if hasattr(spread, "ratio_min") and hasattr(spread, "ratio_max"):
        spread = (spread.ratio_min, spread.ratio_max)
    try:
        low, high = (float(v) for v in spread)
    except (TypeError, ValueError):
        raise ValueError("spread must be a (low, high) pair, a verdict or a compare() result (ratio_min, "
                         f"ratio_max), got {spread!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        return None                      # an undefined ratio (a zero time) gives no band
    return (min(low, high), max(low, high))


def _relative_error(x: float, actual: float) -> float | None:
    return (x - actual) / abs(actual) if actual != 0 else None


def _is_percent(unit: str) -> bool:
    return unit.strip() in PERCENT_UNITS


def _off_by(error: float | None, x: float, actual: float, unit: str = "") -> str:
    """How far a guess is from the measurement: in percentage points for a percentage ("4 %" vs
    "0.81 %" is 3.2 points, not "396 % too high"), else relative."""
    if _is_percent(unit):
        side = t("偏高", "too high") if x > actual else t("偏低", "too low")
        return t(f"{side} {abs(x - actual):.1f} 个百分点。", f"{abs(x - actual):.1f} percentage points {side}.")
    if error is None:
        return t(f"相差 {format_number(abs(x - actual))}。", f"Off by {format_number(abs(x - actual))}.")
    side = t("偏高", "too high") if error > 0 else t("偏低", "too low")
    return t(f"{side} {abs(error):.0%}。", f"{abs(error):.0%} {side}.")


def _direction_of(actual: float, baseline: float, same_within: float) -> str:
    if abs(actual - baseline) <= same_within * abs(baseline):
        return "same"
    return "bigger" if actual > baseline else "smaller"


def _parse_direction(guess: Any) -> str | None:
    text = str(guess).strip().lower()
    for key, words in _DIRECTION_TEXT.items():
        if text == key or text in (words["zh"], words["en"]) or text in {"bigger": ("大", ">", "more", "larger"),
                                                                         "same": ("同", "=", "不变", "equal"),
                                                                         "smaller": ("小", "<", "less", "fewer")}[key]:
            return key
    return None


class Prediction:
    """Write a guess, then see the measured value, judged by the prediction's kind.

    ``kind``:
      * ``"exact"``: an address, a count: the guess is right or wrong, and ``working`` (the worked
        computation, a text or a function of the measured value) is shown either way;
      * ``"measured"``: a timed or sampled quantity: the relative error, and whether the guess lies
        in the run's ``spread`` when there is one: a (low, high) pair in the prediction's unit, or a
        verdict / ``compare()`` result (its ``ratio_min``..``ratio_max`` over rounds, for a ratio),
        or a function returning either (called at reveal, after the measurement);
      * ``"direction"``: bigger / same / smaller than ``baseline`` (e.g. 1.0 for a speed-up),
        "same" meaning within ``same_within`` (relative) of it;
      * ``"p_value"``: a test's p-value: right when the guess falls on the same side of
        ``P_THRESHOLD`` (0.05) as the measured p, the absolute difference shown beside it.

    A measured guess in percent (``unit="%"``) is judged in percentage points, not relative error.

    ``answer`` is a value or a function called once at reveal time (a measurement). With ``lab`` and
    ``id`` every reveal is recorded in the lab's results summary (section ``predictions``) with the
    guess, the measured value and the judgement.
    """

    def __init__(self, question: Text, answer: Union[float, Callable[[], float]], unit: Text = "", *,
                 kind: str = "measured", working: Union[Text, Callable[[float], Text], None] = None,
                 spread: Union[tuple, Callable[[], tuple], None] = None, baseline: float = 1.0,
                 same_within: float = 0.05, lab: str | None = None, id: str | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if same_within < 0:
            raise ValueError(f"same_within must be >= 0, got {same_within!r}")
        if (lab is None) != (id is None):
            raise ValueError("lab and id go together: give both to record the prediction, or neither")
        self.question, self.answer, self.unit, self.kind = question, answer, unit, kind
        self.working, self.spread, self.baseline, self.same_within = working, spread, baseline, same_within
        self.lab, self.id = lab, id
        self._actual: float | None = None
        self._spread: tuple[float, float] | None = None

    def actual(self) -> float:
        if self._actual is None:
            self._actual = float(self.answer() if callable(self.answer) else self.answer)
            self._spread = spread_of(self.spread() if callable(self.spread) else self.spread)
        return self._actual

    def reveal(self, guess: Union[float, str], record: bool = True) -> PredictionResult:
        if self.kind == "direction":
            direction = _parse_direction(guess)
            if direction is None:
                raise ValueError(f"guess must be one of {DIRECTIONS}, got {guess!r}")
            result = self._judge_direction(direction)
        else:
            x = parse_number(guess)
            if x is None:
                raise ValueError(f"guess must be a number, got {guess!r}")
            judge = {"exact": self._judge_exact, "p_value": self._judge_p_value}.get(self.kind, self._judge_measured)
            result = judge(x)
        if record:
            self._record(result)
        return result

    def _judge_exact(self, x: float) -> PredictionResult:
        actual = self.actual()
        correct = abs(x - actual) <= 1e-9 * max(1.0, abs(actual))
        unit = f" {localize(self.unit)}" if localize(self.unit) else ""
        verdict = t("✓ 对。", "✓ Right.") if correct else t(f"✗ 不对（你写的是 {format_number(x)}）。",
                                                              f"✗ Not right (you wrote {format_number(x)}).")
        whole = int(actual) if actual.is_integer() else actual        # a count reads as 3, not 3.0
        working = self.working(whole) if callable(self.working) else self.working
        shown = t(f"答案：{format_number(actual)}{unit}。", f"Answer: {format_number(actual)}{unit}.")
        message = " ".join(p for p in (verdict, shown, localize(working) if working else "") if p)
        return PredictionResult("exact", x, actual, _relative_error(x, actual), message, correct,
                                judgement="right" if correct else "wrong")

    def _judge_measured(self, x: float) -> PredictionResult:
        actual = self.actual()
        error = _relative_error(x, actual)
        spread = self._spread
        unit = localize(self.unit)
        head = t(f"测得：{format_number(actual)} {unit}；你的预测：{format_number(x)} {unit}。",
                 f"Measured: {format_number(actual)} {unit}; your prediction: {format_number(x)} {unit}.")
        if spread is not None:
            low, high = min(spread), max(spread)
            inside = low <= x <= high
            band = t(f"本机这次各轮测得 {format_number(low)}–{format_number(high)} {unit}",
                     f"this machine measured {format_number(low)}–{format_number(high)} {unit} across rounds")
            tail = t(f"你的预测落在{band}的范围之内：差别在这台机器自己的噪声里，算猜中了。",
                     f"Your guess lies inside what {band}: within this machine's own noise, a hit.") if inside else \
                t(f"{_off_by(error, x, actual, unit)}（{band}，你的预测在这个范围之外）",
                  f"{_off_by(error, x, actual, unit)} ({band}; your guess lies outside that band)")
            judgement = "inside spread" if inside else "outside spread"
        else:
            tail = _off_by(error, x, actual, unit) if x != actual else t("与测得值相同。", "Equal to the measured value.")
            judgement = "relative error"
        return PredictionResult("measured", x, actual, error, f"{head} {tail}".strip(), None, spread, judgement)

    def _judge_p_value(self, x: float) -> PredictionResult:
        """A p-value is not a quantity to hit: judged by whether the guess falls on the same side of
        ``P_THRESHOLD`` as the test's p, with the absolute difference beside it."""
        if not 0 <= x <= 1:
            raise ValueError(f"a p-value guess lies between 0 and 1, got {x!r}")
        actual = self.actual()
        same_side = (x < P_THRESHOLD) == (actual < P_THRESHOLD)

        def side(p: float) -> str:
            if p < P_THRESHOLD:
                return t(f"低于 {P_THRESHOLD:g}（有显著差异）", f"below {P_THRESHOLD:g} (a significant difference)")
            return t(f"不低于 {P_THRESHOLD:g}（看不出差别）", f"at or above {P_THRESHOLD:g} (no difference seen)")
        verdict = t("✓ 同一侧：", "✓ Same side: ") if same_side else t("✗ 不在同一侧：", "✗ Other side: ")
        message = t(f"{verdict}测得 p = {actual:.3f}，{side(actual)}；你的预测 {format_number(x)}，{side(x)}。"
                    f"两者相差 {abs(x - actual):.2f}（p 值没有“准确值”可猜，要看的是它落在阈值哪一侧）。",
                    f"{verdict}measured p = {actual:.3f}, {side(actual)}; your prediction {format_number(x)}, {side(x)}. "
                    f"They differ by {abs(x - actual):.2f} (a p-value has no exact value to hit; what matters is its "
                    "side of the threshold).")
        return PredictionResult("p_value", x, actual, None, message, same_side,
                                judgement="same side" if same_side else "other side")

    def _judge_direction(self, direction: str) -> PredictionResult:
        actual = self.actual()
        truth = _direction_of(actual, self.baseline, self.same_within)
        correct = direction == truth
        unit = localize(self.unit)
        words = localize(_DIRECTION_TEXT[truth])
        same = t(f"（“差不多”指与 {format_number(self.baseline)} 相差不超过 {self.same_within:.0%}）",
                 f" ('about the same' means within {self.same_within:.0%} of {format_number(self.baseline)})")
        verdict = t("✓ 对。", "✓ Right.") if correct else t(f"✗ 你选的是“{localize(_DIRECTION_TEXT[direction])}”。",
                                                              f"✗ You chose '{localize(_DIRECTION_TEXT[direction])}'.")
        message = t(f"{verdict} 测得 {format_number(actual)} {unit}，比 {format_number(self.baseline)} {words}{same}。",
                    f"{verdict} Measured {format_number(actual)} {unit}: {words} than {format_number(self.baseline)}{same}.")
        return PredictionResult("direction", direction, actual, None, message, correct,
                                judgement="right" if correct else "wrong")

    def _record(self, result: PredictionResult) -> None:
        if self.lab is None:
            return
        question = self.question if isinstance(self.question, str) else self.question.get("zh", "")
        record(self.lab, "predictions", self.id, {
            "question": question, "kind": result.kind, "guess": result.guess, "measured": result.actual,
            "unit": localize(self.unit), "judgement": result.judgement, "correct": result.correct,
            "relative_error": result.relative_error, "spread": list(result.spread) if result.spread else None,
            "baseline": self.baseline if self.kind == "direction" else None})

    def widget(self) -> W.VBox:
        return PredictionView(self).box

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)


class PredictionView:
    """Question, a guess (a box, or three buttons for a direction) and a reveal button; the guess
    locks once the answer is shown."""

    def __init__(self, prediction: Prediction) -> None:
        self.prediction = prediction
        self.result: PredictionResult | None = None
        self.note: str | None = None
        self.title, self.unit, self.output = W.HTML(), W.HTML(), W.HTML()
        self.entry = W.Text(layout=W.Layout(width="12em"))
        self.choice = W.ToggleButtons(options=[(d, d) for d in DIRECTIONS], value=None)
        self.button = W.Button(button_style="info")
        self.button.on_click(lambda _b: self.reveal())
        guess = [self.choice] if prediction.kind == "direction" else [self.entry, self.unit]
        self.box = W.VBox([self.title, W.HBox([*guess, self.button]), self.output],
                          layout=W.Layout(border="1px dashed #999", padding="6px", max_width="760px"))
        self.relabel()
        relabel_on_language_change(self.relabel)

    def _guess(self):
        return self.choice.value if self.prediction.kind == "direction" else self.entry.value

    def reveal(self) -> None:
        guess = self._guess()
        if guess is None or (self.prediction.kind != "direction" and parse_number(guess) is None):
            self.note = "need_guess"
            self.relabel()
            return
        self.button.disabled, self.entry.disabled, self.choice.disabled = True, True, True
        self.button.description = t("测量中…", "Measuring…")
        self.result = self.prediction.reveal(guess)
        self.relabel()

    def relabel(self) -> None:
        self.title.value = f"<b>{t('先预测：', 'Predict first: ')}</b>" + localize_html(self.prediction.question)
        self.entry.placeholder = t("先写下你的预测", "write your prediction first")
        self.unit.value = f"&nbsp;{localize_html(self.prediction.unit)}&nbsp;"
        value = self.choice.value
        self.choice.options = [(localize(_DIRECTION_TEXT[d]), d) for d in DIRECTIONS]
        self.choice.value = value
        self.button.description = t("揭晓", "Reveal")
        if self.result is not None:
            self.result = self.prediction.reveal(self.result.guess, record=False)   # re-worded, not re-measured
            colour = {True: "#1b7f3b", False: "#b3261e"}.get(self.result.correct, "inherit")
            self.output.value = f"<b style='color:{colour}'>{html.escape(self.result.message)}</b>"
        elif self.note == "need_guess":
            self.output.value = t("请先写下（或选出）你的预测，再揭晓。", "Write (or pick) your prediction first, then reveal.")


def predict(question: Text, answer: Union[float, Callable[[], float]], unit: Text = "", **how) -> Prediction:
    """A predict-then-reveal widget; the last expression of a cell shows it. ``how``: ``kind``,
    ``working``, ``spread``, ``baseline``, ``same_within``, ``lab`` and ``id`` (see ``Prediction``)."""
    return Prediction(question, answer, unit, **how)
