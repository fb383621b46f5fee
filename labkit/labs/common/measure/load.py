"""The machine a measurement ran on: how busy it was (:func:`machine_load`), its cores and its CPU."""

from __future__ import annotations

import os
import statistics
import time


def machine_load() -> float | None:
    """How many programs want the CPU: the larger of the 1-minute load average and (on Linux) the
    tasks runnable right now (``/proc/loadavg``, this one included). The average lags a minute
    behind a program that just started; the instant count does not. None where the OS has neither."""
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        average = None
    runnable = _runnable_now()
    known = [x for x in (average, runnable) if x is not None]
    return max(known) if known else None


def _runnable_now(samples: int = 5, gap_s: float = 0.01) -> float | None:
    """The median of a few instant counts of runnable tasks: a single sample catches passing blips."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                counts.append(float(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    return statistics.median(counts)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def describe_machine() -> str:
    from labkit.kernels.cpu_features import describe_cpu

    try:
        return describe_cpu()
    except Exception:           # an unreadable /proc must not stop a measurement
        return "unknown CPU"
