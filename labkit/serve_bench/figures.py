"""Plotly figures of ``labkit bench`` results: latency CDFs and TTFT against request rate."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from labkit.report.figures import style
from labkit.serve_bench.results import BenchResult

_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def _values_ms(result: BenchResult, metric: str) -> list[float]:
    ok = [r for r in result.requests if r.success]
    if metric == "itl":
        values = [gap for r in ok for gap in r.itl_s]
    elif metric == "tpot":
        values = [r.tpot_s for r in ok if r.tpot_s is not None]
    else:
        values = [getattr(r, f"{metric}_s") for r in ok]
    return sorted(v * 1000.0 for v in values)


def latency_cdf(results: list[BenchResult], metric: str = "ttft") -> go.Figure:
    """Empirical CDF of one latency (ttft, tpot, itl or e2el), one line per run."""
    if metric not in _NAMES:
        raise ValueError(f"metric must be one of {sorted(_NAMES)}, got {metric!r}")
    fig = go.Figure()
    for result in results:
        xs = _values_ms(result, metric)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=result.label))
    return style(fig, f"{_NAMES[metric]} CDF", f"{_NAMES[metric]} (ms)", "share of requests")


def ttft_vs_rate(results: list[BenchResult]) -> go.Figure:
    """Median and P99 TTFT against the offered request rate (an infinite rate is drawn at the right)."""
    finite = [r.request_rate for r in results if not math.isinf(r.request_rate)]
    inf_x = max(finite) * 2 if finite else 1.0
    xs = [inf_x if math.isinf(r.request_rate) else r.request_rate for r in results]
    fig = go.Figure()
    for stat, name in (("median_ms", "median"), ("p99_ms", "P99")):
        fig.add_trace(go.Scatter(x=xs, y=[getattr(r.metrics.ttft, stat) for r in results],
                                 mode="lines+markers", name=f"TTFT {name}"))
    return style(fig, "TTFT vs request rate", "request rate (req/s; rightmost = all at once if inf)", "TTFT (ms)")
