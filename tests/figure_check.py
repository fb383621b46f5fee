"""What every lab figure must get right, checked on the plotly figure itself (``static_problems``) and on
the figure as plotly.js draws it in chromium (``rendered_problems``).

Rules (each one is something a learner tripped over):

* axis ranges stay within the data's range times a margin: linear axes within a quarter of the data's
  span beyond it (bars count from 0), log axes within one decade (a log axis to 10^20 tokens with the
  data in its first 15 % fails);
* log axes label decades only (no bare "3" beside 0.3 s), unless their ticks are set to the data's own
  x values (block sizes 1, 2, 4 … 128);
* the legend overlaps no subplot title, no figure title and no annotation;
* a Chinese figure is labelled in Chinese: no title, axis title, legend entry, annotation or tick label
  that is English words only; English variant keys ("static", "continuous, paged KV") never appear.

"Data" is every trace's points plus the figure's reference lines (``add_hline``/``add_vline``: an SLO
line is part of what the figure shows).
"""

from __future__ import annotations

import math
import re

import plotly.graph_objects as go

CJK = re.compile(r"[\u3400-\u9fff\uff08-\uff1f]")
# Lowercase English words that are the chapter's terms in Chinese text too (units, acronyms, names).
ALLOWED_WORDS = {"token", "tokens", "goodput", "log", "req", "max", "min", "sim"}
LINEAR_MARGIN = 0.25          # of the data's span
LOG_MARGIN_DECADES = 1.0


def english_words(text: str) -> list[str]:
    """The English a Chinese reader would meet in a label: every lowercase word (3+ letters) of a label
    with no Chinese in it, and in a Chinese label every run of two or more lowercase words (an English
    variant key such as "continuous, paged KV" with "（模拟）" after it)."""
    text = re.sub(r"<[^>]+>", " ", text or "")
    words = [w for w in re.findall(r"[A-Za-z]+", text) if w.islower() and len(w) >= 3 and w not in ALLOWED_WORDS]
    if not CJK.search(text):
        return words
    runs = re.findall(r"[a-z]{3,}(?:[ ,\-]+[a-z]{3,})+", text)
    return [w for run in runs for w in re.findall(r"[a-z]+", run) if w not in ALLOWED_WORDS]


def _texts(fig: go.Figure) -> list[tuple[str, str]]:
    """(where, text) of every label a reader sees, except tick labels of numeric axes."""
    layout = fig.layout
    out = [("title", layout.title.text or "")]
    for name in _axis_names(fig):
        axis = layout[name]
        out.append((f"{name} title", axis.title.text or ""))
        if axis.ticktext:
            out += [(f"{name} tick", str(x)) for x in axis.ticktext]
    for trace in fig.data:
        if trace.showlegend is not False and trace.name:
            out.append(("legend", trace.name))
        for axis_key in ("x", "y"):
            values = getattr(trace, axis_key, None)
            if values is not None and len(values) and all(isinstance(v, str) for v in values):
                out += [(f"category tick ({axis_key})", v) for v in values]
    out += [("annotation", a.text or "") for a in layout.annotations]
    return out


def _axis_names(fig: go.Figure) -> list[str]:
    full = fig.to_dict()["layout"]
    names = [k for k in full if re.fullmatch(r"[xy]axis\d*", k)]
    return sorted(set(names) | {"xaxis", "yaxis"})


def static_problems(fig: go.Figure, chinese: bool = True) -> list[str]:
    problems = []
    if chinese:
        for where, text in _texts(fig):
            words = english_words(text)
            if words:
                problems.append(f"English {where} on a Chinese figure: {text!r}")
    for name in _axis_names(fig):
        axis = fig.layout[name]
        if axis.type == "log" and axis.tickvals is None and axis.dtick not in (1, "1", "D1"):
            problems.append(f"{name} is a log axis without decade ticks (set dtick=1 or tickvals)")
    return problems


# ----------------------------------------------------------------------------- rendered

RENDER_JS = """async (fig) => {
    const gd = document.createElement('div');
    gd.style.width = '1000px';
    document.body.replaceChildren(gd);
    await Plotly.newPlot(gd, fig.data, fig.layout);
    const fl = gd._fullLayout;
    const box = (node) => { const r = node.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const axes = {};
    for (const key of Object.keys(fl)) {
        if (!/^[xy]axis\\d*$/.test(key)) continue;
        const a = fl[key];
        axes[key] = {type: a.type, range: a.range.map(Number), tickmode: a.tickmode,
                     ticks: (a._vals || []).filter((v) => v.text !== '' && v.text !== undefined)
                                            .map((v) => [Number(v.x), String(v.text)])};
    }
    const legend = gd.querySelector('.legend');
    const titles = [...gd.querySelectorAll('.annotation, .gtitle')].filter((n) => n.textContent.trim())
        .map((n) => [n.textContent, box(n)]);
    return {axes, legend: legend ? box(legend) : null, titles};
}"""


