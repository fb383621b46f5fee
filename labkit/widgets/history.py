"""Step history for the views that draw one engine step: scrub back through a run after it ends.

A view that shows only the newest ``StepEnd`` is empty after *Run All*: the run has finished and
its last step is an idle pool. ``StepHistory`` keeps a bounded, evenly thinned record of the run
(and always its newest and its peak-usage step), and ``ScrubbableView`` turns it into a slider::

    events ──► StepHistory.add()            every event counted; one in ``stride`` kept
                 full? drop every other kept event, stride × 2   (covers the whole run, bounded)
    slider ──► cursor (index into entries())  the user's pick; pinned until "follow" is pressed
    not pinned: newest step while the engine works, the peak-usage step once it is idle

Memory is bounded twice: at most ``max_steps`` kept events and at most ``max_cells`` per-block
entries in total (a 1,000-block pool keeps fewer steps than a 64-block one). Snapshots are
immutable, so keeping an event costs no copy.
"""

from __future__ import annotations

from typing import Callable

import traitlets

from labkit.events import StepEnd
from labkit.i18n import t
from labkit.widgets.base import LiveView

MAX_STEPS = 500
MAX_CELLS = 4_000_000     # per-block entries over all kept snapshots (~32 MB of references)


def snapshot_cells(event: StepEnd) -> int:
    """What keeping ``event`` costs: its per-block columns plus its regions and block tables."""
    snap = event.block_map
    if snap is None:         # views that read only the stats (MemoryGauge) accept such events
        return 1
    return 4 * snap.num_blocks + len(snap.regions) + sum(len(b) for _, b in snap.block_tables) + 1


def is_idle(event: StepEnd) -> bool:
    """The engine had nothing left to run after this step (a run has ended)."""
    return event.stats.num_requests_running == 0 and event.stats.num_requests_waiting == 0


