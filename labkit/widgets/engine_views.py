"""``EngineViews``: the live views of one engine, laid out together.

::

    ┌──────────── BlockMap ────────────┬─ MemoryGauge ─┐
    ├────────────────── BatchTimeline ─────────────────┤
    ├──────── AcceptanceView ──────────┬─ LatencyView ─┤
    └────────────────── TokenStream ───────────────────┘

Each view subscribes itself; this container only places them and forwards ``flush``,
``detach`` and ``close``. Pick views with ``include=("block_map", "timeline", ...)``.
"""

from __future__ import annotations

import ipywidgets as widgets

from labkit.events import EventBus, hooks_of
from labkit.widgets.acceptance_view import AcceptanceView
from labkit.widgets.base import LiveView
from labkit.widgets.batch_timeline import BatchTimeline
from labkit.widgets.block_map import BlockMap
from labkit.widgets.detokenizer import Detokenize
from labkit.widgets.latency_view import LatencyView
from labkit.widgets.memory_gauge import MemoryGauge
from labkit.widgets.token_stream import TokenStream

ALL_VIEWS = ("block_map", "memory", "timeline", "acceptance", "latency", "tokens")
_ROWS = (("block_map", "memory"), ("timeline",), ("acceptance", "latency"), ("tokens",))
_WEIGHTS = {"block_map": 2, "memory": 1, "acceptance": 2, "latency": 1}


class EngineViews(widgets.VBox):
    """All live views of an engine: ``EngineViews(engine)`` or ``EngineViews(hooks=bus)``."""

    def __init__(self, engine: object | None = None, *, hooks: EventBus | None = None,
                 include: tuple[str, ...] = ALL_VIEWS, detokenize: Detokenize | None = None,
                 c: float | None = None, **kwargs) -> None:
        unknown = set(include) - set(ALL_VIEWS)
        if unknown:
            raise ValueError(f"include: unknown views {sorted(unknown)}; choose from {ALL_VIEWS}")
        bus = hooks_of(engine, hooks)
        self.views: dict[str, LiveView] = {name: _make(name, engine, bus, detokenize, c) for name in include}
        for name, view in self.views.items():
            setattr(self, name, view)   # views.block_map, views.timeline, ...
        super().__init__(children=self._rows(), **kwargs)

    def _rows(self) -> list[widgets.HBox]:
        rows = []
        for names in _ROWS:
            present = [name for name in names if name in self.views]
            for name in present:
                self.views[name].layout = widgets.Layout(flex=f"{_WEIGHTS.get(name, 1)} 1 0%", min_width="320px")
            if present:
                row = [self.views[name] for name in present]
                rows.append(widgets.HBox(row, layout=widgets.Layout(flex_flow="row wrap", width="100%")))
        return rows

    def flush(self) -> None:
        for view in self.views.values():
            view.flush()

    def detach(self) -> None:
        for view in self.views.values():
            view.detach()

    def close(self) -> None:
        for view in getattr(self, "views", {}).values():
            view.close()
        for row in list(self.children):
            row.close()
        super().close()


def _make(name: str, engine: object | None, bus: EventBus, detokenize: Detokenize | None,
          c: float | None) -> LiveView:
    if name == "tokens":
        return TokenStream(engine, hooks=bus, detokenize=detokenize)
    if name == "acceptance":
        return AcceptanceView(hooks=bus, c=c)
    factory = {"block_map": BlockMap, "memory": MemoryGauge, "timeline": BatchTimeline,
               "latency": LatencyView}[name]
    return factory(hooks=bus)
