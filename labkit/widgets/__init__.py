"""Live views of the engine, fed only by its events (``labkit.events``).

``View(engine)`` or ``View(hooks=bus)`` subscribes; ``flush()`` pushes the latest state,
``detach()`` stops listening, ``close()`` removes the widget. ``EngineViews(engine)`` shows them all;
``ControlPanel`` drives an engine (Run / Pause / Step / Reset) and ``EngineRoom`` puts both together.
"""

from labkit.events import TokensAppended
from labkit.widgets.acceptance_view import AcceptanceView, leviathan_speedup
from labkit.widgets.batch_timeline import BatchTimeline
from labkit.widgets.block_map import BlockMap
from labkit.widgets.control_panel import ControlPanel
from labkit.widgets.dashboard import EngineRoom
from labkit.widgets.engine_views import EngineViews
from labkit.widgets.history import link_scrub
from labkit.widgets.latency_view import LatencyView
from labkit.widgets.memory_gauge import MemoryGauge
from labkit.widgets.palette import STATE_COLORS, request_color
from labkit.widgets.panel_settings import PanelSettings
from labkit.widgets.token_stream import TokenStream

__all__ = [
    "AcceptanceView", "BatchTimeline", "BlockMap", "ControlPanel", "EngineRoom", "EngineViews",
    "LatencyView", "MemoryGauge", "PanelSettings", "STATE_COLORS", "TokenStream", "TokensAppended",
    "leviathan_speedup", "link_scrub", "request_color",
]
