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
"""

from __future__ import annotations

import ipywidgets as widgets

from labkit.i18n import t
from labkit.widgets.control_panel import ControlPanel, close_tree
from labkit.widgets.engine_views import ALL_VIEWS, EngineViews
from labkit.widgets.panel_settings import PanelSettings, fast_mode

FAST_TIMELINE_WINDOW = 48   # steps: a fast-mode workload fills the timeline instead of a sliver of it


class EngineRoom(widgets.VBox):
    """``EngineRoom()``: a ControlPanel and the chosen views (all by default) over one engine."""

    def __init__(self, settings: PanelSettings | None = None, *, include: tuple[str, ...] = ALL_VIEWS,
                 timeline_window: int | None = None, **kwargs) -> None:
        self._include = include
        self._timeline_window = timeline_window or (FAST_TIMELINE_WINDOW if fast_mode() else None)
        self.views: EngineViews | None = None
        self._slot = widgets.VBox(layout=widgets.Layout(width="100%"))
        self.panel = ControlPanel(settings)
        super().__init__(children=[self.panel, self._slot], **kwargs)
        self.add_class("lk-engine-room")
        self.panel.on_engine_change(self._show_views)
        if self.views is None:   # the first engine could not be built: the panel says why
            note = t("（引擎未就绪，视图将在重置成功后出现）", "(no engine yet: the views appear after a successful Reset)")
            self._slot.children = [widgets.HTML(note)]

    def _show_views(self, engine) -> None:
        old, self.views = self.views, EngineViews(engine, include=self._include)
        if self._timeline_window and "timeline" in self.views.views:
            self.views.timeline.window = self._timeline_window
        self._slot.children = [self.views]
        if old is not None:
            old.close()

    def close(self) -> None:
        """Stop the run, abort its requests, and remove the panel and views from the page."""
        self.panel.close()
        if self.views is not None:
            self.views.close()
        close_tree(self)
