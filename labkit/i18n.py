"""User-facing strings in Chinese (default) and English: ``labkit.set_language("en")``."""

from __future__ import annotations

_LANGUAGE = "zh"
_LANGUAGES = ("zh", "en")
_listeners: list = []


def set_language(language: str) -> None:
    """Switch every labkit widget label and feedback message to ``"zh"`` or ``"en"``."""
    global _LANGUAGE
    if language not in _LANGUAGES:
        raise ValueError(f"language must be one of {_LANGUAGES}, got {language!r}")
    _LANGUAGE = language
    for fn in list(_listeners):
        fn(language)


def get_language() -> str:
    return _LANGUAGE


def t(zh: str, en: str) -> str:
    """Pick the string for the current language; call sites keep both texts side by side."""
    return zh if _LANGUAGE == "zh" else en


def on_language_change(fn) -> None:
    """Register ``fn(language)``; widgets use it to relabel themselves."""
    _listeners.append(fn)


def off_language_change(fn) -> None:
    """Unregister a listener added with ``on_language_change`` (closed widgets call this)."""
    if fn in _listeners:
        _listeners.remove(fn)
