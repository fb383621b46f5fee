"""``LatencyView``: TTFT and TPOT distributions with their P50 and P99.

Per finished request, from ``RequestFinished.timings`` (``labkit.request.RequestTimings``)::

    TTFT = first_token_time − arrival_time          what a user waits for the first token,
                                                    queueing included
    TPOT = (finished_time − first_token_time) / (num_output_tokens − 1)

Percentiles interpolate linearly between order statistics (numpy's default). With n requests,
P99 sits between the two largest values until n is well above 100, so the view prints n.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import traitlets

from labkit.events import RequestFinished
from labkit.i18n import t
from labkit.widgets.base import LiveView, bundle_esm

METRICS = ("ttft_s", "tpot_s")


def p50_p99(values: list[float]) -> dict[str, float] | None:
    """``{"p50": .., "p99": ..}`` of ``values`` (None when empty)."""
    if not values:
        return None
    p50, p99 = np.percentile(np.asarray(values, dtype=float), [50, 99])
    return {"p50": float(p50), "p99": float(p99)}


class LatencyView(LiveView):
    """Histograms of TTFT and TPOT over the last ``window`` finished requests."""

    _esm = bundle_esm("latency_view.js")
    EVENT_TYPES = (RequestFinished,)

    ttft_s = traitlets.List().tag(sync=True)          # seconds, one per finished request with a TTFT
    tpot_s = traitlets.List().tag(sync=True)          # seconds, requests with >= 2 output tokens
    percentiles = traitlets.Dict().tag(sync=True)     # {"ttft_s": {"p50", "p99"} | None, "tpot_s": ...}
    num_finished = traitlets.Int(0).tag(sync=True)    # all finished requests seen
    window = traitlets.Int(1000, min=1).tag(sync=True)

    def __init__(self, engine: object | None = None, *, window: int = 1000, **kwargs) -> None:
        self._samples = {name: deque(maxlen=window) for name in METRICS}
        self._num_finished = 0
        super().__init__(engine, window=window, **kwargs)

    def ingest(self, event: RequestFinished) -> None:
        self._num_finished += 1
        for name in METRICS:
            value = getattr(event.timings, name)
            if value is not None:
                self._samples[name].append(value)

    def sync(self) -> None:
        self.ttft_s, self.tpot_s = list(self._samples["ttft_s"]), list(self._samples["tpot_s"])
        self.percentiles = {name: p50_p99(list(self._samples[name])) for name in METRICS}
        self.num_finished = self._num_finished

    @traitlets.observe("window")
    def _resize_window(self, change: dict) -> None:
        self._samples = {name: deque(values, maxlen=change["new"]) for name, values in self._samples.items()}

    def make_labels(self) -> dict[str, str]:
        return {
            "title": t("延迟分布", "Latency distributions"),
            "waiting": t("等待第一个完成的请求…", "Waiting for the first finished request…"),
            "ttft_s": t("首 token 延迟 TTFT (ms)", "time to first token, TTFT (ms)"),
            "tpot_s": t("每输出 token 时间 TPOT (ms)", "time per output token, TPOT (ms)"),
            "count": t("请求数", "requests"),
            "finished": t("已完成请求", "finished requests"),
            "p50": "P50",
            "p99": "P99",
        }
