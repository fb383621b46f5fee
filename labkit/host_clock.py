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


class HostTimer:
    """Host (CPU) seconds of one step, phase by phase, read from ``now``::

        timer = HostTimer()
        with timer.phase("schedule"):
            decision = scheduler.schedule(now)
        timer.seconds["schedule"]          # 0.0 for a phase that did not run

    Phases follow one another (they do not nest). ``on_phase(seconds)``, if given, hears each phase as it
    ends: with async scheduling the simulator's clock moves with the host's work as it happens."""

    PHASES = ("schedule", "sample", "update", "propose")

    def __init__(self, on_phase: Callable[[float], None] | None = None) -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self._on_phase = on_phase
        self._name, self._start = "", 0.0

    def phase(self, name: str) -> HostTimer:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._start = now()

    def __exit__(self, exc_type, exc, tb) -> None:
        seconds = now() - self._start
        self.seconds[self._name] = seconds
        if self._on_phase is not None and exc_type is None:
            self._on_phase(seconds)