class StepHistory:
    """Evenly thinned ``StepEnd`` events of a run, plus its newest and its peak (see module doc)."""

    def __init__(self, max_steps: int = MAX_STEPS, max_cells: int = MAX_CELLS,
                 key: Callable[[StepEnd], float] = lambda e: e.stats.kv_cache_usage_perc) -> None:
        if max_steps < 2:
            raise ValueError(f"max_steps must be at least 2, got {max_steps}")
        self.max_steps, self.max_cells, self.key = max_steps, max_cells, key
        self.clear()

    def clear(self) -> None:
        self._kept: list[StepEnd] = []
        self._stride = 1
        self._seen = 0
        self.latest: StepEnd | None = None
        self.peak: StepEnd | None = None

    @property
    def stride(self) -> int:
        return self._stride

    def add(self, event: StepEnd) -> None:
        if self.peak is None or self.key(event) > self.key(self.peak):
            self.peak = event
        self.latest = event
        if self._seen % self._stride == 0:
            self._kept.append(event)
        self._seen += 1
        while len(self._kept) > self._limit(event):
            self._kept = self._kept[::2]     # the first step stays; the rest thin out evenly
            self._stride *= 2

    def _limit(self, event: StepEnd) -> int:
        return max(2, min(self.max_steps, self.max_cells // snapshot_cells(event)))

    def entries(self) -> list[StepEnd]:
        """Kept events, the newest and the peak, in step order, each step once."""
        by_step = {e.step: e for e in self._kept}
        for extra in (self.peak, self.latest):
            if extra is not None:
                by_step[extra.step] = extra
        return [by_step[step] for step in sorted(by_step)]


class ScrubbableView(LiveView):
    """A ``LiveView`` that draws one step, chosen by a slider over its ``StepHistory``.

    Subclasses implement ``show(event)`` (write the traits for one step) instead of ``sync``.
    """

    history_steps = traitlets.List().tag(sync=True)    # engine step of each slider position
    cursor = traitlets.Int(-1).tag(sync=True)          # slider position shown (-1: none yet)
    peak_index = traitlets.Int(-1).tag(sync=True)      # slider position of the peak-usage step
    pinned = traitlets.Bool(False).tag(sync=True)      # True once the learner moved the slider
    running = traitlets.Bool(False).tag(sync=True)     # the engine still had work after the shown newest step

    def __init__(self, engine: object | None = None, *, max_history: int = MAX_STEPS,
                 max_history_cells: int = MAX_CELLS, **kwargs) -> None:
        self._history = StepHistory(max_history, max_history_cells)
        self._entries: list[StepEnd] = []
        self._syncing = False
        super().__init__(engine, **kwargs)

    @property
    def step_history(self) -> StepHistory:
        return self._history

    def ingest(self, event: StepEnd) -> None:
        self._history.add(event)

    def show(self, event: StepEnd) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        latest = self._history.latest
        if latest is None:
            return
        self._entries = self._history.entries()
        steps = [e.step for e in self._entries]
        self.history_steps = steps
        self.peak_index = steps.index(self._history.peak.step)
        self.running = not is_idle(latest)
        self._syncing = True          # the cursor observer must not draw the step a second time
        try:
            if not self.pinned:
                self.cursor = len(steps) - 1 if self.running else self.peak_index
            self.cursor = min(max(self.cursor, 0), len(steps) - 1)
        finally:
            self._syncing = False
        self.show(self._entries[self.cursor])

    def show_step(self, step: int) -> None:
        """Pin the view to the kept step nearest ``step`` (as the slider does)."""
        with self._lock:
            self.sync()
            steps = self.history_steps
            if not steps:
                raise ValueError("no step recorded yet")
            nearest = min(range(len(steps)), key=lambda i: abs(steps[i] - step))
            self.pinned, self.cursor = True, nearest

    def follow(self) -> None:
        """Unpin: newest step while the engine runs, the peak once it is idle."""
        self.pinned = False     # the observer below redraws

    @traitlets.observe("cursor", "pinned")
    def _on_scrub(self, change: dict) -> None:
        # A slider move (or follow()) from the front end: redraw that step at once. The lock first:
        # a sync() on another thread finishes, and one on this thread (re-entrant) is skipped.
        with self._lock:
            if self._syncing:
                return
            with self.hold_sync():
                if change["name"] == "pinned" and not change["new"] and self._history.latest is not None:
                    self.sync()
                elif self._entries and 0 <= self.cursor < len(self._entries):
                    self.show(self._entries[self.cursor])

    def scrub_labels(self) -> dict[str, str]:
        return {
            "scrub": t("回看", "replay"),
            "peak": t("峰值", "peak"),
            "peak_note": t("峰值 = KV 使用率最高的一步", "peak = the step with the highest KV usage"),
            "step": t("步", "step"),
            "follow": t("跟随最新", "follow"),
            "of": t("共", "of"),
            "live": t("运行中", "running"),
            "ended": t("运行已结束", "run ended"),
            "pinned": t("已固定", "pinned"),
        }


def link_scrub(*views: ScrubbableView) -> tuple[ScrubbableView, ...]:
    """Make scrubbable views of one engine move together: when the learner moves one view's slider
    (or presses "follow"), the others show the same engine step (their kept step nearest it). Each
    view keeps its own history, so the positions differ; the engine step is what is shared."""
    moving = [False]

    def follow_from(source: ScrubbableView):
        def on_change(change: dict) -> None:
            if moving[0] or source._syncing:
                return                        # an engine update, or a move this function made
            moving[0] = True
            try:
                for view in views:
                    if view is source:
                        continue
                    if not source.pinned:
                        view.follow()
                    elif 0 <= source.cursor < len(source.history_steps):
                        view.show_step(source.history_steps[source.cursor])
            finally:
                moving[0] = False
        source.observe(on_change, names=["cursor", "pinned"])

    for view in views:
        follow_from(view)
    return views
