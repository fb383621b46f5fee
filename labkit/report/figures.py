"""Plotly conventions for every lab: a title, axes labelled with units, the shared state colours.

Colours come from ``labkit.widgets.palette.STATE_COLORS`` so a figure and a live widget agree:
prefill blue, decode teal, used KV green, reserved-for-later yellow, internal fragmentation red,
external fragmentation brown, free grey.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from labkit.widgets.palette import STATE_COLORS

COLORS = STATE_COLORS
FONT = "Noto Sans CJK SC, Microsoft YaHei, PingFang SC, Arial, sans-serif"


def style(fig: go.Figure, title: str, x_title: str | None = None, y_title: str | None = None,
          height: int = 380) -> go.Figure:
    """Title the figure and label its (first) axes; white background, legend on top."""
    fig.update_layout(title=dict(text=title, x=0.01), template="plotly_white", height=height,
                      font=dict(family=FONT, size=13), margin=dict(l=60, r=20, t=70, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    if x_title is not None:
        fig.update_xaxes(title_text=x_title)
    if y_title is not None:
        fig.update_yaxes(title_text=y_title)
    return fig


def axis_titles(fig: go.Figure, titles: list[tuple[str, str]]) -> go.Figure:
    """Label each subplot's axes: ``titles[i] = (x_title, y_title)`` for subplot column i + 1."""
    for col, (x_title, y_title) in enumerate(titles, start=1):
        fig.update_xaxes(title_text=x_title, row=1, col=col)
        fig.update_yaxes(title_text=y_title, row=1, col=col)
    return fig


def _axis_ref(fig: go.Figure, axis: str, row: int | None, col: int | None) -> str:
    """"x", "y2", … for the subplot at (row, col), or the first axis."""
    if row is None:
        return axis
    name = getattr(fig.get_subplot(row, col), f"{axis}axis").plotly_name      # "xaxis2"
    return axis + name[len(axis) + 4:]


def reference_line(fig: go.Figure, *, x: float | None = None, y: float | None = None, text: str = "",
                   log: bool = False, row: int | None = None, col: int | None = None,
                   color: str = COLORS["ink"], dash: str = "dot") -> go.Figure:
    """A labelled vertical (``x``) or horizontal (``y``) line in data coordinates.

    ``add_hline(annotation_text=...)`` puts its label at the raw value, and on a log axis plotly.js
    reads an annotation's position as log10 of the value: a knee at 20 tokens stretched the axis to
    10^20. Here the label sits at log10(value) on a log axis (``log=True``), at the line's end."""
    if (x is None) == (y is None):
        raise ValueError("reference_line needs exactly one of x (vertical) or y (horizontal)")
    value = x if x is not None else y
    if log and value <= 0:
        raise ValueError(f"a line on a log axis needs a positive value, got {value}")
    where = math.log10(value) if log else value
    line = dict(color=color, dash=dash, width=1.5)
    if x is not None:
        fig.add_vline(x=x, line=line, row=row, col=col)
        xref, yref = _axis_ref(fig, "x", row, col), _axis_ref(fig, "y", row, col) + " domain"
        spot = dict(x=where, y=1.0, xanchor="left", yanchor="top")
    else:
        fig.add_hline(y=y, line=line, row=row, col=col)
        xref, yref = _axis_ref(fig, "x", row, col) + " domain", _axis_ref(fig, "y", row, col)
        spot = dict(x=1.0, y=where, xanchor="right", yanchor="bottom")
    if text:
        fig.add_annotation(text=text, xref=xref, yref=yref, showarrow=False, font=dict(size=11, color=color),
                           bgcolor="rgba(255,255,255,0.8)", **spot)
    return fig


def decade_ticks(fig: go.Figure, axis: str, values: list[float], row: int | None = None,
                 col: int | None = None) -> go.Figure:
    """A log axis labelled at decades only (1, 10, 100 …), its range the data's decades."""
    positive = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not positive:
        raise ValueError(f"a log {axis} axis needs positive values, got {values}")
    first, last = math.log10(min(positive)), math.log10(max(positive))
    lo, hi = math.floor(first), max(math.ceil(last), math.floor(first) + 1)
    # a point on a decade line would sit on the frame: a tenth of a decade of room
    lo, hi = min(lo, first - 0.1), max(hi, last + 0.1)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", dtick=1, range=[lo, hi], row=row, col=col)
    return fig
