"""Helpers every lab uses: show labkit's own source, predict-then-reveal, and the fast-mode switch.

    show_source(BlockPool.allocate)          # highlighted source with file and line numbers
    predict("你预计浪费比例是多少？", measure_waste, unit="%")   # guess first, then measure
    num_requests = fast(200, 20)             # 20 when LABKIT_FAST=1 (CI), else 200

Everything is drawn as plain HTML or ipywidgets, with inline styles, so it looks the same in
JupyterLab and in Voila.
"""

from __future__ import annotations

import html
import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

import ipywidgets as W
from IPython.display import HTML, display

from labkit.assess.questions import format_number, parse_number
from labkit.assess.source import show_source, source_html  # noqa: F401  (re-exported for labs)
from labkit.assess.text import Text, localize, localize_html, relabel_on_language_change
from labkit.i18n import t

FAST = os.environ.get("LABKIT_FAST") == "1"
"""Fast mode (``LABKIT_FAST=1``): every lab and dashboard runs smaller sweeps; CI uses it."""

_T = TypeVar("_T")


def fast(full_value: _T, fast_value: _T) -> _T:
    """``fast_value`` in fast mode, else ``full_value``: ``n = fast(200, 20)``."""
    return fast_value if FAST else full_value


# ----------------------------------------------------------------------------- predict

@dataclass(frozen=True)
class PredictionResult:
    """A learner's guess next to the measured value; ``relative_error`` is None when actual is 0."""

    guess: float
    actual: float
    relative_error: float | None
    message: str


def _closeness(relative_error: float | None) -> str:
    if relative_error is None:
        return ""
    if abs(relative_error) <= 0.1:
        return t("非常接近！", "Very close!")
    side = t("偏高", "too high") if relative_error > 0 else t("偏低", "too low")
    return t(f"{side} {abs(relative_error):.0%}。", f"{abs(relative_error):.0%} {side}.")


class Prediction:
    """Write a guess, then see the measured value. ``answer`` may be a value or a function to
    call at reveal time (a measurement); it is called once."""

    def __init__(self, question: Text, answer: Union[float, Callable[[], float]], unit: Text = "") -> None:
        self.question, self.answer, self.unit = question, answer, unit
        self._actual: float | None = None

    def actual(self) -> float:
        if self._actual is None:
            self._actual = float(self.answer() if callable(self.answer) else self.answer)
        return self._actual

    def reveal(self, guess: Union[float, str]) -> PredictionResult:
        x = parse_number(guess)
        if x is None:
            raise ValueError(f"guess must be a number, got {guess!r}")
        actual = self.actual()
        error = (x - actual) / abs(actual) if actual != 0 else None
        unit = localize(self.unit)
        message = t(f"测得：{format_number(actual)} {unit}；你的预测：{format_number(x)} {unit}。{_closeness(error)}",
                    f"Measured: {format_number(actual)} {unit}; your prediction: {format_number(x)} {unit}. "
                    f"{_closeness(error)}")
        return PredictionResult(x, actual, error, message.strip())

    def widget(self) -> W.VBox:
        return PredictionView(self).box

    def _repr_mimebundle_(self, **kwargs):
        return self.widget()._repr_mimebundle_(**kwargs)


class PredictionView:
    """Question, a guess box and a reveal button; the box locks once the answer is shown."""

    def __init__(self, prediction: Prediction) -> None:
        self.prediction = prediction
        self.result: PredictionResult | None = None
        self.note: str | None = None
        self.title, self.unit, self.output = W.HTML(), W.HTML(), W.HTML()
        self.entry = W.Text(layout=W.Layout(width="12em"))
        self.button = W.Button(button_style="info")
        self.button.on_click(lambda _b: self.reveal())
        self.box = W.VBox([self.title, W.HBox([self.entry, self.unit, self.button]), self.output],
                          layout=W.Layout(border="1px dashed #999", padding="6px", max_width="760px"))
        self.relabel()
        relabel_on_language_change(self.relabel)

    def reveal(self) -> None:
        if parse_number(self.entry.value) is None:
            self.note = "need_guess"
            self.relabel()
            return
        self.button.disabled, self.entry.disabled = True, True
        self.button.description = t("测量中…", "Measuring…")
        self.result = self.prediction.reveal(self.entry.value)
        self.relabel()

    def relabel(self) -> None:
        self.title.value = f"<b>{t('先预测：', 'Predict first: ')}</b>" + localize_html(self.prediction.question)
        self.entry.placeholder = t("先写下你的预测", "write your prediction first")
        self.unit.value = f"&nbsp;{localize_html(self.prediction.unit)}&nbsp;"
        self.button.description = t("揭晓", "Reveal")
        if self.result is not None:
            self.result = self.prediction.reveal(self.result.guess)     # re-worded, not re-measured
            self.output.value = f"<b>{html.escape(self.result.message)}</b>"
        elif self.note == "need_guess":
            self.output.value = t("请先输入一个数作为预测，再揭晓。", "Type a number as your prediction first, then reveal.")


def predict(question: Text, answer: Union[float, Callable[[], float]], unit: Text = "") -> Prediction:
    """A predict-then-reveal widget; the last expression of a cell shows it."""
    return Prediction(question, answer, unit)
