"""Timed comparisons: arms run interleaved in rounds, one :class:`~labkit.labs.common.measure.verdict.Verdict`
per candidate against the baseline, recorded in the lab's results summary.

- Arms run interleaved in rounds, the order alternating (round 0: A B, round 1: B A, ...), so a
  slow spell of the machine falls on both arms; ``warmup`` whole rounds run first and are dropped.
- The clock (``clocks.cpu_clock`` unless one is passed) is recorded beside every number.
- A value is seconds per unit of work (``work`` gives the units, e.g. tokens) for
  ``quantity="time"``, or units per second for ``quantity="speed"``. The ratio is candidate over
  baseline of that quantity: from the per-arm minima (the least disturbed run), with the min–max of
  the per-round ratios (each round pairs the two arms' runs, adjacent in time).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.labs.common.measure.clocks import Clock, as_clock
from labkit.labs.common.measure.load import cores, describe_machine, machine_load
from labkit.labs.common.measure.verdict import DEFAULT_MARGIN, DEFAULT_MAX_SPREAD, Verdict, verdict_from_ratios

QUANTITIES = ("time", "speed")


@dataclass(frozen=True)
class Sample:
    """What an arm may return instead of a plain result: the seconds it measured itself (with
    ``cpu_clock()``, e.g. decode steps only, without the prefill), the units of work and the result."""

    seconds: float
    units: float = 1.0
    result: Any = None


@dataclass(frozen=True)
class ArmValues:
    """One arm's values over the kept rounds (``quantity``: seconds per unit, or units per second)."""

    name: str
    values: tuple[float, ...]
    seconds: tuple[float, ...]
    units: tuple[float, ...]

    @property
    def best(self) -> float:
        """The least disturbed round: the fastest (min time or max speed)."""
        return self._best

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """Slowest round's time per unit over the fastest's (1.0 = every round alike)."""
        per_unit = [s / u for s, u in zip(self.seconds, self.units) if u]
        if not per_unit or min(per_unit) <= 0:
            return 1.0
        return max(per_unit) / min(per_unit)

    _best: float = field(default=math.nan, repr=False)


@dataclass(frozen=True)
class Comparison:
    """Arms measured in interleaved rounds, and one verdict per candidate against the baseline."""

    arms: Mapping[str, ArmValues]
    baseline: str
    verdicts: Mapping[str, Verdict]
    order: tuple[tuple[str, ...], ...]        # the order arms ran in, per round (warm-up included)
    results: Mapping[str, Any]                # each arm's last result
    quantity: str
    clock: str
    load_before: float | None
    load_after: float | None
    cores: int
    cpu: str

    @property
    def loads(self) -> str:
        """The load averages before and after, as a caption prints them: "1.2 → 3.4" (? if unknown)."""
        return " → ".join("?" if x is None else f"{x:.1f}" for x in (self.load_before, self.load_after))

    @property
    def verdict(self) -> Verdict:
        if len(self.verdicts) != 1:
            raise ValueError(f"this comparison has {len(self.verdicts)} candidates; use verdicts[name]")
        return next(iter(self.verdicts.values()))

    @property
    def ratio(self) -> float:
        return self.verdict.ratio

    @property
    def ratio_min(self) -> float:
        return self.verdict.ratio_min

    @property
    def ratio_max(self) -> float:
        return self.verdict.ratio_max

    def as_entry(self, candidate: str | None = None) -> dict[str, Any]:
        v = self.verdicts[candidate] if candidate else self.verdict
        name = candidate or next(iter(self.verdicts))
        entry = v.as_entry()
        entry["arms"] = {n: {"values": list(a.values), "best": a.best, "median": a.median,
                             "seconds": list(a.seconds), "units": list(a.units)}
                         for n, a in self.arms.items() if n in (name, self.baseline)}
        entry["baseline"], entry["candidate"] = self.baseline, name
        return entry


def _run_arm(fn: Callable[[], Any], clock: Clock) -> tuple[float, float | None, Any]:
    t0 = clock()
    out = fn()
    elapsed = clock() - t0
    if isinstance(out, Sample):
        return out.seconds, out.units, out.result
    return elapsed, None, out


