"""Live views of the engine, fed only by its events (``labkit.hooks``; DESIGN §4).

``View(engine)`` or ``View(hooks=bus)`` subscribes; ``flush()`` pushes the latest state,
``detach()`` stops listening, ``close()`` removes the widget. ``EngineViews(engine)`` shows them all.
"""

from labkit.widgets.acceptance_view import AcceptanceView, leviathan_speedup
from labkit.widgets.batch_timeline import BatchTimeline
from labkit.widgets.block_map import BlockMap
from labkit.widgets.engine_views import EngineViews
from labkit.widgets.events import TokensAppended
from labkit.widgets.latency_view import LatencyView
from labkit.widgets.memory_gauge import MemoryGauge
from labkit.widgets.palette import STATE_COLORS, request_color
from labkit.widgets.token_stream import TokenStream

__all__ = [
    "AcceptanceView", "BatchTimeline", "BlockMap", "EngineViews", "LatencyView", "MemoryGauge",
    "STATE_COLORS", "TokenStream", "TokensAppended", "leviathan_speedup", "request_color",
]
