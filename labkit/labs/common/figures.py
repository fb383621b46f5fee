"""Plotly conventions for every lab: a title, axes labelled with units, the shared state colours.

Colours come from ``labkit.widgets.palette.STATE_COLORS`` so a figure and a live widget agree:
prefill blue, decode teal, used KV green, reserved-for-later yellow, internal fragmentation red,
external fragmentation brown, free grey.
"""

from __future__ import annotations

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
