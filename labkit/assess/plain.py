"""Plain data: the only thing that crosses from the learner's process into the kernel.

The learner's results are converted to plain data *in the child* (numbers, strings, bytes, None,
and lists, tuples, dicts and sets of them), so no object of the learner's — no ``__eq__``, no
``__reduce__``, no ``__repr__`` — ever runs in the kernel. numpy and torch values become Python
numbers and lists (``.tolist()``); subclasses of int/float/str become their plain value; anything
else is refused with its type name (``NotPlainError``), and the learner is told what they returned.

``loads`` is the kernel's side: an unpickler that builds only those types. Plain containers are
built by pickle opcodes alone, so refusing every ``find_class`` lookup refuses every other type,
whatever bytes the child sends.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

_SCALARS = (type(None), bool, int, float, str, bytes)
_CONVERTERS = ((bool, bool), (int, int.__int__), (float, float.__float__), (str, str.__str__))
MAX_DEPTH = 50


class NotPlainError(TypeError):
    """A value that is not plain data, where it sits (``[3][1]``) and a short repr of it."""

    def __init__(self, type_name: str, text: str, path: str) -> None:
        super().__init__(f"{type_name} at {path or 'top level'}")
        self.type_name, self.text, self.path = type_name, text, path


def _short_repr(value: Any) -> str:
    try:
        return repr(value)[:200]
    except Exception:                      # a learner's __repr__ may raise anything
        return f"<{type(value).__name__}>"


def _array_like(value: Any) -> bool:
    module = type(value).__module__.split(".")[0]
    return module in ("numpy", "torch") and hasattr(value, "tolist")


def to_plain(value: Any, path: str = "", depth: int = 0) -> Any:
    """``value`` as plain data (exact built-in types), or ``NotPlainError`` naming what is not."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise NotPlainError(kind.__name__, "…", path + " (nested too deeply)")
    if isinstance(value, (list, tuple)):
        is_list = isinstance(value, list)       # base-class iteration: a subclass's __iter__ is not asked
        elements = list.__iter__(value) if is_list else tuple.__iter__(value)
        items = [to_plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(elements)]
        return items if is_list else tuple(items)
    if isinstance(value, dict):
        return {to_plain(k, f"{path}<key>", depth + 1): to_plain(v, f"{path}[{k!r}]", depth + 1)
                for k, v in dict.items(value)}
    if isinstance(value, (set, frozenset)):
        items = {to_plain(v, f"{path}{{…}}", depth + 1) for v in value}
        return items if isinstance(value, set) else frozenset(items)
    for base, convert in _CONVERTERS:
        if isinstance(value, base):
            return convert(value)
    if _array_like(value):
        return to_plain(value.tolist(), path, depth + 1)
    raise NotPlainError(kind.__qualname__, _short_repr(value), path)


def dumps(value: Any) -> bytes:
    """Pickle plain data (call ``to_plain`` first; this does not check)."""
    return pickle.dumps(value, protocol=4)


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"only plain data may come back, not {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("only plain data may come back")


def loads(data: bytes) -> Any:
    """Unpickle bytes that may only hold plain data; anything else raises ``UnpicklingError``."""
    return _PlainUnpickler(io.BytesIO(data)).load()
