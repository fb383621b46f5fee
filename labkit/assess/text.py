"""Bilingual text for quiz questions and exercise statements.

A question is written once with both languages side by side, ``{"zh": "...", "en": "..."}``, and
resolved when it is drawn. Widgets keep the dict, so ``labkit.set_language("en")`` relabels a quiz
that is already on screen. A plain ``str`` is used as is in both languages; ``t(zh, en)`` also
works but picks the language once, when the question is defined.
"""

from __future__ import annotations

import html
import weakref
from typing import Mapping, Union

from labkit.i18n import get_language, on_language_change

Text = Union[str, Mapping[str, str]]


def localize(text: Text) -> str:
    """The string for the current language (Chinese when a translation is missing)."""
    if isinstance(text, str):
        return text
    return text.get(get_language()) or text.get("zh") or next(iter(text.values()), "")


def localize_html(text: Text) -> str:
    """Escaped text with `inline code` in backticks shown as <code>, for ipywidgets.HTML."""
    parts = html.escape(localize(text)).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def relabel_on_language_change(method) -> None:
    """Call the bound ``method`` after every language switch while its object is alive."""
    ref = weakref.WeakMethod(method)

    def listener(_language: str) -> None:
        bound = ref()
        if bound is not None:
            bound()

    on_language_change(listener)
