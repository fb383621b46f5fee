"""Small HTML tables with inline styles (they look the same in JupyterLab and Voila).

    Table(["模型", "字节/token"], [["OPT-13B", "819,200"]], caption="…")   # last expression → drawn
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

_CELL = "padding:3px 10px;border-bottom:1px solid #e5e5e5;text-align:left"


def fmt(value: Any, digits: int = 1) -> str:
    """1234567 → "1,234,567"; 0.123 → "0.1" (``digits`` decimals); None → "—"."""
    if value is None:
        return "—"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int) or (float(value).is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def human_bytes(num_bytes: float) -> str:
    """Binary units, as memory is sold and as the vLLM paper counts KV slots: 46080 → "45.0 KiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(num_bytes) < 1024 or unit == "TiB":
            return f"{num_bytes:,.0f} {unit}" if unit == "B" else f"{num_bytes:,.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:,.1f} TiB"


@dataclass
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    notes: Sequence[str] = field(default_factory=tuple)

    def _repr_html_(self) -> str:
        head = "".join(f'<th style="{_CELL};font-weight:600">{html.escape(str(h))}</th>' for h in self.headers)
        body = "".join("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(fmt(c))}</td>' for c in row) + "</tr>"
                       for row in self.rows)
        caption = (f'<caption style="caption-side:top;text-align:left;font-weight:600;padding:4px 0">'
                   f'{html.escape(self.caption)}</caption>') if self.caption else ""
        notes = "".join(f'<div style="font-size:85%;color:#555">{html.escape(n)}</div>' for n in self.notes)
        return f'<table style="border-collapse:collapse;margin:6px 0">{caption}<tr>{head}</tr>{body}</table>{notes}'

    def __str__(self) -> str:
        lines = [self.caption] if self.caption else []
        lines.append(" | ".join(map(str, self.headers)))
        lines += [" | ".join(fmt(c) for c in row) for row in self.rows]
        return "\n".join(lines + list(self.notes))

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))
