"""One palette for every labkit view: state colours and a stable colour per request id.

The same request must look the same in the block map, the batch timeline and the token stream,
in every lab, so a request's colour is a pure function of its id (no registry, no call order).
State colours follow one meaning across views: green is useful work, red is waste, grey is idle
or free.
"""

from __future__ import annotations

import colorsys
import re
import zlib
from typing import Iterable

STATE_COLORS: dict[str, str] = {
    # what a batch slot does in a step
    "prefill": "#4C78A8",
    "decode": "#72B7B2",
    "verify": "#F58518",
    "idle": "#BAB0AC",
    # KV memory
    "free": "#EEEEEE",
    "cached": "#B279A2",
    "used": "#54A24B",
    "reserved_unused": "#EECA3B",
    "internal_frag": "#E45756",
    "external_frag": "#9D755D",
    # speculative decoding
    "accepted": "#54A24B",
    "rejected": "#E45756",
    "predicted": "#F58518",
    # chart furniture
    "ink": "#333333",
    "grid": "#DDDDDD",
}

_GOLDEN = 0.618033988749895
_HUE_START = 0.6   # request 0 starts blue, away from the reds that mean waste
_TRAILING_INT = re.compile(r"(\d+)$")


def request_color(request_id: str) -> str:
    """A stable ``#rrggbb`` for ``request_id``.

    Ids ending in a number (``"7"``, ``"req-7"``) step round the hue circle by the golden ratio,
    so consecutive requests get far-apart hues; other ids hash (crc32, stable across runs).
    """
    match = _TRAILING_INT.search(request_id)
    seed = int(match.group(1)) if match else zlib.crc32(request_id.encode())
    hue = (_HUE_START + seed * _GOLDEN) % 1.0
    lightness = (0.45, 0.58, 0.70)[(seed // 7) % 3]   # vary lightness too: fewer near-twins
    r, g, b = colorsys.hls_to_rgb(hue, lightness, 0.62)
    return "#{:02X}{:02X}{:02X}".format(round(r * 255), round(g * 255), round(b * 255))


def colors_for(request_ids: Iterable[str | None]) -> dict[str, str]:
    """``{request_id: colour}`` for the ids a view is about to draw (``None`` = free, skipped)."""
    return {rid: request_color(rid) for rid in set(request_ids) if rid is not None}