def compare(arms: Mapping[str, Callable[[], Any]], *, baseline: str, rounds: int, warmup: int = 1,
            clock: Clock | Callable[[], float] | None = None, quantity: str = "time",
            work: Callable[[str, Any], float] | None = None, margin: float = DEFAULT_MARGIN,
            max_spread: float = DEFAULT_MAX_SPREAD, id: str = "", claim: tuple[str, str] = ("", ""),
            lab: str | None = None, progress: bool = False, device: Any = None,
            load: Callable[[], float | None] = machine_load) -> Comparison:
    """Measure ``arms`` (name → zero-argument callable doing one unit of the compared work) in
    ``rounds`` interleaved rounds after ``warmup`` dropped ones; a verdict for every arm but
    ``baseline``. Time comes from the clock around the call, or from a returned :class:`Sample`;
    units of work from ``work(name, result)`` or the Sample (default 1). With ``lab`` set, every
    verdict is recorded in that lab's results summary (``record_verdict``)."""
    if baseline not in arms:
        raise ValueError(f"baseline must name one of the arms {list(arms)}, got {baseline!r}")
    if len(arms) < 2:
        raise ValueError(f"arms must hold a baseline and at least one candidate, got {list(arms)}")
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"rounds must be an integer >= 2 (a spread needs two rounds), got {rounds!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity must be one of {QUANTITIES}, got {quantity!r}")
    clk = as_clock(clock, device)
    names = list(arms)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    units: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, Any] = {}
    order: list[tuple[str, ...]] = []
    bar = _bar(progress, (warmup + rounds) * len(names), claim, id)
    load_before = load()
    for r in range(warmup + rounds):
        this = tuple(names if r % 2 == 0 else reversed(names))
        order.append(this)
        for name in this:
            if bar is not None:
                bar.set_postfix_str(name)
            s, u, out = _run_arm(arms[name], clk)
            if u is None:
                u = float(work(name, out)) if work is not None else 1.0
            if r >= warmup:
                seconds[name].append(float(s))
                units[name].append(float(u))
            results[name] = out
            if bar is not None:
                bar.update(1)
    load_after = load()
    if bar is not None:
        bar.close()
    for name in names:
        if any(u <= 0 for u in units[name]) or any(s <= 0 for s in seconds[name]):
            raise ValueError(f"arm {name!r} measured no time or no work in a round "
                             f"(seconds {seconds[name]}, units {units[name]}): it cannot be compared")
    arm_values = {n: _arm_values(n, seconds[n], units[n], quantity) for n in names}
    loads = [x for x in (load_before, load_after) if x is not None]
    n_cores, cpu = cores(), describe_machine()
    verdicts = {}
    base = arm_values[baseline]
    for name in names:
        if name == baseline:
            continue
        cand = arm_values[name]
        per_round = [c / b for c, b in zip(cand.values, base.values)]
        verdicts[name] = verdict_from_ratios(
            per_round, margin=margin, ratio=cand.best / base.best, load=max(loads) if loads else None,
            cores=n_cores, spread=max(cand.spread, base.spread), max_spread=max_spread,
            id=id if len(names) == 2 else f"{id}/{name}" if id else name, claim=claim, quantity=quantity,
            clock=clk.name, load_before=load_before, load_after=load_after, cpu=cpu)
    comparison = Comparison(arm_values, baseline, verdicts, tuple(order), results, quantity, clk.name,
                            load_before, load_after, n_cores, cpu)
    if lab is not None:
        for name in verdicts:
            record_verdict(lab, comparison, candidate=name)
    return comparison


def _arm_values(name: str, seconds: list[float], units: list[float], quantity: str) -> ArmValues:
    if quantity == "time":
        values = [s / u for s, u in zip(seconds, units)]
        best = min(values)
    else:
        values = [u / s for s, u in zip(seconds, units)]
        best = max(values)
    return ArmValues(name, tuple(values), tuple(seconds), tuple(units), best)


def _bar(progress: bool, total: int, claim: tuple[str, str], id: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    from labkit.i18n import t

    what = t(claim[0], claim[1]) or id or t("对比", "comparison")
    return tqdm(total=total, desc=t(f"测量：{what}", f"measuring: {what}"), unit=t("次", "run"), leave=False)


# ----------------------------------------------------------------------------- the lab report

def record_verdict(lab: str, measured: Comparison | Verdict, *, candidate: str | None = None,
                   key: str | None = None, **extra) -> Any:
    """Store a verdict (with its numbers, clock, load and CPU; for a Comparison also each arm's
    values) under ``verdicts[id]`` of the lab's results summary. Returns the file written or None."""
    from labkit.report import results

    if isinstance(measured, Comparison):
        entry = measured.as_entry(candidate)
    elif isinstance(measured, Verdict):
        entry = measured.as_entry()
    else:
        raise TypeError(f"measured must be a Comparison or a Verdict, got {type(measured).__name__}")
    entry.update(extra)
    key = key or entry.get("id")
    if not key:
        raise ValueError("a recorded verdict needs an id: pass id= to compare/Verdict, or key=")
    return results.record(lab, "verdicts", key, entry)
