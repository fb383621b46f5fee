"""``EngineRoom``: the control panel above every live view of the engine it drives.

::

    ┌──────────────────────── ControlPanel ────────────────────────┐
    ├──────────────────────── EngineViews ─────────────────────────┤
    │  BlockMap · MemoryGauge / BatchTimeline / AcceptanceView ·    │
    │  LatencyView / TokenStream                                   │
    └──────────────────────────────────────────────────────────────┘

A Reset builds a new engine; the room then closes the old views (their history belongs to the old
engine) and shows fresh ones subscribed to the new engine's hooks. ``labs/dashboards/engine_room.ipynb``
is this widget served by Voila (``make dashboard``).

The speculative panel appears only when speculation is on (a plain engine never verifies a draft).
Its measured speed-up needs a baseline TPOT: the same workload on the same engine without speculation. The room keeps the mean TPOT of every plain run it showed, keyed by its settings
with speculation switched off, and hands it to the next speculative run on those settings.
"""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets

from labkit.events import RequestFinished
from labkit.i18n import t
from labkit.widgets.control_panel import ControlPanel, close_tree
from labkit.widgets.engine_views import ALL_VIEWS, EngineViews
from labkit.widgets.panel_settings import PanelSettings, fast_mode

FAST_TIMELINE_WINDOW = 48   # steps: a fast-mode workload fills the timeline instead of a sliver of it


def baseline_settings(settings: PanelSettings) -> PanelSettings:
    """``settings`` with speculation off: the plain run a speculative run is measured against."""
    return dataclasses.replace(settings, spec_method="none", num_speculative_tokens=PanelSettings.num_speculative_tokens)


class MeanTpot:
    """Mean TPOT of the finished requests of the plain runs on one setting (None before any)."""

    def __init__(self) -> None:
        self.total_s, self.count = 0.0, 0

    def add(self, event: RequestFinished) -> None:
        if event.timings.tpot_s is not None:
            self.total_s += event.timings.tpot_s
            self.count += 1

    @property
    def value(self) -> float | None:
        return self.total_s / self.count if self.count else None


class EngineRoom(widgets.VBox):
    """``EngineRoom()``: a ControlPanel and the chosen views (all by default) over one engine."""

    def __init__(self, settings: PanelSettings | None = None, *, include: tuple[str, ...] = ALL_VIEWS,
                 timeline_window: int | None = None, **kwargs) -> None:
        self._include = include
        self._timeline_window = timeline_window or (FAST_TIMELINE_WINDOW if fast_mode() else None)
        self.views: EngineViews | None = None
        self._plain_tpot: dict[PanelSettings, MeanTpot] = {}
        self._slot = widgets.VBox(layout=widgets.Layout(width="100%"))
        self.panel = ControlPanel(settings)
        super().__init__(children=[self.panel, self._slot], **kwargs)
        self.add_class("lk-engine-room")
        self.panel.on_engine_change(self._show_views)
        if self.views is None:   # the first engine could not be built: the panel says why
            note = t("（引擎未就绪，视图将在重置成功后出现）", "(no engine yet: the views appear after a successful Reset)")
            self._slot.children = [widgets.HTML(note)]

    def _show_views(self, engine) -> None:
        include = self._include
        if self.panel.settings.spec_method == "none":    # nothing to draw or measure: hide the panel
            include = tuple(name for name in include if name != "acceptance")
        old, self.views = self.views, EngineViews(engine, include=include)
        if self._timeline_window and "timeline" in self.views.views:
            self.views.timeline.window = self._timeline_window
        self._slot.children = [self.views]
        self._link_baseline(engine)
        if old is not None:
            old.close()

    def _link_baseline(self, engine) -> None:
        settings = self.panel.settings
        key = baseline_settings(settings)
        if settings.spec_method == "none":
            engine.hooks.subscribe(self._plain_tpot.setdefault(key, MeanTpot()).add, RequestFinished)
            return
        plain = self._plain_tpot.get(key)
        if plain is not None and plain.value is not None and "acceptance" in self.views.views:
            self.views.acceptance.baseline_tpot_s = plain.value

    def baseline_tpot_s(self, settings: PanelSettings | None = None) -> float | None:
        """The mean TPOT of the plain runs on ``settings`` (default: the panel's), speculation off."""
        plain = self._plain_tpot.get(baseline_settings(settings or self.panel.settings))
        return None if plain is None else plain.value

    def close(self) -> None:
        """Stop the run, abort its requests, and remove the panel and views from the page."""
        self.panel.close()
        if self.views is not None:
            self.views.close()
        close_tree(self)
