"""``MemoryGauge``: how full the KV pool is and where the reserved slots go (``kv.breakdown``).

::

    pool       [████████ allocated ████████|░░ free ░░|▚▚ external frag ▚▚]   % of the pool
    allocated  [███ holds K/V ███|▒ reserved, filled later ▒|▚ internal frag ▚]  % of reserved slots

    kv_cache_usage_perc = allocated blocks / total blocks
    kv_waste_perc       = 1 − slots holding K/V / slots reserved or allocated
                        = kv_reserved_unused_perc + kv_internal_frag_perc
    kv_external_frag_perc: free slots no waiting request can use (no contiguous region fits),
                           as a share of the pool

Paged KV wastes only the unfilled tail of each request's last block; a contiguous (max-length)
reservation wastes the rest of the reservation. Values come from ``StepEnd.stats``; a bounded
history (``window`` steps) feeds the small trend chart. The bars show one step: the newest while the
engine runs, the peak-usage step once it is idle, or the step picked on the slider
(``labkit.widgets.history``), marked on the trend.
"""

from __future__ import annotations

from collections import deque

import traitlets

from labkit.events import StepEnd, StepStats
from labkit.i18n import t
from labkit.widgets.base import bundle_esm
from labkit.widgets.history import ScrubbableView

HISTORY_FIELDS = {    # history key -> StepStats field
    "usage": "kv_cache_usage_perc",
    "waste": "kv_waste_perc",
    "reserved_unused": "kv_reserved_unused_perc",
    "internal_frag": "kv_internal_frag_perc",
    "external_frag": "kv_external_frag_perc",
}


class MemoryGauge(ScrubbableView):
    """KV usage and the waste split, now and over the last ``window`` steps."""

    _esm = bundle_esm("memory_gauge.js")
    EVENT_TYPES = (StepEnd,)

    step = traitlets.Int(-1).tag(sync=True)                   # engine step shown (-1: none yet)
    usage_perc = traitlets.Float(0.0).tag(sync=True)          # kv_cache_usage_perc
    waste_perc = traitlets.Float(0.0).tag(sync=True)          # kv_waste_perc
    reserved_unused_perc = traitlets.Float(0.0).tag(sync=True)
    internal_frag_perc = traitlets.Float(0.0).tag(sync=True)
    external_frag_perc = traitlets.Float(0.0).tag(sync=True)
    num_requests_running = traitlets.Int(0).tag(sync=True)
    num_requests_waiting = traitlets.Int(0).tag(sync=True)
    num_preemptions = traitlets.Int(0).tag(sync=True)
    simulated = traitlets.Bool(False).tag(sync=True)          # StepStats.simulated (cost model)
    window = traitlets.Int(200, min=1).tag(sync=True)
    history = traitlets.Dict().tag(sync=True)                 # {"step": [...], "usage": [...], ...}

    def __init__(self, engine: object | None = None, *, window: int = 200, **kwargs) -> None:
        self._stats: deque[StepStats] = deque(maxlen=window)
        super().__init__(engine, window=window, **kwargs)

    def ingest(self, event: StepEnd) -> None:
        super().ingest(event)
        self._stats.append(event.stats)

    def sync(self) -> None:
        if not self._stats:
            return
        history = {key: [getattr(s, name) for s in self._stats] for key, name in HISTORY_FIELDS.items()}
        self.history = {"step": [s.step for s in self._stats], **history}
        super().sync()

    def show(self, event: StepEnd) -> None:
        now = event.stats
        self.step = now.step
        self.usage_perc, self.waste_perc = now.kv_cache_usage_perc, now.kv_waste_perc
        self.reserved_unused_perc = now.kv_reserved_unused_perc
        self.internal_frag_perc = now.kv_internal_frag_perc
        self.external_frag_perc = now.kv_external_frag_perc
        self.num_requests_running, self.num_requests_waiting = now.num_requests_running, now.num_requests_waiting
        self.num_preemptions, self.simulated = now.num_preemptions, now.simulated

    @traitlets.observe("window")
    def _resize_window(self, change: dict) -> None:
        self._stats = deque(self._stats, maxlen=change["new"])

    def make_labels(self) -> dict[str, str]:
        return {
            **self.scrub_labels(),
            "title": t("KV 显存", "KV memory"),
            "waiting": t("等待第一个引擎步…", "Waiting for the first engine step…"),
            "step": t("步", "step"),
            "simulated": t("模拟", "simulated"),
            "pool": t("KV 池 (占整个池的 %)", "KV pool (% of the pool)"),
            "allocated_split": t("已分配槽位 (占已分配/预留的 %)", "allocated slots (% of reserved)"),
            "usage": t("已分配", "allocated"),
            "free": t("空闲", "free"),
            "used": t("存有 K/V", "holds K/V"),
            "waste": t("浪费", "waste"),
            "reserved_unused": t("预留待用", "reserved, filled later"),
            "internal_frag": t("内部碎片", "internal fragmentation"),
            "external_frag": t("外部碎片", "external fragmentation"),
            "other_waste": t("其他浪费", "other waste"),
            "running": t("运行中", "running"),
            "waiting_reqs": t("等待中", "waiting"),
            "preemptions": t("抢占次数", "preemptions"),
            "trend": t("最近各步 (%)", "recent steps (%)"),
        }
