"""The clock the engine's host-path timers read: scheduling, sampling, applying, proposing, waiting.

``now`` is ``time.perf_counter`` unless a measurement swaps it in (:func:`use`):
``labkit.labs.common.measure.clock_override`` does, so a test can run the engine's own host path on a
work clock with contention laid over it (tests/labs/noise.py). The engine calls ``host_clock.now()``:
one module attribute read, as ``time.perf_counter()`` is, so the hook costs nothing per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

now: Callable[[], float] = time.perf_counter


def use(read: Callable[[], float] | None = None) -> None:
    """Make ``now`` read ``read`` (seconds); None puts ``time.perf_counter`` back."""
    global now
    now = time.perf_counter if read is None else read
