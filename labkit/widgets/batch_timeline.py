"""``BatchTimeline``: what every batch slot did in each recent engine step.

::

    slot 0  P P D D D D V V V ·        P prefill   D decode   V verify (speculative)
    slot 1  · P P D D I I I I ·        I idle: the slot is held but does no work (static
    slot 2  · · · P D D D D D D          batching keeps a finished request's slot until the
            ─────────── step ──►          whole batch ends)   · no request in the slot
    occupancy %    ────  token budget % - - -

Batch occupancy = slots doing useful work / ``max_num_seqs``; token budget use = scheduled
tokens / ``max_num_batched_tokens``. Both come from ``StepEnd.stats``; the grid from
``StepEnd.batch``. Only the last ``window`` steps are kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import traitlets

from labkit.events import BatchEntry, StepEnd
from labkit.i18n import t
from labkit.scheduler_output import StepKind
from labkit.widgets.base import LiveView, bundle_esm
from labkit.widgets.palette import colors_for

KIND_CODES = {StepKind.PREFILL: "p", StepKind.DECODE: "d", StepKind.VERIFY: "v", StepKind.IDLE: "i"}
EMPTY_SLOT = "."


@dataclass(frozen=True)
class _Column:
    """One step of the timeline."""

    step: int
    entries: dict[int, BatchEntry]   # slot -> entry
    occupancy_perc: float
    token_budget_perc: float


class BatchTimeline(LiveView):
    """Slots × steps, coloured by what each slot did (see the module docstring)."""

    _esm = bundle_esm("batch_timeline.js")
    EVENT_TYPES = (StepEnd,)

    step = traitlets.Int(-1).tag(sync=True)                 # newest step shown (-1: none yet)
    window = traitlets.Int(200, min=1).tag(sync=True)       # steps kept
    num_slots = traitlets.Int(0).tag(sync=True)             # highest slot seen + 1
    steps = traitlets.List().tag(sync=True)                 # step numbers, oldest first
    kinds = traitlets.List().tag(sync=True)                 # per step: "pdv.i" one char per slot
    requests = traitlets.List().tag(sync=True)              # per step: request id per slot or None
    tokens = traitlets.List().tag(sync=True)                # per step: tokens scheduled per slot
    occupancy_perc = traitlets.List().tag(sync=True)        # per step, 0..100
    token_budget_perc = traitlets.List().tag(sync=True)     # per step, 0..100
    colors = traitlets.Dict().tag(sync=True)                # request id -> "#rrggbb"
    color_by = traitlets.Unicode("kind").tag(sync=True)     # "kind" | "request" (toggle in the view)

    def __init__(self, engine: object | None = None, *, window: int = 200,
                 title: tuple[str, str] | None = None, **kwargs) -> None:
        """``title``: a (zh, en) pair naming this timeline (two side by side need their own names)."""
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._title = title
        self._columns: deque[_Column] = deque(maxlen=window)
        self._num_slots = 0
        super().__init__(engine, window=window, **kwargs)

    @traitlets.observe("window")
    def _resize_window(self, change: dict) -> None:
        self._columns = deque(self._columns, maxlen=change["new"])

    def ingest(self, event: StepEnd) -> None:
        entries = {entry.slot: entry for entry in event.batch}
        self._num_slots = max(self._num_slots, 1 + max(entries, default=-1))
        self._columns.append(_Column(event.step, entries, event.stats.batch_occupancy_perc,
                                     event.stats.token_budget_perc))

    def sync(self) -> None:
        columns, n = list(self._columns), self._num_slots
        if not columns:
            return
        self.step, self.num_slots = columns[-1].step, n
        self.steps = [c.step for c in columns]
        self.kinds = ["".join(_kind_code(c.entries.get(s)) for s in range(n)) for c in columns]
        self.requests = [[_field(c.entries.get(s), "request_id") for s in range(n)] for c in columns]
        self.tokens = [[_field(c.entries.get(s), "num_tokens") or 0 for s in range(n)] for c in columns]
        self.occupancy_perc = [c.occupancy_perc for c in columns]
        self.token_budget_perc = [c.token_budget_perc for c in columns]
        self.colors = colors_for(rid for row in self.requests for rid in row)

    def make_labels(self) -> dict[str, str]:
        return {
            "title": t(*self._title) if self._title else t("批处理时间线", "Batch timeline"),
            "waiting": t("等待第一个引擎步…", "Waiting for the first engine step…"),
            "step": t("步", "step"),
            "slot": t("槽位", "slot"),
            "request": t("请求", "request"),
            "tokens": t("本步 token 数", "tokens this step"),
            "prefill": t("预填充", "prefill"),
            "decode": t("解码", "decode"),
            "verify": t("验证 (投机)", "verify (speculative)"),
            "idle": t("空转 (占位无工作)", "idle (held, no work)"),
            "empty": t("空槽", "empty slot"),
            "occupancy": t("批占用率", "batch occupancy"),
            "token_budget": t("token 预算使用", "token budget use"),
            "color_by": t("着色", "colour by"),
            "by_kind": t("按阶段", "by phase"),
            "by_request": t("按请求", "by request"),
        }


def _kind_code(entry: BatchEntry | None) -> str:
    if entry is None:
        return EMPTY_SLOT
    return KIND_CODES.get(entry.kind, "?")


def _field(entry: BatchEntry | None, name: str):
    return None if entry is None else getattr(entry, name)
