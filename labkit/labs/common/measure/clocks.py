"""The measuring clocks: which clock a lab's comparison reads, the threads it measures on, and the hook
tests use to inject contention (:func:`clock_override`, :class:`ContendedClock`).

- On a CPU the clock is the process CPU time (``time.process_time``): a busy neighbour's time slices do
  not count. On CUDA it is the wall clock after ``torch.cuda.synchronize()`` (the GPU's work is not CPU
  time). :func:`wall_clock` is for a comparison whose point is that threads overlap.
- Inside :func:`clock_override` every one of these (and the engine's host-path timers,
  ``labkit.host_clock``) reads the injected clock instead.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from labkit import host_clock


def measure_threads() -> int:
    """Torch threads for measurements: ``LABKIT_THREADS`` (a positive integer), default 1."""
    raw = os.environ.get("LABKIT_THREADS", "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"LABKIT_THREADS must be a positive integer, got {raw!r}")
    return n


@contextmanager
def measuring() -> Iterator[int]:
    """Run torch on ``measure_threads()`` threads inside the block; restored afterwards (also after
    an error). Yields the thread count."""
    import torch

    before = torch.get_num_threads()
    n = measure_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Clock:
    """A clock (seconds, any origin) and the words that say which one it is."""

    name: str
    read: Callable[[], float]

    def __call__(self) -> float:
        return self.read()


_override: list[Clock] = []


def _cuda_wall() -> float:
    import torch

    torch.cuda.synchronize()
    return time.perf_counter()


def cpu_clock(device: Any = None) -> Clock:
    """The measuring clock: the injected one inside :func:`clock_override`; on CUDA the wall clock
    after synchronize; else the process CPU time."""
    if _override:
        return _override[-1]
    if getattr(device, "type", device) == "cuda":
        return Clock("wall clock after torch.cuda.synchronize()", _cuda_wall)
    return Clock("CPU time (time.process_time)", time.process_time)


def wall_clock(name: str = "wall clock (time.perf_counter)") -> Clock:
    """The wall clock, for a comparison whose point is that threads overlap (CPU time would add
    them up); inside :func:`clock_override` the injected clock, as for :func:`cpu_clock`, so noise
    tests reach these measurements too."""
    if _override:
        return _override[-1]
    return Clock(name, time.perf_counter)


def as_clock(clock: Clock | Callable[[], float] | None, device: Any = None) -> Clock:
    if clock is None:
        return cpu_clock(device)
    if isinstance(clock, Clock):
        return clock
    if not callable(clock):
        raise TypeError(f"clock must be a Clock or a callable returning seconds, got {clock!r}")
    return Clock(getattr(clock, "name", None) or getattr(clock, "__name__", "injected clock"), clock)


@contextmanager
def clock_override(clock: Clock | Callable[[], float]) -> Iterator[Clock]:
    """Every ``cpu_clock()`` and ``wall_clock()`` (so every lab measurement) and the engine's host-path
    timers (``labkit.host_clock``) inside the block read ``clock``: the hook tests use to inject
    contention into the labs' own code paths."""
    c = as_clock(clock)
    _override.append(c)
    host_clock.use(c.read)
    try:
        yield c
    finally:
        _override.remove(c)
        host_clock.use(_override[-1].read if _override else None)


class ContendedClock:
    """A clock slowed by contention: time passes ``factor`` times faster than on ``base`` during
    random stretches ("episodes"), as when other programs share the cores. Each episode lasts
    ``episode`` seconds of base time (uniform between the two bounds); with probability ``p`` it is
    slowed by a factor drawn uniformly from ``slow``, else it runs at 1×."""

    def __init__(self, base: Callable[[], float], seed: int, *, p: float = 0.5,
                 slow: tuple[float, float] = (1.0, 10.0), episode: tuple[float, float] = (0.01, 0.1)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p!r}")
        if not 1.0 <= slow[0] <= slow[1]:
            raise ValueError(f"slow must be (low, high) with 1 <= low <= high, got {slow!r}")
        if not 0.0 < episode[0] <= episode[1]:
            raise ValueError(f"episode must be (low, high) seconds with 0 < low <= high, got {episode!r}")
        self.base, self.p, self.slow, self.episode = base, p, slow, episode
        self.rng = random.Random(seed)
        self.name = f"contended clock (seed {seed}, p={p}, {slow[0]:g}–{slow[1]:g}×)"
        self._last = base()
        self._reading = 0.0
        self._new_episode(self._last)

    def _new_episode(self, start: float) -> None:
        self._end = start + self.rng.uniform(*self.episode)
        self._factor = self.rng.uniform(*self.slow) if self.rng.random() < self.p else 1.0

    def __call__(self) -> float:
        now = self.base()
        while self._end < now:
            self._reading += (self._end - self._last) * self._factor
            self._last = self._end
            self._new_episode(self._end)
        self._reading += (now - self._last) * self._factor
        self._last = now
        return self._reading
