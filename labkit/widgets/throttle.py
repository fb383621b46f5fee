"""Push widget state to the browser at most ~10 times a second, never losing the last state.

An engine step can take well under a millisecond; sending the block map to the browser on every
step would make drawing, not inference, the bottleneck. Views therefore accumulate every event
and call ``Throttle.mark_dirty()``; the throttle pushes

* at once, when the last push is at least ``interval_s`` old (leading edge), and
* once more ``interval_s`` after the last push when changes arrived in between (trailing edge),
  so the picture always ends on the latest state.

The trailing push runs on the kernel's asyncio loop (the one running when the view was built).
In a notebook cell that steps the engine synchronously the loop is busy, so that push lands when
the cell ends; with no loop (plain scripts, tests) only ``push_now()`` (a view's ``flush()``)
sends the final state.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Callable, ContextManager


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Throttle:
    """Rate-limits ``push`` to one call per ``interval_s`` (see module docstring)."""

    def __init__(self, push: Callable[[], None], interval_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic,
                 lock: ContextManager | None = None) -> None:
        self.interval_s = interval_s
        self.num_pushes = 0
        self._push = push
        self._clock = clock
        self._last = -math.inf
        self._dirty = False
        self._loop = _running_loop()
        self._trailing_armed = False
        self._lock = lock if lock is not None else contextlib.nullcontext()

    @property
    def dirty(self) -> bool:
        """True when state changed since the last push."""
        return self._dirty

    def mark_dirty(self) -> None:
        """Record a change; push now if the window allows, else arm the trailing push."""
        self._dirty = True
        wait = self._last + self.interval_s - self._clock()
        if wait <= 0:
            self.push_now()
        else:
            self._arm_trailing(wait)

    def push_now(self) -> None:
        """Push unconditionally (the final state after a run, or on request)."""
        self._dirty = False
        self._last = self._clock()
        self.num_pushes += 1
        self._push()

    def stop(self) -> None:
        """Forget the loop: no trailing push will fire after this."""
        self._loop = None

    def _arm_trailing(self, wait: float) -> None:
        loop = self._loop
        if loop is None or self._trailing_armed:
            return
        self._trailing_armed = True
        try:   # thread-safe: events may arrive from an engine running in a background thread
            loop.call_soon_threadsafe(loop.call_later, wait, self._fire_trailing)
        except RuntimeError:   # the loop has closed (e.g. the asyncio.run that built the view ended)
            self._loop = None
            self._trailing_armed = False

    def _fire_trailing(self) -> None:
        with self._lock:   # the view's lock: events may be arriving on another thread right now
            self._trailing_armed = False
            if self._dirty and self._loop is not None:
                self.mark_dirty()   # pushes if the window is open, else waits for the rest of it