def render(page, fig: go.Figure) -> dict:
    return page.evaluate(RENDER_JS, fig.to_plotly_json() | {"layout": fig.layout.to_plotly_json()})


def data_extent(fig: go.Figure) -> dict[str, tuple[float, float]]:
    """Per axis ("xaxis", "yaxis2", …): the smallest and largest numeric value it must show."""
    values: dict[str, list[float]] = {}

    def add(axis: str, xs) -> None:
        nums = [float(v) for v in xs if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        values.setdefault(axis, []).extend(nums)

    stacked = fig.layout.barmode in ("stack", "relative")
    for trace in fig.data:
        xname = "xaxis" + (trace.xaxis or "x")[1:]
        yname = "yaxis" + (trace.yaxis or "y")[1:]
        x, y = list(trace.x if trace.x is not None else []), list(trace.y if trace.y is not None else [])
        if trace.type == "bar":
            horizontal = trace.orientation == "h"
            value_axis, vals = (xname, x) if horizontal else (yname, y)
            add(value_axis, [0.0, *vals])
            add(yname if horizontal else xname, y if horizontal else x)
        else:
            add(xname, x)
            add(yname, y)
    if stacked:   # the stack's height per category, over all bar traces
        totals: dict = {}
        for trace in fig.data:
            if trace.type == "bar":
                horizontal = trace.orientation == "h"
                cats, vals = (trace.y, trace.x) if horizontal else (trace.x, trace.y)
                for cat, v in zip(cats, vals):
                    totals[(horizontal, cat)] = totals.get((horizontal, cat), 0.0) + float(v)
                axis = ("xaxis" + (trace.xaxis or "x")[1:]) if horizontal else ("yaxis" + (trace.yaxis or "y")[1:])
                add(axis, list(totals.values()))
    for shape in fig.layout.shapes:
        for axis_key, lo, hi in (("x", shape.x0, shape.x1), ("y", shape.y0, shape.y1)):
            ref = getattr(shape, f"{axis_key}ref") or axis_key
            if ref.endswith("domain") or ref == "paper":
                continue
            add(f"{axis_key}axis" + ref[1:], [lo, hi])
    return {k: (min(v), max(v)) for k, v in values.items() if v}


def rendered_problems(page, fig: go.Figure) -> list[str]:
    drawn = render(page, fig)
    extent = data_extent(fig)
    problems = []
    for name, axis in drawn["axes"].items():
        if name not in extent or axis["type"] not in ("linear", "log"):
            continue
        lo, hi = extent[name]
        r0, r1 = sorted(axis["range"])
        if axis["type"] == "log":
            positive = [v for v in (lo, hi) if v > 0]
            if not positive:
                continue
            dlo, dhi = math.log10(min(positive)), math.log10(max(positive))
            if r0 < dlo - LOG_MARGIN_DECADES or r1 > dhi + LOG_MARGIN_DECADES:
                problems.append(f"{name}: log range 10^{r0:.1f}…10^{r1:.1f} is far wider than the data "
                                f"{min(positive):g}…{max(positive):g}")
            explicit = axis["tickmode"] == "array"
            data_ticks = {round(math.log10(v), 6) for v in _axis_values(fig, name) if v > 0}
            for x, text in axis["ticks"]:
                decade = abs(x - round(x)) < 1e-6
                if not decade and not (explicit and round(x, 6) in data_ticks):
                    problems.append(f"{name}: log axis labels a non-decade tick {text!r}")
                    break
        else:
            span = max(hi - lo, abs(hi), 1e-12)
            if r0 < lo - LINEAR_MARGIN * span or r1 > hi + LINEAR_MARGIN * span:
                problems.append(f"{name}: range {r0:g}…{r1:g} is far wider than the data {lo:g}…{hi:g}")
    if drawn["legend"]:
        for text, box in drawn["titles"]:
            if _overlap(drawn["legend"], box):
                problems.append(f"the legend overlaps {text!r}")
    return problems


def _axis_values(fig: go.Figure, name: str) -> list[float]:
    key = name[0]
    out = []
    for trace in fig.data:
        ref = getattr(trace, f"{key}axis") or key
        if f"{key}axis" + ref[1:] == name:
            out += [float(v) for v in (getattr(trace, key) or []) if isinstance(v, (int, float))]
    return out


def _overlap(a, b, slack: float = 1.0) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack
